// shareHostCores: a worker's default compute threads, this host's cores
// shared among the cluster's workers on it.
#include "daemon/host_threads.h"

#include <catch2/catch.hpp>

namespace traind {
namespace {

ClusterSpec clusterOf(std::vector<std::string> workers) {
  ClusterSpec cluster;
  cluster.ps.push_back({"127.0.0.1", 2221, {}});
  for (const std::string& host : workers) cluster.worker.push_back({host, 2222, {}});
  return cluster;
}

TEST_CASE("workers on one host share its cores", "[host_threads]") {
  const ClusterSpec local = clusterOf({"127.0.0.1", "localhost", "::1"});
  CHECK(shareHostCores(local, 1, 16).threads == 5);
  CHECK(shareHostCores(local, 1, 16).workers == 3);
  CHECK(shareHostCores(local, 0, 2).threads == 1);  // never 0
}

TEST_CASE("workers on other hosts take nothing of this host's cores", "[host_threads]") {
  const ClusterSpec hosts = clusterOf({"10.0.0.2", "10.0.0.3", "10.0.0.2"});
  CHECK(shareHostCores(hosts, 1, 8).threads == 8);
  CHECK(shareHostCores(hosts, 0, 8).threads == 4);
  // Loopback is one host whatever its spelling; a name and its address are two.
  const ClusterSpec mixed = clusterOf({"127.0.0.2", "node1", "127.0.0.1"});
  CHECK(shareHostCores(mixed, 0, 8).workers == 2);
  CHECK(shareHostCores(mixed, 1, 8).workers == 1);
}

}  // namespace
}  // namespace traind
