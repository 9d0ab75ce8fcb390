#include "devices/cpu/memory_format.h"

#include <stdexcept>

namespace traind {

using dnnl::memory;

memory::dims batchDims(int64_t batch_size, const Shape& per_example) {
  if (per_example.size() == 1) return {batch_size, per_example[0]};
  if (per_example.size() == 3) return {batch_size, per_example[2], per_example[0], per_example[1]};
  throw std::invalid_argument(
      "CPU device: expected a vector or an image [h, w, c] per example, got " +
      shapeToString(per_example));
}

memory::desc canonicalDesc(const memory::dims& dims) {
  const memory::format_tag tag =
      dims.size() == 2 ? memory::format_tag::nc : memory::format_tag::nhwc;
  return memory::desc(dims, memory::data_type::f32, tag);
}

bool sameLayout(const memory::desc& a, const memory::desc& b) {
  if (a == b) return true;
  const dnnl_memory_desc_t& x = a.data;
  const dnnl_memory_desc_t& y = b.data;
  if (x.ndims != y.ndims || x.data_type != y.data_type || x.offset0 != y.offset0 ||
      x.format_kind != dnnl_blocked || y.format_kind != dnnl_blocked)
    return false;
  const dnnl_blocking_desc_t& xb = x.format_desc.blocking;
  const dnnl_blocking_desc_t& yb = y.format_desc.blocking;
  if (xb.inner_nblks != yb.inner_nblks) return false;
  for (int i = 0; i < xb.inner_nblks; ++i)
    if (xb.inner_blks[i] != yb.inner_blks[i] || xb.inner_idxs[i] != yb.inner_idxs[i]) return false;
  for (int d = 0; d < x.ndims; ++d) {
    if (x.dims[d] != y.dims[d] || x.padded_dims[d] != y.padded_dims[d] ||
        x.padded_offsets[d] != y.padded_offsets[d])
      return false;
    // The outer stride of a dimension matters only when it has more than one
    // outer block.
    int64_t inner = 1;
    for (int i = 0; i < xb.inner_nblks; ++i)
      if (xb.inner_idxs[i] == d) inner *= xb.inner_blks[i];
    if (x.padded_dims[d] / inner > 1 && xb.strides[d] != yb.strides[d]) return false;
  }
  return true;
}

bool isPlain(const memory::desc& desc) {
  return desc.data.format_kind == dnnl_blocked && desc.data.format_desc.blocking.inner_nblks == 0;
}

int64_t paddedFloats(const memory::desc& desc) { return int64_t(desc.get_size() / sizeof(float)); }

}  // namespace traind
