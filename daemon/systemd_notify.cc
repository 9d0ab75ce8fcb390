#include "daemon/systemd_notify.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace traind {
namespace {

// STATUS= takes one line; a newline would start another assignment.
std::string oneLine(std::string text) {
  for (char& c : text)
    if (c == '\n' || c == '\r') c = ' ';
  return text;
}

// One datagram to $NOTIFY_SOCKET (a path, or '@' for the abstract
// namespace), as sd_notify sends it, but never waiting long: libsystemd's
// blocks while the socket's queue is full, and so held a training thread,
// and its stop, for as long as the reader did not read (10 datagrams queue
// by default). A STATUS line the queue has no room for is dropped; a state
// change waits up to kStateChangeWaitMs for room, as a lost READY leaves
// the unit starting for good.
void notify(const std::string& message, bool state_change,
            std::chrono::steady_clock::time_point deadline) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (path == nullptr || (path[0] != '/' && path[0] != '@')) return;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const size_t length = std::strlen(path);
  if (length < 2 || length >= sizeof address.sun_path) return;
  std::memcpy(address.sun_path, path, length);
  if (address.sun_path[0] == '@') address.sun_path[0] = '\0';
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return;
  // Connected, a datagram socket polls writable once the reader's queue
  // has room.
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address),
              socklen_t(offsetof(sockaddr_un, sun_path) + length)) == 0) {
    while (::send(fd, message.data(), message.size(), MSG_NOSIGNAL) < 0 &&
           (errno == EAGAIN || errno == EINTR) && state_change) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd room{fd, POLLOUT, 0};
      (void)poll(&room, 1, int(left.count()));
    }
  }
  close(fd);
}

}  // namespace

void notifySystemd(bool ready, bool stopping, const std::string& status) {
  // READY and STOPPING in datagrams of their own, in that order: systemd
  // may take only the last state one datagram names, and a unit that stops
  // without having been READY has failed to it. One wait for both.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kStateChangeWaitMs);
  const std::string line = "STATUS=" + oneLine(status);
  if (ready) notify("READY=1\n" + line, true, deadline);
  if (stopping) notify("STOPPING=1\n" + line, true, deadline);
  if (!ready && !stopping) notify(line, false, deadline);
}

}  // namespace traind
