#include <kj/async-io.h>
#include <spdlog/spdlog.h>

#include "core/parameter_shard.h"
#include "daemon/cluster_roles.h"
#include "rpc/shard_server.h"
#include "rpc/shard_service.h"

namespace traind {
namespace {

// Resolves once `flag` is set, looking every 100 ms: signal handlers only
// set an atomic, the event loop notices.
kj::Promise<void> whenSet(kj::Timer& timer, const std::atomic<bool>& flag) {
  if (flag.load()) return kj::READY_NOW;
  return timer.afterDelay(100 * kj::MILLISECONDS).then([&timer, &flag]() {
    return whenSet(timer, flag);
  });
}

}  // namespace

void runParameterServer(const ModelSpec& spec, const ClusterSpec& cluster, int task,
                        const std::atomic<bool>& stop_requested) {
  const LayerGraph graph = buildLayerGraph(spec);
  ParameterShard shard(spec, graph, cluster, task);
  kj::AsyncIoContext io = kj::setupAsyncIo();
  auto owned_service = kj::heap<ShardService>(shard, architectureHash(spec));
  ShardService& service = *owned_service;
  wire::ParameterShard::Client client(kj::mv(owned_service));
  const std::string address = cluster.ps[size_t(task)].toString();
  ShardServer server(io, address, client);
  spdlog::info("ps {} serving {} of {} ({} floats, {} variable pieces, {} chunks) on {}, {} mode",
               task, spec.name, graph.parameterCount(), shard.size(), shard.plan().pieces.size(),
               shard.chunks().size(), address,
               cluster.mode == TrainingMode::Sync ? "sync" : "async");

  kj::Promise<void> serving = server.serve().eagerlyEvaluate([](kj::Exception&& e) {
    spdlog::error("the listener failed: {}", e.getDescription().cStr());
  });
  kj::Timer& timer = io.provider->getTimer();
  service.onStop().exclusiveJoin(whenSet(timer, stop_requested)).wait(io.waitScope);
  // Let the workers see that the job is done before the connections close.
  for (int waited = 0; service.stopping() && server.connections() > 0 && waited < 50; ++waited)
    timer.afterDelay(100 * kj::MILLISECONDS).wait(io.waitScope);
  spdlog::info("ps {} done at global step {} ({} stale gradient chunks dropped)", task,
               shard.globalStep(), shard.staleDropped());
}

}  // namespace traind
