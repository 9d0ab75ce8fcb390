// Placement of variables on parameter-server shards: a pure function of the
// variable layout and the number of shards, so every node computes the same
// answer with no coordination.
//
// Greedy by size, as TensorFlow's GreedyLoadBalancingStrategy: largest first
// onto the least-loaded shard. A variable bigger than an even share of the
// whole model (total / shards) is first cut into row slices, one per shard,
// as TensorFlow's partitioned variables, so that one big dense kernel does
// not make one shard the bottleneck. Row slices of a row-major variable are
// contiguous, so every piece is one contiguous range of a worker's flat
// buffer. Small pieces (kSmallPieceFloats) come last: they fill the
// shards up to an even load in runs of consecutive pieces, one run per
// shard, so that they share chunks (chunkShard) rather than alternate
// between shards, each a call of its own. ps 0 holds a piece whenever
// there is one: the job's global step is ps 0's (ShardedClient::readState).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/variable_layout.h"

namespace traind {

struct VariablePiece {
  int variable = 0;           // index into VariableLayout::views()
  int64_t row_begin = 0;      // rows [row_begin, row_end) of dimension 0
  int64_t row_end = 0;
  int64_t layout_offset = 0;  // where the piece starts in a flat buffer of the layout
  int64_t size = 0;           // floats
  int64_t shard_offset = 0;   // where it starts in its shard's own flat buffer, aligned as in
                              // a VariableLayout
  int layout_index = 0;       // among the pieces of every shard, in layout order
};

struct ShardPlan {
  std::vector<VariablePiece> pieces;  // in layout order
  int64_t size = 0;                   // floats the shard holds
};

struct Placement {
  std::vector<ShardPlan> shards;
};

// A piece is small under both bounds: its bytes cost a call less than the
// call itself does (64 KiB), and it is a small part of an even share of
// the model, so that shards filled with such pieces in runs end even.
constexpr int64_t kSmallPieceFloats = 16 * 1024;
constexpr int64_t kSmallPiecesPerShare = 8;

Placement placeVariables(const VariableLayout& layout, int num_shards);

// One unit of transfer and of sync aggregation: a range of one big piece, or
// several small consecutive pieces (with the alignment gaps between them).
struct ShardChunk {
  int first_piece = 0;        // pieces [first_piece, first_piece + pieces) of ShardPlan::pieces
  int pieces = 1;             // overlap the chunk
  int64_t shard_offset = 0;   // in the shard's flat buffer
  int64_t layout_offset = 0;  // in a worker's flat buffer
  int64_t size = 0;           // floats, at most max_floats
};

// A worker sends a step's gradient in groups of layers, each once the
// backward pass has finished it (docs/distributed.md, "Gradients sent
// during backward"): layers taken from the last, whose gradients are final
// first, a group closed once it holds kGradientGroupFloats. The first
// layers' group, sent last, may hold fewer: the less waits for the end of
// the pass the better. Smaller groups would cost more calls than their
// overlap saves. Returns each variable's group.
constexpr int64_t kGradientGroupFloats = 64 * 1024;
std::vector<int> gradientGroups(const LayerGraph& graph);

// The shard's pieces cut into chunks of at most max_floats, in order, no
// chunk holding pieces of two gradient groups (`groups`: per variable, as
// gradientGroups; empty: one group). Every node computes the same list. A
// piece joins the last chunk when it fits there whole, follows the chunk's
// last piece in the layout with no piece of another shard between, and
// lies at the same distance from the chunk's start in the shard's buffer
// and in a worker's (always so with one ps), so the chunk's range in a
// worker's buffer holds only this shard's pieces and the padding between
// them; otherwise it starts chunks of its own, cut every max_floats. Each
// call costs both sides more than its bytes do: a bias of 10 floats is no
// call of its own.
std::vector<ShardChunk> chunkShard(const ShardPlan& shard, int64_t max_floats,
                                   const std::vector<int>& groups = {});

// The chunks every node cuts a shard of `graph`'s variables into: chunkShard
// with the graph's gradient groups. The ps and its workers use this one.
//
// A shard of more than 3/4 of max_floats that this makes one chunk is cut
// into chunks of at most half of it instead: two halves, or three when a
// small piece comes before a big one. A ps answers a chunk once it has all of it, so a
// shard sent as one call leaves each direction of the link idle while the
// other works; two halves let the ps answer the first while the second
// arrives (a 1 MiB shard's push+pull over loopback: 0.55 of a raw TCP echo
// in one call, 0.89 in two; bench/rpc_throughput). A shard of several
// chunks overlaps them already: cutting fashion_mlp's (a 0.9 MiB chunk and
// a small one) in halves too cost its 2-worker job over TCP 5-7%
// (docs/benchmarks.md). Smaller shards stay one call.
std::vector<ShardChunk> transferChunks(const LayerGraph& graph, const ShardPlan& shard,
                                       int64_t max_floats);

// A CRC-32C of the chunks' offsets (in the shard's buffer and a worker's)
// and sizes, which a worker and its ps compare at hello: nodes that cut a
// shard another way would apply gradients to other parameters than they
// were computed for, and through shared memory no length would tell.
uint32_t chunksFingerprint(const std::vector<ShardChunk>& chunks);

// The variables a shard holds, one per piece ("hidden1/kernel" or
// "hidden1/kernel:rows=0..392"), so that a VariableLayout of them has the
// pieces' shard offsets and an Optimizer can run over the shard.
std::vector<VariableSpec> shardVariables(const LayerGraph& graph, const VariableLayout& layout,
                                         const ShardPlan& shard);

// "ps 0: hidden1/kernel rows 0..392 (117600 floats), ..." one line per piece.
std::string describePlacement(const VariableLayout& layout, const Placement& placement);

}  // namespace traind
