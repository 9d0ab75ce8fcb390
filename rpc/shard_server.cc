#include "rpc/shard_server.h"

#include <capnp/rpc-twoparty.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <list>
#include <optional>

#include "core/cluster_spec.h"
#include "core/error.h"
#include "core/rate_limited_log.h"
#include "rpc/abort_reason.h"
#include "rpc/failure_text.h"
#include "rpc/open_answers_stream.h"
#include "rpc/peer_silence.h"

namespace traind {
namespace {

// What one connection may have the ps hold (hostile_peer_test): replies
// queued for a peer that does not read them (it is not read from until they
// drain), and calls received but not answered (Cap'n Proto's flow limit). A
// worker keeps at most 16 chunks of 1 MiB in flight per shard.
constexpr size_t kMostQueuedReplies = 1024;
constexpr size_t kMostQueuedReplyBytes = size_t(64) << 20;
constexpr size_t kFlowLimitWords = (size_t(64) << 20) / sizeof(capnp::word);
// Answers a peer may keep unreleased (rpc/open_answers_stream.h): twice
// the calls that may wait (ShardService::kMaxWaitingCalls). A worker has at
// most a few dozen calls open per shard; a peer past this is ended.
constexpr size_t kMostOpenAnswers = 512;

}  // namespace

struct ShardServer::Impl {
  struct Connection {
    Connection(kj::Own<kj::AsyncIoStream> socket, const NewSession& new_session,
               capnp::ReaderOptions options)
        : stream(kj::refcounted<PinningStream>(kj::mv(socket))),
          messages(*stream, kMostOpenAnswers),
          network(messages, capnp::rpc::twoparty::Side::SERVER, options),
          rpc(capnp::makeRpcServer(network, new_session(kj::addRef(*stream)))) {
      stream->gateReadsOnBacklog([this] {
        return network.getCurrentQueueCount() > kMostQueuedReplies ||
               network.getCurrentQueueSize() > kMostQueuedReplyBytes;
      });
      rpc.setFlowLimit(kFlowLimitWords);
    }
    // The stream may outlive the connection (its sessions hold it); the gate
    // looks at the network.
    ~Connection() { stream->liftReadGate(); }
    kj::Own<PinningStream> stream;
    OpenAnswersStream messages;
    capnp::TwoPartyVatNetwork network;
    capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
    std::string peer;
  };

  kj::Own<kj::ConnectionReceiver> listener;
  kj::Timer& timer;
  size_t most_connections;
  NewSession new_session;
  std::list<Connection> connections;
  uint64_t closed = 0;  // connections ended so far (connectionsClosed)
  kj::TaskSet tasks;
  // What a peer can bring about is logged at most every kLogEvery.
  static constexpr auto kLogEvery = std::chrono::seconds(10);
  RateLimitedLog refusals{kLogEvery}, evictions{kLogEvery}, accept_failures{kLogEvery};
  // Every connection of a cluster's start is logged; a flood of them is not.
  RateLimitedLog comings{kLogEvery, 32}, goings{kLogEvery, 32};

  struct ErrorHandler : kj::TaskSet::ErrorHandler {
    void taskFailed(kj::Exception&& e) override {
      spdlog::warn("connection task failed: {}", failureText(e));
    }
  } error_handler;

  Impl(kj::Timer& timer, size_t most_connections, NewSession f)
      : timer(timer),
        most_connections(most_connections),
        new_session(std::move(f)),
        tasks(error_handler) {}

  kj::Promise<void> acceptLoop() {
    // evalNow: kj's accept throws at once for an error it meets at once.
    return kj::evalNow([this] { return listener->accept(); })
        .then(
            [this](kj::Own<kj::AsyncIoStream> stream) {
              serveConnection(kj::mv(stream));
              return acceptLoop();
            },
            [this](kj::Exception&& e) {
              accept_failures.log([&](size_t times) {
                spdlog::warn("accepting a connection failed: {}; retrying{}", failureText(e),
                             RateLimitedLog::since(times));
              });
              return timer.afterDelay(100 * kj::MILLISECONDS).then([this] { return acceptLoop(); });
            });
  }

  void forget(std::list<Connection>::iterator connection) {
    connections.erase(connection);
    ++closed;
  }

  void serveConnection(kj::Own<kj::AsyncIoStream> stream) {
    // An ended connection is gone once its Abort is written, which a peer
    // that reads nothing holds up until the kernel gives up on it: the
    // ended ones count against a ceiling of their own.
    if (connections.size() >= most_connections &&
        (connections.size() >= 2 * most_connections || !endOldestUnidentified(*stream))) {
      const std::string peer = peerName(*stream);
      refusals.log([&](size_t times) {
        spdlog::warn(
            "closed a new connection from {} at once: {} are open, the most this ps "
            "takes{}",
            peer, connections.size(), RateLimitedLog::since(times));
      });
      return;  // the stream goes, and closes the socket
    }
    if (auto refused = limitPeerSilence(*stream))
      spdlog::warn("a vanished worker host will not be noticed: {}", *refused);
    capnp::ReaderOptions options;
    options.traversalLimitInWords = kTraversalLimitWords;
    connections.emplace_back(kj::mv(stream), new_session, options);
    auto it = std::prev(connections.end());
    it->peer = peerName(*it->stream);
    comings.log([&](size_t times) {
      spdlog::info("{} connected{}", it->peer, RateLimitedLog::since(times));
    });
    tasks.add(it->network.onDisconnect().then(
        [this, it]() {
          // Cap'n Proto ends a connection for a reason by telling the peer
          // (an Abort, the last message written) and then closing.
          const ConnectionEnd end = connectionEnd(abortReason(it->stream->lastShortWrite()));
          goings.log([&](size_t times) {
            const std::string since = RateLimitedLog::since(times);
            if (it->stream->readsEnded()) {  // endConnections: this ps's own reason
              spdlog::info("closed the connection of {}: {}{}", it->peer, end.text, since);
              return;
            }
            switch (end.kind) {
              case ConnectionEnd::Kind::Departure:
                spdlog::info("{} disconnected{}", it->peer, since);
                break;
              case ConnectionEnd::Kind::PeersWords:
                spdlog::info("{} disconnected, saying: {}{}", it->peer, end.text, since);
                break;
              case ConnectionEnd::Kind::Dropped:
                spdlog::warn("{} disconnected: {}{}", it->peer, end.text, since);
                break;
            }
          });
          return kj::evalLater([this, it]() { forget(it); });
        },
        [this, it](kj::Exception&& e) {
          goings.log([&](size_t times) {
            spdlog::warn("dropped {}: {}{}", it->peer, failureText(e),
                         RateLimitedLog::since(times));
          });
          return kj::evalLater([this, it]() { forget(it); });
        }));
  }

  // Ends the oldest connection not yet ended whose peer has said nothing of
  // who it is, for `newcomer`; false when there is none.
  bool endOldestUnidentified(kj::AsyncIoStream& newcomer) {
    const auto oldest = std::find_if(
        connections.begin(), connections.end(),
        [](const Connection& c) { return !c.stream->identified() && !c.stream->readsEnded(); });
    if (oldest == connections.end()) return false;
    evictions.log([&](size_t times) {
      spdlog::warn(
          "ended the connection of {}, which never said hello, for one from {}: {} are "
          "open, the most this ps takes{}",
          oldest->peer, peerName(newcomer), connections.size(), RateLimitedLog::since(times));
    });
    const std::string why = "this ps has no room for a connection that has not said hello: " +
                            std::to_string(connections.size()) + " are open, the most it takes";
    oldest->stream->endReads(
        kj::Exception(kj::Exception::Type::OVERLOADED, __FILE__, __LINE__, kj::str(why)));
    return true;
  }

  static std::string peerName(kj::AsyncIoStream& stream) {
    sockaddr_storage addr{};
    uint length = sizeof addr;
    try {
      stream.getpeername(reinterpret_cast<sockaddr*>(&addr), &length);
    } catch (...) {
      return "a peer";
    }
    return "peer " + hostPortOf(reinterpret_cast<const sockaddr&>(addr)).toString();
  }
};

ShardServer::ShardServer(kj::AsyncIoContext& io, const std::string& address,
                         size_t most_connections, NewSession new_session)
    : impl_(std::make_unique<Impl>(io.provider->getTimer(), most_connections,
                                   std::move(new_session))) {
  // A name of several addresses is listened on at its first only: said in
  // the log's own form (kj's listen would print a bare line of its own),
  // and that address given to kj.
  std::string listen_at = address;
  if (const std::vector<HostPort> resolved =
          resolvedAddresses(parseHostPort(address, "the ps address"));
      resolved.size() > 1) {
    listen_at = resolved.front().toString();
    spdlog::warn(
        "{} resolves to {} addresses; the ps listens on the first only, {} (a worker tries each "
        "in turn, and may reach another task on another: give each task a name of one address)",
        address, resolved.size(), listen_at);
  }
  kj::Own<kj::NetworkAddress> addr;
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() {
                 addr = io.provider->getNetwork().parseAddress(listen_at).wait(io.waitScope);
               })) {
    throw InputError(address + ": cannot resolve the address: " + failureText(*e) +
                     missingZoneNote(address));
  }
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { impl_->listener = addr->listen(); })) {
    const std::string why = failureText(*e);
    const char* hint = why.find("Address already in use") != std::string::npos
                           ? " (is the port in use?)"
                       : why.find("Cannot assign requested address") != std::string::npos
                           ? " (is the address one of this host's?)"
                           : "";
    throw InputError(address + ": cannot listen" + hint + ": " + why);
  }
  // The socket's own address: a name that resolves to several is bound to
  // the first only.
  sockaddr_storage bound{};
  uint length = sizeof bound;
  impl_->listener->getsockname(reinterpret_cast<sockaddr*>(&bound), &length);
  bound_address_ = hostPortOf(reinterpret_cast<const sockaddr&>(bound)).toString();
}

ShardServer::~ShardServer() = default;

kj::Promise<void> ShardServer::serve() { return impl_->acceptLoop(); }

int ShardServer::connections() const { return int(impl_->connections.size()); }

uint64_t ShardServer::connectionsClosed() const { return impl_->closed; }

void ShardServer::endConnections(const std::string& reason) {
  const kj::Exception why(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__, kj::str(reason));
  for (Impl::Connection& connection : impl_->connections) connection.stream->endReads(why);
}

namespace {
constexpr std::string_view kChiefDivergedReason = "the chief's run diverged: ";
}  // namespace

std::string chiefDivergedText(std::string_view words) {
  return std::string(kChiefDivergedReason) + std::string(words);
}

bool relaysChiefDivergence(std::string_view text) {
  return text.find(kChiefDivergedReason) != std::string_view::npos;
}

}  // namespace traind
