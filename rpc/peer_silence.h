// How long a ps connection may go without a sign of life from the other
// host before it fails.
//
// A peer whose host vanishes (power lost, cable cut, a network partition)
// sends no FIN: without this a worker waiting for a ps reply, or a ps
// waiting for a worker's gradient, would wait forever. The kernel probes an
// idle connection (TCP keepalive) and gives the connection up once the peer
// has acknowledged nothing, data or probe, for kPeerSilenceSeconds
// (TCP_USER_TIMEOUT); it then fails as if the peer had closed it. A peer that is alive
// but slow (a long step, a long evaluation) keeps acknowledging and is never
// cut off. A stopped process (SIGSTOP, a debugger) keeps its connections
// while its kernel acknowledges for it; once its receive buffer is full and
// data has waited to reach it for kPeerSilenceSeconds, the sender gives the
// connection up too.
#pragma once

#include <kj/async-io.h>

#include <optional>
#include <string>

namespace traind {

constexpr int kPeerSilenceSeconds = 20;

// Sets the socket options on a connected TCP stream (both ends call it).
// Returns the reason when the kernel refused one (the connection works on,
// unguarded), nullopt when all are set.
std::optional<std::string> limitPeerSilence(kj::AsyncIoStream& stream);

// Seconds since data last moved on a TCP stream either way, as its kernel
// counts (TCP_INFO): data that came from the peer, read or not, or data of
// this side's the peer's window let go out, which it opens only as its
// process reads. Acknowledgements do not count: a stopped process's kernel
// sends them. nullopt when the stream is not a TCP socket's.
std::optional<double> secondsSinceDataMoved(const kj::AsyncIoStream& stream);

}  // namespace traind
