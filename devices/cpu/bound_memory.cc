#include "devices/cpu/bound_memory.h"

#include <stdexcept>

namespace traind {

namespace {

void checkSpansVariable(const dnnl::memory::desc& desc, const VariableView& variable) {
  if (desc.get_size() != size_t(variable.size) * sizeof(float))
    throw std::logic_error("CPU device: memory of " + std::to_string(desc.get_size()) +
                           " bytes over variable " + variable.name + " of " +
                           std::to_string(variable.size) + " floats");
}

}  // namespace

dnnl::memory BoundMemory::allocate(const dnnl::memory::desc& desc) const {
  return dnnl::memory(desc, engine_);
}

dnnl::memory BoundMemory::input(const dnnl::memory::desc& desc) {
  inputs_.emplace_back(desc, engine_, nullptr);
  return inputs_.back();
}

dnnl::memory BoundMemory::external(const dnnl::memory::desc& desc) const {
  return dnnl::memory(desc, engine_, nullptr);
}

dnnl::memory BoundMemory::parameter(const dnnl::memory::desc& desc, const VariableView& variable) {
  checkSpansVariable(desc, variable);
  parameters_.push_back({dnnl::memory(desc, engine_, nullptr), variable.offset});
  return parameters_.back().memory;
}

dnnl::memory BoundMemory::gradient(const dnnl::memory::desc& desc, const VariableView& variable) {
  checkSpansVariable(desc, variable);
  gradients_.push_back({dnnl::memory(desc, engine_, nullptr), variable.offset});
  return gradients_.back().memory;
}

dnnl::memory BoundMemory::alias(const dnnl::memory& origin, const dnnl::memory::desc& desc) {
  aliases_.push_back({dnnl::memory(desc, engine_, origin.get_data_handle()), origin});
  return aliases_.back().memory;
}

void BoundMemory::bind(const float* inputs, const float* parameters, float* gradients,
                       int64_t gradients_origin) {
  // oneDNN never writes through the memory of a primitive's source or
  // weights, so the const_casts only satisfy its interface.
  for (dnnl::memory& m : inputs_) m.set_data_handle(const_cast<float*>(inputs));
  for (VariableSlice& p : parameters_)
    p.memory.set_data_handle(const_cast<float*>(parameters) + p.offset);
  if (gradients)
    for (VariableSlice& g : gradients_)
      g.memory.set_data_handle(gradients + (g.offset - gradients_origin));
  for (Alias& a : aliases_) a.memory.set_data_handle(a.origin.get_data_handle());
}

}  // namespace traind
