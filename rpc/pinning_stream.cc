#include "rpc/pinning_stream.h"

namespace traind {

void PinningStream::holdUntilWritten(const kj::byte* bytes, std::shared_ptr<const void> hold) {
  holds_.emplace_back(bytes, std::move(hold));
}

std::vector<std::shared_ptr<const void>> PinningStream::takeHolds(
    kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) {
  std::vector<std::shared_ptr<const void>> taken;
  // A handful of holds per connection (its pull replies not yet written).
  for (const kj::ArrayPtr<const kj::byte>& piece : pieces) {
    for (size_t i = 0; i < holds_.size(); ++i) {
      if (holds_[i].first != piece.begin()) continue;
      taken.push_back(std::move(holds_[i].second));
      holds_[i] = std::move(holds_.back());
      holds_.pop_back();
      break;
    }
  }
  return taken;
}

void PinningStream::gateReadsOnBacklog(kj::Function<bool()> backlogged) {
  backlogged_ = kj::mv(backlogged);
}

void PinningStream::liftReadGate() {
  backlogged_ = nullptr;
  gated_read_ = nullptr;
}

void PinningStream::endReads(const kj::Exception& reason) {
  if (reads_ended_ != nullptr) return;
  reads_ended_ = kj::cp(reason);
  reads_.cancel(reason);
}

kj::Promise<size_t> PinningStream::tryRead(void* buffer, size_t min_bytes, size_t max_bytes) {
  KJ_IF_MAYBE (ended, reads_ended_) return kj::cp(*ended);
  return reads_.wrap(gatedRead(buffer, min_bytes, max_bytes));
}

kj::Promise<size_t> PinningStream::gatedRead(void* buffer, size_t min_bytes, size_t max_bytes) {
  KJ_IF_MAYBE (backlogged, backlogged_) {
    // After a failed write Cap'n Proto writes no more, and its backlog stays:
    // the read goes on and finds the connection gone.
    if (!write_failed_ && (*backlogged)()) {
      // Cap'n Proto writes its queue one message at a time: wait for the one
      // in progress, or, between two, for the next turn of the event loop.
      kj::Promise<void> progress = kj::evalLater([] {});
      if (writing_) {
        auto woken = kj::newPromiseAndFulfiller<void>();
        gated_read_ = kj::mv(woken.fulfiller);
        progress = kj::mv(woken.promise);
      }
      return progress.then(
          [this, buffer, min_bytes, max_bytes] { return gatedRead(buffer, min_bytes, max_bytes); });
    }
  }
  return inner_->tryRead(buffer, min_bytes, max_bytes);
}

void PinningStream::wakeGatedRead() {
  KJ_IF_MAYBE (read, gated_read_) {
    (*read)->fulfill();
  }
  gated_read_ = nullptr;
}

kj::Promise<void> PinningStream::tracked(kj::Promise<void> write) {
  if (backlogged_ == nullptr) return write;
  writing_ = true;
  return write.then(
      [this] {
        writing_ = false;
        wakeGatedRead();
      },
      [this](kj::Exception&& e) {
        writing_ = false;
        write_failed_ = true;
        wakeGatedRead();
        kj::throwFatalException(kj::mv(e));
      });
}

void PinningStream::keepIfShort(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) {
  size_t size = 0;
  for (const kj::ArrayPtr<const kj::byte>& piece : pieces) size += piece.size();
  last_short_write_.clear();
  if (size > kShortWrite) return;
  for (const kj::ArrayPtr<const kj::byte>& piece : pieces)
    last_short_write_.insert(last_short_write_.end(), piece.begin(), piece.end());
}

kj::Promise<void> PinningStream::write(const void* buffer, size_t size) {
  const kj::ArrayPtr<const kj::byte> piece(static_cast<const kj::byte*>(buffer), size);
  keepIfShort(kj::arrayPtr(&piece, 1));
  if (holds_.empty()) return tracked(inner_->write(buffer, size));
  std::vector<std::shared_ptr<const void>> written = takeHolds(kj::arrayPtr(&piece, 1));
  if (written.empty()) return tracked(inner_->write(buffer, size));
  return tracked(inner_->write(buffer, size).attach(std::move(written)));
}

kj::Promise<void> PinningStream::write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) {
  keepIfShort(pieces);
  if (holds_.empty()) return tracked(inner_->write(pieces));
  std::vector<std::shared_ptr<const void>> written = takeHolds(pieces);
  if (written.empty()) return tracked(inner_->write(pieces));
  return tracked(inner_->write(pieces).attach(std::move(written)));
}

}  // namespace traind
