// The CUDA back end: NVIDIA GPUs through cuBLAS, NCCL and own kernels
// (devices/cuda/). A device is one GPU; each replica on it has its own
// stream, library handles and buffers, so two replicas (towers) can share a
// GPU.
#pragma once

#include <memory>
#include <string>

#include "devices/device.h"

namespace traind {

// The GPUs this process can use (0 when there is no driver or no GPU), and
// why there are none: "" when there are some.
int cudaDeviceCount();
std::string cudaUnavailableReason();

// GPU `index` (< cudaDeviceCount()), named `name` ("cuda:0").
std::unique_ptr<Device> createCudaDevice(int index, std::string name);

}  // namespace traind
