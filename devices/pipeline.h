// A pipeline: a placed model (model parallelism) as one Replica. Each stage
// of a StagePlan (consecutive layers) runs on its own device, on its own
// thread, started once and kept; a batch of B examples is cut into M
// micro-batches of B / M that flow through the stages, activations forward
// and their gradients back across each boundary, in the 1F1B schedule of
// devices/pipeline_schedule.h (GPipe's bubble, but each stage holds the
// activations of at most S - s micro-batches instead of M: see there). With
// M = 1 it is plain model parallelism: one stage works at a time. With M > 1
// the stages work on different micro-batches at once.
//
//   StagePlan plan = planStages(spec, graph, {"cpu:0", "cpu:1"});  // two stages
//   std::unique_ptr<Pipeline> pipeline = createPipeline(
//       {devices[0].get(), devices[1].get()}, plan, graph, layout, 100, 4, seed);
//   pipeline->trainStep(batch, parameters, gradients, step);  // 4 micro-batches of 25
//
// The update equals the whole batch's: each micro-batch's loss gradient is
// scaled by 1 / M, so the parameter gradients its backward passes produce
// add up, over the micro-batches, to the gradient of the batch's mean loss
// (up to float rounding). A stage's first backward of a step writes the
// caller's gradients, the later ones add to them. The loss reported is the
// mean over the micro-batches, `correct` their sum. trainStepAndUpdate
// updates each stage's variables from the stage's thread as soon as its last
// backward is done, while earlier stages still work: a step that fails in
// an earlier stage (a device's error) may leave the later stages' variables
// updated, the step's count not.
//
// Dropout: with M = 1 step s draws the masks a single device draws for it
// (a placed run is the same as an unplaced one); with M > 1 micro-batch m
// draws those of step s * M + m, so no two micro-batches share one.
//
// Each stage records the time it spends computing (its passes and the loss,
// not its waits): busy time over the steps' time is the stage's busy
// fraction, 1 - bubble.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/stage_plan.h"
#include "devices/device.h"

namespace traind {

class Pipeline : public Replica {
 public:
  struct StageTime {
    std::string name;  // the plan's stage name
    std::string device;
    double busy_seconds = 0.0;  // computing, over every trainStep so far
  };
  // Over every trainStep so far, and the time the steps took.
  virtual std::vector<StageTime> stageTimes() const = 0;
  virtual double trainSeconds() const = 0;
};

// A Pipeline over plan.stages, stage s on stage_devices[s] (not owned; they
// must outlive it), for batches of batch_size cut into micro_batches. Throws
// InputError when micro_batches does not divide batch_size, and what a
// device's createStage throws (a device that cannot run stages). Each
// stage's replica is built on the thread that runs it. A plan of one stage
// runs on the caller's thread: the micro-batches one after the other
// (gradient accumulation).
std::unique_ptr<Pipeline> createPipeline(const std::vector<Device*>& stage_devices,
                                         const StagePlan& plan, const LayerGraph& graph,
                                         const VariableLayout& layout, int64_t batch_size,
                                         int micro_batches, uint64_t seed);

}  // namespace traind
