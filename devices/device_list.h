// The devices a process computes on, from their names: a model spec's
// training.devices or traind's --devices flag (docs/devices.md).
//
//   cpu       one CPU device with all the compute threads
//   cpu:N     CPU devices; K of them share the threads, total / K each (at
//             least 1). A CPU device is a share of the threads, not a
//             socket: cpu:0 and cpu:1 are two towers on the same cores.
//   cuda:N    NVIDIA GPU N (builds with CUDA); named twice, two towers on it
//
// createDevices is the one place where a name becomes a Device: a new back
// end adds its branch there.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/model_spec.h"
#include "devices/device.h"
#include "devices/resident_trainer.h"

namespace traind {

// OpenMP's default number of threads: OMP_NUM_THREADS, else one per core.
// Read once, at the first call: omp_get_max_threads() answers for the
// calling thread, whose setting a CPU replica's constructor changes
// (omp_set_num_threads), so a later read on that thread would give the
// share of the last replica built there. traind's main reads it first.
int defaultCpuThreads();

// total_threads: the compute threads of the process (training.threads or
// --threads); 0 means defaultCpuThreads(). The devices come back in the order named.
// Throws InputError naming the device for an empty list, an unknown name, a
// CPU device given twice, `cpu` beside `cpu:N`, a device this build has no
// back end for ("cuda:0: this traind was built without CUDA") and a GPU this
// machine does not have. `where`, when given, is where the list came from
// (the spec's training.devices, or --devices), and starts the message.
std::vector<std::unique_ptr<Device>> createDevices(const std::vector<std::string>& names,
                                                   int total_threads,
                                                   const SourceLocation& where = {});

// The checks of createDevices that need no back end (names, repeats, `cpu`
// beside `cpu:N`), for a flag before the run starts. Throws InputError.
void checkDeviceList(const std::vector<std::string>& names);

// Whether the back end of the device named `name` (a valid name) runs
// pipeline stages and micro-batches (Device::createStage), known before any
// device is made: the CPU's does; the CUDA back end has none yet.
bool runsPipelineStages(const std::string& name);
// Why a device refuses them, for its error.
constexpr const char* kNoPipelineStages =
    "placed layers (device:, stages:) and micro_batches > 1 run on CPU devices only in this build";

// Whether every device of `names` (a list createDevices took) is a GPU.
bool everyDeviceIsGpu(const std::vector<std::string>& names);

// A trainer that keeps the model and its optimizer's slots on the GPUs
// `names` (everyDeviceIsGpu; devices/resident_trainer.h), one tower on each.
std::unique_ptr<ResidentTrainer> createResidentTrainer(const std::vector<std::string>& names,
                                                       const LayerGraph& graph,
                                                       const VariableLayout& layout,
                                                       const OptimizerSpec& optimizer,
                                                       int64_t batch_size, uint64_t seed);

// The devices as createTowers takes them.
std::vector<Device*> devicePointers(const std::vector<std::unique_ptr<Device>>& devices);

// "cpu:0, cpu:1", for logs.
std::string deviceNames(const std::vector<std::unique_ptr<Device>>& devices);

// "cpu:0,cpu:1" (traind's --devices) as a list of names; nothing is checked
// here, checkDeviceList and createDevices do that.
std::vector<std::string> splitDeviceList(const std::string& text);

}  // namespace traind
