// isThisHost and unreachableFromOtherHosts: which hosts of a cluster spec
// are this machine, and whether the others can reach this one.
#include "daemon/this_host.h"

#include <catch2/catch.hpp>

namespace traind {
namespace {

TEST_CASE("loopback and this machine's names are this host, others are not", "[this_host]") {
  CHECK(isThisHost("127.0.0.1"));
  CHECK(isThisHost("127.0.0.2"));
  CHECK(isThisHost("::1"));
  CHECK(isThisHost("localhost"));
  CHECK_FALSE(isThisHost("192.0.2.77"));  // TEST-NET-1: no machine's interface
  CHECK_FALSE(isThisHost("no-such-host.invalid"));
}

TEST_CASE("a node listening on loopback only is unreachable from a task on another host",
          "[this_host]") {
  ClusterSpec cluster;
  cluster.ps.push_back({"localhost", 2221, {}});
  cluster.worker.push_back({"127.0.0.1", 2222, {}});
  SECTION("every task on this host") {
    CHECK_FALSE(unreachableFromOtherHosts(cluster, cluster.ps[0], "cluster.ps[0]"));
  }
  SECTION("a worker elsewhere") {
    cluster.worker.push_back({"192.0.2.77", 2223, {}});  // TEST-NET-1
    const auto why = unreachableFromOtherHosts(cluster, cluster.ps[0], "cluster.ps[0]");
    REQUIRE(why);
    CHECK_THAT(*why, Catch::StartsWith("cluster.ps[0]: localhost:2221 listens on "));
    CHECK_THAT(*why, Catch::Contains("a loopback address (localhost resolves to it here), but "
                                     "worker 1 (192.0.2.77:2223) is on another host and cannot "
                                     "reach it: write this host's network address in the cluster "
                                     "spec, or map localhost to that address in /etc/hosts"));
    const auto literal = unreachableFromOtherHosts(cluster, cluster.worker[0], "http.worker[0]");
    REQUIRE(literal);
    CHECK_THAT(*literal, Catch::Contains("127.0.0.1:2222 listens on 127.0.0.1, a loopback "
                                         "address, but worker 1"));
    CHECK_THAT(*literal, Catch::EndsWith("in the cluster spec"));
    // An address of another host is not this node's problem.
    CHECK_FALSE(unreachableFromOtherHosts(cluster, cluster.worker[1], "cluster.worker[1]"));
  }
}

}  // namespace
}  // namespace traind
