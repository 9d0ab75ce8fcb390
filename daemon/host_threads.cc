#include "daemon/host_threads.h"

#include <algorithm>
#include <string>

namespace traind {
namespace {

bool isLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

bool sameHost(const std::string& a, const std::string& b) {
  return a == b || (isLoopback(a) && isLoopback(b));
}

}  // namespace

HostShare shareHostCores(const ClusterSpec& cluster, int task, int cores) {
  const std::string& host = cluster.worker.at(size_t(task)).host;
  HostShare share;
  share.workers = int(std::count_if(cluster.worker.begin(), cluster.worker.end(),
                                    [&](const HostPort& w) { return sameHost(w.host, host); }));
  share.threads = std::max(1, cores / share.workers);
  return share;
}

}  // namespace traind
