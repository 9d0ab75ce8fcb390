// Gradient clipping by global norm: TensorFlow's tf.clip_by_global_norm
// between compute_gradients and apply_gradients, as TensorFlow 1 jobs clip.
// Whoever holds a step's whole gradient clips it: standalone training before
// its update, a worker before its push (each worker's own gradient, as each
// TensorFlow worker clipped its own before SyncReplicasOptimizer averaged
// them). The update rule never sees it.
#pragma once

#include <cstdint>

#include "core/variable_layout.h"

namespace traind {

// Scales the gradient of every trainable variable by clip_norm / global norm
// when that norm exceeds clip_norm, and returns the norm before clipping.
//
// TensorFlow clips the gradient of the loss with its L2 penalty; traind's
// weight decay is part of the update rule instead (g + weight_decay ×
// kernel, applied where the parameters live). So the norm is that of
// g + weight_decay × kernel, and a kernel's gradient becomes
// s g + (s - 1) weight_decay × kernel, which the rule's own weight_decay ×
// kernel brings to s (g + weight_decay × kernel): TensorFlow's clipped
// gradient, exactly when the rule updates the values the gradient was
// computed at (`parameters`): standalone with one step in flight, a sync
// worker. Where they moved meanwhile (async, concurrent steps) the rule's
// decay is of the moved values, as it is without clipping.
//
// Throws Diverged when the norm is not finite (a gradient overflowed), naming
// `global_step`, and leaves the gradient as it was: TensorFlow would apply
// NaN to every variable.
// `weight_decay` is the optimizer's (weightDecayOf gives each variable's).
double clipByGlobalNorm(float* gradients, const float* parameters, const VariableLayout& layout,
                        float clip_norm, float weight_decay, int64_t global_step);

}  // namespace traind
