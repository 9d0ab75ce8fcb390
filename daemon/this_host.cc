#include "daemon/this_host.h"

#include <fmt/format.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <vector>

namespace traind {
namespace {

// The address bytes of an IPv4 or IPv6 socket address, empty for others.
std::string addressBytes(const sockaddr* address) {
  if (address->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(address);
    return std::string(reinterpret_cast<const char*>(&in->sin_addr), sizeof in->sin_addr);
  }
  if (address->sa_family == AF_INET6) {
    const auto* in = reinterpret_cast<const sockaddr_in6*>(address);
    return std::string(reinterpret_cast<const char*>(&in->sin6_addr), sizeof in->sin6_addr);
  }
  return {};
}

bool isLoopback(const sockaddr* address) {
  if (address->sa_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(address)->sin_addr.s_addr) >> 24) == 127;
  if (address->sa_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
  }
  return false;
}

// Read once: a worker asks about every worker of its cluster as it starts.
const std::vector<std::string>& interfaceAddresses() {
  static const std::vector<std::string> addresses = [] {
    std::vector<std::string> found;
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) return found;
    for (const ifaddrs* i = list; i; i = i->ifa_next)
      if (i->ifa_addr) {
        std::string bytes = addressBytes(i->ifa_addr);
        if (!bytes.empty()) found.push_back(std::move(bytes));
      }
    freeifaddrs(list);
    return found;
  }();
  return addresses;
}

// The addresses `host` resolves to here, empty when it does not resolve;
// an IPv4-mapped IPv6 address (::ffff:127.0.0.1) as the IPv4 one it is,
// which its socket takes the port of.
std::vector<sockaddr_storage> resolve(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  std::vector<sockaddr_storage> addresses;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return addresses;
  for (const addrinfo* a = found; a; a = a->ai_next) {
    sockaddr_storage address{};
    std::copy_n(reinterpret_cast<const char*>(a->ai_addr),
                std::min<size_t>(a->ai_addrlen, sizeof address), reinterpret_cast<char*>(&address));
    if (const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&address);
        address.ss_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
      sockaddr_in in{};
      in.sin_family = AF_INET;
      in.sin_port = in6->sin6_port;
      std::memcpy(&in.sin_addr, &in6->sin6_addr.s6_addr[12], sizeof in.sin_addr);
      address = {};
      std::memcpy(&address, &in, sizeof in);
    }
    addresses.push_back(address);
  }
  freeaddrinfo(found);
  return addresses;
}

const sockaddr* asSockaddr(const sockaddr_storage& address) {
  return reinterpret_cast<const sockaddr*>(&address);
}

// A name that means this host's loopback wherever it is read ("localhost",
// RFC 6761, and Debian's IPv6 ones): no /etc/hosts should map it elsewhere.
bool namesLoopback(std::string host) {
  std::transform(host.begin(), host.end(), host.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  if (host.ends_with('.')) host.pop_back();
  return host == "localhost" || host.ends_with(".localhost") || host == "ip6-localhost" ||
         host == "ip6-loopback";
}

bool isWildcard(const sockaddr* address) {
  if (address->sa_family == AF_INET)
    return reinterpret_cast<const sockaddr_in*>(address)->sin_addr.s_addr == htonl(INADDR_ANY);
  if (address->sa_family == AF_INET6)
    return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr);
  return false;
}

// Whether an IPv6 socket takes IPv4 too unless told otherwise (Linux's
// net.ipv6.bindv6only, 0 unless an administrator set it).
bool ipv6TakesIpv4() {
  std::ifstream setting("/proc/sys/net/ipv6/bindv6only");
  int only = 0;
  return !(setting >> only) || only == 0;
}

// Whether a listener on `wildcard` takes the port of `other` too.
bool covers(const sockaddr* wildcard, const sockaddr* other) {
  return isWildcard(wildcard) && (wildcard->sa_family == other->sa_family ||
                                  (wildcard->sa_family == AF_INET6 && ipv6TakesIpv4()));
}

// Whether two socket addresses are one: family, address, and for IPv6 the
// zone (fe80::1%eth0 and fe80::1%eth1 are two).
bool sameAddress(const sockaddr* a, const sockaddr* b) {
  if (a->sa_family != b->sa_family || addressBytes(a) != addressBytes(b)) return false;
  return a->sa_family != AF_INET6 || reinterpret_cast<const sockaddr_in6*>(a)->sin6_scope_id ==
                                         reinterpret_cast<const sockaddr_in6*>(b)->sin6_scope_id;
}

}  // namespace

bool isThisHost(const std::string& host) {
  const std::vector<std::string>& own = interfaceAddresses();
  const std::vector<sockaddr_storage> addresses = resolve(host);
  // A wildcard (0.0.0.0, [::]) means every address of the host that reads it.
  return std::any_of(addresses.begin(), addresses.end(), [&](const sockaddr_storage& a) {
    return isLoopback(asSockaddr(a)) || isWildcard(asSockaddr(a)) ||
           std::find(own.begin(), own.end(), addressBytes(asSockaddr(a))) != own.end();
  });
}

std::optional<std::string> unreachableFromOtherHosts(const ClusterSpec& cluster,
                                                     const HostPort& address,
                                                     const std::string& field, Listener listener) {
  // The first address is the one bound (the ps and the ops server listen on
  // that one only).
  const std::vector<sockaddr_storage> addresses = resolve(address.host);
  if (addresses.empty() || !isLoopback(asSockaddr(addresses.front()))) return std::nullopt;
  // A ps is reached by the workers; an ops server by trainctl and metrics
  // scrapers, which a cluster spread over hosts runs on any of them.
  std::optional<std::string> remote;  // the first client's "worker 1 (h1:2222)"
  const auto findRemote = [&](const char* job, const std::vector<HostPort>& tasks) {
    for (size_t i = 0; i < tasks.size() && !remote; ++i)
      if (!isThisHost(tasks[i].host))
        remote = fmt::format("{} {} ({})", job, i, tasks[i].toString());
  };
  if (listener == Listener::OpsServer) findRemote("ps", cluster.ps);
  findRemote("worker", cluster.worker);
  if (!remote) return std::nullopt;
  const std::string loopback = hostPortOf(*asSockaddr(addresses.front())).host;
  const bool named = loopback != address.host;
  return fmt::format(
      "{}: {} listens on {}, a loopback address{}, but {} is on another host{}: write this host's "
      "network address in the cluster spec{}",
      field, address.toString(), loopback,
      named ? fmt::format(" ({} resolves to it here)", address.host) : "", *remote,
      listener == Listener::Ps ? " and cannot reach it"
                               : ", and trainctl or a metrics scraper there cannot reach it",
      named && !namesLoopback(address.host)
          ? fmt::format(", or map {} to that address in /etc/hosts (Debian maps a host's own "
                        "name to 127.0.1.1)",
                        address.host)
          : "");
}

std::optional<std::string> sameListeningPort(const HostPort& a, const HostPort& b) {
  if (a.port != b.port) return std::nullopt;
  const std::vector<sockaddr_storage> resolved_a = resolve(a.host);
  const std::vector<sockaddr_storage> resolved_b = resolve(b.host);
  if (resolved_a.empty() || resolved_b.empty()) return std::nullopt;
  const sockaddr* first_a = asSockaddr(resolved_a.front());
  const sockaddr* first_b = asSockaddr(resolved_b.front());
  const bool equal = sameAddress(first_a, first_b);
  if (!equal && !covers(first_a, first_b) && !covers(first_b, first_a)) return std::nullopt;
  std::vector<std::string> reasons;
  const std::pair<const HostPort*, const sockaddr*> listeners[] = {{&a, first_a}, {&b, first_b}};
  for (const auto& [given, first] : listeners) {
    const std::string bound = hostPortOf(*first).host;
    if (bound != given->host) reasons.push_back(fmt::format("{} is {} here", given->host, bound));
  }
  for (const auto& [given, first] : listeners)
    if (!equal && isWildcard(first)) {
      const bool ipv6 = first->sa_family == AF_INET6;
      reasons.push_back(ipv6 ? "[" + given->host + "] takes this port of every address"
                             : given->host + " takes this port of every IPv4 address");
    }
  if (reasons.empty()) reasons.push_back("one address");
  return fmt::format("{}", fmt::join(reasons, "; "));
}

}  // namespace traind
