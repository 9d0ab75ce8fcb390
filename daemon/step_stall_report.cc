#include "daemon/step_stall_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace traind {
namespace {

// "1, 3 and 4"
std::string workerList(const std::vector<uint32_t>& workers) {
  std::string out;
  for (size_t i = 0; i < workers.size(); ++i)
    out += (i == 0 ? "" : i + 1 == workers.size() ? " and " : ", ") + std::to_string(workers[i]);
  return out;
}

std::string workers(const std::vector<uint32_t>& list) {
  return fmt::format("worker{} {}", list.size() > 1 ? "s" : "", workerList(list));
}

}  // namespace

double StepStallReport::threshold() const { return std::max(kMinSeconds, 10.0 * last_step_); }

std::optional<StepStallReport::Line> StepStallReport::check(double now) {
  standing_ = 0.0;
  // Async steps never wait; a shard that holds nothing gets no gradients
  // and keeps its step.
  if (cluster_.mode != TrainingMode::Sync || shard_.chunks().empty()) return std::nullopt;
  if (!shard_.ready()) {
    step_ = -1;
    return std::nullopt;
  }
  if (shard_.globalStep() != step_) {
    last_step_ = step_ >= 0 ? now - since_ : 0.0;
    step_ = shard_.globalStep();
    since_ = now;
    next_report_ = now + threshold();
    return std::nullopt;
  }
  standing_ = now - since_;
  if (now < next_report_) return std::nullopt;
  next_report_ = now + threshold();
  const int waited = int(standing_);
  if (!shard_.stepStarted())
    return Line{false, fmt::format("global step {} has waited {} s: no worker has pushed a "
                                   "gradient of it to this ps yet (they wait for another ps's "
                                   "step or for the chief, or the job is ending)",
                                   step_, waited)};
  std::vector<uint32_t> silent, gone;
  for (uint32_t w : shard_.workersStepWaitsFor())
    (shard_.workerConnected(w) ? silent : gone).push_back(w);
  std::string lacking;
  if (!silent.empty()) {
    lacking = workers(silent);
    const bool chief = std::find(silent.begin(), silent.end(), 0u) != silent.end();
    lacking += fmt::format(" (connected: stopped, hung or slow{}?)",
                           chief ? "; worker 0 evaluating or checkpointing" : "");
  }
  if (!gone.empty())
    lacking += fmt::format("{}{} (not connected)", lacking.empty() ? "" : " and ", workers(gone));
  // With backup workers any of them would do.
  const bool any = cluster_.replicas_to_aggregate < int(cluster_.worker.size());
  return Line{true, fmt::format("global step {} has waited {} s for gradients from {}{}; each "
                                "chunk aggregates {} of the {} workers' gradients",
                                step_, waited, any ? "any of " : "", lacking,
                                cluster_.replicas_to_aggregate, cluster_.worker.size())};
}

}  // namespace traind
