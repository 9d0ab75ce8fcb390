// A unit of stream work that is run eagerly a few times (cuBLAS settles its
// kernels and lazy state), then captured once as a CUDA graph
// and replayed: one launch instead of tens, which is what a small model's
// step costs on a GPU. The work must enqueue the same operations on the
// same buffers every time; values that change per step are read from
// device or pinned memory.
//
//   CapturedWork step(2);
//   step.run(stream, [&] { copyInputs(); network.enqueueTrainStep(); copyResults(); });
#pragma once

#include <cuda_runtime_api.h>

#include "devices/cuda/cuda_check.h"

namespace traind {

class CapturedWork {
 public:
  // warmup: eager runs before the capture; negative: never capture.
  explicit CapturedWork(int warmup) : warmup_(warmup) {}
  ~CapturedWork() {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
  }
  CapturedWork(const CapturedWork&) = delete;
  CapturedWork& operator=(const CapturedWork&) = delete;

  template <typename Enqueue>
  void run(cudaStream_t stream, Enqueue&& enqueue) {
    if (exec_) {
      checkCuda(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch");
      return;
    }
    if (warmup_ < 0 || runs_ < warmup_) {
      enqueue();
      ++runs_;
      return;
    }
    // Thread-local: towers on other threads may build replicas meanwhile.
    checkCuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
              "cudaStreamBeginCapture");
    try {
      enqueue();
    } catch (...) {
      cudaGraph_t broken = nullptr;
      cudaStreamEndCapture(stream, &broken);
      if (broken) cudaGraphDestroy(broken);
      throw;
    }
    checkCuda(cudaStreamEndCapture(stream, &graph_), "cudaStreamEndCapture");
    checkCuda(cudaGraphInstantiate(&exec_, graph_, 0), "cudaGraphInstantiate");
    checkCuda(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch");
  }

  bool captured() const { return exec_ != nullptr; }

 private:
  int warmup_;
  int runs_ = 0;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace traind
