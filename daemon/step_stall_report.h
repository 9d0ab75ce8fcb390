// What a ps says when its global step stands still (docs/distributed.md,
// "Stopping and failures"): sync training waits for every gradient a step
// aggregates, so a stopped, hung or dead worker holds the job, as
// SyncReplicasOptimizer does unless backup workers make up the step; async
// training with max_staleness holds the workers that have gone too far
// ahead of a stopped or hung one. The ps cannot tell a stopped worker from
// a slow one, but it can say whom it waits for.
//
//   StepStallReport report(shard, cluster);
//   // about every second, on the ps's event-loop thread:
//   if (auto line = report.check(seconds_now)) (line->suspects ? warn : info)(line->text);
#pragma once

#include <deque>
#include <optional>
#include <string>

#include "core/cluster_spec.h"
#include "core/parameter_shard.h"

namespace traind {

class StepStallReport {
 public:
  // A step may stand still this long, or 10 times as long as the last step
  // took if that is longer, before the first report; the reports repeat as
  // often while it still stands. The chief's evaluations and checkpoints
  // hold a step for seconds.
  static constexpr double kMinSeconds = 15.0;
  // A shard the chief has not initialised yet is reported after this long,
  // and again as often as kChiefWaitRepeatSeconds: a chief that never
  // comes (not started, or it refused its spec and exited) leaves the ps
  // serving nobody, and a log that said so once at the start.
  static constexpr double kChiefWaitSeconds = 60.0;
  static constexpr double kChiefWaitRepeatSeconds = 600.0;

  StepStallReport(const ParameterShard& shard, const ClusterSpec& cluster)
      : shard_(shard), cluster_(cluster) {}

  struct Line {
    // The text names the workers the step waits for: sync, some gradients
    // of the step came and others are missing; async, workers are held at
    // max_staleness ahead of the slowest. Otherwise no worker has pushed
    // the step yet (they wait for another ps's step, for the chief, or the
    // job is ending) and the text says so. Before the shard is
    // initialised, it says whether the chief is connected.
    bool suspects = false;
    std::string text;
  };

  // `now`: seconds on a monotonic clock. A line when it is time for one.
  std::optional<Line> check(double now);

  // How long the global step has stood still as of the last check (0
  // before the shard is ready, for a shard that holds nothing).
  double standingSeconds() const { return standing_; }

  // How long a step can take here: the longest that check saw a step
  // stand still, among the steps applied over the last kRecentSeconds (so
  // short of the step's time by up to the time between checks). 0 when no
  // step stood past a check: steps of milliseconds, checked every second.
  double longestRecentStepSeconds() const;
  static constexpr double kRecentSeconds = 60.0;

 private:
  double threshold() const;
  Line syncLine(int waited) const;
  Line asyncLine(int waited) const;
  Line chiefWaitLine(int waited) const;

  const ParameterShard& shard_;
  const ClusterSpec& cluster_;
  int64_t step_ = -1;         // the step standing, -1 before the shard is ready
  double since_ = 0.0;        // when it began to stand
  double last_step_ = 0.0;    // how long the step before it took; 0: not known
  double next_report_ = 0.0;
  double standing_ = 0.0;
  std::optional<double> waiting_since_;  // for the chief, while the shard is not ready
  double next_wait_report_ = 0.0;
  struct StepTime {
    double seen;  // when check saw it
    double seconds;
  };
  std::deque<StepTime> recent_;  // the last kRecentSeconds' steps, oldest first
};

}  // namespace traind
