#include <kj/async-io.h>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "core/checkpoint.h"
#include "core/error.h"
#include "core/gradient_clipping.h"
#include "core/input_pipeline.h"
#include "core/model_state.h"
#include "core/stage_plan.h"
#include "daemon/cluster_fit.h"
#include "daemon/cluster_roles.h"
#include "daemon/concurrent_steps.h"
#include "daemon/evaluation.h"
#include "daemon/gradient_stream.h"
#include "daemon/logging.h"
#include "daemon/step_log.h"
#include "daemon/training_checkpoints.h"
#include "daemon/training_data.h"
#include "devices/device_list.h"
#include "rpc/sharded_client.h"

namespace traind {
namespace {

// How long a worker's ps tasks stay silent before it asks whether the job
// ended before it started (jobOverByCheckpoint). ps tasks starting a little
// after their workers are the rule. The chief waits longer: when the whole
// job is started again after its end, the ps tasks wait for the chief to
// stop them, and a chief gone before they came would leave them waiting.
// Started alone after the job (its host rebooted), it ends all the same,
// not failing after training.peer_wait_seconds to be restarted again and again.
constexpr double kWorkerJobOverAfterSeconds = 30.0;
constexpr double kChiefJobOverAfterSeconds = 120.0;

// The chief's start (Supervisor semantics): shards that already hold the
// job's parameters are left alone (a restarted chief); otherwise the latest
// checkpoint is restored, or the parameters initialised, and sent to every
// shard. `statuses` are the shards' as the chief found them; `train` is
// the training set the job trains on now. Returns whether it joined shards
// that were already running: what they hold is then in no checkpoint this
// chief knows of.
bool prepareShards(const ModelSpec& spec, ModelState& state, ShardedClient& ps,
                   const std::vector<ShardStatusView>& statuses, const Dataset& train) {
  bool all_ready = true;
  std::string holding;  // "ps 0 at global step 5230, ..."
  for (size_t i = 0; i < statuses.size(); ++i) {
    all_ready = all_ready && statuses[i].ready;
    if (statuses[i].ready)
      holding += fmt::format("{}ps {} at global step {}", holding.empty() ? "" : ", ", i,
                             statuses[i].global_step);
  }
  if (all_ready) {
    spdlog::info("the ps shards already hold the parameters; joining the job");
    return true;
  }
  std::optional<std::filesystem::path> latest;
  if (!spec.checkpoint.dir.empty()) latest = findLatestCheckpoint(spec.checkpoint.dir);
  // Some shards lost their state (their ps restarted) while others kept
  // theirs: the job's parameters must be of one step, so every shard starts
  // again from the checkpoint, as a TensorFlow session does after a ps
  // restart. What the others trained since is lost: said, not done quietly.
  if (!holding.empty())
    spdlog::warn(
        "some ps tasks hold no parameters (restarted?) while others do ({}): every "
        "shard starts again from {}, and what was trained since is lost",
        holding, latest ? "the latest checkpoint" : "a fresh initialisation (no checkpoint)");
  // Said once the shards hold it: a chief killed before would leave them empty.
  std::string done;
  if (latest) {
    done = restoreToTrain(state, *latest, spec.checkpoint.dir_location, train);
  } else {
    done = state.initialize();
  }
  ps.initialize(state);
  spdlog::info("{}", done);
  if (latest) ps.reportSaved(std::filesystem::absolute(*latest).string());
  return false;
}

// A worker ends the job at the step the chief that initialised the shards
// does: one whose spec or flags say another (--max-steps given on one host
// only, other epochs) would leave a sync job waiting for its gradients for
// good, or end an async one's share early, without a word.
void checkJobLength(const std::vector<ShardStatusView>& statuses, const ClusterSpec& cluster,
                    int64_t total_steps) {
  for (size_t i = 0; i < statuses.size(); ++i) {
    const int64_t last = statuses[i].last_step;
    if (last == 0 || last == total_steps) continue;  // 0: a shard the chief has not initialised
    throw InputError(fmt::format(
        "ps {} at {} serves a job that ends at global step {} (its chief's training.max_steps, "
        "training.epochs or --max-steps); this worker's ends at {}: every worker must train to "
        "the same step",
        i, cluster.ps[i].toString(), last, total_steps));
  }
}

// A streamed step's progress as the gradient stream hears it, the step's
// loss checked first: a step whose loss is not finite ends before any of its
// gradients is final, so none reaches a ps.
class LossCheckedProgress final : public GradientProgress {
 public:
  LossCheckedProgress(GradientProgress& stream, int64_t global_step)
      : stream_(stream), global_step_(global_step) {}

  void lossComputed(const StepResult& result) override { checkLossFinite(result, global_step_); }
  void finalFrom(size_t first_variable) override { stream_.finalFrom(first_variable); }

 private:
  GradientProgress& stream_;
  const int64_t global_step_;
};

// The steps of a worker's slots. With K > 1 each computes on a thread of its
// own while this thread, which runs the kj loop of the ps connections,
// pushes the gradients of finished steps and pulls parameters for their
// next ones (docs/devices.md, "Concurrent steps"). With K = 1 the step runs
// on a thread of its own when its gradient is sent during the backward pass
// (docs/distributed.md, "Gradients sent during backward"), on this thread
// otherwise: there is nothing to overlap it with.
class SlotSteps {
 public:
  // compute(i) runs slot i's step; it may throw, and the failure comes back
  // from nextFinished().
  // `threaded`: slots compute on threads of their own; otherwise (one slot)
  // nextFinished() computes the started step on the calling thread.
  SlotSteps(size_t slots, bool threaded, std::function<void(size_t)> compute)
      : compute_(std::move(compute)), started_(slots, false), failures_(slots) {
    if (!threaded && slots != 1)
      throw std::logic_error("several step slots need threads of their own");
    if (!threaded) return;
    try {
      for (size_t i = 0; i < slots; ++i) threads_.emplace_back([this, i] { serve(i); });
    } catch (...) {
      // A thread that could not start (std::system_error): the ones that
      // did end first, or destroying them joinable would terminate.
      stopAll();
      throw;
    }
  }

  // Steps in flight finish; their gradients are dropped.
  ~SlotSteps() { stopAll(); }

  // Slot i's parameters are ready: it computes its next step.
  void start(size_t i) {
    {
      std::lock_guard lock(mutex_);
      started_[i] = true;
    }
    slots_wake_.notify_all();
  }

  // A started slot whose step is done, without waiting: the failure of its
  // step thrown, as nextFinished() does; nullopt when none is.
  std::optional<size_t> takeFinished() {
    std::lock_guard lock(mutex_);
    if (finished_.empty()) return std::nullopt;
    return popFinished();
  }

  // For the kj loop of this thread, which waits for other things too:
  // resolves once a started slot's step is done (at once when one is).
  kj::Promise<void> whenFinished() {
    std::lock_guard lock(mutex_);
    if (!finished_.empty()) return kj::READY_NOW;
    auto [promise, fulfiller] = kj::newPromiseAndCrossThreadFulfiller<void>();
    finished_waiter_ = kj::mv(fulfiller);
    return kj::mv(promise);
  }

  // Waits until a started slot's step is done and returns the slot.
  size_t nextFinished() {
    if (threads_.empty()) {
      started_[0] = false;
      compute_(0);
      return 0;
    }
    std::unique_lock lock(mutex_);
    finished_wakes_.wait(lock, [this] { return !finished_.empty(); });
    return popFinished();
  }

 private:
  size_t popFinished() {  // under mutex_
    const size_t i = finished_.front();
    finished_.pop_front();
    if (failures_[i]) std::rethrow_exception(failures_[i]);
    return i;
  }

  void stopAll() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    slots_wake_.notify_all();
    for (std::thread& thread : threads_) thread.join();
  }

  void serve(size_t i) {
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        slots_wake_.wait(lock, [this, i] { return stopping_ || started_[i]; });
        if (stopping_) return;
        started_[i] = false;
      }
      std::exception_ptr failure;
      try {
        compute_(i);
      } catch (...) {
        failure = std::current_exception();
      }
      kj::Own<kj::CrossThreadPromiseFulfiller<void>> waiter;
      {
        std::lock_guard lock(mutex_);
        failures_[i] = failure;
        finished_.push_back(i);
        waiter = kj::mv(finished_waiter_);
      }
      finished_wakes_.notify_one();
      if (waiter) waiter->fulfill();  // outside the lock: it takes the loop's own
    }
  }

  std::function<void(size_t)> compute_;
  std::mutex mutex_;
  std::condition_variable slots_wake_, finished_wakes_;
  std::vector<bool> started_;  // under mutex_, as everything below
  std::vector<std::exception_ptr> failures_;
  std::deque<size_t> finished_;
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> finished_waiter_;  // whenFinished()'s
  bool stopping_ = false;
  std::vector<std::thread> threads_;  // last: they use the members above
};

// training.gradient_push, with auto decided as measured on CPU workers
// (docs/benchmarks.md, Distributed): sending during backward gained in sync
// mode, where a chunk's reply waits for the other workers' gradients of it
// anyway, and cost a few percent in async mode, where the sends and the
// ps's replies interrupt the backward pass they would overlap. A GPU
// leaves the host's cores free for them.
bool pushesDuringBackward(const ModelSpec& spec, bool sync) {
  switch (spec.training.gradient_push) {
    case TrainingSpec::GradientPush::DuringBackward:
      return true;
    case TrainingSpec::GradientPush::AfterStep:
      return false;
    case TrainingSpec::GradientPush::Auto:
      break;
  }
  if (spec.optimizer.clip_global_norm != 0.0f) return false;  // the norm needs all of it first
  if (sync) return true;
  for (const std::string& device : spec.training.devices)
    if (device.starts_with("cuda:")) return true;
  return false;
}

// A worker asked to stop while it still waited for its peers: a clean stop,
// with nothing trained.
TrainingSummary stoppedBeforeTraining(NodeMetrics& metrics) {
  metrics.setState(NodeState::Stopping);  // systemd hears STOPPING=1 of every clean stop
  metrics.setState(NodeState::Done);
  spdlog::info("done: stopped before training");
  TrainingSummary summary;
  summary.stopped = true;
  return summary;
}

// Why the job is over, when the checkpoint directory (if this host sees
// it) holds a checkpoint of this model at `last_step` or past it: a chief
// started now would end the job at once. Nothing when there is no such
// checkpoint, or none that can be read. The checkpoint may be another run's
// of the same model (a standalone run's into the same directory): asked
// only once the ps tasks have been silent a while (ShardedClient::connect).
std::optional<std::string> jobOverByCheckpoint(const ModelSpec& spec, int64_t last_step) {
  if (spec.checkpoint.dir.empty()) return std::nullopt;
  try {
    const std::optional<std::filesystem::path> latest = findLatestCheckpoint(spec.checkpoint.dir);
    if (!latest) return std::nullopt;
    const CheckpointManifest manifest = readManifest(*latest);
    if (manifest.architecture_hash != architectureHash(spec) || manifest.global_step < last_step)
      return std::nullopt;
    return fmt::format("the job's latest checkpoint, {}, is at global step {}{}", latest->string(),
                       manifest.global_step,
                       manifest.global_step == last_step
                           ? ", its last"
                           : fmt::format(", past its last ({})", last_step));
  } catch (const std::exception&) {
    return std::nullopt;  // a checkpoint being written, or broken: nothing to judge by
  }
}

// `final_checkpoint` is set once the chief has written its final checkpoint.
// `io` and `shards` are the caller's, so that they outlive a JobEnded thrown
// from here: the chief then stops the shards still serving. So are the step
// slots' gradient and parameter buffers (`slot_buffers`, when not in the
// shared region), which outlive `shards`: a push sends its gradient without
// a copy, and one given up on the way out may still sit in a connection's
// queue of writes, which the chief's last calls let out.
TrainingSummary trainAsWorker(const ModelSpec& spec, const ClusterSpec& cluster, int task,
                              const std::atomic<bool>& stop_requested,
                              std::atomic<bool>& checkpoint_requested, NodeMetrics& metrics,
                              bool& final_checkpoint, std::vector<FlatBuffer>& slot_buffers,
                              std::optional<kj::AsyncIoContext>& io,
                              std::optional<ShardedClient>& shards) {
  checkModelFitsCluster(spec, cluster);
  const bool chief = task == 0;
  const bool sync = cluster.mode == TrainingMode::Sync;
  const int concurrent_steps = spec.training.concurrent_steps;
  const int workers = int(cluster.worker.size());
  const LayerGraph graph = buildLayerGraph(spec);
  const std::vector<std::unique_ptr<Device>> devices =
      createDevices(spec.training.devices, spec.training.threads, spec.training.devices_location);
  const TrainingData data =
      loadTrainingData(spec, graph,
                       {task, workers, /*evaluates=*/chief,
                        chief ? MemoryOf::ClusterChief : MemoryOf::ClusterWorker});
  if (const auto note = interleaveNote(spec, data.train)) spdlog::warn("{}", *note);
  // With data.shard_by_worker this worker holds its share alone.
  const bool holds_share = data.train.isShare();
  const int64_t train_examples = data.train.wholeSize();
  if (holds_share)
    spdlog::info(
        "worker {} holds its share of the training set: {} of its {} examples "
        "(data.shard_by_worker)",
        task, data.train.size, train_examples);
  const VariableLayout layout(graph.variables);
  // Only the chief holds the model's state (it initialises or restores the
  // shards, checkpoints and evaluates): the others' would be the
  // optimizer's slots, which they never use (two copies of the model with
  // Adam).
  std::optional<ModelState> state;
  if (chief) state.emplace(spec, graph);

  const int64_t batch_size = spec.data.batch_size;
  // Worker i takes every workers-th batch of the job's epoch order: in sync
  // mode a global step consumes the batches a standalone run with a batch
  // workers times as large would.
  const int64_t examples_per_step = sync ? batch_size * cluster.replicas_to_aggregate : batch_size;
  const int64_t steps_per_epoch = train_examples / examples_per_step;
  const int64_t total_steps = spec.training.max_steps > 0 ? spec.training.max_steps
                                                          : spec.training.epochs * steps_per_epoch;
  // The ps tasks hold every worker to the chief's training set.
  SpecIdentity identity = specIdentity(spec);
  identity.training_set = contentText(data.train);
  if (state) state->setTrainingSet(identity.training_set);
  io.emplace(kj::setupAsyncIo());
  ShardedClient& ps = shards.emplace(*io, cluster, graph, layout, identity, uint32_t(task));
  // After ps: their buffers may be views into its shared memory region.
  std::vector<std::unique_ptr<StepSlot>> slots = createStepSlots(spec, graph, layout);
  std::optional<Evaluator> evaluator;
  if (chief && data.test)
    evaluator.emplace(*devices.front(), graph, layout, *data.test, batch_size, spec.seed);
  if (chief) warnIfNothingToEvaluate(spec, data.test.has_value());

  // A stop while this worker waits for a sync step that the others, stopping
  // too, will not finish ends the wait (trainctl stop asks every worker).
  ps.abandonWaitsOnStop(stop_requested);
  ps.setLastStep(total_steps);
  CheckpointDirLock checkpoint_dir_lock;
  if (chief && !spec.checkpoint.dir.empty()) {
    ModelState::checkSavable(spec, graph, spec.checkpoint.dir_location);
    checkpoint_dir_lock = createCheckpointDir(spec.checkpoint.dir, spec.checkpoint.dir_location);
    if (auto shortfall = checkpointRoomShortfall(spec.checkpoint.dir, state->checkpointBytes()))
      spdlog::warn("{}", *shortfall);
  }
  metrics.setState(NodeState::Waiting, "connecting to the ps tasks");
  const JobOverCheck job_over{[&] { return jobOverByCheckpoint(spec, total_steps); },
                              chief ? kChiefJobOverAfterSeconds : kWorkerJobOverAfterSeconds};
  switch (ps.connect(double(cluster.peer_wait_seconds), job_over)) {
    case ShardedClient::Outcome::Connected:
      break;
    case ShardedClient::Outcome::Stopped:
      return stoppedBeforeTraining(metrics);
    case ShardedClient::Outcome::JobOver:
      metrics.setState(NodeState::Done);
      spdlog::info("done: the job ended before this worker started");
      return TrainingSummary{};
  }
  metrics.setSharedMemoryShards(ps.shardsThroughSharedMemory());
  bool joined = false;
  if (chief) {
    metrics.setState(NodeState::Waiting, "initialising the ps shards");
    const std::optional<std::vector<ShardStatusView>> statuses = ps.statuses();
    if (!statuses) return stoppedBeforeTraining(metrics);
    joined = prepareShards(spec, *state, ps, *statuses, data.train);
    spdlog::info("{}", describeCheckpoints(spec.checkpoint));
    if (!spec.checkpoint.dir.empty())
      if (auto latest = findLatestCheckpoint(spec.checkpoint.dir))
        metrics.recordExistingCheckpoint(*latest);
  } else {
    metrics.setState(NodeState::Waiting,
                     "waiting for the chief (worker 0) to initialise the ps shards");
    if (!ps.waitUntilReady(double(cluster.peer_wait_seconds)))
      return stoppedBeforeTraining(metrics);
  }
  if (!chief || joined) {
    const std::optional<std::vector<ShardStatusView>> statuses = ps.statuses();
    if (!statuses) return stoppedBeforeTraining(metrics);
    checkJobLength(*statuses, cluster, total_steps);
  }
  // With one step in flight and every ps on this host, the step computes in
  // the shared memory region the ps tasks map: pushes and pulls copy nothing
  // on this side (a chunk goes once the step is done with it). Otherwise
  // each slot computes from the parameters of its own last pull.
  const int64_t model_size = layout.totalSize();
  if (const ShardedClient::SharedBuffers shared = ps.sharedBuffers();
      shared.gradients && slots.size() == 1) {
    slots.front()->gradients = FlatBuffer::over(shared.gradients, model_size);
    slots.front()->parameters = FlatBuffer::over(shared.parameters, model_size);
  } else {
    slot_buffers.reserve(2 * slots.size());
    for (auto& slot : slots) {
      slot->gradients = FlatBuffer::over(slot_buffers.emplace_back(model_size).data(), model_size);
      slot->parameters = FlatBuffer::over(slot_buffers.emplace_back(model_size).data(), model_size);
    }
  }
  int64_t step = ps.pull(0, slots.front()->parameters);
  metrics.recordPull(ps.lastTransfer().pull_bytes, ps.lastTransfer().pull_seconds);
  if (step < 0 && stop_requested.load()) return stoppedBeforeTraining(metrics);
  if (step < 0) {  // the shards are stopping already (said above)
    metrics.setState(NodeState::Done);
    spdlog::info("done: the job ended before this worker trained");
    return TrainingSummary{};
  }
  metrics.setGlobalStep(step);
  const int64_t start_step = step;
  // Joined mid-step (sync): no ps holds the step's values of the chunks it
  // applied already, so the parameters are of two steps, and so is the
  // gradient computed from them.
  if (const auto& half = ps.halfAppliedStep())
    spdlog::warn(
        "the parameters pulled from ps {} are of global steps {} and {}: it had applied step {} "
        "to some of its chunks, the others waiting for gradients (a worker restarted after its "
        "earlier process pushed part of the step, or one that joins mid-step with backup "
        "workers); this worker's first gradient is computed from both, as an async one may be, "
        "and the job will not repeat an uninterrupted run exactly",
        half->shard, half->step, half->step + 1, half->step);
  // What each slot's parameters were pulled at: the global step, and each
  // shard's, which its push is tagged with. Every slot starts from the first pull.
  struct Pulled {
    int64_t step = 0;
    std::vector<int64_t> shard_steps;
  };
  std::vector<Pulled> pulled(slots.size(), Pulled{step, ps.shardSteps()});
  for (size_t i = 1; i < slots.size(); ++i)
    std::memcpy(slots[i]->parameters.data(), slots.front()->parameters.data(),
                size_t(layout.totalSize()) * sizeof(float));

  // A share is this worker's alone: not dealt out among the workers again.
  // Sync, the batch of a step is the one of the global step it computes at
  // (docs/distributed.md): a push dropped as stale (backup workers) can
  // leave the job steps ahead of this worker's pipeline, which then seeks
  // there. Async, each worker goes through its own order.
  int64_t input_step = sync ? step : step / workers;  // the step input gives a batch of next
  int64_t input_moves = 0;                            // seeks to the job's step
  InputPipeline input(data.train, batch_size, spec.data.shuffle, spec.seed, input_step,
                      readAheadBatches(spec.data, /*cluster_worker=*/true), holds_share ? 0 : task,
                      holds_share ? 1 : workers, spec.data.augment, spec.data.shuffle_buffer);
  // With one step in flight its gradient may be sent while it is computed.
  const bool streamed = slots.size() == 1 && pushesDuringBackward(spec, sync);
  // Towers and pipelines tell that a gradient is final only as the step
  // ends (docs/distributed.md): streamed, their push still waits for it.
  const bool tells_early =
      devices.size() == 1 && spec.training.micro_batches == 1 && !isPlaced(spec);
  if (step < total_steps)
    spdlog::info("worker {}{} training {} on {} in {} mode from global step {} to {}{}", task,
                 chief ? " (chief)" : "", spec.name, deviceNames(devices), sync ? "sync" : "async",
                 step, total_steps,
                 concurrent_steps > 1      ? fmt::format(", {} steps in flight", concurrent_steps)
                 : streamed && tells_early ? ", gradients sent during the backward pass"
                 : streamed ? ", gradients sent as the step ends (its devices tell no earlier)"
                            : ", gradients sent after each step");
  else
    spdlog::info("worker {}{}: nothing to train: the job is at global step {}, it ends at {}", task,
                 chief ? " (chief)" : "", step, total_steps);

  StepLog log(spec, step, total_steps, chief ? openTrainingSummaries(spec, step) : nullptr);
  auto last_checkpoint = std::chrono::steady_clock::now();
  // The state the chief restored is a checkpoint already (or a fresh start),
  // at its own step: the first pull may be steps past it, other workers'
  // pushes since, which its first checkpoint is the first to hold. So is all
  // a chief that joined running shards (it was restarted) finds there.
  int64_t saved_step = chief && !joined ? state->globalStep() : -1;
  CheckpointWriter writer(spec.checkpoint, checkpoint_dir_lock, metrics);
  auto checkpoint = [&] {
    if (!chief || spec.checkpoint.dir.empty()) return;
    ps.readState(*state);
    if (state->globalStep() == saved_step) return;
    const SavedCheckpoint saved = writer.save(*state);
    ps.reportSaved(std::filesystem::absolute(saved.path).string());
    saved_step = state->globalStep();
    last_checkpoint = std::chrono::steady_clock::now();
    writer.report(saved, saved_step);
  };

  // A slot's step: the next batch (the slots take turns at the pipeline)
  // through its replica, from the parameters of its last pull. Dropout gets
  // a mask of its own for every step of every worker and slot.
  std::mutex input_mutex;
  std::vector<StepResult> results(slots.size());
  GradientStream gradient_stream;
  auto computeStep = [&](size_t i) {
    StepSlot& slot = *slots[i];
    const Batch* batch = nullptr;
    {
      std::lock_guard lock(input_mutex);
      if (sync && pulled[i].step != input_step) {  // sync runs one step slot
        input_step = pulled[i].step;
        input.seek(input_step);
        ++input_moves;
      }
      batch = &slot.take(input);
      ++input_step;
    }
    // A seed, not a count: unsigned, so that no step a ps reports can overflow it.
    const uint64_t worker_step = uint64_t(pulled[i].step) * uint64_t(workers) + uint64_t(task);
    const uint64_t dropout_step = worker_step * uint64_t(concurrent_steps) + uint64_t(i);
    if (!streamed) {
      results[i] = slot.replica->trainStep(*batch, slot.parameters.data(), slot.gradients.data(),
                                           dropout_step);
      // On the step's thread, with its share of the compute threads.
      if (const float clip_norm = spec.optimizer.clip_global_norm; clip_norm != 0.0f) {
        checkLossFinite(results[i], pulled[i].step + 1);  // a NaN loss said as such first
        results[i].gradient_norm =
            clipByGlobalNorm(slot.gradients.data(), slot.parameters.data(), layout, clip_norm,
                             spec.optimizer.weight_decay, pulled[i].step + 1);
      }
      return;
    }
    LossCheckedProgress progress(gradient_stream, pulled[i].step + 1);
    results[i] = slot.replica->trainStepWithProgress(*batch, slot.parameters.data(),
                                                     slot.gradients.data(), dropout_step, progress);
    gradient_stream.finalFrom(0);  // whatever the replica said: the step is done
  };
  // A streamed step that fails, however, ends the push waiting for it.
  auto compute = [&](size_t i) {
    if (!streamed) return computeStep(i);
    try {
      computeStep(i);
    } catch (const std::exception& e) {
      gradient_stream.fail(fmt::format("the training step failed: {}", e.what()));
      throw;
    } catch (...) {
      gradient_stream.fail("the training step failed");
      throw;
    }
  };
  auto running = [&] { return step >= 0 && step < total_steps && !stop_requested.load(); };
  // Several slots of an async worker whose ps tasks are all over TCP: their
  // push+pulls overlap, so that a long round trip holds back each step but
  // not the others' exchanges. Through shared memory a round trip is short,
  // and a slot's chunks go through the region one call at a time.
  const bool overlapping = slots.size() > 1 && !sync && ps.shardsThroughSharedMemory() == 0;
  std::deque<size_t> computed;  // overlapping: slots whose push+pull is still to start
  // At the job's last step, or stopped, the push+pulls already in flight
  // end: their gradients are sent, and count among this worker's steps.
  auto draining = [&] { return overlapping && step >= 0 && ps.pushAndPullsInFlight() > 0; };

  metrics.setState(NodeState::Training);
  try {
    SlotSteps steps(slots.size(), slots.size() > 1 || streamed, compute);
    // Before `steps` and the slots go: the calls of push+pulls in flight use their buffers.
    KJ_DEFER(ps.abandonPushAndPulls());
    if (!streamed)
      for (size_t i = 0; i < slots.size(); ++i) steps.start(i);
    while (running() || draining()) {
      size_t i = 0;
      int64_t next = -1;
      if (overlapping) {
        const bool go_on = running();  // once: a stop may come at any moment
        while (const std::optional<size_t> done = steps.takeFinished()) computed.push_back(*done);
        // No more steps in flight than the job has left: one worker's own
        // steps do not carry it past its end (other workers' may, as in
        // any async job).
        if (go_on && !computed.empty() && step + int64_t(ps.pushAndPullsInFlight()) < total_steps) {
          i = computed.front();
          computed.pop_front();
          checkLossFinite(results[i], pulled[i].step + 1);
          ps.startPushAndPull(i, slots[i]->gradients, pulled[i].shard_steps, slots[i]->parameters);
          continue;
        }
        // Done with none in flight; else the next push+pull to end, or a
        // slot's step done (the slots compute while none is in flight).
        if (!go_on && ps.pushAndPullsInFlight() == 0) break;
        const std::optional<ShardedClient::PushAndPullEnd> end =
            ps.nextPushAndPull(steps.whenFinished());
        if (!end) continue;
        i = end->id;
        // Push+pulls may end out of order: the job's step as this worker
        // knows it only grows.
        next = end->step < 0 ? -1 : std::max(step, end->step);
      } else {
        if (streamed) {
          gradient_stream.begin();
          steps.start(0);
        } else {
          i = steps.nextFinished();
        }
        // A step whose loss is not finite pushes nothing: its gradients would
        // leave the shards' parameters NaN for every worker, and for a chief
        // restarted to join them. A streamed step is still running (its chunks
        // go during pushAndPull): LossCheckedProgress checks it.
        if (!streamed) checkLossFinite(results[i], pulled[i].step + 1);
        ps.setShardSteps(pulled[i].shard_steps);
        StepSlot& slot = *slots[i];
        try {
          next = ps.pushAndPull(slot.gradients, sync ? pulled[i].step + 1 : 0, slot.parameters,
                                streamed ? &gradient_stream : nullptr);
        } catch (...) {
          // A failed step ends the push as well: its failure is the one to report.
          if (streamed) steps.nextFinished();
          throw;
        }
        if (streamed) steps.nextFinished();
      }
      StepSlot& slot = *slots[i];
      const int64_t computed_at = pulled[i].step;
      pulled[i] = {next, ps.shardSteps()};
      const ShardedClient::Transfer& transfer = ps.lastTransfer();
      metrics.recordPush(transfer.push_bytes, transfer.push_seconds);
      metrics.recordPull(transfer.pull_bytes, transfer.pull_seconds);
      if (next < 0) {  // the shards are stopping: the job is done
        // What the stopping shards sent is at the job's last step. A sync
        // step they completed past the one this gradient was computed at
        // took it (or dropped it as stale, as any push may be): it counts
        // among this worker's steps, as the steps before it did.
        // (Overlapping, the push+pull that ended last may have pulled an
        // earlier step than one before it: the step only grows.)
        const int64_t pulled_at = ps.lastPulledStep().value_or(step);
        step = overlapping ? std::max(step, pulled_at) : pulled_at;
        if (sync && step > computed_at) log.record(results[i], step);
        break;
      }
      log.record(results[i], next);
      metrics.recordStep(next, results[i].loss, batch_size);
      if (chief) {
        // The parameters pulled at `next`.
        if (log.histogramsDue(step, next)) log.logHistograms(next, layout, slot.parameters.data());
        if (evaluator && crossesMultiple(step, next, spec.training.eval_every) &&
            next < total_steps) {
          // The moving averages live on the ps tasks, with the parameters.
          if (state->optimizer().movingAverage()) ps.readState(*state);
          log.logEvaluation(next, evaluator->evaluate(state->optimizer().movingAverage()
                                                          ? state->evaluationValues().data()
                                                          : slot.parameters.data()));
        }
        const double since_checkpoint =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - last_checkpoint)
                .count();
        const bool requested = checkpoint_requested.exchange(false);
        if (requested || crossesMultiple(step, next, spec.checkpoint.every_steps) ||
            (spec.checkpoint.every_seconds > 0 &&
             since_checkpoint >= spec.checkpoint.every_seconds))
          checkpoint();
      }
      step = next;
      if (!streamed && running()) steps.start(i);
    }
    // The steps still in flight finish as `steps` goes; their gradients are not pushed.
  } catch (const InputError&) {
    // The job's state is the shards', other workers' steps too: the chief
    // saves it as at a stop.
    if (chief && !spec.checkpoint.dir.empty()) saveBeforeInputFailure(step, checkpoint);
    throw;
  }
  metrics.setState(NodeState::Stopping, chief ? "final checkpoint and evaluation" : "");
  clearProgress();
  log.closeWindows();
  TrainingSummary summary;
  summary.seconds = log.secondsRunning();
  summary.steps_run = log.stepsRun();
  summary.stopped = stop_requested.load();
  std::optional<EvalResult> test;
  if (chief) {
    if (summary.stopped && !spec.checkpoint.dir.empty()) ps.waitForOtherWorkersToLeave();
    checkpoint();
    final_checkpoint = true;
    // A stopping ps answers too (the pull returns -1: the job is over). The
    // step of what the shards sent labels the evaluation as it does the
    // final checkpoint: ps 0's, not the lowest shard's.
    ps.pull(0, state->parameters());
    step = ps.lastPulledJobStep().value_or(step);
    if (state->optimizer().movingAverage()) ps.readState(*state);
    // Stopped before the job moved past where this chief started (a sync
    // step waiting for a worker that never came): the test figures would be
    // those of the parameters it started from, as a standalone run's stop
    // before its first step.
    const bool untouched = summary.stopped && ps.lastPulledStep() == start_step;
    if (untouched)
      spdlog::info("stop requested before the job moved past global step {}: nothing to "
                   "evaluate",
                   step);
    if (evaluator && !untouched) {
      test = log.finalEvaluation(
          step, [&] { return evaluator->evaluate(state->evaluationValues().data()); });
      summary.test_loss = test->loss;
      if (spec.loss == LossKind::SoftmaxCrossEntropy) summary.test_accuracy = test->accuracy;
    }
    if (!summary.stopped) ps.stopAll();
  }
  summary.global_step = step;
  if (ps.gradientsDropped() > 0)
    spdlog::info("{} of this worker's pushes had chunks dropped as stale", ps.gradientsDropped());
  if (input_moves > 0)
    spdlog::info(
        "this worker's input moved on to the job's step {} time{}, after pushes that "
        "came too late for theirs",
        input_moves, input_moves == 1 ? "" : "s");
  logSummary(spec, summary.global_step, summary.steps_run, summary.seconds, test);
  metrics.setState(NodeState::Done);
  return summary;
}

}  // namespace

TrainingSummary runWorker(const ModelSpec& spec, const ClusterSpec& cluster, int task,
                          const std::atomic<bool>& stop_requested,
                          std::atomic<bool>& checkpoint_requested, NodeMetrics& metrics) {
  bool final_checkpoint = false;
  std::vector<FlatBuffer> slot_buffers;  // before shards, whose calls send from them
  std::optional<kj::AsyncIoContext> io;  // before shards, which use it
  std::optional<ShardedClient> shards;
  try {
    return trainAsWorker(spec, cluster, task, stop_requested, checkpoint_requested, metrics,
                         final_checkpoint, slot_buffers, io, shards);
  } catch (const JobEnded& e) {
    // One ps ended the job before the chief could: the others still
    // serve, waiting for workers that are gone.
    if (task == 0 && shards) shards->stopRemaining();
    // The job ended while this worker could not hear it (paused, or slow).
    clearProgress();
    if (task == 0 && !spec.checkpoint.dir.empty() && !final_checkpoint)
      spdlog::warn(
          "no final checkpoint written: a ps task ended the job before the chief read the "
          "shards");
    else if (task == 0)
      spdlog::warn("no final evaluation: a ps task ended the job before the chief read the shards");
    metrics.setState(NodeState::Done);
    spdlog::info("done: {}", e.what());
    return TrainingSummary{};
  } catch (const JobDiverged&) {
    throw;  // a ps said so: the job is stopped already
  } catch (const Diverged& e) {
    // A resume with the same learning rate diverges again: the job stops as
    // failed, every node with exit 3, rather than the ps tasks serving
    // diverged parameters to workers with no chief.
    if (task == 0 && shards) {
      spdlog::info("telling the ps tasks to stop the job: this run diverged");
      shards->stopRemaining(e.what());
    }
    throw;
  }
}

}  // namespace traind
