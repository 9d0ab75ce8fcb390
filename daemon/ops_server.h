// The ops plane of a node (design §7-§8): a small HTTP/1.1 server for
// health checks, Prometheus and trainctl, on a thread of its own with its
// own Asio event loop. Training never waits on it: requests read
// NodeMetrics (one short mutex) and set atomic flags that the training or
// ps thread polls at step boundaries.
//
//   GET  /healthz     200 "ok" when serving, 503 with the reason otherwise
//   GET  /metrics     Prometheus text format 0.0.4
//   GET  /status      one line of JSON (trainctl status)
//   POST /stop        as SIGTERM: a clean stop (the chief checkpoints first)
//   POST /checkpoint  standalone or chief: a checkpoint at the next step boundary
//
// One request per connection (every answer closes it). An unknown path is
// 404, a known one with another method 405. A malformed request, headers
// over 8 KiB or a body over 8 KiB get 400 and the connection is closed; a
// client that has not sent its request within 5 s is dropped; at most 64
// connections are open at once. Bad input costs its connection, never the
// server.
//
//   NodeMetrics metrics("standalone", 0, log_every);
//   OpsServer ops(parseHostPort("127.0.0.1:8080", "--http"), metrics,
//                 {&stop_requested, &checkpoint_requested});
//   ... training; ~OpsServer stops the thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "core/cluster_spec.h"
#include "daemon/node_metrics.h"
#include "daemon/stop_request.h"

namespace traind {

// What an operator may ask of the node; the flags are only ever set here.
struct OpsControls {
  StopRequest* stop = nullptr;              // POST /stop
  std::atomic<bool>* checkpoint = nullptr;  // POST /checkpoint; null where the node writes none
};

class OpsServer {
 public:
  static constexpr size_t kMaxHeaderBytes = 8 * 1024;
  static constexpr size_t kMaxBodyBytes = 8 * 1024;

  // Binds `address` now (port 0: one the system picks, see port()) and
  // serves until destroyed. InputError naming the address when it does not
  // resolve or cannot be bound (in use, not this machine's).
  OpsServer(const HostPort& address, NodeMetrics& metrics, OpsControls controls);
  ~OpsServer();
  OpsServer(const OpsServer&) = delete;
  OpsServer& operator=(const OpsServer&) = delete;

  // The port it listens on.
  uint16_t port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace traind
