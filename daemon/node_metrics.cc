#include "daemon/node_metrics.h"

#include <fmt/format.h>

#include <cmath>

#include "core/checkpoint.h"
#include "core/json.h"
#include "daemon/release.h"
#include "daemon/systemd_notify.h"

namespace traind {
namespace {

// Push and pull times of a step: from a local ps's milliseconds to a
// stalled sync step's seconds.
const std::vector<double> kTransferBounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                             0.1,    0.25,  0.5,    1.0,   2.5,  5.0,   10.0};

// A sample value as the text format writes it.
std::string number(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", x);
}

std::string jsonNumber(const std::optional<double>& x) {
  return x && std::isfinite(*x) ? fmt::format("{}", *x) : "null";
}

void family(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

}  // namespace

const char* nodeStateName(NodeState state) {
  switch (state) {
    case NodeState::Starting:
      return "starting";
    case NodeState::Waiting:
      return "waiting";
    case NodeState::Training:
      return "training";
    case NodeState::Serving:
      return "serving";
    case NodeState::Stopping:
      return "stopping";
    case NodeState::Done:
      return "done";
  }
  return "?";
}

LatencyHistogram::LatencyHistogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void LatencyHistogram::observe(double seconds) {
  size_t bucket = 0;
  while (bucket < bounds_.size() && seconds > bounds_[bucket]) ++bucket;
  ++counts_[bucket];
  sum_ += seconds;
  ++count_;
}

std::string LatencyHistogram::render(const std::string& name, const std::string& labels) const {
  std::string out;
  int64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? number(bounds_[i]) : "+Inf";
    out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, le, cumulative);
  }
  out += fmt::format("{}_sum{{{}}} {}\n", name, labels, number(sum_));
  out += fmt::format("{}_count{{{}}} {}\n", name, labels, count_);
  return out;
}

NodeMetrics::NodeMetrics(std::string job, int task, int64_t log_every)
    : job_(std::move(job)),
      task_(task),
      log_every_(std::max<int64_t>(1, log_every)),
      push_seconds_(kTransferBounds),
      pull_seconds_(kTransferBounds) {}

void NodeMetrics::setState(NodeState state, std::string detail) {
  std::string status = nodeStateName(state);
  if (!detail.empty()) status += ": " + detail;
  const bool serves = state == NodeState::Training || state == NodeState::Serving;
  const bool ends = state == NodeState::Stopping || state == NodeState::Done;
  bool never_ready = false;
  {
    std::lock_guard lock(mutex_);
    never_ready = !told_ready_;
    told_ready_ = told_ready_ || serves || ends;
    if (state == NodeState::Training && state_ != NodeState::Training) {
      // The first window starts with training, not with the data loading before it.
      window_start_ = Clock::now();
      window_started_ = true;
    }
    if ((state == NodeState::Training || state == NodeState::Serving) && state != state_)
      last_progress_ = Clock::now();
    state_ = state;
    detail_ = std::move(detail);
  }
  // systemd hears of every state change; the node serves (READY) from the
  // states in which /healthz answers 200. A node that ends without having
  // served (a worker started after its job ended, a ps stopped before the
  // chief initialised it) says READY first: systemd takes a Type=notify
  // service that exits 0 without it as failed ("protocol") and restarts it.
  const bool ready = serves || (ends && never_ready);
  notifySystemd(ready, state == NodeState::Stopping, status);
}

NodeState NodeMetrics::state() const {
  std::lock_guard lock(mutex_);
  return state_;
}

void NodeMetrics::setWritesCheckpoints(bool writes) {
  std::lock_guard lock(mutex_);
  writes_checkpoints_ = writes;
}

bool NodeMetrics::writesCheckpoints() const {
  std::lock_guard lock(mutex_);
  return writes_checkpoints_;
}

void NodeMetrics::setStallLimit(std::chrono::seconds limit) {
  std::lock_guard lock(mutex_);
  stall_limit_ = limit;
}

std::optional<std::string> NodeMetrics::stallLocked() const {
  if (state_ != NodeState::Training && state_ != NodeState::Serving) return std::nullopt;
  const auto standing = Clock::now() - last_progress_;
  if (stall_limit_.count() == 0 || standing <= stall_limit_) return std::nullopt;
  return fmt::format("{}: the global step has stood at {} for {} s (http.stall_seconds: {})",
                     nodeStateName(state_), global_step_.value_or(0),
                     std::chrono::duration_cast<std::chrono::seconds>(standing).count(),
                     stall_limit_.count());
}

NodeMetrics::Health NodeMetrics::health() const {
  std::lock_guard lock(mutex_);
  if (std::optional<std::string> stall = stallLocked()) return {false, std::move(*stall)};
  if (state_ == NodeState::Training || state_ == NodeState::Serving) return {true, "ok"};
  std::string reason = nodeStateName(state_);
  if (!detail_.empty()) reason += ": " + detail_;
  return {false, reason};
}

void NodeMetrics::recordStep(int64_t global_step, double loss, int64_t examples) {
  const Clock::time_point now = Clock::now();
  std::string status;  // systemd's STATUS line, once per completed window
  {
    std::lock_guard lock(mutex_);
    if (global_step != global_step_) last_progress_ = now;
    global_step_ = global_step;
    if (!window_started_) {
      window_start_ = now;
      window_started_ = true;
    }
    if (window_start_step_ < 0) window_start_step_ = global_step - 1;
    window_loss_ += loss;
    window_examples_ += examples;
    ++window_steps_;
    const double seconds = std::chrono::duration<double>(now - window_start_).count();
    // StepLog's rule (crossesMultiple): the global step reached or crossed a
    // multiple of log_every.
    const bool complete =
        log_every_ > 0 && global_step / log_every_ > window_start_step_ / log_every_;
    if (complete || !window_completed_) {
      loss_ = window_loss_ / double(window_steps_);
      if (seconds > 0) examples_per_second_ = double(window_examples_) / seconds;
    }
    if (!complete) return;
    window_completed_ = true;
    window_loss_ = 0.0;
    window_examples_ = 0;
    window_steps_ = 0;
    window_start_ = now;
    window_start_step_ = global_step;
    status = fmt::format("step {}, loss = {:.4f}", global_step, *loss_);
    if (examples_per_second_)
      status += fmt::format(" ({:.1f} examples/sec)", *examples_per_second_);
  }
  // Sent outside the mutex: the ops server's reads never wait on a send.
  notifySystemdStatus(status);
}

void NodeMetrics::setGlobalStep(int64_t global_step) {
  std::lock_guard lock(mutex_);
  // The first step known is no progress: the clock started as the node
  // began to train or serve.
  if (global_step_ && global_step != *global_step_) last_progress_ = Clock::now();
  global_step_ = global_step;
}

void NodeMetrics::recordPush(int64_t bytes, double seconds) {
  std::lock_guard lock(mutex_);
  push_bytes_ += bytes;
  push_seconds_.observe(seconds);
}

void NodeMetrics::recordPull(int64_t bytes, double seconds) {
  std::lock_guard lock(mutex_);
  pull_bytes_ += bytes;
  pull_seconds_.observe(seconds);
}

void NodeMetrics::setSharedMemoryShards(int shards) {
  std::lock_guard lock(mutex_);
  shared_memory_shards_ = shards;
}

void NodeMetrics::setShardCounters(int64_t stale_gradients, int connected_workers,
                                   const PushCounts& pushes, const GradientStaleness* staleness) {
  std::lock_guard lock(mutex_);
  stale_gradients_ = stale_gradients;
  connected_workers_ = connected_workers;
  pushes_ = pushes;
  if (staleness) staleness_ = *staleness;
}

void NodeMetrics::setStepStanding(double seconds) {
  std::lock_guard lock(mutex_);
  // To the millisecond: "7.006", not a clock difference's "7.006000000001222".
  step_standing_seconds_ = std::round(seconds * 1000) / 1000;
}

void NodeMetrics::recordCheckpoint(int64_t global_step, const std::filesystem::path& path) {
  const Clock::time_point now = Clock::now();
  std::lock_guard lock(mutex_);
  last_checkpoint_ = path;
  last_checkpoint_step_ = global_step;
  last_checkpoint_time_ = now;
}

void NodeMetrics::recordExistingCheckpoint(const std::filesystem::path& checkpoint) {
  const CheckpointManifest manifest = readManifest(checkpoint);
  std::error_code error;
  const auto written =
      std::filesystem::last_write_time(checkpoint / checkpoint_format::kManifestFile, error);
  // Its age by the wall clock now (none for a time in the future, at most
  // a century: the steady clock's range), counted on from here by the
  // steady one.
  constexpr auto kCentury = std::chrono::hours(24 * 36525);
  const SystemClock::duration age =
      error ? SystemClock::duration::zero()
            : std::clamp<SystemClock::duration>(
                  SystemClock::now() - std::chrono::time_point_cast<SystemClock::duration>(
                                           std::chrono::file_clock::to_sys(written)),
                  SystemClock::duration::zero(), kCentury);
  std::lock_guard lock(mutex_);
  last_checkpoint_ = checkpoint;
  last_checkpoint_step_ = manifest.global_step;
  last_checkpoint_time_ = Clock::now() - std::chrono::duration_cast<Clock::duration>(age);
}

std::string NodeMetrics::labels() const {
  return fmt::format("job=\"{}\",task=\"{}\"", job_, task_);
}

std::string NodeMetrics::prometheusText() const {
  const Clock::time_point now = Clock::now();
  std::lock_guard lock(mutex_);
  const std::string l = labels();
  const bool trains = job_ != "ps";
  std::string out;
  family(out, "traind_global_step", "gauge", "The job's global step as this node last saw it.");
  if (global_step_) out += fmt::format("traind_global_step{{{}}} {}\n", l, *global_step_);
  if (trains) {
    family(out, "traind_loss", "gauge",
           "Mean training loss of the last window of log_every steps on this node.");
    if (loss_) out += fmt::format("traind_loss{{{}}} {}\n", l, number(*loss_));
    family(out, "traind_examples_per_second", "gauge",
           "Training examples per second of the last window of log_every steps on this node.");
    if (examples_per_second_)
      out += fmt::format("traind_examples_per_second{{{}}} {}\n", l, number(*examples_per_second_));
  }
  if (job_ == "worker") {
    family(out, "traind_push_bytes_total", "counter", "Gradient bytes pushed to the ps tasks.");
    out += fmt::format("traind_push_bytes_total{{{}}} {}\n", l, push_bytes_);
    family(out, "traind_pull_bytes_total", "counter", "Parameter bytes pulled from the ps tasks.");
    out += fmt::format("traind_pull_bytes_total{{{}}} {}\n", l, pull_bytes_);
    family(out, "traind_push_seconds", "histogram",
           "Time to push one step's gradients to every ps task (sync: includes waiting for the "
           "step, as a chunk's reply acknowledges it).");
    out += push_seconds_.render("traind_push_seconds", l);
    family(out, "traind_pull_seconds", "histogram",
           "Time to pull the parameters from every ps task (sync: includes waiting for the step).");
    out += pull_seconds_.render("traind_pull_seconds", l);
    family(out, "traind_shared_memory_ps_tasks", "gauge",
           "ps tasks this worker reaches through shared memory (the others over TCP).");
    out += fmt::format("traind_shared_memory_ps_tasks{{{}}} {}\n", l, shared_memory_shards_);
  }
  if (job_ == "ps") {
    family(out, "traind_stale_gradients_total", "counter",
           "Gradient chunks this shard dropped as stale.");
    out += fmt::format("traind_stale_gradients_total{{{}}} {}\n", l, stale_gradients_);
    if (staleness_) {
      family(out, "traind_gradient_staleness_steps", "summary",
             "Async: per push this shard applied, the global steps it had taken since the pull "
             "the gradient was computed from.");
      out += fmt::format("traind_gradient_staleness_steps_sum{{{}}} {}\n", l, staleness_->steps);
      out += fmt::format("traind_gradient_staleness_steps_count{{{}}} {}\n", l, staleness_->pushes);
    }
    family(out, "traind_connected_workers", "gauge",
           "Workers connected to this shard (connections that said hello as a worker).");
    out += fmt::format("traind_connected_workers{{{}}} {}\n", l, connected_workers_);
    auto byTransport = [&](const char* name, const char* help, int64_t tcp, int64_t shared) {
      family(out, name, "counter", help);
      out += fmt::format("{}{{{},transport=\"tcp\"}} {}\n", name, l, tcp);
      out += fmt::format("{}{{{},transport=\"shared_memory\"}} {}\n", name, l, shared);
    };
    byTransport("traind_push_calls_total",
                "pushAndPull calls whose gradient chunks this shard took, by transport.",
                pushes_.tcp_calls, pushes_.shared_calls);
    byTransport("traind_pushed_chunks_total",
                "Gradient chunks those calls carried (over TCP one per call), by transport.",
                pushes_.tcp_calls, pushes_.shared_chunks);
    family(out, "traind_step_standing_seconds", "gauge",
           "How long the global step has stood still.");
    out += fmt::format("traind_step_standing_seconds{{{}}} {}\n", l,
                       number(step_standing_seconds_));
  }
  if (writes_checkpoints_) {
    family(out, "traind_checkpoint_age_seconds", "gauge",
           "Seconds since the latest checkpoint was written.");
    if (last_checkpoint_) {
      const double age = std::chrono::duration<double>(now - last_checkpoint_time_).count();
      // A save between `now` and the lock: a moment before it, no age.
      out += fmt::format("traind_checkpoint_age_seconds{{{}}} {}\n", l, number(std::max(0.0, age)));
    }
  }
  return out;
}

std::string NodeMetrics::statusJson() const {
  std::lock_guard lock(mutex_);
  const bool trains = job_ != "ps";
  const std::optional<std::string> stall = stallLocked();
  return fmt::format(
      "{{\"role\":{},\"task\":{},\"state\":\"{}\",\"detail\":{},\"global_step\":{},\"loss\":{},"
      "\"examples_per_sec\":{},\"writes_checkpoints\":{},\"last_checkpoint\":{},"
      "\"last_checkpoint_step\":{},\"stalled\":{},\"version\":\"{}\"}}\n",
      jsonQuote(job_), task_, nodeStateName(state_), jsonQuote(detail_),
      global_step_ ? std::to_string(*global_step_) : "null", trains ? jsonNumber(loss_) : "null",
      trains ? jsonNumber(examples_per_second_) : "null", writes_checkpoints_ ? "true" : "false",
      last_checkpoint_ ? jsonQuote(last_checkpoint_->string()) : "null",
      last_checkpoint_ ? std::to_string(last_checkpoint_step_) : "null",
      stall ? jsonQuote(*stall) : "null", releaseVersion());
}

}  // namespace traind
