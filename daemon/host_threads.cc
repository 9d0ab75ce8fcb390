#include "daemon/host_threads.h"

#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
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

}  // namespace

bool isThisHost(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return false;
  const std::vector<std::string>& own = interfaceAddresses();
  bool here = false;
  for (const addrinfo* a = found; a && !here; a = a->ai_next)
    here = isLoopback(a->ai_addr) ||
           std::find(own.begin(), own.end(), addressBytes(a->ai_addr)) != own.end();
  freeaddrinfo(found);
  return here;
}

HostShare shareHostCores(const ClusterSpec& cluster, int task, int cores,
                         const std::function<bool(const std::string&)>& on_this_host) {
  HostShare share;
  share.workers = 0;
  for (size_t i = 0; i < cluster.worker.size(); ++i)
    share.workers += int(i) == task || on_this_host(cluster.worker[i].host);
  share.threads = std::max(1, cores / share.workers);
  return share;
}

}  // namespace traind
