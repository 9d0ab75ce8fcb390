// The socket of a worker's connection to a ps, on which the ps's reason for
// closing comes before this side's own failure to write.
//
// A ps that ends a connection writes its reason (an RPC Abort; for example
// that the job is over) and closes. A worker that did not read it in time
// (it was paused, or busy computing) may write into the closed connection
// first. That write fails, and Cap'n Proto 0.9.2 then ends the connection
// with "Broken pipe", cancelling the read that had the ps's words. This
// stream holds a failed write back until the reads end (the stream's end or
// an error), or kWriteFailureGrace passes and the reads the socket serves
// without waiting have run: the read of the Abort goes first, and its reason
// is the one every call fails with.
//
// `timer` is the event loop's, io.provider->getTimer() (rpc/deadline.h).
//
//   auto stream = kj::heap<ReasonFirstStream>(kj::mv(socket), timer);
//   capnp::TwoPartyVatNetwork network(*stream, Side::CLIENT, options);
#pragma once

#include <kj/async-io.h>
#include <kj/timer.h>

#include "rpc/forwarding_stream.h"

namespace traind {

class ReasonFirstStream final : public ForwardingStream {
 public:
  // At most this long a failed write waits for the reads to end, counted
  // from the failure (rpc/deadline.h: not from the loop's clock).
  static constexpr kj::Duration kWriteFailureGrace = 1 * kj::SECONDS;

  ReasonFirstStream(kj::Own<kj::AsyncIoStream> inner, kj::Timer& timer);

  // The calls it watches; everything else passes straight through to the socket.
  kj::Promise<void> write(const void* buffer, size_t size) override;
  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override;
  kj::Promise<size_t> tryRead(void* buffer, size_t min_bytes, size_t max_bytes) override;

 private:
  ReasonFirstStream(kj::Own<kj::AsyncIoStream> inner, kj::Timer& timer,
                    kj::PromiseFulfillerPair<void> reads_end);
  // `write`, whose failure waits for the reads to end.
  kj::Promise<void> heldOnFailure(kj::Promise<void> write);
  void readsEnded();

  kj::Timer& timer_;
  kj::ForkedPromise<void> reads_ended_;
  kj::Own<kj::PromiseFulfiller<void>> end_reads_;
};

}  // namespace traind
