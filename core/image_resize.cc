#include "core/image_resize.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace traind {
namespace {

// Where output pixel i of `out_size` samples the input of `in_size`: the
// two input pixels around it and the weight of the upper one, computed as
// TensorFlow's resize kernels compute them (in float).
struct Sample {
  int64_t lower, upper;
  float weight;
};

std::vector<Sample> samples(int64_t in_size, int64_t out_size, PixelCentres centres) {
  const float scale = float(in_size) / float(out_size);
  std::vector<Sample> result(static_cast<size_t>(out_size));
  for (int64_t i = 0; i < out_size; ++i) {
    const float at =
        centres == PixelCentres::Half ? (float(i) + 0.5f) * scale - 0.5f : float(i) * scale;
    const float below = std::floor(at);
    result[size_t(i)] = {std::max(int64_t(below), int64_t(0)),
                         std::min(int64_t(std::ceil(at)), in_size - 1), at - below};
  }
  return result;
}

// resizeBilinear of `in`'s values, bytes or floats, `row_stride` apart.
template <typename Value>
void resizeRows(const Value* in, size_t row_stride, int64_t height, int64_t width, int channels,
                int64_t out_height, int64_t out_width, PixelCentres centres, float* out) {
  const std::vector<Sample> rows = samples(height, out_height, centres);
  const std::vector<Sample> columns = samples(width, out_width, centres);
  const auto at = [&](int64_t y, int64_t x, int c) {
    return float(in[size_t(y) * row_stride + size_t(x) * size_t(channels) + size_t(c)]);
  };
  for (const Sample& row : rows) {
    for (const Sample& column : columns) {
      for (int c = 0; c < channels; ++c) {
        const float top_left = at(row.lower, column.lower, c);
        const float top_right = at(row.lower, column.upper, c);
        const float bottom_left = at(row.upper, column.lower, c);
        const float bottom_right = at(row.upper, column.upper, c);
        const float top = top_left + (top_right - top_left) * column.weight;
        const float bottom = bottom_left + (bottom_right - bottom_left) * column.weight;
        *out++ = top + (bottom - top) * row.weight;
      }
    }
  }
}

}  // namespace

void resizeBilinear(const uint8_t* in, int64_t height, int64_t width, int channels,
                    int64_t out_height, int64_t out_width, PixelCentres centres, float* out) {
  resizeRows(in, size_t(width) * size_t(channels), height, width, channels, out_height, out_width,
             centres, out);
}

void resizeBilinear(const float* in, int64_t row_stride, int64_t height, int64_t width,
                    int channels, int64_t out_height, int64_t out_width, PixelCentres centres,
                    float* out) {
  resizeRows(in, size_t(row_stride), height, width, channels, out_height, out_width, centres, out);
}

}  // namespace traind
