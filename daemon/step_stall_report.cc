#include "daemon/step_stall_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/printable.h"

namespace traind {
namespace {

// "1, 3 and 4"; runs of three or more in order as ranges ("2..299"), so
// that a line stays short whatever the cluster's size.
std::string workerList(const std::vector<uint32_t>& workers) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < workers.size();) {
    size_t last = i;
    while (last + 1 < workers.size() && workers[last + 1] == workers[last] + 1) ++last;
    if (last - i >= 2) {
      parts.push_back(fmt::format("{}..{}", workers[i], workers[last]));
      i = last + 1;
    } else {
      parts.push_back(std::to_string(workers[i++]));
    }
  }
  return listedInProse(parts);
}

std::string workers(const std::vector<uint32_t>& list) {
  return fmt::format("worker{} {}", list.size() > 1 ? "s" : "", workerList(list));
}

// "worker 1 (connected: stopped, hung or slow?)". Over several ps tasks a
// worker also pushes nothing here while another ps does not answer it: this
// ps cannot tell which, so the line says both.
std::string connectedSuspects(const std::vector<uint32_t>& list, const ClusterSpec& cluster) {
  const bool chief = std::find(list.begin(), list.end(), 0u) != list.end();
  return workers(list) + fmt::format(" (connected: stopped, hung or slow{}{}?)",
                                     cluster.ps.size() > 1 ? ", or waiting for another ps" : "",
                                     chief ? "; worker 0 evaluating or checkpointing" : "");
}

StepStallReport::Line nobodyPushed(const ParameterShard& shard, const ClusterSpec& cluster,
                                   int64_t step, int waited) {
  if (!shard.anyWorkerConnected())
    return {false, fmt::format("global step {} has waited {} s: no worker is connected to this ps "
                               "(they stopped, or lost another ps: their logs say; the job goes "
                               "on when they are started again)",
                               step, waited)};
  return {false, fmt::format("global step {} has waited {} s: no worker has pushed a gradient of "
                             "it to this ps yet ({})",
                             step, waited,
                             cluster.mode == TrainingMode::Async
                                 ? "they are stopped, hung or slow, or the job is ending"
                             : cluster.ps.size() > 1
                                 ? "they wait for another ps's step or for the chief, or the job "
                                   "is ending"
                                 : "they wait for the chief, are stopped, hung or slow, or their "
                                   "link to this ps is down, or the job is ending")};
}

}  // namespace

double StepStallReport::threshold() const { return std::max(kMinSeconds, 10.0 * last_step_); }

std::optional<StepStallReport::Line> StepStallReport::check(double now) {
  const double stood = standing_;  // as the last check saw the step
  standing_ = 0.0;
  while (!recent_.empty() && recent_.front().seen < now - kRecentSeconds) recent_.pop_front();
  // A shard that holds nothing gets no gradients and keeps its step.
  if (shard_.chunks().empty()) return std::nullopt;
  if (!shard_.ready()) {
    // Waiting from the start, or again (a chief restoring the shard after
    // its ps restarted).
    if (step_ != -1 || !waiting_since_) {
      waiting_since_ = now;
      next_wait_report_ = now + kChiefWaitSeconds;
    }
    step_ = -1;
    if (now < next_wait_report_) return std::nullopt;
    next_wait_report_ = now + kChiefWaitRepeatSeconds;
    return chiefWaitLine(int(now - *waiting_since_));
  }
  waiting_since_.reset();
  if (shard_.globalStep() != step_) {
    last_step_ = step_ >= 0 ? now - since_ : 0.0;
    if (stood > 0.0) recent_.push_back({now, stood});
    step_ = shard_.globalStep();
    since_ = now;
    next_report_ = now + threshold();
    return std::nullopt;
  }
  standing_ = now - since_;
  if (now < next_report_) return std::nullopt;
  next_report_ = now + threshold();
  const int waited = int(standing_);
  return cluster_.mode == TrainingMode::Sync ? syncLine(waited) : asyncLine(waited);
}

double StepStallReport::longestRecentStepSeconds() const {
  double longest = 0.0;
  for (const StepTime& step : recent_) longest = std::max(longest, step.seconds);
  return longest;
}

StepStallReport::Line StepStallReport::chiefWaitLine(int waited) const {
  const std::string what = fmt::format(
      "this ps has waited {} s for the chief (worker 0) to initialise its shard", waited);
  std::vector<uint32_t> connected = shard_.connectedWorkers();
  if (std::erase(connected, 0u) > 0)
    return {false, what +
                       ": it is connected, and restoring a checkpoint, initialising the "
                       "parameters or waiting for another ps"};
  if (connected.empty())
    return {false, what +
                       ": no worker is connected (not started yet, or they stopped: a worker "
                       "that cannot run the spec or flags it was given exits at once, and its "
                       "log says why)"};
  return {false, what + fmt::format(": {} connected, the chief not (not started yet, or it "
                                    "stopped: its log says why)",
                                    workers(connected))};
}

StepStallReport::Line StepStallReport::syncLine(int waited) const {
  if (shard_.holdsSums())
    return Line{false, fmt::format("global step {} has waited {} s: the chief holds the shard at "
                                   "it while it reads the shards for a checkpoint (the hold is "
                                   "lifted after {:.0f} s at most)",
                                   step_, waited, ParameterShard::kMaxHoldSeconds)};
  if (!shard_.stepStarted()) return nobodyPushed(shard_, cluster_, step_, waited);
  std::vector<uint32_t> silent, gone;
  for (uint32_t w : shard_.workersStepWaitsFor())
    (shard_.workerConnected(w) ? silent : gone).push_back(w);
  std::string lacking;
  if (!silent.empty()) lacking = connectedSuspects(silent, cluster_);
  if (!gone.empty())
    lacking += fmt::format("{}{} (not connected)", lacking.empty() ? "" : " and ", workers(gone));
  // With backup workers any of them would do.
  const bool any = cluster_.replicas_to_aggregate < int(cluster_.worker.size());
  return Line{true, fmt::format("global step {} has waited {} s for gradients from {}{}; each "
                                "chunk aggregates {} of the {} workers' gradients",
                                step_, waited, any ? "any of " : "", lacking,
                                cluster_.replicas_to_aggregate, cluster_.worker.size())};
}

StepStallReport::Line StepStallReport::asyncLine(int waited) const {
  const ParameterShard::StalenessHold hold = shard_.stalenessHold();
  if (hold.held.empty()) return nobodyPushed(shard_, cluster_, step_, waited);
  // A worker that left is no longer waited for: only connected ones hold.
  return Line{
      true,
      fmt::format("global step {} has waited {} s: {} {} more than max_staleness "
                  "({}) pushes ahead of {} and wait{} for {} gradients",
                  step_, waited, workers(hold.held), hold.held.size() > 1 ? "are" : "is",
                  cluster_.max_staleness, connectedSuspects(hold.slowest, cluster_),
                  hold.held.size() > 1 ? "" : "s", hold.slowest.size() > 1 ? "their" : "its")};
}

}  // namespace traind
