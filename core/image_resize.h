// Images resized to a model's input as TensorFlow resizes them, for data
// sets whose images come in sizes of their own (JPEG photographs).
#pragma once

#include <cstdint>

namespace traind {

// Resizes the `height` x `width` x `channels` bytes at `in` to `out_height`
// x `out_width` x `channels` floats at `out` (values from 0 to 255, not
// rounded), as TensorFlow 2's tf.image.resize(image, [out_height,
// out_width]) does with its default bilinear method: half-pixel centres,
// no antialiasing, in float arithmetic.
void resizeBilinear(const uint8_t* in, int64_t height, int64_t width, int channels,
                    int64_t out_height, int64_t out_width, float* out);

}  // namespace traind
