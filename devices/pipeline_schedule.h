// The order in which each stage of a pipeline runs the micro-batches of one
// training step: 1F1B with a flush at the end of the step (PipeDream-flush,
// as in Megatron-LM and DeepSpeed), and a text picture of it for
// `traind check` and docs/devices.md.
//
// With S stages and M micro-batches stage s (from 0) first runs the forward
// passes of min(S - 1 - s, M) micro-batches (the warm-up), then alternates
// one forward and one backward, then runs the backward passes left. For S = 2,
// M = 4, every pass taking one unit of time:
//
//   stage 0 | F0 F1 .. B0 F2 B1 F3 B2 .. B3
//   stage 1 | .. F0 B0 F1 B1 F2 B2 F3 B3 ..
//
// The bubble (idle time) is that of GPipe, which runs every forward before
// every backward: (S - 1) forward and (S - 1) backward passes per stage
// per step. But GPipe holds the activations of all M micro-batches between
// their forward and backward; 1F1B starts a micro-batch's backward as soon
// as it can, so stage s never holds more than min(S - s, M): memory does not
// grow with M, and M can grow to shrink the bubble's share of the step.
#pragma once

#include <string>
#include <vector>

namespace traind {

struct PipelineOp {
  enum class Kind { Forward, Backward };
  Kind kind = Kind::Forward;
  int micro_batch = 0;
};

// Stage `stage`'s passes of one training step, in order.
std::vector<PipelineOp> oneForwardOneBackward(int stage, int stages, int micro_batches);

// Micro-batches stage `stage` holds at once under that schedule.
int stageSlots(int stage, int stages, int micro_batches);

// The picture above: one row per stage ("<label> | F0 F1 .."), every pass
// one unit of time, ".." where the stage waits. labels: one per stage.
// `backward`: per stage, whether it runs its backward passes (a stage with
// no trainable variable in it or before it skips them, as the pipeline
// does: StageReplica::hasBackward); empty: every stage does.
std::string scheduleChart(const std::vector<std::string>& labels, int micro_batches,
                          const std::vector<bool>& backward = {});

}  // namespace traind
