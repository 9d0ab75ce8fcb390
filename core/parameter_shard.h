// One parameter server's shard: its slice of the parameters, their
// optimizer slots, the global step, and the rules that decide what a
// gradient chunk does to them (design §5). No sockets here: rpc/ wraps it.
//
// async: each chunk is applied as it arrives. A worker's push is complete
//   when all its chunks came; each complete push advances the global step by
//   one and the worker's clock. With max_staleness K > 0 (bounded
//   staleness), a worker whose clock is more than K ahead of the slowest
//   connected worker's may not pull until that one catches up.
// sync (SyncReplicasOptimizer): each chunk takes the first
//   replicas_to_aggregate gradients computed at the current global step,
//   averages them and applies once, like TensorFlow's per-variable
//   accumulators; later or older ones are dropped as stale. An applied
//   chunk holds its values of the next step (chunkStep), which a reply may
//   send at once; when every chunk has been applied the global step
//   advances. A partial sum exists only while a chunk has gradients pending:
//   a chunk-sized buffer from a pool that grows to the most chunks pending at
//   once (a few per worker, as many as its calls in flight), not a
//   shard-sized one. While the chief reads the shards for a checkpoint it
//   holds them at one step (holdAt): a chunk whose gradients would take it
//   past that step keeps their sum until the hold is lifted, so that the
//   checkpoint holds every variable at one step, with backup workers too.
//
// Each chunk's parameters are copy-on-write, so that a pull reply can send
// them without a copy: pinChunk() hands out the chunk's values as they are,
// and while any such handle lives an update writes the chunk's next values
// into another buffer instead of over them; they go back over the home
// values once no handle holds either.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "core/cluster_spec.h"
#include "core/gradient_staleness.h"
#include "core/layer_graph.h"
#include "core/optimizer.h"
#include "core/placement.h"

namespace traind {

// A peer broke the protocol (unknown chunk, wrong length, a step from the
// future, a duplicate): the call fails with this message and nothing changes.
class ProtocolError : public std::runtime_error {
 public:
  explicit ProtocolError(const std::string& message) : std::runtime_error(message) {}
};

// Whether `failure`, a ps's answer to a push, is the ProtocolError of a
// gradient that is not finite ("ps 0: worker 1 pushed a gradient of step 812
// that is not finite: ..."), from which the worker that pushed it reads
// that its model diverged. Its words are part of the wire contract: a ps of
// this wire version says them so.
bool isGradientNotFinite(std::string_view failure);

// Consecutive chunks of a shard: [first, first + count).
struct ChunkRun {
  size_t first = 0;
  size_t count = 1;
};

class ParameterShard {
 public:
  // The most a chunk holds: 1 MiB of float32, what the workers use
  // (measured: smaller chunks cost fashion_mlp's async job 10%).
  static constexpr int64_t kChunkFloats = 256 * 1024;

  // `max_chunk_floats` must be what the workers cut the shard with (tests
  // take small chunks to see several of a small model).
  ParameterShard(const ModelSpec& spec, const LayerGraph& graph, const ClusterSpec& cluster,
                 int shard_index, int64_t max_chunk_floats = kChunkFloats);
  // Pins reach it by address.
  ParameterShard(const ParameterShard&) = delete;
  ParameterShard& operator=(const ParameterShard&) = delete;

  int shardIndex() const { return shard_index_; }
  const ClusterSpec& cluster() const { return cluster_; }
  int64_t size() const { return layout_.totalSize(); }
  // A worker's flat buffers' size: the whole model's, which chunks'
  // layout_offset index.
  int64_t modelSize() const { return model_size_; }
  const ShardPlan& plan() const { return plan_; }
  const std::vector<ShardChunk>& chunks() const { return chunks_; }
  // Slots a checkpoint holds besides the parameters (Optimizer::slotNames).
  const std::vector<std::string>& slotNames() const { return optimizer_.slotNames(); }

  bool ready() const { return ready_; }
  int64_t globalStep() const { return global_step_; }
  // The step whose parameters chunk `chunk` holds: the global step, or in
  // sync mode the next one once the chunk has been applied for this step.
  int64_t chunkStep(size_t chunk) const;
  int64_t staleDropped() const { return stale_dropped_; }
  // Async: how stale the whole pushes applied so far were (the step a
  // push's last chunk is tagged with against the global step it completes).
  const GradientStaleness& staleness() const { return staleness_; }
  // The highest step a chunk holds the values of: the global step, or in
  // sync mode the next one once some chunk has been applied for this step.
  int64_t highestChunkStep() const;

  // Sync, the chief's checkpoint: from now on no chunk is applied past
  // global step `step` (its step's gradients are taken and summed, and the
  // one that completes the sum leaves it pending); a higher step applies
  // the pending sums it allows, at once. The hold is the shards' cut: every
  // chunk, on every shard, stays at one step while the chief reads them.
  // Returns whether some chunk was applied. ProtocolError in async mode,
  // before the shard is ready, and for a step below highestChunkStep()
  // (values the shard no longer has).
  bool holdAt(int64_t step);
  // Lifts the hold and applies the sums it kept: returns whether it applied
  // any. Nothing to lift is no error (the chief's connection may close
  // after it lifted its hold).
  bool releaseHold();
  std::optional<int64_t> heldAt() const { return hold_; }
  // Some chunk's sum is complete and waits for the hold to be lifted.
  bool holdsSums() const {
    return std::any_of(held_sums_.begin(), held_sums_.end(), [](char h) { return h != 0; });
  }
  // The ps lifts a hold that has stood this long: a chief stopped (SIGSTOP)
  // or hung while it reads the shards must not hold a job that backup
  // workers keep going. The chief's reads move about 4 GiB/s over loopback
  // here (docs/checkpoints.md).
  static constexpr double kMaxHoldSeconds = 60.0;

  // The chief's initialisation: slot 0 the parameters, k + 1 optimizer slot k.
  // The shard is not ready() from the first until markReady.
  void initialize(uint32_t slot, int64_t offset, std::span<const float> values);
  void markReady(int64_t global_step);

  // Returns false when the chunk was dropped as stale. Throws the
  // ProtocolError of checkPush, and then changes nothing.
  // A push that applies the chunk (async, or sync's last gradient of the
  // step) raises chunkChanges(chunk) by one, and then, when `values_out` is
  // not null, has written the chunk's new values there too (gradient.size()
  // floats; the gaps between pieces are left as they are) as it applied
  // them: a worker's shared memory region. A shard of kStreamingCopyBytes
  // or more writes them around its core's caches (UpdateCopyOut). A
  // push that does not apply it changes neither.
  bool push(uint32_t worker, int64_t step, int64_t offset, std::span<const float> gradient,
            float* values_out = nullptr);
  // A shard of this many bytes of parameters or more writes the values it
  // copies into a worker's region around its core's caches; a smaller one,
  // whose values stay in them, with ordinary stores. Measured on a 2-core
  // AMD EPYC with 1 MiB of L2 per core (docs/benchmarks.md, the 2026-11-24
  // 01:07 block): the async job of a 5.4 MiB shard gained 0.8-7.3% from
  // those stores, of a 1 MiB shard lost 4.7%; a 2.3 MiB shard was even.
  static constexpr int64_t kStreamingCopyBytes = int64_t(4) << 20;
  bool copiesAroundCaches() const { return size() * int64_t(sizeof(float)) >= kStreamingCopyBytes; }
  // Throws the ProtocolError that a push of `gradient` as chunk `chunk`
  // would throw, and changes nothing: a call of several chunks checks them
  // all before the first is applied. A gradient with a float that is not
  // finite (NaN or infinite) in a variable is refused, naming it: applied,
  // it would leave the parameters NaN for every worker. The gaps between
  // pieces are not read. The check reads every gradient once more: 0.01 /
  // 0.05 / 0.6 ms more ps work for a push of 1 / 4 / 16 MiB on a 2-core
  // AMD EPYC (docs/benchmarks.md).
  void checkPush(uint32_t worker, int64_t step, size_t chunk,
                 std::span<const float> gradient) const;
  // push() of chunk `chunk` once checkPush has passed it: a call of several
  // chunks checks them all first, then applies each without checking it
  // again.
  bool pushChecked(uint32_t worker, int64_t step, size_t chunk, std::span<const float> gradient,
                   float* values_out = nullptr);
  // Counts the changes of chunk `chunk`'s parameters (updates and the
  // chief's initialisation): equal counts, equal values.
  uint64_t chunkChanges(size_t chunk) const { return chunk_changes_.at(chunk); }

  // Connected workers, for bounded staleness. A worker that (re)joins starts
  // at the slowest connected worker's clock (with none connected, at the
  // highest clock of any), so it never holds the others back. A worker that left (its last
  // connection closed) leaves behind no unfinished push: its next counts from its first chunk; in
  // sync, what it pushed of the open step stays in the step's sums, and what it pushes of that step
  // again (restarted) is dropped as stale.
  void workerJoined(uint32_t worker);
  void workerLeft(uint32_t worker);
  // False while `worker` is more than max_staleness pushes ahead of the
  // slowest connected worker (async with max_staleness > 0 only).
  bool withinStaleness(uint32_t worker) const;
  // Async with max_staleness > 0: the connected workers more than
  // max_staleness pushes ahead of the slowest (their pulls wait), and the
  // slowest connected workers, whose pushes they wait for. Both empty while
  // no worker waits: the ps names them when the global step stands still.
  struct StalenessHold {
    std::vector<uint32_t> held;
    std::vector<uint32_t> slowest;
  };
  StalenessHold stalenessHold() const;

  // Sync: the workers, in order, whose gradient of some chunk the current
  // step still lacks (a chunk that has its replicas_to_aggregate gradients
  // lacks none): the ps names them when a step stands still. Empty in
  // async mode.
  std::vector<uint32_t> workersStepWaitsFor() const;
  // Sync: some gradient of the current step has come. False while the
  // workers wait for something else (another ps's step, the chief).
  bool stepStarted() const;
  bool workerConnected(uint32_t worker) const {
    return worker < connections_.size() && connections_[worker] > 0;
  }
  bool anyWorkerConnected() const { return workersConnected() > 0; }
  // The tasks of the workers connected, in order.
  std::vector<uint32_t> connectedWorkers() const;
  int workersConnected() const {
    return int(
        std::count_if(connections_.begin(), connections_.end(), [](int c) { return c > 0; }));
  }

  // Copies [offset, offset + out.size()) of slot 0 (parameters) or k + 1.
  void read(uint32_t slot, int64_t offset, std::span<float> out) const;
  // Copies chunk `chunk`'s parameters to `out` (chunks()[chunk].size
  // floats) as a push that applies it writes them: around the core's caches
  // for a shard of kStreamingCopyBytes or more. For a reply into a
  // worker's region that its push did not write (a pull, a sync step that
  // another worker's push applied).
  void copyChunkOut(size_t chunk, float* out) const;

  // The index of the chunk at `offset` of `size` floats; throws ProtocolError
  // when there is none.
  size_t chunkAt(int64_t offset, int64_t size) const;
  // The `count` consecutive chunks from the one at `offset`, holding `floats`
  // in all; throws ProtocolError when there are none such.
  ChunkRun chunkRun(int64_t offset, int64_t floats, uint64_t count) const;

  // The parameters of chunk `chunk` (chunks()[chunk].size floats, 8-byte
  // aligned) as they are now, unchanged until the last copy of the handle is
  // gone, however many updates come meanwhile. Drop handles on the thread
  // that uses the shard: the last one of a version may move the chunk's
  // values back home.
  std::shared_ptr<const float> pinChunk(size_t chunk);
  // Chunks whose values live in a buffer of their own because an update
  // came while a handle held the home values; each goes back home (and its
  // buffer is freed) as soon as no handle holds either version.
  size_t chunksAwayFromHome() const;

 private:
  // One buffer of a chunk's parameters: its place in parameters_ (home), or
  // a buffer of its own while readers hold the home values.
  struct ChunkVersion {
    float* data = nullptr;
    std::unique_ptr<float, void (*)(void*)> own{nullptr, std::free};  // null for home
  };
  struct ChunkValues {
    std::shared_ptr<ChunkVersion> home;
    std::shared_ptr<ChunkVersion> current;
  };

  FlatBuffer& buffer(uint32_t slot);
  const FlatBuffer& buffer(uint32_t slot) const;
  // The chunk's values, for writing: in place when nobody holds them, else a
  // copy in a free buffer, which becomes the current version. The one part
  // of an update that can fail (std::bad_alloc): taken before anything else
  // changes, so that a push out of memory leaves the shard as it was.
  float* writableChunk(size_t chunk);
  // A chunk away from home whose versions nobody holds any more goes back.
  void settleChunk(size_t chunk);
  // `values`: writableChunk(chunk)'s.
  void applyChunk(size_t chunk, float* values, const float* gradient, int64_t update,
                  float* values_out);
  // Sync: averages and applies a chunk's complete sum, and advances the
  // global step once every chunk has been. Changes nothing when it throws.
  void applySum(size_t chunk, float* values_out);
  // Sync: applies the sums the hold kept that it now allows.
  bool applyHeldSums();
  // Sync: a gradient of `step` for `chunk` comes too late to count.
  bool staleInSync(int64_t step, size_t chunk) const;

  const ModelSpec& spec_;
  ClusterSpec cluster_;
  int shard_index_;
  ShardPlan plan_;
  std::vector<VariableSpec> variables_;
  VariableLayout layout_;
  std::vector<ShardChunk> chunks_;
  int64_t model_size_;
  int64_t max_chunk_floats_ = 0;      // of chunks_: a partial sum's size
  FlatBuffer parameters_;              // home of every chunk's values
  std::vector<ChunkValues> values_;    // per chunk
  std::vector<uint64_t> chunk_changes_;  // per chunk, see chunkChanges
  Optimizer optimizer_;
  bool ready_ = false;
  int64_t global_step_ = 0;
  int64_t stale_dropped_ = 0;

  // async
  GradientStaleness staleness_;
  std::vector<int64_t> chunk_updates_;        // Adam's t, per chunk
  std::vector<int64_t> chunks_from_worker_;   // chunks of the current push, per worker
  std::vector<int64_t> clock_;                // complete pushes, per worker
  std::vector<int> connections_;              // per worker (a worker may reconnect)
  std::vector<uint32_t> sessions_;            // per worker: its joins from 0 connections

  // sync
  // A buffer of max_chunk_floats_ for a partial sum, from the pool.
  std::unique_ptr<float[]> takeSum();

  std::vector<std::unique_ptr<float[]>> sums_;       // per chunk, while gradients are pending
  std::vector<std::unique_ptr<float[]>> free_sums_;  // the pool
  std::vector<int> contributions_;            // per chunk, this step
  std::vector<std::vector<int64_t>> contributed_step_;      // per chunk, per worker
  std::vector<std::vector<uint32_t>> contributed_session_;  // the sessions_ it came in
  size_t chunks_applied_ = 0;
  std::optional<int64_t> hold_;  // holdAt's step
  std::vector<char> held_sums_;  // per chunk: its sum is complete, kept by the hold

  // What a pin's release reaches the shard through; declared last, so gone
  // first: a pin that outlives the shard finds it gone.
  std::shared_ptr<ParameterShard*> self_ = std::make_shared<ParameterShard*>(this);
};

}  // namespace traind
