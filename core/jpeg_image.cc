#include "core/jpeg_image.h"

// jpeglib.h needs size_t and FILE declared before it.
#include <jpeglib.h>

#include <csetjmp>
#include <cstddef>
#include <cstdio>
// after jpeglib.h, which it needs
#include <jerror.h>

namespace traind {
namespace {

// libjpeg's error manager, where its errors jump back to, and what they said.
struct JpegErrors {
  jpeg_error_mgr manager;  // first: libjpeg hands back a pointer to it
  std::jmp_buf jump;
  char error[JMSG_LENGTH_MAX];
  bool cut_short;  // libjpeg met the end of the data and made up the rest
};

[[noreturn]] void onError(j_common_ptr jpeg) {
  auto* errors = reinterpret_cast<JpegErrors*>(jpeg->err);
  jpeg->err->format_message(jpeg, errors->error);
  std::longjmp(errors->jump, 1);
}

// Warnings (level -1) are about data libjpeg decoded anyway. The end of
// the data before the image's is one TensorFlow refuses; others (bytes
// between markers) it takes, and so does this decoder.
void onMessage(j_common_ptr jpeg, int level) {
  auto* errors = reinterpret_cast<JpegErrors*>(jpeg->err);
  if (level == -1 && jpeg->err->msg_code == JWRN_JPEG_EOF) errors->cut_short = true;
}

// Reads the header into `header` and, with `out`, the image as `channels`
// channels; false with errors->error on a libjpeg error. No C++ object
// lives in this frame, which libjpeg's errors leave by longjmp.
bool readJpeg(const unsigned char* data, size_t size, JpegErrors* errors, JpegHeader* header,
              int channels, uint8_t* out) {
  jpeg_decompress_struct jpeg;
  jpeg.err = jpeg_std_error(&errors->manager);
  errors->manager.error_exit = onError;
  errors->manager.emit_message = onMessage;
  if (setjmp(errors->jump)) {
    jpeg_destroy_decompress(&jpeg);
    return false;
  }
  jpeg_create_decompress(&jpeg);
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

JpegHeader readJpegHeader(std::string_view jpeg) {
  JpegErrors errors{};
  JpegHeader header;
  if (!readJpeg(reinterpret_cast<const unsigned char*>(jpeg.data()), jpeg.size(), &errors, &header,
                0, nullptr))
    return JpegHeader{0, 0, 0, std::string("a corrupt JPEG header: ") + errors.error};
  if (errors.error[0] != '\0') header.error = std::string("a JPEG image ") + errors.error;
  return header;
}

std::string decodeJpeg(std::string_view jpeg, const JpegHeader& header, int channels,
                       uint8_t* out) {
  JpegErrors errors{};
  JpegHeader decoded;
  if (!readJpeg(reinterpret_cast<const unsigned char*>(jpeg.data()), jpeg.size(), &errors, &decoded,
                channels, out))
    return std::string("a corrupt JPEG image: ") + errors.error;
  if (errors.cut_short) return "a JPEG image cut short (its data ends before the image does)";
  if (decoded.height != header.height || decoded.width != header.width ||
      decoded.channels != header.channels || errors.error[0] != '\0')
    return "a JPEG image other than its header said";  // the caller checked this one
  return "";
}

}  // namespace traind
