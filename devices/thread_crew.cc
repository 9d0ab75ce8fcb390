#include "devices/thread_crew.h"

namespace traind {

ThreadCrew::ThreadCrew(int members, const std::function<void(size_t)>& setup) {
  const int threads = members - 1;
  threads_.reserve(size_t(threads));
  busy_ = threads;
  try {
    for (int t = 1; t <= threads; ++t)
      threads_.emplace_back([this, t, &setup] { serve(size_t(t), setup); });
  } catch (...) {
    // The threads never started will not report; wait for the others.
    busy_.fetch_sub(threads - int(threads_.size()));
    waitUntilFinished();
    stop();
    throw;
  }
  setup(0);
  waitUntilFinished();
}

ThreadCrew::~ThreadCrew() { stop(); }

void ThreadCrew::notifyAll() {
  // Under the mutex, so that a thread between testing its condition and
  // sleeping cannot miss the change.
  { std::lock_guard lock(mutex_); }
  threads_wake_.notify_all();
}

void ThreadCrew::serve(size_t thread, const std::function<void(size_t)>& setup) {
  setup(thread);
  uint64_t seen = 0;  // nothing is posted before every thread has run its setup
  finished();
  for (;;) {
    pollThenWait([&] { return posted_.load(std::memory_order_acquire) != seen; });
    seen = posted_.load(std::memory_order_acquire);
    if (stopping_) return;
    work_(context_, thread);
    finished();
  }
}

void ThreadCrew::finished() {
  if (busy_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  { std::lock_guard lock(mutex_); }
  caller_wakes_.notify_one();
}

void ThreadCrew::waitUntilFinished() {
  // The others ran the same work as the caller: they are usually about done.
  pollThenSleepOn(caller_wakes_,
                  [this] { return busy_.load(std::memory_order_acquire) == 0; });
}

void ThreadCrew::post() {
  busy_.store(int(threads_.size()), std::memory_order_relaxed);
  {
    std::lock_guard lock(mutex_);
    posted_.fetch_add(1, std::memory_order_release);
  }
  threads_wake_.notify_all();
}

void ThreadCrew::stop() {
  stopping_ = true;
  post();
  for (std::thread& thread : threads_) thread.join();
}

}  // namespace traind
