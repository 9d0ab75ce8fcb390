// The training log users read: a line every log_every steps with the mean
// loss of the window and the throughput, and in a terminal a live progress
// line with the ETA.
//
//   step 1200, loss = 0.4100, accuracy = 0.853 (5312.0 examples/sec; 0.0188 sec/batch)
//
// With optimizer.clip_global_norm the line also gives the window's mean
// gradient norm before clipping and the share of its steps clipped:
//
//   step 1200, loss = 0.4100, accuracy = 0.853, global norm = 3.18, 62% clipped (...)
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "core/model_spec.h"
#include "daemon/evaluation.h"
#include "daemon/training_summaries.h"
#include "devices/device.h"

namespace traind {

// Throws Diverged ("step N: the loss is nan; ...") when the step's loss is
// not finite, or beyond float32's range (a double's sum of float terms).
void checkLossFinite(const StepResult& result, int64_t global_step);

class StepLog {
 public:
  // A run from global step `start_step` to `total_steps`. With `summaries`,
  // every log line and evaluation also goes to TensorBoard.
  StepLog(const ModelSpec& spec, int64_t start_step, int64_t total_steps,
          std::unique_ptr<TrainingSummaries> summaries = nullptr);

  // Records one step's result; `global_step` is the step after it. Logs a
  // line when a multiple of log_every was reached (or crossed: in async
  // training the global step moves by more than one), writes the summaries'
  // scalars when one of summary_every was, and refreshes the progress line.
  // Throws Diverged when the loss is not finite.
  void record(const StepResult& result, int64_t global_step);

  // At the run's end (max_steps, or a stop), the steps since the last log
  // line and since the summaries' last scalars: a line and a point at the
  // last step recorded, so that a run of 1050 steps logging every 100 shows
  // its last 50 too. Nothing when no step was recorded since.
  void closeWindows();

  void logEvaluation(int64_t global_step, const EvalResult& result);
  // Whether going from global step `before` to `after` reached a multiple of
  // training.histogram_every, with summaries to write histograms to.
  bool histogramsDue(int64_t before, int64_t after) const;
  // Histograms of the variables of `layout` in `values`, at `global_step`.
  void logHistograms(int64_t global_step, const VariableLayout& layout, const float* values);
  // The run's last evaluation, at `global_step`: the one logged there
  // already when the run stopped at an evaluation's step, else
  // `evaluate()`'s, logged.
  EvalResult finalEvaluation(int64_t global_step, const std::function<EvalResult()>& evaluate);

  int64_t stepsRun() const { return steps_run_; }
  double secondsRunning() const;

 private:
  using Clock = std::chrono::steady_clock;

  // The steps since a log line, or since the summaries' last scalars.
  struct Window {
    Clock::time_point start;
    int64_t last_step;  // the window's first step is the one after it
    double loss = 0.0, norm = 0.0;
    int64_t steps = 0, correct = 0, clipped = 0;
    bool clipping = false;  // its steps have gradient norms

    void add(const StepResult& result, float clip_norm);
    // Its figures, the window then started again at `global_step`.
    TrainingSummaries::Window close(int64_t global_step, const ModelSpec& spec);
  };

  // The log line of the log window, closed at `global_step`, and its
  // summaries' scalars without summary_every.
  void logLine(int64_t global_step);

  const ModelSpec& spec_;
  int64_t total_steps_;
  int64_t start_step_;  // the global step the run started at
  int64_t log_every_;
  Clock::time_point start_, last_progress_;
  Window log_window_;
  std::optional<Window> summary_window_;  // with summaries and summary_every only
  int64_t steps_run_ = 0;
  int64_t last_step_ = 0;  // the global step after the last step recorded
  std::unique_ptr<TrainingSummaries> summaries_;
  std::optional<std::pair<int64_t, EvalResult>> last_evaluation_;
};

// "1h02m", "3m07s", "12s"
std::string formatDuration(double seconds);

// True when going from global step `before` to `after` reached or crossed a
// multiple of `every` (> 0): schedules of evaluations and checkpoints, which
// async training may step over.
bool crossesMultiple(int64_t before, int64_t after, int64_t every);

// The final line: "done: global step 1800, 1800 steps in 34.2 s (5263.2 examples/sec),
// test loss = 0.3912, test accuracy = 0.8612".
void logSummary(const ModelSpec& spec, int64_t global_step, int64_t steps_run, double seconds,
                const std::optional<EvalResult>& test);

}  // namespace traind
