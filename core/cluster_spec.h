// The cluster spec: where the nodes of a job are and how they train
// together. Every node reads the same file; docs/cluster-spec.md is the
// reference of its format.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/model_spec.h"

struct sockaddr;

namespace traind {

struct HostPort {
  std::string host;  // a name or an IPv4/IPv6 address
  uint16_t port = 0;
  SourceLocation location;

  std::string toString() const;  // "host:port", IPv6 in brackets
};

enum class TrainingMode { Async, Sync };

// http.stall_seconds: its default (what a standalone run and a spec without
// the field get), and the most it takes (a week; 0 turns the check off).
constexpr int64_t kDefaultStallSeconds = 300;
constexpr int64_t kMaxStallSeconds = 7 * 24 * 3600;
// training.peer_wait_seconds: its default and its most (a week).
constexpr int64_t kDefaultPeerWaitSeconds = 600;
constexpr int64_t kMaxPeerWaitSeconds = 7 * 24 * 3600;

struct ClusterSpec {
  std::string path;
  std::vector<HostPort> ps;      // at least one
  std::vector<HostPort> worker;  // at least one; worker 0 is the chief
  TrainingMode mode = TrainingMode::Async;
  // Sync: a step applies the average of the first replicas_to_aggregate
  // gradients of that step; later ones for that step are dropped as stale.
  // total_num_replicas is always the number of workers, so
  // replicas_to_aggregate < number of workers gives backup workers. Both
  // default to the number of workers (also in async mode, where they are
  // not used).
  int replicas_to_aggregate = 0;
  int total_num_replicas = 0;
  // Async: a worker more than max_staleness of its own steps ahead of the
  // slowest connected worker waits for it before its next pull (0: no
  // bound; docs/cluster-spec.md).
  int64_t max_staleness = 0;
  // How long a worker waits for its ps tasks to answer, and for the chief
  // to initialise them, before it gives up (exit 1): any start order works
  // within it.
  int64_t peer_wait_seconds = kDefaultPeerWaitSeconds;
  // Overrides the model spec's checkpoint section when present.
  std::optional<CheckpointSpec> checkpoint;
  // transport.shared_memory: a worker and a ps on one host move tensors
  // through shared memory (auto, true) or always over TCP (off, false);
  // rpc/shared_region.h.
  bool shared_memory = true;
  // The ops HTTP address (/healthz, /metrics, /status) of each task,
  // parallel to ps and worker; both empty when the spec's http section is
  // absent or holds only stall_seconds.
  std::vector<HostPort> ps_http;
  std::vector<HostPort> worker_http;
  // http.stall_seconds: how long a training or serving node's global step
  // may stand still before its /healthz answers 503 (0: however long).
  int64_t stall_seconds = kDefaultStallSeconds;
};

// Reads and checks a cluster spec: addresses parse, none is repeated (the
// http section's included), the http lists match the cluster's, sync
// counts are consistent (1 <= replicas_to_aggregate <= total_num_replicas,
// total_num_replicas == number of workers), fields of the other mode are
// absent. A relative checkpoint dir is resolved against the file's
// directory. Throws InputError naming file:line:column and the field.
ClusterSpec loadClusterSpec(const std::string& path);

// How the job trains, as every node must read it: the mode with its
// aggregation or staleness bound and the ps and worker addresses, as one
// line ("sync, replicas_to_aggregate 2 of 3, ps [10.0.0.1:2221], workers
// [...]"). Nodes compare it at hello (rpc/shard_service.h).
std::string trainingRule(const ClusterSpec& cluster);

// Throws InputError unless `job` is "ps" or "worker" and 0 <= task < that
// job's number of tasks ("--task 3: the cluster has 2 worker tasks (0..1)
// in cluster.yaml"): the check of a node's --job and --task.
void checkTask(const ClusterSpec& cluster, const std::string& job, int task);

// "host:port" or "[ipv6]:port" from a flag, checked as the spec's
// addresses are; InputError "<what>: expected ..., got '...'" otherwise.
HostPort parseHostPort(const std::string& text, const std::string& what);

// The address and port of an IPv4 or IPv6 socket address (getsockname's,
// getaddrinfo's), the address as inet_ntop writes it, with a link-local
// one's zone ("fe80::1%eth0", as a spec writes it); "?" and port 0 for
// another family.
HostPort hostPortOf(const sockaddr& address);

// The addresses `address`'s host resolves to on this host, in the
// resolver's order, each with `address`'s port: one for an address, and
// for a name as many as it has (a task listens on the first; a peer
// connecting tries each in turn). Empty when it does not resolve.
std::vector<HostPort> resolvedAddresses(const HostPort& address);

// Why `address` ("[fe80::1%eth0]:2221") cannot resolve on this host when its
// zone names no interface here, to append to a failure that otherwise has
// only the resolver's "Name or service not known": " (this host has no
// interface 'eth0', the address's zone)". Empty for any other address.
std::string missingZoneNote(std::string_view address);

// The ops HTTP address of a task (checked by checkTask), or nullopt when the
// spec has no http section.
std::optional<HostPort> httpAddress(const ClusterSpec& cluster, const std::string& job, int task);

// The field of `cluster` that holds `address` ("cluster.ps[0]", "http.worker[1]"),
// if one does: an address given apart from the spec (traind --http) that
// another listener of the job takes.
std::optional<std::string> fieldHolding(const ClusterSpec& cluster, const HostPort& address);

}  // namespace traind
