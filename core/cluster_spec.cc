#include "core/cluster_spec.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <filesystem>
#include <map>
#include <optional>
#include <string_view>
#include <utility>

#include "core/yaml_fields.h"

namespace traind {

using namespace yaml_fields;

namespace {

namespace fs = std::filesystem;

bool isHostNameCharacter(char c) {
  return std::isalnum(uint8_t(c)) || c == '-' || c == '.' || c == '_';
}

// The inside of "[...]" as inet_ntop writes it ("0::1" is "::1", so that
// two spellings of one address are seen as duplicates), with its zone
// ("%eth0", for link-local addresses) as given; nullopt if it is no IPv6
// address.
std::optional<std::string> canonicalIpv6(std::string_view text) {
  const size_t percent = text.find('%');
  const std::string address(text.substr(0, percent));
  in6_addr parsed{};
  if (inet_pton(AF_INET6, address.c_str(), &parsed) != 1) return std::nullopt;
  char canonical[INET6_ADDRSTRLEN];
  if (!inet_ntop(AF_INET6, &parsed, canonical, sizeof canonical)) return std::nullopt;
  if (percent == std::string_view::npos) return std::string(canonical);
  const std::string_view zone = text.substr(percent + 1);
  if (zone.empty() || !std::all_of(zone.begin(), zone.end(), isHostNameCharacter))
    return std::nullopt;
  // The resolver takes a zone on a link-local address only, and said of any
  // other "Name or service not known" when a node started.
  if (!IN6_IS_ADDR_LINKLOCAL(&parsed) && !IN6_IS_ADDR_MC_LINKLOCAL(&parsed)) return std::nullopt;
  return std::string(canonical) + "%" + std::string(zone);
}

// Whether `host` has the shape DNS allows a name (RFC 1123): at most 253
// characters, labels of 1 to 63 between dots (one dot may end it), none
// starting or ending with '-'. An IPv4 address has it too. A name without
// it would fail only at the first connection, far from the spec's line.
bool hasHostNameShape(std::string_view host) {
  if (host.ends_with('.')) host.remove_suffix(1);
  if (host.empty() || host.size() > 253) return false;
  for (size_t start = 0; start <= host.size();) {
    const size_t dot = std::min(host.find('.', start), host.size());
    const std::string_view label = host.substr(start, dot - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-')
      return false;
    start = dot + 1;
  }
  return true;
}

// Whether `host` reads as an IPv4 address rather than a name, but not as
// the four decimal numbers inet_pton takes: every label is a decimal
// number, or the C library reads it as one, its own way ("010.0.0.1" in
// octal, 8.0.0.1; "127.1" as 127.0.0.1; "0x7f000001").
bool isIpv4OtherThanWritten(std::string_view host) {
  const std::string text(host);
  in_addr parsed{};
  if (inet_pton(AF_INET, text.c_str(), &parsed) == 1) return false;
  if (inet_aton(text.c_str(), &parsed) != 0) return true;
  if (host.ends_with('.')) host.remove_suffix(1);
  for (size_t start = 0; start <= host.size();) {
    const size_t dot = std::min(host.find('.', start), host.size());
    const std::string_view label = host.substr(start, dot - start);
    if (label.empty() ||
        !std::all_of(label.begin(), label.end(), [](char c) { return std::isdigit(uint8_t(c)); }))
      return false;
    start = dot + 1;
  }
  return true;
}

// Whether `host` is an IPv4 or IPv6 literal of a multicast or broadcast
// address, where nothing listens and no connection goes (a ps "listened"
// on 224.0.0.1, and its workers waited out peer_wait_seconds).
bool isMulticastOrBroadcast(const std::string& host) {
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    const uint32_t address = ntohl(v4.s_addr);
    return (address >> 28) == 0xe || address == 0xffffffffu;
  }
  in6_addr v6{};
  const std::string address = host.substr(0, host.find('%'));
  return inet_pton(AF_INET6, address.c_str(), &v6) == 1 && IN6_IS_ADDR_MULTICAST(&v6);
}

// Parses "host:port" or "[ipv6]:port" into `out`; returns what was expected
// when `text` is not one. Names are not resolved here: a name that does not
// resolve is a connection failure later, reported with its address.
const char* parseAddress(std::string_view text, HostPort& out) {
  std::optional<std::string> ipv6;  // what host views for "[...]"
  std::string_view host;
  std::string_view port;
  if (text.find("://") != std::string_view::npos)
    return "host:port, without a scheme such as \"http://\"";
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return "[ipv6]:port";
    const std::string_view inside = text.substr(1, close - 1);
    ipv6 = canonicalIpv6(inside);
    if (!ipv6)
      return inside.find('%') == std::string_view::npos
                 ? "[ipv6]:port with an IPv6 address in brackets"
             : inside.ends_with('%')
                 ? "[ipv6%zone]:port with a zone after the '%' (an interface, as %eth0)"
                 : "[ipv6%zone]:port with a zone (an interface, as %eth0) on a "
                   "link-local IPv6 address only (fe80::/10)";
    host = *ipv6;
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return "host:port";
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (text.find(',') != std::string_view::npos) return "one host:port, not several joined by ','";
    if (host.find(':') != std::string_view::npos)
      return "host:port with an IPv6 host in brackets, as \"[::1]:2222\"";
    if (host.empty()) return "host:port with a non-empty host";
    if (!std::all_of(host.begin(), host.end(), isHostNameCharacter))
      return "host:port with a host of letters, digits, '-', '.' and '_'";
    if (!hasHostNameShape(host))
      return "host:port with a host name of labels of 1 to 63 characters between dots, none "
             "starting or ending with '-', 253 characters in all";
    if (isIpv4OtherThanWritten(host))
      return "host:port with an IPv4 address of four numbers from 0 to 255, without leading "
             "zeros, as \"10.0.0.1\" (or a name, which is not all numbers)";
  }
  int value = 0;
  const auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), value);
  const bool all_digits = !port.empty() && std::all_of(port.begin(), port.end(), [](char c) {
    return std::isdigit(uint8_t(c));
  });
  if (!all_digits || error != std::errc() || end != port.data() + port.size() || value < 1 ||
      value > 65535) {
    return "host:port with a port in 1..65535";
  }
  if (isMulticastOrBroadcast(std::string(host)))
    return "host:port with a unicast address (a multicast or broadcast one is no task's)";
  out.host = std::string(host);
  out.port = uint16_t(value);
  return nullptr;
}

HostPort readAddress(const Field& field) {
  if (!field.node.IsScalar()) {
    // `[::1]:2222` unquoted is YAML for a list or a mapping.
    failExpected(field, "host:port (an IPv6 address goes in quotes, as \"[::1]:2222\")");
  }
  if (!isText(field.node)) failExpected(field, "host:port");
  HostPort address;
  if (const char* expected = parseAddress(field.node.Scalar(), address))
    failExpected(field, expected);
  address.location = field.where;
  return address;
}

std::vector<HostPort> readJob(const Field& field) {
  const std::vector<Field> items = listItems(field, "a list of host:port addresses");
  if (items.empty())
    fail(field, "expected a non-empty list of host:port addresses, got an empty list");
  std::vector<HostPort> tasks;
  tasks.reserve(items.size());
  for (const Field& item : items) tasks.push_back(readAddress(item));
  return tasks;
}

// One address per task, as many as `tasks` has (`what` names that list).
std::vector<HostPort> readJobParallel(const Field& field, size_t tasks, std::string_view what) {
  std::vector<HostPort> addresses = readJob(field);
  if (addresses.size() != tasks) {
    fail(field, "expected " + std::to_string(tasks) + " address" + (tasks == 1 ? "" : "es") +
                    ", one per task of " + std::string(what) + ", got " +
                    std::to_string(addresses.size()));
  }
  return addresses;
}

// An address as two of its spellings compare: host names without case,
// an IPv6 address's zone (an interface's name, which Linux matches with
// case: eth0 is not ETH0) with it, an IPv4-mapped IPv6 address
// ([::ffff:127.0.0.1]) as its IPv4 address, which a socket bound to it
// holds. Different spellings of one host (a name and its address) differ,
// since nothing is resolved here.
std::string addressKey(const HostPort& address) {
  std::string key = address.toString();
  const size_t zone = key.find('%');
  std::transform(key.begin(), zone == std::string::npos ? key.end() : key.begin() + zone,
                 key.begin(), [](char c) { return char(std::tolower(uint8_t(c))); });
  constexpr std::string_view kMapped = "[::ffff:";
  if (const size_t close = key.find(']'); key.starts_with(kMapped) && zone == std::string::npos &&
                                          close != std::string::npos && key.find('.') < close)
    key = key.substr(kMapped.size(), close - kMapped.size()) + key.substr(close + 1);
  return key;
}

// Every address of the spec with its field: the tasks', then the ops servers'.
std::vector<std::pair<std::string, const HostPort*>> addressesOf(const ClusterSpec& spec) {
  std::vector<std::pair<std::string, const HostPort*>> all;
  const std::pair<const char*, const std::vector<HostPort>*> lists[] = {
      {"cluster.ps", &spec.ps},
      {"cluster.worker", &spec.worker},
      {"http.ps", &spec.ps_http},
      {"http.worker", &spec.worker_http}};
  for (const auto& [list, tasks] : lists)
    for (size_t i = 0; i < tasks->size(); ++i)
      all.emplace_back(std::string(list) + "[" + std::to_string(i) + "]", &(*tasks)[i]);
  return all;
}

// Two tasks on one address cannot both listen there, nor a task's RPC and
// HTTP servers.
void checkDistinctAddresses(const ClusterSpec& spec) {
  std::map<std::string, std::string> first_at;  // address -> "cluster.ps[0] at line 2, column 9"
  for (const auto& [path, address] : addressesOf(spec)) {
    const auto [seen, inserted] = first_at.try_emplace(
        addressKey(*address), path + " at line " + std::to_string(address->location.line) +
                                  ", column " + std::to_string(address->location.column));
    if (!inserted)
      throwInputError(
          address->location, path,
          "duplicate address " + address->toString() + " (" + seen->second + " has it too)");
  }
}

// Sets the mode and its fields; without the section, async with the
// defaults. Sync counts default to the number of workers.
void readTraining(const std::optional<Field>& section, ClusterSpec& spec) {
  const int workers = int(spec.worker.size());
  spec.replicas_to_aggregate = workers;
  spec.total_num_replicas = workers;
  if (!section) return;
  Mapping fields(*section);
  fields.allowOnly(
      {"mode", "replicas_to_aggregate", "total_num_replicas", "max_staleness", "peer_wait_seconds"},
      "the training section");
  if (auto f = fields.find("peer_wait_seconds"))
    spec.peer_wait_seconds = readInt(*f, 1, kMaxPeerWaitSeconds);
  if (auto f = fields.find("mode")) {
    spec.mode = readChoice<TrainingMode>(
        *f, {{"async", TrainingMode::Async}, {"sync", TrainingMode::Sync}});
  }
  if (spec.mode == TrainingMode::Async) {
    for (std::string_view key : {"replicas_to_aggregate", "total_num_replicas"})
      if (auto f = fields.find(key)) fail(*f, "only meaningful with mode: sync");
    if (auto f = fields.find("max_staleness")) spec.max_staleness = readInt(*f, 0);
    return;
  }
  if (auto f = fields.find("max_staleness")) fail(*f, "only meaningful with mode: async");
  const std::string worker_count = std::to_string(workers);
  if (auto f = fields.find("total_num_replicas")) {
    if (readInt(*f, 1, INT_MAX) != workers) {
      fail(*f, "expected " + worker_count + " (the number of workers), got " + describe(f->node));
    }
  }
  if (auto f = fields.find("replicas_to_aggregate")) {
    spec.replicas_to_aggregate = int(readInt(*f, 1, INT_MAX));
    if (spec.replicas_to_aggregate > spec.total_num_replicas) {
      fail(*f, "expected at most total_num_replicas (" + worker_count +
                   ", the number of workers), got " + describe(f->node));
    }
  }
}

// How tensors travel between nodes; without the section, as `auto` says.
void readTransport(const Field& section, ClusterSpec& spec) {
  Mapping fields(section);
  fields.allowOnly({"shared_memory"}, "the transport section");
  if (auto f = fields.find("shared_memory"))
    spec.shared_memory = readChoice<bool>(*f, {{"auto", true}, {"off", false}});
}

}  // namespace

std::string HostPort::toString() const {
  const std::string port_text = std::to_string(port);
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + port_text;
  return host + ":" + port_text;
}

ClusterSpec loadClusterSpec(const std::string& path) {
  const YamlFile file = loadYamlFile(path, "cluster spec");
  std::error_code error;
  const fs::path spec_dir = fs::absolute(path, error).parent_path();

  Mapping fields(rootField(file, path));
  // The two specs of a cluster node given the other way round.
  if (auto f = fields.find("layers"); f && !fields.find("cluster"))
    fail(*f, "this is a model spec (layers, no cluster section): give it to --model, and a "
             "cluster spec to --cluster");
  fields.allowOnly({"cluster", "training", "checkpoint", "http", "transport"}, "a cluster spec");

  ClusterSpec spec;
  spec.path = path;
  Mapping cluster(fields.get("cluster"));
  cluster.allowOnly({"ps", "worker"}, "the cluster section");
  spec.ps = readJob(cluster.get("ps"));
  spec.worker = readJob(cluster.get("worker"));
  if (auto f = fields.find("http")) {
    Mapping http(*f);
    http.allowOnly({"ps", "worker", "stall_seconds"}, "the http section");
    // The addresses come as a pair; nodes started with --http may take
    // only the stall limit from here.
    if (http.find("ps") || http.find("worker") || !http.find("stall_seconds")) {
      spec.ps_http = readJobParallel(http.get("ps"), spec.ps.size(), "cluster.ps");
      spec.worker_http = readJobParallel(http.get("worker"), spec.worker.size(), "cluster.worker");
    }
    if (auto g = http.find("stall_seconds")) spec.stall_seconds = readInt(*g, 0, kMaxStallSeconds);
  }
  checkDistinctAddresses(spec);
  readTraining(fields.find("training"), spec);
  if (auto f = fields.find("transport")) readTransport(*f, spec);
  if (auto f = fields.find("checkpoint")) spec.checkpoint = readCheckpoint(*f, spec_dir);
  return spec;
}

void checkTask(const ClusterSpec& cluster, const std::string& job, int task) {
  const std::vector<HostPort>* tasks = job == "ps"       ? &cluster.ps
                                       : job == "worker" ? &cluster.worker
                                                         : nullptr;
  if (!tasks) throw InputError("--job " + quoted(job) + ": expected ps or worker");
  const int count = int(tasks->size());
  if (task >= 0 && task < count) return;
  const std::string range =
      count == 1 ? "task (0)" : "tasks (0.." + std::to_string(count - 1) + ")";
  std::string what = "--task " + std::to_string(task) + ": the cluster has " +
                     std::to_string(count) + " " + job + " " + range;
  if (!cluster.path.empty()) what += " in " + cluster.path;
  throw InputError(what);
}

HostPort hostPortOf(const sockaddr& address) {
  char host[INET6_ADDRSTRLEN] = "?";
  HostPort found;
  if (address.sa_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(address);
    inet_ntop(AF_INET, &in.sin_addr, host, sizeof host);
    found.port = ntohs(in.sin_port);
  } else if (address.sa_family == AF_INET6) {
    const auto& in = reinterpret_cast<const sockaddr_in6&>(address);
    inet_ntop(AF_INET6, &in.sin6_addr, host, sizeof host);
    found.port = ntohs(in.sin6_port);
    char zone[IF_NAMESIZE];
    if (in.sin6_scope_id != 0) {
      // The interface's name, or its index where it has none now.
      const char* name = if_indextoname(in.sin6_scope_id, zone);
      found.host = std::string(host) + "%" + (name ? name : std::to_string(in.sin6_scope_id));
      return found;
    }
  }
  found.host = host;
  return found;
}

std::vector<HostPort> resolvedAddresses(const HostPort& address) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  std::vector<HostPort> addresses;
  if (getaddrinfo(address.host.c_str(), std::to_string(address.port).c_str(), &hints, &found) != 0)
    return addresses;
  for (const addrinfo* a = found; a; a = a->ai_next) addresses.push_back(hostPortOf(*a->ai_addr));
  freeaddrinfo(found);
  return addresses;
}

std::string missingZoneNote(std::string_view address) {
  const size_t percent = address.find('%');
  const size_t bracket = address.find(']');
  if (!address.starts_with('[') || percent == std::string_view::npos ||
      bracket == std::string_view::npos || bracket < percent)
    return {};
  const std::string zone(address.substr(percent + 1, bracket - percent - 1));
  // The resolver takes an interface's index as its name.
  unsigned index = 0;
  const auto [end, error] = std::from_chars(zone.data(), zone.data() + zone.size(), index);
  char name[IF_NAMESIZE];
  if (error == std::errc() && end == zone.data() + zone.size()
          ? if_indextoname(index, name) != nullptr
          : if_nametoindex(zone.c_str()) != 0)
    return {};
  return " (this host has no interface '" + zone + "', the address's zone)";
}

HostPort parseHostPort(const std::string& text, const std::string& what) {
  HostPort address;
  if (const char* expected = parseAddress(text, address))
    throw InputError(what + ": expected " + expected + ", got " + quoted(text));
  return address;
}

std::optional<std::string> fieldHolding(const ClusterSpec& cluster, const HostPort& address) {
  for (const auto& [path, held] : addressesOf(cluster))
    if (addressKey(*held) == addressKey(address)) return path;
  return std::nullopt;
}

std::optional<HostPort> httpAddress(const ClusterSpec& cluster, const std::string& job, int task) {
  const std::vector<HostPort>& addresses = job == "ps" ? cluster.ps_http : cluster.worker_http;
  if (task < 0 || size_t(task) >= addresses.size()) return std::nullopt;
  return addresses[size_t(task)];
}

std::string trainingRule(const ClusterSpec& cluster) {
  auto addresses = [](const std::vector<HostPort>& tasks) {
    std::string list;
    for (const HostPort& task : tasks) list += (list.empty() ? "" : ", ") + task.toString();
    return "[" + list + "]";
  };
  std::string rule = cluster.mode == TrainingMode::Sync
                         ? fmt::format("sync, replicas_to_aggregate {} of {}",
                                       cluster.replicas_to_aggregate, cluster.total_num_replicas)
                         : fmt::format("async, max_staleness {}", cluster.max_staleness);
  return rule + ", ps " + addresses(cluster.ps) + ", workers " + addresses(cluster.worker);
}

}  // namespace traind
