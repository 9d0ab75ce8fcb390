// shareHostCores: a cluster node's default compute threads, this host's
// cores shared among the cluster's tasks on it.
#include "daemon/host_threads.h"

#include <catch2/catch.hpp>

namespace traind {
namespace {

ClusterSpec clusterOf(std::vector<std::string> ps, std::vector<std::string> workers) {
  ClusterSpec cluster;
  for (const std::string& host : ps) cluster.ps.push_back({host, 2221, {}});
  for (const std::string& host : workers) cluster.worker.push_back({host, 2222, {}});
  return cluster;
}

TEST_CASE("tasks on one host share its cores: workers among workers, a ps among all",
          "[host_threads]") {
  const ClusterSpec local = clusterOf({"127.0.0.1"}, {"127.0.0.1", "localhost"});
  CHECK(shareHostCores(local, "worker", 1, 16).threads == 8);
  CHECK(shareHostCores(local, "worker", 1, 16).sharing == 2);
  CHECK(shareHostCores(local, "ps", 0, 16).threads == 5);
  CHECK(shareHostCores(local, "ps", 0, 16).sharing == 3);
  CHECK(shareHostCores(local, "worker", 0, 2).threads == 1);
  CHECK(shareHostCores(local, "ps", 0, 2).threads == 1);  // never 0
}

TEST_CASE("tasks on other hosts take nothing of this host's cores", "[host_threads]") {
  const ClusterSpec hosts = clusterOf({"10.0.0.1"}, {"10.0.0.2", "10.0.0.3", "10.0.0.2"});
  CHECK(shareHostCores(hosts, "worker", 1, 8).threads == 8);
  CHECK(shareHostCores(hosts, "worker", 0, 8).threads == 4);
  CHECK(shareHostCores(hosts, "ps", 0, 8).threads == 8);
  // Loopback is one host whatever its spelling; a name and its address are two.
  const ClusterSpec mixed = clusterOf({"::1"}, {"127.0.0.2", "node1"});
  CHECK(shareHostCores(mixed, "ps", 0, 8).sharing == 2);
  CHECK(shareHostCores(mixed, "worker", 1, 8).sharing == 1);
}

}  // namespace
}  // namespace traind
