#include "rpc/reason_first_stream.h"

#include "rpc/deadline.h"

namespace traind {

ReasonFirstStream::ReasonFirstStream(kj::Own<kj::AsyncIoStream> inner, kj::Timer& timer)
    : ReasonFirstStream(kj::mv(inner), timer, kj::newPromiseAndFulfiller<void>()) {}

ReasonFirstStream::ReasonFirstStream(kj::Own<kj::AsyncIoStream> inner, kj::Timer& timer,
                                     kj::PromiseFulfillerPair<void> reads_end)
    : ForwardingStream(kj::mv(inner)),
      timer_(timer),
      reads_ended_(reads_end.promise.fork()),
      end_reads_(kj::mv(reads_end.fulfiller)) {}

// kj's socket writes at once, and throws at once when that fails: evalNow
// makes every failure the promise's.
kj::Promise<void> ReasonFirstStream::write(const void* buffer, size_t size) {
  return heldOnFailure(kj::evalNow([&] { return inner_->write(buffer, size); }));
}

kj::Promise<void> ReasonFirstStream::write(
    kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) {
  return heldOnFailure(kj::evalNow([&] { return inner_->write(pieces); }));
}

kj::Promise<size_t> ReasonFirstStream::tryRead(void* buffer, size_t min_bytes, size_t max_bytes) {
  return inner_->tryRead(buffer, min_bytes, max_bytes)
      .then(
          [this, min_bytes](size_t read) {
            if (read < min_bytes) readsEnded();  // the end of the stream
            return read;
          },
          [this](kj::Exception&& e) -> size_t {
            readsEnded();
            kj::throwFatalException(kj::mv(e));
          });
}

kj::Promise<void> ReasonFirstStream::heldOnFailure(kj::Promise<void> write) {
  return write.catch_([this](kj::Exception&& e) {
    // Counted from now, not from the loop's clock: a write that fails as
    // the process resumes from SIGSTOP would otherwise find the grace over
    // and fail ahead of the read of the peer's words waiting in the socket.
    // Once over, the grace still lets every read the socket can serve
    // without waiting go first (evalLast: when nothing else is left to run).
    // A process stopped for longer than the grace just after the failure
    // finds the words and the grace's end in one wait for I/O, and reading a
    // message takes several turns of the loop.
    kj::Promise<void> grace =
        timer_.atTime(deadlineIn(kWriteFailureGrace)).then([] { return kj::evalLast([] {}); });
    return reads_ended_.addBranch()
        .exclusiveJoin(kj::mv(grace))
        .then([e = kj::mv(e)]() mutable -> kj::Promise<void> { return kj::mv(e); });
  });
}

void ReasonFirstStream::readsEnded() {
  if (end_reads_->isWaiting()) end_reads_->fulfill();
}

}  // namespace traind
