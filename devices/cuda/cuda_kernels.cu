// The CUDA back end's own kernels; cuda_kernels.h is their contract. Small
// and memory-bound: at the batch sizes this engine trains with, a step is
// decided by these launches as much as by the GEMMs, so each does one pass
// and no kernel uses atomics on floats (results are deterministic).
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "devices/cuda/cuda_check.h"
#include "devices/cuda/cuda_kernels.h"
#include "devices/cuda/fast_divisor.h"

namespace traind {
namespace {

constexpr int kThreads = 256;

// Blocks for n elements with kThreads each, capped: the kernels stride.
unsigned blocksFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return unsigned(blocks < 1 ? 1 : (blocks > 65535 ? 65535 : blocks));
}

void checkLaunch(const char* kernel) { checkCuda(int(cudaGetLastError()), kernel); }

// Whether a grid-stride loop over n elements can count in 32 bits: the
// kernels that split an index into coordinates are templated on the index
// type, since 64-bit division costs them more than their memory traffic.
bool fitsInt32(int64_t n) { return n <= INT32_MAX - int64_t(65535) * kThreads; }

// ---- activations ----

__device__ __forceinline__ float activate(float x, Activation a) {
  switch (a) {
    case Activation::Relu:
      return x > 0.0f ? x : 0.0f;
    case Activation::Tanh:
      return tanhf(x);
    case Activation::Sigmoid:
      return 1.0f / (1.0f + expf(-x));
    case Activation::Linear:
      break;
  }
  return x;
}

// The derivative from the activation's output y.
__device__ __forceinline__ float derivative(float y, Activation a) {
  switch (a) {
    case Activation::Relu:
      return y > 0.0f ? 1.0f : 0.0f;
    case Activation::Tanh:
      return 1.0f - y * y;
    case Activation::Sigmoid:
      return y * (1.0f - y);
    case Activation::Linear:
      break;
  }
  return 1.0f;
}

template <typename Index>
__global__ void biasActivationKernel(float* __restrict__ y, const float* __restrict__ bias,
                                     Index rows, Index cols, Activation a) {
  const Index n = rows * cols;
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < n;
       i += Index(gridDim.x) * blockDim.x) {
    const float b = bias ? bias[i % cols] : 0.0f;
    y[i] = activate(y[i] + b, a);
  }
}

__global__ void activationKernel(const float* x, float* y, int64_t n, Activation a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = activate(x[i], a);
}

__global__ void activationBackwardKernel(const float* y, const float* dy, float* dx, int64_t n,
                                         Activation a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dx[i] = dy[i] * derivative(y[i], a);
}

// ---- column sums (bias gradients) ----

// A block is 32 columns x 32 row lanes and sums kRowsPerBlock rows of its
// columns: out[blockIdx.y, c]. With `y` set it first applies the
// activation's derivative to `in` in place (the first pass only). A lane
// takes at most 8 rows: the loads of a lane's rows wait on each other.
constexpr int kRowLanes = 32;
constexpr int64_t kRowsPerBlock = 256;

__global__ void columnSumKernel(const float* y, float* in, float* out, int64_t rows, int64_t cols,
                                Activation a) {
  __shared__ float partial[kRowLanes][33];
  const int64_t col = blockIdx.x * 32 + threadIdx.x;
  const int64_t first = blockIdx.y * kRowsPerBlock;
  const int64_t last = min(first + kRowsPerBlock, rows);
  float sum = 0.0f;
  if (col < cols) {
    for (int64_t r = first + threadIdx.y; r < last; r += kRowLanes) {
      const int64_t i = r * cols + col;
      float g = in[i];
      if (y) {
        g *= derivative(y[i], a);
        in[i] = g;
      }
      sum += g;
    }
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
    for (int k = 0; k < kRowLanes; ++k) total += partial[k][threadIdx.x];
    out[blockIdx.y * cols + col] = total;
  }
}

// ---- dropout ----

__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__device__ __forceinline__ uint64_t hashCombine(uint64_t a, uint64_t b) {
  return mix64(a ^ mix64(b));
}

// core/random.h's uniformFloat, bit for bit.
__device__ __forceinline__ float uniformFloat(uint64_t stream, uint64_t index) {
  return float(hashCombine(stream, index) >> 40) * (1.0f / 16777216.0f);
}

__global__ void dropoutKernel(const float* in, float* out, int64_t n, float rate, float keep,
                              uint64_t seed, uint64_t layer, const StepScalars* scalars) {
  const uint64_t stream = hashCombine(seed, hashCombine(scalars->step, layer));
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = uniformFloat(stream, uint64_t(i)) < rate ? 0.0f : in[i] * keep;
}

// ---- index splits ----

// n / d in a kernel's index type: a multiply and a shift for 32-bit
// indices, the hardware's division for 64-bit ones.
__device__ __forceinline__ int32_t quotient(int32_t n, const FastDivisor& d) { return d.divide(n); }
__device__ __forceinline__ int64_t quotient(int64_t n, const FastDivisor& d) {
  return n / d.divisor();
}

// The outputs whose windows hold input coordinate v: [first, last] of o with
// o * stride - pad <= v < o * stride - pad + window, inside [0, outputs).
__device__ __forceinline__ void windowsHolding(int v, int pad, int window, const FastDivisor& stride,
                                               int outputs, int& first, int& last) {
  const int lo = v + pad - window + 1;  // o * stride >= lo
  first = lo <= 0 ? 0 : stride.divide(lo + stride.divisor() - 1);
  last = min(stride.divide(v + pad), outputs - 1);
}

// The divisors the pooling and patch kernels split their indices with.
struct WindowDivisors {
  FastDivisor c, h, w, oh, ow, kw, sh, sw;
};

WindowDivisors windowDivisors(const WindowShape& s) {
  return {FastDivisor(s.c),  FastDivisor(s.h),  FastDivisor(s.w),  FastDivisor(s.oh),
          FastDivisor(s.ow), FastDivisor(s.kw), FastDivisor(s.sh), FastDivisor(s.sw)};
}

// ---- pooling ----

template <typename Index>
__global__ void poolForwardKernel(PoolShape s, WindowDivisors d, const float* __restrict__ x,
                                  float* __restrict__ y, int32_t* __restrict__ argmax) {
  const Index total = Index(s.n) * s.oh * s.ow * s.c;
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < total;
       i += Index(gridDim.x) * blockDim.x) {
    const Index pixel = quotient(i, d.c), rest = quotient(pixel, d.ow), n = quotient(rest, d.oh);
    const int c = int(i - pixel * s.c);
    const int ox = int(pixel - rest * s.ow);
    const int oy = int(rest - n * s.oh);
    const int y0 = oy * s.sh - s.pad_top, x0 = ox * s.sw - s.pad_left;
    const int y_begin = max(y0, 0), y_end = min(y0 + s.kh, s.h);
    const int x_begin = max(x0, 0), x_end = min(x0 + s.kw, s.w);
    const float* image = x + n * s.h * s.w * s.c + c;
    if (s.max) {
      float best = -INFINITY;
      int32_t where = y_begin * s.w + x_begin;
      for (int iy = y_begin; iy < y_end; ++iy)
        for (int ix = x_begin; ix < x_end; ++ix) {
          const float v = image[(Index(iy) * s.w + ix) * s.c];
          if (v > best) {
            best = v;
            where = iy * s.w + ix;
          }
        }
      y[i] = best;
      argmax[i] = where;
    } else {
      float sum = 0.0f;
      for (int iy = y_begin; iy < y_end; ++iy)
        for (int ix = x_begin; ix < x_end; ++ix) sum += image[(Index(iy) * s.w + ix) * s.c];
      y[i] = sum / float((y_end - y_begin) * (x_end - x_begin));
    }
  }
}

template <typename Index>
__global__ void poolBackwardKernel(PoolShape s, WindowDivisors d, const float* __restrict__ dy,
                                   float* __restrict__ dx, const int32_t* __restrict__ argmax) {
  const Index total = Index(s.n) * s.h * s.w * s.c;
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < total;
       i += Index(gridDim.x) * blockDim.x) {
    const Index pixel = quotient(i, d.c), rest = quotient(pixel, d.w), n = quotient(rest, d.h);
    const int c = int(i - pixel * s.c);
    const int x = int(pixel - rest * s.w);
    const int y = int(rest - n * s.h);
    int oy_first, oy_last, ox_first, ox_last;
    windowsHolding(y, s.pad_top, s.kh, d.sh, s.oh, oy_first, oy_last);
    windowsHolding(x, s.pad_left, s.kw, d.sw, s.ow, ox_first, ox_last);
    const int32_t me = y * s.w + x;
    float sum = 0.0f;
    for (int oy = oy_first; oy <= oy_last; ++oy)
      for (int ox = ox_first; ox <= ox_last; ++ox) {
        const Index o = ((n * s.oh + oy) * s.ow + ox) * s.c + c;
        if (s.max) {
          if (argmax[o] == me) sum += dy[o];
        } else {
          const int y0 = oy * s.sh - s.pad_top, x0 = ox * s.sw - s.pad_left;
          const int count = (min(y0 + s.kh, s.h) - max(y0, 0)) * (min(x0 + s.kw, s.w) - max(x0, 0));
          sum += dy[o] / float(count);
        }
      }
    dx[i] = sum;
  }
}

// ---- convolution patches (im2col) ----

// The patch kernels give a warp whole rows of `span` floats (a patch, a
// pixel's channels), so that a row's coordinates are split once, not per
// float: a row at a time with the lanes striding over it, or, for rows under
// 32 floats, 32 / span rows at a time with a lane per float.
struct WarpRows {
  int per_warp;  // rows a warp takes at a time
  int sub;       // this lane's row among them; idle when >= per_warp
  int first;     // this lane's first float of its row; it strides by 32
};

__device__ __forceinline__ WarpRows warpRows(int span) {
  const int lane = threadIdx.x & 31;
  if (span >= 32) return {1, 0, lane};
  return {32 / span, lane / span, lane % span};
}

unsigned warpBlocksFor(int64_t rows, int span) {
  const int64_t per_warp = span >= 32 ? 1 : 32 / span;
  const int64_t warps = (rows + per_warp - 1) / per_warp;
  return blocksFor(warps * 32);
}

__global__ void imagePatchesKernel(WindowShape s, WindowDivisors d, const float* __restrict__ x,
                                   float* __restrict__ patches, int rows) {
  const int patch = s.kh * s.kw * s.c;
  const WarpRows lanes = warpRows(patch);
  if (lanes.sub >= lanes.per_warp) return;
  const int warps = gridDim.x * (blockDim.x / 32);
  const int warp = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  for (int row = warp * lanes.per_warp + lanes.sub; row < rows;
       row += warps * lanes.per_warp) {
    const int rest = d.ow.divide(row), image = d.oh.divide(rest);
    const int ox = row - rest * s.ow, oy = rest - image * s.oh;
    const int y0 = oy * s.sh - s.pad_top, x0 = ox * s.sw - s.pad_left;
    const float* src = x + int64_t(image) * s.h * s.w * s.c;
    float* dst = patches + int64_t(row) * patch;
    for (int k = lanes.first; k < patch; k += 32) {
      const int window = d.c.divide(k), ky = d.kw.divide(window);
      const int ci = k - window * s.c, kx = window - ky * s.kw;
      const int y = y0 + ky, xx = x0 + kx;
      dst[k] = y >= 0 && y < s.h && xx >= 0 && xx < s.w ? src[(y * s.w + xx) * s.c + ci] : 0.0f;
    }
  }
}

// A row here is an input pixel's channels; each gathers from the windows
// that hold the pixel, in a fixed order.
__global__ void patchesToImageKernel(WindowShape s, WindowDivisors d, const float* __restrict__ patches,
                                     float* __restrict__ dx, int pixels) {
  const int patch = s.kh * s.kw * s.c;
  const WarpRows lanes = warpRows(s.c);
  if (lanes.sub >= lanes.per_warp) return;
  const int warps = gridDim.x * (blockDim.x / 32);
  const int warp = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  for (int pixel = warp * lanes.per_warp + lanes.sub; pixel < pixels;
       pixel += warps * lanes.per_warp) {
    const int rest = d.w.divide(pixel), image = d.h.divide(rest);
    const int x = pixel - rest * s.w, y = rest - image * s.h;
    int oy_first, oy_last, ox_first, ox_last;
    windowsHolding(y, s.pad_top, s.kh, d.sh, s.oh, oy_first, oy_last);
    windowsHolding(x, s.pad_left, s.kw, d.sw, s.ow, ox_first, ox_last);
    for (int ci = lanes.first; ci < s.c; ci += 32) {
      float sum = 0.0f;
      for (int oy = oy_first; oy <= oy_last; ++oy) {
        const int ky = y + s.pad_top - oy * s.sh;
        for (int ox = ox_first; ox <= ox_last; ++ox) {
          const int kx = x + s.pad_left - ox * s.sw;
          sum += patches[(int64_t(image * s.oh + oy) * s.ow + ox) * patch +
                         (ky * s.kw + kx) * s.c + ci];
        }
      }
      dx[int64_t(pixel) * s.c + ci] = sum;
    }
  }
}

// ---- losses ----

// A block's sums, reduced in a fixed order; the last block to finish adds
// the blocks' sums in block order into *sums (deterministic) and resets the
// counter for the next step.
__device__ void finishSums(double loss, long long correct, double* block_loss,
                           long long* block_correct, unsigned* blocks_done, LossSums* sums) {
  __shared__ double loss_part[kThreads];
  __shared__ long long correct_part[kThreads];
  __shared__ bool last;
  loss_part[threadIdx.x] = loss;
  correct_part[threadIdx.x] = correct;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      loss_part[threadIdx.x] += loss_part[threadIdx.x + stride];
      correct_part[threadIdx.x] += correct_part[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    block_loss[blockIdx.x] = loss_part[0];
    block_correct[blockIdx.x] = correct_part[0];
    __threadfence();
    last = atomicAdd(blocks_done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (last && threadIdx.x == 0) {
    __threadfence();
    double total = 0.0;
    long long hits = 0;
    for (unsigned b = 0; b < gridDim.x; ++b) {
      total += ((volatile double*)block_loss)[b];
      hits += ((volatile long long*)block_correct)[b];
    }
    sums->loss = total;
    sums->correct = hits;
    *blocks_done = 0;
  }
}

__global__ void softmaxCrossEntropyKernel(const float* logits, int64_t n, int64_t k,
                                          const int32_t* labels, float label_smoothing,
                                          float* grad, float grad_scale, double* block_loss,
                                          long long* block_correct, unsigned* blocks_done,
                                          LossSums* sums) {
  const int64_t row_index = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  double loss = 0.0;
  long long correct = 0;
  if (row_index < n) {
    const float* row = logits + row_index * k;
    int64_t arg_max = 0;
    for (int64_t j = 1; j < k; ++j)
      if (row[j] > row[arg_max]) arg_max = j;
    const float max = row[arg_max];
    double sum = 0.0;
    for (int64_t j = 0; j < k; ++j) sum += exp(double(row[j] - max));
    const int64_t label = labels[row_index];
    const float off_target = label_smoothing / float(k);
    const float on_target = 1.0f - label_smoothing + off_target;
    if (label_smoothing == 0.0f) {
      loss = log(sum) - double(row[label] - max);
    } else {
      double shifted_sum = 0.0;
      for (int64_t j = 0; j < k; ++j) shifted_sum += double(row[j] - max);
      loss = log(sum) - double(on_target - off_target) * double(row[label] - max) -
             double(off_target) * shifted_sum;
    }
    correct = arg_max == label;
    if (grad) {
      float* g = grad + row_index * k;
      const double inv_sum = 1.0 / sum;
      for (int64_t j = 0; j < k; ++j)
        g[j] = (float(exp(double(row[j] - max)) * inv_sum) -
                (j == label ? on_target : off_target)) *
               grad_scale;
    }
  }
  finishSums(loss, correct, block_loss, block_correct, blocks_done, sums);
}

__global__ void meanSquaredErrorKernel(const float* outputs, int64_t count, const float* targets,
                                       float* grad, float grad_scale, double* block_loss,
                                       long long* block_correct, unsigned* blocks_done,
                                       LossSums* sums) {
  double loss = 0.0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float diff = outputs[i] - targets[i];
    loss += double(diff) * double(diff);
    if (grad) grad[i] = 2.0f * diff * grad_scale;
  }
  finishSums(loss, 0, block_loss, block_correct, blocks_done, sums);
}

// ---- optimizer, reductions ----

__global__ void optimizerKernel(OptimizerSpec::Kind kind, float momentum, bool nesterov,
                                float beta1, float beta2, float rho, float epsilon,
                                float* __restrict__ p, const float* __restrict__ g,
                                float* __restrict__ a, float* __restrict__ b,
                                float* __restrict__ c, float* __restrict__ average,
                                const UpdateChunk* chunks, const StepScalars* scalars) {
  const UpdateChunk chunk = chunks[blockIdx.x];
  const float lr = scalars->learning_rate;
  const float adam_lr = scalars->adam_step_size;
  const float decay = scalars->average_decay;
  const float wd = chunk.weight_decay;
  for (int64_t i = chunk.begin + threadIdx.x; i < chunk.end; i += blockDim.x) {
    const float gi = g[i] + wd * p[i];
    switch (kind) {
      case OptimizerSpec::Kind::Sgd:
        p[i] -= lr * gi;
        break;
      case OptimizerSpec::Kind::Momentum:
        a[i] = momentum * a[i] + gi;
        p[i] -= nesterov ? lr * (gi + momentum * a[i]) : lr * a[i];
        break;
      case OptimizerSpec::Kind::Adagrad:
        a[i] += gi * gi;
        p[i] -= lr * gi / (sqrtf(a[i]) + epsilon);
        break;
      case OptimizerSpec::Kind::Adam:
        a[i] = beta1 * a[i] + (1.0f - beta1) * gi;
        b[i] = beta2 * b[i] + (1.0f - beta2) * gi * gi;
        p[i] -= adam_lr * a[i] / (sqrtf(b[i]) + epsilon);
        break;
      case OptimizerSpec::Kind::RmsProp: {
        // c (centered's mean gradient) is null unless centered.
        a[i] += (gi * gi - a[i]) * (1.0f - rho);
        float mean_square = a[i];
        if (c) {
          c[i] += (gi - c[i]) * (1.0f - rho);
          mean_square -= c[i] * c[i];
        }
        b[i] = momentum * b[i] + lr * gi / sqrtf(mean_square + epsilon);
        p[i] -= b[i];
        break;
      }
    }
    if (average) average[i] = decay * average[i] + (1.0f - decay) * p[i];
  }
}

__global__ void addIntoKernel(float* dst, const float* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] += src[i];
}

__global__ void fillKernel(float* x, int64_t n, float value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] = value;
}

// The loss kernels' workspace: per-block sums and the finished-blocks
// counter, behind the LossSums they write.
struct LossWorkspace {
  double* block_loss;
  long long* block_correct;
  unsigned* blocks_done;
};

LossWorkspace lossWorkspace(LossSums* sums) {
  // cuda_network.cc allocates lossSumsBytes(): LossSums, the counter, then
  // kMaxLossBlocks of each per-block sum.
  char* base = reinterpret_cast<char*>(sums) + 64;
  return {reinterpret_cast<double*>(base + 64),
          reinterpret_cast<long long*>(base + 64 + kMaxLossBlocks * sizeof(double)),
          reinterpret_cast<unsigned*>(base)};
}

}  // namespace

size_t lossSumsBytes() { return 128 + kMaxLossBlocks * (sizeof(double) + sizeof(long long)); }

void biasActivationForward(cudaStream_t stream, float* y, const float* bias, int64_t rows,
                           int64_t cols, Activation activation) {
  if (!bias && activation == Activation::Linear) return;
  if (fitsInt32(rows * cols))
    biasActivationKernel<int32_t><<<blocksFor(rows * cols), kThreads, 0, stream>>>(
        y, bias, int32_t(rows), int32_t(cols), activation);
  else
    biasActivationKernel<int64_t><<<blocksFor(rows * cols), kThreads, 0, stream>>>(
        y, bias, rows, cols, activation);
  checkLaunch("biasActivationKernel");
}

void activationForward(cudaStream_t stream, const float* x, float* y, int64_t n,
                       Activation activation) {
  activationKernel<<<blocksFor(n), kThreads, 0, stream>>>(x, y, n, activation);
  checkLaunch("activationKernel");
}

void activationBackward(cudaStream_t stream, const float* y, const float* dy, float* dx, int64_t n,
                        Activation activation) {
  activationBackwardKernel<<<blocksFor(n), kThreads, 0, stream>>>(y, dy, dx, n, activation);
  checkLaunch("activationBackwardKernel");
}

int64_t biasGradientWorkspace(int64_t rows, int64_t cols) {
  // Two ping-pong areas of partial sums: the first pass's and the second's.
  const int64_t first = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const int64_t second = (first + kRowsPerBlock - 1) / kRowsPerBlock;
  return (first + second) * cols;
}

void biasGradient(cudaStream_t stream, const float* y, float* dy, float* db, float* workspace,
                  int64_t rows, int64_t cols, Activation activation) {
  const bool fuse = activation != Activation::Linear;
  if (!db) {
    if (fuse) activationBackward(stream, y, dy, dy, rows * cols, activation);
    return;
  }
  const int64_t first_blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  float* areas[2] = {workspace, workspace + first_blocks * cols};
  const float* act_y = fuse ? y : nullptr;
  float* in = dy;
  int64_t remaining = rows;
  for (int pass = 0;; ++pass) {
    const int64_t blocks = (remaining + kRowsPerBlock - 1) / kRowsPerBlock;
    float* out = blocks == 1 ? db : areas[pass % 2];
    // A launch takes at most 65535 row blocks (CUDA's limit of grid.y); more
    // are taken by several launches, each writing its blocks' sums in place.
    constexpr int64_t kMaxRowBlocks = 65535;
    for (int64_t first = 0; first < blocks; first += kMaxRowBlocks) {
      const int64_t count = std::min(kMaxRowBlocks, blocks - first);
      const int64_t row = first * kRowsPerBlock;
      const dim3 grid(unsigned((cols + 31) / 32), unsigned(count));
      columnSumKernel<<<grid, dim3(32, kRowLanes), 0, stream>>>(
          act_y ? act_y + row * cols : nullptr, in + row * cols, out + first * cols,
          std::min(remaining - row, count * kRowsPerBlock), cols, activation);
      checkLaunch("columnSumKernel");
    }
    if (blocks == 1) return;
    act_y = nullptr;
    in = out;
    remaining = blocks;
  }
}

void dropoutForward(cudaStream_t stream, const float* x, float* y, int64_t n, float rate,
                    float keep, uint64_t seed, uint64_t layer, const StepScalars* scalars) {
  dropoutKernel<<<blocksFor(n), kThreads, 0, stream>>>(x, y, n, rate, keep, seed, layer, scalars);
  checkLaunch("dropoutKernel (forward)");
}

void dropoutBackward(cudaStream_t stream, const float* dy, float* dx, int64_t n, float rate,
                     float keep, uint64_t seed, uint64_t layer, const StepScalars* scalars) {
  dropoutKernel<<<blocksFor(n), kThreads, 0, stream>>>(dy, dx, n, rate, keep, seed, layer, scalars);
  checkLaunch("dropoutKernel (backward)");
}

void poolForward(cudaStream_t stream, const PoolShape& shape, const float* x, float* y,
                 int32_t* argmax) {
  const int64_t n = int64_t(shape.n) * shape.oh * shape.ow * shape.c;
  const WindowDivisors d = windowDivisors(shape);
  if (fitsInt32(int64_t(shape.n) * shape.h * shape.w * shape.c) && fitsInt32(n))
    poolForwardKernel<int32_t><<<blocksFor(n), kThreads, 0, stream>>>(shape, d, x, y, argmax);
  else
    poolForwardKernel<int64_t><<<blocksFor(n), kThreads, 0, stream>>>(shape, d, x, y, argmax);
  checkLaunch("poolForwardKernel");
}

void poolBackward(cudaStream_t stream, const PoolShape& shape, const float* dy, float* dx,
                  const int32_t* argmax) {
  const int64_t n = int64_t(shape.n) * shape.h * shape.w * shape.c;
  const WindowDivisors d = windowDivisors(shape);
  if (fitsInt32(n) && fitsInt32(int64_t(shape.n) * shape.oh * shape.ow * shape.c))
    poolBackwardKernel<int32_t><<<blocksFor(n), kThreads, 0, stream>>>(shape, d, dy, dx, argmax);
  else
    poolBackwardKernel<int64_t><<<blocksFor(n), kThreads, 0, stream>>>(shape, d, dy, dx, argmax);
  checkLaunch("poolBackwardKernel");
}

void imagePatches(cudaStream_t stream, const WindowShape& shape, const float* x, int count,
                  float* patches) {
  const int64_t total = int64_t(count) * shape.oh * shape.ow * shape.kh * shape.kw * shape.c;
  if (!fitsInt32(total))
    throw std::invalid_argument("imagePatches: over 2^31 floats of patches in one call");
  const int rows = count * shape.oh * shape.ow;
  imagePatchesKernel<<<warpBlocksFor(rows, shape.kh * shape.kw * shape.c), kThreads, 0, stream>>>(
      shape, windowDivisors(shape), x, patches, rows);
  checkLaunch("imagePatchesKernel");
}

void patchesToImage(cudaStream_t stream, const WindowShape& shape, const float* patches, int count,
                    float* dx) {
  const int64_t total = int64_t(count) * shape.h * shape.w * shape.c;
  if (!fitsInt32(total) ||
      !fitsInt32(int64_t(count) * shape.oh * shape.ow * shape.kh * shape.kw * shape.c))
    throw std::invalid_argument("patchesToImage: over 2^31 floats in one call");
  const int pixels = count * shape.h * shape.w;
  patchesToImageKernel<<<warpBlocksFor(pixels, shape.c), kThreads, 0, stream>>>(
      shape, windowDivisors(shape), patches, dx, pixels);
  checkLaunch("patchesToImageKernel");
}

void softmaxCrossEntropy(cudaStream_t stream, const float* logits, int64_t n, int64_t k,
                         const int32_t* labels, float label_smoothing, float* grad,
                         float grad_scale, LossSums* sums) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > kMaxLossBlocks)
    throw std::invalid_argument("softmaxCrossEntropy: batch too large for one step");
  const LossWorkspace w = lossWorkspace(sums);
  softmaxCrossEntropyKernel<<<unsigned(blocks), kThreads, 0, stream>>>(
      logits, n, k, labels, label_smoothing, grad, grad_scale, w.block_loss, w.block_correct,
      w.blocks_done, sums);
  checkLaunch("softmaxCrossEntropyKernel");
}

void meanSquaredError(cudaStream_t stream, const float* outputs, int64_t n, int64_t k,
                      const float* targets, float* grad, float grad_scale, LossSums* sums) {
  const int64_t count = n * k;
  int64_t blocks = (count + kThreads - 1) / kThreads;
  if (blocks > kMaxLossBlocks) blocks = kMaxLossBlocks;
  const LossWorkspace w = lossWorkspace(sums);
  meanSquaredErrorKernel<<<unsigned(blocks), kThreads, 0, stream>>>(
      outputs, count, targets, grad, grad_scale, w.block_loss, w.block_correct, w.blocks_done,
      sums);
  checkLaunch("meanSquaredErrorKernel");
}

void optimizerUpdate(cudaStream_t stream, const OptimizerSpec& spec, float* parameters,
                     const float* gradients, float* slot0, float* slot1, float* slot2,
                     float* average, const UpdateChunk* chunks, int64_t chunk_count,
                     const StepScalars* scalars) {
  if (chunk_count == 0) return;
  optimizerKernel<<<unsigned(chunk_count), kThreads, 0, stream>>>(
      spec.kind, spec.momentum, spec.nesterov, spec.beta1, spec.beta2, spec.rho, spec.epsilon,
      parameters, gradients, slot0, slot1, slot2, average, chunks, scalars);
  checkLaunch("optimizerKernel");
}

void addInto(cudaStream_t stream, float* dst, const float* src, int64_t n) {
  addIntoKernel<<<blocksFor(n), kThreads, 0, stream>>>(dst, src, n);
  checkLaunch("addIntoKernel");
}

void fill(cudaStream_t stream, float* x, int64_t n, float value) {
  fillKernel<<<blocksFor(n), kThreads, 0, stream>>>(x, n, value);
  checkLaunch("fillKernel");
}

}  // namespace traind
