// GradientStream: a step's thread says which gradients are final, the
// event-loop thread's waits for chunks end then, and a failed step ends
// them with its error instead of leaving them waiting.
#include "daemon/gradient_stream.h"

#include <kj/async.h>

#include <catch2/catch.hpp>
#include <string>
#include <thread>

namespace traind {

TEST_CASE("waits for gradients end as another thread finishes them, last variables first") {
  kj::EventLoop loop;
  kj::WaitScope wait_scope(loop);
  GradientStream stream;
  stream.begin();
  kj::Promise<void> late = stream.ready(0);
  kj::Promise<void> early = stream.ready(5);
  kj::Promise<void> middle = stream.ready(2);
  CHECK_FALSE(early.poll(wait_scope));

  std::thread([&] { stream.finalFrom(3); }).join();
  CHECK(early.poll(wait_scope));
  early.wait(wait_scope);
  CHECK_FALSE(middle.poll(wait_scope));
  CHECK_FALSE(late.poll(wait_scope));
  CHECK(stream.ready(4).poll(wait_scope));  // already final: at once

  std::thread([&] { stream.finalFrom(0); }).join();
  middle.wait(wait_scope);
  late.wait(wait_scope);

  // The next step: nothing is final again.
  stream.begin();
  kj::Promise<void> next = stream.ready(7);
  CHECK_FALSE(next.poll(wait_scope));
  std::thread([&] { stream.finalFrom(7); }).join();
  next.wait(wait_scope);
}

TEST_CASE("a failed step ends every wait with its error, until the next step begins") {
  kj::EventLoop loop;
  kj::WaitScope wait_scope(loop);
  GradientStream stream;
  stream.begin();
  kj::Promise<void> waiting = stream.ready(1);
  std::thread([&] { stream.fail("the training step failed: out of memory"); }).join();
  const auto failure = [&](kj::Promise<void>& p) -> std::string {
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] { p.wait(wait_scope); }))
      return e->getDescription().cStr();
    return "";
  };
  CHECK(failure(waiting) == "the training step failed: out of memory");
  kj::Promise<void> after = stream.ready(9);
  CHECK(failure(after) == "the training step failed: out of memory");

  stream.begin();
  kj::Promise<void> fresh = stream.ready(0);
  CHECK_FALSE(fresh.poll(wait_scope));
  stream.finalFrom(0);
  fresh.wait(wait_scope);
}

TEST_CASE("waits of an abandoned push are let go safely") {
  // A push gives up its waits (a stop) while the step still computes; the
  // worker lets the step finish before the next begins.
  kj::EventLoop loop;
  kj::WaitScope wait_scope(loop);
  GradientStream stream;
  stream.begin();
  { kj::Promise<void> abandoned = stream.ready(0); }
  std::thread([&] { stream.finalFrom(0); }).join();  // fulfils a wait nobody holds

  stream.begin();
  { kj::Promise<void> abandoned = stream.ready(2); }
  stream.begin();  // drops a wait nobody fulfilled
  kj::Promise<void> next = stream.ready(0);
  CHECK_FALSE(next.poll(wait_scope));
  std::thread([&] { stream.finalFrom(0); }).join();
  next.wait(wait_scope);
}

}  // namespace traind
