// OpenAnswersStream: the calls a peer keeps open are counted as they are
// read, and a connection past the most is ended.
#include "rpc/open_answers_stream.h"

#include <capnp/message.h>
#include <capnp/rpc.capnp.h>
#include <capnp/serialize-async.h>
#include <kj/async-io.h>

#include <catch2/catch.hpp>
#include <string>

namespace traind {
namespace {

// Writes one message whose root is an RPC message of the kind `init` makes.
template <typename Init>
void send(kj::AsyncIoStream& to, kj::WaitScope& scope, Init init) {
  capnp::MallocMessageBuilder message;
  init(message.initRoot<capnp::rpc::Message>());
  capnp::writeMessage(to, message).wait(scope);
}

void call(kj::AsyncIoStream& to, kj::WaitScope& scope, uint32_t question) {
  send(to, scope, [&](capnp::rpc::Message::Builder m) { m.initCall().setQuestionId(question); });
}

void finish(kj::AsyncIoStream& to, kj::WaitScope& scope, uint32_t question) {
  send(to, scope, [&](capnp::rpc::Message::Builder m) { m.initFinish().setQuestionId(question); });
}

}  // namespace

TEST_CASE("calls without their Finish end the connection past the most kept open",
          "[open_answers_stream]") {
  // A socket pair: its buffer takes the messages before they are read.
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::WaitScope& scope = io.waitScope;
  kj::TwoWayPipe pipe = io.provider->newTwoWayPipe();
  OpenAnswersStream stream(*pipe.ends[0], 3);
  auto read = [&] { return stream.tryReadMessage(nullptr, {}, nullptr).wait(scope); };

  send(*pipe.ends[1], scope, [](capnp::rpc::Message::Builder m) { m.initBootstrap(); });
  call(*pipe.ends[1], scope, 1);
  call(*pipe.ends[1], scope, 2);
  for (int i = 0; i < 3; ++i) CHECK(read() != nullptr);  // 3 open: the most
  // A Finish releases one: another call fits; other messages count nothing.
  finish(*pipe.ends[1], scope, 1);
  send(*pipe.ends[1], scope, [](capnp::rpc::Message::Builder m) { m.initRelease(); });
  call(*pipe.ends[1], scope, 3);
  for (int i = 0; i < 3; ++i) CHECK(read() != nullptr);
  call(*pipe.ends[1], scope, 4);
  CHECK_THROWS_WITH(read(), Catch::Contains("this connection holds more than 3 calls whose "
                                            "answers the peer has not released"));
}

TEST_CASE("a message that is no RPC message is left to the RPC system", "[open_answers_stream]") {
  // A socket pair: its buffer takes the messages before they are read.
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::WaitScope& scope = io.waitScope;
  kj::TwoWayPipe pipe = io.provider->newTwoWayPipe();
  OpenAnswersStream stream(*pipe.ends[0], 0);
  capnp::MallocMessageBuilder list;
  list.initRoot<capnp::AnyPointer>().initAs<capnp::List<uint32_t>>(2);
  capnp::writeMessage(*pipe.ends[1], list).wait(scope);
  // Read and passed on, not counted: the RPC system says what is wrong.
  CHECK(stream.tryReadMessage(nullptr, {}, nullptr).wait(scope) != nullptr);
  // A Finish with nothing open (the RPC system refuses it) leaves no credit.
  finish(*pipe.ends[1], scope, 9);
  CHECK(stream.tryReadMessage(nullptr, {}, nullptr).wait(scope) != nullptr);
  call(*pipe.ends[1], scope, 1);
  CHECK_THROWS(stream.tryReadMessage(nullptr, {}, nullptr).wait(scope));
}

}  // namespace traind
