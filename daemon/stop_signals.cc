#include "daemon/stop_signals.h"

#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace traind {
namespace {

sigset_t stopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  // The terminal or ssh session that started it going away: its default
  // killed a job's every task with no checkpoint (run-local-cluster's tasks
  // share its process group, which a hangup reaches whole).
  sigaddset(&set, SIGHUP);
  return set;
}

}  // namespace

StopSignals::StopSignals(StopRequest& stop) : stop_(stop) {
  const sigset_t set = stopSignals();
  if (const int error = pthread_sigmask(SIG_BLOCK, &set, nullptr))
    throw std::runtime_error(std::string("cannot block SIGINT, SIGTERM and SIGHUP: ") +
                             std::strerror(error));
  try {
    waiter_ = std::thread([this, set] {
      for (;;) {
        int signal_number = 0;
        if (sigwait(&set, &signal_number) != 0) continue;
        if (closing_.load()) return;
        stop_.request(std::string("SIG") + sigabbrev_np(signal_number));
      }
    });
  } catch (...) {
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    throw;
  }
}

StopSignals::~StopSignals() {
  closing_.store(true);
  // Wakes the waiter (the signal is blocked everywhere else, so it is the
  // one to take it).
  pthread_kill(waiter_.native_handle(), SIGTERM);
  waiter_.join();
}

}  // namespace traind
