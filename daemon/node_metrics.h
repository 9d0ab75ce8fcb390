// What a node tells its operators: the state behind GET /healthz, the
// Prometheus metrics of GET /metrics and the one-line JSON of GET /status
// (daemon/ops_server.h serves them; docs/operations.md lists them).
//
// The training or ps thread writes, the ops server's thread reads. Every
// method takes one mutex for a few hundred nanoseconds (rendering a page
// formats a few dozen lines under it), so neither side ever waits on the
// other's work or on a slow HTTP client.
//
//   NodeMetrics metrics("worker", 1, spec.training.log_every);
//   metrics.setState(NodeState::Waiting, "connecting to the ps tasks");
//   ...
//   metrics.setState(NodeState::Training);
//   metrics.recordStep(step, result.loss, batch_size);   // every step
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/gradient_staleness.h"
#include "rpc/push_counts.h"

namespace traind {

// Healthy (GET /healthz answers 200) in Training and Serving only, and
// there only while the global step moves (NodeMetrics::setStallLimit).
enum class NodeState {
  Starting,  // loading specs, data, building the model
  Waiting,   // for peers: the ps tasks, the chief's initialisation
  Training,  // standalone or worker: running steps
  Serving,   // ps: listening and initialised
  Stopping,  // a stop was requested or the job reached its end
  Done,
};

// "starting", "waiting", "training", "serving", "stopping", "done".
const char* nodeStateName(NodeState state);

// A Prometheus histogram with fixed upper bounds (seconds).
class LatencyHistogram {
 public:
  explicit LatencyHistogram(std::vector<double> bounds);
  void observe(double seconds);
  // The _bucket, _sum and _count lines of `name` with `labels` ("job=\"ps\",task=\"0\"").
  std::string render(const std::string& name, const std::string& labels) const;
  int64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bound, not cumulative; the last one is +Inf
  double sum_ = 0.0;
  int64_t count_ = 0;
};

// How often a ps copies its shard's global step and counters, and the
// chief's word of a checkpoint, into its metrics (/status): a reader of a
// ps's status sees what the ps did that long ago.
inline constexpr std::chrono::milliseconds kShardPublishPeriod{100};

class NodeMetrics {
 public:
  using SystemClock = std::chrono::system_clock;

  // `job`: "standalone", "ps" or "worker" (the metrics' job label). The loss
  // and throughput are means over windows of `log_every` steps, the windows
  // of the log lines.
  NodeMetrics(std::string job, int task, int64_t log_every);

  const std::string& job() const { return job_; }
  int task() const { return task_; }

  // `detail` says why, for the 503 of /healthz ("waiting for ps 1").
  void setState(NodeState state, std::string detail = {});
  NodeState state() const;

  // Whether this node writes checkpoints (standalone or the chief, with a
  // checkpoint dir): POST /checkpoint is refused elsewhere, and only these
  // nodes report traind_checkpoint_age_seconds.
  void setWritesCheckpoints(bool writes);
  bool writesCheckpoints() const;

  // How long the global step may stand still, in Training or Serving,
  // before the node is unhealthy (0: however long). A hung training
  // thread, or a sync step that waits on a stopped worker, stops the step
  // while this thread still answers.
  void setStallLimit(std::chrono::seconds limit);

  struct Health {
    bool ok = false;
    std::string reason;  // "ok", or the state and its detail
  };
  Health health() const;

  // A step this node ran; `global_step` is the step after it.
  void recordStep(int64_t global_step, double loss, int64_t examples);
  // The job's step as this node sees it (ps: its shard's).
  void setGlobalStep(int64_t global_step);

  // Worker: one push or pull of every shard's chunks (tensor bytes) and how
  // long it took from the first request sent to the last reply.
  void recordPush(int64_t bytes, double seconds);
  void recordPull(int64_t bytes, double seconds);
  // Worker: how many ps tasks it reached through shared memory when it
  // connected (the others over TCP; rpc/shared_region.h).
  void setSharedMemoryShards(int shards);

  // ps: its counters, as copied from the shard by the event loop; an async
  // shard's staleness too (null in sync training, which applies no stale
  // gradient).
  void setShardCounters(int64_t stale_gradients, int connected_workers, const PushCounts& pushes,
                        const GradientStaleness* staleness);
  // ps: how long its global step has stood still.
  void setStepStanding(double seconds);

  // A checkpoint written now, or found at start (its age is its
  // manifest's modification time).
  void recordCheckpoint(int64_t global_step, const std::filesystem::path& path);
  void recordExistingCheckpoint(const std::filesystem::path& checkpoint);

  // Prometheus text exposition format 0.0.4.
  std::string prometheusText() const;
  // {"role":"worker","task":1,"state":"training","detail":"","global_step":1200,
  //  "loss":0.41,"examples_per_sec":5312.0,"writes_checkpoints":true,"last_checkpoint":null,
  //  "last_checkpoint_step":null,"stalled":null}   ("stalled": /healthz's reason while the step
  //  stands past the limit)
  std::string statusJson() const;

 private:
  using Clock = std::chrono::steady_clock;

  std::string labels() const;  // job="worker",task="1"
  // Why the node is stalled (its step has stood past the limit while it
  // trains or serves), or nothing; with mutex_ held.
  std::optional<std::string> stallLocked() const;

  const std::string job_;
  const int task_;
  const int64_t log_every_;

  mutable std::mutex mutex_;
  NodeState state_ = NodeState::Starting;
  bool told_ready_ = false;  // systemd's READY=1 sent (setState)
  std::string detail_;
  std::chrono::seconds stall_limit_{0};
  // When the global step last moved, or the node began to train or serve.
  Clock::time_point last_progress_;
  bool writes_checkpoints_ = false;
  // Unknown until the node has restored, initialised or pulled (null in
  // /status, absent from /metrics): a worker starting again mid-job is at
  // no step 0, and a gauge that fell to 0 would read as a reset.
  std::optional<int64_t> global_step_;
  // The last complete window's means (the running window's before one
  // completes). A window ends where StepLog's does: when the global step
  // reaches or crosses a multiple of log_every, so the figures are the log
  // line's.
  std::optional<double> loss_;
  std::optional<double> examples_per_second_;
  double window_loss_ = 0.0;
  int64_t window_steps_ = 0, window_examples_ = 0;
  Clock::time_point window_start_;
  bool window_started_ = false;     // its clock: from training's start, or the first step
  int64_t window_start_step_ = -1;  // the global step before the window's first
  bool window_completed_ = false;
  int64_t push_bytes_ = 0, pull_bytes_ = 0;
  LatencyHistogram push_seconds_, pull_seconds_;
  int shared_memory_shards_ = 0;
  int64_t stale_gradients_ = 0;
  int connected_workers_ = 0;
  PushCounts pushes_;
  std::optional<GradientStaleness> staleness_;
  double step_standing_seconds_ = 0.0;
  std::optional<std::filesystem::path> last_checkpoint_;
  int64_t last_checkpoint_step_ = 0;
  // On the steady clock: a step of the wall clock (NTP, an operator's
  // date) would make the age jump, firing or hiding the age alert. A
  // checkpoint found at the start is placed by its manifest's time once.
  Clock::time_point last_checkpoint_time_;
};

}  // namespace traind
