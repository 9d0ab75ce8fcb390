// What a node tells systemd when it runs as a Type=notify unit
// (scripts/packaging/traind@.service): READY=1 once it serves, a STATUS=
// line as it goes ("step 1200, loss = 0.4100 (5312.0 examples/sec)"), and
// STOPPING=1 when it begins a clean stop.
//
// Each call is one datagram to $NOTIFY_SOCKET, sent as sd_notify sends it
// but without waiting for a reader that does not read: a STATUS line the
// socket has no room for is dropped, READY and STOPPING wait a second.
// Without NOTIFY_SOCKET (a shell, a container, a test) every call does
// nothing. Failures to send are ignored: systemd's view of a node must
// never stop it from training.
#pragma once

#include <string>

namespace traind {

// READY=1 together with STATUS=`status`.
void notifySystemdReady(const std::string& status);

// STATUS=`status`: the one line `systemctl status` shows.
void notifySystemdStatus(const std::string& status);

// STOPPING=1 together with STATUS=`status`.
void notifySystemdStopping(const std::string& status);

}  // namespace traind
