#include "core/placement.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/crc32c.h"

namespace traind {
namespace {

// A piece's floats as it lies in a shard's buffer, padded to the next
// variable: a deep model's padding is a good part of it.
int64_t alignedSize(const VariablePiece& p) {
  return (p.size + VariableLayout::kVariableAlignment - 1) / VariableLayout::kVariableAlignment *
         VariableLayout::kVariableAlignment;
}

}  // namespace

Placement placeVariables(const VariableLayout& layout, int num_shards) {
  const std::vector<VariableView>& views = layout.views();
  int64_t total = 0;
  for (const VariableView& v : views) total += v.size;
  const int64_t even_share = (total + num_shards - 1) / num_shards;

  std::vector<VariablePiece> pieces;
  for (size_t i = 0; i < views.size(); ++i) {
    const VariableView& v = views[i];
    const int64_t rows = v.shape.empty() ? 1 : v.shape[0];
    const int64_t row_size = rows > 0 ? v.size / rows : 0;
    const int64_t slices = (num_shards > 1 && v.size > even_share && rows >= num_shards)
                               ? num_shards : 1;
    for (int64_t s = 0; s < slices; ++s) {
      VariablePiece p;
      p.layout_index = int(pieces.size());
      p.variable = int(i);
      p.row_begin = rows * s / slices;
      p.row_end = rows * (s + 1) / slices;
      p.layout_offset = v.offset + p.row_begin * row_size;
      p.size = (p.row_end - p.row_begin) * row_size;
      if (v.shape.empty()) p.size = v.size;
      pieces.push_back(p);
    }
  }

  // Small pieces: under 64 KiB, and a small part of a shard's share, so
  // that a run of them can end near any level. On more than
  // kSmallPiecesPerShare shards a variable's row slices can be small too:
  // placed in runs as the others, they still spread the variable's rows.
  const int64_t small_below = std::min(kSmallPieceFloats, even_share / kSmallPiecesPerShare);
  const auto is_small = [&](const VariablePiece& p) { return p.size < small_below; };

  // Big pieces largest first onto the least-loaded shard; ties in layout
  // order, so the answer is the same everywhere. The first goes to ps 0.
  std::vector<size_t> order;
  for (size_t i = 0; i < pieces.size(); ++i)
    if (!is_small(pieces[i])) order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return pieces[a].size > pieces[b].size; });

  Placement placement;
  placement.shards.resize(size_t(num_shards));
  std::vector<int> owner(pieces.size());
  for (size_t i : order) {
    size_t least = 0;
    for (size_t s = 1; s < placement.shards.size(); ++s)
      if (placement.shards[s].size < placement.shards[least].size) least = s;
    owner[i] = int(least);
    placement.shards[least].size += alignedSize(pieces[i]);
  }

  // Small pieces fill the shards up to the level that evens them out, in
  // layout order, a run each: the least-loaded shard (ps 0 when there are
  // no big pieces) takes the first pieces until it nears the level, the
  // next the following ones, and the last below it the rest; the level is
  // taken again for the shards left at each. Each run is few chunks; spread
  // one by one as the big ones, a deep model's layers would alternate
  // between shards, every piece a call of its own.
  int64_t remaining = 0;
  std::vector<size_t> small;
  for (size_t i = 0; i < pieces.size(); ++i)
    if (is_small(pieces[i])) {
      small.push_back(i);
      remaining += alignedSize(pieces[i]);
    }
  std::vector<size_t> by_load(placement.shards.size());
  for (size_t s = 0; s < by_load.size(); ++s) by_load[s] = s;
  std::stable_sort(by_load.begin(), by_load.end(), [&](size_t a, size_t b) {
    return placement.shards[a].size < placement.shards[b].size;
  });
  // How many shards lie below the level L at which the small pieces would
  // even them out: sum over shards of max(0, L - load) = their total. In
  // integers, multiplied out, so that every node's answer is the same
  // (floats of a model and shards: far from int64's range).
  int64_t below = 1;
  for (int64_t loads = placement.shards[by_load[0]].size; below < num_shards; ++below) {
    const int64_t load = placement.shards[by_load[size_t(below)]].size;
    if (load * below >= remaining + loads) break;
    loads += load;
  }
  size_t next = 0;
  for (int64_t k = 0; k < below; ++k) {
    // The level of the shards left, with the pieces left: L = (remaining +
    // loads) / (below - k), held as 2 (below - k) L.
    int64_t loads = 0;
    for (int64_t j = k; j < below; ++j) loads += placement.shards[by_load[size_t(j)]].size;
    const int64_t level_times = 2 * (remaining + loads);
    ShardPlan& shard = placement.shards[by_load[size_t(k)]];
    const bool last = k + 1 == below;
    while (next < small.size()) {
      const int64_t size = alignedSize(pieces[small[next]]);
      // Stops once the piece would take it further past L than it is below.
      if (!last && shard.size > 0 && (2 * shard.size + size) * (below - k) >= level_times) break;
      owner[small[next]] = int(by_load[size_t(k)]);
      shard.size += size;
      remaining -= size;
      ++next;
    }
  }
  for (ShardPlan& shard : placement.shards) shard.size = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    ShardPlan& shard = placement.shards[size_t(owner[i])];
    VariablePiece p = pieces[i];
    p.shard_offset = shard.size;
    shard.size += alignedSize(p);
    shard.pieces.push_back(p);
  }
  return placement;
}

std::vector<int> gradientGroups(const LayerGraph& graph) {
  std::vector<int> groups(graph.variables.size(), 0);
  int group = 0;
  int64_t held = 0;
  for (size_t i = graph.layers.size(); i-- > 0;) {
    if (held >= kGradientGroupFloats) {
      ++group;
      held = 0;
    }
    for (int v : graph.layers[i].variables) {
      groups[size_t(v)] = group;
      held += numElements(graph.variables[size_t(v)].shape);
    }
  }
  return groups;
}

std::vector<ShardChunk> chunkShard(const ShardPlan& shard, int64_t max_floats,
                                   const std::vector<int>& groups) {
  std::vector<ShardChunk> chunks;
  // Whether piece p fits whole into the last chunk, with nothing of another
  // shard between them in a worker's buffer (only alignment padding).
  auto joins = [&](const VariablePiece& p) {
    if (chunks.empty()) return false;
    const ShardChunk& last = chunks.back();
    const VariablePiece& before = shard.pieces[size_t(last.first_piece + last.pieces - 1)];
    return (groups.empty() || groups[size_t(before.variable)] == groups[size_t(p.variable)]) &&
           before.layout_index + 1 == p.layout_index &&
           p.shard_offset - last.shard_offset == p.layout_offset - last.layout_offset &&
           p.shard_offset + p.size - last.shard_offset <= max_floats;
  };
  for (size_t i = 0; i < shard.pieces.size(); ++i) {
    const VariablePiece& p = shard.pieces[i];
    if (joins(p)) {
      ShardChunk& last = chunks.back();
      ++last.pieces;
      last.size = p.shard_offset + p.size - last.shard_offset;
      continue;
    }
    for (int64_t begin = 0; begin < p.size; begin += max_floats)
      chunks.push_back({int(i), 1, p.shard_offset + begin, p.layout_offset + begin,
                        std::min(max_floats, p.size - begin)});
  }
  return chunks;
}

std::vector<ShardChunk> transferChunks(const LayerGraph& graph, const ShardPlan& shard,
                                       int64_t max_floats) {
  const std::vector<int> groups = gradientGroups(graph);
  std::vector<ShardChunk> chunks = chunkShard(shard, max_floats, groups);
  if (chunks.size() == 1 && shard.size > max_floats / 4 * 3)
    chunks = chunkShard(shard, (shard.size + 1) / 2, groups);
  return chunks;
}

uint32_t chunksFingerprint(const std::vector<ShardChunk>& chunks) {
  uint32_t crc = 0;
  for (const ShardChunk& c : chunks)
    for (const int64_t field : {c.shard_offset, c.layout_offset, c.size}) {
      crc = crc32cOfWord(uint32_t(uint64_t(field)), crc);
      crc = crc32cOfWord(uint32_t(uint64_t(field) >> 32), crc);
    }
  return crc;
}

std::vector<VariableSpec> shardVariables(const LayerGraph& graph, const VariableLayout& layout,
                                         const ShardPlan& shard) {
  std::vector<VariableSpec> variables;
  for (const VariablePiece& p : shard.pieces) {
    VariableSpec v = graph.variables[size_t(p.variable)];
    const VariableView& view = layout.views()[size_t(p.variable)];
    if (p.size != view.size) {
      v.name += fmt::format(":rows={}..{}", p.row_begin, p.row_end);
      v.shape[0] = p.row_end - p.row_begin;
    }
    variables.push_back(std::move(v));
  }
  return variables;
}

std::string describePlacement(const VariableLayout& layout, const Placement& placement) {
  std::string out;
  for (size_t s = 0; s < placement.shards.size(); ++s) {
    const ShardPlan& shard = placement.shards[s];
    int64_t floats = 0;
    for (const VariablePiece& p : shard.pieces) floats += p.size;
    // The shard's buffer is what a ps allocates: each piece starts on a
    // 64-byte line, so it can hold more than the pieces' floats.
    out += fmt::format(
        "ps {}: {} floats ({:.2f} MiB{})\n", s, floats, double(shard.size) * 4.0 / (1 << 20),
        shard.size == floats
            ? ""
            : fmt::format(", {} floats with each piece aligned to 64 bytes", shard.size));
    for (const VariablePiece& p : shard.pieces) {
      const VariableView& v = layout.views()[size_t(p.variable)];
      const bool whole = p.size == v.size;
      out += fmt::format("  {}{} ({} floats)\n", v.name,
                         whole ? "" : fmt::format(" rows {}..{}", p.row_begin, p.row_end), p.size);
    }
  }
  return out;
}

}  // namespace traind
