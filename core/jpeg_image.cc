#include "core/jpeg_image.h"

#include <csetjmp>

// jpeglib.h needs size_t and FILE declared before it, and jerror.h comes
// after jpeglib.h: an order clang-format would sort away.
// clang-format off
#include <cstddef>
#include <cstdio>
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

namespace traind {
namespace {

// TensorFlow's decode_jpeg refuses an image of 2^29 values or more
// (height x width x the file's components; jpeg_mem.cc), and so does this.
constexpr double kMaxValues = double(int64_t(1) << 29);
// What libjpeg may take for the whole-image buffers of a progressive or
// multi-scan image (2 bytes a value), beside the decoded image: a colour
// photograph of 80 megapixels.
constexpr long kMaxWorkingBytes = long(512) << 20;
// The scans a progressive image may have. Encoders write about 10; each
// scan visits the whole image, so a small file of thousands of empty scans
// would take minutes to decode (libjpeg-turbo's advice: djpeg -maxscans).
constexpr int kMaxScans = 100;

// libjpeg's error manager, where its errors jump back to, and what they said.
struct JpegErrors {
  jpeg_error_mgr manager;  // first: libjpeg hands back a pointer to it
  std::jmp_buf jump;
  char error[JMSG_LENGTH_MAX + 64];
  bool cut_short;  // libjpeg met the end of the data and made up the rest
};

[[noreturn]] void failWith(j_common_ptr jpeg) {
  std::longjmp(reinterpret_cast<JpegErrors*>(jpeg->err)->jump, 1);
}

[[noreturn]] void onError(j_common_ptr jpeg) {
  auto* errors = reinterpret_cast<JpegErrors*>(jpeg->err);
  if (jpeg->err->msg_code == JERR_NO_BACKING_STORE)  // kMaxWorkingBytes reached
    std::snprintf(errors->error, sizeof errors->error,
                  "it needs more than %ld MiB of memory to decode", kMaxWorkingBytes >> 20);
  else
    jpeg->err->format_message(jpeg, errors->error);
  failWith(jpeg);
}

// Warnings (level -1) are about data libjpeg decoded anyway. The end of
// the data before the image's is one TensorFlow refuses; others (bytes
// between markers) it takes, and so does this decoder.
void onMessage(j_common_ptr jpeg, int level) {
  auto* errors = reinterpret_cast<JpegErrors*>(jpeg->err);
  if (level == -1 && jpeg->err->msg_code == JWRN_JPEG_EOF) errors->cut_short = true;
}

void onProgress(j_common_ptr jpeg) {
  const auto* decompress = reinterpret_cast<j_decompress_ptr>(jpeg);
  if (decompress->input_scan_number <= kMaxScans) return;
  auto* errors = reinterpret_cast<JpegErrors*>(jpeg->err);
  std::snprintf(errors->error, sizeof errors->error, "it has more than %d scans", kMaxScans);
  failWith(jpeg);
}

// Reads the header into `header` and, with `out`, the image as `channels`
// channels, refusing one of another size than `expected`; false with
// errors->error on a libjpeg error. No C++ object lives in this frame,
// which libjpeg's errors leave by longjmp.
bool readJpeg(const unsigned char* data, size_t size, JpegErrors* errors, ImageHeader* header,
              const ImageHeader* expected, int channels, uint8_t* out) {
  jpeg_decompress_struct jpeg;
  jpeg_progress_mgr progress{};
  jpeg.err = jpeg_std_error(&errors->manager);
  errors->manager.error_exit = onError;
  errors->manager.emit_message = onMessage;
  if (setjmp(errors->jump)) {
    jpeg_destroy_decompress(&jpeg);
    return false;
  }
  jpeg_create_decompress(&jpeg);
  jpeg.mem->max_memory_to_use = kMaxWorkingBytes;
  progress.progress_monitor = onProgress;
  jpeg.progress = &progress;
  jpeg_mem_src(&jpeg, data, static_cast<unsigned long>(size));
  jpeg_read_header(&jpeg, TRUE);
  header->height = jpeg.image_height;
  header->width = jpeg.image_width;
  header->channels = jpeg.num_components;
  if (jpeg.jpeg_color_space == JCS_CMYK || jpeg.jpeg_color_space == JCS_YCCK)
    std::snprintf(errors->error, sizeof errors->error, "%s",
                  "in CMYK; expected grey or colour (YCbCr or RGB)");
  else if (jpeg.num_components != 1 && jpeg.num_components != 3)
    std::snprintf(errors->error, sizeof errors->error, "of %d components; expected 1 or 3",
                  jpeg.num_components);
  else if (double(jpeg.image_height) * double(jpeg.image_width) * jpeg.num_components >= kMaxValues)
    std::snprintf(errors->error, sizeof errors->error,
                  "of %u x %u pixels; expected fewer than 2^29 values, as TensorFlow does",
                  jpeg.image_height, jpeg.image_width);
  else if (expected && (header->height != expected->height || header->width != expected->width ||
                        header->channels != expected->channels))
    std::snprintf(errors->error, sizeof errors->error, "%s", "other than its header said");
  if (out && errors->error[0] == '\0') {
    jpeg.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg.dct_method = JDCT_IFAST;  // TensorFlow's default, not libjpeg's
    jpeg.do_fancy_upsampling = TRUE;
    jpeg_start_decompress(&jpeg);
    const size_t row_bytes = size_t(jpeg.output_width) * size_t(channels);
    if (jpeg.output_components != channels || jpeg.output_width != header->width ||
        jpeg.output_height != header->height) {
      std::snprintf(errors->error, sizeof errors->error, "%s", "decodes to another size");
    } else {
      while (jpeg.output_scanline < jpeg.output_height) {
        JSAMPROW row = out + size_t(jpeg.output_scanline) * row_bytes;
        jpeg_read_scanlines(&jpeg, &row, 1);
      }
      jpeg_finish_decompress(&jpeg);
    }
  }
  jpeg_destroy_decompress(&jpeg);
  return true;
}

}  // namespace

bool isJpeg(std::string_view bytes) {
  return bytes.size() >= 3 && static_cast<unsigned char>(bytes[0]) == 0xff &&
         static_cast<unsigned char>(bytes[1]) == 0xd8 &&
         static_cast<unsigned char>(bytes[2]) == 0xff;
}

ImageHeader readJpegHeader(std::string_view jpeg) {
  JpegErrors errors{};
  ImageHeader header;
  if (!readJpeg(reinterpret_cast<const unsigned char*>(jpeg.data()), jpeg.size(), &errors, &header,
                nullptr, 0, nullptr))
    return ImageHeader{0, 0, 0, std::string("a corrupt JPEG header: ") + errors.error};
  if (errors.error[0] != '\0') header.error = std::string("a JPEG image ") + errors.error;
  return header;
}

std::string decodeJpeg(std::string_view jpeg, const ImageHeader& header, int channels,
                       uint8_t* out) {
  JpegErrors errors{};
  ImageHeader decoded;
  if (!readJpeg(reinterpret_cast<const unsigned char*>(jpeg.data()), jpeg.size(), &errors, &decoded,
                &header, channels, out))
    return std::string("a JPEG image that cannot be decoded: ") + errors.error;
  if (errors.cut_short) return "a JPEG image cut short (its data ends before the image does)";
  if (errors.error[0] != '\0') return std::string("a JPEG image ") + errors.error;
  return "";
}

}  // namespace traind
