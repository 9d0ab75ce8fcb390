#include "daemon/host_threads.h"

#include <algorithm>

namespace traind {
namespace {

bool isLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

bool sameHost(const std::string& a, const std::string& b) {
  return a == b || (isLoopback(a) && isLoopback(b));
}

}  // namespace

HostShare shareHostCores(const ClusterSpec& cluster, const std::string& job, int task, int cores) {
  const bool worker = job == "worker";
  const std::string& host = (worker ? cluster.worker : cluster.ps).at(size_t(task)).host;
  HostShare share;
  share.sharing = 0;
  for (const HostPort& w : cluster.worker) share.sharing += sameHost(w.host, host);
  if (!worker)
    for (const HostPort& p : cluster.ps) share.sharing += sameHost(p.host, host);
  share.threads = std::max(1, cores / share.sharing);
  return share;
}

}  // namespace traind
