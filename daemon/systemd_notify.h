// What a node tells systemd when it runs as a Type=notify unit
// (scripts/packaging/traind@.service): READY=1 once it serves, a STATUS=
// line as it goes ("step 1200, loss = 0.4100 (5312.0 examples/sec)"), and
// STOPPING=1 when it begins a clean stop.
//
// Each call is one datagram to $NOTIFY_SOCKET, sent as sd_notify sends it
// but without waiting for a reader that does not read: a STATUS line the
// socket has no room for is dropped, READY and STOPPING wait a moment: the
// ps sends them from its event loop, which every worker's call waits on.
// Without NOTIFY_SOCKET (a shell, a container, a test) every call does
// nothing. Failures to send are ignored: systemd's view of a node must
// never stop it from training.
#pragma once

#include <string>

namespace traind {

// STATUS=`status` with READY=1 when `ready`, and with STOPPING=1 when
// `stopping` (a node that stops without having served sends both, READY
// first). A state change waits kStateChangeWaitMs at most, in all, for room
// on the socket; a STATUS line alone does not wait.
void notifySystemd(bool ready, bool stopping, const std::string& status);
constexpr int kStateChangeWaitMs = 250;

// STATUS=`status`: the one line `systemctl status` shows.
inline void notifySystemdStatus(const std::string& status) { notifySystemd(false, false, status); }

}  // namespace traind
