// abortReason: the reason Cap'n Proto wrote to a peer before closing, read
// back from the bytes written (PinningStream keeps the last short message).
#include "rpc/abort_reason.h"

#include <capnp/message.h>
#include <capnp/rpc.capnp.h>
#include <capnp/serialize.h>

#include <catch2/catch.hpp>

namespace traind {
namespace {

// `message` as the socket gets it: the segment table, then the segments.
kj::Array<capnp::word> written(capnp::MessageBuilder& message) {
  return capnp::messageToFlatArray(message);
}

TEST_CASE("an Abort's reason is read back from the bytes written", "[abort_reason]") {
  capnp::MallocMessageBuilder message;
  message.initRoot<capnp::rpc::Message>().initAbort().setReason("Message is too large.");
  CHECK(abortReason(written(message).asBytes()) == "Message is too large.");
}

TEST_CASE("any other message or bytes give no reason", "[abort_reason]") {
  capnp::MallocMessageBuilder message;
  message.initRoot<capnp::rpc::Message>().initFinish().setQuestionId(3);
  CHECK(!abortReason(written(message).asBytes()));
  const kj::byte garbage[16] = {0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  CHECK(!abortReason(kj::arrayPtr(garbage, sizeof garbage)));
  CHECK(!abortReason(kj::arrayPtr(garbage, 5)));  // not whole words
  CHECK(!abortReason(nullptr));
}

TEST_CASE("a connection's end says who ended it and why", "[abort_reason]") {
  using Kind = ConnectionEnd::Kind;
  CHECK(connectionEnd(std::nullopt).kind == Kind::Departure);
  CHECK(connectionEnd("Peer disconnected.").kind == Kind::Departure);
  CHECK(connectionEnd("recv(fd, buffer, size, 0): Connection reset by peer").kind ==
        Kind::Departure);
  // A peer's Abort comes back out with Cap'n Proto's prefix.
  CHECK(connectionEnd("remote exception: RpcSystem was destroyed.").kind == Kind::Departure);
  const ConnectionEnd said = connectionEnd("remote exception: Message is too large.");
  CHECK(said.kind == Kind::PeersWords);
  CHECK(said.text == "Message is too large.");
  const ConnectionEnd dropped = connectionEnd(
      "expected segmentCount() < 512 [2955319054 < 512]; Message has too many segments.");
  CHECK(dropped.kind == Kind::Dropped);
  CHECK(dropped.text == "Message has too many segments.");
}

}  // namespace
}  // namespace traind
