#include "core/augmentation.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <numeric>
#include <stdexcept>

#include "core/dataset.h"
#include "core/input_pipeline.h"

namespace traind {
namespace {

constexpr int kDraws = 400;

// An image of `shape` whose values are all different and positive, so that
// where each output value came from, or that it is padding (0), shows.
std::vector<float> distinctImage(const Shape& shape) {
  std::vector<float> image(size_t(numElements(shape)));
  std::iota(image.begin(), image.end(), 1.0f);
  return image;
}

std::vector<float> augmented(const Augmentation& augment, const Shape& shape,
                             const std::vector<float>& image, uint64_t key) {
  std::vector<float> out = image, scratch;
  augmentImage(augment, shape, key, out.data(), scratch);
  return out;
}

// `image` shifted by (top, left) and mirrored if `flip`: output (y, x) is
// input (y + top, x' + left), x' = x or width - 1 - x, 0 outside the input.
std::vector<float> shifted(const std::vector<float>& image, const Shape& shape, int64_t top,
                           int64_t left, bool flip) {
  const int64_t height = shape[0], width = shape[1], channels = shape[2];
  std::vector<float> out(image.size(), 0.0f);
  for (int64_t y = 0; y < height; ++y)
    for (int64_t x = 0; x < width; ++x) {
      const int64_t in_y = y + top, in_x = (flip ? width - 1 - x : x) + left;
      if (in_y < 0 || in_y >= height || in_x < 0 || in_x >= width) continue;
      for (int64_t c = 0; c < channels; ++c)
        out[size_t((y * width + x) * channels + c)] =
            image[size_t((in_y * width + in_x) * channels + c)];
    }
  return out;
}

// A data set of `size` images of `shape`, each value distinct, labels i % 3.
Dataset floatImages(const Shape& shape, int64_t size) {
  Dataset data;
  data.example_shape = shape;
  data.size = size;
  data.floats.resize(size_t(size * numElements(shape)));
  std::iota(data.floats.begin(), data.floats.end(), 1.0f);
  for (int64_t i = 0; i < size; ++i) data.labels.push_back(int32_t(i % 3));
  data.num_classes = 3;
  return data;
}

std::vector<float> batchInputs(const Batch& batch, int64_t example_floats) {
  return std::vector<float>(batch.inputs, batch.inputs + batch.size * example_floats);
}

}  // namespace

TEST_CASE("random_crop takes a window of the zero-padded image at every offset", "[augmentation]") {
  // Cropping and flipping are one gather; with flip_left_right as well, the
  // window is mirrored in about half the draws.
  const bool flip = GENERATE(false, true);
  const Shape shape{5, 6, 2};
  const std::vector<float> image = distinctImage(shape);
  Augmentation augment;
  augment.crop_padding = 2;
  augment.flip_left_right = flip;
  std::map<std::tuple<int64_t, int64_t, bool>, int> seen;
  for (uint64_t key = 0; key < kDraws; ++key) {
    const std::vector<float> out = augmented(augment, shape, image, key);
    int matches = 0;
    for (int64_t top = -2; top <= 2; ++top)
      for (int64_t left = -2; left <= 2; ++left)
        for (bool mirrored : {false, true})
          if (out == shifted(image, shape, top, left, mirrored)) {
            ++matches;
            ++seen[{top, left, mirrored}];
          }
    INFO("key " << key);
    REQUIRE(matches == 1);
  }
  // 25 offsets (x 2 flips), each drawn: about 16 (or 8) times in 400.
  CHECK(seen.size() == (flip ? 50u : 25u));
  for (const auto& [offset, count] : seen) CHECK(count >= 2);
}

TEST_CASE("flip_left_right mirrors about half the images and leaves the rest", "[augmentation]") {
  const Shape shape{3, 4, 3};
  const std::vector<float> image = distinctImage(shape);
  Augmentation augment;
  augment.flip_left_right = true;
  int mirrored = 0;
  for (uint64_t key = 0; key < kDraws; ++key) {
    const std::vector<float> out = augmented(augment, shape, image, key);
    const bool is_mirrored = out == shifted(image, shape, 0, 0, true);
    REQUIRE((is_mirrored || out == image));
    mirrored += is_mirrored;
  }
  // Binomial(400, 1/2): 200 +- 10; 150 and 250 are 5 deviations away.
  CHECK(mirrored > 150);
  CHECK(mirrored < 250);
}

TEST_CASE("brightness adds one delta, up to the largest change, to every value", "[augmentation]") {
  const Shape shape{2, 3, 1};
  const std::vector<float> image = distinctImage(shape);
  Augmentation augment;
  augment.brightness = 0.25f;
  float lowest = 1.0f, highest = -1.0f;
  for (uint64_t key = 0; key < kDraws; ++key) {
    const std::vector<float> out = augmented(augment, shape, image, key);
    const float delta = out[0] - image[0];
    for (size_t i = 0; i < image.size(); ++i)
      REQUIRE(out[i] == Approx(image[i] + delta).margin(1e-6));
    REQUIRE(delta >= -0.25f);
    REQUIRE(delta < 0.25f);
    lowest = std::min(lowest, delta);
    highest = std::max(highest, delta);
  }
  CHECK(lowest < -0.2f);
  CHECK(highest > 0.2f);
}

TEST_CASE("contrast moves each channel from its mean by one factor between the bounds",
          "[augmentation]") {
  // tf.image.adjust_contrast: (x - mean) * factor + mean, the mean of each
  // channel over the image's pixels, one factor for all channels.
  const Shape shape{2, 2, 2};
  const std::vector<float> image{0.1f, 0.9f, 0.3f, 0.5f, 0.5f, 0.2f, 0.7f, 0.2f};
  const float means[2] = {(0.1f + 0.3f + 0.5f + 0.7f) / 4, (0.9f + 0.5f + 0.2f + 0.2f) / 4};
  Augmentation augment;
  augment.contrast_lower = 0.5f;
  augment.contrast_upper = 1.5f;
  float lowest = 2.0f, highest = 0.0f;
  for (uint64_t key = 0; key < kDraws; ++key) {
    const std::vector<float> out = augmented(augment, shape, image, key);
    const float factor = (out[0] - means[0]) / (image[0] - means[0]);
    for (size_t i = 0; i < image.size(); ++i)
      REQUIRE(out[i] == Approx((image[i] - means[i % 2]) * factor + means[i % 2]).margin(1e-6));
    REQUIRE(factor >= 0.5f - 1e-5f);
    REQUIRE(factor < 1.5f + 1e-5f);
    lowest = std::min(lowest, factor);
    highest = std::max(highest, factor);
  }
  CHECK(lowest < 0.6f);
  CHECK(highest > 1.4f);
}

TEST_CASE("an image's distortion is a function of its key alone", "[augmentation]") {
  const Shape shape{4, 4, 1};
  const std::vector<float> image = distinctImage(shape);
  Augmentation augment;
  augment.crop_padding = 1;
  augment.flip_left_right = true;
  augment.brightness = 0.1f;
  augment.contrast_lower = 0.8f;
  augment.contrast_upper = 1.2f;
  CHECK(augmented(augment, shape, image, 7) == augmented(augment, shape, image, 7));
  CHECK(augmented(augment, shape, image, 7) != augmented(augment, shape, image, 8));
  CHECK(augmentationKey(1, 0, 5) != augmentationKey(1, 1, 5));
  CHECK(augmentationKey(1, 0, 5) != augmentationKey(2, 0, 5));
  CHECK(augmentationKey(1, 0, 5) != augmentationKey(1, 0, 6));
  // Nothing asked for: the image as it was.
  CHECK(augmented(Augmentation{}, shape, image, 7) == image);
}

TEST_CASE("the shards of a sync step distort their examples as the big batch does",
          "[augmentation][pipeline]") {
  const Shape shape{4, 4, 1};
  const Dataset data = floatImages(shape, 48);
  Augmentation augment;
  augment.crop_padding = 1;
  augment.flip_left_right = true;
  augment.brightness = 0.1f;
  const int64_t floats = numElements(shape);
  // 2 workers of batch 4 against a batch of 8, over three epochs (6 steps each).
  InputPipeline big(data, 8, true, 11, 0, 0, 0, 1, augment);
  InputPipeline shard0(data, 4, true, 11, 0, 2, 0, 2, augment);
  InputPipeline shard1(data, 4, true, 11, 0, 0, 1, 2, augment);
  bool distorted = false;
  for (int step = 0; step < 18; ++step) {
    const std::vector<float> whole = batchInputs(big.next(), floats);
    std::vector<float> halves = batchInputs(shard0.next(), floats);
    const std::vector<float> second = batchInputs(shard1.next(), floats);
    halves.insert(halves.end(), second.begin(), second.end());
    INFO("step " << step);
    REQUIRE(whole == halves);
    // The first example's undistorted values are consecutive integers.
    distorted |= whole[1] - whole[0] != 1.0f;
  }
  CHECK(distorted);

  // Resumed at step 7 (the second epoch): what the uninterrupted run saw.
  InputPipeline uninterrupted(data, 8, true, 11, 0, 0, 0, 1, augment);
  for (int step = 0; step < 7; ++step) uninterrupted.next();
  InputPipeline resumed(data, 8, true, 11, 7, 3, 0, 1, augment);
  for (int step = 7; step < 14; ++step)
    REQUIRE(batchInputs(uninterrupted.next(), floats) == batchInputs(resumed.next(), floats));
}

TEST_CASE("standardization comes after the distortions: brightness is undone by it",
          "[augmentation][pipeline]") {
  // As in TensorFlow 1's pipelines: one value added to a whole image is
  // taken away again with its mean.
  Dataset data = floatImages({4, 4, 1}, 8);
  for (float& value : data.floats) value /= 128.0f;  // pixels' scale, distinct
  data.per_image_standardization = true;
  Augmentation brighter;
  brighter.brightness = 0.3f;
  InputPipeline distorted(data, 8, false, 3, 0, 0, 0, 1, brighter);
  InputPipeline plain(data, 8, false, 3, 0, 0);
  const std::vector<float> a = batchInputs(distorted.next(), 16), b = batchInputs(plain.next(), 16);
  for (size_t i = 0; i < a.size(); ++i) REQUIRE(a[i] == Approx(b[i]).margin(1e-4));
}

TEST_CASE("augmentation of examples that are not images is refused", "[augmentation]") {
  Augmentation augment;
  augment.flip_left_right = true;
  const Dataset flat = floatImages({16}, 8);
  CHECK_THROWS_AS(InputPipeline(flat, 4, true, 1, 0, 0, 0, 1, augment), std::invalid_argument);
  CHECK_NOTHROW(InputPipeline(flat, 4, true, 1, 0, 0, 0, 1, Augmentation{}));
}

}  // namespace traind
