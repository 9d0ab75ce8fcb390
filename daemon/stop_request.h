// A request that this node stop at its next step boundary, and who made it:
// a signal (StopSignals) or an ops client (POST /stop). Any thread may make
// it; the training loops poll flag() between steps.
//
//   traind::StopRequest stop;
//   stop.request("SIGTERM");          // logs "stop requested by SIGTERM"
//   if (stop.requested()) ...;        // the loops
//   service.beginStopping(stop.by()); // a ps tells its workers who asked
#pragma once

#include <atomic>
#include <mutex>
#include <string>

namespace traind {

class StopRequest {
 public:
  // Sets the request and logs who made it, the first time: later requests
  // change nothing (the node is already stopping).
  void request(const std::string& by);

  bool requested() const { return requested_.load(); }
  // For what waits on the flag itself (a kj timer loop, ShardedClient).
  const std::atomic<bool>& flag() const { return requested_; }
  // Who asked first: "SIGTERM", "POST /stop from 10.0.0.5:41872", ...; empty
  // until requested.
  std::string by() const;

 private:
  std::atomic<bool> requested_{false};
  mutable std::mutex mutex_;
  std::string by_;
};

}  // namespace traind
