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
// It keeps a copy of the last message written when that was short, which is
// where Cap'n Proto's reason for ending a connection goes (abort_reason.h).
//
// It also keeps a peer from queueing replies without end: with a backlog
// gate set, it reads nothing more from the peer while the replies waiting to
// be written exceed the gate, so a peer that sends calls but never reads the
// answers stalls on its own full socket instead of growing the ps's heap.
//
//   auto stream = kj::refcounted<PinningStream>(kj::mv(socket));
//   capnp::TwoPartyVatNetwork network(*stream, Side::SERVER, options);
//   stream->gateReadsOnBacklog([&network] { return network.getCurrentQueueCount() > 1024; });
//   ...answering a call:
//   results.adoptData(orphanage.referenceExternalData(bytes));
//   stream->holdUntilWritten(bytes.begin(), kj::mv(pin));
#pragma once

#include <kj/async-io.h>
#include <kj/function.h>
#include <kj/refcount.h>

#include <memory>
#include <utility>
#include <vector>

#include "rpc/forwarding_stream.h"

namespace traind {

class PinningStream final : public ForwardingStream, public kj::Refcounted {
 public:
  explicit PinningStream(kj::Own<kj::AsyncIoStream> inner) : ForwardingStream(kj::mv(inner)) {}

  // Keeps `hold` until a write whose pieces include one starting at `bytes`
  // completes, or until the stream goes. The same buffer may be held for
  // several replies: each written piece releases one hold.
  void holdUntilWritten(const kj::byte* bytes, std::shared_ptr<const void> hold);
  size_t holds() const { return holds_.size(); }

  // The last message written, when it was at most kShortWrite bytes, else
  // empty: a connection's Abort, once it has gone.
  static constexpr size_t kShortWrite = 4096;
  kj::ArrayPtr<const kj::byte> lastShortWrite() const {
    return kj::arrayPtr(last_short_write_.data(), last_short_write_.size());
  }

  // From now on a read waits while `backlogged()` (too many replies queued
  // for writing), and goes on as writes complete.
  void gateReadsOnBacklog(kj::Function<bool()> backlogged);
  // Called before whatever the gate asks (the connection's network) is
  // destroyed: the stream may outlive it. A read waiting at the gate fails.
  void liftReadGate();

  // Fails the read in progress, and every later one, with `reason`. Cap'n
  // Proto then ends the connection and, before it closes, writes the reason
  // to the peer as an Abort message: how a ps tells a worker that was not
  // listening (paused, or slow) why it went.
  void endReads(const kj::Exception& reason);
  bool readsEnded() const { return reads_ended_ != nullptr; }

  // The session's word that its peer said who it is (a worker's hello
  // taken). A ps with no room for a new connection ends the oldest that
  // has not (rpc/shard_server.h).
  void markIdentified() { identified_ = true; }
  bool identified() const { return identified_; }

  // The calls it watches; everything else passes straight through to the socket.
  kj::Promise<void> write(const void* buffer, size_t size) override;
  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override;
  kj::Promise<size_t> tryRead(void* buffer, size_t min_bytes, size_t max_bytes) override;

 private:
  // The holds of the buffers that start one of `pieces`, taken out of holds_.
  std::vector<std::shared_ptr<const void>> takeHolds(
      kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces);

  // A write of the inner stream, tracked so that a gated read can wait for
  // it to complete. The promise stays the caller's alone: dropping it
  // cancels the write, whose buffers the caller owns.
  kj::Promise<void> tracked(kj::Promise<void> write);
  // A read of the inner stream once the backlog gate lets it through.
  kj::Promise<size_t> gatedRead(void* buffer, size_t min_bytes, size_t max_bytes);
  void keepIfShort(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces);
  void wakeGatedRead();

  std::vector<std::pair<const kj::byte*, std::shared_ptr<const void>>> holds_;
  std::vector<kj::byte> last_short_write_;
  kj::Canceler reads_;                    // ended by endReads
  kj::Maybe<kj::Exception> reads_ended_;  // why, once they are
  kj::Maybe<kj::Function<bool()>> backlogged_;
  kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>> gated_read_;  // woken as a write completes
  bool writing_ = false;                                       // a write is in progress
  bool write_failed_ = false;  // a write failed: the peer is gone
  bool identified_ = false;
};

}  // namespace traind
