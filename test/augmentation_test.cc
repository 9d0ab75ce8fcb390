#include "core/augmentation.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <numeric>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "core/dataset.h"
#include "core/image_resize.h"
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
  std::vector<float> out(size_t(numElements(augmentedShape(augment, shape))));
  augmentImage(augment, shape, key, image.data(), out.data());
  return out;
}

// The window of `height` x `width` of `image` whose corner is at (top,
// left), mirrored if `flip`: output (y, x) is input (y + top, x' + left),
// x' = x or width - 1 - x, 0 outside the input.
std::vector<float> windowAt(const std::vector<float>& image, const Shape& shape, int64_t height,
                            int64_t width, int64_t top, int64_t left, bool flip) {
  const int64_t channels = shape[2];
  std::vector<float> out(size_t(height * width * channels), 0.0f);
  for (int64_t y = 0; y < height; ++y)
    for (int64_t x = 0; x < width; ++x) {
      const int64_t in_y = y + top, in_x = (flip ? width - 1 - x : x) + left;
      if (in_y < 0 || in_y >= shape[0] || in_x < 0 || in_x >= shape[1]) continue;
      for (int64_t c = 0; c < channels; ++c)
        out[size_t((y * width + x) * channels + c)] =
            image[size_t((in_y * shape[1] + in_x) * channels + c)];
    }
  return out;
}

// `image` shifted by (top, left) and mirrored if `flip`, its size kept.
std::vector<float> shifted(const std::vector<float>& image, const Shape& shape, int64_t top,
                           int64_t left, bool flip) {
  return windowAt(image, shape, shape[0], shape[1], top, left, flip);
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

TEST_CASE("random_crop with a size takes a window of it at every offset of the padded image",
          "[augmentation]") {
  // tf.image.resize_image_with_crop_or_pad to the padded size, then
  // tf.random_crop to the window: each offset alike.
  const int64_t padding = GENERATE(0, 1);
  const bool flip = GENERATE(false, true);
  const Shape shape{5, 6, 2};
  const std::vector<float> image = distinctImage(shape);
  Augmentation augment;
  augment.crop_padding = padding;
  augment.crop_height = 3;
  augment.crop_width = 4;
  augment.flip_left_right = flip;
  REQUIRE(augmentedShape(augment, shape) == Shape{3, 4, 2});
  std::map<std::tuple<int64_t, int64_t, bool>, int> seen;
  for (uint64_t key = 0; key < kDraws; ++key) {
    const std::vector<float> out = augmented(augment, shape, image, key);
    int matches = 0;
    for (int64_t top = -padding; top <= 5 - 3 + padding; ++top)
      for (int64_t left = -padding; left <= 6 - 4 + padding; ++left)
        for (bool mirrored : {false, true})
          if (out == windowAt(image, shape, 3, 4, top, left, mirrored)) {
            ++matches;
            ++seen[{top, left, mirrored}];
          }
    INFO("key " << key);
    REQUIRE(matches == 1);
  }
  // (3 + 2p) x (3 + 2p) corners (x 2 flips), each drawn.
  const size_t corners = size_t((3 + 2 * padding) * (3 + 2 * padding));
  CHECK(seen.size() == (flip ? 2 * corners : corners));
  for (const auto& [corner, count] : seen) CHECK(count >= 2);
}

// An augmentation of random boxes of `area` and `aspect` resized to a
// window of `height` x `width`.
Augmentation boxesOf(std::pair<float, float> area, std::pair<float, float> aspect, int64_t height,
                     int64_t width) {
  Augmentation augment;
  augment.crop_height = height;
  augment.crop_width = width;
  std::tie(augment.box_area_lower, augment.box_area_upper) = area;
  std::tie(augment.box_aspect_lower, augment.box_aspect_upper) = aspect;
  return augment;
}

TEST_CASE("random_crop's boxes lie in the image, their area and aspect ratio in range",
          "[augmentation]") {
  const Augmentation augment = boxesOf({0.1f, 0.6f}, {0.5f, 2.0f}, 8, 8);
  const int64_t height = 20, width = 30;
  double least = 1.0, most = 0.0;
  bool top = false, bottom = false, left = false, right = false;
  for (uint64_t key = 0; key < 4000; ++key) {
    Rng rng(key);
    const ImageBox box = distortedBox(augment, height, width, rng);
    INFO("key " << key << ": " << box.height << "x" << box.width << " at " << box.top << ", "
                << box.left);
    REQUIRE(box.height >= 1);
    REQUIRE(box.width >= 1);
    REQUIRE(box.top >= 0);
    REQUIRE(box.left >= 0);
    REQUIRE(box.top + box.height <= height);
    REQUIRE(box.left + box.width <= width);
    const double area = double(box.height * box.width) / double(height * width);
    REQUIRE(area >= 0.1 - 1e-9);
    REQUIRE(area <= 0.6 + 1e-9);
    // Its width is its height times a ratio in range, rounded.
    REQUIRE(box.width >= std::lrint(float(box.height) * 0.5f));
    REQUIRE(box.width <= std::lrint(float(box.height) * 2.0f));
    least = std::min(least, area);
    most = std::max(most, area);
    top = top || box.top == 0;
    bottom = bottom || box.top + box.height == height;
    left = left || box.left == 0;
    right = right || box.left + box.width == width;
  }
  // The whole range is drawn, and every place, the last ones too.
  CHECK(least < 0.12);
  CHECK(most > 0.57);
  CHECK((top && bottom && left && right));
}

TEST_CASE("random_crop's boxes are drawn as TensorFlow's sample_distorted_bounding_box draws them",
          "[augmentation]") {
  // The mean and standard deviation of the boxes' height and width over
  // 20000 draws of TensorFlow 2.21's
  //   tf.image.stateless_sample_distorted_bounding_box([H, W, 1],
  //       tf.zeros([1, 0, 4]), min_object_covered=0.0, aspect_ratio_range,
  //       area_range, max_attempts=100, use_image_if_no_bounding_boxes=True,
  //       seed=[i + 1, 7])
  // (boxes of the whole image), the second inception_preprocessing's ranges.
  struct Drawn {
    int64_t height, width;
    std::pair<float, float> area, aspect;
    double mean_height, mean_width, sd_height, sd_width;
  };
  const Drawn tensorflow[] = {
      {20, 30, {0.1f, 0.6f}, {0.5f, 2.0f}, 12.21555, 14.48405, 3.5701524, 4.8526947},
      {224, 224, {0.05f, 1.0f}, {0.75f, 1.33f}, 127.88115, 131.1828, 46.883600, 47.796498},
      {28, 28, {0.08f, 1.0f}, {0.75f, 1.3333334f}, 16.8115, 17.25745, 5.7066687, 5.7878985},
  };
  constexpr int kBoxes = 20000;
  for (const Drawn& drawn : tensorflow) {
    const Augmentation augment = boxesOf(drawn.area, drawn.aspect, 8, 8);
    double heights = 0.0, widths = 0.0, heights_squared = 0.0, widths_squared = 0.0;
    for (uint64_t key = 0; key < kBoxes; ++key) {
      Rng rng(key);
      const ImageBox box = distortedBox(augment, drawn.height, drawn.width, rng);
      heights += double(box.height);
      widths += double(box.width);
      heights_squared += double(box.height * box.height);
      widths_squared += double(box.width * box.width);
    }
    const double mean_height = heights / kBoxes, mean_width = widths / kBoxes;
    INFO(drawn.height << "x" << drawn.width);
    // Within 2 %: more than five standard errors of either mean.
    CHECK(mean_height == Approx(drawn.mean_height).epsilon(0.02));
    CHECK(mean_width == Approx(drawn.mean_width).epsilon(0.02));
    CHECK(std::sqrt(heights_squared / kBoxes - mean_height * mean_height) ==
          Approx(drawn.sd_height).epsilon(0.02));
    CHECK(std::sqrt(widths_squared / kBoxes - mean_width * mean_width) ==
          Approx(drawn.sd_width).epsilon(0.02));
  }
}

TEST_CASE("random_crop's boxes at the ranges' edges are TensorFlow's, each as often",
          "[augmentation]") {
  // The boxes' sizes, and how many of 3000, that TensorFlow 2.21's
  // stateless_sample_distorted_bounding_box drew (as above, seeds [i + 1,
  // 7]) where rounding decides: areas reckoned in float (a range of one
  // value), a fixed ratio whose widths round to the image's and a half, a
  // least area of a whole number of pixels.
  struct Drawn {
    int64_t height, width;
    std::pair<float, float> area, aspect;
    std::map<std::pair<int64_t, int64_t>, int> sizes;
  };
  const Drawn tensorflow[] = {
      {20, 20, {0.1f, 0.1f}, {0.75f, 1.33f}, {{{20, 20}, 3000}}},
      {10, 10, {0.2f, 0.2f}, {0.5f, 2.0f}, {{{4, 5}, 1670}, {{5, 4}, 1330}}},
      {2, 5, {0.1f, 1.0f}, {0.75f, 0.75f}, {{{1, 1}, 1512}, {{2, 2}, 1488}}},
      {8,
       4,
       {0.08f, 1.0f},
       {0.75f, 0.75f},
       {{{2, 2}, 755}, {{3, 2}, 730}, {{4, 3}, 757}, {{5, 4}, 758}}},
      {3, 20, {0.3f, 0.7f}, {0.5f, 2.0f}, {{{3, 6}, 3000}}},
  };
  for (const Drawn& drawn : tensorflow) {
    const Augmentation augment = boxesOf(drawn.area, drawn.aspect, 8, 8);
    std::map<std::pair<int64_t, int64_t>, int> sizes;
    for (uint64_t key = 0; key < 3000; ++key) {
      Rng rng(key);
      const ImageBox box = distortedBox(augment, drawn.height, drawn.width, rng);
      ++sizes[{box.height, box.width}];
    }
    INFO(drawn.height << "x" << drawn.width);
    REQUIRE(sizes.size() == drawn.sizes.size());
    for (const auto& [size, count] : drawn.sizes) {
      INFO(size.first << "x" << size.second);
      REQUIRE(sizes.count(size) == 1);
      // Within 0.05 of 3000: five standard errors.
      CHECK(std::abs(sizes[size] - count) < 150);
    }
  }
}

TEST_CASE("random_crop takes the whole image where no box of the ranges fits", "[augmentation]") {
  // A box of 4 to 5 times as wide as high and of 90 % of a square's area
  // cannot lie inside it.
  const Augmentation augment = boxesOf({0.9f, 1.0f}, {4.0f, 5.0f}, 8, 8);
  for (uint64_t key = 0; key < 100; ++key) {
    Rng rng(key);
    const ImageBox box = distortedBox(augment, 6, 6, rng);
    REQUIRE((box.top == 0 && box.left == 0 && box.height == 6 && box.width == 6));
  }
}

TEST_CASE("a box is resized to the window as tf.image.resize resizes a slice of the image",
          "[augmentation]") {
  // TensorFlow 2.21:
  //   tf.image.resize(tf.slice(image, [1, 2, 0], [3, 3, 2]), [4, 5])
  // of the 5x6x2 image of 1, 2, ... 60.
  const std::vector<float> tensorflow{
      17.0f, 18.0f, 17.7999992f, 18.7999992f, 19.0f, 20.0f, 20.2000008f, 21.2000008f, 21.0f, 22.0f,
      24.5f, 25.5f, 25.2999992f, 26.2999992f, 26.5f, 27.5f, 27.7000008f, 28.7000008f, 28.5f, 29.5f,
      33.5f, 34.5f, 34.2999992f, 35.2999992f, 35.5f, 36.5f, 36.7000008f, 37.7000008f, 37.5f, 38.5f,
      41.0f, 42.0f, 41.7999992f, 42.7999992f, 43.0f, 44.0f, 44.2000008f, 45.2000008f, 45.0f, 46.0f};
  const Shape shape{5, 6, 2};
  const std::vector<float> image = distinctImage(shape);
  std::vector<float> resized(tensorflow.size());
  resizeBilinear(image.data() + 1 * 12 + 2 * 2, 12, 3, 3, 2, 4, 5, PixelCentres::Half,
                 resized.data());
  for (size_t i = 0; i < resized.size(); ++i) {
    INFO("value " << i);
    CHECK(resized[i] == Approx(tensorflow[i]).epsilon(1e-6));
  }
  // Grey and RGB images take paths of their own, their channels known when
  // compiled: each channel of a box of 2 or 3 resizes as it does alone.
  for (const int64_t channels : {int64_t(2), int64_t(3)}) {
    const Shape many{5, 6, channels};
    const std::vector<float> pixels = distinctImage(many);
    const int64_t row = 6 * channels;
    std::vector<float> together(size_t(4 * 5 * channels));
    resizeBilinear(pixels.data() + 1 * row + 2 * channels, row, 3, 3, int(channels), 4, 5,
                   PixelCentres::Half, together.data());
    for (int64_t c = 0; c < channels; ++c) {
      std::vector<float> channel(30), alone(20);
      for (size_t i = 0; i < channel.size(); ++i)
        channel[i] = pixels[i * size_t(channels) + size_t(c)];
      resizeBilinear(channel.data() + 1 * 6 + 2, 6, 3, 3, 1, 4, 5, PixelCentres::Half,
                     alone.data());
      INFO(channels << " channels, channel " << c);
      for (size_t i = 0; i < alone.size(); ++i)
        CHECK(together[i * size_t(channels) + size_t(c)] == alone[i]);
    }
  }

  // augmentImage: the box its key draws first, resized to the window, then
  // mirrored in about half the draws with flip_left_right.
  const bool flip = GENERATE(false, true);
  Augmentation augment = boxesOf({0.2f, 1.0f}, {0.5f, 2.0f}, 4, 5);
  augment.flip_left_right = flip;
  const Shape window{4, 5, 2};
  REQUIRE(augmentedShape(augment, shape) == window);
  int mirrored = 0;
  for (uint64_t key = 0; key < kDraws; ++key) {
    Rng rng(key);
    const ImageBox box = distortedBox(augment, 5, 6, rng);
    std::vector<float> expected(size_t(numElements(window)));
    resizeBilinear(image.data() + box.top * 12 + box.left * 2, 12, box.height, box.width, 2, 4, 5,
                   PixelCentres::Half, expected.data());
    const std::vector<float> out = augmented(augment, shape, image, key);
    INFO("key " << key);
    if (out == expected) continue;
    REQUIRE(flip);
    REQUIRE(out == shifted(expected, window, 0, 0, true));
    ++mirrored;
  }
  if (flip) CHECK((mirrored > kDraws / 3 && mirrored < 2 * kDraws / 3));
}

// A window of `height` x `width` of each image resized to a shorter side
// in [lower, upper].
Augmentation scalesOf(int64_t lower, int64_t upper, int64_t height, int64_t width) {
  Augmentation augment;
  augment.crop_height = height;
  augment.crop_width = width;
  augment.scale_lower = lower;
  augment.scale_upper = upper;
  return augment;
}

TEST_CASE("shorter_side draws each side of its range alike, and the window at every place",
          "[augmentation]") {
  // As vgg_preprocessing: tf.random.uniform([], lower, upper + 1, tf.int32),
  // then offsets uniform in [0, side - window].
  const Augmentation augment = scalesOf(4, 7, 4, 3);
  std::map<int64_t, int> sides;
  std::map<std::pair<int64_t, int64_t>, int> corners_at_7;
  for (uint64_t key = 0; key < 8000; ++key) {
    Rng rng(key);
    const ScaledWindow place = scaledWindow(augment, 10, 15, rng);
    const int64_t side = place.height;  // the shorter of 10 x 15
    INFO("key " << key << ": " << place.height << "x" << place.width << " at " << place.top << ", "
                << place.left);
    REQUIRE((side >= 4 && side <= 7));
    REQUIRE(std::pair{place.height, place.width} == sizeWithShorterSide(10, 15, side));
    REQUIRE((place.top >= 0 && place.top + 4 <= place.height));
    REQUIRE((place.left >= 0 && place.left + 3 <= place.width));
    ++sides[side];
    if (side == 7) ++corners_at_7[{place.top, place.left}];
  }
  REQUIRE(sides.size() == 4);
  for (const auto& [side, count] : sides) {
    INFO("side " << side);
    CHECK(std::abs(count - 2000) < 200);
  }
  // 7 x 10 (10.5 rounded to even): 4 rows and 8 columns of places, each reached.
  CHECK(corners_at_7.size() == 4 * 8);

  // A range of one side: every image resized alike, a portrait one too.
  Rng rng(1);
  const ScaledWindow portrait = scaledWindow(scalesOf(5, 5, 4, 4), 20, 8, rng);
  CHECK(portrait.width == 5);
  CHECK(portrait.height == 12);  // 12.5, to even
}

TEST_CASE("an image of its own size gives a window of its resize to the side drawn",
          "[augmentation]") {
  const Shape shape{9, 13, 3};
  std::vector<uint8_t> image(size_t(numElements(shape)));
  for (size_t i = 0; i < image.size(); ++i) image[i] = uint8_t((i * 37 + i / 7) % 256);
  const PixelCentres centres = GENERATE(PixelCentres::Half, PixelCentres::Legacy);
  Augmentation augment = scalesOf(5, 8, 5, 4);
  augment.flip_left_right = true;
  const Shape window{5, 4, 3};
  REQUIRE(augmentedShape(augment, shape) == window);
  int mirrored = 0;
  for (uint64_t key = 0; key < kDraws; ++key) {
    Rng rng(key);
    const ScaledWindow place = scaledWindow(augment, 9, 13, rng);
    // The whole image resized, then the window taken of it.
    std::vector<float> resized(size_t(place.height * place.width * 3));
    resizeBilinear(image.data(), 9, 13, 3, place.height, place.width, centres, resized.data());
    for (float& value : resized) value /= 255.0f;
    const Shape resized_shape{place.height, place.width, 3};
    const std::vector<float> expected =
        windowAt(resized, resized_shape, 5, 4, place.top, place.left, false);
    std::vector<float> out(size_t(numElements(window)));
    augmentDecodedImage(augment, shape, centres, key, image.data(), out.data());
    INFO("key " << key);
    if (out == expected) continue;
    REQUIRE(out == windowAt(resized, resized_shape, 5, 4, place.top, place.left, true));
    ++mirrored;
  }
  CHECK((mirrored > kDraws / 3 && mirrored < 2 * kDraws / 3));
}

TEST_CASE("a box of an image of its own size is resized to the window with the set's centres",
          "[augmentation]") {
  // Inception's crop of the image as decoded: tf.slice of it by the box,
  // then tf.image.resize (half-pixel centres) or TensorFlow 1's
  // resize_images (legacy), as the float box's resize (compared with
  // TensorFlow's above).
  const Shape shape{11, 8, 3};
  std::vector<uint8_t> image(size_t(numElements(shape)));
  for (size_t i = 0; i < image.size(); ++i) image[i] = uint8_t((i * 53 + i / 5) % 256);
  const std::vector<float> as_floats(image.begin(), image.end());
  const PixelCentres centres = GENERATE(PixelCentres::Half, PixelCentres::Legacy);
  Augmentation augment = boxesOf({0.1f, 1.0f}, {0.5f, 2.0f}, 6, 5);
  augment.flip_left_right = true;
  const Shape window{6, 5, 3};
  int mirrored = 0;
  for (uint64_t key = 0; key < kDraws; ++key) {
    Rng rng(key);
    const ImageBox box = distortedBox(augment, 11, 8, rng);
    std::vector<float> expected(size_t(numElements(window)));
    resizeBilinear(as_floats.data() + (box.top * 8 + box.left) * 3, 8 * 3, box.height, box.width, 3,
                   6, 5, centres, expected.data());
    for (float& value : expected) value /= 255.0f;
    std::vector<float> out(expected.size());
    augmentDecodedImage(augment, shape, centres, key, image.data(), out.data());
    INFO("key " << key);
    if (out == expected) continue;
    REQUIRE(out == shifted(expected, window, 0, 0, true));
    ++mirrored;
  }
  CHECK((mirrored > kDraws / 3 && mirrored < 2 * kDraws / 3));
}

// Images of sizes of their own, as a set left in its files gives them:
// image i is (3 + i) x (5 + i) x 1, every pixel i * 10 + its row.
class DecodedImages final : public ExampleFiles {
 public:
  void read(int64_t, float*) const override { FAIL("read, where decode was expected"); }
  void adviseRandomOrder() const override {}
  Shape decode(int64_t index, std::vector<uint8_t>& pixels) const override {
    const Shape shape{3 + index, 5 + index, 1};
    pixels.resize(size_t(numElements(shape)));
    for (int64_t y = 0; y < shape[0]; ++y)
      std::fill_n(pixels.begin() + y * shape[1], shape[1], uint8_t(index * 10 + y));
    return shape;
  }
};

TEST_CASE("a pipeline decodes each image of its own size for the box or scale drawn on it",
          "[augmentation][pipeline]") {
  Dataset data;
  data.example_shape = {3, 3, 1};
  data.window = {3, 3, 1};
  data.size = 6;
  data.labels = {0, 1, 2, 0, 1, 2};
  data.num_classes = 3;
  data.files = std::make_shared<DecodedImages>();
  data.own_sizes = true;
  data.resize_centres = PixelCentres::Legacy;
  // VGG's scales, or Inception's boxes of each image as decoded.
  const Augmentation augment =
      GENERATE(scalesOf(3, 6, 3, 3), boxesOf({0.3f, 1.0f}, {0.5f, 2.0f}, 3, 3));
  InputPipeline input(data, 6, /*shuffle=*/false, 5, 0, 0, 0, 1, augment);
  const std::vector<float> batch = batchInputs(input.next(), 9);
  const DecodedImages images;
  for (int64_t i = 0; i < 6; ++i) {
    std::vector<uint8_t> pixels;
    const Shape shape = images.decode(i, pixels);
    std::vector<float> expected(9);
    augmentDecodedImage(augment, shape, PixelCentres::Legacy, augmentationKey(5, 0, i),
                        pixels.data(), expected.data());
    INFO("example " << i);
    CHECK(std::vector<float>(batch.begin() + i * 9, batch.begin() + i * 9 + 9) == expected);
  }

  // A set whose images are kept at one size draws no scale of them, and
  // images of their own sizes need a box or a scale drawn and their files.
  Dataset kept = floatImages({3, 3, 1}, 6);
  kept.window = {3, 3, 1};
  CHECK_THROWS_AS(InputPipeline(kept, 6, false, 5, 0, 0, 0, 1, scalesOf(3, 6, 3, 3)),
                  std::invalid_argument);
  Augmentation flip_only;
  flip_only.crop_height = 3;
  flip_only.crop_width = 3;
  flip_only.flip_left_right = true;
  CHECK_THROWS_AS(InputPipeline(data, 6, false, 5, 0, 0, 0, 1, flip_only), std::invalid_argument);
  data.files = nullptr;
  CHECK_THROWS_AS(InputPipeline(data, 6, false, 5, 0, 0, 0, 1, augment), std::invalid_argument);
}

TEST_CASE("evaluation's window is the image's centre, as resize_image_with_crop_or_pad takes it",
          "[augmentation]") {
  // Checked against TensorFlow 2.21's tf.image.resize_with_crop_or_pad for
  // every window below: the corner ((h - height) / 2, (w - width) / 2),
  // each rounded toward 0; a window larger than the image is padded.
  const Shape shape{5, 6, 2};
  const std::vector<float> image = distinctImage(shape);
  for (const auto& [height, width] :
       {std::pair<int64_t, int64_t>{3, 3}, {4, 4}, {2, 5}, {7, 9}, {6, 7}, {8, 3}, {5, 6}}) {
    std::vector<float> out(size_t(height * width * 2));
    centreWindow(shape, {height, width, 2}, image.data(), out.data());
    INFO(height << "x" << width);
    CHECK(out == windowAt(image, shape, height, width, (5 - height) / 2, (6 - width) / 2, false));
  }
  // 3x3 of 5x6: rows 1-3, columns 1-3.
  std::vector<float> centre(18);
  centreWindow(shape, {3, 3, 2}, image.data(), centre.data());
  CHECK(centre[0] == 15.0f);
  CHECK(centre[17] == 44.0f);
}

TEST_CASE("saturation and hue are TensorFlow's adjust_saturation then adjust_hue",
          "[augmentation]") {
  // An image of 8 RGB pixels (a grey, a black, values below 0 and above 1)
  // and what TensorFlow 2.21 made of it:
  //   tf.image.adjust_hue(tf.image.adjust_saturation(image, s), h)
  const std::vector<float> image{
      0.5f,         0.5f,          0.5f,           0.0f,          0.0f,         0.0f,
      0.474861562f, 0.0916866958f, 0.781492591f,   0.0364064239f, 0.369473815f, 0.520088196f,
      0.41675362f,  0.604158282f,  0.785405338f,   1.04752076f,   0.241041392f, 0.678256631f,
      0.735459208f, 0.2512649f,    -0.0982118994f, 0.899999976f,  0.200000003f, 0.200000003f};
  struct Expected {
    float saturation, hue;
    std::vector<float> rgb;
  };
  const std::vector<Expected> tensorflow{
      {0.5f, 0.0f, {0.5f,         0.5f,         0.5f,         0.0f,         0.0f,
                    0.0f,         0.628176987f, 0.436589658f, 0.781492591f, 0.278247297f,
                    0.444780916f, 0.520088196f, 0.601079464f, 0.69478178f,  0.785405338f,
                    1.04752076f,  0.644281089f, 0.862888634f, 0.735459208f, 0.493362069f,
                    0.318623692f, 0.899999976f, 0.549999952f, 0.549999952f}},
      {1.7f, 0.0f, {0.5f,         0.5f,         0.5f,         0.0f,         0.0f,
                    0.0f,         0.434105009f, 0.0f,         0.781492591f, 0.0f,
                    0.358137101f, 0.520088196f, 0.158697426f, 0.477285236f, 0.785405338f,
                    1.04752076f,  0.0f,         0.567890406f, 0.735459208f, 0.308306158f,
                    0.0f,         0.899999976f, 0.0f,         0.0f}},
      {1.0f, 0.3f, {0.5f,          0.5f,         0.5f,         0.0f,          0.0f,
                    0.0f,          0.781492591f, 0.336900353f, 0.0916867256f, 0.520088196f,
                    0.0364064276f, 0.466210127f, 0.785405338f, 0.41675362f,   0.677888513f,
                    0.839552224f,  1.04752076f,  0.241041422f, 0.0f,          0.735459208f,
                    0.161214337f,  0.339999855f, 0.899999976f, 0.199999988f}},
      {1.0f, -0.45f, {0.5f,         0.5f,          0.5f,         0.0f,          0.0f,
                      0.0f,         0.19137603f,   0.781492591f, 0.0916867256f, 0.520088196f,
                      0.332125485f, 0.0364064276f, 0.785405338f, 0.708596349f,  0.41675362f,
                      0.241041422f, 1.04752076f,   0.852249622f, 0.0f,          0.206515089f,
                      0.735459208f, 0.199999988f,  0.689999819f, 0.899999976f}},
      {1.3f, 0.12f, {0.5f,        0.5f,         0.5f,         0.0f,         0.0f,
                     0.0f,        0.781492591f, 0.0f,         0.56620568f,  0.0163264107f,
                     0.0f,        0.520088196f, 0.407590061f, 0.306158125f, 0.785405338f,
                     1.04752076f, 0.186324298f, 0.0f,         0.633081615f, 0.735459208f,
                     0.0f,        0.899999976f, 0.647999823f, 0.0f}},
      {0.0f, 0.2f, {0.5f,         0.5f,         0.5f,         0.0f,         0.0f,
                    0.0f,         0.781492591f, 0.781492591f, 0.781492591f, 0.520088196f,
                    0.520088196f, 0.520088196f, 0.785405338f, 0.785405338f, 0.785405338f,
                    1.04752076f,  1.04752076f,  1.04752076f,  0.735459208f, 0.735459208f,
                    0.735459208f, 0.899999976f, 0.899999976f, 0.899999976f}}};
  for (const Expected& expected : tensorflow) {
    std::vector<float> rgb = image;
    adjustColours(rgb.data(), 8, expected.saturation, expected.hue);
    INFO("saturation " << expected.saturation << ", hue " << expected.hue);
    for (size_t i = 0; i < rgb.size(); ++i) REQUIRE(rgb[i] == Approx(expected.rgb[i]).margin(1e-6));
  }

  // Hue alone clips no saturation: pixels with values either side of 0
  // (after brightness) have one above 1. TensorFlow 2.21's
  // tf.image.adjust_hue(image, h) of 6 such pixels and a grey:
  const std::vector<float> wide{
      -0.335999995f, -0.400000006f, 0.115999997f,  0.300000012f, 0.300000012f, 0.300000012f,
      0.235251769f,  -0.418504655f, -0.412236124f, 1.29851699f,  0.674264371f, -0.0778816342f,
      0.282905608f,  1.25353515f,   1.11581969f,   1.01961589f,  0.206328392f, 0.387441427f};
  const std::vector<std::pair<float, std::vector<float>>> hue_only{
      {0.0f,
       {-0.335999966f, -0.400000006f, 0.115999997f, 0.300000012f, 0.300000012f, 0.300000012f,
        0.235251769f, -0.418504655f, -0.412236273f, 1.29851699f, 0.674264371f, -0.0778816342f,
        0.282905608f, 1.25353515f, 1.11581969f, 1.01961589f, 0.206328392f, 0.387441397f}},
      {0.25f,
       {0.115999997f, -0.400000006f, -0.20600003f, 0.300000012f, 0.300000012f, 0.300000012f,
        -0.0853580534f, 0.235251769f, -0.418504655f, -0.0778816342f, 1.29851699f, -0.0139349326f,
        0.630504668f, 0.282905608f, 1.25353515f, 0.794085145f, 1.01961589f, 0.206328392f}},
      {-0.4f,
       {-0.25759998f, 0.115999997f, -0.400000006f, 0.300000012f, 0.300000012f, 0.300000012f,
        -0.418504655f, -0.15073365f, 0.235251769f, 0.123705119f, -0.0778816342f, 1.29851699f,
        1.25353515f, 0.727567792f, 0.282905608f, 0.206328392f, 0.712756515f, 1.01961589f}}};
  for (const auto& [hue, expected] : hue_only) {
    std::vector<float> rgb = wide;
    adjustColours(rgb.data(), 6, std::nullopt, hue);
    INFO("hue alone " << hue);
    for (size_t i = 0; i < rgb.size(); ++i) REQUIRE(rgb[i] == Approx(expected[i]).margin(1e-6));
  }
}

TEST_CASE("saturation and hue draw their factor and delta between their bounds", "[augmentation]") {
  // A red pixel, hue 0, saturation 7/9, value 0.9: a saturation factor f
  // leaves green and blue at 0.9 - 0.7 f; a hue delta d > 0 raises green
  // alone to 0.2 + 4.2 d, one d < 0 raises blue alone to 0.2 - 4.2 d.
  const Shape shape{1, 1, 3};
  const std::vector<float> red{0.9f, 0.2f, 0.2f};
  Augmentation saturation;
  saturation.saturation_lower = 0.5f;
  saturation.saturation_upper = 1.2f;
  Augmentation hue;
  hue.hue = 0.1f;
  float lowest = 2.0f, highest = 0.0f, lowest_delta = 1.0f, highest_delta = -1.0f;
  for (uint64_t key = 0; key < kDraws; ++key) {
    const std::vector<float> saturated = augmented(saturation, shape, red, key);
    REQUIRE(saturated[0] == Approx(0.9f).margin(1e-6));
    REQUIRE(saturated[1] == Approx(saturated[2]).margin(1e-6));
    const float factor = (0.9f - saturated[1]) / 0.7f;
    REQUIRE(factor >= 0.5f - 1e-5f);
    REQUIRE(factor < 1.2f + 1e-5f);
    lowest = std::min(lowest, factor);
    highest = std::max(highest, factor);

    const std::vector<float> turned = augmented(hue, shape, red, key);
    REQUIRE(turned[0] == Approx(0.9f).margin(1e-6));
    REQUIRE(std::min(turned[1], turned[2]) == Approx(0.2f).margin(1e-6));
    const float delta = (turned[1] - turned[2]) / 4.2f;
    REQUIRE(std::abs(delta) <= 0.1f + 1e-5f);
    lowest_delta = std::min(lowest_delta, delta);
    highest_delta = std::max(highest_delta, delta);
  }
  CHECK(lowest < 0.55f);
  CHECK(highest > 1.15f);
  CHECK(lowest_delta < -0.09f);
  CHECK(highest_delta > 0.09f);
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

TEST_CASE("a window's batches: training crops at random, evaluation takes the centres",
          "[augmentation][pipeline]") {
  // Squares, so that no two windows of an image standardize alike.
  Dataset data = floatImages({6, 6, 1}, 8);
  for (float& value : data.floats) value = value * value / 1024.0f;
  data.window = {4, 4, 1};
  data.per_image_standardization = GENERATE(false, true);
  Augmentation augment;
  augment.crop_height = 4;
  augment.crop_width = 4;
  InputPipeline input(data, 8, false, 3, 0, 0, 0, 1, augment);
  const std::vector<float> crops = batchInputs(input.next(), 16);
  std::vector<float> centres(8 * 16);
  sliceBatch(data, 0, 8, centres.data());
  // Each of the 9 corners alike for a crop; the centre is corner (1, 1).
  int off_centre = 0;
  for (int64_t i = 0; i < 8; ++i) {
    const std::vector<float> image(data.floats.begin() + i * 36, data.floats.begin() + i * 36 + 36);
    std::vector<float> centre = windowAt(image, {6, 6, 1}, 4, 4, 1, 1, false);
    if (data.per_image_standardization) standardizeExample(centre.data(), 16, data.pixel_scale);
    CHECK(std::vector<float>(centres.begin() + i * 16, centres.begin() + i * 16 + 16) == centre);
    off_centre += std::vector<float>(crops.begin() + i * 16, crops.begin() + i * 16 + 16) != centre;
  }
  CHECK(off_centre > 0);

  // A pipeline asked for another window than the data set's, or none.
  CHECK_THROWS_AS(InputPipeline(data, 4, true, 1, 0, 0), std::invalid_argument);
  augment.crop_height = 5;
  CHECK_THROWS_AS(InputPipeline(data, 4, true, 1, 0, 0, 0, 1, augment), std::invalid_argument);
  // A window larger than the padded images.
  data.window = {8, 8, 1};
  augment.crop_height = 8;
  augment.crop_width = 8;
  CHECK_THROWS_AS(InputPipeline(data, 4, true, 1, 0, 0, 0, 1, augment), std::invalid_argument);
  augment.crop_padding = 1;
  CHECK_NOTHROW(InputPipeline(data, 4, true, 1, 0, 0, 0, 1, augment));
}

TEST_CASE("augmentation of examples that are not images is refused", "[augmentation]") {
  Augmentation augment;
  augment.flip_left_right = true;
  const Dataset flat = floatImages({16}, 8);
  CHECK_THROWS_AS(InputPipeline(flat, 4, true, 1, 0, 0, 0, 1, augment), std::invalid_argument);
  CHECK_NOTHROW(InputPipeline(flat, 4, true, 1, 0, 0, 0, 1, Augmentation{}));
}

}  // namespace traind
