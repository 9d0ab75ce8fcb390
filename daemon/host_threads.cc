#include "daemon/host_threads.h"

#include <algorithm>

namespace traind {

HostShare shareHostCores(const ClusterSpec& cluster, int task, int cores,
                         const std::function<bool(const std::string&)>& on_this_host) {
  HostShare share;
  share.workers = 0;
  for (size_t i = 0; i < cluster.worker.size(); ++i)
    share.workers += int(i) == task || on_this_host(cluster.worker[i].host);
  share.threads = std::max(1, cores / share.workers);
  return share;
}

}  // namespace traind
