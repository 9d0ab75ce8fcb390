// What an encoded image's header says, read without decoding it: the
// shape readPngHeader (core/png_image.h) and readJpegHeader
// (core/jpeg_image.h) give, and whether the image is taken.
#pragma once

#include <cstdint>
#include <string>

namespace traind {

struct ImageHeader {
  int64_t height = 0;
  int64_t width = 0;
  int channels = 0;   // the image's own; 0 when the header itself is corrupt
  std::string error;  // "" when the image is taken, else why not
};

}  // namespace traind
