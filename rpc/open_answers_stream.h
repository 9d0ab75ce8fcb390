// The messages of one ps connection as its RPC system reads them, counting
// the answers the peer has not released.
//
// Cap'n Proto keeps each call's answer (its results message and its entry
// in the answer table) until the caller sends Finish, which a client sends
// once it drops the response. A peer that keeps its responses makes the ps
// keep every answer: some 10 KB each, and, spread among the chunks the ps
// allocates and frees, a heap that cannot shrink (a peer keeping 8000
// pushes grew a ps to 3.5 GB). Neither the queued-replies gate nor the flow
// limit sees them: the replies were written and the calls returned. This
// stream counts Call and Bootstrap messages against Finish messages as it
// reads them, and ends the connection (a failed read, which the RPC system
// takes for a broken connection and the ps logs) once more than
// `most_open` are open.
//
//   OpenAnswersStream messages(*socket, 256);
//   capnp::TwoPartyVatNetwork network(messages, Side::SERVER, options);
#pragma once

#include <capnp/serialize-async.h>
#include <kj/async-io.h>

#include <cstddef>

namespace traind {

class OpenAnswersStream final : public capnp::MessageStream {
 public:
  OpenAnswersStream(kj::AsyncIoStream& stream, size_t most_open)
      : inner_(stream), most_open_(most_open) {}

  kj::Promise<kj::Maybe<capnp::MessageReaderAndFds>> tryReadMessage(
      kj::ArrayPtr<kj::AutoCloseFd> fd_space, capnp::ReaderOptions options,
      kj::ArrayPtr<capnp::word> scratch_space) override;
  kj::Promise<void> writeMessage(
      kj::ArrayPtr<const int> fds,
      kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments) override;
  kj::Promise<void> writeMessages(
      kj::ArrayPtr<kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>>> messages) override;
  kj::Maybe<int> getSendBufferSize() override { return inner_.getSendBufferSize(); }
  kj::Promise<void> end() override { return inner_.end(); }

 private:
  // Counts one message read; throws past most_open_.
  void count(capnp::MessageReader& message);

  capnp::AsyncIoMessageStream inner_;
  size_t most_open_;
  size_t open_ = 0;  // calls (and bootstraps) read whose Finish has not come yet
};

}  // namespace traind
