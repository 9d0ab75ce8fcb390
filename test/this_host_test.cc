// isThisHost, unreachableFromOtherHosts and sameListeningPort: which hosts
// of a cluster spec are this machine, whether the others can reach this
// one, and whether two of its listeners would take one port.
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
  // A wildcard is the host that reads it; a mapped address the IPv4 one.
  CHECK(isThisHost("0.0.0.0"));
  CHECK(isThisHost("::"));
  CHECK(isThisHost("::ffff:127.0.0.1"));
  CHECK_FALSE(isThisHost("::ffff:192.0.2.77"));
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

TEST_CASE("two listeners of a node take one port when their addresses are one or a wildcard covers",
          "[this_host]") {
  const auto same = [](const char* a, const char* b, uint16_t port_b = 2221) {
    return sameListeningPort({a, 2221, {}}, {b, port_b, {}});
  };
  CHECK_FALSE(same("127.0.0.1", "127.0.0.1", 2222));  // another port
  CHECK_FALSE(same("127.0.0.1", "127.0.0.2"));
  CHECK_FALSE(same("0.0.0.0", "::1"));                     // an IPv4 wildcard leaves IPv6 alone
  CHECK_FALSE(same("no-such-host.invalid", "127.0.0.1"));  // the bind says it
  CHECK(same("127.0.0.1", "127.0.0.1") == "one address");
  CHECK(same("0.0.0.0", "127.0.0.1") == "0.0.0.0 takes this port of every IPv4 address");
  CHECK(same("127.0.0.1", "::") == "[::] takes this port of every address");
  CHECK(same("::", "::1") == "[::] takes this port of every address");
  // An IPv4-mapped address is the IPv4 one to the kernel's ports.
  CHECK(same("0.0.0.0", "::ffff:127.0.0.1") ==
        "::ffff:127.0.0.1 is 127.0.0.1 here; 0.0.0.0 takes this port of every IPv4 address");
  CHECK(same("::ffff:127.0.0.1", "127.0.0.1") == "::ffff:127.0.0.1 is 127.0.0.1 here");
  // Whatever localhost is first here, 127.0.0.1 or ::1, the wildcard of
  // both families covers it, and the reason says what it resolved to.
  CHECK_THAT(*same("localhost", "::"), Catch::StartsWith("localhost is "));
}

}  // namespace
}  // namespace traind
