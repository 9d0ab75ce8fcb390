#include <kj/async-io.h>
#include <spdlog/spdlog.h>

#include "core/input_pipeline.h"
#include "core/model_state.h"
#include "daemon/cluster_roles.h"
#include "daemon/evaluation.h"
#include "daemon/logging.h"
#include "daemon/step_log.h"
#include "daemon/training_data.h"
#include "devices/device_list.h"
#include "devices/towers.h"
#include "rpc/sharded_client.h"

namespace traind {
namespace {

// How long a node waits for its peers before it gives up: any start order
// works within it.
constexpr double kPeerTimeoutSeconds = 600.0;

// The chief's start (Supervisor semantics): shards that already hold the
// job's parameters are left alone (a restarted chief); otherwise the latest
// checkpoint is restored, or the parameters initialised, and sent to every shard.
void prepareShards(const ModelSpec& spec, ModelState& state, ShardedClient& ps) {
  bool all_ready = true;
  for (const ShardStatusView& s : ps.statuses()) all_ready = all_ready && s.ready;
  if (all_ready) {
    spdlog::info("the ps shards already hold the parameters; joining the job");
    return;
  }
  std::optional<std::filesystem::path> latest;
  if (!spec.checkpoint.dir.empty()) latest = findLatestCheckpoint(spec.checkpoint.dir);
  if (latest) {
    state.restore(*latest);
    spdlog::info("restored {} at global step {}", latest->string(), state.globalStep());
  } else {
    state.initialize();
    spdlog::info("initialised the parameters");
  }
  ps.initialize(state);
}

}  // namespace

TrainingSummary runWorker(const ModelSpec& spec, const ClusterSpec& cluster, int task,
                          const std::atomic<bool>& stop_requested,
                          std::atomic<bool>& checkpoint_requested, NodeMetrics& metrics) {
  const bool chief = task == 0;
  const bool sync = cluster.mode == TrainingMode::Sync;
  const int workers = int(cluster.worker.size());
  const LayerGraph graph = buildLayerGraph(spec);
  const std::vector<std::unique_ptr<Device>> devices =
      createDevices(spec.training.devices, spec.training.threads);
  const TrainingData data = loadTrainingData(spec, graph);
  ModelState state(spec, graph);
  FlatBuffer gradients(state.layout().totalSize());

  const int64_t batch_size = spec.data.batch_size;
  std::unique_ptr<Replica> replica =
      createTowers(devicePointers(devices), graph, state.layout(), batch_size, spec.seed);
  std::optional<Evaluator> evaluator;
  if (chief && data.test)
    evaluator.emplace(*devices.front(), graph, state.layout(), *data.test, batch_size, spec.seed);

  kj::AsyncIoContext io = kj::setupAsyncIo();
  ShardedClient ps(io, cluster, graph, state.layout(), architectureHash(spec), uint32_t(task));
  metrics.setState(NodeState::Waiting, "connecting to the ps tasks");
  ps.connect(kPeerTimeoutSeconds);
  if (chief) {
    metrics.setState(NodeState::Waiting, "initialising the ps shards");
    prepareShards(spec, state, ps);
    if (!spec.checkpoint.dir.empty())
      if (auto latest = findLatestCheckpoint(spec.checkpoint.dir))
        metrics.recordExistingCheckpoint(*latest);
  } else {
    metrics.setState(NodeState::Waiting, "waiting for the chief (worker 0) to initialise the ps shards");
    ps.waitUntilReady(kPeerTimeoutSeconds);
  }
  int64_t step = ps.pull(0, state.parameters());
  metrics.recordPull(ps.lastTransfer().pull_bytes, ps.lastTransfer().pull_seconds);
  metrics.setGlobalStep(step);

  // Worker i takes every workers-th batch of the job's epoch order: in sync
  // mode a global step consumes the batches a standalone run with a batch
  // workers times as large would.
  const int64_t examples_per_step = sync ? batch_size * cluster.replicas_to_aggregate : batch_size;
  const int64_t steps_per_epoch = data.train.size / examples_per_step;
  const int64_t total_steps = spec.training.max_steps > 0 ? spec.training.max_steps
                                                         : spec.training.epochs * steps_per_epoch;
  InputPipeline input(data.train, batch_size, spec.data.shuffle, spec.seed,
                      sync ? step : step / workers, spec.data.prefetch_batches, task, workers);
  spdlog::info("worker {}{} training {} in {} mode from global step {} to {}", task,
               chief ? " (chief)" : "", spec.name, sync ? "sync" : "async", step, total_steps);

  StepLog log(spec, total_steps, chief ? openTrainingSummaries(spec, step) : nullptr);
  auto last_checkpoint = std::chrono::steady_clock::now();
  // The state at the start step is a checkpoint already, or a fresh start.
  int64_t saved_step = step;
  auto checkpoint = [&] {
    if (!chief || spec.checkpoint.dir.empty()) return;
    ps.readState(state);
    if (state.globalStep() == saved_step) return;
    const std::filesystem::path path = state.save(spec.checkpoint.dir, spec.checkpoint.keep);
    saved_step = state.globalStep();
    last_checkpoint = std::chrono::steady_clock::now();
    metrics.recordCheckpoint(saved_step, path);
    spdlog::info("step {}, saved checkpoint {}", state.globalStep(), path.string());
  };

  metrics.setState(NodeState::Training);
  while (step >= 0 && step < total_steps && !stop_requested.load()) {
    const StepResult r = replica->trainStep(input.next(), state.parameters().data(),
                                            gradients.data(), uint64_t(step * workers + task));
    const int64_t next = ps.pushAndPull(gradients, sync ? step + 1 : 0, state.parameters());
    const ShardedClient::Transfer& transfer = ps.lastTransfer();
    metrics.recordPush(transfer.push_bytes, transfer.push_seconds);
    metrics.recordPull(transfer.pull_bytes, transfer.pull_seconds);
    if (next < 0) break;  // the shards are stopping: the job is done
    log.record(r, next);
    metrics.recordStep(next, r.loss, batch_size);
    if (chief) {
      if (evaluator && crossesMultiple(step, next, spec.training.eval_every) && next < total_steps)
        log.logEvaluation(next, evaluator->evaluate(state.parameters().data()));
      const double since_checkpoint =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - last_checkpoint).count();
      const bool requested = checkpoint_requested.exchange(false);
      if (requested || crossesMultiple(step, next, spec.checkpoint.every_steps) ||
          (spec.checkpoint.every_seconds > 0 && since_checkpoint >= spec.checkpoint.every_seconds))
        checkpoint();
    }
    step = next;
  }
  metrics.setState(NodeState::Stopping, chief ? "final checkpoint and evaluation" : "");
  clearProgress();
  TrainingSummary summary;
  summary.seconds = log.secondsRunning();
  summary.steps_run = log.stepsRun();
  summary.stopped = stop_requested.load();
  std::optional<EvalResult> test;
  if (chief) {
    checkpoint();
    const int64_t final_step = ps.pull(0, state.parameters());
    if (final_step >= 0) step = final_step;
    if (evaluator) {
      test = evaluator->evaluate(state.parameters().data());
      log.logEvaluation(step, *test);
      summary.test_loss = test->loss;
      if (spec.loss == LossKind::SoftmaxCrossEntropy) summary.test_accuracy = test->accuracy;
    }
    if (!summary.stopped) ps.stopAll();
  }
  summary.global_step = step;
  if (ps.gradientsDropped() > 0)
    spdlog::info("{} of this worker's pushes had chunks dropped as stale", ps.gradientsDropped());
  logSummary(spec, summary.global_step, summary.steps_run, summary.seconds, test);
  metrics.setState(NodeState::Done);
  return summary;
}

}  // namespace traind
