// The CUDA back end as traind loads it. devices/cuda/ is built into its own
// shared library, libtraind_cuda.so, which devices/cuda_loader.cc opens with
// dlopen the first time a run names a cuda:N device: a process that never
// uses a GPU (a ps, a CPU run, `traind check`) does not map and relocate the
// CUDA libraries, which would cost it about 200 MiB of memory.
//
//   const CudaBackEnd& cuda = loadCudaBackEnd("cuda:0");   // devices/cuda_loader.h
//   if (cuda.device_count() == 0) ... cuda.unavailable_reason() ...
//   std::unique_ptr<Device> gpu = cuda.create_device(0, "cuda:0");
//   std::unique_ptr<ResidentTrainer> t = cuda.create_trainer({0}, graph, layout, optimizer, 100, seed);
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/model_spec.h"
#include "devices/device.h"
#include "devices/resident_trainer.h"

namespace traind {

struct CudaBackEnd {
  int (*device_count)();                   // cudaDeviceCount
  std::string (*unavailable_reason)();     // cudaUnavailableReason
  std::unique_ptr<Device> (*create_device)(int index, std::string name);  // createCudaDevice
  std::unique_ptr<ResidentTrainer> (*create_trainer)(  // createCudaTrainer
      std::vector<int> gpus, const LayerGraph& graph, const VariableLayout& layout,
      const OptimizerSpec& optimizer, int64_t batch_size, uint64_t seed);
};

}  // namespace traind

// The library's one entry point, looked up by name (kCudaBackEndEntry). The
// name carries a version, so that a libtraind_cuda.so of another traind (an
// older install found first) is refused by name rather than called through
// a table of another shape: change both together whenever the table, or
// what crosses it (Device, Replica, ResidentTrainer, the specs and the
// graph), changes shape or meaning.
extern "C" const traind::CudaBackEnd* traind_cuda_back_end_v2();
inline constexpr const char* kCudaBackEndEntry = "traind_cuda_back_end_v2";
