// Random distortions of training images (data.augment), applied to each
// example as the input pipeline gathers its batch, in TensorFlow 1's order:
// crop of the zero-padded image, left-right flip, brightness, contrast.
//
// What an example gets is drawn from its own generator, keyed by the seed,
// the epoch and its position in the epoch's order (not the step or the
// worker), so a run resumed from a checkpoint distorts as an uninterrupted
// one did, and the shards of a sync cluster distort the examples of a step
// exactly as a standalone run of the big batch does.
#pragma once

#include <cstdint>
#include <vector>

#include "core/model_spec.h"
#include "core/shape.h"

namespace traind {

// The generator's seed for the example at `position` of epoch `epoch`'s order.
uint64_t augmentationKey(uint64_t seed, int64_t epoch, int64_t position);

// Distorts one image of `shape` [height, width, channels] (HWC, row-major)
// in place, with the draws of `key`; `scratch` is resized to the image and
// reused between calls. Does nothing when `augment` asks for nothing.
void augmentImage(const Augmentation& augment, const Shape& shape, uint64_t key, float* image,
                  std::vector<float>& scratch);

}  // namespace traind
