// Pixels as a model's inputs: each pixel (0 to 255) divided by 255, as
// torchvision's ToTensor and TensorFlow's convert_image_dtype make them.
// Every path from an image to a batch (pixels kept in memory, read again
// from their files, resized, cropped at random) ends here, so that an image
// gives the same inputs whichever path it takes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace traind {

// `count` pixels as inputs into `out`. A division, not a multiplication
// by 1 / 255, which rounds some pixels differently: the inputs are the
// quotients ToTensor gives. The loop vectorises.
inline void pixelsToInputs(const uint8_t* pixels, size_t count, float* out) {
  for (size_t i = 0; i < count; ++i) out[i] = float(pixels[i]) / 255.0f;
}

// `count` pixel values already floats (a resize's, 0 to 255) made inputs
// in place, by the same division.
inline void scalePixelsToInputs(float* values, size_t count) {
  for (size_t i = 0; i < count; ++i) values[i] /= 255.0f;
}

}  // namespace traind
