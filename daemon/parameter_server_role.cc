#include <kj/async-io.h>
#include <malloc.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <string>

#include "core/error.h"
#include "core/parameter_shard.h"
#include "core/printable.h"
#include "daemon/cluster_fit.h"
#include "daemon/cluster_roles.h"
#include "daemon/step_stall_report.h"
#include "rpc/failure_text.h"
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

constexpr const char* kWaitingForTheChief =
    "waiting for the chief (worker 0) to initialise the parameters";

// Copies the shard's counters into the node's metrics every
// kShardPublishPeriod, and marks the node serving once the chief has
// initialised the shard (waiting again while a chief initialises it
// again): the ops thread never touches the shard, which belongs to this
// event loop. A checkpoint the chief reported since the last look
// (`saves_seen` of them before) is logged and becomes the node's last
// checkpoint.
kj::Promise<void> publishMetrics(kj::Timer& timer, const ParameterShard& shard,
                                 const ServedShard& service, NodeMetrics& metrics,
                                 uint64_t saves_seen = 0) {
  // Workers that said hello: a connection that never does (a port scan) is none.
  metrics.setShardCounters(
      shard.staleDropped(), shard.workersConnected(), service.pushCounts(),
      shard.cluster().mode == TrainingMode::Async ? &shard.staleness() : nullptr);
  // A shard the chief has not initialised is at no step yet.
  if (shard.ready()) metrics.setGlobalStep(shard.globalStep());
  if (shard.ready() && metrics.state() == NodeState::Waiting) metrics.setState(NodeState::Serving);
  // A chief restoring the shard again (another ps restarted beside it).
  if (!shard.ready() && metrics.state() == NodeState::Serving)
    metrics.setState(NodeState::Waiting, kWaitingForTheChief);
  if (const auto& saved = service.lastSaved(); saved && saved->count != saves_seen) {
    spdlog::info("the chief's checkpoint {} holds this shard at global step {}", saved->path,
                 saved->global_step);
    metrics.recordCheckpoint(saved->global_step, saved->path);
    saves_seen = saved->count;
  }
  return timer.afterDelay(kShardPublishPeriod.count() * kj::MILLISECONDS)
      .then([&timer, &shard, &service, &metrics, saves_seen]() {
        return publishMetrics(timer, shard, service, metrics, saves_seen);
      });
}

// Every second, what StepStallReport has to say, logged, and how long the
// step has stood, into the node's metrics; a chief's hold that has stood
// too long is lifted.
kj::Promise<void> reportStalls(kj::Timer& timer, StepStallReport& report, ServedShard& service,
                               NodeMetrics& metrics) {
  return timer.afterDelay(1 * kj::SECONDS).then([&timer, &report, &service, &metrics] {
    service.expireHold();
    const double now = double((timer.now() - kj::origin<kj::TimePoint>()) / kj::MILLISECONDS) / 1e3;
    if (auto line = report.check(now)) {
      if (line->suspects)
        spdlog::warn("{}", line->text);
      else
        spdlog::info("{}", line->text);
    }
    metrics.setStepStanding(report.standingSeconds());
    return reportStalls(timer, report, service, metrics);
  });
}

// Every second, once a connection has closed since the last look, the
// heap's free pages go back to the system. traind keeps freed memory
// (main's M_TRIM_THRESHOLD), which a ps in steady use reuses; but the chunk
// copies a departed worker's answers held are freed out of order, and the
// holes they leave stayed the process's: a ps over TCP whose two workers
// were killed mid-step 30 times grew from 3.2 to 13.5 MB of anonymous
// memory, and stayed at 2.3 MB with this.
kj::Promise<void> trimAfterDepartures(kj::Timer& timer, const ShardServer& server,
                                      uint64_t closed_seen = 0) {
  return timer.afterDelay(1 * kj::SECONDS).then([&timer, &server, closed_seen] {
    const uint64_t closed = server.connectionsClosed();
    if (closed != closed_seen) malloc_trim(0);
    return trimAfterDepartures(timer, server, closed);
  });
}

// How long a sync ps stopped alone waits for the step its workers compute:
// three times as long as a step took lately (the longest in the last
// minute: StepStallReport::longestRecentStepSeconds), at least kFinishStepSeconds
// (fashion-sized steps take milliseconds; the chief's evaluations hold one
// for a second or two) and at most kMostFinishStepSeconds. Docker's default
// stop timeout is 10 s (the compose file gives 5 minutes, the systemd unit
// 300 s): a ps killed there loses its workers every step since the last
// checkpoint, where one that stops without the step is a step apart.
constexpr double kFinishStepSeconds = 5.0;
constexpr double kMostFinishStepSeconds = 60.0;

// A stop asked of this ps alone, in sync training with workers connected:
// the step they compute is applied before the shard stops
// (ServedShard::stopAfterStep), unless it does not come within the wait
// above or fewer workers than the step aggregates are left (every node was
// signalled at once, and they stop).
void finishStepInProgress(ServedShard& service, const ParameterShard& shard, kj::Timer& timer,
                          kj::WaitScope& wait_scope, const std::string& by, double step_seconds) {
  const int needed = shard.cluster().replicas_to_aggregate;
  if (service.stopping() || shard.cluster().mode != TrainingMode::Sync || !shard.ready() ||
      shard.workersConnected() < needed)
    return;
  const int64_t step = shard.globalStep() + 1;
  const double most = std::clamp(3.0 * step_seconds, kFinishStepSeconds, kMostFinishStepSeconds);
  service.stopAfterStep(step, by);
  spdlog::info(
      "stop requested by {}: stopping once global step {} is applied, the step the workers "
      "compute, which the other ps tasks apply too (waiting {:.0f} s at most)",
      by, step, most);
  for (kj::Duration waited = 0 * kj::SECONDS;
       !service.stopping() && shard.workersConnected() >= needed &&
       waited < int64_t(most * 1000) * kj::MILLISECONDS;
       waited += 20 * kj::MILLISECONDS)
    timer.afterDelay(20 * kj::MILLISECONDS).wait(wait_scope);
  if (!service.stopping())
    spdlog::info("global step {} was not applied {}: stopping at global step {}", step,
                 shard.workersConnected() >= needed ? fmt::format("within {:.0f} s", most)
                                                    : std::string("(its workers are going)"),
                 shard.globalStep());
}

}  // namespace

void runParameterServer(const ModelSpec& spec, const ClusterSpec& cluster, int task,
                        const StopRequest& stop, NodeMetrics& metrics) {
  checkModelFitsCluster(spec, cluster);  // not to serve a job its workers refuse
  const LayerGraph graph = buildLayerGraph(spec);
  ParameterShard shard(spec, graph, cluster, task);
  // A shard that holds no variable takes no gradient: its step never moves,
  // and that says nothing of the job's health.
  if (shard.chunks().empty()) metrics.setStallLimit(std::chrono::seconds(0));
  kj::AsyncIoContext io = kj::setupAsyncIo();
  ServedShard service(shard, specIdentity(spec), cluster.shared_memory);
  const HostPort& own = cluster.ps[size_t(task)];
  const std::string address = own.toString();
  // A port in use is the cluster spec's line to fix, or another process to stop.
  std::optional<ShardServer> bound;
  try {
    bound.emplace(io, address, mostConnectionsFor(cluster.worker.size()),
                  [&service](kj::Own<PinningStream> connection) -> capnp::Capability::Client {
                    return service.newSession(kj::mv(connection));
                  });
  } catch (const InputError& e) {
    throwInputError(own.location, fmt::format("cluster.ps[{}]", task), e.what());
  }
  ShardServer& server = *bound;
  metrics.setState(NodeState::Waiting, kWaitingForTheChief);
  spdlog::info(
      "ps {} listening on {}, {} mode: its shard of {} ({} parameters) is {} floats, {} variable "
      "pieces, {} chunks; waiting for the chief (worker 0) to initialise it",
      task,
      server.boundAddress() == address ? address
                                       : fmt::format("{} ({})", address, server.boundAddress()),
      cluster.mode == TrainingMode::Sync ? "sync" : "async", spec.name, graph.parameterCount(),
      shard.size(), shard.plan().pieces.size(), shard.chunks().size());
  if (!cluster.shared_memory)
    spdlog::info("tensors over TCP only, from every worker: transport.shared_memory is off");

  kj::Promise<void> serving = server.serve().eagerlyEvaluate(
      [](kj::Exception&& e) { spdlog::error("the listener failed: {}", failureText(e)); });
  kj::Timer& timer = io.provider->getTimer();
  kj::Promise<void> publishing =
      publishMetrics(timer, shard, service, metrics).eagerlyEvaluate(nullptr);
  kj::Promise<void> trimming = trimAfterDepartures(timer, server).eagerlyEvaluate(nullptr);
  StepStallReport stalls(shard, cluster);
  kj::Promise<void> reporting =
      reportStalls(timer, stalls, service, metrics).eagerlyEvaluate([](kj::Exception&& e) {
        spdlog::error("the stall report failed: {}", e.getDescription().cStr());
      });
  service.onStop().exclusiveJoin(whenSet(timer, stop.flag())).wait(io.waitScope);
  // A stop asked of this ps ends the job for its workers as the chief's stop
  // does, in sync training after the step they compute; the chief can still
  // read the state for its last checkpoint.
  finishStepInProgress(service, shard, timer, io.waitScope, stop.by(),
                       stalls.longestRecentStepSeconds());
  service.beginStopping(stop.by());
  // trainctl status and GET /status say why, while the ps waits for its workers.
  metrics.setState(NodeState::Stopping, service.divergence().empty()
                                            ? std::string()
                                            : chiefDivergedText(service.divergence()));
  // A step that stands while the job stops is no one's fault.
  reporting = kj::READY_NOW;
  auto waitForConnectionsToClose = [&](kj::Duration most) {
    for (kj::Duration waited = 0 * kj::SECONDS; server.connections() > 0 && waited < most;
         waited += 100 * kj::MILLISECONDS)
      timer.afterDelay(100 * kj::MILLISECONDS).wait(io.waitScope);
  };
  // Let the workers see that the job is done before the connections close.
  waitForConnectionsToClose(5 * kj::SECONDS);
  // A worker still connected has not heard it (paused, or slow): it is told
  // as the connection closes, and reads it when it goes on.
  if (server.connections() > 0) {
    server.endConnections(fmt::format(
        "{}: ps {} stopped at global step {}{}", kJobOverReason, task, shard.globalStep(),
        service.divergence().empty() ? "" : ": " + chiefDivergedText(service.divergence())));
    waitForConnectionsToClose(1 * kj::SECONDS);
  }
  metrics.setState(NodeState::Done);
  const PushCounts& pushes = service.pushCounts();
  // Sync drops stale gradients; async applies them, how stale they were.
  const GradientStaleness& staleness = shard.staleness();
  spdlog::info(
      "ps {} done {} ({}; gradients in {} calls over TCP, {} chunks in {} calls through shared "
      "memory)",
      task,
      shard.ready() ? fmt::format("at global step {}", shard.globalStep())
                    : std::string("while its shard waited for the chief"),
      shard.cluster().mode == TrainingMode::Sync
          ? fmt::format("{} stale gradient chunks dropped", shard.staleDropped())
          : fmt::format("{} pushes applied, {:.2f} steps stale on average, at most {}",
                        staleness.pushes, staleness.mean(), staleness.most),
      pushes.tcp_calls, pushes.shared_chunks, pushes.shared_calls);
  // Training that goes with this process: steps applied after the chief's
  // last save, as when every node is signalled at once and another
  // worker's last push lands after the chief read the shards. (At the
  // job's end, the chief's stop, async workers' last pushes after its read
  // are the documented overshoot of max_steps.)
  auto stepsAfter = [&](int64_t step) {
    return shard.globalStep() - step == 1
               ? std::string("the step after it is")
               : fmt::format("the {} steps after it are", shard.globalStep() - step);
  };
  const std::optional<ServedShard::Initialised>& initialised = service.initialised();
  if (const auto& saved = service.lastSaved();
      stop.requested() && saved && saved->global_step < shard.globalStep())
    spdlog::warn(
        "the chief's last checkpoint {} holds this shard at global step {}: {} in no "
        "checkpoint (a worker pushed after the chief's last read, or the chief stopped "
        "before the others, or failed or was killed before its final checkpoint)",
        saved->path, saved->global_step, stepsAfter(saved->global_step));
  else if (stop.requested() && !saved && initialised && !initialised->checkpoint_dir.empty() &&
           initialised->global_step < shard.globalStep())
    spdlog::warn(
        "the chief has reported no checkpoint of this shard since it started it at global "
        "step {}: {} in no checkpoint of {} (the chief failed, was killed or was stopped "
        "for good before its first checkpoint; with this process they are lost)",
        initialised->global_step, stepsAfter(initialised->global_step),
        printable(initialised->checkpoint_dir));
  // The job failed: a systemd unit neither restarts this ps nor calls it a
  // success, as with the chief (its parameters may be the diverged ones).
  if (!service.divergence().empty())
    throw Diverged(fmt::format("stopped at global step {}: {}", shard.globalStep(),
                               chiefDivergedText(service.divergence())));
}

}  // namespace traind
