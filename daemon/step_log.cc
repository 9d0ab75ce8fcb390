#include "daemon/step_log.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "core/error.h"
#include "core/learning_rate.h"
#include "daemon/logging.h"

namespace traind {
namespace {

std::string progressLine(int64_t step, int64_t total, double loss, double examples_per_sec,
                         double eta_seconds) {
  constexpr int kWidth = 30;
  const double done = total > 0 ? std::min(1.0, double(step) / double(total)) : 1.0;
  const int filled = int(done * kWidth);
  std::string bar(size_t(filled), '=');
  if (filled < kWidth) bar += '>' + std::string(size_t(kWidth - filled - 1), ' ');
  return fmt::format("step {}/{} [{}] {:3.0f}%  loss {:.4f}  {:.0f} ex/s  ETA {}", step, total,
                     bar, done * 100.0, loss, examples_per_sec, formatDuration(eta_seconds));
}

double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

std::string formatDuration(double seconds) {
  const int64_t s = std::isfinite(seconds) ? int64_t(std::llround(seconds)) : 0;
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, s / 60 % 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

bool crossesMultiple(int64_t before, int64_t after, int64_t every) {
  return every > 0 && after / every > before / every;
}

void logSummary(const ModelSpec& spec, int64_t global_step, int64_t steps_run, double seconds,
                const std::optional<EvalResult>& test) {
  const double examples = double(steps_run * spec.data.batch_size);
  std::string tail;
  if (test) {
    tail = fmt::format(", test loss = {:.4f}", test->loss);
    if (spec.loss == LossKind::SoftmaxCrossEntropy)
      tail += fmt::format(", test accuracy = {:.4f}", test->accuracy);
  }
  spdlog::info("done: global step {}, {} steps in {:.1f} s ({:.1f} examples/sec){}", global_step,
               steps_run, seconds, seconds > 0 ? examples / seconds : 0.0, tail);
}

StepLog::StepLog(const ModelSpec& spec, int64_t start_step, int64_t total_steps,
                 std::unique_ptr<TrainingSummaries> summaries)
    : spec_(spec),
      total_steps_(total_steps),
      start_step_(start_step),
      log_every_(std::max<int64_t>(1, spec.training.log_every)),
      start_(Clock::now()),
      last_progress_(start_),
      log_window_{start_, start_step},
      summaries_(std::move(summaries)) {
  if (summaries_ && spec.training.summary_every) summary_window_ = Window{start_, start_step};
}

void StepLog::Window::add(const StepResult& result, float clip_norm) {
  loss += result.loss;
  correct += result.correct;
  if (result.gradient_norm) {  // every step of a run that clips has one
    clipping = true;
    norm += *result.gradient_norm;
    clipped += *result.gradient_norm > clip_norm;
  }
  ++steps;
}

TrainingSummaries::Window StepLog::Window::close(int64_t global_step, const ModelSpec& spec) {
  const double elapsed = secondsSince(start);
  const int64_t batch = spec.data.batch_size;
  TrainingSummaries::Window figures;
  figures.loss = loss / double(steps);
  if (spec.loss == LossKind::SoftmaxCrossEntropy)
    figures.accuracy = double(correct) / double(steps * batch);
  // The rate the window's last step was applied with.
  figures.learning_rate = learningRateAt(spec.learning_rate, global_step - 1);
  figures.examples_per_sec = double(steps * batch) / elapsed;
  figures.global_steps_per_sec = double(global_step - last_step) / elapsed;
  if (clipping) figures.gradient_norm = norm / double(steps);
  *this = Window{Clock::now(), global_step};
  return figures;
}

double StepLog::secondsRunning() const { return secondsSince(start_); }

void checkLossFinite(const StepResult& result, int64_t global_step) {
  if (!std::isfinite(result.loss))
    throw Diverged(fmt::format("step {}: the loss is {}; lower the learning rate or check the data",
                               global_step, result.loss));
  // Summed in double, a loss can be finite past float32's range, where
  // TensorFlow's float32 loss (and the event file's value) would be inf.
  if (std::fabs(result.loss) > double(std::numeric_limits<float>::max()))
    throw Diverged(
        fmt::format("step {}: the loss is {:g}, past float32's range; lower the "
                    "learning rate or check the data",
                    global_step, result.loss));
}

void StepLog::record(const StepResult& result, int64_t global_step) {
  checkLossFinite(result, global_step);
  ++steps_run_;
  const float clip_norm = spec_.optimizer.clip_global_norm;
  log_window_.add(result, clip_norm);
  if (summary_window_) summary_window_->add(result, clip_norm);
  last_step_ = global_step;
  if (global_step / log_every_ > log_window_.last_step / log_every_) logLine(global_step);
  if (summary_window_ &&
      crossesMultiple(summary_window_->last_step, global_step, *spec_.training.summary_every))
    summaries_->logWindow(global_step, summary_window_->close(global_step, spec_));
  const int64_t batch = spec_.data.batch_size;
  if (progressEnabled() && secondsSince(last_progress_) >= 0.25) {
    last_progress_ = Clock::now();
    const double seconds = secondsRunning();
    // The job's steps, for its time left: an async worker's global step
    // moves with every worker's pushes, not with its own alone.
    const double own_steps_per_sec = double(steps_run_) / seconds;
    const double job_steps_per_sec =
        global_step > start_step_ ? double(global_step - start_step_) / seconds : own_steps_per_sec;
    showProgress(progressLine(global_step, total_steps_, result.loss,
                              own_steps_per_sec * double(batch),
                              double(total_steps_ - global_step) / job_steps_per_sec));
  }
}

void StepLog::logLine(int64_t global_step) {
  const double clipped_percent = 100.0 * double(log_window_.clipped) / double(log_window_.steps);
  const TrainingSummaries::Window window = log_window_.close(global_step, spec_);
  const std::string clipping = window.gradient_norm
                                   ? fmt::format(", global norm = {:.4g}, {:.0f}% clipped",
                                                 *window.gradient_norm, clipped_percent)
                                   : "";
  spdlog::info(
      "step {}, loss = {:.4f}{}{} ({:.1f} examples/sec; {:.4f} sec/batch)", global_step,
      window.loss, window.accuracy ? fmt::format(", accuracy = {:.3f}", *window.accuracy) : "",
      clipping, window.examples_per_sec, double(spec_.data.batch_size) / window.examples_per_sec);
  // Without summary_every the summaries give each log line's figures.
  if (summaries_ && !summary_window_) summaries_->logWindow(global_step, window);
}

void StepLog::closeWindows() {
  if (log_window_.steps > 0) logLine(last_step_);
  if (summary_window_ && summary_window_->steps > 0)
    summaries_->logWindow(last_step_, summary_window_->close(last_step_, spec_));
}

bool StepLog::histogramsDue(int64_t before, int64_t after) const {
  return summaries_ && spec_.training.histogram_every > 0 &&
         crossesMultiple(before, after, spec_.training.histogram_every);
}

void StepLog::logHistograms(int64_t global_step, const VariableLayout& layout,
                            const float* values) {
  if (summaries_) summaries_->logHistograms(global_step, layout, values);
}

EvalResult StepLog::finalEvaluation(int64_t global_step,
                                    const std::function<EvalResult()>& evaluate) {
  if (last_evaluation_ && last_evaluation_->first == global_step) return last_evaluation_->second;
  const EvalResult result = evaluate();
  logEvaluation(global_step, result);
  return result;
}

void StepLog::logEvaluation(int64_t step, const EvalResult& r) {
  last_evaluation_.emplace(step, r);
  if (spec_.loss == LossKind::SoftmaxCrossEntropy)
    spdlog::info("step {}, test loss = {:.4f}, test accuracy = {:.4f} ({} examples)", step, r.loss,
                 r.accuracy, r.examples);
  else
    spdlog::info("step {}, test loss = {:.6f} ({} examples)", step, r.loss, r.examples);
  if (summaries_) summaries_->logEvaluation(step, r);
}

}  // namespace traind
