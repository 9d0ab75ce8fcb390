// SIGINT, SIGTERM and SIGHUP as a request to stop, taken by a thread of their
// own.
//
// No thread that computes may take a signal: oneDNN 2.6's jit f32 GEMM
// kernels point rsp into a heap buffer while they run (oneDNN issue #4845,
// fixed in 3.11), so the frame of a signal handled there is written over the
// heap and the process aborts later in free(). The constructor blocks the
// signals in the calling thread, every thread started from it afterwards
// inherits the mask, and one thread waits for them with sigwait().
//
//   traind::StopRequest stop;
//   traind::StopSignals signals(stop);  // before any other thread starts
//   ... training threads look at stop.requested() ...
#pragma once

#include <atomic>
#include <thread>

#include "daemon/stop_request.h"

namespace traind {

class StopSignals {
 public:
  // Requests `stop` at each SIGINT, SIGTERM or SIGHUP from now on, until the
  // destructor; then the signals are blocked, as a daemon that has stopped
  // training has nothing left to stop.
  explicit StopSignals(StopRequest& stop);
  ~StopSignals();

  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  StopRequest& stop_;
  std::atomic<bool> closing_{false};
  std::thread waiter_;
};

}  // namespace traind
