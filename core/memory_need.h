// The memory a training run of a model needs at the least, against what
// this machine or container gives a process.
//
// The spec's caps (layer_graph.h) keep each tensor to 8 GiB and all
// variables to 16 GiB, but a model within them can still need more than a
// machine has: its allocations then fail with a bare std::bad_alloc, or
// succeed on overcommitted memory until the kernel kills the process
// mid-run. A run and `traind check` compare this lower bound with the
// memory first, and refuse the spec with the line to change.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/layer_graph.h"
#include "core/model_spec.h"

namespace traind {

struct MemoryNeed {
  // The model's variables, their gradients and the optimizer's slots (and
  // the moving averages), as a standalone run holds them; with CPU towers,
  // each tower's gradients but the first's too.
  int64_t state_bytes = 0;
  // A cluster worker's: each step in flight's gradients and the parameters
  // pulled for it, beyond the one gradient state_bytes counts. (A worker
  // but the chief holds no values or slots of its own: its state_bytes
  // count one step's gradients and pulled parameters.)
  int64_t step_buffer_bytes = 0;
  // Every layer's output for the examples of one step, and its gradient
  // where the backward pass reaches it, once per step in flight
  // (training.concurrent_steps); none on CUDA devices, whose memory they
  // take instead of the host's. oneDNN's buffers in other memory formats
  // are not counted: a lower bound still.
  int64_t activation_bytes = 0;
  // The input batches data.prefetch_batches reads ahead (auto counts as
  // none: a worker reads none ahead, a standalone run 4).
  int64_t input_bytes = 0;
  // The layer whose variables are the largest part of state_bytes.
  int largest_layer = -1;
  int64_t largest_layer_bytes = 0;

  int64_t total() const { return state_bytes + step_buffer_bytes + activation_bytes + input_bytes; }
};

// Whose need: a standalone run's; a cluster's chief, which holds the
// model's values and slots (for checkpoints and evaluations) and its
// steps' buffers of gradients and pulled parameters; another worker, which
// holds the steps' buffers only.
enum class MemoryOf { StandaloneRun, ClusterChief, ClusterWorker };
MemoryNeed memoryNeed(const ModelSpec& spec, const LayerGraph& graph, MemoryOf whose);

// Physical memory and swap, or what the process's cgroup allows (its
// memory limit and its swap limit, or the host's swap), or what its own
// limits leave it (`ulimit -v`, RLIMIT_AS, counts its address space,
// libraries and thread stacks too; `ulimit -d`, RLIMIT_DATA, its heap),
// whichever is lowest; nothing when none can be read.
std::optional<int64_t> memoryAvailable();
// What memoryAvailable counts, in a message's words.
inline constexpr std::string_view kMemoryAvailableWords =
    "physical memory and swap, or what its cgroup or ulimit -v and -d allow";

// "1.5 GiB", "300.0 MiB", "12.0 KiB".
std::string byteSize(int64_t bytes);

// "memory: at least 20.1 MiB (3.4 MiB of variables ..., 16.8 MiB of layer
// outputs per step); this machine gives a process 23.5 GiB", for
// `traind check`.
std::string memoryReport(const MemoryNeed& need, std::optional<int64_t> available);

// Throws InputError when `need` exceeds `available`, at the largest
// layer's line when the variables take more than the layer outputs, else
// at data.batch_size's.
void checkMemoryFits(const ModelSpec& spec, const LayerGraph& graph, const MemoryNeed& need,
                     std::optional<int64_t> available);

}  // namespace traind
