// Images resized to a model's input as TensorFlow resizes them, for data
// sets whose images come in sizes of their own (JPEG photographs).
#pragma once

#include <cstdint>
#include <utility>

namespace traind {

// How an output pixel's place in the input is reckoned.
enum class PixelCentres {
  // TensorFlow 2's tf.image.resize(image, size): pixel i of the output
  // samples the input at (i + 0.5) * scale - 0.5.
  Half,
  // TensorFlow 1's tf.image.resize_images(image, size) and
  // resize_bilinear(align_corners=False), as tf.compat.v1 keeps them: at
  // i * scale, which shifts the image by half an input pixel less half an
  // output pixel.
  Legacy,
};

// Resizes the `height` x `width` x `channels` bytes at `in` to `out_height`
// x `out_width` x `channels` floats at `out` (values from 0 to 255, not
// rounded) as TensorFlow's bilinear resize does: no antialiasing, in float
// arithmetic, the centres as `centres` says.
void resizeBilinear(const uint8_t* in, int64_t height, int64_t width, int channels,
                    int64_t out_height, int64_t out_width, PixelCentres centres, float* out);

// The part of rows [top, top + rows) and columns [left, left + columns) of
// what resizeBilinear makes of `in` at `out_height` x `out_width`, to `out`
// (rows x columns x channels): a window of the resized image, the rest of
// it never made.
void resizeBilinearPart(const uint8_t* in, int64_t height, int64_t width, int channels,
                        int64_t out_height, int64_t out_width, int64_t top, int64_t left,
                        int64_t rows, int64_t columns, PixelCentres centres, float* out);

// resizeBilinear of the `height` x `width` x `channels` floats or bytes
// at `in`, whose rows lie `row_stride` values apart: a box of a larger
// image (as tf.image.resize of a tf.slice of it).
void resizeBilinear(const float* in, int64_t row_stride, int64_t height, int64_t width,
                    int channels, int64_t out_height, int64_t out_width, PixelCentres centres,
                    float* out);
void resizeBilinear(const uint8_t* in, int64_t row_stride, int64_t height, int64_t width,
                    int channels, int64_t out_height, int64_t out_width, PixelCentres centres,
                    float* out);

// Where the centre `fraction` of a side of `side` pixels begins, as
// TensorFlow 1's tf.image.central_crop reckons it: in double, cut down to
// a whole pixel; as many are left past the centre. (TensorFlow 2 rounds
// the fraction to float first inside tf.data, where the image's shape is
// not known: for 500 at 0.8 it begins at 49, not 50.)
int64_t centralCropStart(int64_t side, double fraction);

// How a side reckoned in float becomes a whole number of pixels.
enum class SideRounding {
  // To the nearest, ties to even: slim's
  // vgg_preprocessing._smallest_size_at_least (tf.math.rint).
  Nearest,
  // Cut down: the official ResNet's imagenet_preprocessing
  // ._smallest_size_at_least (a cast to int32), which makes a shorter side
  // one pixel short where float does (256 / 332 * 332 is 255.99998).
  Down,
};

// The height and width of an image of `height` x `width` resized so that
// its shorter side is `side` and its aspect is kept, reckoned in float as
// both do, each rounded as `rounding` says.
std::pair<int64_t, int64_t> sizeWithShorterSide(int64_t height, int64_t width, int64_t side,
                                                SideRounding rounding = SideRounding::Nearest);

}  // namespace traind
