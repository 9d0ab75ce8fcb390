// Activations as oneDNN eltwise operations: fused into dense and conv
// forward as a post-op, and their backward as an eltwise primitive that
// reads the activation's output (dst), so the pre-activation values need not
// be kept.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include "core/model_spec.h"
#include "devices/cpu/primitive_set.h"

namespace traind {

// The post-ops that apply `activation` to a primitive's output; none for Linear.
dnnl::post_ops activationPostOps(Activation activation);

// The eltwise algorithm of a non-linear activation, in its variant whose
// backward reads dst (same forward values as the plain one).
dnnl::algorithm eltwiseAlgorithm(Activation activation);

// Adds diff_src = f'(dst) * diff_dst for a non-linear activation; diff_src
// may be diff_dst itself (in place). All three share one format.
const PrimitiveCall& addActivationBackward(PrimitiveSet& primitives, Activation activation,
                                           const dnnl::memory& dst, const dnnl::memory& diff_dst,
                                           const dnnl::memory& diff_src);

}  // namespace traind
