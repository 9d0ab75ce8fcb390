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

// What listens on an address of the cluster spec, and so who connects to
// it: the ps tasks' RPC addresses the workers; the ops servers' (`http`)
// trainctl and metrics scrapers, from any host of the cluster.
enum class Listener { Ps, OpsServer };

// Why `address`, where this node listens (`field` of the spec, as
// "cluster.ps[0]"), cannot be reached from those that connect to it, if a
// task of `cluster` on another host says they may be there: its host's
// first address here (the one bound) is a loopback address. Debian's
// /etc/hosts maps a host's own name to 127.0.1.1, so `ps0:2221` on host ps0
// would listen on 127.0.1.1, and every worker elsewhere would wait for it
// until peer_wait_seconds ran out. Nullopt when they are all on this host
// (a local cluster on 127.0.0.1, or on names that are this host).
std::optional<std::string> unreachableFromOtherHosts(const ClusterSpec& cluster,
                                                     const HostPort& address,
                                                     const std::string& field, Listener listener);

// Why `a` and `b`, both listened on by this node, would take one port here,
// or nullopt: the same port on the first addresses their hosts resolve to
// (the ones bound), and those equal, or one a wildcard that takes the
// other's port too: 0.0.0.0 every IPv4 address's, [::] every address's
// (Linux's IPv6 sockets take IPv4 too unless net.ipv6.bindv6only says
// otherwise). A link-local address's zone is part of it. The reason
// says what was resolved: "vm is 127.0.0.1 here", "[::] takes this port of
// every address". Hosts that do not resolve are left to the bind to report.
std::optional<std::string> sameListeningPort(const HostPort& a, const HostPort& b);

}  // namespace traind
