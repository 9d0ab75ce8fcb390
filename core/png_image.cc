#include "core/png_image.h"

#include <png.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace traind {
namespace {

constexpr unsigned char kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

// The bytes libpng reads, and the message of its error.
struct PngSource {
  const unsigned char* data;
  size_t size;
  size_t offset;
  char error[256];
};

void readFromMemory(png_structp png, png_bytep out, png_size_t bytes) {
  auto* source = static_cast<PngSource*>(png_get_io_ptr(png));
  if (bytes > source->size - source->offset) png_error(png, "the image ends early");
  std::memcpy(out, source->data + source->offset, bytes);
  source->offset += bytes;
}

[[noreturn]] void onError(png_structp png, png_const_charp message) {
  auto* source = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(source->error, sizeof source->error, "%s", message);
  png_longjmp(png, 1);
}

void onWarning(png_structp, png_const_charp) {}  // a warning changes nothing decoded

// The most IDAT bytes, besides twice the last row's, that may follow what
// the rows before it took (a stream ends with a few bytes of its own).
// After the last row libpng inflates the rest of the stream to check its
// end: compressed data that goes on past the pixels, megabytes that inflate
// a thousandfold, cost seconds of CPU per image, and 60 KB of it 126 ms.
// Encoders leave bytes of it. What libpng read ahead (kIdatReadBytes at a
// time) is not counted and is inflated too.
constexpr size_t kMostIdatAfterRows = 1024;
constexpr size_t kIdatReadBytes = 1024;
// The most libpng allocates for an ancillary chunk it reads (a palette, a
// gamma: bytes; libpng's default is 8 MB); image data is bounded by the
// image's size instead.
constexpr png_alloc_size_t kMostAncillaryChunkBytes = 1 << 20;

// The bytes of IDAT data from `source->offset` on, to the first IEND.
size_t idatBytesAfterOffset(const PngSource& source) {
  size_t idat = 0;
  for (size_t at = sizeof kSignature; source.size - at >= 8;) {
    const size_t begin = at + 8;
    // A chunk cut short counts to the end of the bytes: libpng says so.
    const size_t end =
        begin + std::min<size_t>(png_get_uint_32(source.data + at), source.size - begin);
    if (std::memcmp(source.data + at + 4, "IEND", 4) == 0) break;
    if (std::memcmp(source.data + at + 4, "IDAT", 4) == 0 && end > source.offset)
      idat += end - std::max(begin, source.offset);
    if (source.size - end < 4) break;
    at = end + 4;  // past the CRC
  }
  return idat;
}

// Reads the header into `header` and, with `out`, the image; false with
// source->error on a libpng error. No C++ object lives in this frame, which
// libpng's errors leave by longjmp.
bool readPng(PngSource* source, ImageHeader* header, uint8_t* out) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, source, onError, onWarning);
  if (!png) {
    std::snprintf(source->error, sizeof source->error, "no memory for libpng");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (!info || setjmp(png_jmpbuf(png))) {
    if (!info) std::snprintf(source->error, sizeof source->error, "no memory for libpng");
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  png_set_read_fn(png, source, readFromMemory);
  // Chunks traind never reads are skipped, not inflated and kept: by
  // libpng's defaults a PNG of a few MB may hold a thousand compressed text
  // chunks of 8 MB each, seconds and gigabytes for every record read.
  static constexpr png_byte kSkipped[] = "tEXt\0zTXt\0iTXt\0iCCP\0sPLT\0eXIf";
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, kSkipped, int(sizeof kSkipped / 5));
  png_set_chunk_malloc_max(png, kMostAncillaryChunkBytes);
  png_set_compression_buffer_size(png, kIdatReadBytes);  // a read struct's IDAT read size
  png_read_info(png, info);
  const int color_type = png_get_color_type(png, info);
  header->height = png_get_image_height(png, info);
  header->width = png_get_image_width(png, info);
  header->channels = color_type == PNG_COLOR_TYPE_PALETTE ? 3 : png_get_channels(png, info);
  if (color_type & PNG_COLOR_MASK_ALPHA || png_get_valid(png, info, PNG_INFO_tRNS))
    std::snprintf(source->error, sizeof source->error, "%s",
                  "with transparency (an alpha channel or tRNS); expected grey or RGB without");
  else if (png_get_bit_depth(png, info) == 16)
    std::snprintf(source->error, sizeof source->error, "%s",
                  "of 16-bit samples; expected 8-bit ones");
  if (out && source->error[0] == '\0') {
    if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color_type == PNG_COLOR_TYPE_GRAY) png_set_expand_gray_1_2_4_to_8(png);
    const int passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);
    const size_t row_bytes = png_get_rowbytes(png, info);
    if (row_bytes != size_t(header->width) * size_t(header->channels))
      png_error(png, "rows of another size than 8-bit samples make");
    for (int pass = 0; pass < passes; ++pass)
      for (int64_t y = 0; y < header->height; ++y) {
        // The last row inflates the rest of the stream to check its end.
        if (pass == passes - 1 && y == header->height - 1 &&
            idatBytesAfterOffset(*source) > kMostIdatAfterRows + 2 * (row_bytes + 1))
          png_error(png, "more compressed data past the image's pixels than its last row");
        png_read_row(png, out + size_t(y) * row_bytes, nullptr);
      }
    png_read_end(png, nullptr);
  }
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

}  // namespace

bool isPng(std::string_view bytes) {
  return bytes.size() >= sizeof kSignature &&
         std::memcmp(bytes.data(), kSignature, sizeof kSignature) == 0;
}

ImageHeader readPngHeader(std::string_view png) {
  PngSource source{reinterpret_cast<const unsigned char*>(png.data()), png.size(), 0, {}};
  ImageHeader header;
  const bool read = readPng(&source, &header, nullptr);
  if (!read)
    header = ImageHeader{0, 0, 0, std::string("a corrupt PNG header: ") + source.error};
  else if (source.error[0] != '\0')
    header.error = std::string("a PNG image ") + source.error;
  return header;
}

std::string decodePng(std::string_view png, const ImageHeader& header, uint8_t* out) {
  PngSource source{reinterpret_cast<const unsigned char*>(png.data()), png.size(), 0, {}};
  ImageHeader decoded;
  if (!readPng(&source, &decoded, out)) return std::string("a corrupt PNG image: ") + source.error;
  if (decoded.height != header.height || decoded.width != header.width ||
      decoded.channels != header.channels || source.error[0] != '\0')
    return "a PNG image other than its header said";  // the caller checked this one
  return "";
}

}  // namespace traind
