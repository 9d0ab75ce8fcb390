// Which hosts of a cluster spec are this machine, and whether this machine's
// own address in the spec can be reached from the others.
#pragma once

#include <optional>
#include <string>

#include "core/cluster_spec.h"

namespace traind {

// Whether `host` (a name or an address of a cluster spec) is this machine:
// a loopback address, or one that resolves to an address of one of its
// network interfaces. A name that does not resolve is another machine.
bool isThisHost(const std::string& host);

// Why `address`, where this node listens (`field` of the spec, as
// "cluster.ps[0]"), cannot be reached from tasks of `cluster` on other
// hosts, if it cannot: its host resolves here to loopback addresses only.
// Debian's /etc/hosts maps a host's own name to 127.0.1.1, so `ps0:2221` on
// host ps0 would listen on 127.0.1.1, and every worker elsewhere would wait
// for it until peer_wait_seconds ran out. Nullopt when every task is on
// this host (a local cluster on 127.0.0.1, or on names that are this host).
std::optional<std::string> unreachableFromOtherHosts(const ClusterSpec& cluster,
                                                     const HostPort& address,
                                                     const std::string& field);

}  // namespace traind
