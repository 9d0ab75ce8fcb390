#include "daemon/standalone.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>

#include "core/input_pipeline.h"
#include "core/learning_rate.h"
#include "core/model_state.h"
#include "daemon/evaluation.h"
#include "daemon/logging.h"
#include "daemon/training_data.h"
#include "devices/cpu/cpu_device.h"

namespace traind {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string formatDuration(double seconds) {
  const int64_t s = int64_t(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, s / 60 % 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

std::string progressLine(int64_t step, int64_t total, double loss, double examples_per_sec,
                         double eta_seconds) {
  constexpr int kWidth = 30;
  const double done = total > 0 ? double(step) / double(total) : 1.0;
  const int filled = int(done * kWidth);
  std::string bar(size_t(filled), '=');
  if (filled < kWidth) bar += '>' + std::string(size_t(kWidth - filled - 1), ' ');
  return fmt::format("step {}/{} [{}] {:3.0f}%  loss {:.4f}  {:.0f} ex/s  ETA {}", step, total,
                     bar, done * 100.0, loss, examples_per_sec, formatDuration(eta_seconds));
}

void logEvaluation(const ModelSpec& spec, int64_t step, const EvalResult& r) {
  if (spec.loss == LossKind::SoftmaxCrossEntropy)
    spdlog::info("step {}, test loss = {:.4f}, test accuracy = {:.4f} ({} examples)", step, r.loss,
                 r.accuracy, r.examples);
  else
    spdlog::info("step {}, test loss = {:.6f} ({} examples)", step, r.loss, r.examples);
}

}  // namespace

TrainingSummary runStandalone(const ModelSpec& spec, const std::atomic<bool>& stop_requested) {
  const LayerGraph graph = buildLayerGraph(spec);
  const TrainingData data = loadTrainingData(spec, graph);
  ModelState state(spec, graph);

  const std::filesystem::path checkpoint_dir = spec.checkpoint.dir;
  std::optional<std::filesystem::path> latest;
  if (!checkpoint_dir.empty()) latest = findLatestCheckpoint(checkpoint_dir);
  if (latest) {
    state.restore(*latest);
    spdlog::info("restored {} at global step {}", latest->string(), state.globalStep());
  } else {
    state.initialize();
    if (spec.init_from)
      spdlog::info("initialised; layers {} from {}", fmt::join(spec.init_from->layers, ", "),
                   spec.init_from->checkpoint);
  }

  std::unique_ptr<Device> device = createCpuDevice(spec.training.threads);
  const int64_t batch_size = spec.data.batch_size;
  std::unique_ptr<Replica> replica =
      device->createReplica(graph, state.layout(), batch_size, spec.seed);
  std::optional<Evaluator> evaluator;
  if (data.test)
    evaluator.emplace(*device, graph, state.layout(), *data.test, batch_size, spec.seed);
  FlatBuffer gradients(state.layout().totalSize());

  InputPipeline input(data.train, batch_size, spec.data.shuffle, spec.seed, state.globalStep(),
                      spec.data.prefetch_batches);
  const int64_t total_steps = spec.training.max_steps > 0
                                  ? spec.training.max_steps
                                  : spec.training.epochs * input.stepsPerEpoch();
  spdlog::info("training {} ({} parameters) on {}: batch {}, {} steps/epoch, steps {}..{}",
               spec.name, graph.parameterCount(), device->name(), batch_size,
               input.stepsPerEpoch(), state.globalStep(), total_steps);

  TrainingSummary summary;
  const bool classify = spec.loss == LossKind::SoftmaxCrossEntropy;
  const int64_t log_every = std::max<int64_t>(1, spec.training.log_every);
  const Clock::time_point start = Clock::now();
  Clock::time_point window_start = start, last_checkpoint = start, last_progress = start;
  double window_loss = 0.0, last_loss = 0.0;
  int64_t window_steps = 0, window_correct = 0;
  int64_t saved_step = latest ? state.globalStep() : -1;

  auto checkpoint = [&] {
    if (checkpoint_dir.empty() || saved_step == state.globalStep()) return;
    const std::filesystem::path path = state.save(checkpoint_dir, spec.checkpoint.keep);
    saved_step = state.globalStep();
    last_checkpoint = Clock::now();
    spdlog::info("step {}, saved checkpoint {}", state.globalStep(), path.string());
  };

  while (state.globalStep() < total_steps && !stop_requested.load()) {
    const int64_t step = state.globalStep();
    const Batch& batch = input.next();
    const StepResult r =
        replica->trainStep(batch, state.parameters().data(), gradients.data(), uint64_t(step));
    state.optimizer().apply(state.parameters(), gradients, learningRateAt(spec.learning_rate, step),
                            step + 1);
    state.setGlobalStep(step + 1);
    ++summary.steps_run;
    last_loss = r.loss;
    window_loss += r.loss;
    window_correct += r.correct;
    ++window_steps;

    const int64_t now_step = step + 1;
    if (!std::isfinite(r.loss))
      throw std::runtime_error(fmt::format(
          "step {}: the loss is {}; lower the learning rate or check the data", now_step, r.loss));
    if (now_step % log_every == 0) {
      const double elapsed = secondsSince(window_start);
      const std::string accuracy =
          classify ? fmt::format(", accuracy = {:.3f}",
                                 double(window_correct) / double(window_steps * batch_size))
                   : "";
      spdlog::info("step {}, loss = {:.4f}{} ({:.1f} examples/sec; {:.4f} sec/batch)", now_step,
                   window_loss / double(window_steps), accuracy,
                   double(window_steps * batch_size) / elapsed, elapsed / double(window_steps));
      window_start = Clock::now();
      window_loss = 0.0;
      window_steps = 0;
      window_correct = 0;
    }
    if (evaluator && spec.training.eval_every > 0 && now_step % spec.training.eval_every == 0 &&
        now_step != total_steps)
      logEvaluation(spec, now_step, evaluator->evaluate(state.parameters().data()));
    if ((spec.checkpoint.every_steps > 0 && now_step % spec.checkpoint.every_steps == 0) ||
        (spec.checkpoint.every_seconds > 0 &&
         secondsSince(last_checkpoint) >= spec.checkpoint.every_seconds))
      checkpoint();
    if (progressEnabled() && secondsSince(last_progress) >= 0.25) {
      last_progress = Clock::now();
      const double rate = double(summary.steps_run) / secondsSince(start);
      showProgress(progressLine(now_step, total_steps, last_loss, rate * double(batch_size),
                                double(total_steps - now_step) / rate));
    }
  }
  summary.seconds = secondsSince(start);
  clearProgress();
  summary.global_step = state.globalStep();
  summary.stopped = state.globalStep() < total_steps;
  if (summary.stopped) spdlog::info("stop requested at step {}", state.globalStep());
  checkpoint();

  if (evaluator) {
    const EvalResult r = evaluator->evaluate(state.parameters().data());
    logEvaluation(spec, state.globalStep(), r);
    summary.test_loss = r.loss;
    if (classify) summary.test_accuracy = r.accuracy;
  }
  const double examples = double(summary.steps_run * batch_size);
  spdlog::info("done: global step {}, {} steps in {:.1f} s ({:.1f} examples/sec){}{}",
               summary.global_step, summary.steps_run, summary.seconds,
               summary.seconds > 0 ? examples / summary.seconds : 0.0,
               summary.test_loss ? fmt::format(", test loss = {:.4f}", *summary.test_loss) : "",
               summary.test_accuracy ? fmt::format(", test accuracy = {:.4f}", *summary.test_accuracy)
                                     : "");
  return summary;
}

}  // namespace traind
