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

// Those of output pixels [first, first + count) of `out_size`.
std::vector<Sample> samples(int64_t in_size, int64_t out_size, int64_t first, int64_t count,
                            PixelCentres centres) {
  const float scale = float(in_size) / float(out_size);
  std::vector<Sample> result(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const float place = float(first + i);
    const float at = centres == PixelCentres::Half ? (place + 0.5f) * scale - 0.5f : place * scale;
    const float below = std::floor(at);
    // Clamped both ways: far into a large output, float may round past the end.
    result[size_t(i)] = {std::clamp(int64_t(below), int64_t(0), in_size - 1),
                         std::clamp(int64_t(std::ceil(at)), int64_t(0), in_size - 1), at - below};
  }
  return result;
}

// Where each output column's two input pixels begin, in values from the
// row's start.
struct ColumnPlace {
  size_t lower, upper;
  float weight;
};

// resizeBilinearPart of `in`'s values, bytes or floats, `row_stride` apart,
// of `Channels` channels (0: `channels`, known only at run time).
template <int Channels, typename Value>
void resizeRows(const Value* in, size_t row_stride, int64_t height, int64_t width, int channels,
                int64_t out_height, int64_t out_width, int64_t first_row, int64_t first_column,
                int64_t rows_out, int64_t columns_out, PixelCentres centres, float* out) {
  const size_t values = size_t(Channels > 0 ? Channels : channels);
  std::vector<ColumnPlace> columns;
  columns.reserve(size_t(columns_out));
  for (const Sample& column : samples(width, out_width, first_column, columns_out, centres))
    columns.push_back(
        {size_t(column.lower) * values, size_t(column.upper) * values, column.weight});
  for (const Sample& row : samples(height, out_height, first_row, rows_out, centres)) {
    const Value* top_row = in + size_t(row.lower) * row_stride;
    const Value* bottom_row = in + size_t(row.upper) * row_stride;
    for (const ColumnPlace& column : columns) {
      for (size_t c = 0; c < values; ++c) {
        const float top_left = float(top_row[column.lower + c]);
        const float top_right = float(top_row[column.upper + c]);
        const float bottom_left = float(bottom_row[column.lower + c]);
        const float bottom_right = float(bottom_row[column.upper + c]);
        const float top = top_left + (top_right - top_left) * column.weight;
        const float bottom = bottom_left + (bottom_right - bottom_left) * column.weight;
        *out++ = top + (bottom - top) * row.weight;
      }
    }
  }
}

// resizeRows for grey and RGB images with their channels known when compiled.
template <typename Value>
void resizeRows(const Value* in, size_t row_stride, int64_t height, int64_t width, int channels,
                int64_t out_height, int64_t out_width, int64_t first_row, int64_t first_column,
                int64_t rows_out, int64_t columns_out, PixelCentres centres, float* out) {
  const auto resize = channels == 3   ? resizeRows<3, Value>
                      : channels == 1 ? resizeRows<1, Value>
                                      : resizeRows<0, Value>;
  resize(in, row_stride, height, width, channels, out_height, out_width, first_row, first_column,
         rows_out, columns_out, centres, out);
}

}  // namespace

void resizeBilinear(const uint8_t* in, int64_t height, int64_t width, int channels,
                    int64_t out_height, int64_t out_width, PixelCentres centres, float* out) {
  resizeRows(in, size_t(width) * size_t(channels), height, width, channels, out_height, out_width,
             0, 0, out_height, out_width, centres, out);
}

void resizeBilinearPart(const uint8_t* in, int64_t height, int64_t width, int channels,
                        int64_t out_height, int64_t out_width, int64_t top, int64_t left,
                        int64_t rows, int64_t columns, PixelCentres centres, float* out) {
  resizeRows(in, size_t(width) * size_t(channels), height, width, channels, out_height, out_width,
             top, left, rows, columns, centres, out);
}

void resizeBilinear(const float* in, int64_t row_stride, int64_t height, int64_t width,
                    int channels, int64_t out_height, int64_t out_width, PixelCentres centres,
                    float* out) {
  resizeRows(in, size_t(row_stride), height, width, channels, out_height, out_width, 0, 0,
             out_height, out_width, centres, out);
}

void resizeBilinear(const uint8_t* in, int64_t row_stride, int64_t height, int64_t width,
                    int channels, int64_t out_height, int64_t out_width, PixelCentres centres,
                    float* out) {
  resizeRows(in, size_t(row_stride), height, width, channels, out_height, out_width, 0, 0,
             out_height, out_width, centres, out);
}

int64_t centralCropStart(int64_t side, double fraction) {
  return int64_t((double(side) - double(side) * fraction) / 2.0);
}

std::pair<int64_t, int64_t> sizeWithShorterSide(int64_t height, int64_t width, int64_t side,
                                                SideRounding rounding) {
  const float scale = float(side) / float(std::min(height, width));
  const auto whole = [rounding](float length) {
    return int64_t(rounding == SideRounding::Nearest ? std::nearbyint(length) : length);
  };
  return {whole(float(height) * scale), whole(float(width) * scale)};
}

}  // namespace traind
