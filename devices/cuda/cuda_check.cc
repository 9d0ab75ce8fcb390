#include "devices/cuda/cuda_check.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <stdexcept>
#include <string>

namespace traind {

void checkCuda(int status, const char* call) {
  if (status == cudaSuccess) return;
  const auto error = cudaError_t(status);
  throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(error) + " (" +
                           cudaGetErrorName(error) + ")");
}

void checkCublas(int status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const auto error = cublasStatus_t(status);
  throw std::runtime_error(std::string(call) + ": " + cublasGetStatusString(error) + " (" +
                           cublasGetStatusName(error) + ")");
}

void checkNccl(int status, const char* call) {
  if (status == ncclSuccess) return;
  throw std::runtime_error(std::string(call) + ": " + ncclGetErrorString(ncclResult_t(status)));
}

}  // namespace traind
