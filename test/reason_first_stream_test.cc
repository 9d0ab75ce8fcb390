// ReasonFirstStream: a write that fails on a connection the peer closed waits
// for the reads, so that what the peer said before it closed is read first.
#include "rpc/reason_first_stream.h"

#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <thread>

namespace traind {
namespace {

// This side of a socket pair whose peer wrote `words` and closed.
kj::Own<kj::AsyncIoStream> afterPeerSaid(kj::AsyncIoContext& io, const char* words) {
  int fds[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  REQUIRE(write(fds[1], words, std::strlen(words)) == ssize_t(std::strlen(words)));
  close(fds[1]);
  return io.lowLevelProvider->wrapSocketFd(fds[0], kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
}

TEST_CASE("a failed write waits until the reads have brought the peer's last words",
          "[reason_first_stream]") {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  ReasonFirstStream stream(afterPeerSaid(io, "the job is over"), io.provider->getTimer());
  const char call[] = "a call";
  kj::Promise<void> sent = stream.write(call, sizeof call);
  CHECK(!sent.poll(io.waitScope));  // failed, but held: nothing has been read

  char words[15];
  CHECK(stream.tryRead(words, sizeof words, sizeof words).wait(io.waitScope) == sizeof words);
  CHECK(std::string(words, sizeof words) == "the job is over");
  CHECK(!sent.poll(io.waitScope));
  CHECK(stream.tryRead(words, 1, 1).wait(io.waitScope) == 0);  // the end: the failure goes on
  REQUIRE(sent.poll(io.waitScope));
  CHECK_THROWS_WITH(sent.wait(io.waitScope), Catch::Contains("Broken pipe"));
}

// How long `sent` took to fail with "Broken pipe", by the clock itself
// (the loop's clock, Timer::now(), moves only when the loop polls or waits).
std::chrono::steady_clock::duration timeToFail(kj::Promise<void> sent, kj::WaitScope& wait_scope) {
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(sent.wait(wait_scope), Catch::Contains("Broken pipe"));
  return std::chrono::steady_clock::now() - start;
}

constexpr auto kGrace = std::chrono::seconds(ReasonFirstStream::kWriteFailureGrace / kj::SECONDS);

TEST_CASE("a failed write with no read to wait for fails after the grace",
          "[reason_first_stream]") {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  ReasonFirstStream stream(afterPeerSaid(io, "bye"), io.provider->getTimer());
  const char call[] = "a call";
  CHECK(timeToFail(stream.write(call, sizeof call), io.waitScope) >= kGrace);
}

TEST_CASE("a failed write waits the whole grace after the loop stood still (a paused process)",
          "[reason_first_stream]") {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  ReasonFirstStream stream(afterPeerSaid(io, "bye"), io.provider->getTimer());
  // The loop's clock moves only when it polls or waits for I/O: a process
  // that computed outside the loop, or was stopped there (SIGSTOP), for
  // longer than the grace comes back with its clock that far behind, and
  // its next write fails before the loop waits again.
  io.waitScope.poll();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const char call[] = "a call";
  CHECK(timeToFail(stream.write(call, sizeof call), io.waitScope) >= kGrace);
}

TEST_CASE("a grace that ran out while the process was stopped still lets the ready reads go first",
          "[reason_first_stream]") {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  int fds[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  ReasonFirstStream stream(
      io.lowLevelProvider->wrapSocketFd(fds[0], kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP),
      io.provider->getTimer());
  // A read waits on the socket, as an RPC connection's always does, and
  // takes several turns of the loop to read a message (Cap'n Proto reads a
  // header, then the segments): here a byte at a time.
  char words[3];
  bool words_read = false;
  kj::Promise<void> reading = stream.tryRead(words, 1, 1)
                                  .then([&](size_t) { return stream.tryRead(words + 1, 1, 1); })
                                  .then([&](size_t) { return stream.tryRead(words + 2, 1, 1); })
                                  .then([&](size_t read) {
                                    words_read = read == 1 && std::string(words, 3) == "bye";
                                    return stream.tryRead(words, 1, 1);
                                  })
                                  .ignoreResult()
                                  .eagerlyEvaluate(nullptr);
  io.waitScope.poll();
  // The peer says its last words and closes; this side's next write fails
  // at once, and the process stops (SIGSTOP; here a sleep in the loop)
  // before the loop has looked at the socket again, for longer than the
  // grace: when it goes on, the words and the grace's end come out of the
  // same wait for I/O.
  REQUIRE(write(fds[1], "bye", 3) == 3);
  close(fds[1]);
  const char call[] = "a call";
  bool failed_after_words = false;
  kj::Promise<void> sent = stream.write(call, sizeof call)
                               .catch_([&](kj::Exception&& e) -> kj::Promise<void> {
                                 failed_after_words = words_read;
                                 return kj::mv(e);
                               })
                               .eagerlyEvaluate(nullptr);
  kj::Promise<void> stopped = kj::evalLater([] {
                                std::this_thread::sleep_for(std::chrono::milliseconds(1500));
                              }).eagerlyEvaluate(nullptr);
  CHECK_THROWS_WITH(sent.wait(io.waitScope), Catch::Contains("Broken pipe"));
  CHECK(failed_after_words);
}

TEST_CASE("writes and reads pass through while the connection stands", "[reason_first_stream]") {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  auto pipe = io.provider->newTwoWayPipe();
  ReasonFirstStream stream(kj::mv(pipe.ends[0]), io.provider->getTimer());
  stream.write("ping", 4).wait(io.waitScope);
  char got[4];
  CHECK(pipe.ends[1]->tryRead(got, 4, 4).wait(io.waitScope) == 4);
  CHECK(std::string(got, 4) == "ping");
  pipe.ends[1]->write("pong", 4).wait(io.waitScope);
  CHECK(stream.tryRead(got, 4, 4).wait(io.waitScope) == 4);
  CHECK(std::string(got, 4) == "pong");
}

}  // namespace
}  // namespace traind
