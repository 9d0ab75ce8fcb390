#include "core/dataset.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/augmentation.h"
#include "core/compressed_file.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/pixel_inputs.h"
#include "core/random.h"

namespace traind {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw InputError(path + ": " + what);
}

std::string hex32(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", value);
  return text;
}

// Gzip from its first two bytes, else raw: an IDX file's magic starts with
// two zero bytes. A file that cannot be read is raw here, for the reader to
// name what is wrong with it.
CompressedFile::Format idxFileFormat(const std::string& path) {
  unsigned char first[2] = {};
  std::ifstream file(path, std::ios::binary);
  file.read(reinterpret_cast<char*>(first), sizeof first);
  return file.gcount() == 2 && CompressedFile::isGzipHeader(first) ? CompressedFile::Format::Gzip
                                                                   : CompressedFile::Format::Raw;
}

// One IDX file, gzip-compressed or raw, read to its end.
class IdxFile {
 public:
  // `magics`: the formats the caller takes, the first one the usual; their
  // low byte is the rank. `kind` names the items in messages: "images" or
  // "labels".
  IdxFile(const std::string& path, std::initializer_list<uint32_t> magics, std::string kind)
      : path_(path), kind_(std::move(kind)), file_(path, idxFileFormat(path), "an IDX file") {
    // The magic first: it says how long the rest of the header is.
    std::array<uint8_t, 4 + 4 * 255> header;
    size_t got = read(header.data(), 4);
    const uint32_t found = got == 4 ? bigEndian(header.data()) : *magics.begin();
    const bool known = std::find(magics.begin(), magics.end(), found) != magics.end();
    const size_t header_bytes = 4 + 4 * size_t(found & 0xff);
    if (got == 4 && known) got += read(header.data() + 4, header_bytes - 4);
    if (got < header_bytes && !file_.error().empty() && !file_.cutShort())
      fail(path_, unreadable());
    if (got < 4 || (known && got < header_bytes))
      fail(path_, "file ends after " + std::to_string(got) + " bytes, inside its " +
                      std::to_string(header_bytes) + "-byte IDX header");
    if (!known) {
      std::string expected;
      for (uint32_t magic : magics) expected += (expected.empty() ? "" : " or ") + hex32(magic);
      std::string what = "expected IDX magic " + expected + " (" + kind_ + "), got " + hex32(found);
      if (found == idx_format::kImagesMagic || found == idx_format::kChannelImagesMagic)
        what += " (an images file)";
      if (found == idx_format::kLabelsMagic) what += " (a labels file)";
      fail(path_, what);
    }
    for (size_t i = 0; i < size_t(found & 0xff); ++i)
      dims_.push_back(bigEndian(header.data() + 4 + 4 * i));
    if (std::count(dims_.begin(), dims_.end(), 0u) != 0)
      fail(path_, "header declares " + declared());
  }

  const std::vector<uint32_t>& dims() const { return dims_; }
  // The CRC-32C of the bytes of the items readItems kept or read past: the
  // first `keep`, every share's.
  uint32_t crc() const { return crc_; }

  // Reads the bytes of the first `keep` items, of those the share's, then
  // the rest of the file, counting, to check that the file holds exactly
  // what its header declares.
  std::vector<uint8_t> readItems(int64_t keep, DataShare share) {
    // Three u32 dims of a rank-4 file can pass 2^64: counted wide, and
    // refused past what any memory holds.
    unsigned __int128 wide_item_bytes = 1;
    for (size_t i = 1; i < dims_.size(); ++i) wide_item_bytes *= dims_[i];
    const unsigned __int128 declared_bytes = (unsigned __int128)(dims_[0]) * wide_item_bytes;
    if ((unsigned __int128)(keep)*wide_item_bytes > (unsigned __int128)(1) << 62)
      fail(path_, "header declares " + declared() + ": more than any memory holds");
    const uint64_t item_bytes = uint64_t(wide_item_bytes);
    const uint64_t keep_bytes = uint64_t(keep) * item_bytes;

    // Grown as data arrives, so a header that lies about its size costs no memory.
    std::vector<uint8_t> items;
    uint64_t total = 0;
    if (share.count == 1) {
      while (total < keep_bytes) {
        if (total == items.size())
          items.resize(std::min<uint64_t>(keep_bytes, std::max<uint64_t>(2 * total, 1 << 20)));
        const size_t got = read(items.data() + total, items.size() - total);
        total += got;
        if (got == 0) break;
      }
      items.resize(total);
      crc_ = crc32c(std::string_view(reinterpret_cast<const char*>(items.data()), items.size()));
    } else {
      // A buffer at a time, whatever the header says an item is; the
      // share's bytes copied out as they pass.
      std::vector<uint8_t> buffer(1 << 20);
      int64_t item = 0;
      uint64_t within_item = 0;  // bytes of `item` passed already
      while (total < keep_bytes) {
        const size_t got =
            read(buffer.data(), size_t(std::min<uint64_t>(buffer.size(), keep_bytes - total)));
        total += got;
        if (got == 0) break;
        crc_ = crc32c(std::string_view(reinterpret_cast<const char*>(buffer.data()), got), crc_);
        for (size_t at = 0; at < got;) {
          const size_t part = size_t(std::min<uint64_t>(item_bytes - within_item, got - at));
          if (share.keeps(item))
            items.insert(items.end(), buffer.begin() + at, buffer.begin() + at + part);
          at += part;
          within_item += part;
          if (within_item == item_bytes) {
            ++item;
            within_item = 0;
          }
        }
      }
    }
    // Counted up to a buffer or two past what the header declares, no
    // further: a file that holds more (a gzip stream of endless zeros) is
    // refused unread.
    std::vector<uint8_t> rest(1 << 20);
    bool more = false;
    while (size_t got = read(rest.data(), rest.size())) {
      total += got;
      if ((more = total > declared_bytes + rest.size())) break;
    }

    // A stream cut short still counts what it held; after other errors
    // (corrupt data, bytes after its end, a read error) the count is not to
    // be trusted.
    const std::string& error = file_.error();
    if (!error.empty() && !file_.cutShort()) fail(path_, unreadable());
    if (total != declared_bytes) {
      std::string what = "header declares " + declared() + " but the file holds " +
                         (more ? "at least " : "") + std::to_string(total) + " bytes of " +
                         (kind_ == "images" ? "pixels" : "labels");
      if (!error.empty()) what += " (gzip: " + error + ")";
      fail(path_, what);
    }
    if (!error.empty()) fail(path_, unreadable());
    return items;
  }

 private:
  static uint32_t bigEndian(const uint8_t* p) {
    return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
  }

  // "60000 images of 28x28", "60000 labels"
  std::string declared() const {
    std::string text = std::to_string(dims_[0]) + " " + kind_;
    for (size_t i = 1; i < dims_.size(); ++i)
      text += (i == 1 ? " of " : "x") + std::to_string(dims_[i]);
    return text;
  }

  size_t read(uint8_t* dst, size_t bytes) { return file_.read(dst, bytes); }

  // What the file's error says: "corrupt gzip stream: incorrect data check",
  // "corrupt gzip stream: bytes after the end of the gzip data", "cannot
  // read: Input/output error".
  std::string unreadable() const {
    return (file_.format() == CompressedFile::Format::Gzip ? "corrupt gzip stream: "
                                                           : "cannot read: ") +
           file_.error();
  }

  std::string path_;
  std::string kind_;
  CompressedFile file_;
  std::vector<uint32_t> dims_;
  uint32_t crc_ = 0;
};

}  // namespace

void DataShare::check() const {
  if (count < 1 || index < 0 || index >= count)
    throw std::invalid_argument("DataShare: share " + std::to_string(index) + " of " +
                                std::to_string(count));
}

Dataset loadIdxDataset(const DataFiles& source, const DataLoadCheck& check, DataShare share) {
  share.check();
  // Each file is checked whole before the two are compared: a count that
  // differs is more often a damaged file than a mismatched pair.
  IdxFile images(source.images, {idx_format::kImagesMagic, idx_format::kChannelImagesMagic},
                 "images");
  const int64_t count = images.dims()[0];
  const int64_t keep = source.limit > 0 ? std::min(source.limit, count) : count;
  const Shape example_shape{images.dims()[1], images.dims()[2],
                            images.dims().size() == 4 ? images.dims()[3] : 1};
  // The share's examples among the first `keep`: k = index, index + count, ...
  const int64_t kept =
      keep > share.index ? (keep - share.index + share.count - 1) / share.count : 0;
  if (kept == 0)
    throw InputError(source.images + ": " +
                     (keep < count ? "the first " + std::to_string(keep) + " images (limit)"
                                   : std::to_string(keep) + " images") +
                     ", none for share " + std::to_string(share.index) + " of " +
                     std::to_string(share.count) + " (data.shard_by_worker)" + kEmptyShareHint);
  if (check) check(example_shape, kept, 1);
  std::vector<uint8_t> pixels = images.readItems(keep, share);
  IdxFile labels(source.labels, {idx_format::kLabelsMagic}, "labels");
  const std::vector<uint8_t> classes =
      labels.readItems(std::min<int64_t>(keep, labels.dims()[0]), share);
  if (labels.dims()[0] != images.dims()[0])
    throw InputError(source.images + ": " + std::to_string(count) + " images but " + source.labels +
                     ": " + std::to_string(labels.dims()[0]) + " labels; the counts must match");

  Dataset data;
  data.size = kept;
  data.share = share;
  if (share.count > 1) data.whole_size = keep;
  data.example_shape = example_shape;
  data.pixels = std::move(pixels);
  data.labels.assign(classes.begin(), classes.end());
  data.num_classes = 1 + *std::max_element(classes.begin(), classes.end());
  data.content_crc = crc32cOfWord(labels.crc(), images.crc());
  return data;
}

Dataset makeSyntheticRegression(const SyntheticRegressionSpec& spec, uint64_t seed) {
  if (spec.points <= 0 || !(spec.x_min <= spec.x_max) || !(spec.noise_stddev >= 0.0f))
    throw std::invalid_argument("makeSyntheticRegression: invalid spec");
  Dataset data;
  data.example_shape = {1};
  data.size = spec.points;
  data.pixel_scale = false;
  data.floats.resize(spec.points);
  data.targets.resize(spec.points);
  Rng rng(seed);
  const double range = double(spec.x_max) - double(spec.x_min);
  for (int64_t i = 0; i < spec.points; ++i) {
    const double x = spec.x_min + range * rng.uniform();
    data.floats[i] = float(x);
    data.targets[i] = float(x * x + spec.noise_stddev * rng.normal());
  }
  const auto bytes = [](const std::vector<float>& values) {
    return std::string_view(reinterpret_cast<const char*>(values.data()),
                            values.size() * sizeof(float));
  };
  data.content_crc = crc32c(bytes(data.targets), crc32c(bytes(data.floats)));
  return data;
}

std::string contentText(const Dataset& data) {
  return fmt::format("{} examples, CRC-32C {:#010x}", data.wholeSize(), data.content_crc);
}

void copyInputs(const Dataset& data, int64_t begin, int64_t count, float* out) {
  const int64_t example = numElements(data.example_shape);
  const size_t first = size_t(begin * example), values = size_t(count * example);
  if (data.files) {
    for (int64_t i = 0; i < count; ++i) data.files->read(begin + i, out + i * example);
    return;
  }
  if (data.pixels.empty()) {
    std::memcpy(out, data.floats.data() + first, values * sizeof(float));
    return;
  }
  pixelsToInputs(data.pixels.data() + first, values, out);
}

void standardizeExample(float* values, int64_t count, bool pixel_scale) {
  // In double: a float mean would shift a low-contrast image's values by
  // a good part of their spread.
  double sum = 0.0;
  for (int64_t i = 0; i < count; ++i) sum += values[i];
  const double mean = sum / double(count);
  double squares = 0.0;
  for (int64_t i = 0; i < count; ++i) squares += (values[i] - mean) * (values[i] - mean);
  const double stddev = std::sqrt(squares / double(count));
  const double lowest = 1.0 / ((pixel_scale ? 255.0 : 1.0) * std::sqrt(double(count)));
  const double scale = 1.0 / std::max(stddev, lowest);
  for (int64_t i = 0; i < count; ++i) values[i] = float((values[i] - mean) * scale);
}

Batch sliceBatch(const Dataset& data, int64_t begin, int64_t count, float* inputs) {
  if (begin < 0 || count < 0 || begin + count > data.size)
    throw std::out_of_range("sliceBatch: examples [" + std::to_string(begin) + ", " +
                            std::to_string(begin + count) + ") of a data set of " +
                            std::to_string(data.size));
  if (!data.window.empty() && (data.example_shape.size() != 3 || data.window.size() != 3 ||
                               data.window[2] != data.example_shape[2]))
    throw std::invalid_argument("sliceBatch: a window of " + shapeToString(data.window) +
                                " of examples of " + shapeToString(data.example_shape));
  const int64_t example = numElements(data.inputShape());
  if (data.window.empty()) {
    copyInputs(data, begin, count, inputs);
  } else {
    std::vector<float> image(size_t(numElements(data.example_shape)));
    for (int64_t i = 0; i < count; ++i) {
      copyInputs(data, begin + i, 1, image.data());
      centreWindow(data.example_shape, data.window, image.data(), inputs + i * example);
    }
  }
  if (data.per_image_standardization)
    for (int64_t i = 0; i < count; ++i)
      standardizeExample(inputs + i * example, example, data.pixel_scale);
  Batch batch;
  batch.size = count;
  batch.inputs = inputs;
  if (!data.labels.empty()) batch.labels = data.labels.data() + begin;
  if (!data.targets.empty()) batch.targets = data.targets.data() + begin;
  return batch;
}

}  // namespace traind
