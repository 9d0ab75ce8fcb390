#include "devices/cpu/primitive_set.h"

#include <algorithm>

namespace traind {

dnnl::primitive_attr PrimitiveSet::attributes(const dnnl::post_ops& post_ops) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  attr.set_post_ops(post_ops);
  return attr;
}

const PrimitiveCall& PrimitiveSet::addReorder(const dnnl::memory& from, const dnnl::memory& to) {
  dnnl::reorder::primitive_desc pd(engine_, from.get_desc(), engine_, to.get_desc(), attributes());
  return add<dnnl::reorder>(pd, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
}

const PrimitiveCall& PrimitiveSet::add(dnnl::primitive primitive,
                                       const dnnl::memory::desc& scratchpad,
                                       PrimitiveArguments arguments) {
  const size_t bytes = scratchpad.get_size();
  scratchpad_bytes_ = std::max(scratchpad_bytes_, bytes);
  calls_.emplace_back(std::move(primitive), std::move(arguments));
  // A placeholder until allocateScratchpad: marks the calls that need one.
  if (bytes > 0) calls_.back().arguments_[DNNL_ARG_SCRATCHPAD] = dnnl::memory();
  return calls_.back();
}

void PrimitiveSet::allocateScratchpad() {
  if (scratchpad_bytes_ == 0) return;
  scratchpad_ =
      dnnl::memory(dnnl::memory::desc({dnnl::memory::dim(scratchpad_bytes_)},
                                      dnnl::memory::data_type::u8, dnnl::memory::format_tag::a),
                   engine_);
  for (PrimitiveCall& call : calls_) {
    auto it = call.arguments_.find(DNNL_ARG_SCRATCHPAD);
    if (it != call.arguments_.end()) it->second = scratchpad_;
  }
}

}  // namespace traind
