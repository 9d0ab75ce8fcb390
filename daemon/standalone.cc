#include "daemon/standalone.h"

#include <spdlog/spdlog.h>

#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "core/gradient_clipping.h"
#include "core/input_pipeline.h"
#include "core/learning_rate.h"
#include "core/model_state.h"
#include "daemon/concurrent_steps.h"
#include "daemon/evaluation.h"
#include "daemon/logging.h"
#include "daemon/step_log.h"
#include "daemon/training_checkpoints.h"
#include "daemon/training_data.h"
#include "devices/device_list.h"
#include "devices/model_replica.h"
#include "devices/optimizer_update.h"

namespace traind {

std::optional<std::string> gpuReplicaPathReason(const ModelSpec& spec) {
  if (spec.training.concurrent_steps > 1) return "concurrent_steps > 1";
  if (spec.optimizer.clip_global_norm != 0.0f)
    return "optimizer.clip_global_norm (the resident trainer does not clip)";
  const std::set<std::string> gpus(spec.training.devices.begin(), spec.training.devices.end());
  if (gpus.size() > 1)
    return "towers on several GPUs (the resident trainer's NCCL all-reduce has not run on a "
           "machine with several GPUs yet)";
  return std::nullopt;
}

TrainingSummary runStandalone(const ModelSpec& spec, const std::atomic<bool>& stop_requested,
                              std::atomic<bool>& checkpoint_requested, NodeMetrics& metrics,
                              const ResidentTrainerFactory& resident_trainer) {
  const LayerGraph graph = buildLayerGraph(spec);
  // Evaluations run on the first of these (with its share of the compute
  // threads, as docs/devices.md says); steps run on their slots' devices.
  const std::vector<std::unique_ptr<Device>> devices =
      createDevices(spec.training.devices, spec.training.threads, spec.training.devices_location);
  const TrainingData data = loadTrainingData(spec, graph);
  if (const auto note = interleaveNote(spec, data.train)) spdlog::warn("{}", *note);
  ModelState state(spec, graph);
  state.setTrainingSet(contentText(data.train));

  const std::filesystem::path checkpoint_dir = spec.checkpoint.dir;
  std::optional<std::filesystem::path> latest;
  CheckpointDirLock checkpoint_dir_lock;
  if (!checkpoint_dir.empty()) {
    ModelState::checkSavable(spec, graph, spec.checkpoint.dir_location);
    checkpoint_dir_lock = createCheckpointDir(checkpoint_dir, spec.checkpoint.dir_location);
    if (auto shortfall = checkpointRoomShortfall(checkpoint_dir, state.checkpointBytes()))
      spdlog::warn("{}", *shortfall);
    latest = findLatestCheckpoint(checkpoint_dir);
  }
  if (latest) {
    spdlog::info("{}", restoreToTrain(state, *latest, spec.checkpoint.dir_location, data.train));
    metrics.recordExistingCheckpoint(*latest);
  } else {
    spdlog::info("{}", state.initialize());
  }
  metrics.setGlobalStep(state.globalStep());  // known from here on, while the rest loads
  spdlog::info("{}", describeCheckpoints(spec.checkpoint));

  const int64_t batch_size = spec.data.batch_size;
  const int concurrent_steps = spec.training.concurrent_steps;
  std::unique_ptr<ResidentTrainer> resident;
  if (resident_trainer) {
    if (concurrent_steps == 1 && spec.optimizer.clip_global_norm == 0.0f)
      resident = resident_trainer(spec, graph, state.layout());
  } else if (everyDeviceIsGpu(spec.training.devices)) {
    // Placed layers and micro-batches, which GPUs refuse, at the spec's line.
    checkModelReplica(spec, planStages(spec, graph, spec.training.devices));
    if (const std::optional<std::string> reason = gpuReplicaPathReason(spec))
      spdlog::info("{}: each step's update runs on the host, the parameters go to the GPU and the "
                   "gradients come back every step (docs/devices.md, \"Two paths\")",
                   *reason);
    else
      resident = createResidentTrainer(spec.training.devices, graph, state.layout(),
                                       spec.optimizer, batch_size, spec.seed);
  }
  std::vector<std::unique_ptr<StepSlot>> slots;
  if (!resident) slots = createStepSlots(spec, graph, state.layout());
  for (auto& slot : slots) slot->gradients = FlatBuffer(state.layout().totalSize());
  // With K > 1 a step computes from a copy of the parameters taken when it
  // starts, as the others' updates change them meanwhile.
  if (concurrent_steps > 1)
    for (auto& slot : slots) slot->parameters = FlatBuffer(state.layout().totalSize());
  std::optional<Evaluator> evaluator;
  if (data.test)
    evaluator.emplace(*devices.front(), graph, state.layout(), *data.test, batch_size, spec.seed);
  warnIfNothingToEvaluate(spec, data.test.has_value());

  InputPipeline input(data.train, batch_size, spec.data.shuffle, spec.seed, state.globalStep(),
                      readAheadBatches(spec.data, /*cluster_worker=*/false), /*shard_index=*/0,
                      /*num_shards=*/1, spec.data.augment, spec.data.shuffle_buffer);
  const int64_t total_steps = spec.training.max_steps > 0
                                  ? spec.training.max_steps
                                  : spec.training.epochs * input.stepsPerEpoch();
  spdlog::info("training {} ({} parameters) on {}{}: batch {}, {} steps/epoch, {}", spec.name,
               graph.parameterCount(), deviceNames(devices),
               concurrent_steps > 1 ? fmt::format(", {} steps in flight", concurrent_steps)
               : resident           ? ", the model and the optimizer's slots kept there"
                                    : "",
               batch_size, input.stepsPerEpoch(),
               state.globalStep() < total_steps
                   ? fmt::format("steps {}..{}", state.globalStep(), total_steps)
                   : fmt::format("nothing to train: the checkpoint is at step {}, the run ends "
                                 "at {}",
                                 state.globalStep(), total_steps));

  StepLog log(spec, state.globalStep(), total_steps,
              openTrainingSummaries(spec, state.globalStep()));
  int64_t saved_step = latest ? state.globalStep() : -1;
  auto last_checkpoint = std::chrono::steady_clock::now();
  CheckpointWriter writer(spec.checkpoint, checkpoint_dir_lock, metrics);
  auto checkpoint = [&] {
    if (checkpoint_dir.empty() || saved_step == state.globalStep()) return;
    const SavedCheckpoint saved = writer.save(state);
    saved_step = state.globalStep();
    last_checkpoint = std::chrono::steady_clock::now();
    writer.report(saved, saved_step);
  };

  // The slots share the model state, the input, the log and the schedules
  // under `mutex`. A step takes its batch (and with K > 1 a copy of the
  // parameters) under it, computes its gradient without it, then applies it
  // under it with the learning rate of the global step of that moment. With
  // K = 1 the one slot runs on this thread: the loop of a single step.
  std::mutex mutex;
  int64_t next_step = state.globalStep();  // the step the next batch is for
  std::exception_ptr error;                // the first slot's failure; the others stop
  // The batches being computed (by the step each is for), and a checkpoint
  // that came due while one before the global step was: steps finish out
  // of order with K > 1, and a checkpoint at global step G must hold the
  // updates of batches 0 to G - 1, as a resume reads on from batch G. It is
  // taken at the first step where none before it is in flight; meanwhile
  // no batch is handed out (`handing_out` waits), so it waits for the steps
  // in flight at most.
  std::set<int64_t> in_flight;
  bool checkpoint_waits = false;
  std::condition_variable handing_out;

  // What is due once the step of global step `step` is applied.
  auto evaluationDue = [&](int64_t step) {
    return evaluator && crossesMultiple(step, step + 1, spec.training.eval_every) &&
           step + 1 != total_steps;
  };
  auto checkpointDue = [&](int64_t step) {  // takes a requested checkpoint
    if (checkpoint_dir.empty()) return false;
    const double since_checkpoint =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - last_checkpoint).count();
    const bool requested = checkpoint_requested.exchange(false);
    return requested || crossesMultiple(step, step + 1, spec.checkpoint.every_steps) ||
           (spec.checkpoint.every_seconds > 0 && since_checkpoint >= spec.checkpoint.every_seconds);
  };
  // The step of global step `step` is applied and the model state holds
  // it: its log line and metrics, then its evaluation when one is due. The
  // caller checkpoints after it when one is due.
  auto finishStep = [&](const StepResult& r, int64_t step, bool evaluate) {
    state.setGlobalStep(step + 1);
    log.record(r, step + 1);
    if (log.histogramsDue(step, step + 1))
      log.logHistograms(step + 1, state.layout(), state.parameters().data());
    metrics.recordStep(step + 1, r.loss, batch_size);
    if (evaluate) log.logEvaluation(step + 1, evaluator->evaluate(state.evaluationValues().data()));
  };
  const float clip_norm = spec.optimizer.clip_global_norm;
  auto runSlot = [&](StepSlot& slot) {
    const bool snapshot = slot.parameters.size() > 0;
    // The update waits for the whole gradient, and for its clipping.
    const bool update_after_step = snapshot || clip_norm != 0.0f;
    const float* parameters = snapshot ? slot.parameters.data() : state.parameters().data();
    for (;;) {
      const Batch* batch = nullptr;
      int64_t started = 0;
      {
        std::unique_lock lock(mutex);
        handing_out.wait(lock, [&] { return !checkpoint_waits || error; });
        if (next_step >= total_steps || stop_requested.load() || error) return;
        started = next_step++;
        in_flight.insert(started);
        batch = &slot.take(input);
        if (snapshot)
          std::memcpy(slot.parameters.data(), state.parameters().data(),
                      size_t(slot.parameters.size()) * sizeof(float));
      }
      // Dropout is seeded by the step the batch is for.
      StepResult r;
      if (update_after_step) {
        r = slot.replica->trainStep(*batch, parameters, slot.gradients.data(), uint64_t(started));
        if (clip_norm != 0.0f) {
          checkLossFinite(r, started + 1);  // a NaN loss is reported as such, not as a NaN norm
          r.gradient_norm = clipByGlobalNorm(slot.gradients.data(), parameters, state.layout(),
                                             clip_norm, spec.optimizer.weight_decay, started + 1);
        }
      } else {
        // The only step in flight: its update is part of it (towers apply
        // it from their threads as they average the gradient).
        OptimizerUpdate update(state.optimizer(), state.parameters(), slot.gradients,
                               learningRateAt(spec.learning_rate, started), started + 1);
        r = slot.replica->trainStepAndUpdate(*batch, parameters, slot.gradients.data(),
                                             uint64_t(started), update);
      }

      std::lock_guard lock(mutex);
      const int64_t step = state.globalStep();
      if (update_after_step)
        state.optimizer().apply(state.parameters(), slot.gradients,
                                learningRateAt(spec.learning_rate, step), step + 1);
      finishStep(r, step, evaluationDue(step));
      in_flight.erase(started);
      checkpoint_waits = checkpointDue(step) || checkpoint_waits;
      if (checkpoint_waits && (in_flight.empty() || *in_flight.begin() > step)) {
        checkpoint();
        checkpoint_waits = false;
        handing_out.notify_all();
      }
    }
  };

  // The parameters, and every slot for a checkpoint; an evaluation reads
  // the moving averages (the last slot), when there are some, for
  // state.evaluationValues().
  auto readResidentState = [&](bool for_checkpoint) {
    resident->getParameters(state.parameters().data());
    const size_t slots = resident->slotCount();
    if (for_checkpoint)
      for (size_t i = 0; i < slots; ++i) resident->getSlot(i, state.optimizer().slot(i).data());
    else if (spec.optimizer.moving_average)
      resident->getSlot(slots - 1, state.optimizer().slot(slots - 1).data());
  };
  // The resident trainer's loop: the next step is submitted before the one
  // computing is collected, so that the GPU never waits for the host;
  // except before an evaluation, a checkpoint or a histogram, which read the
  // model back at the step they name.
  auto trainResident = [&] {
    resident->setParameters(state.parameters().data());
    for (size_t i = 0; i < resident->slotCount(); ++i)
      resident->setSlot(i, state.optimizer().slot(i).data());
    // A batch that cannot be read ends the loop once the step in flight
    // is collected, and is thrown with the model state at the step before it.
    std::exception_ptr input_failure;
    auto submit = [&](int64_t step) {
      try {
        resident->submit(input.next(), learningRateAt(spec.learning_rate, step), uint64_t(step));
        return true;
      } catch (const InputError&) {
        input_failure = std::current_exception();
        return false;
      }
    };
    bool in_flight = false;  // the step of state.globalStep()
    try {
      for (int64_t step = state.globalStep();; ++step) {
        if (!in_flight &&
            (step >= total_steps || stop_requested.load() || input_failure || !submit(step)))
          break;
        const bool evaluate = evaluationDue(step), save = checkpointDue(step);
        // A histogram, too, is of the parameters at its step.
        const bool read_back = evaluate || save || log.histogramsDue(step, step + 1);
        in_flight =
            step + 1 < total_steps && !stop_requested.load() && !read_back && submit(step + 1);
        const StepResult r = resident->collect();
        if (read_back) readResidentState(/*for_checkpoint=*/save);
        finishStep(r, step, evaluate);
        if (save) checkpoint();
      }
    } catch (const InputError&) {
      // A test set that could not be read as an evaluation was due: no step
      // is in flight then (an evaluation reads the model back first). The
      // slots too, for the checkpoint saved before the error ends the run.
      readResidentState(/*for_checkpoint=*/true);
      throw;
    }
    readResidentState(/*for_checkpoint=*/true);
    if (input_failure) std::rethrow_exception(input_failure);
  };

  metrics.setState(NodeState::Training);
  try {
    if (resident) {
      trainResident();
    } else if (concurrent_steps == 1) {
      runSlot(*slots.front());
    } else {
      {
        std::vector<std::jthread> threads;
        for (auto& slot : slots)
          threads.emplace_back([&runSlot, &mutex, &error, &handing_out, &slot] {
            try {
              runSlot(*slot);
            } catch (...) {
              std::lock_guard lock(mutex);
              if (!error) error = std::current_exception();
              handing_out.notify_all();  // the others stop, waiting or not
            }
          });
      }  // joined: every step started has been applied
      if (error) std::rethrow_exception(error);
    }
  } catch (const InputError&) {
    // Input that could not be read (a data file changed or damaged under
    // the run: a batch's, or the test set's at an evaluation) took no step:
    // the state holds every step applied before it, saved as at a stop
    // before the run fails (with the error's message).
    if (log.stepsRun() > 0 && !checkpoint_dir.empty())
      saveBeforeInputFailure(state.globalStep(), checkpoint);
    throw;
  }
  metrics.setState(NodeState::Stopping, "final checkpoint and evaluation");
  TrainingSummary summary;
  summary.seconds = log.secondsRunning();
  summary.steps_run = log.stepsRun();
  clearProgress();
  log.closeWindows();
  summary.global_step = state.globalStep();
  summary.stopped = state.globalStep() < total_steps;
  // A stop before this process's first step leaves everything as it found
  // it: a checkpoint of a fresh initialisation would be restored by the next
  // run even after the spec that the stop was made to fix changed, and the
  // initial parameters' test figures say nothing.
  const bool untouched = summary.stopped && summary.steps_run == 0;
  if (untouched) {
    spdlog::info("stop requested before the first step: nothing to save or evaluate");
  } else {
    if (summary.stopped) spdlog::info("stop requested at step {}", state.globalStep());
    checkpoint();
  }

  std::optional<EvalResult> test;
  if (evaluator && !untouched) {
    test = log.finalEvaluation(
        state.globalStep(), [&] { return evaluator->evaluate(state.evaluationValues().data()); });
    summary.test_loss = test->loss;
    if (spec.loss == LossKind::SoftmaxCrossEntropy) summary.test_accuracy = test->accuracy;
  }
  logSummary(spec, summary.global_step, summary.steps_run, summary.seconds, test);
  metrics.setState(NodeState::Done);
  return summary;
}

}  // namespace traind
