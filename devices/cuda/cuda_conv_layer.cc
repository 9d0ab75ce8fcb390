// Conv2D on NHWC activations as matrix products over the images' patches
// (im2col), float32 in cuBLAS's SGEMM (no TF32), deterministic in all three
// directions:
//   forward          y [rows, out] = patches [rows, kh*kw*in] x K [kh*kw*in, out]
//   kernel gradient  dK = patches^T x dy
//   input gradient   dpatches = dy x K^T, then each input pixel gathers its
//                    entries of dpatches (patchesToImage)
// where rows = images x output pixels and K is the canonical HWIO kernel as
// it lies in memory. TensorFlow's SAME padding, the odd pixel after the
// last row and column, is in the patches' bounds, so no padded copy is made.
//
// cuDNN 9's convolutions were the first version of this layer. On an H200,
// fashion_cnn's step at batch 100 took 1.10 ms with them against PyTorch's
// 0.58 (cuDNN too): its float32 NHWC kernels ran 1.2-2.6x slower than its NCHW
// ones at these shapes, and its deterministic kernel-gradient algorithms
// 4-7x slower than its non-deterministic ones (0.34 and 0.48 ms of the
// step). bench/cuda_compare.py measures this layer against PyTorch.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "devices/cuda/cuda_check.h"
#include "devices/cuda/cuda_layer.h"

namespace traind {
namespace {

// Floats of patches one product takes at most (64 MiB), or one image's if
// more: a bigger batch is taken a few images at a time, the kernel
// gradient's products summed.
constexpr int64_t kMaxPatchFloats = int64_t(16) << 20;
// The most one image's patches may be: the patch kernels count in 32 bits.
constexpr int64_t kMaxImagePatchFloats = (int64_t(1) << 31) - (int64_t(1) << 24);

class ConvLayer : public CudaLayer {
 public:
  explicit ConvLayer(const CudaLayerContext& c)
      : context_(c.context),
        activation_(c.node.spec.activation),
        input_(c.input),
        kernel_(c.parameter(0)),
        bias_(c.node.variables.size() > 1 ? c.parameter(1) : nullptr) {
    n_ = int(c.batch_size);
    out_ = int(c.node.output_shape[2]);
    shape_ = windowShape(c.node);
    patch_ = shape_.kh * shape_.kw * shape_.c;
    pixels_ = shape_.oh * shape_.ow;
    const int64_t image_patches = int64_t(pixels_) * patch_;
    if (image_patches > kMaxImagePatchFloats ||
        int64_t(shape_.h) * shape_.w * shape_.c > kMaxImagePatchFloats)
      throw std::invalid_argument("conv layer " + c.node.spec.name + ": one image's patches are " +
                                  std::to_string(image_patches) +
                                  " floats, more than the CUDA back end takes (2^31 - 2^24)");
    chunk_images_ = int(std::clamp(kMaxPatchFloats / image_patches, int64_t(1), int64_t(n_)));
    patches_ = c.memory.floats(chunk_images_ * image_patches);
    output_.value = c.memory.floats(int64_t(n_) * pixels_ * out_);
    if (!c.backward) return;
    output_.grad = c.memory.floats(int64_t(n_) * pixels_ * out_);
    kernel_grad_ = c.gradient(0);
    if (bias_) bias_grad_ = c.gradient(1);
    if (bias_grad_) bias_workspace_ = c.memory.floats(biasGradientWorkspace(rows(n_), out_));
    propagate_ = c.propagate;
  }

  const CudaTensor& output() const override { return output_; }

  void forward(bool) override {
    const float one = 1.0f, zero = 0.0f;
    for (int first = 0; first < n_; first += chunk_images_) {
      const int count = std::min(chunk_images_, n_ - first);
      imagePatches(context_.stream(), shape_, image(input_.value, first), count, patches_);
      // Column-major: y^T [out, rows] = K^T [out, patch] x patches^T [patch, rows].
      checkCublas(cublasSgemm(context_.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, out_, int(rows(count)),
                              patch_, &one, kernel_, out_, patches_, patch_, &zero,
                              output_.value + rows(first) * out_, out_),
                  "cublasSgemm (conv forward)");
    }
    biasActivationForward(context_.stream(), output_.value, bias_, rows(n_), out_, activation_);
  }

  void backward() override {
    cudaStream_t stream = context_.stream();
    // The activation's derivative in place, fused with the bias gradient.
    biasGradient(stream, output_.value, output_.grad, bias_grad_, bias_workspace_, rows(n_), out_,
                 activation_);
    const float one = 1.0f, zero = 0.0f;
    for (int first = 0; first < n_; first += chunk_images_) {
      const int count = std::min(chunk_images_, n_ - first);
      const float* dy = output_.grad + rows(first) * out_;
      if (kernel_grad_) {
        // The forward pass left the last chunk's patches: one chunk is the
        // whole batch, already there.
        if (chunk_images_ < n_)
          imagePatches(stream, shape_, image(input_.value, first), count, patches_);
        // Column-major: dK^T [out, patch] = dy^T [out, rows] x patches [rows, patch].
        const float beta = first == 0 ? 0.0f : 1.0f;
        checkCublas(cublasSgemm(context_.cublas(), CUBLAS_OP_N, CUBLAS_OP_T, out_, patch_,
                                int(rows(count)), &one, dy, out_, patches_, patch_, &beta,
                                kernel_grad_, out_),
                    "cublasSgemm (conv kernel gradient)");
      }
      if (propagate_) {
        // Column-major: dpatches^T [patch, rows] = K [patch, out] x dy^T [out, rows],
        // into the patches' buffer (the kernel gradient above has read it).
        checkCublas(cublasSgemm(context_.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, patch_,
                                int(rows(count)), out_, &one, kernel_, out_, dy, out_, &zero,
                                patches_, patch_),
                    "cublasSgemm (conv input gradient)");
        patchesToImage(stream, shape_, patches_, count, image(input_.grad, first));
      }
    }
  }

 private:
  // Rows of the patch matrix (output pixels) of `images` images; a chunk's
  // fit an int (its patches do).
  int64_t rows(int images) const { return int64_t(images) * pixels_; }
  template <typename T>
  T* image(T* batch, int index) const {
    return batch + int64_t(index) * shape_.h * shape_.w * shape_.c;
  }

  CudaContext& context_;
  Activation activation_;
  CudaTensor input_;
  CudaTensor output_;
  const float* kernel_;
  const float* bias_;
  WindowShape shape_;
  int n_ = 0, out_ = 0, patch_ = 0, pixels_ = 0;
  int chunk_images_ = 0;
  float* patches_ = nullptr;
  bool propagate_ = false;
  float* kernel_grad_ = nullptr;
  float* bias_grad_ = nullptr;
  float* bias_workspace_ = nullptr;
};

}  // namespace

std::unique_ptr<CudaLayer> makeCudaConvLayer(const CudaLayerContext& context) {
  return std::make_unique<ConvLayer>(context);
}

}  // namespace traind
