// PNG images decoded through libpng: the image feature of TFRecord files
// that tensorflow_datasets writes (MNIST, Fashion-MNIST, CIFAR-10 as PNG),
// and of any job that stored tf.io.encode_png's output.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/image_header.h"

namespace traind {

// True if `bytes` starts with PNG's signature.
bool isPng(std::string_view bytes);

// What a PNG image's header says, without decoding it. Only images whose
// 8-bit samples (or grey samples of 1, 2 or 4 bits, or palette entries)
// are what they decode to are taken: grey (1 channel), RGB or a palette of
// RGB (3); `error` is "" for those, else why the image is refused. Alpha
// (and tRNS), 16-bit samples and grey from colour would be conversions,
// each done its own way by each decoder. `channels` is the image's own
// count, 2 and 4 with alpha.
ImageHeader readPngHeader(std::string_view png);

// Decodes `png`, whose header readPngHeader took without an error, into
// height x width x channels bytes at `out`: its samples as stored, as
// TensorFlow's tf.io.decode_png gives them (no gamma correction; palette
// entries expanded; interlaced images put together). Returns "" or what is
// wrong with its data.
std::string decodePng(std::string_view png, const ImageHeader& header, uint8_t* out);

}  // namespace traind
