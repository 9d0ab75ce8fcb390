// Deadlines for kj timers counted from the moment they are set.
//
// An event loop's timer reads the clock only when the loop waits for I/O:
// Timer::now(), and afterDelay() and timeoutAfter() that count from it,
// stand still while the loop runs. After the process has computed outside
// the loop (a step, an evaluation) or been stopped (SIGSTOP), they lag by
// that long, and a wait set before the loop's next wait for I/O ends early
// by as much, or at once. A wait that must last its whole length takes its
// deadline from the clock instead:
//
//   timer.atTime(deadlineIn(kWriteFailureGrace))
//   timer.timeoutAt(deadlineIn(5 * kj::SECONDS), kj::mv(calls))
#pragma once

#include <kj/time.h>

namespace traind {

// The monotonic clock's time now, plus `delay`: in the time of the timer of
// kj::setupAsyncIo(), which that clock keeps in step.
kj::TimePoint deadlineIn(kj::Duration delay);

}  // namespace traind
