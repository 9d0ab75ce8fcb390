#include "core/augmentation.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/random.h"

namespace traind {
namespace {

// So that augmentation draws nothing a shuffle with the same seed draws.
constexpr uint64_t kAugmentationStream = hashString("augmentation");

// Uniform in [low, high), as TensorFlow's random_uniform draws its factors:
// in double, and kept below `high`, which rounding to float could reach.
float uniformIn(Rng& rng, float low, float high) {
  const float value = float(double(low) + (double(high) - double(low)) * rng.uniform());
  return value < high ? value : std::nextafter(high, low);
}

}  // namespace

uint64_t augmentationKey(uint64_t seed, int64_t epoch, int64_t position) {
  return hashCombine(hashCombine(hashCombine(seed, kAugmentationStream), uint64_t(epoch)),
                     uint64_t(position));
}

void augmentImage(const Augmentation& augment, const Shape& shape, uint64_t key, float* image,
                  std::vector<float>& scratch) {
  if (!augment.any()) return;
  const int64_t height = shape[0], width = shape[1], channels = shape[2];
  const size_t values = size_t(height * width * channels);
  Rng rng(key);
  // Draws in a fixed order, each only for a distortion asked for.
  const int64_t padding = augment.crop_padding;
  const int64_t top = padding > 0 ? int64_t(rng.below(uint64_t(2 * padding + 1))) - padding : 0;
  const int64_t left = padding > 0 ? int64_t(rng.below(uint64_t(2 * padding + 1))) - padding : 0;
  const bool flip = augment.flip_left_right && rng.below(2) == 1;

  if (padding > 0 || flip) {
    // Output (y, x) is the padded image's (y + top + padding, x' + left +
    // padding), x' = x or mirrored: the input's (y + top, x' + left), or 0
    // outside it. Cropping then flipping is this one gather.
    scratch.assign(image, image + values);
    const size_t row = size_t(width * channels);
    for (int64_t y = 0; y < height; ++y) {
      float* out = image + size_t(y) * row;
      const int64_t in_y = y + top;
      if (in_y < 0 || in_y >= height) {
        std::fill(out, out + row, 0.0f);
        continue;
      }
      const float* in = scratch.data() + size_t(in_y) * row;
      if (!flip) {
        // One run of the input row, zeros either side of it.
        const int64_t begin = std::clamp<int64_t>(-left, 0, width);
        const int64_t end = std::clamp<int64_t>(width - left, 0, width);
        std::fill(out, out + size_t(begin * channels), 0.0f);
        if (end > begin)
          std::memcpy(out + size_t(begin * channels), in + size_t((begin + left) * channels),
                      size_t((end - begin) * channels) * sizeof(float));
        std::fill(out + size_t(std::max(begin, end) * channels), out + row, 0.0f);
        continue;
      }
      for (int64_t x = 0; x < width; ++x) {
        const int64_t in_x = width - 1 - x + left;
        float* pixel = out + size_t(x * channels);
        if (in_x < 0 || in_x >= width)
          std::fill(pixel, pixel + channels, 0.0f);
        else
          std::memcpy(pixel, in + size_t(in_x * channels), size_t(channels) * sizeof(float));
      }
    }
  }
  if (augment.brightness > 0.0f) {
    const float delta = uniformIn(rng, -augment.brightness, augment.brightness);
    for (size_t i = 0; i < values; ++i) image[i] += delta;
  }
  if (augment.contrast_upper > 0.0f) {
    // tf.image.adjust_contrast: each channel's mean over the image's pixels.
    const float factor = uniformIn(rng, augment.contrast_lower, augment.contrast_upper);
    const int64_t pixels = height * width;
    for (int64_t c = 0; c < channels; ++c) {
      double sum = 0.0;
      for (int64_t p = 0; p < pixels; ++p) sum += image[p * channels + c];
      const float mean = float(sum / double(pixels));
      for (int64_t p = 0; p < pixels; ++p) {
        float& value = image[p * channels + c];
        value = (value - mean) * factor + mean;
      }
    }
  }
}

}  // namespace traind
