#include <kj/async-io.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>
#include <vector>

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

// Copies the shard's counters into the node's metrics every 100 ms, and
// marks the node serving once the chief has initialised the shard: the ops
// thread never touches the shard, which belongs to this event loop.
kj::Promise<void> publishMetrics(kj::Timer& timer, const ParameterShard& shard,
                                 const ShardServer& server, NodeMetrics& metrics) {
  metrics.setShardCounters(shard.staleDropped(), server.connections());
  metrics.setGlobalStep(shard.globalStep());
  if (shard.ready() && metrics.state() == NodeState::Waiting) metrics.setState(NodeState::Serving);
  return timer.afterDelay(100 * kj::MILLISECONDS).then([&timer, &shard, &server, &metrics]() {
    return publishMetrics(timer, shard, server, metrics);
  });
}

// How long a sync step may stand still before the ps says whom it waits
// for, and again every as long while it still does. Steps take
// milliseconds; the chief's evaluations and checkpoints take seconds.
constexpr int kStallReportSeconds = 15;

// "1, 3 and 4"
std::string workerList(const std::vector<uint32_t>& workers) {
  std::string out;
  for (size_t i = 0; i < workers.size(); ++i)
    out += (i == 0 ? "" : i + 1 == workers.size() ? " and " : ", ") + std::to_string(workers[i]);
  return out;
}

// Sync: names the workers a global step that stands still waits for: the
// ones that pushed no gradient of it (a stopped or hung worker keeps its
// connection; sync training waits for it unless backup workers make up the
// step, as SyncReplicasOptimizer does).
class StallReporter {
 public:
  StallReporter(kj::Timer& timer, const ParameterShard& shard, const ClusterSpec& cluster)
      : timer_(timer), shard_(shard), cluster_(cluster) {}

  kj::Promise<void> run() {
    return timer_.afterDelay(1 * kj::SECONDS).then([this] {
      check();
      return run();
    });
  }

 private:
  void check() {
    const kj::TimePoint now = timer_.now();
    // A shard that holds nothing gets no gradients and keeps its step.
    if (shard_.chunks().empty()) return;
    if (!shard_.ready() || shard_.globalStep() != step_) {
      step_ = shard_.globalStep();
      next_report_ = now + kStallReportSeconds * kj::SECONDS;
      waited_ = 0;
      return;
    }
    if (now < next_report_) return;
    next_report_ = now + kStallReportSeconds * kj::SECONDS;
    waited_ += kStallReportSeconds;
    std::vector<uint32_t> silent, gone;
    for (uint32_t w : shard_.workersStepWaitsFor())
      (shard_.workerConnected(w) ? silent : gone).push_back(w);
    std::string lacking;
    if (!silent.empty())
      lacking = fmt::format("worker{} {} (connected: stopped, hung or slow?)",
                            silent.size() > 1 ? "s" : "", workerList(silent));
    if (!gone.empty())
      lacking += fmt::format("{}worker{} {} (not connected)", lacking.empty() ? "" : " and ",
                             gone.size() > 1 ? "s" : "", workerList(gone));
    spdlog::warn("global step {} has waited {} s for gradients from {}; it aggregates {} of the "
                 "{} workers' per chunk",
                 step_, waited_, lacking, cluster_.replicas_to_aggregate, cluster_.worker.size());
  }

  kj::Timer& timer_;
  const ParameterShard& shard_;
  const ClusterSpec& cluster_;
  int64_t step_ = -1;
  kj::TimePoint next_report_ = kj::origin<kj::TimePoint>();
  int waited_ = 0;
};

}  // namespace

void runParameterServer(const ModelSpec& spec, const ClusterSpec& cluster, int task,
                        const std::atomic<bool>& stop_requested, NodeMetrics& metrics) {
  const LayerGraph graph = buildLayerGraph(spec);
  ParameterShard shard(spec, graph, cluster, task);
  kj::AsyncIoContext io = kj::setupAsyncIo();
  ServedShard service(shard, architectureHash(spec));
  const std::string address = cluster.ps[size_t(task)].toString();
  ShardServer server(io, address,
                     [&service](kj::Own<PinningStream> connection) -> capnp::Capability::Client {
                       return service.newSession(kj::mv(connection));
                     });
  metrics.setState(NodeState::Waiting,
                   "waiting for the chief (worker 0) to initialise the parameters");
  spdlog::info("ps {} serving {} of {} ({} floats, {} variable pieces, {} chunks) on {}, {} mode",
               task, spec.name, graph.parameterCount(), shard.size(), shard.plan().pieces.size(),
               shard.chunks().size(), address,
               cluster.mode == TrainingMode::Sync ? "sync" : "async");

  kj::Promise<void> serving = server.serve().eagerlyEvaluate([](kj::Exception&& e) {
    spdlog::error("the listener failed: {}", e.getDescription().cStr());
  });
  kj::Timer& timer = io.provider->getTimer();
  kj::Promise<void> publishing =
      publishMetrics(timer, shard, server, metrics).eagerlyEvaluate(nullptr);
  StallReporter stalls(timer, shard, cluster);
  kj::Promise<void> reporting = cluster.mode == TrainingMode::Sync
                                    ? stalls.run().eagerlyEvaluate(nullptr)
                                    : kj::Promise<void>(kj::NEVER_DONE);
  service.onStop().exclusiveJoin(whenSet(timer, stop_requested)).wait(io.waitScope);
  // A stop asked of this ps ends the job for its workers as the chief's stop
  // does; the chief can still read the state for its last checkpoint.
  service.beginStopping("a signal or POST /stop");
  metrics.setState(NodeState::Stopping);
  // Let the workers see that the job is done before the connections close.
  for (int waited = 0; server.connections() > 0 && waited < 50; ++waited)
    timer.afterDelay(100 * kj::MILLISECONDS).wait(io.waitScope);
  metrics.setState(NodeState::Done);
  spdlog::info("ps {} done at global step {} ({} stale gradient chunks dropped)", task,
               shard.globalStep(), shard.staleDropped());
}

}  // namespace traind
