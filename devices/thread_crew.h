// ThreadCrew: N members that run the same work at once, each with its
// index. Member 0 is the caller's own thread; members 1..N-1 are threads
// started once and kept, so a step makes no thread. Towers (towers.h) and
// pipeline stages (pipeline.h) run on one.
//
//   ThreadCrew crew(2, [&](size_t member) { build(member); });  // on each member, once
//   auto step = [&](size_t member) { train(member); };
//   crew.run(step);  // every member runs step(its index); returns when all have
//
// The caller works as member 0 rather than sleeping until the others are
// done: no thread has to wake it at the end of every run (tens of
// microseconds in a virtual machine, 5% of a small model's step).
//
// Between runs a thread polls for kPollFor, then sleeps. The members can
// wait on each other inside a run the same way: pollThenWait(done) on one
// side, notifyAll() on the other after it has made `done` true.
//
// The setup and the work must not throw (an escaping exception ends the
// process): keep a thread's error and report it after the run.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace traind {

class ThreadCrew {
 public:
  // How long a waiting thread polls before it sleeps: longer than the
  // caller's work between two steps of a small model (the optimizer, the
  // next batch) or a small model's pass, so that a step or a handed-over
  // micro-batch seldom has to wake a sleeping thread (tens of microseconds,
  // more in a virtual machine). It polls with sched_yield, so that a poller
  // that shares a core with the caller (or anyone else) gives the core away.
  static constexpr auto kPollFor = std::chrono::microseconds(300);

  // Starts members - 1 threads; every member runs setup(its index) first,
  // member 0 on this thread. Returns when every one has. Throws if a thread
  // cannot be started (those started are stopped first).
  ThreadCrew(int members, const std::function<void(size_t)>& setup);
  // Stops and joins the threads; no run may be in progress.
  ~ThreadCrew();
  ThreadCrew(const ThreadCrew&) = delete;
  ThreadCrew& operator=(const ThreadCrew&) = delete;

  size_t size() const { return threads_.size() + 1; }

  // Every member runs work(its index), member 0 on this thread; returns when
  // all have. `work` is called in place, not copied.
  template <class Work>
  void run(Work& work) {
    work_ = [](void* context, size_t member) { (*static_cast<Work*>(context))(member); };
    context_ = &work;
    post();
    work(0);
    waitUntilFinished();
  }

  // Polls `done` for kPollFor, then sleeps until a notifyAll after which it
  // holds. `done` is called under the crew's mutex once it sleeps.
  template <class Predicate>
  void pollThenWait(Predicate done) {
    pollThenSleepOn(threads_wake_, done);
  }

  // Wakes the threads sleeping in pollThenWait to test their condition
  // again. Call after changing what they wait on.
  void notifyAll();

 private:
  // Polls `done` for kPollFor, yielding, then sleeps on `wakes` until it holds.
  template <class Predicate>
  void pollThenSleepOn(std::condition_variable& wakes, Predicate done) {
    const auto until = std::chrono::steady_clock::now() + kPollFor;
    for (int i = 1; !done(); ++i) {
      if (i % 64 == 0 && std::chrono::steady_clock::now() >= until) {
        std::unique_lock lock(mutex_);
        wakes.wait(lock, done);
        return;
      }
      std::this_thread::yield();
    }
  }
  // A thread: runs setup, then each posting until the crew stops.
  void serve(size_t thread, const std::function<void(size_t)>& setup);
  // A thread reports that it has done the posted work (or its setup).
  void finished();
  // The caller: until every thread has finished, polling first.
  void waitUntilFinished();
  // The caller: hands the current work (or the stop) to every thread.
  void post();
  void stop();

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable threads_wake_;
  std::condition_variable caller_wakes_;
  // Postings so far; a thread runs each once. Changed under mutex_, so that a
  // thread that sleeps on threads_wake_ cannot miss one.
  std::atomic<uint64_t> posted_{0};
  // Threads still on the current posting; the one that takes it to 0 wakes
  // the caller (under mutex_, likewise).
  std::atomic<int> busy_{0};
  // The current posting, written before it is posted.
  void (*work_)(void* context, size_t thread) = nullptr;
  void* context_ = nullptr;
  bool stopping_ = false;
};

}  // namespace traind
