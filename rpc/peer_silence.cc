#include "rpc/peer_silence.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstddef>

#include "rpc/failure_text.h"

namespace traind {

std::optional<std::string> limitPeerSilence(kj::AsyncIoStream& stream) {
  // An idle connection is probed after 5 s, then every 2 s; with
  // TCP_USER_TIMEOUT set, Linux ends it once nothing (data or probe) has
  // been acknowledged for that long, whatever the probe count.
  const int on = 1, idle = 5, interval = 2, probes = kPeerSilenceSeconds / interval;
  const unsigned user_timeout_ms = kPeerSilenceSeconds * 1000;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] {
    stream.setsockopt(SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
    stream.setsockopt(IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    stream.setsockopt(IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
    stream.setsockopt(IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
    stream.setsockopt(IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
  })) {
    return failureText(*e);
  }
  return std::nullopt;
}

std::optional<double> secondsSinceDataMoved(const kj::AsyncIoStream& stream) {
  int fd = -1;
  KJ_IF_MAYBE (f, stream.getFd()) fd = *f;
  tcp_info info{};
  socklen_t length = sizeof info;
  if (fd < 0 || ::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0 ||
      length < offsetof(tcp_info, tcpi_last_data_recv) + sizeof info.tcpi_last_data_recv)
    return std::nullopt;
  return std::min(info.tcpi_last_data_sent, info.tcpi_last_data_recv) / 1000.0;
}

}  // namespace traind
