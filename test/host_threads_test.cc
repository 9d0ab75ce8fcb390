// shareHostCores: a worker's default compute threads, this
// host's cores shared among the cluster's workers on it.
#include "daemon/host_threads.h"

#include <catch2/catch.hpp>
#include <set>

namespace traind {
namespace {

ClusterSpec clusterOf(std::vector<std::string> workers) {
  ClusterSpec cluster;
  cluster.ps.push_back({"127.0.0.1", 2221, {}});
  for (const std::string& host : workers) cluster.worker.push_back({host, 2222, {}});
  return cluster;
}

TEST_CASE("workers on one host share its cores", "[host_threads]") {
  const std::set<std::string> here = {"10.0.0.2", "h2"};
  const auto onThisHost = [&](const std::string& host) { return here.count(host) > 0; };
  const ClusterSpec cluster = clusterOf({"10.0.0.2", "10.0.0.3", "h2", "h3"});
  CHECK(shareHostCores(cluster, 0, 16, onThisHost).workers == 2);
  CHECK(shareHostCores(cluster, 0, 16, onThisHost).threads == 8);
  CHECK(shareHostCores(cluster, 0, 1, onThisHost).threads == 1);  // never 0
  // A worker counts itself, whatever its address says.
  CHECK(shareHostCores(cluster, 1, 16, onThisHost).workers == 3);
  CHECK(shareHostCores(clusterOf({"10.0.0.3"}), 0, 16, onThisHost).threads == 16);
}

}  // namespace
}  // namespace traind
