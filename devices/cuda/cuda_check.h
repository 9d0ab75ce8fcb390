// Status checks for every CUDA, cuBLAS and NCCL call of the CUDA back
// end: a failure throws std::runtime_error naming the call and the library's
// own message, e.g.
//
//   checkCuda(cudaMalloc(&p, bytes), "cudaMalloc of the activations");
//   -> "cudaMalloc of the activations: out of memory (cudaErrorMemoryAllocation)"
//
// The status types are taken as plain ints so that this header pulls in no
// library header.
#pragma once

namespace traind {

void checkCuda(int status, const char* call);    // cudaError_t
void checkCublas(int status, const char* call);  // cublasStatus_t
void checkNccl(int status, const char* call);    // ncclResult_t
}  // namespace traind
