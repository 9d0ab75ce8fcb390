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
  const HostPort ops{"127.0.0.1", 9100, {}};
  SECTION("every task on this host") {
    CHECK_FALSE(unreachableFromOtherHosts(cluster, cluster.ps[0], "cluster.ps[0]", Listener::Ps));
    CHECK_FALSE(unreachableFromOtherHosts(cluster, ops, "http.ps[0]", Listener::OpsServer));
  }
  SECTION("a worker elsewhere") {
    cluster.worker.push_back({"192.0.2.77", 2223, {}});  // TEST-NET-1
    const auto why =
        unreachableFromOtherHosts(cluster, cluster.ps[0], "cluster.ps[0]", Listener::Ps);
    REQUIRE(why);
    CHECK_THAT(*why, Catch::StartsWith("cluster.ps[0]: localhost:2221 listens on "));
    CHECK_THAT(*why, Catch::Contains("a loopback address (localhost resolves to it here), but "
                                     "worker 1 (192.0.2.77:2223) is on another host and cannot "
                                     "reach it: write this host's network address in the cluster "
                                     "spec"));
    // localhost is this host's loopback wherever it is read: no /etc/hosts
    // should map it elsewhere.
    CHECK_THAT(*why, Catch::EndsWith("in the cluster spec"));
    const auto http = unreachableFromOtherHosts(cluster, ops, "http.ps[0]", Listener::OpsServer);
    REQUIRE(http);
    CHECK_THAT(*http, Catch::StartsWith("http.ps[0]: 127.0.0.1:9100 listens on 127.0.0.1, a "
                                        "loopback address, but worker 1 (192.0.2.77:2223) is on "
                                        "another host, and trainctl or a metrics scraper there "
                                        "cannot reach it"));
    CHECK_THAT(*http, Catch::EndsWith("in the cluster spec"));
    // An address of another host is not this node's problem.
    CHECK_FALSE(
        unreachableFromOtherHosts(cluster, cluster.worker[1], "cluster.worker[1]", Listener::Ps));
  }
  SECTION("only another ps elsewhere") {
    // The ps tasks do not connect to each other; the ops servers are
    // polled from any host.
    cluster.ps.push_back({"192.0.2.77", 2221, {}});
    CHECK_FALSE(unreachableFromOtherHosts(cluster, cluster.ps[0], "cluster.ps[0]", Listener::Ps));
    CHECK(unreachableFromOtherHosts(cluster, ops, "http.worker[0]", Listener::OpsServer));
  }
}

}  // namespace
}  // namespace traind
