// The socket of one ps connection as its RPC system writes to it, and the
// hook that tells when a pull reply's parameters have left the process.
//
// A pull reply references a pinned parameter chunk (Orphanage::
// referenceExternalData, ParameterShard::pinChunk) instead of copying it.
// Cap'n Proto then writes the chunk as one piece of the reply's write,
// straight from the pinned buffer, but says nothing of when that happens.
// This stream sees every write: a hold whose buffer starts one of the pieces
// is released when that write completes (the bytes are in the kernel's
// socket buffer). Holds whose reply is never written (a call cancelled after
// it was answered) go with the stream. The stream is refcounted: the
// connection's RPC system writes to it, and each capability served on it
// holds it too, since a call may still answer after the connection is gone.
//
//   auto stream = kj::refcounted<PinningStream>(kj::mv(socket));
//   capnp::TwoPartyVatNetwork network(*stream, Side::SERVER, options);
//   ...answering a call:
//   results.adoptData(orphanage.referenceExternalData(bytes));
//   stream->holdUntilWritten(bytes.begin(), kj::mv(pin));
#pragma once

#include <kj/async-io.h>
#include <kj/refcount.h>

#include <memory>
#include <utility>
#include <vector>

namespace traind {

class PinningStream final : public kj::AsyncIoStream, public kj::Refcounted {
 public:
  explicit PinningStream(kj::Own<kj::AsyncIoStream> inner) : inner_(kj::mv(inner)) {}

  // Keeps `hold` until a write whose pieces include one starting at `bytes`
  // completes, or until the stream goes. The same buffer may be held for
  // several replies: each written piece releases one hold.
  void holdUntilWritten(const kj::byte* bytes, std::shared_ptr<const void> hold);
  size_t holds() const { return holds_.size(); }

  // kj::AsyncIoStream: everything else passes straight through to the socket.
  kj::Promise<void> write(const void* buffer, size_t size) override;
  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override;
  kj::Promise<size_t> tryRead(void* buffer, size_t min_bytes, size_t max_bytes) override {
    return inner_->tryRead(buffer, min_bytes, max_bytes);
  }
  kj::Maybe<uint64_t> tryGetLength() override { return inner_->tryGetLength(); }
  kj::Promise<void> whenWriteDisconnected() override { return inner_->whenWriteDisconnected(); }
  void shutdownWrite() override { inner_->shutdownWrite(); }
  void abortRead() override { inner_->abortRead(); }
  void getsockopt(int level, int option, void* value, uint* length) override {
    inner_->getsockopt(level, option, value, length);
  }
  void setsockopt(int level, int option, const void* value, uint length) override {
    inner_->setsockopt(level, option, value, length);
  }
  void getsockname(struct sockaddr* addr, uint* length) override {
    inner_->getsockname(addr, length);
  }
  void getpeername(struct sockaddr* addr, uint* length) override {
    inner_->getpeername(addr, length);
  }
  kj::Maybe<int> getFd() const override { return inner_->getFd(); }

 private:
  // The holds of the buffers that start one of `pieces`, taken out of holds_.
  std::vector<std::shared_ptr<const void>> takeHolds(
      kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces);

  kj::Own<kj::AsyncIoStream> inner_;
  std::vector<std::pair<const kj::byte*, std::shared_ptr<const void>>> holds_;
};

}  // namespace traind
