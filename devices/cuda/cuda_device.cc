#include "devices/cuda/cuda_device.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <utility>

#include "devices/cuda/cuda_back_end.h"
#include "devices/cuda/cuda_replica.h"
#include "devices/cuda/cuda_trainer.h"

namespace traind {
namespace {

class CudaDevice : public Device {
 public:
  CudaDevice(int index, std::string name) : index_(index), name_(std::move(name)) {}

  std::string name() const override { return name_; }

  std::unique_ptr<Replica> createReplica(const LayerGraph& graph, const VariableLayout& layout,
                                         int64_t batch_size, uint64_t seed) override {
    return std::make_unique<CudaReplica>(index_, graph, layout, batch_size, seed);
  }

 private:
  int index_;
  std::string name_;
};

// cudaGetDeviceCount's answer, once: its error when there is no usable GPU.
cudaError_t deviceCount(int& count) {
  count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) count = 0;
  return status;
}

}  // namespace

int cudaDeviceCount() {
  int count = 0;
  deviceCount(count);
  return count;
}

std::string cudaUnavailableReason() {
  int count = 0;
  const cudaError_t status = deviceCount(count);
  if (status == cudaSuccess && count == 0) return "no CUDA GPU in this machine";
  if (status == cudaSuccess) return "";
  const std::string cuda_says =
      std::string(cudaGetErrorString(status)) + " (" + cudaGetErrorName(status) + ")";
  // The runtime says its driver is too old when there is none at all: the
  // driver's library, loaded or not, tells the two apart.
  if (status == cudaErrorInsufficientDriver) {
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!driver)
      return "no usable CUDA GPU: no NVIDIA driver on this machine (libcuda.so.1 not found; CUDA "
             "says: " +
             cuda_says + ")";
    dlclose(driver);
  }
  return "no usable CUDA GPU: " + cuda_says;
}

std::unique_ptr<Device> createCudaDevice(int index, std::string name) {
  return std::make_unique<CudaDevice>(index, std::move(name));
}

std::unique_ptr<ResidentTrainer> createCudaTrainer(std::vector<int> gpus, const LayerGraph& graph,
                                                   const VariableLayout& layout,
                                                   const OptimizerSpec& optimizer,
                                                   int64_t batch_size, uint64_t seed) {
  return std::make_unique<CudaTrainer>(std::move(gpus), graph, layout, optimizer, batch_size,
                                       seed);
}

}  // namespace traind

extern "C" const traind::CudaBackEnd* traind_cuda_back_end_v2() {
  static const traind::CudaBackEnd back_end{traind::cudaDeviceCount, traind::cudaUnavailableReason,
                                            traind::createCudaDevice, traind::createCudaTrainer};
  return &back_end;
}
