#include "core/png_image.h"

#include <png.h>

#include <cstring>

namespace traind {
namespace {

constexpr unsigned char kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

// libpng's simplified reader over `png`, its header read, freed with it.
class PngReader {
 public:
  explicit PngReader(std::string_view png) {
    std::memset(&image_, 0, sizeof image_);
    image_.version = PNG_IMAGE_VERSION;
    png_image_begin_read_from_memory(&image_, png.data(), png.size());
  }
  ~PngReader() { png_image_free(&image_); }
  PngReader(const PngReader&) = delete;
  PngReader& operator=(const PngReader&) = delete;

  png_image& image() { return image_; }
  // libpng's message, "" when it has none.
  std::string error() const { return PNG_IMAGE_FAILED(image_) ? image_.message : ""; }

 private:
  png_image image_;
};

}  // namespace

bool isPng(std::string_view bytes) {
  return bytes.size() >= sizeof kSignature &&
         std::memcmp(bytes.data(), kSignature, sizeof kSignature) == 0;
}

PngHeader readPngHeader(std::string_view png) {
  PngReader reader(png);
  if (const std::string error = reader.error(); !error.empty())
    return {0, 0, 0, "not a PNG image libpng reads: " + error};
  const png_image& image = reader.image();
  PngHeader header{int64_t(image.height), int64_t(image.width),
                   image.format & PNG_FORMAT_FLAG_COLOR ? 3 : 1, ""};
  if (image.format & PNG_FORMAT_FLAG_ALPHA)
    header.error = "a PNG image with an alpha channel; expected grey or RGB without one";
  else if (image.format & PNG_FORMAT_FLAG_LINEAR)
    header.error = "a PNG image of 16-bit samples; expected 8-bit ones";
  return header;
}

std::string decodePng(std::string_view png, const PngHeader& header, uint8_t* out) {
  PngReader reader(png);
  png_image& image = reader.image();
  image.format = header.channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  if (reader.error().empty()) png_image_finish_read(&image, nullptr, out, 0, nullptr);
  if (const std::string error = reader.error(); !error.empty())
    return "a corrupt PNG image: " + error;
  return "";
}

}  // namespace traind
