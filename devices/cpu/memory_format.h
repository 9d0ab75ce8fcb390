// Memory descriptions shared by the CPU layers: the canonical (TensorFlow)
// layout of a batch of activations, and when two descriptions name the same
// bytes so that one buffer can serve both without a reorder.
#pragma once

#include <cstdint>
#include <oneapi/dnnl/dnnl.hpp>

#include "core/shape.h"

namespace traind {

// oneDNN dims of a batch of `per_example`-shaped tensors: [n, features] for a
// vector, [n, c, h, w] for an image [h, w, c] (oneDNN orders dims NCHW
// whatever the layout in memory).
dnnl::memory::dims batchDims(int64_t batch_size, const Shape& per_example);

// The canonical layout of `dims` (from batchDims): nc for vectors, nhwc for
// images, so that element i in memory is element i of the row-major
// TensorFlow tensor.
dnnl::memory::desc canonicalDesc(const dnnl::memory::dims& dims);

// True when a and b describe the same element at the same byte for every
// index: equal descriptions, or plain layouts that differ only in the stride
// of a dimension of size 1 (nchw and nhwc with one channel).
bool sameLayout(const dnnl::memory::desc& a, const dnnl::memory::desc& b);

// True for a row-major layout of some permutation of the dims, no blocking.
bool isPlain(const dnnl::memory::desc& desc);

// Number of floats the description spans, blocking padding included.
int64_t paddedFloats(const dnnl::memory::desc& desc);

}  // namespace traind
