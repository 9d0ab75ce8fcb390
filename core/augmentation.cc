#include "core/augmentation.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>

#include "core/image_resize.h"
#include "core/pixel_inputs.h"

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

// Writes the window of `height` x `width` of `image` (of `shape`) whose
// top-left corner is at (top, left) of the image, mirrored left to right if
// `flip`, to `out`: 0 where it lies outside the image. Cropping then
// flipping is this one gather.
void copyWindow(const float* image, const Shape& shape, int64_t top, int64_t left, int64_t height,
                int64_t width, bool flip, float* out) {
  const int64_t image_height = shape[0], image_width = shape[1], channels = shape[2];
  const size_t in_row = size_t(image_width * channels), out_row = size_t(width * channels);
  for (int64_t y = 0; y < height; ++y, out += out_row) {
    const int64_t in_y = y + top;
    if (in_y < 0 || in_y >= image_height) {
      std::fill(out, out + out_row, 0.0f);
      continue;
    }
    const float* in = image + size_t(in_y) * in_row;
    if (!flip) {
      // One run of the input row, zeros either side of it.
      const int64_t begin = std::clamp<int64_t>(-left, 0, width);
      const int64_t end = std::clamp<int64_t>(image_width - left, 0, width);
      std::fill(out, out + size_t(begin * channels), 0.0f);
      if (end > begin)
        std::memcpy(out + size_t(begin * channels), in + size_t((begin + left) * channels),
                    size_t((end - begin) * channels) * sizeof(float));
      std::fill(out + size_t(std::max(begin, end) * channels), out + out_row, 0.0f);
      continue;
    }
    // Output x is the window's column width - 1 - x.
    for (int64_t x = 0; x < width; ++x) {
      const int64_t in_x = width - 1 - x + left;
      float* pixel = out + size_t(x * channels);
      if (in_x < 0 || in_x >= image_width)
        std::fill(pixel, pixel + channels, 0.0f);
      else
        std::memcpy(pixel, in + size_t(in_x * channels), size_t(channels) * sizeof(float));
    }
  }
}

// Mirrors each of the `height` rows of `width` pixels of `channels` at
// `image` left to right, in place.
void mirrorRows(float* image, int64_t height, int64_t width, int64_t channels) {
  for (int64_t y = 0; y < height; ++y) {
    float* row = image + size_t(y * width * channels);
    for (int64_t x = 0; x < width / 2; ++x)
      std::swap_ranges(row + x * channels, row + (x + 1) * channels,
                       row + (width - 1 - x) * channels);
  }
}

// tf.image.sample_distorted_bounding_box's tries at a box.
constexpr int kBoxAttempts = 100;

// A box of aspect ratio `ratio` (its width the height times it, rounded)
// and of an area from `lower` to `upper` of the image's inside an image of
// `height` x `width`, its height drawn uniformly among those that may give
// one; nullopt where the height drawn gives none. In float, as TensorFlow
// reckons it, so that the same areas are in range: a range of one value
// gives a box only where that area is a whole number of pixels in float.
std::optional<ImageBox> boxOfRatio(int64_t height, int64_t width, float lower, float upper,
                                   float ratio, Rng& rng) {
  const float least = lower * float(width) * float(height);
  const float most = upper * float(width) * float(height);
  const auto widthOf = [ratio](int64_t h) { return int64_t(std::lrint(float(h) * ratio)); };
  const auto heightOf = [ratio](float area) {
    return int64_t(std::lrint(std::sqrt(area / ratio)));
  };
  int64_t highest = heightOf(most);
  // Not so tall that the width passes the image's: TensorFlow's epsilon
  // keeps out a height whose width would be the image's and a half.
  if (widthOf(highest) > width) {
    highest = int64_t((double(width) + 0.5 - double(1e-7f)) / double(ratio));
    if (widthOf(highest) > width) --highest;
  }
  highest = std::min(highest, height);
  int64_t box_height = std::min(heightOf(least), highest);
  box_height += int64_t(rng.below(uint64_t(highest - box_height + 1)));
  // Rounding the width may take the area just outside the range: a row more
  // or less may bring it back.
  int64_t box_width = widthOf(box_height);
  if (float(box_height * box_width) < least) box_width = widthOf(++box_height);
  if (float(box_height * box_width) > most) box_width = widthOf(--box_height);
  const float area = float(box_height * box_width);
  if (area < least || area > most || box_height < 1 || box_width < 1 || box_height > height ||
      box_width > width)
    return std::nullopt;
  return ImageBox{0, 0, box_height, box_width};
}

// TensorFlow's HSV (tf.image.rgb_to_hsv): hue in turns, [0, 1); saturation
// the channels' range over their largest; value the largest.
struct Hsv {
  float hue, saturation, value;
};

Hsv toHsv(const float* rgb) {
  const float r = rgb[0], g = rgb[1], b = rgb[2];
  const float value = std::max({r, g, b});
  const float range = value - std::min({r, g, b});
  const float saturation = value > 0.0f ? range / value : 0.0f;
  if (range <= 0.0f) return {0.0f, saturation, value};
  // The sextant of the largest channel, and where in it the others put it.
  const float norm = 1.0f / (6.0f * range);
  float hue;
  if (r == value)
    hue = norm * (g - b);
  else if (g == value)
    hue = norm * (b - r) + 2.0f / 6.0f;
  else
    hue = norm * (r - g) + 4.0f / 6.0f;
  if (hue < 0.0f) hue += 1.0f;
  return {hue, saturation, value};
}

void fromHsv(const Hsv& hsv, float* rgb) {
  const float chroma = hsv.saturation * hsv.value;
  const float lowest = hsv.value - chroma;
  const float sextants = hsv.hue * 6.0f;
  // The middle channel: chroma scaled by the distance to the sextant's edge.
  const float middle = chroma * (1.0f - std::abs(std::fmod(sextants, 2.0f) - 1.0f));
  float r = 0.0f, g = 0.0f, b = 0.0f;
  switch (int(sextants)) {
    case 0:
      r = chroma, g = middle;
      break;
    case 1:
      r = middle, g = chroma;
      break;
    case 2:
      g = chroma, b = middle;
      break;
    case 3:
      g = middle, b = chroma;
      break;
    case 4:
      r = middle, b = chroma;
      break;
    default:
      r = chroma, b = middle;
      break;
  }
  rgb[0] = r + lowest;
  rgb[1] = g + lowest;
  rgb[2] = b + lowest;
}

// The distortions of values that follow a crop or a box, in TensorFlow 1's
// order, of the `pixels` x `channels` values at `out`, drawn from `rng`.
void distortValues(const Augmentation& augment, Rng& rng, float* out, int64_t pixels,
                   int64_t channels) {
  const size_t values = size_t(pixels * channels);
  if (augment.brightness > 0.0f) {
    const float delta = uniformIn(rng, -augment.brightness, augment.brightness);
    for (size_t i = 0; i < values; ++i) out[i] += delta;
  }
  if (augment.colours()) {
    std::optional<float> saturation;
    if (augment.saturation_upper > 0.0f)
      saturation = uniformIn(rng, augment.saturation_lower, augment.saturation_upper);
    const float hue = augment.hue > 0.0f ? uniformIn(rng, -augment.hue, augment.hue) : 0.0f;
    adjustColours(out, pixels, saturation, hue);
  }
  if (augment.contrast_upper > 0.0f) {
    // tf.image.adjust_contrast: each channel's mean over the image's pixels.
    const float factor = uniformIn(rng, augment.contrast_lower, augment.contrast_upper);
    for (int64_t c = 0; c < channels; ++c) {
      double sum = 0.0;
      for (int64_t p = 0; p < pixels; ++p) sum += out[p * channels + c];
      const float mean = float(sum / double(pixels));
      for (int64_t p = 0; p < pixels; ++p) {
        float& value = out[p * channels + c];
        value = (value - mean) * factor + mean;
      }
    }
  }
}

}  // namespace

Shape augmentedShape(const Augmentation& augment, const Shape& image) {
  if (augment.crop_height == 0) return image;
  return {augment.crop_height, augment.crop_width, image[2]};
}

ImageBox distortedBox(const Augmentation& augment, int64_t height, int64_t width, Rng& rng) {
  ImageBox box{0, 0, height, width};
  for (int attempt = 0; attempt < kBoxAttempts; ++attempt) {
    const float ratio = uniformIn(rng, augment.box_aspect_lower, augment.box_aspect_upper);
    if (std::optional<ImageBox> fits =
            boxOfRatio(height, width, augment.box_area_lower, augment.box_area_upper, ratio, rng)) {
      box = *fits;
      break;
    }
  }
  // TensorFlow's corner never reaches the last place (its offsets are drawn
  // below height - box height); every place is alike here, as
  // tf.random_crop's.
  box.top = int64_t(rng.below(uint64_t(height - box.height + 1)));
  box.left = int64_t(rng.below(uint64_t(width - box.width + 1)));
  return box;
}

ScaledWindow scaledWindow(const Augmentation& augment, int64_t height, int64_t width, Rng& rng) {
  const int64_t side = augment.scale_lower +
                       int64_t(rng.below(uint64_t(augment.scale_upper - augment.scale_lower + 1)));
  ScaledWindow place;
  std::tie(place.height, place.width) = sizeWithShorterSide(height, width, side);
  place.top = int64_t(rng.below(uint64_t(place.height - augment.crop_height + 1)));
  place.left = int64_t(rng.below(uint64_t(place.width - augment.crop_width + 1)));
  return place;
}

uint64_t augmentationKey(uint64_t seed, int64_t epoch, int64_t position) {
  return hashCombine(hashCombine(hashCombine(seed, kAugmentationStream), uint64_t(epoch)),
                     uint64_t(position));
}

void augmentImage(const Augmentation& augment, const Shape& shape, uint64_t key, const float* image,
                  float* out) {
  const Shape window = augmentedShape(augment, shape);
  const int64_t height = window[0], width = window[1], channels = window[2];
  const int64_t pixels = height * width;
  Rng rng(key);
  // Draws in a fixed order, each only for a distortion asked for.
  if (augment.boxes()) {
    const ImageBox box = distortedBox(augment, shape[0], shape[1], rng);
    const int64_t row = shape[1] * channels;
    resizeBilinear(image + box.top * row + box.left * channels, row, box.height, box.width,
                   int(channels), height, width, PixelCentres::Half, out);
    if (augment.flip_left_right && rng.below(2) == 1) mirrorRows(out, height, width, channels);
  } else {
    // The window's corner is drawn in the padded image, each of its offsets
    // alike (tf.random_crop), and given in the image's own coordinates.
    const int64_t padding = augment.crop_padding;
    const auto corner = [&](int64_t image_side, int64_t window_side) {
      const uint64_t offsets = uint64_t(image_side + 2 * padding - window_side + 1);
      return augment.crops() ? int64_t(rng.below(offsets)) - padding : 0;
    };
    const int64_t top = corner(shape[0], height);
    const int64_t left = corner(shape[1], width);
    const bool flip = augment.flip_left_right && rng.below(2) == 1;
    copyWindow(image, shape, top, left, height, width, flip, out);
  }

  distortValues(augment, rng, out, pixels, channels);
}

void augmentDecodedImage(const Augmentation& augment, const Shape& shape, PixelCentres centres,
                         uint64_t key, const uint8_t* image, float* out) {
  const Shape window = augmentedShape(augment, shape);
  const int64_t height = window[0], width = window[1], channels = window[2];
  Rng rng(key);
  // Draws in augmentImage's order.
  if (augment.boxes()) {
    const ImageBox box = distortedBox(augment, shape[0], shape[1], rng);
    const int64_t row = shape[1] * channels;
    resizeBilinear(image + box.top * row + box.left * channels, row, box.height, box.width,
                   int(channels), height, width, centres, out);
  } else {
    const ScaledWindow place = scaledWindow(augment, shape[0], shape[1], rng);
    resizeBilinearPart(image, shape[0], shape[1], int(channels), place.height, place.width,
                       place.top, place.left, height, width, centres, out);
  }
  scalePixelsToInputs(out, size_t(height * width * channels));
  if (augment.flip_left_right && rng.below(2) == 1) mirrorRows(out, height, width, channels);
  distortValues(augment, rng, out, height * width, channels);
}

void adjustColours(float* rgb, int64_t pixels, std::optional<float> saturation, float hue) {
  // TensorFlow makes a round trip through HSV for each adjustment.
  for (int64_t p = 0; p < pixels; ++p, rgb += 3) {
    Hsv hsv = toHsv(rgb);
    if (saturation) hsv.saturation = std::clamp(hsv.saturation * *saturation, 0.0f, 1.0f);
    hsv.hue += hue;
    hsv.hue -= std::floor(hsv.hue);
    fromHsv(hsv, rgb);
  }
}

void centreWindow(const Shape& shape, const Shape& window, const float* image, float* out) {
  copyWindow(image, shape, (shape[0] - window[0]) / 2, (shape[1] - window[1]) / 2, window[0],
             window[1], /*flip=*/false, out);
}

}  // namespace traind
