// The memory objects of one replica. Activations are allocated once by
// oneDNN; parameters, gradients and the batch's inputs live in buffers the
// caller owns, so their memory objects are re-pointed at the start of every
// step (bind), and so are aliases: another description of the same bytes.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "core/variable_layout.h"

namespace traind {

class BoundMemory {
 public:
  explicit BoundMemory(dnnl::engine engine) : engine_(std::move(engine)) {}
  BoundMemory(const BoundMemory&) = delete;
  BoundMemory& operator=(const BoundMemory&) = delete;

  // A buffer of its own, allocated now.
  dnnl::memory allocate(const dnnl::memory::desc& desc) const;
  // Over Batch::inputs.
  dnnl::memory input(const dnnl::memory::desc& desc);
  // Over a buffer its owner points it at (set_data_handle) before bind(),
  // which leaves it as it is and re-points the aliases over it: a pipeline
  // stage's input and input gradient, the previous stage's buffers.
  dnnl::memory external(const dnnl::memory::desc& desc) const;
  // Over the variable's slice of the parameters, or of the gradients;
  // `desc` must span exactly the variable's elements.
  dnnl::memory parameter(const dnnl::memory::desc& desc, const VariableView& variable);
  dnnl::memory gradient(const dnnl::memory::desc& desc, const VariableView& variable);
  // The bytes of `origin` under another description; follows origin when it
  // is re-pointed.
  dnnl::memory alias(const dnnl::memory& origin, const dnnl::memory::desc& desc);

  // Points every bound memory object at this step's buffers; gradients may be
  // null (evaluation), which leaves gradient memory objects unbound.
  // `gradients` holds the floats of the layout from gradients_origin on (a
  // pipeline stage accumulates the gradients of its variables in a buffer
  // of their span only).
  void bind(const float* inputs, const float* parameters, float* gradients,
            int64_t gradients_origin = 0);

 private:
  struct VariableSlice {
    dnnl::memory memory;
    int64_t offset;  // floats
  };
  struct Alias {
    dnnl::memory memory;
    dnnl::memory origin;
  };

  dnnl::engine engine_;
  std::vector<dnnl::memory> inputs_;
  std::vector<VariableSlice> parameters_;
  std::vector<VariableSlice> gradients_;
  std::vector<Alias> aliases_;  // in creation order: an alias of an alias follows its origin
};

}  // namespace traind
