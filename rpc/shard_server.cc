#include "rpc/shard_server.h"

#include <capnp/rpc-twoparty.h>
#include <spdlog/spdlog.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <list>

#include "core/error.h"
#include "rpc/peer_silence.h"

namespace traind {

struct ShardServer::Impl {
  struct Connection {
    Connection(kj::Own<kj::AsyncIoStream> socket, const NewSession& new_session,
               capnp::ReaderOptions options)
        : stream(kj::refcounted<PinningStream>(kj::mv(socket))),
          network(*stream, capnp::rpc::twoparty::Side::SERVER, options),
          rpc(capnp::makeRpcServer(network, new_session(kj::addRef(*stream)))) {}
    kj::Own<PinningStream> stream;
    capnp::TwoPartyVatNetwork network;
    capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
    std::string peer;
  };

  kj::Own<kj::ConnectionReceiver> listener;
  NewSession new_session;
  std::list<Connection> connections;
  kj::TaskSet tasks;

  struct ErrorHandler : kj::TaskSet::ErrorHandler {
    void taskFailed(kj::Exception&& e) override {
      spdlog::warn("connection task failed: {}", e.getDescription().cStr());
    }
  } error_handler;

  explicit Impl(NewSession f)
      : new_session(std::move(f)), tasks(error_handler) {}

  kj::Promise<void> acceptLoop() {
    return listener->accept().then([this](kj::Own<kj::AsyncIoStream> stream) {
      if (auto refused = limitPeerSilence(*stream))
        spdlog::warn("a vanished worker host will not be noticed: {}", *refused);
      capnp::ReaderOptions options;
      options.traversalLimitInWords = kTraversalLimitWords;
      connections.emplace_back(kj::mv(stream), new_session, options);
      auto it = std::prev(connections.end());
      it->peer = peerName(*it->stream);
      spdlog::info("{} connected", it->peer);
      tasks.add(it->network.onDisconnect().then(
          [this, it]() {
            spdlog::info("{} disconnected", it->peer);
            return kj::evalLater([this, it]() { connections.erase(it); });
          },
          [this, it](kj::Exception&& e) {
            spdlog::warn("dropped {}: {}", it->peer, e.getDescription().cStr());
            return kj::evalLater([this, it]() { connections.erase(it); });
          }));
      return acceptLoop();
    });
  }

  static std::string peerName(kj::AsyncIoStream& stream) {
    sockaddr_storage addr{};
    uint length = sizeof addr;
    try {
      stream.getpeername(reinterpret_cast<sockaddr*>(&addr), &length);
    } catch (...) {
      return "a peer";
    }
    char host[64] = "?";
    uint16_t port = 0;
    if (addr.ss_family == AF_INET) {
      auto* in = reinterpret_cast<sockaddr_in*>(&addr);
      inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
      port = ntohs(in->sin_port);
    } else if (addr.ss_family == AF_INET6) {
      auto* in = reinterpret_cast<sockaddr_in6*>(&addr);
      inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof host);
      port = ntohs(in->sin6_port);
    }
    return std::string("peer ") + host + ":" + std::to_string(port);
  }
};

ShardServer::ShardServer(kj::AsyncIoContext& io, const std::string& address,
                         NewSession new_session)
    : impl_(std::make_unique<Impl>(std::move(new_session))) {
  kj::Own<kj::NetworkAddress> addr;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                addr = io.provider->getNetwork().parseAddress(address).wait(io.waitScope);
              })) {
    throw InputError(address + ": cannot resolve the address: " + e->getDescription().cStr());
  }
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { impl_->listener = addr->listen(); })) {
    throw InputError(address + ": cannot listen (is the port in use?): " +
                     e->getDescription().cStr());
  }
}

ShardServer::~ShardServer() = default;

kj::Promise<void> ShardServer::serve() { return impl_->acceptLoop(); }

int ShardServer::connections() const { return int(impl_->connections.size()); }

}  // namespace traind
