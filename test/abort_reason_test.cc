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

TEST_CASE("a peer that left as it should is a departure", "[abort_reason]") {
  CHECK(isDeparture("Peer disconnected."));
  CHECK(isDeparture("RpcSystem was destroyed."));
  CHECK(!isDeparture("Message has too many segments."));
}

}  // namespace
}  // namespace traind
