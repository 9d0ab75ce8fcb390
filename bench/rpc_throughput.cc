// rpc_throughput: how fast a worker moves a model's parameters through one
// ps over loopback, against a raw TCP echo of the same bytes, in one run.
//
//   build/bench/rpc_throughput                       # 1, 4, 16, 64 MiB, 30 repetitions
//   build/bench/rpc_throughput --sizes 16 --reps 40
//
// For each size S the model is one dense kernel of S MiB (no bias), trained
// with SGD in async mode. A child process serves it exactly as a ps task
// does (ParameterShard, ServedShard and ShardServer on 127.0.0.1), five
// more are the raw TCP servers below, and this process is two workers and
// the raw servers' client:
//
//   traind push+pull  ShardedClient::pushAndPull: S of gradient up and S of
//                     parameters back, one call per 1 MiB chunk (the ps
//                     applies the chunk and answers with its parameters;
//                     at 1 MiB two calls of half: transferChunks), four
//                     calls in flight; over TCP (the cluster's
//                     transport.shared_memory off for this worker).
//   shared memory     the same calls from a second worker that moves the
//                     tensors through shared memory (rpc/shared_region.h)
//                     and computes in its region, as a worker on the ps's
//                     host with one step in flight does by default.
//   raw TCP echo      S bytes written in --tcp-chunk-kib pieces and the same
//                     S bytes read back, one thread with a non-blocking
//                     socket (as the kj loop of a worker), the server echoing
//                     each piece as it arrives: the best a socket does.
//   wide echo         the echo from a server that reads each round trip's
//                     S bytes into one buffer of S and writes each piece back
//                     at once from another of S: a ps's memory (a gradient
//                     in, parameters out), none of its work or waits. The
//                     echo's server reuses one piece's buffer, in cache.
//   raw TCP request   S bytes written, then S bytes read back, the server
//   and response      answering once it has read all S: a round trip that,
//                     like a ps's, cannot send before it has received. The
//                     echo overlaps the two directions; this does not, and
//                     neither does one chunk of a push+pull (a ps applies a
//                     chunk's whole gradient before it answers with its
//                     parameters). Not the target's yardstick: the echo is.
//   raw TCP ps        a ps's work in a simple one-thread server on a plain
//                     socket, with no Cap'n Proto: it reads each 1 MiB
//                     chunk's gradient whole, applies SGD to its parameters
//                     and writes the chunk's new values back (whole chunks,
//                     as ParameterShard applies a chunk before it answers);
//                     or applies and answers whatever has arrived, 64 KiB or
//                     more (streamed: as if a ps could answer part of a
//                     chunk). The client writes and reads as for the echo.
//
// and, to show where a push+pull's time goes:
//
//   pull alone        ShardedClient::pull: S of parameters, no gradient.
//   shard work        what the ps does for one push+pull without a network:
//                     ParameterShard::push and ::pinChunk of every chunk, in
//                     this process.
//
// MiB/s counts both directions (2 S per round trip). The sides take
// turns, one repetition each, so that load from elsewhere hits all alike;
// the table shows medians with the min-max range, the ratio of medians, and
// the CPU the rest of the machine used meanwhile ("others", in cores).
// --side traind (or tcp) runs one side alone, for a profiler. --pin puts
// every client on CPU 0 and every server on CPU 1.
#include <arpa/inet.h>
#include <kj/async-io.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/machine_load.h"
#include "core/cluster_spec.h"
#include "core/layer_graph.h"
#include "core/model_spec.h"
#include "core/model_state.h"
#include "core/parameter_shard.h"
#include "rpc/shard_server.h"
#include "rpc/shard_service.h"
#include "rpc/sharded_client.h"

namespace traind {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kMiB = 1024 * 1024;
constexpr int64_t kKernelColumns = 1024;

double millisecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// As traind's main: glibc would otherwise unmap every freed message buffer
// and fault it in again on the next one (shared/capnp-notes.md).
void keepFreedMemory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

// A model whose only variable is a [rows, 1024] dense kernel of `mib` MiB.
ModelSpec modelOfSize(int64_t mib) {
  ModelSpec spec;
  spec.name = "rpc_throughput_" + std::to_string(mib) + "mib";
  spec.seed = 1;
  spec.input = {mib * kMiB / int64_t(sizeof(float)) / kKernelColumns};
  LayerSpec dense;
  dense.kind = LayerKind::Dense;
  dense.name = "dense";
  dense.units = kKernelColumns;
  dense.use_bias = false;
  spec.layers.push_back(dense);
  spec.optimizer.kind = OptimizerSpec::Kind::Sgd;
  spec.learning_rate.initial = 1e-6f;
  spec.data.batch_size = 1;
  spec.training.max_steps = 1;
  return spec;
}

ClusterSpec loopbackCluster(uint16_t ps_port) {
  ClusterSpec cluster;
  cluster.ps.push_back({"127.0.0.1", ps_port, {}});
  // A worker listens on nothing; its address only has to differ from the ps's.
  // Worker 0 moves tensors over TCP, worker 1 through shared memory.
  for (int w = 1; w <= 2; ++w)
    cluster.worker.push_back({"127.0.0.1", uint16_t(ps_port > 65533 ? w : ps_port + w), {}});
  cluster.mode = TrainingMode::Async;
  cluster.replicas_to_aggregate = 2;
  cluster.total_num_replicas = 2;
  return cluster;
}

int tcpSocket() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

sockaddr_in loopback(uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  return addr;
}

// A listening socket on a free loopback port.
int listenOnFreePort(uint16_t& port) {
  const int fd = tcpSocket();
  sockaddr_in addr = loopback(0);
  socklen_t length = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 4) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0)
    throw std::runtime_error(std::string("listen on 127.0.0.1: ") + std::strerror(errno));
  port = ntohs(addr.sin_port);
  return fd;
}

// A port that was free a moment ago, for the ps's ShardServer to bind (it
// binds by address string).
uint16_t freePort() {
  uint16_t port = 0;
  close(listenOnFreePort(port));
  return port;
}

// The ps child: serves the model's one shard until the worker calls stop().
[[noreturn]] void servePs(const ModelSpec& spec, const ClusterSpec& cluster) {
  try {
    keepFreedMemory();
    const LayerGraph graph = buildLayerGraph(spec);
    ParameterShard shard(spec, graph, cluster, 0);
    kj::AsyncIoContext io = kj::setupAsyncIo();
    ServedShard service(shard, specIdentity(spec), cluster.shared_memory);
    ShardServer server(io, cluster.ps[0].toString(), mostConnectionsFor(cluster.worker.size()),
                       [&service](kj::Own<PinningStream> connection) -> capnp::Capability::Client {
                         return service.newSession(kj::mv(connection));
                       });
    kj::Promise<void> serving = server.serve().eagerlyEvaluate([](kj::Exception&& e) {
      spdlog::error("the ps listener failed: {}", e.getDescription().cStr());
    });
    service.onStop().wait(io.waitScope);
    // As the ps role: the stop() reply goes out before the connection closes.
    for (int waited = 0; server.connections() > 0 && waited < 50; ++waited)
      io.provider->getTimer().afterDelay(100 * kj::MILLISECONDS).wait(io.waitScope);
    _exit(0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rpc_throughput: the ps failed: %s\n", e.what());
    _exit(1);
  }
}

// A child that outlives a run ended by an exception would wait for its
// client forever: it goes with its parent, `parent`, instead.
void dieWithParent(pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);  // the parent went before the line above
}

// A raw server child's one connection (it exits when there is none).
int acceptOne(int listener) {
  const int fd = accept(listener, nullptr, nullptr);
  if (fd < 0) _exit(1);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// A raw server child writes all of `bytes` back (it exits when it cannot).
void writeAllOrExit(int fd, const char* data, size_t bytes) {
  for (size_t sent = 0; sent < bytes;) {
    const ssize_t n = write(fd, data + sent, bytes - sent);
    if (n <= 0) _exit(1);
    sent += size_t(n);
  }
}

// The echo child: one connection; every piece read is written straight back.
[[noreturn]] void serveEcho(int listener, size_t chunk) {
  const int fd = acceptOne(listener);
  std::vector<char> buffer(chunk);
  for (;;) {
    const ssize_t got = read(fd, buffer.data(), buffer.size());
    if (got <= 0) _exit(got == 0 ? 0 : 1);
    writeAllOrExit(fd, buffer.data(), size_t(got));
  }
}

// The wide echo child: as the echo, but each round trip's `bytes` are read
// into one buffer of `bytes` and the same count written back at once from
// another, piece by piece at the same offsets: the memory a ps's round trip
// crosses (the gradient in, the parameters out), with no work and no wait.
[[noreturn]] void serveWideEcho(int listener, size_t chunk, size_t bytes) {
  const int fd = acceptOne(listener);
  std::vector<char> in(bytes), out(bytes, 1);
  for (size_t at = 0;; at = at % bytes) {
    const ssize_t got = read(fd, in.data() + at, std::min(chunk, bytes - at));
    if (got <= 0) _exit(got == 0 ? 0 : 1);
    writeAllOrExit(fd, out.data() + at, size_t(got));
    at += size_t(got);
  }
}

// The request-response child: one connection; reads `bytes`, then writes
// them back, until the connection closes.
[[noreturn]] void serveRequestResponse(int listener, size_t bytes) {
  const int fd = acceptOne(listener);
  std::vector<char> buffer(bytes);
  for (;;) {
    for (size_t got = 0; got < bytes;) {
      const ssize_t n = read(fd, buffer.data() + got, bytes - got);
      if (n <= 0) _exit(n == 0 && got == 0 ? 0 : 1);
      got += size_t(n);
    }
    writeAllOrExit(fd, buffer.data(), bytes);
  }
}

// What the streamed raw ps applies and answers at least at a time.
constexpr size_t kStreamedPieceFloats = 16 * 1024;

// The raw ps child: one connection; a ps's work on a plain socket, with no
// Cap'n Proto. Per round trip it reads the gradient of each chunk of
// ParameterShard::kChunkFloats whole, applies SGD to its own parameters and
// writes the chunk's new values back, as a ps answers a chunk once it has
// applied all of it. `streamed`, it applies and answers whatever has
// arrived, kStreamedPieceFloats or more at a time, as if a ps could answer
// part of a chunk.
[[noreturn]] void serveRawPs(int listener, size_t bytes, bool streamed) {
  const int fd = acceptOne(listener);
  const size_t floats = bytes / sizeof(float), chunk = size_t(ParameterShard::kChunkFloats);
  std::vector<float> parameters(floats, 0.5f), gradient(floats);
  constexpr float kLearningRate = 1e-6f;
  for (;;) {
    size_t got = 0, answered = 0;  // bytes read, floats answered
    while (answered < floats) {
      if (got < bytes) {
        const ssize_t n = read(fd, reinterpret_cast<char*>(gradient.data()) + got, bytes - got);
        if (n <= 0) _exit(n == 0 && got == 0 ? 0 : 1);
        got += size_t(n);
      }
      for (;;) {
        const size_t arrived = got / sizeof(float);
        const size_t end = streamed ? arrived : std::min(answered + chunk, floats);
        if (end <= answered || arrived < end) break;
        if (streamed && end - answered < kStreamedPieceFloats && got < bytes) break;
        for (size_t i = answered; i < end; ++i) parameters[i] -= kLearningRate * gradient[i];
        writeAllOrExit(fd, reinterpret_cast<const char*>(parameters.data() + answered),
                       (end - answered) * sizeof(float));
        answered = end;
      }
    }
  }
}

// The servers' sockets listen before they are forked: no retries needed.
int connectTo(uint16_t port) {
  const int fd = tcpSocket();
  sockaddr_in addr = loopback(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    throw std::runtime_error("cannot connect to the raw TCP server on port " + std::to_string(port) +
                             ": " + std::strerror(errno));
  return fd;
}

// Whether a non-blocking send or recv that returned `n` failed for good.
bool socketFailed(ssize_t n) {
  return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

// Writes `out` in pieces of at most `chunk` bytes to `server` and reads as
// many bytes back into `in`, on one thread: poll, then whatever the socket
// takes.
void echoRoundTrip(int fd, const char* server, const std::vector<char>& out, std::vector<char>& in,
                   size_t chunk) {
  size_t sent = 0, received = 0;
  while (received < in.size()) {
    pollfd p{fd, short(POLLIN | (sent < out.size() ? POLLOUT : 0)), 0};
    if (poll(&p, 1, 10000) <= 0)
      throw std::runtime_error(std::string("the ") + server + " stopped answering");
    if ((p.revents & POLLOUT) && sent < out.size()) {
      const ssize_t n = send(fd, out.data() + sent, std::min(chunk, out.size() - sent),
                             MSG_DONTWAIT | MSG_NOSIGNAL);
      if (socketFailed(n))
        throw std::runtime_error(std::string("sending to the ") + server + ": " +
                                 std::strerror(errno));
      if (n > 0) sent += size_t(n);
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t n = recv(fd, in.data() + received, in.size() - received, MSG_DONTWAIT);
      if (n == 0 || socketFailed(n))
        throw std::runtime_error(std::string("the ") + server + " closed the connection");
      if (n > 0) received += size_t(n);
    }
  }
}

// Writes all of `out`, then reads all of `in`: the server answers once it
// has the whole request.
void requestResponse(int fd, const std::vector<char>& out, std::vector<char>& in) {
  for (size_t sent = 0; sent < out.size();) {
    const ssize_t n = send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) throw std::runtime_error("the request-response server stopped reading");
    sent += size_t(n);
  }
  for (size_t received = 0; received < in.size();) {
    const ssize_t n = recv(fd, in.data() + received, in.size() - received, 0);
    if (n <= 0) throw std::runtime_error("the request-response server stopped answering");
    received += size_t(n);
  }
}

// CPU seconds of this process and of its waited-for children.
double ownCpuSeconds() {
  double seconds = 0.0;
  for (int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
    rusage usage{};
    getrusage(who, &usage);
    seconds += double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
               double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
  }
  return seconds;
}

struct Summary {
  double median = 0, min = 0, max = 0;
};

Summary summarize(std::vector<double> values) {
  if (values.empty()) return {};
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  const double median = n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  return {median, values.front(), values.back()};
}

struct SizeResult {
  int64_t mib = 0;
  double others = 0.0;  // cores the rest of the machine used meanwhile
  Summary tcp_ms, wide_echo_ms, request_response_ms, raw_ps_ms, raw_ps_streamed_ms, rpc_ms, shm_ms,
      pull_ms, shard_ms;
};

// The ps's own work for one push+pull of every chunk, with no network.
std::vector<double> timeShardWork(const ModelSpec& spec, const LayerGraph& graph,
                                  const ClusterSpec& cluster, const FlatBuffer& gradients,
                                  int reps) {
  ParameterShard shard(spec, graph, cluster, 0);
  shard.markReady(0);
  std::vector<double> times;
  for (int rep = 0; rep < reps; ++rep) {
    const Clock::time_point start = Clock::now();
    for (size_t i = 0; i < shard.chunks().size(); ++i) {
      const ShardChunk& c = shard.chunks()[i];
      shard.push(0, shard.globalStep(), c.shard_offset,
                 {gradients.data() + c.layout_offset, size_t(c.size)});
      std::shared_ptr<const float> reply = shard.pinChunk(i);  // what a reply sends
    }
    times.push_back(millisecondsSince(start));
  }
  return times;
}

// Which sides run: both (the comparison), or one alone (for a profiler).
enum class Sides { Both, Traind, Tcp };

// --pin: this process (every client) on one CPU, every server child on
// another, so that each pair of sides runs as the scheduler would never
// place it otherwise: on two cores, apart. Unpinned, a client and its
// server share a core or not as the scheduler decides, run by run.
// False when the kernel refused.
bool pinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0;
}

SizeResult measureSize(int64_t mib, int reps, int warmup, size_t tcp_chunk, Sides sides, bool pin) {
  const Clock::time_point started = Clock::now();
  const double busy_before = busyCpuSeconds(), own_before = ownCpuSeconds();
  const ModelSpec spec = modelOfSize(mib);
  const LayerGraph graph = buildLayerGraph(spec);
  const ClusterSpec cluster = loopbackCluster(freePort());
  const size_t bytes = size_t(mib * kMiB);
  // The raw servers, each a child serving one connection on its own port.
  enum RawServer { kEcho, kWideEcho, kRequestResponse, kRawPs, kRawPsStreamed, kRawServers };
  const char* const kRawNames[kRawServers] = {"echo server", "wide echo server",
                                              "request-response server", "raw TCP ps",
                                              "streamed raw TCP ps"};
  uint16_t ports[kRawServers] = {};
  int listeners[kRawServers] = {};
  for (int r = 0; r < kRawServers; ++r) listeners[r] = listenOnFreePort(ports[r]);
  auto closeListeners = [&listeners](int except) {
    for (int r = 0; r < kRawServers; ++r)
      if (r != except) close(listeners[r]);
  };

  std::fflush(nullptr);
  const pid_t parent = getpid();
  const pid_t ps_pid = fork();
  if (ps_pid == 0) {
    dieWithParent(parent);
    if (pin && !pinTo(1)) _exit(1);
    closeListeners(-1);
    servePs(spec, cluster);
  }
  pid_t raw_pids[kRawServers] = {};
  for (int r = 0; r < kRawServers; ++r) {
    raw_pids[r] = fork();
    if (raw_pids[r] != 0) continue;
    dieWithParent(parent);
    if (pin && !pinTo(1)) _exit(1);
    closeListeners(r);
    switch (r) {
      case kEcho:
        serveEcho(listeners[r], tcp_chunk);
      case kWideEcho:
        serveWideEcho(listeners[r], tcp_chunk, bytes);
      case kRequestResponse:
        serveRequestResponse(listeners[r], bytes);
      default:
        serveRawPs(listeners[r], bytes, r == kRawPsStreamed);
    }
  }
  closeListeners(-1);

  SizeResult result;
  result.mib = mib;
  std::vector<double> tcp, wide_echo, request_response, raw_ps, raw_ps_streamed, rpc, shm, pull;
  {
    kj::AsyncIoContext io = kj::setupAsyncIo();
    ModelState state(spec, graph);
    state.initialize();
    FlatBuffer gradients(state.layout().totalSize());
    std::fill(gradients.data(), gradients.data() + gradients.size(), 1e-3f);
    ClusterSpec over_tcp = cluster;
    over_tcp.shared_memory = false;
    ShardedClient ps(io, over_tcp, graph, state.layout(), specIdentity(spec), 0);
    (void)ps.connect(30.0);  // Connected or throws: no stop flag, no job_over
    ps.initialize(state);
    ps.pull(0, state.parameters());
    ShardedClient ps_shared(io, cluster, graph, state.layout(), specIdentity(spec), 1);
    // The second worker computes in its region, as traind's worker does.
    FlatBuffer shared_gradients, shared_parameters;
    if (sides != Sides::Tcp) {
      (void)ps_shared.connect(30.0);
      const ShardedClient::SharedBuffers shared = ps_shared.sharedBuffers();
      if (!shared.gradients)
        throw std::runtime_error("the ps did not map the second worker's shared memory");
      shared_gradients = FlatBuffer::over(shared.gradients, gradients.size());
      shared_parameters = FlatBuffer::over(shared.parameters, gradients.size());
      std::fill(shared_gradients.data(), shared_gradients.data() + gradients.size(), 1e-3f);
      ps_shared.pull(0, shared_parameters);
    }

    int raw[kRawServers] = {};
    for (int r = 0; r < kRawServers; ++r) raw[r] = connectTo(ports[r]);
    // The raw ps applies what it reads as gradients: floats of the size the
    // worker sends, not bytes whose floats would be denormal.
    std::vector<char> out(bytes), in(bytes);
    std::fill_n(reinterpret_cast<float*>(out.data()), bytes / sizeof(float), 1e-3f);

    // The raw servers' turns, then traind over TCP and through shared memory.
    constexpr int kTraindTcp = kRawServers, kTraindShared = kRawServers + 1,
                  kTurns = kRawServers + 2;
    std::vector<double>* times[kTurns] = {
        &tcp, &wide_echo, &request_response, &raw_ps, &raw_ps_streamed, &rpc, &shm};
    for (int rep = 0; rep < warmup + reps; ++rep) {
      const bool timed = rep >= warmup;
      // Rotate which side goes first, so none always runs right after another.
      for (int turn = 0; turn < kTurns; ++turn) {
        const int who = (turn + rep) % kTurns;
        const bool is_raw = who < kRawServers;
        if (is_raw && sides == Sides::Traind) continue;
        if (!is_raw && sides == Sides::Tcp) continue;
        const Clock::time_point start = Clock::now();
        if (who == kTraindTcp)
          ps.pushAndPull(gradients, 0, state.parameters());
        else if (who == kTraindShared)
          ps_shared.pushAndPull(shared_gradients, 0, shared_parameters);
        else if (who == kRequestResponse)
          requestResponse(raw[who], out, in);
        else  // the echo and the raw ps: both directions at once
          echoRoundTrip(raw[who], kRawNames[who], out, in, tcp_chunk);
        if (timed) times[who]->push_back(millisecondsSince(start));
      }
      if (sides == Sides::Tcp) continue;
      const Clock::time_point start = Clock::now();
      ps.pull(0, state.parameters());
      if (timed) pull.push_back(millisecondsSince(start));
    }
    for (int fd : raw) close(fd);
    ps.stopAll();
  }
  for (int r = 0; r <= kRawServers; ++r) {
    int status = 0;
    waitpid(r < kRawServers ? raw_pids[r] : ps_pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      throw std::runtime_error(std::string("the ") + (r < kRawServers ? kRawNames[r] : "ps") +
                               " child did not exit cleanly");
  }

  if (sides == Sides::Both) {
    FlatBuffer gradients(VariableLayout(graph.variables).totalSize());
    result.shard_ms = summarize(timeShardWork(spec, graph, cluster, gradients, warmup + reps));
  }
  const double others = busyCpuSeconds() - busy_before - (ownCpuSeconds() - own_before);
  result.others = std::max(0.0, others / (millisecondsSince(started) / 1000.0));
  if (sides != Sides::Traind) {
    result.tcp_ms = summarize(tcp);
    result.wide_echo_ms = summarize(wide_echo);
    result.request_response_ms = summarize(request_response);
    result.raw_ps_ms = summarize(raw_ps);
    result.raw_ps_streamed_ms = summarize(raw_ps_streamed);
  }
  if (sides != Sides::Tcp) {
    result.rpc_ms = summarize(rpc);
    result.shm_ms = summarize(shm);
    result.pull_ms = summarize(pull);
  }
  return result;
}

// MiB/s when 2 * mib MiB crossed in `ms` milliseconds; 0 for a side that
// did not run (--side).
double rate(int64_t mib, double ms) { return ms > 0 ? 2.0 * double(mib) * 1000.0 / ms : 0.0; }

std::string timing(const Summary& s) {
  char text[64];
  std::snprintf(text, sizeof text, "%.2f [%.2f-%.2f]", s.median, s.min, s.max);
  return text;
}

void printTable(const std::vector<SizeResult>& results, int reps, Sides sides) {
  std::printf(
      "\npush+pull of S MiB between 1 worker and 1 ps on loopback against a raw TCP echo "
      "of S MiB,\nms per round trip, median of %d repetitions [min-max]; MiB/s counts both "
      "directions (2 S)\n\n",
      reps);
  std::printf("%5s | %-22s %6s | %-22s %6s | %5s | %s\n", "S MiB", "raw TCP echo ms", "MiB/s",
              "traind push+pull ms", "MiB/s", "ratio", "others");
  std::printf(
      "------+-------------------------------+-------------------------------+-------+"
      "-------\n");
  for (const SizeResult& r : results) {
    const double ratio = r.tcp_ms.median / r.rpc_ms.median;
    std::printf("%5lld | %-22s %6.0f | %-22s %6.0f | %5.2f | %5.2f\n", (long long)r.mib,
                timing(r.tcp_ms).c_str(), rate(r.mib, r.tcp_ms.median), timing(r.rpc_ms).c_str(),
                rate(r.mib, r.rpc_ms.median), sides == Sides::Both ? ratio : 0.0, r.others);
  }
  std::printf(
      "\nratio = raw TCP time / traind time (1.0: as fast as the socket; target >= 0.9);\n"
      "others = cores the rest of the machine used meanwhile (well above 0: under load)\n");

  std::printf(
      "\nthe same echo from a server that reads each round trip's S bytes into one buffer of "
      "S\nand writes as many back from another at once (the echo's server reuses one piece's "
      "buffer,\nwhich stays in cache; a ps's gradient and parameters are S each): x echo = "
      "echo time /\nthis time; traind = this time / traind time\n\n");
  std::printf("%5s | %-22s %6s | %6s | %s\n", "S MiB", "wide echo ms", "MiB/s", "x echo", "traind");
  std::printf("------+-------------------------------+--------+-------\n");
  for (const SizeResult& r : results)
    std::printf("%5lld | %-22s %6.0f | %6.2f | %6.2f\n", (long long)r.mib,
                timing(r.wide_echo_ms).c_str(), rate(r.mib, r.wide_echo_ms.median),
                r.tcp_ms.median / r.wide_echo_ms.median,
                sides == Sides::Both ? r.wide_echo_ms.median / r.rpc_ms.median : 0.0);
  if (sides == Sides::Tcp) return;

  if (sides == Sides::Both) {
    std::printf(
        "\nthe same bytes as a raw TCP request and response (the server answers once it has "
        "read\nall S, as a ps applies a chunk before it answers): no overlap of the two "
        "directions\n\n");
    std::printf("%5s | %-22s %6s | %s\n", "S MiB", "request+response ms", "MiB/s",
                "request+response time / traind time");
    std::printf("------+-------------------------------+------------------------------------\n");
    for (const SizeResult& r : results)
      std::printf("%5lld | %-22s %6.0f | %5.2f\n", (long long)r.mib,
                  timing(r.request_response_ms).c_str(),
                  rate(r.mib, r.request_response_ms.median),
                  r.request_response_ms.median / r.rpc_ms.median);

    std::printf(
        "\na ps's work on raw TCP, no Cap'n Proto: a server that reads each 1 MiB chunk's "
        "gradient\nwhole, applies SGD and writes the chunk's parameters back (whole chunks), "
        "and one that\napplies and answers whatever has arrived, 64 KiB or more (streamed); "
        "x echo = raw TCP echo\ntime / this time; traind = this time / traind time\n\n");
    std::printf("%5s | %-22s %6s | %6s | %6s | %-22s %6s | %6s | %6s\n", "S MiB", "whole chunks ms",
                "MiB/s", "x echo", "traind", "streamed ms", "MiB/s", "x echo", "traind");
    std::printf(
        "------+-------------------------------+--------+--------+------------------------------"
        "-+--------+-------\n");
    for (const SizeResult& r : results)
      std::printf("%5lld | %-22s %6.0f | %6.2f | %6.2f | %-22s %6.0f | %6.2f | %6.2f\n",
                  (long long)r.mib, timing(r.raw_ps_ms).c_str(), rate(r.mib, r.raw_ps_ms.median),
                  r.tcp_ms.median / r.raw_ps_ms.median, r.raw_ps_ms.median / r.rpc_ms.median,
                  timing(r.raw_ps_streamed_ms).c_str(), rate(r.mib, r.raw_ps_streamed_ms.median),
                  r.tcp_ms.median / r.raw_ps_streamed_ms.median,
                  r.raw_ps_streamed_ms.median / r.rpc_ms.median);
  }

  std::printf(
      "\nthe same push+pull through shared memory (a second worker of the same runs, on the "
      "ps's\nhost: transport.shared_memory auto, the default); x raw TCP = raw TCP time / this "
      "time\n\n");
  std::printf("%5s | %-22s %6s | %s\n", "S MiB", "shared memory ms", "MiB/s", "x raw TCP");
  std::printf("------+-------------------------------+----------\n");
  for (const SizeResult& r : results)
    std::printf("%5lld | %-22s %6.0f | %5.2f\n", (long long)r.mib, timing(r.shm_ms).c_str(),
                rate(r.mib, r.shm_ms.median),
                sides == Sides::Both ? r.tcp_ms.median / r.shm_ms.median : 0.0);

  std::printf(
      "\nwhere a traind push+pull's time goes (ms, medians): a pull alone (S one way); the "
      "ps's\nown work for one push+pull without a network (ParameterShard::push and "
      "::pinChunk of\nevery chunk)\n\n");
  std::printf("%5s | %-22s | %s\n", "S MiB", "pull alone", "shard work");
  std::printf("------+------------------------+-----------\n");
  for (const SizeResult& r : results)
    std::printf("%5lld | %-22s | %.2f\n", (long long)r.mib, timing(r.pull_ms).c_str(),
                r.shard_ms.median);
}

}  // namespace
}  // namespace traind

int main(int argc, char** argv) {
  traind::keepFreedMemory();
  CLI::App app{"push+pull throughput of one worker and one ps on loopback, against raw TCP"};
  std::vector<int64_t> sizes{1, 4, 16, 64};
  int reps = 30, warmup = 3;
  int tcp_chunk_kib = 1024;
  std::string side = "both";
  app.add_option("--sizes", sizes, "parameter sizes in MiB (1,4,16,64)")
      ->delimiter(',')
      ->check(CLI::Range(1, 256));
  app.add_option("--reps", reps, "timed repetitions per size and side")
      ->check(CLI::Range(1, 10000));
  app.add_option("--warmup", warmup, "untimed repetitions first")->check(CLI::Range(0, 1000));
  app.add_option("--tcp-chunk-kib", tcp_chunk_kib, "raw TCP: bytes per write and echo read")
      ->check(CLI::Range(4, 65536));
  bool pin = false;
  app.add_flag("--pin", pin, "clients on CPU 0, every server on CPU 1");
  app.add_option("--side", side, "both, or traind or tcp alone (to profile one)")
      ->check(CLI::IsMember({"both", "traind", "tcp"}));
  CLI11_PARSE(app, argc, argv);
  const traind::Sides sides = side == "traind" ? traind::Sides::Traind
                              : side == "tcp"  ? traind::Sides::Tcp
                                               : traind::Sides::Both;
  spdlog::set_level(spdlog::level::warn);
  try {
    if (pin && !traind::pinTo(0))
      throw std::runtime_error(std::string("cannot pin to CPU 0: ") + std::strerror(errno));
    std::vector<traind::SizeResult> results;
    for (int64_t mib : sizes) {
      results.push_back(
          traind::measureSize(mib, reps, warmup, size_t(tcp_chunk_kib) * 1024, sides, pin));
      std::fprintf(stderr, "rpc_throughput: %lld MiB done\n", (long long)mib);
    }
    traind::printTable(results, reps, sides);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rpc_throughput: %s\n", e.what());
    return 1;
  }
  return 0;
}
