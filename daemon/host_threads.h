// How many compute threads a worker takes when neither the spec
// (training.threads), --threads nor OMP_NUM_THREADS says: this host's cores
// shared among the cluster's workers on it. (A ps applies updates on its
// event loop's thread and starts no compute threads.)
//
// One thread per core in every worker of a host (the two workers of a local
// cluster, the systemd example's) puts several OpenMP teams on each core;
// each team's threads spin at its barriers while another's hold the cores,
// and a step takes 25 times as long (fashion_mlp, 1 ps + 2 workers on a
// 2-core machine: 2.2k against 55.9k examples/sec).
#pragma once

#include <functional>
#include <string>

#include "core/cluster_spec.h"

namespace traind {

struct HostShare {
  int threads = 1;  // cores / workers, at least 1
  int workers = 1;  // the cluster's workers on this host, this one included
};

// Worker `task`'s share of `cores`, counting the workers whose host
// `on_this_host` says is this machine.
HostShare shareHostCores(const ClusterSpec& cluster, int task, int cores,
                         const std::function<bool(const std::string&)>& on_this_host);

}  // namespace traind
