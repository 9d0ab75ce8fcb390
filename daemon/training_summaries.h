// The TensorBoard summaries of a run (docs/operations.md#tensorboard),
// written by the chief or the standalone process: the numbers of each log
// line and of each evaluation as scalars at the global step.
//
//   loss, accuracy        the log line's window means (accuracy: classification)
//   learning_rate         the rate of the window's last step
//   examples_per_sec      the window's throughput
//   global_step/sec       the job's steps a second
//   global_norm           the window's mean gradient norm before clipping
//                         (with optimizer.clip_global_norm)
//   test/loss, test/accuracy   each evaluation past the step the run started at
//   <variable>            a histogram of each variable's values every
//                         training.histogram_every steps ("hidden1/kernel")
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/directory_lock.h"
#include "core/event_file.h"
#include "core/model_spec.h"
#include "core/variable_layout.h"
#include "daemon/evaluation.h"

namespace traind {

class TrainingSummaries {
 public:
  // A new event file in `dir`, marked as resuming from `start_step`, so that
  // TensorBoard drops what a crashed run wrote past its last checkpoint.
  // The run holds the directory (a flock, core/directory_lock.h): another
  // run's mark would make TensorBoard drop this one's points. Throws
  // InputError when the directory or the file cannot be created, or
  // another run holds the directory.
  // `made`: the directories made for this run (makeDirectories of
  // core/made_directories.h), `dir` among them when it was.
  TrainingSummaries(const ModelSpec& spec, const std::filesystem::path& dir, int64_t start_step,
                    std::vector<std::filesystem::path> made);
  // A run that wrote nothing past the start (stopped before its first
  // step) in a directory made for it leaves nothing there: the event file
  // goes, and the directories made for it, as a checkpoint directory that
  // got nothing goes (core/checkpoint.h). TensorBoard would list an empty run.
  ~TrainingSummaries();
  TrainingSummaries(const TrainingSummaries&) = delete;
  TrainingSummaries& operator=(const TrainingSummaries&) = delete;

  // The figures of a window of steps (a log line's, or summary_every's).
  struct Window {
    double loss = 0.0;
    std::optional<double> accuracy;
    double learning_rate = 0.0;
    double examples_per_sec = 0.0;
    // The job's (TensorFlow's global_step/sec), which in async training
    // counts every worker's steps.
    double global_steps_per_sec = 0.0;
    std::optional<double> gradient_norm;
  };
  void logWindow(int64_t step, const Window& window);
  void logEvaluation(int64_t step, const EvalResult& result);
  // A histogram of each variable of `layout` in `values`, tagged with its name.
  void logHistograms(int64_t step, const VariableLayout& layout, const float* values);

 private:
  // Writes an event of `step` with `event`. A failed write (a full disk) is
  // logged once and ends the summaries; training goes on, since they are
  // an aid, not its result. A file deleted under the run (its directory
  // with it) is replaced by a new one in `dir_`, created again, with a
  // warning.
  void write(int64_t step, const std::function<void(EventFileWriter&)>& event);

  bool classification_;
  std::filesystem::path dir_;
  DirectoryLock lock_;
  int64_t start_step_;
  std::vector<std::filesystem::path> made_;  // outermost first
  bool wrote_past_start_ = false;
  std::unique_ptr<EventFileWriter> events_;  // null once a write has failed
};

// The summaries of a run from `start_step`, in summaryDirectory(spec); null
// when the spec names no directory, or (a warning logged) when the file's
// first write fails, as a full disk makes it: summaries never stop a run.
// InputError naming the spec's field when the directory cannot be created.
std::unique_ptr<TrainingSummaries> openTrainingSummaries(const ModelSpec& spec, int64_t start_step);

}  // namespace traind
