// Deadlines for kj timers counted from the moment they are set.
//
// An event loop's timer reads the clock only when the loop polls or waits
// for I/O, once it has nothing else to run: Timer::now(), and afterDelay()
// and timeoutAfter() that count from it, stand still while the loop runs.
// After the process has computed outside the loop (a step, an evaluation),
// or was stopped (SIGSTOP) anywhere but in the loop's wait, they lag by that
// long, and a wait set before the loop's next poll ends early by as much,
// or at once. A wait that must last its whole length takes its deadline
// from the clock instead:
//
//   timer.atTime(deadlineIn(kWriteFailureGrace))
//   timer.timeoutAt(deadlineIn(5 * kj::SECONDS), kj::mv(calls))
#pragma once

#include <kj/time.h>

namespace traind {

// The monotonic clock's time now, plus `delay`, in the time of the timer of
// kj::setupAsyncIo() (io.provider->getTimer()), which reads that clock. For
// that timer only: another (a test's, advanced by hand) keeps its own time.
kj::TimePoint deadlineIn(kj::Duration delay);

}  // namespace traind
