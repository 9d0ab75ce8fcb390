// A worker's view of the parameter servers: one connection per ps shard,
// tensors moved as 1 MiB chunks (over TCP, or through shared memory with a
// ps on this host), several calls per shard in flight, each reply copied
// into place as it arrives. Calls block the calling thread,
// which runs the kj event loop of `io` while it waits; use it from that
// thread only.
//
//   ShardedClient ps(io, cluster, graph, layout, specIdentity(spec), /*worker_task=*/1);
//   if (ps.connect(cluster.peer_wait_seconds) != ShardedClient::Outcome::Connected) return;
//   if (!ps.waitUntilReady(cluster.peer_wait_seconds)) return;  // the chief initialised them
//   int64_t step = ps.pull(0, params);             // every shard, in parallel
//   replica.trainStep(batch, params.data(), grads.data(), step);
//   step = ps.pushAndPull(grads, step + 1, params);   // sync: waits for the next step
#pragma once

#include <kj/async-io.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/cluster_spec.h"
#include "core/error.h"
#include "core/layer_graph.h"
#include "core/model_state.h"
#include "core/placement.h"

namespace traind {

struct ShardStatusView {
  bool ready = false;
  int64_t global_step = 0;
  bool stopping = false;
  std::vector<uint32_t> workers;  // the tasks of the workers connected to it
  int64_t last_step = 0;  // the job's last step, as its chief said; 0 before
  std::string diverged;   // stopping because the chief's run diverged: why
};

// A gradient that pushAndPull sends while it is still being computed on
// another thread: each chunk goes once ready(the first variable it holds)
// resolves, so a rejection ends the call. The backward pass finishes the
// variables from the last to the first: ready(0) is the whole gradient.
class GradientGate {
 public:
  virtual ~GradientGate() = default;
  virtual kj::Promise<void> ready(size_t variable) = 0;
};

// How ShardedClient::connect tells a job that ended before this worker
// started: `reason` says why the job is over, or nothing, asked once the ps
// tasks have been silent for `after_seconds`.
struct JobOverCheck {
  std::function<std::optional<std::string>()> reason;
  double after_seconds = 0;
};

// What a call to the ps tasks throws when a ps closed the connection at the
// job's end without this worker having heard that the job was over (it was
// paused, or slower than the ps's wait for it): the job ended, nothing failed.
class JobEnded : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What a call to the ps tasks throws once a ps has said that the chief
// stopped the job because its run diverged: this worker's job failed as
// the chief's did (exit 3), though its own numbers may be finite.
class JobDiverged : public Diverged {
 public:
  using Diverged::Diverged;
};

class ShardedClient {
 public:
  ShardedClient(kj::AsyncIoContext& io, const ClusterSpec& cluster, const LayerGraph& graph,
                const VariableLayout& layout, SpecIdentity identity, uint32_t worker_task);
  ~ShardedClient();

  // Connects to every ps and says hello, retrying refused connections, and
  // hellos not answered within kHelloSeconds (or what is left of
  // `timeout_seconds`, a second at least), with backoff and logging whom it
  // is waiting for. Gives up (runtime_error) after `timeout_seconds`. A
  // ps that refuses the hello (another architecture, forward or update
  // rule, data or training rule, training set, shard index; another job's
  // chief) is an InputError; so
  // is one that says this worker task is connected already for longer than
  // kBusySeconds (another process runs as it), and so is an address that
  // answers kForeignAnswers hellos in a row with bytes that are not Cap'n
  // Proto's (another program listens there). Unless the cluster spec turns
  // transport.shared_memory off, hello offers each ps a shared memory
  // region (rpc/shared_region.h); the calls to a ps that maps it (one on
  // this host) move their tensors through it, the others over TCP. Each
  // choice is logged with its reason. Called again, it connects anew and
  // keeps the region it offered while a ps maps it (waitUntilReady
  // connects to a restarted ps the same way, one shard at a time).
  //
  // Once a ps has not answered (its connection refused or its hello
  // unanswered) for `job_over.after_seconds`, `job_over.reason`, when
  // given, is asked after each attempt whether the job has ended without
  // this worker: a reason ends the wait, logged with it, for a worker
  // started after its job (whose ps tasks are gone for good) to end instead
  // of failing after `timeout_seconds`. Not at once: ps tasks starting a
  // little after their workers are the rule, and what it reads may be
  // another run's.
  enum class Outcome {
    Connected,
    Stopped,  // a stop was asked for first (abandonWaitsOnStop), logged
    JobOver,  // job_over gave a reason, logged
  };
  [[nodiscard]] Outcome connect(double timeout_seconds, const JobOverCheck& job_over = {});
  static constexpr int kHelloSeconds = 10;
  // Longer than a vanished host's connection lasts at the ps (rpc/peer_silence.h).
  static constexpr int kBusySeconds = 30;
  static constexpr int kForeignAnswers = 3;

  // How many ps shards this worker reaches through shared memory.
  int shardsThroughSharedMemory() const;

  // When every ps maps the region: its gradient and parameter buffers, of
  // the layout's size, for the worker to compute in. Pushes and pulls with
  // these as `gradients` and `parameters` copy nothing on this side: the ps
  // reads each chunk's gradient and writes its parameters in place. A
  // worker computing in them must leave a chunk alone from its push to the
  // reply, as a gradient streamed during backward does (the step no longer
  // reads the chunk's parameters, and its gradient is final). Null
  // otherwise. They live as long as this client. Once a call has been given
  // up (a stop, a failure), calls with them throw logic_error: the ps may
  // still answer the abandoned call into them.
  struct SharedBuffers {
    float* gradients = nullptr;
    float* parameters = nullptr;
  };
  SharedBuffers sharedBuffers() const;

  // Every shard's status, asked in turn: a shard's failure thrown as a
  // call's is, silence for kPeerSilenceSeconds included; nullopt, logged,
  // when a stop was asked for first (abandonWaitsOnStop).
  std::optional<std::vector<ShardStatusView>> statuses();

  // Polls until every shard is ready or stopping (the job ended before it
  // was initialised: a pull then returns -1); logs while it waits. A ps
  // whose connection is lost meanwhile held nothing of the job yet: it is
  // connected to again (restarted), as connect() does. Returns false,
  // logged, when a stop was asked for first (abandonWaitsOnStop).
  [[nodiscard]] bool waitUntilReady(double timeout_seconds);

  // Chief: writes parameters and optimizer slots to every shard, then marks
  // them ready at the state's global step.
  void initialize(const ModelState& state);

  // Parameters from every shard once each has reached min_step, into
  // `parameters` (the model's flat layout). Returns the job's global step,
  // the lowest of the shards' (they may be a step apart); -1 once a shard
  // has said it is stopping (told to by the chief, a signal or POST /stop):
  // the job is over. Once one has (in a reply, or in its status while the
  // calls wait: see kHeartbeatSeconds), the calls to the others are waited
  // for kStoppingGraceSeconds more, then given up, logged: a sync step they
  // hold may wait for a worker that is paused or gone, while the stopping
  // ps closes its connections 5 s on, and the chief still has to read every
  // shard for its final checkpoint. When the chief stopped the job because
  // its run diverged (stopRemaining), the first such return throws
  // JobDiverged instead, with the chief's words from that shard's status
  // (asked for kJobEndStatusSeconds at most: a ps keeps its connections 5 s
  // for its workers to go, then ends them with the same words). -1 too when
  // the wait was given up on a stop (abandonWaitsOnStop): `parameters` may
  // then hold some chunks new and others as they were.
  int64_t pull(int64_t min_step, FlatBuffer& parameters);
  static constexpr int kStoppingGraceSeconds = 1;
  static constexpr int kJobEndStatusSeconds = 6;

  // While a pull or push+pull waits, each shard is asked for its status
  // every kHeartbeatSeconds; one that has not answered for
  // kPeerSilenceSeconds (rpc/peer_silence.h) is given up, as a lost
  // connection: its process is stopped (SIGSTOP) or hung while its kernel
  // still acknowledges, which the socket options cannot see. A sync step
  // may wait far longer for other workers: the shard answers status at once.
  // Each second: a shard that stops says so in its status, and its
  // workers, waiting on others, must hear it well within the 5 s it keeps
  // its connections.
  static constexpr int kHeartbeatSeconds = 1;

  // Pushes a gradient computed from the parameters of the last pull (each
  // shard's part tagged with the step that shard reported) and pulls as
  // pull() does, one call per chunk, a few in flight per shard: a shard
  // applies a chunk and sends its parameters back while the next arrive (in
  // sync training once that chunk has its replicas_to_aggregate gradients).
  // Chunks go last first, the order a backward pass finishes them in; with
  // a `gate`, each once the gate says its gradient is final, and its reply
  // is written over its parameters while the rest is computed. Over TCP a
  // chunk's request references `gradients`, which must outlive this
  // client: one queued behind others on a connection still goes out after a
  // failure gave the call up.
  int64_t pushAndPull(const FlatBuffer& gradients, int64_t min_step, FlatBuffer& parameters,
                      GradientGate* gate = nullptr);

  // Async training with several steps in flight (training.concurrent_steps)
  // and no ps mapping the region: push+pulls that overlap, so that a long
  // round trip to the ps tasks holds back each step, not the exchanges of
  // the others (docs/distributed.md, "Concurrent steps").
  //
  //   ps.startPushAndPull(slot, grads, shard_steps, params);  // returns at once
  //   if (auto end = ps.nextPushAndPull(slots.whenFinished())) ...   // or woken
  //
  // startPushAndPull makes the calls of pushAndPull(gradients, 0,
  // parameters), the gradient's parts tagged with `shard_steps` (the
  // shardSteps() of the pull it was computed from), and returns; `id` names
  // it in its end. The buffers are the calls' until then, and `gradients`
  // must outlive this client: requests go out without a copy, and one
  // queued on a connection still goes out after its call was given up (as
  // with pushAndPull). Throws logic_error in sync training or when a ps maps
  // the region.
  void startPushAndPull(size_t id, const FlatBuffer& gradients, std::vector<int64_t> shard_steps,
                        FlatBuffer& parameters);
  // Runs the event loop until a push+pull started has ended: its id, and
  // `step` as pushAndPull returns it; shardSteps() and lastTransfer() are
  // then its own. nullopt once `wake` resolves first (with none in flight,
  // it waits for `wake` alone). One that failed throws as pushAndPull does,
  // and abandons the others (abandonPushAndPulls) when it is its calls'
  // failure.
  struct PushAndPullEnd {
    size_t id = 0;
    int64_t step = 0;
  };
  std::optional<PushAndPullEnd> nextPushAndPull(kj::Promise<void> wake);
  size_t pushAndPullsInFlight() const { return overlapping_.size(); }
  // Gives up the push+pulls in flight: their calls are cancelled (replies
  // are no longer written into their parameters), and a gradient may have
  // reached some chunks and not others.
  void abandonPushAndPulls();

  // Chief: parameters and optimizer slots of every shard into `state`, for a
  // checkpoint; state's global step becomes shard 0's. In sync training
  // every shard is held at one step while it is read (holdAt), so that the
  // checkpoint holds every variable at that step, also while backup
  // workers go on training: the highest step a chunk holds when the reads
  // begin; a shard behind is waited for (holdWaitSeconds()). A ps that
  // lifted its hold under the reads (this process stopped or starved: no
  // call for ServedShard::kHoldSilenceSeconds, or kMaxHoldSeconds in all)
  // has every shard held and read once more.
  // Not once a shard said it is stopping: it applies nothing more, and
  // closes its connections soon. Chunks that differ even so (a shard that
  // stopped, a worker stopped or lost mid-push) are logged as a warning.
  void readState(ModelState& state);
  // How long a sync checkpoint waits for a shard to reach the step the
  // others hold: three times as long as this worker's last step took (from
  // one pushAndPull to the next, or of one step slot's push+pulls when they
  // overlap, its state reads left out),
  // kHoldWaitMinSeconds to kHoldWaitMaxSeconds.
  // The shard a step behind lacks gradients that the other workers send
  // as their backward passes finish them (gradient_push: during_backward),
  // or that a worker stopped or lost mid-push never sends; then only the
  // chief's own next gradient may complete the step.
  double holdWaitSeconds() const;
  static constexpr double kHoldWaitMinSeconds = 2.0;
  static constexpr double kHoldWaitMaxSeconds = 30.0;  // well within the ps's kMaxHoldSeconds

  // Chief, stopped (SIGTERM, POST /stop) before the job's end, ahead of its
  // final checkpoint: waits until no other worker is connected to any shard,
  // at most holdWaitSeconds(). Workers stopped with it (systemctl stop of
  // every worker, docker compose stop) each end the step they compute; read
  // before they pushed it, that step would be in no checkpoint. Ends
  // sooner, logged, once a shard's step has moved by more than the number
  // of other workers since the wait began (stopping, each adds one step at
  // most: some train on) and kStopSkewSeconds have passed, and at once when
  // a shard says it is stopping, a status call fails, or every sync step
  // needs this worker's gradient (replicas_to_aggregate is every worker).
  // Logs whom it waits for.
  void waitForOtherWorkersToLeave();
  // Workers stopped together (systemctl stop, docker compose stop) get
  // their signals milliseconds apart, in no set order: one told after the
  // chief ends the steps it computes in between too.
  static constexpr double kStopSkewSeconds = 0.5;

  // Chief: tells every shard that `checkpoint` holds its state, as the last
  // readState() read it (each shard at the lowest step its replies
  // reported) or initialize() wrote it.
  void reportSaved(const std::string& checkpoint);

  // Chief: tells every shard that the job is done.
  void stopAll();

  // Chief, once a ps ended the job under it (JobEnded), or once its run
  // diverged (`diverged`: why, core/error.h's Diverged): tells the shards
  // still serving that the job is done, so that they do not wait for
  // workers forever; as diverged, they and the other workers stop as failed
  // (exit 3), as the chief does. Shards gone or silent are skipped; at most
  // a few seconds.
  // A shard that answers within kStopRemainingSeconds neither way is named
  // in a warning: it may serve on.
  void stopRemaining(const std::string& diverged = "");
  static constexpr double kStopRemainingSeconds = 3.0;

  // Once *stop has been set (SIGTERM, POST /stop), a pull or push+pull still
  // waiting kStopGrace later is abandoned and returns -1, as when the shards
  // stop: it waits for a step that workers stopping too will not finish (a
  // sync step). A call that is merely slow finishes first: the grace counts
  // only while no reply arrives, and the heartbeat gives up a silent ps
  // (kPeerSilenceSeconds). connect(),
  // statuses() and waitUntilReady() give up their waits for peers too.
  static constexpr double kStopGraceSeconds = 1.0;
  void abandonWaitsOnStop(const std::atomic<bool>& stop) { stop_ = &stop; }

  // Each shard's step at the last pull: what the next push is tagged with. A
  // worker with several steps in flight (concurrent steps) keeps each pull's
  // and sets them back before it pushes the gradient computed from that pull.
  const std::vector<int64_t>& shardSteps() const { return shard_steps_; }
  void setShardSteps(std::vector<int64_t> steps) { shard_steps_ = std::move(steps); }

  // The job's last global step, as this worker's spec and flags give it.
  // initialize() tells the shards, whose status tells the other workers
  // (ShardStatusView::last_step). Sync training: pushAndPull sends no
  // gradient to a shard at it (with backup workers, shards may be a step
  // apart when a worker pulls, and such a push would take one past it); it
  // pulls that shard's parameters instead. It does the same for a shard
  // ahead of the lowest step pulled, so that the shards wait for each other
  // and keep one step.
  void setLastStep(int64_t step) { last_step_ = step; }

  // The global step of what the last pull brought, the lowest of the shards'
  // (also when a shard said it is stopping, where pull() returns -1);
  // nullopt when no shard answered with one.
  std::optional<int64_t> lastPulledStep() const;

  // The job's global step as of the last pull, as a checkpoint names it:
  // ps 0's (TensorFlow's global_step lives on ps 0), or the lowest when ps 0
  // holds nothing. Async shards count their own pushes, so it may be a few
  // steps past lastPulledStep(); the chief labels its final evaluation with
  // it, the step of its final checkpoint.
  std::optional<int64_t> lastPulledJobStep() const;

  // Sync: a shard whose chunks the last pull() found at two steps, one it
  // had applied to some of its chunks and not yet to the others (their
  // gradients still to come, or the step completed between two replies).
  // Parameters pulled then are of both steps: a worker that starts, or
  // starts again after its earlier process pushed part of a step, computes
  // its first gradient from them. Never in async training, whose chunks
  // are all at the shard's step.
  struct HalfAppliedStep {
    int shard = 0;
    int64_t step = 0;  // the step the other chunks hold: step + 1
  };
  const std::optional<HalfAppliedStep>& halfAppliedStep() const { return half_applied_; }

  // How many of this worker's pushes had chunks dropped as stale (a sync
  // step the ps had completed without them).
  int64_t gradientsDropped() const { return dropped_; }

  // What the last pull() or pushAndPull() moved: tensor bytes, and the time
  // from its first request to the last reply of each kind (a sync pull's
  // includes waiting for the step). For the node's metrics.
  struct Transfer {
    int64_t push_bytes = 0, pull_bytes = 0;
    double push_seconds = 0.0, pull_seconds = 0.0;
  };
  const Transfer& lastTransfer() const { return last_transfer_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  struct PushAndPull;
  // A push+pull's calls, made ready to run: pushAndPull's and
  // startPushAndPull's. `last_start`: when the push+pull before it in the
  // same step slot started, which times the step (holdWaitSeconds); now
  // this one's.
  std::unique_ptr<PushAndPull> preparePushAndPull(
      const FlatBuffer& gradients, int64_t min_step, std::vector<int64_t> tags,
      FlatBuffer& parameters, GradientGate* gate,
      std::chrono::steady_clock::time_point& last_start);
  // What a push+pull returns once its calls ended (`done`: not given up on a stop).
  int64_t endPushAndPull(PushAndPull& p, bool done);
  // An overlapping push+pull's calls ended, with `failure` when they failed.
  void ended(PushAndPull& p, kj::Maybe<kj::Exception> failure);
  // connect()'s work for one shard, its waits counted from `start`.
  Outcome connectShard(size_t shard, std::chrono::steady_clock::time_point start,
                       double timeout_seconds, const JobOverCheck& job_over);
  // What a pull or push+pull returns once its replies are in: the job's
  // step, the lowest the shards answered with; -1 once a shard said it is
  // stopping (logged once, or JobDiverged thrown: throwIfChiefDiverged).
  int64_t jobStep();
  // Throws JobDiverged when shard `index`, which said it is stopping, was
  // stopped by a chief whose run diverged; a shard that does not say
  // (gone already, silent, a stop asked here) is taken as the job's plain
  // end.
  void throwIfChiefDiverged(int index);
  // readState's hold: every shard that holds a chunk at the step returned.
  // `waited_out`: some shard did not get there within holdWaitSeconds().
  int64_t holdAtOneStep(bool& waited_out);
  // readState's reads: every chunk and slot of every shard into `state`,
  // and the lowest and highest step each shard's replies reported
  // (INT64_MAX and -1 for a shard that holds nothing); `holding`: lifts
  // the holds when a read fails.
  void readChunks(ModelState& state, bool holding, std::vector<int64_t>& lowest,
                  std::vector<int64_t>& highest);
  // Lifts the holds; a shard that does not answer within `seconds` lifts
  // its hold as its connection closes, or when the hold expires.
  void releaseHolds(double seconds);

  int64_t dropped_ = 0;
  std::vector<int64_t> shard_steps_;  // each shard's step at the last pull
  std::optional<HalfAppliedStep> half_applied_;  // at the last pull()
  std::optional<int64_t> last_step_;  // setLastStep's
  // Each shard's step in the state last read from it or written to it.
  std::vector<int64_t> state_steps_;
  std::optional<int> stopping_shard_;  // a shard whose reply said it is stopping
  bool stop_logged_ = false;
  const std::atomic<bool>* stop_ = nullptr;
  Transfer last_transfer_;
  std::vector<std::unique_ptr<PushAndPull>> overlapping_;  // startPushAndPull's, not yet ended
  kj::Own<kj::PromiseFulfiller<void>> one_ended_;          // while nextPushAndPull waits
  std::chrono::steady_clock::time_point last_push_start_{};
  std::vector<std::chrono::steady_clock::time_point> slot_push_starts_;  // startPushAndPull's
  // Between the last two pushAndPull calls, less the state reads between
  // them: a checkpoint's wait must not lengthen the next one's.
  double step_seconds_ = 0.0;
  double read_seconds_ = 0.0;  // in readState since the last pushAndPull
};

}  // namespace traind
