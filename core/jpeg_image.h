// JPEG images decoded through libjpeg(-turbo): the image feature of the
// TFRecord files TensorFlow 1's build_image_data.py writes (`image/encoded`)
// and of any job that stored tf.io.encode_jpeg's output.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/image_header.h"

namespace traind {

// True if `bytes` starts as a JPEG image does (an SOI marker, then another).
bool isJpeg(std::string_view bytes);

// What a JPEG image's header says, without decoding it. Grey (1 channel)
// and colour (YCbCr or RGB, 3 channels) images of fewer than 2^29 values
// (TensorFlow's limit) are taken; `error` is "" for those, else why the
// image is refused (CMYK, which TensorFlow converts with its own formula).
// `channels` is the image's own count.
ImageHeader readJpegHeader(std::string_view jpeg);

// Decodes `jpeg`, whose header readJpegHeader took without an error, into
// height x width x `channels` bytes at `out` (`channels` 1 or 3: grey from
// a colour image, or colour from a grey one, as libjpeg converts them),
// exactly as TensorFlow's tf.io.decode_jpeg(jpeg, channels) does with its
// defaults (the fast integer IDCT, fancy upsampling). An image cut short is
// refused, as TensorFlow refuses it; so is one whose decoding would take
// libjpeg more than 512 MiB beside `out` (a progressive image's buffers) or
// more than 100 scans, which a small file can claim by the thousand.
// Returns "" or what is wrong with its data.
std::string decodeJpeg(std::string_view jpeg, const ImageHeader& header, int channels,
                       uint8_t* out);

}  // namespace traind
