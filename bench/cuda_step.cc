// cuda_step: traind's CUDA train step time on random batches, for
// bench/cuda_compare.py, and the GPU's float32 GEMM ceiling it is measured
// against.
//
//   cuda_step --model configs/models/fashion_mlp.yaml --batch 100 --mode graph
//   cuda_step --gemm-peak
//
// Modes: graph (device-resident trainer, the step captured as one CUDA
// graph), eager (the same trainer, every kernel launched each step) and
// replica (the Replica interface with host parameters and gradients and the
// CPU optimizer: the path towers and workers use). Each mode runs warm-up
// steps, then --windows windows of --steps steps with one step in flight;
// the median window gives the step time. Prints one JSON line.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/layer_graph.h"
#include "core/model_spec.h"
#include "core/optimizer.h"
#include "core/random.h"
#include "core/variable_layout.h"
#include "devices/cuda/cuda_check.h"
#include "devices/cuda/cuda_device.h"
#include "devices/cuda/cuda_memory.h"
#include "devices/cuda/cuda_trainer.h"

namespace traind {
namespace {

using Clock = std::chrono::steady_clock;

// Multiply-adds x 2 of one training step's GEMMs and convolutions: forward,
// the kernel gradient of trainable layers, the input gradient of layers the
// backward pass goes through (CpuReplica's rule).
double stepFlops(const LayerGraph& graph, int64_t batch) {
  size_t first_trainable = graph.layers.size();
  for (size_t i = 0; i < graph.layers.size() && first_trainable == graph.layers.size(); ++i)
    for (int v : graph.layers[i].variables)
      if (graph.variables[v].trainable) first_trainable = i;
  double flops = 0.0;
  for (size_t i = 0; i < graph.layers.size(); ++i) {
    const LayerNode& node = graph.layers[i];
    double macs = 0.0;
    if (node.spec.kind == LayerKind::Dense)
      macs = double(numElements(node.input_shape)) * double(node.output_shape[0]);
    else if (node.spec.kind == LayerKind::Conv2D)
      macs = double(numElements(node.output_shape)) * double(node.spec.window[0]) *
             double(node.spec.window[1]) * double(node.input_shape[2]);
    if (macs == 0.0) continue;
    const bool trainable = graph.variables[node.variables[0]].trainable;
    const double passes = 1.0 + (trainable ? 1.0 : 0.0) + (i > first_trainable ? 1.0 : 0.0);
    flops += 2.0 * macs * double(batch) * passes;
  }
  return flops;
}

struct RandomBatches {
  std::vector<std::vector<float>> inputs;
  std::vector<std::vector<int32_t>> labels;
  std::vector<std::vector<float>> targets;

  RandomBatches(const LayerGraph& graph, int64_t batch, int count) {
    Rng rng(7);
    const int64_t outputs = numElements(graph.output_shape);
    for (int b = 0; b < count; ++b) {
      inputs.emplace_back(size_t(batch * numElements(graph.input_shape)));
      for (float& x : inputs.back()) x = float(rng.uniform());
      labels.emplace_back(size_t(batch));
      for (int32_t& l : labels.back()) l = int32_t(rng.below(uint64_t(outputs)));
      targets.emplace_back(size_t(batch * outputs));
      for (float& t : targets.back()) t = float(rng.uniform());
    }
  }
  Batch batch(int64_t step) const {
    const size_t b = size_t(step) % inputs.size();
    return {int64_t(labels[b].size()), inputs[b].data(), labels[b].data(), targets[b].data()};
  }
};

// Median of `windows` timings of `steps` calls of run(step), in ms per step.
template <typename Run, typename Drain>
double medianStepMs(int warmup, int windows, int steps, Run&& run, Drain&& drain) {
  int64_t step = 0;
  for (; step < warmup; ++step) run(step);
  drain();
  std::vector<double> ms;
  for (int w = 0; w < windows; ++w) {
    const auto start = Clock::now();
    for (int s = 0; s < steps; ++s, ++step) run(step);
    drain();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count() / steps);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// cuBLAS SGEMM (float32, no TF32) on n x n matrices: the best of 10, in GFLOP/s.
double gemmPeakGflops(int n) {
  DeviceArray<float> a(size_t(n) * n), b(size_t(n) * n), c(size_t(n) * n);
  cublasHandle_t handle;
  checkCublas(cublasCreate(&handle), "cublasCreate");
  checkCublas(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  cudaEvent_t start, stop;
  checkCuda(cudaEventCreate(&start), "cudaEventCreate");
  checkCuda(cudaEventCreate(&stop), "cudaEventCreate");
  const float one = 1.0f, zero = 0.0f;
  double best = 0.0;
  for (int r = 0; r < 11; ++r) {
    checkCuda(cudaEventRecord(start), "cudaEventRecord");
    checkCublas(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.data(), n, b.data(),
                            n, &zero, c.data(), n),
                "cublasSgemm");
    checkCuda(cudaEventRecord(stop), "cudaEventRecord");
    checkCuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0.0f;
    checkCuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (r > 0) best = std::max(best, 2.0 * double(n) * n * n / (double(ms) * 1e6));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cublasDestroy(handle);
  return best;
}

int run(int argc, char** argv) {
  CLI::App app{"traind's CUDA train step time"};
  std::string model_path, mode = "graph";
  int64_t batch = 100;
  int warmup = 20, windows = 5, steps = 200, gemm_size = 8192;
  bool gemm_peak = false;
  app.add_option("--model", model_path, "model spec (its layers, loss and optimizer)");
  app.add_option("--batch", batch, "examples per step");
  app.add_option("--mode", mode, "graph, eager or replica")
      ->check(CLI::IsMember({"graph", "eager", "replica"}));
  app.add_option("--warmup", warmup, "steps before timing");
  app.add_option("--windows", windows, "timed windows (the median is reported)");
  app.add_option("--steps", steps, "steps per window");
  app.add_flag("--gemm-peak", gemm_peak, "measure cuBLAS SGEMM's rate instead");
  app.add_option("--gemm-size", gemm_size, "matrix size of --gemm-peak");
  CLI11_PARSE(app, argc, argv);

  const std::string reason = cudaUnavailableReason();
  if (!reason.empty()) {
    std::fprintf(stderr, "cuda_step: %s\n", reason.c_str());
    return 77;
  }
  checkCuda(cudaSetDevice(0), "cudaSetDevice");
  cudaDeviceProp props;
  checkCuda(cudaGetDeviceProperties(&props, 0), "cudaGetDeviceProperties");
  if (gemm_peak) {
    std::printf("{\"gemm_peak_gflops\": %.1f, \"size\": %d, \"gpu\": \"%s\"}\n",
                gemmPeakGflops(gemm_size), gemm_size, props.name);
    return 0;
  }
  if (model_path.empty()) throw CLI::RequiredError("--model");

  const ModelSpec spec = loadModelSpec(model_path);
  const LayerGraph graph = buildLayerGraph(spec);
  const VariableLayout layout(graph.variables);
  FlatBuffer parameters(layout.totalSize());
  initializeVariables(graph, layout, spec.seed, parameters);
  const RandomBatches batches(graph, batch, 8);
  const float lr = spec.learning_rate.initial;
  double step_ms = 0.0;
  double last_loss = 0.0;  // a sanity check: it falls as the random batches are learnt
  if (mode == "replica") {
    const auto device = createCudaDevice(0, "cuda:0");
    const auto replica = device->createReplica(graph, layout, batch, spec.seed);
    Optimizer optimizer(spec.optimizer, layout);
    FlatBuffer gradients(layout.totalSize());
    step_ms = medianStepMs(
        warmup, windows, steps,
        [&](int64_t step) {
          last_loss = replica
                          ->trainStep(batches.batch(step), parameters.data(), gradients.data(),
                                      uint64_t(step))
                          .loss;
          optimizer.apply(parameters, gradients, lr, step + 1);
        },
        [] {});
  } else {
    CudaTrainer trainer({0}, graph, layout, spec.optimizer, batch, spec.seed,
                        {.graph = mode == "graph"});
    trainer.setParameters(parameters.data());
    bool in_flight = false;
    step_ms = medianStepMs(
        warmup, windows, steps,
        [&](int64_t step) {
          trainer.submit(batches.batch(step), lr, uint64_t(step));
          if (in_flight) last_loss = trainer.collect().loss;  // one step in flight
          in_flight = true;
        },
        [&] {
          if (in_flight) last_loss = trainer.collect().loss;
          in_flight = false;
        });
  }
  const double flops = stepFlops(graph, batch);
  std::printf(
      "{\"model\": \"%s\", \"batch\": %lld, \"mode\": \"%s\", \"step_ms\": %.5f, "
      "\"gflop_per_step\": %.4f, \"gflops\": %.1f, \"last_loss\": %.4f, \"gpu\": \"%s\"}\n",
      spec.name.c_str(), (long long)batch, mode.c_str(), step_ms, flops / 1e9,
      flops / (step_ms * 1e6), last_loss, props.name);
  return 0;
}

}  // namespace
}  // namespace traind

int main(int argc, char** argv) {
  try {
    return traind::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_step: %s\n", e.what());
    return 1;
  }
}
