// The CUDA back end: NVIDIA GPUs through cuBLAS, NCCL and own kernels
// (devices/cuda/). A device is one GPU; each replica on it has its own
// stream, library handles and buffers, so two replicas (towers) can share a
// GPU.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/model_spec.h"
#include "devices/device.h"
#include "devices/resident_trainer.h"

namespace traind {

// The GPUs this process can use (0 when there is no driver or no GPU), and
// why there are none: "" when there are some.
int cudaDeviceCount();
std::string cudaUnavailableReason();

// GPU `index` (< cudaDeviceCount()), named `name` ("cuda:0").
std::unique_ptr<Device> createCudaDevice(int index, std::string name);

// A CudaTrainer (cuda_trainer.h) with one tower on each of `gpus` (valid
// indices; one named twice has two towers).
std::unique_ptr<ResidentTrainer> createCudaTrainer(std::vector<int> gpus, const LayerGraph& graph,
                                                   const VariableLayout& layout,
                                                   const OptimizerSpec& optimizer,
                                                   int64_t batch_size, uint64_t seed);

}  // namespace traind
