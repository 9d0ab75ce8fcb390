// The contract of a layer on the CUDA back end, the stream context it runs
// on, and one builder per layer kind (cuda_layers.cc, cuda_conv_layer.cc;
// cuda_network.cc maps LayerKind to them).
//
// Unlike the CPU back end there are no layout choices: every activation is
// the canonical row-major tensor (NHWC images, [batch, features] vectors),
// so flatten is free and a dropout mask is the CPU's element for element.
// A layer is built once per network from its LayerNode and the tensor of the
// layer before it; every buffer is allocated while building, so running a
// layer only enqueues work on the context's stream and a whole step can be
// captured as one CUDA graph.
#pragma once

#include <cublas_v2.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/layer_graph.h"
#include "core/variable_layout.h"
#include "devices/cuda/cuda_kernels.h"
#include "devices/cuda/cuda_memory.h"

namespace traind {

// One stream on one GPU with the cuBLAS handle bound to it and the scratch
// memory cuBLAS runs in. Layers of the networks that share a context run
// one after another on its stream.
class CudaContext {
 public:
  explicit CudaContext(int device);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas() const { return cublas_; }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  DeviceArray<char> cublas_workspace_;
};

// A batch of activations between two layers, on the device.
struct CudaTensor {
  float* value = nullptr;
  float* grad = nullptr;  // null when no backward pass reaches it
};

// The device memory of one network: every buffer is allocated while
// building and kept until the network goes.
class CudaArena {
 public:
  float* floats(int64_t count) { return static_cast<float*>(bytes(size_t(count) * sizeof(float))); }
  void* bytes(size_t count) {
    buffers_.emplace_back(count);
    return buffers_.back().data();
  }

 private:
  std::vector<DeviceArray<char>> buffers_;
};

struct CudaLayerContext {
  const LayerNode& node;
  int index;  // position in LayerGraph::layers; dropout masks are keyed on it
  const VariableLayout& layout;
  int64_t batch_size;
  uint64_t seed;  // the replica's seed
  const CudaTensor& input;
  bool backward;            // as the CPU back end's LayerBuildContext
  bool propagate;           // backward() writes input.grad
  const float* parameters;  // device flat buffers of `layout`
  float* gradients;
  const StepScalars* scalars;  // device; the step seeds dropout
  CudaContext& context;
  CudaArena& memory;

  const VariableView& variable(size_t k) const { return layout.views()[node.variables[k]]; }
  const float* parameter(size_t k) const { return parameters + variable(k).offset; }
  // The variable's gradient, or null when it is frozen.
  float* gradient(size_t k) const {
    return variable(k).trainable ? gradients + variable(k).offset : nullptr;
  }
};

class CudaLayer {
 public:
  virtual ~CudaLayer() = default;
  virtual const CudaTensor& output() const = 0;
  // training: dropout draws its mask (from the step in the scalars).
  virtual void forward(bool training) = 0;
  // From output().grad: the gradients of the layer's trainable variables
  // and, when propagating, input.grad. Runs after the training forward of
  // the same batch, with no other forward of this layer between them: a
  // layer may keep what its forward computed (a convolution its patches).
  virtual void backward() = 0;
};

// A convolution's or a pooling's window geometry, from its node.
WindowShape windowShape(const LayerNode& node);

std::unique_ptr<CudaLayer> makeCudaDenseLayer(const CudaLayerContext& context);
std::unique_ptr<CudaLayer> makeCudaConvLayer(const CudaLayerContext& context);
std::unique_ptr<CudaLayer> makeCudaPoolingLayer(const CudaLayerContext& context);
std::unique_ptr<CudaLayer> makeCudaFlattenLayer(const CudaLayerContext& context);
std::unique_ptr<CudaLayer> makeCudaDropoutLayer(const CudaLayerContext& context);
std::unique_ptr<CudaLayer> makeCudaActivationLayer(const CudaLayerContext& context);

}  // namespace traind
