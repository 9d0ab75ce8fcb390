#include "core/cluster_spec.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "test/temp_dir.h"

namespace fs = std::filesystem;
using namespace traind;

namespace {

std::string configPath(const std::string& name) {
  return std::string(TRAIND_SOURCE_DIR) + "/configs/clusters/" + name;
}

// The message of the InputError that loading `text` throws, with the
// temporary file's path replaced by "c.yaml".
std::string errorOf(const std::string& text) {
  TempDir dir;
  const std::string path = dir.write("c.yaml", text);
  try {
    loadClusterSpec(path);
  } catch (const InputError& e) {
    std::string message = e.what();
    if (message.rfind(path, 0) == 0) message = "c.yaml" + message.substr(path.size());
    return message;
  }
  FAIL("loading\n" << text << "did not throw InputError");
  return {};
}

ClusterSpec load(const TempDir& dir, const std::string& text) {
  return loadClusterSpec(dir.write("c.yaml", text));
}

std::string taskError(const ClusterSpec& cluster, const std::string& job, int task) {
  try {
    checkTask(cluster, job, task);
  } catch (const InputError& e) {
    return e.what();
  }
  FAIL("checkTask(" << job << ", " << task << ") did not throw InputError");
  return {};
}

const std::string kCluster =
    "cluster:\n"
    "  ps: [127.0.0.1:2221]\n"
    "  worker: [127.0.0.1:2222, 127.0.0.1:2223, 127.0.0.1:2224]\n";

}  // namespace

TEST_CASE("every example cluster loads", "[cluster_spec]") {
  const ClusterSpec async = loadClusterSpec(configPath("local_async.yaml"));
  CHECK(async.mode == TrainingMode::Async);
  REQUIRE(async.ps.size() == 1);
  REQUIRE(async.worker.size() == 2);
  CHECK(async.ps[0].toString() == "127.0.0.1:2221");
  CHECK(async.worker[0].toString() == "127.0.0.1:2222");
  CHECK(async.worker[1].toString() == "127.0.0.1:2223");
  CHECK(async.max_staleness == 0);
  CHECK_FALSE(async.checkpoint);

  const ClusterSpec sync = loadClusterSpec(configPath("local_sync.yaml"));
  CHECK(sync.mode == TrainingMode::Sync);
  CHECK(sync.ps.size() == 1);
  CHECK(sync.worker.size() == 2);
  CHECK(sync.replicas_to_aggregate == 2);
  CHECK(sync.total_num_replicas == 2);

  const ClusterSpec two_ps = loadClusterSpec(configPath("local_2ps.yaml"));
  CHECK(two_ps.mode == TrainingMode::Async);
  REQUIRE(two_ps.ps.size() == 2);
  CHECK(two_ps.ps[1].host == "127.0.0.1");
  CHECK(two_ps.ps[1].port == 2222);
  CHECK(two_ps.worker.size() == 2);
}

TEST_CASE("addresses keep their positions, IPv6 and names print back", "[cluster_spec]") {
  TempDir dir;
  const ClusterSpec spec = load(dir,
                                "cluster:\n"
                                "  ps:\n"
                                "    - \"[::1]:2221\"\n"
                                "    - '[fe80::1%eth0]:2222'\n"
                                "  worker: [ps-0.example.com:65535, Worker_1:1]\n");
  REQUIRE(spec.ps.size() == 2);
  CHECK(spec.ps[0].host == "::1");
  CHECK(spec.ps[0].port == 2221);
  CHECK(spec.ps[0].toString() == "[::1]:2221");
  CHECK(spec.ps[0].location.line == 3);
  CHECK(spec.ps[0].location.column == 7);
  CHECK(spec.ps[1].toString() == "[fe80::1%eth0]:2222");
  CHECK(spec.worker[0].toString() == "ps-0.example.com:65535");
  CHECK(spec.worker[1].toString() == "Worker_1:1");
  CHECK(spec.worker[1].location.line == 5);
  CHECK(spec.worker[1].location.column == 36);
  CHECK(spec.path == (dir.path() / "c.yaml").string());
}

TEST_CASE("omitted sections and fields take their defaults", "[cluster_spec]") {
  TempDir dir;
  const ClusterSpec plain = load(dir, kCluster);
  CHECK(plain.mode == TrainingMode::Async);
  CHECK(plain.max_staleness == 0);
  CHECK(plain.peer_wait_seconds == 600);
  CHECK(plain.replicas_to_aggregate == 3);
  CHECK(plain.total_num_replicas == 3);
  CHECK_FALSE(plain.checkpoint);
  CHECK(plain.shared_memory);

  const ClusterSpec sync = load(dir, kCluster + "training: {mode: sync}\n");
  CHECK(sync.mode == TrainingMode::Sync);
  CHECK(sync.replicas_to_aggregate == 3);
  CHECK(sync.total_num_replicas == 3);

  const ClusterSpec backup =
      load(dir, kCluster + "training: {mode: sync, replicas_to_aggregate: 2}\n");
  CHECK(backup.replicas_to_aggregate == 2);
  CHECK(backup.total_num_replicas == 3);

  const ClusterSpec stale = load(dir, kCluster + "training: {mode: async, max_staleness: 4}\n");
  CHECK(stale.max_staleness == 4);

  // Either mode's.
  CHECK(
      load(dir, kCluster + "training: {mode: sync, peer_wait_seconds: 7200}\n").peer_wait_seconds ==
      7200);
  CHECK(load(dir, kCluster + "training: {peer_wait_seconds: 1}\n").peer_wait_seconds == 1);
}

TEST_CASE("the checkpoint section is the model spec's, relative to the file", "[cluster_spec]") {
  TempDir dir;
  const ClusterSpec full = load(
      dir, kCluster + "checkpoint: {dir: ckpt, every_steps: 10, every_seconds: 1.5, keep: 2}\n");
  REQUIRE(full.checkpoint);
  CHECK(full.checkpoint->dir == (fs::absolute(dir.path()) / "ckpt").string());
  CHECK(full.checkpoint->every_steps == 10);
  CHECK(full.checkpoint->every_seconds == 1.5);
  CHECK(full.checkpoint->keep == 2);

  const ClusterSpec minimal = load(dir, kCluster + "checkpoint: {dir: /var/lib/traind/ckpt}\n");
  REQUIRE(minimal.checkpoint);
  CHECK(minimal.checkpoint->dir == "/var/lib/traind/ckpt");
  CHECK(minimal.checkpoint->every_steps == 0);
  CHECK(minimal.checkpoint->every_seconds == 600.0);  // TensorFlow 1's default
  const ClusterSpec by_steps =
      load(dir, kCluster + "checkpoint: {dir: /var/lib/traind/ckpt, every_steps: 100}\n");
  CHECK(by_steps.checkpoint->every_steps == 100);
  CHECK(by_steps.checkpoint->every_seconds == 0.0);  // given alone, steps replace the default
  CHECK(minimal.checkpoint->keep == 5);

  CHECK(errorOf(kCluster + "checkpoint: {dir: x, keep: 0}\n") ==
        "c.yaml:4:28: checkpoint.keep: expected a positive integer, got 0");
  CHECK(errorOf(kCluster + "checkpoint: {every_steps: 5}\n") ==
        "c.yaml:4:13: checkpoint: missing field 'dir'");
}

TEST_CASE("transport.shared_memory is auto or off", "[cluster_spec]") {
  TempDir dir;
  CHECK(load(dir, kCluster + "transport: {shared_memory: auto}\n").shared_memory);
  CHECK_FALSE(load(dir, kCluster + "transport:\n  shared_memory: off\n").shared_memory);
  CHECK(errorOf(kCluster + "transport: {shared_memory: false}\n") ==
        "c.yaml:4:28: transport.shared_memory: expected one of auto, off, got 'false'");
  CHECK(errorOf(kCluster + "transport: {shm: off}\n") ==
        "c.yaml:4:13: transport: unknown field 'shm' (the fields of the transport section are "
        "shared_memory)");
}

TEST_CASE("a host name DNS could not hold is refused at its line", "[cluster_spec]") {
  const std::string expected =
      "expected host:port with a host name of labels of 1 to 63 characters between dots, none "
      "starting or ending with '-', 253 characters in all";
  std::string long_name;  // 257 characters in labels of 3
  for (int i = 0; i < 64; ++i) long_name += "abc.";
  long_name += "x";
  for (const std::string& host : {std::string("..."), std::string("-"), std::string("a..b"),
                                  std::string("-ps.example"), std::string(64, 'a'),
                                  long_name}) {
    INFO(host);
    CHECK_THAT(errorOf("cluster:\n  ps: [" + host + ":1]\n  worker: [b:1]\n"),
               Catch::StartsWith("c.yaml:2:8: cluster.ps[0]: " + expected));
  }
  TempDir dir;
  const ClusterSpec ok = load(dir, "cluster:\n  ps: [ps-0.example.com.:1, " +
                                       std::string(63, 'a') + ":1]\n  worker: [my_host:1]\n");
  CHECK(ok.ps[0].host == "ps-0.example.com.");
}

TEST_CASE("a host that reads as a number is a dotted-quad IPv4 address", "[cluster_spec]") {
  // The C library would read 010.0.0.1 as octal (8.0.0.1) and 127.1 as
  // 127.0.0.1: other addresses than written, and duplicates unseen.
  for (const std::string& host :
       {std::string("010.0.0.1"), std::string("127.1"), std::string("0x7f.0.0.1"),
        std::string("0x7f000001"), std::string("256.0.0.1"), std::string("1.2.3.4.5"),
        std::string("127.0.0.1.")}) {
    INFO(host);
    CHECK_THAT(errorOf("cluster:\n  ps: [" + host + ":1]\n  worker: [b:1]\n"),
               Catch::StartsWith("c.yaml:2:8: cluster.ps[0]: expected host:port with an IPv4 "
                                 "address of four numbers from 0 to 255, without leading zeros"));
  }
  TempDir dir;
  const ClusterSpec ok = load(
      dir, "cluster:\n  ps: [10.0.0.1:1, 0.0.0.0:2, ps-1.example:3, node.1:4]\n  worker: [b:1]\n");
  CHECK(ok.ps[0].host == "10.0.0.1");
  CHECK(ok.ps[3].host == "node.1");  // a name /etc/hosts may give
}

TEST_CASE("an IPv6 zone goes with a link-local address only", "[cluster_spec]") {
  // The resolver refuses any other, which a node would say only as it starts.
  for (const std::string& host : {std::string("::1%lo"), std::string("fd00::5%eth0")}) {
    INFO(host);
    CHECK_THAT(errorOf("cluster:\n  ps: ['[" + host + "]:1']\n  worker: [b:1]\n"),
               Catch::StartsWith("c.yaml:2:8: cluster.ps[0]: expected [ipv6%zone]:port with a "
                                 "zone (an interface, as %eth0) on a link-local IPv6 address "
                                 "only (fe80::/10)"));
  }
  CHECK_THAT(errorOf("cluster:\n  ps: ['[fe80::1%]:1']\n  worker: [b:1]\n"),
             Catch::StartsWith("c.yaml:2:8: cluster.ps[0]: expected [ipv6%zone]:port with a zone "
                               "after the '%' (an interface, as %eth0)"));
  TempDir dir;
  CHECK(load(dir, "cluster:\n  ps: ['[fe80::1%eth0]:1']\n  worker: [b:1]\n").ps[0].host ==
        "fe80::1%eth0");
  // A link-local multicast address takes a zone, but no task listens there.
  CHECK_THAT(errorOf("cluster:\n  ps: ['[ff02::1%eth0]:2']\n  worker: [b:1]\n"),
             Catch::Contains("expected host:port with a unicast address"));
}

TEST_CASE("a task's address resolves to what a peer connects to, each with its port",
          "[cluster_spec]") {
  auto resolved = [](const std::string& host, uint16_t port) {
    std::vector<std::string> found;
    for (const HostPort& address : resolvedAddresses({host, port, {}}))
      found.push_back(address.toString());
    return found;
  };
  CHECK(resolved("127.0.0.1", 2221) == std::vector<std::string>{"127.0.0.1:2221"});
  CHECK(resolved("::1", 2222) == std::vector<std::string>{"[::1]:2222"});
  CHECK(resolved("no-such-host.invalid", 2221).empty());
}

TEST_CASE("a socket address prints as a spec writes it, a link-local one with its zone",
          "[cluster_spec]") {
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  address.sin6_port = htons(2221);
  REQUIRE(inet_pton(AF_INET6, "fe80::1", &address.sin6_addr) == 1);
  const auto print = [&] { return hostPortOf(reinterpret_cast<const sockaddr&>(address)); };
  CHECK(print().toString() == "[fe80::1]:2221");
  address.sin6_scope_id = if_nametoindex("lo");
  REQUIRE(address.sin6_scope_id != 0);
  CHECK(print().toString() == "[fe80::1%lo]:2221");
  address.sin6_scope_id = 999999;  // no such interface
  CHECK(print().host == "fe80::1%999999");
}

TEST_CASE("a zone naming no interface of this host is named as the reason it does not resolve",
          "[cluster_spec]") {
  CHECK(missingZoneNote("[fe80::1%nosuchif]:2221") ==
        " (this host has no interface 'nosuchif', the address's zone)");
  CHECK(missingZoneNote("[fe80::1%lo]:2221").empty());
  const std::string lo_index = std::to_string(if_nametoindex("lo"));
  CHECK(missingZoneNote("[fe80::1%" + lo_index + "]:2221").empty());  // an index names one too
  CHECK(missingZoneNote("[fe80::1%999999]:2221") ==
        " (this host has no interface '999999', the address's zone)");
  CHECK(missingZoneNote("[fe80::1]:2221").empty());
  CHECK(missingZoneNote("127.0.0.1:2221").empty());
}

TEST_CASE("a model spec given as the cluster spec says so", "[cluster_spec]") {
  CHECK(errorOf("name: m\ninput: [4]\nlayers:\n  - {type: dense, units: 3}\n") ==
        "c.yaml:4:3: layers: this is a model spec (layers, no cluster section): give it to "
        "--model, and a cluster spec to --cluster");
}

TEST_CASE("a tag says what a value is: !!null sync is no mode", "[cluster_spec]") {
  CHECK(errorOf(kCluster + "training: {mode: !!null sync}\n") ==
        "c.yaml:4:18: training.mode: expected one of async, sync, got 'sync' tagged '!!null'");
  CHECK(errorOf("cluster:\n  ps: [!!int a:1]\n  worker: [b:1]\n") ==
        "c.yaml:2:8: cluster.ps[0]: expected host:port, got 'a:1' tagged '!!int'");
}

TEST_CASE("unknown fields suggest the closest known one or list them", "[cluster_spec]") {
  CHECK(errorOf(kCluster + "trainig: {mode: sync}\n") ==
        "c.yaml:4:1: unknown field 'trainig' (did you mean 'training'?)");
  CHECK(errorOf("cluster:\n  ps: [a:1]\n  workers: [b:1]\n") ==
        "c.yaml:3:3: cluster: unknown field 'workers' (did you mean 'worker'?)");
  CHECK(errorOf(kCluster + "training: {mode: sync, replicas: 2}\n") ==
        "c.yaml:4:24: training: unknown field 'replicas' (the fields of the training section are "
        "mode, replicas_to_aggregate, total_num_replicas, max_staleness, peer_wait_seconds)");
  CHECK(errorOf(kCluster + "checkpoint: {dir: x, every_step: 5}\n") ==
        "c.yaml:4:22: checkpoint: unknown field 'every_step' (did you mean 'every_steps'?)");
  // As near to every_steps, but short for every_seconds.
  CHECK(errorOf(kCluster + "checkpoint: {dir: x, every_secs: 600}\n") ==
        "c.yaml:4:22: checkpoint: unknown field 'every_secs' (did you mean 'every_seconds'?)");
}

TEST_CASE("ps and worker are required non-empty lists", "[cluster_spec]") {
  CHECK(errorOf("training: {mode: async}\n") == "c.yaml:1:1: missing field 'cluster'");
  CHECK(errorOf("cluster:\n  worker: [a:1]\n") == "c.yaml:2:3: cluster: missing field 'ps'");
  CHECK(errorOf("cluster:\n  ps: []\n  worker: [a:1]\n") ==
        "c.yaml:2:7: cluster.ps: expected a non-empty list of host:port addresses, got an empty "
        "list");
  CHECK(errorOf("cluster:\n  ps: [a:1]\n  worker:\n") ==
        "c.yaml:3:3: cluster.worker: expected a list of host:port addresses, got an empty value");
  CHECK(errorOf("cluster:\n  ps: a:1\n  worker: [b:1]\n") ==
        "c.yaml:2:7: cluster.ps: expected a list of host:port addresses, got 'a:1'");
}

TEST_CASE("address syntax", "[cluster_spec]") {
  auto addressError = [](const std::string& address) {
    return errorOf("cluster:\n  ps: [a:1]\n  worker: [" + address + "]\n");
  };
  CHECK(addressError("localhost") ==
        "c.yaml:3:12: cluster.worker[0]: expected host:port, got 'localhost'");
  CHECK(addressError("2222") == "c.yaml:3:12: cluster.worker[0]: expected host:port, got 2222");
  CHECK(addressError(":2222") ==
        "c.yaml:3:12: cluster.worker[0]: expected host:port with a non-empty host, got ':2222'");
  CHECK(addressError("h:0") ==
        "c.yaml:3:12: cluster.worker[0]: expected host:port with a port in 1..65535, got 'h:0'");
  CHECK(addressError("h:65536") ==
        "c.yaml:3:12: cluster.worker[0]: expected host:port with a port in 1..65535, got "
        "'h:65536'");
  CHECK(addressError("\"h:\"") ==
        "c.yaml:3:12: cluster.worker[0]: expected host:port with a port in 1..65535, got the "
        "quoted string 'h:'");
  for (const std::string multicast :
       {"224.0.0.1:2221", "239.255.255.250:2221", "255.255.255.255:2221", "\"[ff02::1]:2221\"",
        "\"[ff02::1%lo]:2221\""})
    CHECK_THAT(addressError(multicast),
               Catch::Contains("cluster.worker[0]: expected host:port with a unicast address (a "
                               "multicast or broadcast one is no task's)"));
  CHECK(addressError("h:+80") ==
        "c.yaml:3:12: cluster.worker[0]: expected host:port with a port in 1..65535, got 'h:+80'");
  CHECK(addressError("h:99999999999999999999") ==
        "c.yaml:3:12: cluster.worker[0]: expected host:port with a port in 1..65535, got "
        "'h:99999999999999999999'");
  CHECK(addressError("\"a b:1\"") ==
        "c.yaml:3:12: cluster.worker[0]: expected host:port with a host of letters, digits, '-', "
        "'.' and '_', got the quoted string 'a b:1'");
  CHECK(addressError("::1:2222") ==
        "c.yaml:3:12: cluster.worker[0]: expected host:port with an IPv6 host in brackets, as "
        "\"[::1]:2222\", got '::1:2222'");
  CHECK(addressError("\"[::1]2222\"") ==
        "c.yaml:3:12: cluster.worker[0]: expected [ipv6]:port, got the quoted string '[::1]2222'");
  CHECK(addressError("\"[]:2222\"") ==
        "c.yaml:3:12: cluster.worker[0]: expected [ipv6]:port with an IPv6 address in brackets, "
        "got the quoted string '[]:2222'");
  CHECK(addressError("\"[host]:2222\"") ==
        "c.yaml:3:12: cluster.worker[0]: expected [ipv6]:port with an IPv6 address in brackets, "
        "got the quoted string '[host]:2222'");
  // Only hex digits and colons, but no IPv6 address.
  for (const std::string lie :
       {"[:::::]:1", "[1::2::3]:1", "[12345::]:1", "[1:2:3:4:5:6:7:8:9]:1"}) {
    CHECK(addressError("\"" + lie + "\"") ==
          "c.yaml:3:12: cluster.worker[0]: expected [ipv6]:port with an IPv6 address in "
          "brackets, got the quoted string '" +
              lie + "'");
  }
  // Unquoted, YAML reads [::1]:2222 as a mapping from a list.
  CHECK(addressError("[::1]:2222") ==
        "c.yaml:3:12: cluster.worker[0]: expected host:port (an IPv6 address goes in quotes, as "
        "\"[::1]:2222\"), got a mapping");
  // In a block list it is not YAML at all.
  CHECK(errorOf("cluster:\n  ps: [a:1]\n  worker:\n    - [::1]:2222\n") ==
        "c.yaml:4:12: invalid YAML: end of sequence not found (an IPv6 address must be quoted: "
        "\"[::1]:2222\")");
  CHECK(errorOf("cluster:\n  ps: [a:1]\n  worker:\n    - \"[::1]:2222\"\n  x: [1, 2\n") ==
        "c.yaml:6:1: invalid YAML: end of sequence flow not found");
  // Nor one in a comment, where the fault is elsewhere.
  CHECK(errorOf("cluster:\n  ps: [a:1]  # was [::1]:2222\n  x: [1, 2\n") ==
        "c.yaml:4:1: invalid YAML: end of sequence flow not found");
  // A tab in the indentation, which yaml-cpp's words do not name.
  CHECK(errorOf("cluster:\n\tps: [a:1]\n") ==
        "c.yaml:2:4: invalid YAML: illegal map value (a tab indents line 2: YAML indents with "
        "spaces only)");
}

TEST_CASE("an address used twice names both places", "[cluster_spec]") {
  CHECK(errorOf("cluster:\n"
                "  ps: [127.0.0.1:2221, 127.0.0.1:2222]\n"
                "  worker: [127.0.0.1:2223, 127.0.0.1:2222]\n") ==
        "c.yaml:3:28: cluster.worker[1]: duplicate address 127.0.0.1:2222 (cluster.ps[1] at "
        "line 2, column 24 has it too)");
  // Two joined are no IPv6 address.
  CHECK(errorOf("cluster:\n  ps: [a:1]\n  worker: [\"b:1,c:2\"]\n") ==
        "c.yaml:3:12: cluster.worker[0]: expected one host:port, not several joined by ',', got "
        "the quoted string 'b:1,c:2'");
  // An IPv4-mapped IPv6 address is its IPv4 address to a socket.
  CHECK_THAT(errorOf("cluster:\n"
                     "  ps: [127.0.0.1:2222]\n"
                     "  worker: [\"[::ffff:127.0.0.1]:2222\"]\n"),
             Catch::StartsWith("c.yaml:3:12: cluster.worker[0]: duplicate address "
                               "[::ffff:127.0.0.1]:2222 (cluster.ps[0] at line 2"));
  CHECK(errorOf("cluster:\n"
                "  ps: [Host:1]\n"
                "  worker: [b:1, host:1]\n") ==
        "c.yaml:3:17: cluster.worker[1]: duplicate address host:1 (cluster.ps[0] at line 2, "
        "column 8 has it too)");
  CHECK(errorOf("cluster:\n"
                "  ps: [a:1]\n"
                "  worker: [\"[::1]:5\", '[::1]:5']\n") ==
        "c.yaml:3:23: cluster.worker[1]: duplicate address [::1]:5 (cluster.worker[0] at line 3, "
        "column 12 has it too)");
  // Two spellings of one IPv6 address are one address.
  CHECK(errorOf("cluster:\n"
                "  ps: [a:1]\n"
                "  worker: [\"[::1]:5\", '[0:0::1]:5']\n") ==
        "c.yaml:3:23: cluster.worker[1]: duplicate address [::1]:5 (cluster.worker[0] at line 3, "
        "column 12 has it too)");
  // One host, different ports: fine. So are two interfaces' zones, which differ by case.
  TempDir dir;
  CHECK(load(dir, "cluster: {ps: [a:1], worker: [a:2]}\n").worker[0].port == 2);
  CHECK(load(dir, "cluster: {ps: ['[fe80::1%eth0]:1'], worker: ['[FE80::1%ETH0]:1']}\n")
            .worker[0]
            .toString() == "[fe80::1%ETH0]:1");

  // An address from elsewhere (traind --http) is looked up the same way.
  const ClusterSpec spec =
      load(dir, "cluster: {ps: [Host:1], worker: [b:2]}\nhttp: {ps: [c:3], worker: [d:4]}\n");
  CHECK(fieldHolding(spec, parseHostPort("host:1", "--http")) == "cluster.ps[0]");
  CHECK(fieldHolding(spec, parseHostPort("d:4", "--http")) == "http.worker[0]");
  CHECK(!fieldHolding(spec, parseHostPort("b:3", "--http")));
}

TEST_CASE("the http section gives each task an ops address", "[cluster_spec]") {
  TempDir dir;
  const ClusterSpec with = load(dir, kCluster +
                                         "http:\n"
                                         "  ps: [127.0.0.1:8080]\n"
                                         "  worker: [127.0.0.1:8081, h:8082, \"[::1]:8083\"]\n");
  REQUIRE(with.ps_http.size() == 1);
  REQUIRE(with.worker_http.size() == 3);
  CHECK(with.ps_http[0].toString() == "127.0.0.1:8080");
  CHECK(with.worker_http[2].toString() == "[::1]:8083");
  CHECK(with.worker_http[1].location.line == 6);
  CHECK(httpAddress(with, "ps", 0)->port == 8080);
  CHECK(httpAddress(with, "worker", 1)->host == "h");
  CHECK_FALSE(httpAddress(with, "worker", 3));
  const ClusterSpec without = load(dir, kCluster);
  CHECK(without.ps_http.empty());
  CHECK(without.worker_http.empty());
  CHECK_FALSE(httpAddress(without, "worker", 0));
  CHECK(without.stall_seconds == kDefaultStallSeconds);
}

TEST_CASE("http.stall_seconds goes with or without the addresses", "[cluster_spec]") {
  TempDir dir;
  const ClusterSpec alone = load(dir, kCluster + "http: {stall_seconds: 0}\n");
  CHECK(alone.stall_seconds == 0);
  CHECK(alone.ps_http.empty());
  const ClusterSpec both =
      load(dir, kCluster + "http: {ps: [a:1], worker: [a:2, a:3, a:4], stall_seconds: 60}\n");
  CHECK(both.stall_seconds == 60);
  CHECK(both.worker_http.size() == 3);
  CHECK(errorOf(kCluster + "http: {stall_seconds: -1}\n") ==
        "c.yaml:4:23: http.stall_seconds: expected a non-negative integer, got -1");
  CHECK(errorOf(kCluster + "http: {stall_seconds: 604801}\n") ==
        "c.yaml:4:23: http.stall_seconds: expected a non-negative integer of at most 604800, got "
        "604801");
  CHECK(errorOf(kCluster + "http: {worker: [a:2, a:3, a:4], stall_seconds: 60}\n") ==
        "c.yaml:4:7: http: missing field 'ps'");
  CHECK(errorOf(kCluster + "http: {}\n") == "c.yaml:4:7: http: missing field 'ps'");
}

TEST_CASE("http addresses match the tasks and clash with nothing", "[cluster_spec]") {
  CHECK(errorOf(kCluster + "http:\n  ps: [a:1]\n  worker: [a:2, a:3]\n") ==
        "c.yaml:6:11: http.worker: expected 3 addresses, one per task of cluster.worker, got 2");
  CHECK(errorOf(kCluster + "http:\n  ps: [a:1, a:2]\n  worker: [a:3, a:4, a:5]\n") ==
        "c.yaml:5:7: http.ps: expected 1 address, one per task of cluster.ps, got 2");
  CHECK(errorOf(kCluster + "http: {ps: [a:1]}\n") == "c.yaml:4:7: http: missing field 'worker'");
  CHECK(errorOf(kCluster + "http: {ps: [a:1], workers: [a:2]}\n") ==
        "c.yaml:4:19: http: unknown field 'workers' (did you mean 'worker'?)");
  CHECK(errorOf(kCluster + "http: {ps: [a:1], worker: [a:2, a:3, 127.0.0.1:2223]}\n") ==
        "c.yaml:4:38: http.worker[2]: duplicate address 127.0.0.1:2223 (cluster.worker[1] at "
        "line 3, column 28 has it too)");
  CHECK(errorOf(kCluster + "http: {ps: [a:1], worker: [a:2, a:1, a:3]}\n") ==
        "c.yaml:4:33: http.worker[1]: duplicate address a:1 (http.ps[0] at line 4, column 13 has "
        "it too)");
  CHECK(errorOf(kCluster + "http: {ps: [a:0], worker: [a:2, a:3, a:4]}\n") ==
        "c.yaml:4:13: http.ps[0]: expected host:port with a port in 1..65535, got 'a:0'");
}

TEST_CASE("parseHostPort reads a flag as the spec reads an address", "[cluster_spec]") {
  const HostPort address = parseHostPort("[fe80::1%eth0]:9100", "--http");
  CHECK(address.host == "fe80::1%eth0");
  CHECK(address.port == 9100);
  CHECK(parseHostPort("node-1.example.com:80", "--node").toString() == "node-1.example.com:80");
  auto error = [](const std::string& text) {
    try {
      parseHostPort(text, "--http");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error("8080") == "--http: expected host:port, got '8080'");
  CHECK(error("h:70000") == "--http: expected host:port with a port in 1..65535, got 'h:70000'");
  CHECK(error("::1:80") ==
        "--http: expected host:port with an IPv6 host in brackets, as \"[::1]:2222\", got "
        "'::1:80'");
  CHECK(error("http://127.0.0.1:9100") ==
        "--http: expected host:port, without a scheme such as \"http://\", got "
        "'http://127.0.0.1:9100'");
}

TEST_CASE("fields of the other training mode are refused", "[cluster_spec]") {
  CHECK(errorOf(kCluster + "training: {replicas_to_aggregate: 2}\n") ==
        "c.yaml:4:35: training.replicas_to_aggregate: only meaningful with mode: sync");
  CHECK(errorOf(kCluster + "training:\n  mode: async\n  total_num_replicas: 3\n") ==
        "c.yaml:6:23: training.total_num_replicas: only meaningful with mode: sync");
  CHECK(errorOf(kCluster + "training: {mode: sync, max_staleness: 1}\n") ==
        "c.yaml:4:39: training.max_staleness: only meaningful with mode: async");
  CHECK(errorOf(kCluster + "training: {mode: bulk}\n") ==
        "c.yaml:4:18: training.mode: expected one of async, sync, got 'bulk'");
  CHECK(errorOf(kCluster + "training: {max_staleness: -1}\n") ==
        "c.yaml:4:27: training.max_staleness: expected a non-negative integer, got -1");
  CHECK(errorOf(kCluster + "training: {peer_wait_seconds: 0}\n") ==
        "c.yaml:4:31: training.peer_wait_seconds: expected a positive integer, got 0");
  CHECK(errorOf(kCluster + "training: {peer_wait_seconds: 604801}\n") ==
        "c.yaml:4:31: training.peer_wait_seconds: expected a positive integer of at most 604800, "
        "got 604801");
}

TEST_CASE("sync counts: 1 <= replicas_to_aggregate <= total_num_replicas == workers",
          "[cluster_spec]") {
  CHECK(errorOf(kCluster + "training: {mode: sync, replicas_to_aggregate: 0}\n") ==
        "c.yaml:4:47: training.replicas_to_aggregate: expected a positive integer, got 0");
  CHECK(errorOf(kCluster + "training: {mode: sync, replicas_to_aggregate: 4}\n") ==
        "c.yaml:4:47: training.replicas_to_aggregate: expected at most total_num_replicas (3, the "
        "number of workers), got 4");
  CHECK(errorOf(kCluster + "training: {mode: sync, total_num_replicas: 4}\n") ==
        "c.yaml:4:44: training.total_num_replicas: expected 3 (the number of workers), got 4");
  CHECK(errorOf(kCluster +
                "training: {mode: sync, total_num_replicas: 2, replicas_to_aggregate: 2}\n") ==
        "c.yaml:4:44: training.total_num_replicas: expected 3 (the number of workers), got 2");
  CHECK(errorOf(kCluster + "training: {mode: sync, total_num_replicas: \"3\"}\n") ==
        "c.yaml:4:44: training.total_num_replicas: expected a positive integer, got the quoted "
        "string '3'");
}

TEST_CASE("a missing, empty, oversized or malformed file", "[cluster_spec]") {
  TempDir dir;
  const std::string missing = (dir.path() / "nope.yaml").string();
  try {
    loadClusterSpec(missing);
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()) ==
          missing + ": cannot read the cluster spec: No such file or directory");
  }
  CHECK(errorOf("") == "c.yaml: expected a mapping of fields, got an empty value");
  CHECK(errorOf(std::string(2 << 20, '#')) ==
        "c.yaml: expected a cluster spec of at most 1048576 bytes, got 2097152 bytes");
  const std::string syntax = errorOf("cluster:\n  ps: [a:1\n  worker: [b:1]\n");
  CHECK(syntax.rfind("c.yaml:3:", 0) == 0);
  CHECK(syntax.find("invalid YAML: ") != std::string::npos);
  CHECK(errorOf("cluster: {ps: [a:1], worker: [b:1]}\ncluster: {ps: [c:1], worker: [d:1]}\n") ==
        "c.yaml:2:1: duplicate field 'cluster' (first given at line 1)");
}

TEST_CASE("checkTask accepts the cluster's tasks only", "[cluster_spec]") {
  const ClusterSpec cluster = loadClusterSpec(configPath("local_async.yaml"));
  CHECK_NOTHROW(checkTask(cluster, "ps", 0));
  CHECK_NOTHROW(checkTask(cluster, "worker", 0));
  CHECK_NOTHROW(checkTask(cluster, "worker", 1));
  const std::string in = " in " + configPath("local_async.yaml");
  CHECK(taskError(cluster, "worker", 3) == "--task 3: the cluster has 2 worker tasks (0..1)" + in);
  CHECK(taskError(cluster, "worker", -1) ==
        "--task -1: the cluster has 2 worker tasks (0..1)" + in);
  CHECK(taskError(cluster, "ps", 1) == "--task 1: the cluster has 1 ps task (0)" + in);
  CHECK(taskError(cluster, "chief", 0) == "--job 'chief': expected ps or worker");
  CHECK(taskError(cluster, "", 0) == "--job '': expected ps or worker");
}
