#include "daemon/standalone.h"

#include <spdlog/spdlog.h>

#include "core/input_pipeline.h"
#include "core/learning_rate.h"
#include "core/model_state.h"
#include "daemon/evaluation.h"
#include "daemon/logging.h"
#include "daemon/step_log.h"
#include "daemon/training_data.h"
#include "devices/device_list.h"
#include "devices/towers.h"

namespace traind {

TrainingSummary runStandalone(const ModelSpec& spec, const std::atomic<bool>& stop_requested,
                              std::atomic<bool>& checkpoint_requested, NodeMetrics& metrics) {
  const LayerGraph graph = buildLayerGraph(spec);
  const std::vector<std::unique_ptr<Device>> devices =
      createDevices(spec.training.devices, spec.training.threads);
  const TrainingData data = loadTrainingData(spec, graph);
  ModelState state(spec, graph);

  const std::filesystem::path checkpoint_dir = spec.checkpoint.dir;
  std::optional<std::filesystem::path> latest;
  if (!checkpoint_dir.empty()) latest = findLatestCheckpoint(checkpoint_dir);
  if (latest) {
    state.restore(*latest);
    spdlog::info("restored {} at global step {}", latest->string(), state.globalStep());
    metrics.recordExistingCheckpoint(*latest);
  } else {
    state.initialize();
    if (spec.init_from)
      spdlog::info("initialised; layers {} from {}", fmt::join(spec.init_from->layers, ", "),
                   spec.init_from->checkpoint);
  }

  const int64_t batch_size = spec.data.batch_size;
  std::unique_ptr<Replica> replica =
      createTowers(devicePointers(devices), graph, state.layout(), batch_size, spec.seed);
  std::optional<Evaluator> evaluator;
  if (data.test)
    evaluator.emplace(*devices.front(), graph, state.layout(), *data.test, batch_size, spec.seed);
  FlatBuffer gradients(state.layout().totalSize());

  InputPipeline input(data.train, batch_size, spec.data.shuffle, spec.seed, state.globalStep(),
                      spec.data.prefetch_batches);
  const int64_t total_steps = spec.training.max_steps > 0
                                  ? spec.training.max_steps
                                  : spec.training.epochs * input.stepsPerEpoch();
  spdlog::info("training {} ({} parameters) on {}: batch {}, {} steps/epoch, steps {}..{}",
               spec.name, graph.parameterCount(), deviceNames(devices), batch_size,
               input.stepsPerEpoch(), state.globalStep(), total_steps);

  StepLog log(spec, total_steps, openTrainingSummaries(spec, state.globalStep()));
  int64_t saved_step = latest ? state.globalStep() : -1;
  auto last_checkpoint = std::chrono::steady_clock::now();
  auto checkpoint = [&] {
    if (checkpoint_dir.empty() || saved_step == state.globalStep()) return;
    const std::filesystem::path path = state.save(checkpoint_dir, spec.checkpoint.keep);
    saved_step = state.globalStep();
    last_checkpoint = std::chrono::steady_clock::now();
    metrics.recordCheckpoint(saved_step, path);
    spdlog::info("step {}, saved checkpoint {}", state.globalStep(), path.string());
  };

  metrics.setGlobalStep(state.globalStep());
  metrics.setState(NodeState::Training);
  while (state.globalStep() < total_steps && !stop_requested.load()) {
    const int64_t step = state.globalStep();
    const StepResult r = replica->trainStep(input.next(), state.parameters().data(),
                                            gradients.data(), uint64_t(step));
    state.optimizer().apply(state.parameters(), gradients, learningRateAt(spec.learning_rate, step),
                            step + 1);
    state.setGlobalStep(step + 1);
    log.record(r, step + 1);
    metrics.recordStep(step + 1, r.loss, batch_size);

    if (evaluator && crossesMultiple(step, step + 1, spec.training.eval_every) &&
        step + 1 != total_steps)
      log.logEvaluation(step + 1, evaluator->evaluate(state.parameters().data()));
    const double since_checkpoint =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - last_checkpoint).count();
    const bool requested = checkpoint_requested.exchange(false);
    if (requested || crossesMultiple(step, step + 1, spec.checkpoint.every_steps) ||
        (spec.checkpoint.every_seconds > 0 && since_checkpoint >= spec.checkpoint.every_seconds))
      checkpoint();
  }
  metrics.setState(NodeState::Stopping, "final checkpoint and evaluation");
  TrainingSummary summary;
  summary.seconds = log.secondsRunning();
  summary.steps_run = log.stepsRun();
  clearProgress();
  summary.global_step = state.globalStep();
  summary.stopped = state.globalStep() < total_steps;
  if (summary.stopped) spdlog::info("stop requested at step {}", state.globalStep());
  checkpoint();

  std::optional<EvalResult> test;
  if (evaluator) {
    test = evaluator->evaluate(state.parameters().data());
    log.logEvaluation(state.globalStep(), *test);
    summary.test_loss = test->loss;
    if (spec.loss == LossKind::SoftmaxCrossEntropy) summary.test_accuracy = test->accuracy;
  }
  logSummary(spec, summary.global_step, summary.steps_run, summary.seconds, test);
  metrics.setState(NodeState::Done);
  return summary;
}

}  // namespace traind
