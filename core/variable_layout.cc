#include "core/variable_layout.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "core/random.h"

namespace traind {

VariableLayout::VariableLayout(const std::vector<VariableSpec>& variables) {
  int64_t offset = 0;
  for (const VariableSpec& spec : variables) {
    VariableView v;
    v.name = spec.name;
    v.shape = spec.shape;
    v.offset = offset;
    v.size = numElements(spec.shape);
    v.trainable = spec.trainable;
    v.is_kernel = spec.is_kernel;
    v.weight_decay = spec.weight_decay;
    offset += (v.size + kVariableAlignment - 1) / kVariableAlignment * kVariableAlignment;
    views_.push_back(std::move(v));
  }
  total_size_ = offset;
}

const VariableView* VariableLayout::find(const std::string& name) const {
  for (const VariableView& v : views_)
    if (v.name == name) return &v;
  return nullptr;
}

void FlatBuffer::AlignedFree::operator()(float* p) const {
  if (owned) std::free(p);
}

FlatBuffer FlatBuffer::over(float* data, int64_t size) {
  if (reinterpret_cast<uintptr_t>(data) % 64 != 0)
    throw std::invalid_argument("FlatBuffer::over: memory not 64-byte aligned");
  FlatBuffer buffer;
  buffer.data_ = std::unique_ptr<float[], AlignedFree>(data, AlignedFree{false});
  buffer.size_ = size;
  return buffer;
}

FlatBuffer::FlatBuffer(int64_t size) : size_(size) {
  size_t bytes = (size_t(size) * sizeof(float) + 63) / 64 * 64;
  if (bytes == 0) bytes = 64;
  auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  data_.reset(p);
}

namespace {

// A draw of a normal of `stddev` about 0, truncated at two of its
// deviations (drawn again beyond), as TensorFlow's truncated normals are.
float truncatedNormalDraw(Rng& rng, double stddev) {
  double z = rng.normal();
  while (std::abs(z) > 2.0) z = rng.normal();
  return float(z * stddev);
}

}  // namespace

void initializeVariables(const LayerGraph& graph, const VariableLayout& layout, uint64_t seed,
                         FlatBuffer& parameters) {
  for (size_t i = 0; i < graph.variables.size(); ++i) {
    const VariableSpec& spec = graph.variables[i];
    std::span<float> out = parameters.view(layout.views()[i]);
    const double fan_in = double(spec.fan_in), fan_out = double(spec.fan_out);
    using Kind = InitializerSpec::Kind;
    const Kind kind = spec.initializer.kind;
    if (kind == Kind::Zeros || kind == Kind::Constant) {
      for (float& x : out) x = kind == Kind::Zeros ? 0.0f : spec.initializer.value;
      continue;
    }
    Rng rng(hashCombine(seed, hashString(spec.name)));
    // TensorFlow 1's truncated_normal_initializer and random_normal_initializer
    // (mean 0): the deviation as given, the truncated one not widened.
    if (kind == Kind::TruncatedNormal) {
      for (float& x : out) x = truncatedNormalDraw(rng, spec.initializer.value);
      continue;
    }
    if (kind == Kind::RandomNormal) {
      for (float& x : out) x = float(rng.normal() * spec.initializer.value);
      continue;
    }
    // Keras' VarianceScaling (TensorFlow 1's glorot and he initialisers
    // alike): glorot scale 1/avg(fan_in, fan_out), he scale 2/fan_in; uniform
    // in +-sqrt(3*scale); normal truncated at two of its standard deviations
    // (drawn again beyond), that deviation widened by 1/0.8796... so that the
    // values' standard deviation is sqrt(scale).
    const bool glorot = kind == Kind::GlorotUniform || kind == Kind::GlorotNormal;
    const bool uniform = kind == Kind::GlorotUniform || kind == Kind::HeUniform;
    const double scale = glorot ? 2.0 / (fan_in + fan_out) : 2.0 / fan_in;
    if (uniform) {
      const double limit = std::sqrt(3.0 * scale);
      for (float& x : out) x = float((2.0 * rng.uniform() - 1.0) * limit);
      continue;
    }
    // The standard deviation of a standard normal truncated to [-2, 2].
    constexpr double kTruncatedStddev = 0.87962566103423978;
    const double stddev = std::sqrt(scale) / kTruncatedStddev;
    for (float& x : out) x = truncatedNormalDraw(rng, stddev);
  }
}

}  // namespace traind
