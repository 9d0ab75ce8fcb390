#include "daemon/training_summaries.h"

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "core/made_directories.h"

namespace traind {
namespace {

// Creates `dir` and takes it for this run. A file system that cannot lock
// (some network ones) leaves it untaken: summaries never stop a run.
DirectoryLock lockSummaryDirectory(const std::filesystem::path& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error)
    throw InputError("summary directory " + dir.string() +
                     ": cannot create it: " + error.message());
  auto locked = lockDirectoryItself(dir);
  if (const auto* refusal = std::get_if<DirectoryLockRefusal>(&locked)) {
    if (refusal->in_use)
      throw InputError("summary directory " + dir.string() + refusal->text +
                       ": TensorBoard would drop one run's points at the other's start; give "
                       "each run a directory of its own (side by side under one logdir, "
                       "TensorBoard shows them as runs)");
    spdlog::warn("summary directory {}{}: another run could write into it too", dir.string(),
                 refusal->text);
    return DirectoryLock(-1);
  }
  return std::get<DirectoryLock>(std::move(locked));
}

}  // namespace

TrainingSummaries::TrainingSummaries(const ModelSpec& spec, const std::filesystem::path& dir,
                                     int64_t start_step, std::vector<std::filesystem::path> made)
    : classification_(spec.loss == LossKind::SoftmaxCrossEntropy),
      dir_(dir),
      lock_(lockSummaryDirectory(dir)),
      start_step_(start_step),
      made_(std::move(made)),
      events_(std::make_unique<EventFileWriter>(dir)) {
  // An event at step S describes training up to global step S, which the
  // checkpoint at S holds; a crashed run's events past S are orphans, and
  // TensorBoard drops those at steps >= the START's.
  events_->writeSessionStart(start_step + 1);
  spdlog::info("writing TensorBoard summaries to {}", events_->path().string());
}

TrainingSummaries::~TrainingSummaries() {
  // Only the file of a directory made for this run: one that was there may
  // hold other runs' files, among which this START hides a crashed run's
  // orphans.
  std::error_code ec;
  const bool made_dir = !made_.empty() && std::filesystem::equivalent(made_.back(), dir_, ec);
  if (!made_dir || wrote_past_start_ || !events_) return;
  const std::filesystem::path file = events_->path();
  events_.reset();
  std::filesystem::remove(file, ec);
  removeMadeDirectories(made_);
}

void TrainingSummaries::logWindow(int64_t step, const Window& window) {
  std::vector<Scalar> scalars{{"loss", window.loss},
                              {"learning_rate", window.learning_rate},
                              {"examples_per_sec", window.examples_per_sec},
                              {"global_step/sec", window.global_steps_per_sec}};
  if (window.accuracy) scalars.push_back({"accuracy", *window.accuracy});
  if (window.gradient_norm) scalars.push_back({"global_norm", *window.gradient_norm});
  write(step, [&](EventFileWriter& events) { events.writeScalars(step, scalars); });
}

void TrainingSummaries::logEvaluation(int64_t step, const EvalResult& result) {
  // The parameters a run resumed with are its checkpoint's, which the run
  // that wrote it evaluated, as a rule: another point at that step would
  // be a duplicate in every rerun of a finished run.
  if (step <= start_step_) return;
  std::vector<Scalar> scalars{{"test/loss", result.loss}};
  if (classification_) scalars.push_back({"test/accuracy", result.accuracy});
  write(step, [&](EventFileWriter& events) { events.writeScalars(step, scalars); });
}

void TrainingSummaries::logHistograms(int64_t step, const VariableLayout& layout,
                                      const float* values) {
  if (!events_) return;  // a write failed: the summaries have ended
  std::vector<std::pair<std::string, Histogram>> histograms;
  for (const VariableView& v : layout.views())
    histograms.emplace_back(v.name, summarizeHistogram({values + v.offset, size_t(v.size)}));
  write(step, [&](EventFileWriter& events) { events.writeHistograms(step, histograms); });
}

void TrainingSummaries::write(int64_t step, const std::function<void(EventFileWriter&)>& event) {
  if (!events_) return;
  try {
    if (events_->isGone()) {
      const std::filesystem::path gone = events_->path();
      // A START would also hide this run's events in the old file, were it
      // only renamed in the directory: marked only in a directory made anew.
      const bool dir_gone = !std::filesystem::exists(dir_);
      events_.reset();
      events_ = std::make_unique<EventFileWriter>(dir_);
      if (dir_gone) events_->writeSessionStart(start_step_ + 1);
      spdlog::warn(
          "the TensorBoard event file {} was deleted or moved under this run; its "
          "summaries from step {} go to {}",
          gone.string(), step, events_->path().string());
    }
    event(*events_);
    wrote_past_start_ = true;
  } catch (const std::runtime_error& e) {  // InputError too: a directory not created again
    spdlog::warn("{}; no more TensorBoard summaries in this run", e.what());
    events_.reset();
  }
}

std::unique_ptr<TrainingSummaries> openTrainingSummaries(const ModelSpec& spec,
                                                         int64_t start_step) {
  const std::string dir = summaryDirectory(spec);
  if (dir.empty()) {
    if (spec.training.summary_every || spec.training.histogram_every > 0)
      spdlog::warn(
          "{} is set, but this run writes no TensorBoard summaries: give it a summary directory "
          "(--summary-dir, training.summary_dir) or a checkpoint directory",
          spec.training.summary_every ? "training.summary_every (or --summary-every)"
                                      : "training.histogram_every");
    return nullptr;
  }
  std::error_code error;
  const std::vector<std::filesystem::path> made = makeDirectories(dir, error);
  try {
    if (error) {
      removeMadeDirectories(made);
      throw InputError("summary directory " + dir + ": cannot create it: " + error.message());
    }
    return std::make_unique<TrainingSummaries>(spec, dir, start_step, made);
  } catch (const InputError& e) {
    removeMadeDirectories(made);  // another run holds it: then made none
    // The directory named, or the checkpoint directory it defaults under.
    const bool named = !spec.training.summary_dir.empty();
    const SourceLocation& where =
        named ? spec.training.summary_dir_location : spec.checkpoint.dir_location;
    throwInputError(where,
                    where.line <= 0 ? ""
                    : named         ? "training.summary_dir"
                                    : "checkpoint.dir",
                    e.what());
  } catch (const std::runtime_error& e) {
    // Created, but its first write failed (a full disk): as a write that
    // fails later, it ends the summaries, not the run.
    spdlog::warn("{}; no TensorBoard summaries in this run", e.what());
    // Made for this run, and empty when the writer's first event failed (it
    // removes its file): gone, as a checkpoint directory that got nothing
    // goes (core/checkpoint.h), with the parents made for it; not one left
    // holding a file.
    removeMadeDirectories(made);
    return nullptr;
  }
}

}  // namespace traind
