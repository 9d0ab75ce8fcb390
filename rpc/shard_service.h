// The ParameterShard interface of rpc/traind.capnp, served from a
// ParameterShard on the ps's event-loop thread.
//
// ServedShard is what every connection shares: the shard, the pulls waiting
// for a step (sync) or for the slowest worker (bounded staleness), the stop
// signal. ShardService is one connection's view of it: it knows which
// worker is on the other end (from hello) and tells the shard when that
// worker goes, and maps the worker's shared region when it offers one
// (rpc/shared_region.h). Every call is checked by ParameterShard before it touches
// state and fails with the reason.
#pragma once

#include <kj/async.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "core/parameter_shard.h"
#include "rpc/pinning_stream.h"
#include "rpc/push_counts.h"
#include "rpc/shared_region.h"
#include "rpc/traind.capnp.h"

namespace traind {

class ShardService;

class ServedShard {
 public:
  // `shared_memory`: whether workers on this host may move tensors through
  // shared memory (the cluster spec's transport.shared_memory).
  // `identity`: the ps's own spec's, which every worker's must equal.
  ServedShard(ParameterShard& shard, SpecIdentity identity, bool shared_memory);

  // A new capability for one connection; its pull replies pin parameter
  // chunks on `connection` until they are written.
  wire::ParameterShard::Client newSession(kj::Own<PinningStream> connection);

  // Resolves when the job is stopping.
  kj::Promise<void> onStop() { return stop_promise_.addBranch(); }
  bool stopping() const { return stopping_; }

  // What a stop() call from the chief does, also for a stop asked of the ps
  // itself (SIGTERM, POST /stop): waiting pulls are answered and every later
  // one says the shards are stopping, so the workers end as at the job's end.
  // `by` names who asked, for the log. `diverged`: the chief's words when
  // its run diverged, which the shard's status passes on to the workers.
  void beginStopping(const std::string& by, const std::string& diverged = "");

  // Why the chief stopped the job as diverged (beginStopping); empty when
  // the job did not end so.
  const std::string& divergence() const { return diverged_; }

  // Sync training, a stop asked of this ps alone (SIGTERM, POST /stop)
  // while the workers compute a step: the shard still takes that step's
  // gradients, `step` (its global step + 1), and begins stopping once it
  // has applied them. The other ps tasks take them too, so the job's last
  // checkpoint holds every shard at one step; stopped at once, this shard
  // would stay a step behind them. Later steps are not applied. The caller
  // gives up waiting (beginStopping) when the step does not come. With
  // backup workers shards may be a step apart already; this keeps the
  // stopped one from falling a step behind.
  void stopAfterStep(int64_t step, const std::string& by);

  // Lifts the chief's hold (ParameterShard::holdAt, the holdAt call) once
  // it has stood ParameterShard::kMaxHoldSeconds, or once the chief has
  // made no call on its connection, and no data has moved on it, for
  // kHoldSilenceSeconds (ShardService::secondsSilent), saying so.
  // Called about every second on the ps's event-loop thread.
  void expireHold();
  // While the chief holds the shards its waits ask each for its status
  // every ShardedClient::kHeartbeatSeconds, and its reads follow one
  // another: this long without a call, it is stopped or hung, and the
  // other workers need not wait the whole kMaxHoldSeconds for it (it reads
  // again, holding anew, when it sees the hold lifted).
  static constexpr double kHoldSilenceSeconds = 5.0;

  // The pushes of every connection so far.
  const PushCounts& pushCounts() const { return push_counts_; }

  // The chief's last word that a checkpoint holds the shard's state
  // (saved): its path on the chief's host and the shard's global step in
  // it. `count` goes up by one with each.
  struct SavedCheckpoint {
    std::string path;
    int64_t global_step = 0;
    uint64_t count = 0;
  };
  const std::optional<SavedCheckpoint>& lastSaved() const { return last_saved_; }

  // The chief that made the shard ready (markReady): the global step it
  // started the shard at (restored or fresh) and its checkpoint directory
  // (empty: it writes none). nullopt before.
  struct Initialised {
    int64_t global_step = 0;
    std::string checkpoint_dir;
  };
  const std::optional<Initialised>& initialised() const { return initialised_; }

 private:
  friend class ShardService;

  struct PullWaiter {
    int64_t min_step;
    std::optional<uint32_t> worker;
    std::optional<ChunkRun> chunks;
    kj::Own<kj::PromiseFulfiller<void>> fulfiller;
  };

  // A reply for some chunks waits for each one's step
  // (ParameterShard::chunkStep), one without chunks for the global step.
  bool pullMayProceed(int64_t min_step, std::optional<uint32_t> worker,
                      std::optional<ChunkRun> chunks) const;
  // Answers the pulls that may proceed now (all of them when stopping).
  void releasePulls();
  // After gradients were applied: begins a stop that waited for this step
  // (stopAfterStep) and answers the pulls that may proceed now.
  void applied();
  // Lifts the chief's hold, applying the sums it kept.
  void liftHold();
  // Forgets the waits of calls that were cancelled (their worker gave up or
  // went), so that the list holds live calls only.
  void dropCancelledWaits();

  ParameterShard& shard_;
  SpecIdentity identity_;
  std::string training_rule_;  // of the shard's cluster spec
  // The chief that initialised the shard: a chief whose checkpoint dir is
  // another is not this job's.
  std::optional<Initialised> initialised_;
  // The training set every worker must read: that of the chief that
  // initialised the shard (a chief restarted with another is refused).
  std::optional<std::string> chief_training_set_;
  int64_t job_last_step_ = 0;  // as that chief said; 0 before it did
  bool shared_memory_;
  std::vector<PullWaiter> waiting_pulls_;
  bool stopping_ = false;
  std::string diverged_;                    // beginStopping's
  std::optional<int64_t> stop_after_step_;  // stopAfterStep's
  std::string stop_after_by_;
  PushCounts push_counts_;
  std::optional<SavedCheckpoint> last_saved_;
  const ShardService* hold_owner_ = nullptr;  // the connection whose chief holds the shard
  std::chrono::steady_clock::time_point hold_since_;
  kj::ForkedPromise<void> stop_promise_;
  kj::Own<kj::PromiseFulfiller<void>> stop_fulfiller_;
};

class ShardService final : public wire::ParameterShard::Server {
 public:
  ShardService(ServedShard& served, kj::Own<PinningStream> connection)
      : served_(served), connection_(kj::mv(connection)) {}
  ~ShardService();

  // Seconds since the peer last called status, holdAt, readState or
  // releaseHold (what a chief holding the shard keeps calling:
  // ServedShard::expireHold), or since data last moved on the connection
  // when that was later: on a slow link a chief's next call waits for the
  // answers before it, whose bytes still moving say it reads them.
  double secondsSilent() const;

 protected:
  kj::Promise<void> hello(HelloContext context) override;
  kj::Promise<void> status(StatusContext context) override;
  kj::Promise<void> initialize(InitializeContext context) override;
  kj::Promise<void> markReady(MarkReadyContext context) override;
  kj::Promise<void> pushAndPull(PushAndPullContext context) override;
  kj::Promise<void> pull(PullContext context) override;
  kj::Promise<void> readState(ReadStateContext context) override;
  kj::Promise<void> stop(StopContext context) override;
  kj::Promise<void> saved(SavedContext context) override;
  kj::Promise<void> holdAt(HoldAtContext context) override;
  kj::Promise<void> releaseHold(ReleaseHoldContext context) override;

 private:
  void fillStatus(wire::ShardStatus::Builder status) const;
  // The worker that said hello on this connection; ProtocolError naming
  // `call` when none has. Every call but hello and status needs one.
  uint32_t connectedWorker(const char* call) const;
  // ProtocolError when this worker's training set is not the chief's (a
  // worker that said hello before the chief did is held to it here).
  void checkTrainingSet() const;
  // ProtocolError unless the chief (worker 0) said hello: initialize,
  // markReady, readState, stop, saved, holdAt and releaseHold are its calls.
  void checkChief(const char* call) const;
  // Runs `reply` once a pull at min_step may proceed: now, or when the
  // step (of every chunk of `chunks`, else the global one) or the slowest
  // worker allows (ServedShard::releasePulls).
  kj::Promise<void> whenPullMayProceed(int64_t min_step, std::optional<ChunkRun> chunks,
                                       kj::Function<void()> reply);
  // The same for a shard known to be initialised, or waited for again.
  kj::Promise<void> replyWhenPullMayProceed(int64_t min_step, std::optional<ChunkRun> chunks,
                                            kj::Function<void()> reply);
  // Sets `data` to reference chunk `chunk`'s parameters as they are now,
  // pinned until the reply is written.
  template <typename Results>
  void attachChunk(Results results, size_t chunk);
  // For a call through the shared region: copies the parameters of
  // `chunks` into the worker's parameter buffer there, each chunk unless
  // it holds them already (`region_holds[i]`, when given, is the
  // chunkChanges count of the values the push wrote there).
  void writeToRegion(ChunkRun chunks, const std::vector<std::optional<uint64_t>>& region_holds);
  // Maps the region a hello offers, or says why not.
  void attachRegion(wire::SharedRegionOffer::Reader offer,
                    wire::ParameterShard::HelloResults::Builder results);
  // The region a call through it uses; ProtocolError without one.
  SharedRegion& region();
  ParameterShard& shard() { return served_.shard_; }

  // Refuses (ProtocolError) a wait no worker asks for: a step beyond the
  // next, or more than kMaxWaitingCalls waiting on this connection (a
  // worker has at most a few per shard), so a lying peer cannot make the ps
  // hold calls without bound.
  void checkWait(int64_t min_step) const;

  static constexpr int kMaxWaitingCalls = 256;
  // PATH_MAX: the longest path the chief's system can name.
  static constexpr size_t kMaxCheckpointPathBytes = 4096;

  ServedShard& served_;
  std::chrono::steady_clock::time_point last_call_ = std::chrono::steady_clock::now();
  // Outlives the connection while a call that waited still answers.
  kj::Own<PinningStream> connection_;
  std::optional<uint32_t> worker_;  // set by hello
  std::string checkpoint_dir_;      // the chief's, from its hello
  std::string training_set_;        // as its hello said (empty: none said)
  std::optional<SharedRegion> region_;  // mapped at hello
  int waiting_calls_ = 0;
};

}  // namespace traind
