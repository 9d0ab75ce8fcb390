// Where each variable lives inside a flat buffer. Parameters, gradients and
// every optimizer slot of a model share this one layout: one optimizer pass
// over the whole buffer, one write per checkpoint, contiguous slices for
// parameter-server shards.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/layer_graph.h"

namespace traind {

struct VariableView {
  std::string name;
  Shape shape;
  int64_t offset = 0;  // in floats; a multiple of kVariableAlignment
  int64_t size = 0;    // numElements(shape)
  bool trainable = true;
  bool is_kernel = false;
  std::optional<float> weight_decay;  // VariableSpec's: a kernel's layer's own
};

// The L2 decay an update applies to `v`: its layer's own, else
// `optimizer_decay` (OptimizerSpec::weight_decay) for a kernel; 0 for a bias.
inline float weightDecayOf(const VariableView& v, float optimizer_decay) {
  if (!v.is_kernel) return 0.0f;
  return v.weight_decay.value_or(optimizer_decay);
}

class VariableLayout {
 public:
  // Each variable starts on a 64-byte boundary so that devices can use it in place.
  static constexpr int64_t kVariableAlignment = 16;

  explicit VariableLayout(const std::vector<VariableSpec>& variables);

  const std::vector<VariableView>& views() const { return views_; }
  // nullptr when no variable has that name.
  const VariableView* find(const std::string& name) const;
  // Floats a flat buffer of this layout holds, padding included.
  int64_t totalSize() const { return total_size_; }

 private:
  std::vector<VariableView> views_;
  int64_t total_size_ = 0;
};

// A 64-byte aligned float buffer that is never resized: its own memory,
// zero-initialised, or memory it is given (over()).
class FlatBuffer {
 public:
  FlatBuffer() = default;
  explicit FlatBuffer(int64_t size);
  // A buffer over `size` floats at `data` that it does not own (a worker's
  // shared memory region, rpc/shared_region.h): `data` must be 64-byte
  // aligned, as a FlatBuffer's own memory is, and outlive it.
  static FlatBuffer over(float* data, int64_t size);

  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  int64_t size() const { return size_; }
  std::span<float> view(const VariableView& v) { return {data() + v.offset, size_t(v.size)}; }
  std::span<const float> view(const VariableView& v) const {
    return {data() + v.offset, size_t(v.size)};
  }

 private:
  struct AlignedFree {
    AlignedFree() : owned(true) {}
    explicit AlignedFree(bool owns) : owned(owns) {}
    bool owned;  // false: memory FlatBuffer::over was given
    void operator()(float* p) const;
  };
  std::unique_ptr<float[], AlignedFree> data_;
  int64_t size_ = 0;
};

// Fills every variable from its initializer. Deterministic in (seed, variable
// name): adding a layer does not change the others' initial values.
void initializeVariables(const LayerGraph& graph, const VariableLayout& layout, uint64_t seed,
                         FlatBuffer& parameters);

}  // namespace traind
