#include "core/parameter_shard.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/learning_rate.h"
#include "core/streaming_store.h"

namespace traind {
namespace {

// The words of a push refused as not finite (isGradientNotFinite).
constexpr std::string_view kGradientOfStep = "pushed a gradient of step";
constexpr std::string_view kNotFinite = " that is not finite:";

// The first float of [begin, end) that is NaN or infinite (every exponent
// bit set), or `end`. A block's loop has no early exit, so that the
// compiler vectorises it; only a block with such a float is searched again.
// Every push is read once more for it: 22 us a MiB from L2 with SSE2 here,
// 15 with AVX2, which a CPU that has it runs. Checked as each block is
// applied instead, the ps's work for a push grew twice as much, and a
// refused push would have been applied in part.
// ThreadSanitizer instruments the resolver that picks the clone, which the
// dynamic loader runs before the sanitizer's runtime is up: a TSan build
// keeps the SSE2 loop alone.
#if defined(__SANITIZE_THREAD__)
#define TRAIND_AVX2_CLONE
#else
#define TRAIND_AVX2_CLONE __attribute__((target_clones("avx2", "default")))
#endif
TRAIND_AVX2_CLONE const float* firstNotFinite(const float* begin, const float* end) {
  constexpr ptrdiff_t kBlock = 1024;
  constexpr uint32_t kExponent = 0x7f800000u;
  for (const float* block = begin; block < end; block += std::min(kBlock, end - block)) {
    const float* block_end = block + std::min(kBlock, end - block);
    uint32_t not_finite = 0;
    for (const float* x = block; x < block_end; ++x)
      not_finite |= (~std::bit_cast<uint32_t>(*x) & kExponent) ? 0u : 1u;
    if (not_finite)
      return std::find_if(block, block_end, [](float x) { return !std::isfinite(x); });
  }
  return end;
}
#undef TRAIND_AVX2_CLONE

}  // namespace

ParameterShard::ParameterShard(const ModelSpec& spec, const LayerGraph& graph,
                               const ClusterSpec& cluster, int shard_index,
                               int64_t max_chunk_floats)
    : spec_(spec),
      cluster_(cluster),
      shard_index_(shard_index),
      plan_(placeVariables(VariableLayout(graph.variables), int(cluster.ps.size()))
                .shards[size_t(shard_index)]),
      variables_(shardVariables(graph, VariableLayout(graph.variables), plan_)),
      layout_(variables_),
      chunks_(transferChunks(graph, plan_, max_chunk_floats)),
      model_size_(VariableLayout(graph.variables).totalSize()),
      parameters_(layout_.totalSize()),
      optimizer_(spec.optimizer, layout_) {
  for (const ShardChunk& c : chunks_) {
    max_chunk_floats_ = std::max(max_chunk_floats_, c.size);
    auto home = std::make_shared<ChunkVersion>();
    home->data = parameters_.data() + c.shard_offset;
    values_.push_back({home, home});
  }
  chunk_changes_.assign(chunks_.size(), 0);
  const size_t workers = cluster.worker.size();
  chunk_updates_.assign(chunks_.size(), 0);
  chunks_from_worker_.assign(workers, 0);
  clock_.assign(workers, 0);
  connections_.assign(workers, 0);
  sessions_.assign(workers, 0);
  if (cluster.mode == TrainingMode::Sync) {
    sums_.resize(chunks_.size());
    contributions_.assign(chunks_.size(), 0);
    held_sums_.assign(chunks_.size(), 0);
    contributed_step_.assign(chunks_.size(), std::vector<int64_t>(workers, -1));
    contributed_session_.assign(chunks_.size(), std::vector<uint32_t>(workers, 0));
  }
}

size_t ParameterShard::chunkAt(int64_t offset, int64_t size) const {
  return chunkRun(offset, size, 1).first;
}

ChunkRun ParameterShard::chunkRun(int64_t offset, int64_t floats, uint64_t count) const {
  auto it = std::lower_bound(chunks_.begin(), chunks_.end(), offset,
                             [](const ShardChunk& c, int64_t o) { return c.shard_offset < o; });
  if (it == chunks_.end() || it->shard_offset != offset)
    throw ProtocolError(fmt::format("ps {}: no chunk starts at offset {}", shard_index_, offset));
  const size_t first = size_t(it - chunks_.begin());
  if (count == 0 || count > chunks_.size() - first)
    throw ProtocolError(fmt::format("ps {}: {} chunks from offset {}, but the shard has {} from "
                                    "there", shard_index_, count, offset, chunks_.size() - first));
  int64_t held = 0;
  for (size_t i = first; i < first + count; ++i) held += chunks_[i].size;
  if (held != floats)
    throw ProtocolError(
        count == 1 ? fmt::format("ps {}: the chunk at offset {} holds {} floats, got {}",
                                 shard_index_, offset, held, floats)
                   : fmt::format("ps {}: the {} chunks from offset {} hold {} floats, got {}",
                                 shard_index_, count, offset, held, floats));
  return {first, size_t(count)};
}

FlatBuffer& ParameterShard::buffer(uint32_t slot) {
  return const_cast<FlatBuffer&>(static_cast<const ParameterShard&>(*this).buffer(slot));
}

const FlatBuffer& ParameterShard::buffer(uint32_t slot) const {
  if (slot == 0) return parameters_;
  if (slot > optimizer_.slotNames().size())
    throw ProtocolError(fmt::format("ps {}: no slot {} (the optimizer has {})", shard_index_,
                                    slot, optimizer_.slotNames().size()));
  return optimizer_.slot(slot - 1);
}

void ParameterShard::initialize(uint32_t slot, int64_t offset, std::span<const float> values) {
  const size_t chunk = chunkAt(offset, int64_t(values.size()));
  float* target = slot == 0 ? writableChunk(chunk) : buffer(slot).data() + offset;
  // Shards that ran before (a ps restarted beside this one) are not ready
  // while the chief writes them (a refused write changes nothing): a worker
  // would otherwise start from values of two checkpoints, at the step of
  // neither.
  ready_ = false;
  if (slot == 0) ++chunk_changes_[chunk];
  std::memcpy(target, values.data(), values.size_bytes());
}

void ParameterShard::markReady(int64_t global_step) {
  if (global_step < 0 || global_step > kMaxGlobalStep)
    throw ProtocolError(
        fmt::format("ps {}: global step {} is outside [0, 2^53]", shard_index_, global_step));
  global_step_ = global_step;
  std::fill(chunk_updates_.begin(), chunk_updates_.end(), global_step);
  // A chief may restore over shards that ran (a ps restarted beside them):
  // nothing of the steps before counts any more.
  std::fill(chunks_from_worker_.begin(), chunks_from_worker_.end(), 0);
  std::fill(clock_.begin(), clock_.end(), 0);
  chunks_applied_ = 0;
  hold_.reset();
  for (size_t c = 0; c < contributions_.size(); ++c) {
    contributions_[c] = 0;
    held_sums_[c] = 0;
    std::fill(contributed_step_[c].begin(), contributed_step_[c].end(), -1);
    if (sums_[c]) free_sums_.push_back(std::move(sums_[c]));
  }
  ready_ = true;
}

void ParameterShard::read(uint32_t slot, int64_t offset, std::span<float> out) const {
  if (offset < 0 || int64_t(out.size()) > size() || offset > size() - int64_t(out.size()))
    throw ProtocolError(fmt::format("ps {}: {} floats from offset {} are outside the shard's {}",
                                    shard_index_, out.size(), offset, size()));
  std::memcpy(out.data(), buffer(slot).data() + offset, out.size_bytes());
  if (slot != 0) return;
  // Chunks away from home hold their current values elsewhere.
  const int64_t end = offset + int64_t(out.size());
  auto first = std::upper_bound(chunks_.begin(), chunks_.end(), offset,
                                [](int64_t o, const ShardChunk& c) { return o < c.shard_offset; });
  if (first != chunks_.begin()) --first;
  for (auto it = first; it != chunks_.end() && it->shard_offset < end; ++it) {
    const ChunkValues& v = values_[size_t(it - chunks_.begin())];
    if (v.current == v.home) continue;
    const int64_t begin = std::max(offset, it->shard_offset);
    const int64_t stop = std::min(end, it->shard_offset + it->size);
    if (begin < stop)
      std::memcpy(out.data() + (begin - offset), v.current->data + (begin - it->shard_offset),
                  size_t(stop - begin) * sizeof(float));
  }
}

void ParameterShard::copyChunkOut(size_t chunk, float* out) const {
  const float* values = values_.at(chunk).current->data;
  const int64_t count = chunks_[chunk].size;
  if (copiesAroundCaches()) {
    streamingCopy(out, values, count);
    streamingStoreFence();
  } else {
    std::memcpy(out, values, size_t(count) * sizeof(float));
  }
}

std::shared_ptr<const float> ParameterShard::pinChunk(size_t chunk) {
  std::shared_ptr<ChunkVersion> version = values_.at(chunk).current;
  const float* data = version->data;
  // The release lets the chunk go back home at once: waiting for its next
  // update would leave every chunk an update raced away from home, up to a
  // second copy of the shard.
  return std::shared_ptr<const float>(
      data, [version = std::move(version), shard = std::weak_ptr<ParameterShard*>(self_),
             chunk](const float*) mutable {
        version.reset();
        if (const std::shared_ptr<ParameterShard*> alive = shard.lock())
          (*alive)->settleChunk(chunk);
      });
}

void ParameterShard::settleChunk(size_t chunk) {
  ChunkValues& v = values_[chunk];
  // Owners that are not readers: `home`, and `current`.
  if (v.current == v.home || v.home.use_count() > 1 || v.current.use_count() > 1) return;
  std::memcpy(v.home->data, v.current->data, size_t(chunks_[chunk].size) * sizeof(float));
  v.current = v.home;
}

size_t ParameterShard::chunksAwayFromHome() const {
  return size_t(std::count_if(values_.begin(), values_.end(),
                              [](const ChunkValues& v) { return v.current != v.home; }));
}

float* ParameterShard::writableChunk(size_t chunk) {
  ChunkValues& v = values_[chunk];
  const bool at_home = v.current == v.home;
  // Owners that are not readers: `current`, and `home` (the same one at home).
  const bool held = v.current.use_count() > (at_home ? 2 : 1);
  if (at_home && !held) return v.current->data;
  std::shared_ptr<ChunkVersion> next;
  if (!at_home && v.home.use_count() == 1) {
    // Back home as soon as no reader holds the home values, so that a chunk
    // costs memory twice only while a reader holds one of its versions.
    next = v.home;
  } else if (!held) {
    return v.current->data;
  } else {
    const int64_t floats = chunks_[chunk].size;
    const size_t bytes = (size_t(floats) * sizeof(float) + 63) / 64 * 64;
    next = std::make_shared<ChunkVersion>();
    next->own.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    if (!next->own) throw std::bad_alloc();
    next->data = next->own.get();
    // A reply sends up to the next 8-byte boundary: no stale heap bytes there.
    std::memset(next->data + floats, 0, bytes - size_t(floats) * sizeof(float));
  }
  std::memcpy(next->data, v.current->data, size_t(chunks_[chunk].size) * sizeof(float));
  v.current = std::move(next);
  return v.current->data;
}

void ParameterShard::applyChunk(size_t chunk, float* values, const float* gradient, int64_t update,
                                float* values_out) {
  const ShardChunk& c = chunks_[chunk];
  ++chunk_changes_[chunk];
  const float learning_rate = learningRateAt(spec_.learning_rate, global_step_);
  const bool around_caches = copiesAroundCaches();
  // Piece by piece (the shard's variable i is piece i); the gaps between
  // pieces travel with the chunk but hold nothing.
  for (int i = c.first_piece; i < c.first_piece + c.pieces; ++i) {
    const VariablePiece& p = plan_.pieces[size_t(i)];
    const int64_t begin = std::max(p.shard_offset, c.shard_offset);
    const int64_t end = std::min(p.shard_offset + p.size, c.shard_offset + c.size);
    const int64_t at = begin - c.shard_offset;
    optimizer_.applyRange(values + at, size_t(i), begin, end - begin, gradient + at, learning_rate,
                          update, {values_out ? values_out + at : nullptr, around_caches});
  }
}

int64_t ParameterShard::chunkStep(size_t chunk) const {
  if (cluster_.mode != TrainingMode::Sync) return global_step_;
  return contributions_.at(chunk) >= cluster_.replicas_to_aggregate && !held_sums_[chunk]
             ? global_step_ + 1
             : global_step_;
}

int64_t ParameterShard::highestChunkStep() const {
  int64_t highest = global_step_;
  for (size_t c = 0; c < chunks_.size(); ++c) highest = std::max(highest, chunkStep(c));
  return highest;
}

bool ParameterShard::holdAt(int64_t step) {
  if (cluster_.mode != TrainingMode::Sync)
    throw ProtocolError(
        fmt::format("ps {}: a hold at a step in async training: its shards keep "
                    "no common step",
                    shard_index_));
  if (!ready_) throw ProtocolError(fmt::format("ps {}: not initialised yet", shard_index_));
  if (step < highestChunkStep())
    throw ProtocolError(
        fmt::format("ps {}: a hold at global step {}, but a chunk holds step {} "
                    "already",
                    shard_index_, step, highestChunkStep()));
  hold_ = step;
  return applyHeldSums();
}

bool ParameterShard::releaseHold() {
  hold_.reset();
  return applyHeldSums();
}

bool ParameterShard::applyHeldSums() {
  bool applied = false;
  // Kept sums are all of the current step; the last one applied advances it.
  for (size_t c = 0; c < held_sums_.size(); ++c)
    if (held_sums_[c] && (!hold_ || global_step_ + 1 <= *hold_)) {
      applySum(c, nullptr);
      held_sums_[c] = 0;
      applied = true;
    }
  return applied;
}

void ParameterShard::applySum(size_t chunk, float* values_out) {
  float* values = writableChunk(chunk);
  float* sum = sums_[chunk].get();
  const float scale = 1.0f / float(cluster_.replicas_to_aggregate);
  for (int64_t i = 0; i < chunks_[chunk].size; ++i) sum[i] *= scale;
  applyChunk(chunk, values, sum, global_step_ + 1, values_out);
  free_sums_.push_back(std::move(sums_[chunk]));
  if (++chunks_applied_ == chunks_.size()) {
    chunks_applied_ = 0;
    std::fill(contributions_.begin(), contributions_.end(), 0);
    ++global_step_;
  }
}

std::unique_ptr<float[]> ParameterShard::takeSum() {
  if (free_sums_.empty()) return std::unique_ptr<float[]>(new float[size_t(max_chunk_floats_)]);
  std::unique_ptr<float[]> sum = std::move(free_sums_.back());
  free_sums_.pop_back();
  return sum;
}

void ParameterShard::workerJoined(uint32_t worker) {
  if (worker >= clock_.size())
    throw ProtocolError(fmt::format("ps {}: no worker {} in a cluster of {}", shard_index_, worker,
                                    clock_.size()));
  int64_t slowest = -1;
  for (size_t w = 0; w < clock_.size(); ++w)
    if (connections_[w] > 0 && (slowest < 0 || clock_[w] < slowest)) slowest = clock_[w];
  if (connections_[worker]++ > 0) return;
  ++sessions_[worker];
  // With nobody connected, the highest clock: one left behind long ago (a
  // worker that died early) would otherwise be the floor the others,
  // rejoining, wait on until it had caught up.
  clock_[worker] = slowest >= 0 ? std::max(clock_[worker], slowest)
                                : *std::max_element(clock_.begin(), clock_.end());
}

void ParameterShard::workerLeft(uint32_t worker) {
  if (worker >= connections_.size() || connections_[worker] == 0) return;
  // A push the worker left unfinished is no step of its: its next push,
  // once it is back, counts from its first chunk.
  if (--connections_[worker] == 0) chunks_from_worker_[worker] = 0;
}

std::vector<uint32_t> ParameterShard::connectedWorkers() const {
  std::vector<uint32_t> workers;
  for (uint32_t w = 0; w < connections_.size(); ++w)
    if (connections_[w] > 0) workers.push_back(w);
  return workers;
}

std::vector<uint32_t> ParameterShard::workersStepWaitsFor() const {
  std::vector<uint32_t> lacking;
  if (cluster_.mode != TrainingMode::Sync) return lacking;
  for (uint32_t w = 0; w < uint32_t(cluster_.worker.size()); ++w)
    for (size_t c = 0; c < chunks_.size(); ++c)
      if (contributions_[c] < cluster_.replicas_to_aggregate &&
          contributed_step_[c][w] != global_step_) {
        lacking.push_back(w);
        break;
      }
  return lacking;
}

bool ParameterShard::stepStarted() const {
  return std::any_of(contributions_.begin(), contributions_.end(), [](int c) { return c > 0; });
}

bool ParameterShard::withinStaleness(uint32_t worker) const {
  if (cluster_.mode != TrainingMode::Async || cluster_.max_staleness <= 0 ||
      worker >= clock_.size())
    return true;
  for (size_t w = 0; w < clock_.size(); ++w)
    if (connections_[w] > 0 && clock_[worker] - clock_[w] > cluster_.max_staleness) return false;
  return true;
}

ParameterShard::StalenessHold ParameterShard::stalenessHold() const {
  StalenessHold hold;
  for (uint32_t w = 0; w < clock_.size(); ++w)
    if (connections_[w] > 0 && !withinStaleness(w)) hold.held.push_back(w);
  if (hold.held.empty()) return hold;
  int64_t slowest = clock_[hold.held.front()];
  for (size_t w = 0; w < clock_.size(); ++w)
    if (connections_[w] > 0) slowest = std::min(slowest, clock_[w]);
  for (uint32_t w = 0; w < clock_.size(); ++w)
    if (connections_[w] > 0 && clock_[w] == slowest) hold.slowest.push_back(w);
  return hold;
}

void ParameterShard::checkPush(uint32_t worker, int64_t step, size_t chunk,
                               std::span<const float> gradient) const {
  if (!ready_) throw ProtocolError(fmt::format("ps {}: not initialised yet", shard_index_));
  if (worker >= cluster_.worker.size())
    throw ProtocolError(fmt::format("ps {}: no worker {} in a cluster of {}", shard_index_, worker,
                                    cluster_.worker.size()));
  if (step > global_step_)
    throw ProtocolError(fmt::format("ps {}: a gradient of step {} from worker {}, but the global "
                                    "step is only {}", shard_index_, step, worker, global_step_));
  if (step < 0)
    throw ProtocolError(
        fmt::format("ps {}: a gradient of step {} from worker {}: no pull answers a step below 0",
                    shard_index_, step, worker));
  if (cluster_.mode == TrainingMode::Sync && !staleInSync(step, chunk) &&
      contributed_step_[chunk][worker] == step &&
      contributed_session_[chunk][worker] == sessions_[worker])
    throw ProtocolError(
        fmt::format("ps {}: worker {} pushed the chunk at offset {} twice for step {}",
                    shard_index_, worker, chunks_[chunk].shard_offset, step));
  const ShardChunk& c = chunks_[chunk];
  if (int64_t(gradient.size()) != c.size)
    throw ProtocolError(
        fmt::format("ps {}: a gradient of {} floats for the chunk at offset {} of {}", shard_index_,
                    gradient.size(), c.shard_offset, c.size));
  for (int i = c.first_piece; i < c.first_piece + c.pieces; ++i) {
    const VariablePiece& p = plan_.pieces[size_t(i)];
    const int64_t begin = std::max(p.shard_offset, c.shard_offset);
    const int64_t end = std::min(p.shard_offset + p.size, c.shard_offset + c.size);
    const float* first = gradient.data() + (begin - c.shard_offset);
    const float* last = first + (end - begin);
    const float* bad = firstNotFinite(first, last);
    if (bad != last)
      throw ProtocolError(fmt::format(
          "ps {}: worker {} {} {}{} {} at element {} of '{}'; refused, the parameters are left "
          "as they were (the worker's model diverged, or the peer is broken)",
          shard_index_, worker, kGradientOfStep, step, kNotFinite,
          std::isnan(*bad) ? "NaN" : "infinite", begin - p.shard_offset + (bad - first),
          variables_[size_t(i)].name));
  }
}

bool isGradientNotFinite(std::string_view failure) {
  const size_t words = failure.find(kGradientOfStep);
  return words != std::string_view::npos &&
         failure.find(kNotFinite, words + kGradientOfStep.size()) != std::string_view::npos;
}

bool ParameterShard::staleInSync(int64_t step, size_t chunk) const {
  return step < global_step_ || contributions_[chunk] >= cluster_.replicas_to_aggregate;
}

bool ParameterShard::push(uint32_t worker, int64_t step, int64_t offset,
                          std::span<const float> gradient, float* values_out) {
  const size_t chunk = chunkAt(offset, int64_t(gradient.size()));
  checkPush(worker, step, chunk, gradient);
  return pushChecked(worker, step, chunk, gradient, values_out);
}

bool ParameterShard::pushChecked(uint32_t worker, int64_t step, size_t chunk,
                                 std::span<const float> gradient, float* values_out) {
  if (cluster_.mode == TrainingMode::Async) {
    float* values = writableChunk(chunk);
    applyChunk(chunk, values, gradient.data(), ++chunk_updates_[chunk], values_out);
    if (++chunks_from_worker_[worker] == int64_t(chunks_.size())) {
      chunks_from_worker_[worker] = 0;
      ++clock_[worker];
      staleness_.record(global_step_ - step);
      ++global_step_;
    }
    return true;
  }

  // sync: the first replicas_to_aggregate gradients of this step count. A
  // worker that pushed this chunk of this step before it was restarted
  // (checkPush refuses a repeat within one connection) has its gradient in
  // the sum already, where it stays: the new one is a surplus.
  if (staleInSync(step, chunk) || contributed_step_[chunk][worker] == step) {
    ++stale_dropped_;
    return false;
  }
  // What can run out of memory first (the sum's buffer; the chunk's copy
  // when the push completes the sum), so that a push that fails changes
  // nothing and counts when pushed again.
  const bool completes = contributions_[chunk] + 1 == cluster_.replicas_to_aggregate;
  const bool held = hold_ && global_step_ + 1 > *hold_;  // applied when the hold allows
  if (contributions_[chunk] == 0) sums_[chunk] = takeSum();
  if (completes && !held) writableChunk(chunk);
  contributed_step_[chunk][worker] = step;
  contributed_session_[chunk][worker] = sessions_[worker];
  const ShardChunk& c = chunks_[chunk];
  float* sum = sums_[chunk].get();
  if (contributions_[chunk]++ == 0)
    std::memcpy(sum, gradient.data(), gradient.size_bytes());
  else
    for (int64_t i = 0; i < c.size; ++i) sum[i] += gradient[size_t(i)];
  if (completes && held) held_sums_[chunk] = 1;
  if (completes && !held) applySum(chunk, values_out);
  return true;
}

}  // namespace traind
