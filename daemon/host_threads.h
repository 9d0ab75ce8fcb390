// How many compute threads a cluster node takes when neither the spec
// (training.threads), --threads nor OMP_NUM_THREADS says: this host's cores
// shared among the cluster's tasks on it.
//
// One thread per core in every task of a host (three tasks of a local
// cluster, the systemd example's) puts several OpenMP teams on each core;
// each team's threads spin at its barriers while another's hold the cores,
// and a step takes 25 times as long (fashion_mlp, 1 ps + 2 workers on 2
// cores: 2.2k against 55k examples/sec).
#pragma once

#include <string>

#include "core/cluster_spec.h"

namespace traind {

struct HostShare {
  int threads = 1;  // at least 1
  int sharing = 1;  // the tasks counted on this host, this one included
};

// A worker takes cores / (the cluster's workers on its host), a ps cores /
// (all the cluster's tasks on its host): a ps's updates are short, and one
// thread does not spin. Tasks are on one host when their addresses have the
// same host text, or are both loopback addresses.
HostShare shareHostCores(const ClusterSpec& cluster, const std::string& job, int task, int cores);

}  // namespace traind
