// Blocking HTTP requests to a node's ops server (daemon/ops_server.h), each
// bounded by a timeout: what trainctl and the tests speak.
//
//   const OpsReply reply = requestOps(address, "GET", "/status", 5.0);
//   if (reply.status == 200) ... reply.body ...
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "core/cluster_spec.h"

namespace traind {

// The node could not be asked: it does not resolve, refused or reset the
// connection, did not answer within the timeout, or answered something that
// is not HTTP. requestSent(): the request went out whole before no answer
// came, so a node that is only paused (SIGSTOP) still finds it when it goes
// on; false for an answer that is not HTTP (no traind node took it).
class OpsUnreachable : public std::runtime_error {
 public:
  explicit OpsUnreachable(const std::string& message, bool request_sent = false)
      : std::runtime_error(message), request_sent_(request_sent) {}
  bool requestSent() const { return request_sent_; }

 private:
  bool request_sent_;
};

struct OpsReply {
  int status = 0;
  std::string body;
};

// Sends `method path` with no body and reads the answer to its end (the
// server closes every connection). Throws OpsUnreachable
// ("127.0.0.1:8080: Connection refused").
OpsReply requestOps(const HostPort& address, std::string_view method, std::string_view path,
                    double timeout_seconds);

// Sends `request` as it is and returns everything the server sent back
// until it closed the connection (at most 1 MiB): for tests that send what
// no well-behaved client would. Throws OpsUnreachable.
std::string exchangeRaw(const HostPort& address, std::string_view request, double timeout_seconds);

}  // namespace traind
