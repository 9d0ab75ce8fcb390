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

kj::Promise<void> PinningStream::write(const void* buffer, size_t size) {
  if (holds_.empty()) return inner_->write(buffer, size);
  const kj::ArrayPtr<const kj::byte> piece(static_cast<const kj::byte*>(buffer), size);
  std::vector<std::shared_ptr<const void>> written = takeHolds(kj::arrayPtr(&piece, 1));
  if (written.empty()) return inner_->write(buffer, size);
  return inner_->write(buffer, size).attach(std::move(written));
}

kj::Promise<void> PinningStream::write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) {
  if (holds_.empty()) return inner_->write(pieces);
  std::vector<std::shared_ptr<const void>> written = takeHolds(pieces);
  if (written.empty()) return inner_->write(pieces);
  return inner_->write(pieces).attach(std::move(written));
}

}  // namespace traind
