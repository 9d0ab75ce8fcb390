#include "core/example_records.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/example.pb.h"
#include "core/gzip_file.h"
#include "core/printable.h"
#include "core/tfrecord.h"

namespace traind {
namespace {

using tensorflow::Feature;

// A record is one example: an image and a few small features. The bound
// keeps a length that lies from reaching protobuf's 2 GiB limit; memory
// grows only with the bytes a record really holds.
constexpr uint64_t kMaxRecordBytes = uint64_t(256) << 20;
constexpr int64_t kMaxExampleElements = INT32_MAX;
// The largest class: one more is num_classes, an int.
constexpr int64_t kMaxClass = INT32_MAX - 1;
// The first buffers hold this many examples; they double from there.
constexpr int64_t kFirstCapacity = 1024;

std::string_view kindOf(const Feature& feature) {
  switch (feature.kind_case()) {
    case Feature::kBytesList:
      return "bytes";
    case Feature::kFloatList:
      return "floats";
    case Feature::kInt64List:
      return "int64s";
    case Feature::KIND_NOT_SET:
      break;
  }
  return "no value";
}

// What a record's image bytes are when they are not raw pixels.
std::string_view encodingOf(const std::string& bytes) {
  if (bytes.starts_with("\xff\xd8\xff")) return ", a JPEG image";
  if (bytes.starts_with("\x89PNG\r\n\x1a\n")) return ", a PNG image";
  return "";
}

class ExampleLoader {
 public:
  ExampleLoader(const DataFiles& source, const Shape& model_input,
                const ExampleGrowthCheck& check_growth)
      : source_(source), shape_(model_input), check_growth_(check_growth) {}

  // Reads `path` to its end, or up to the limit; false once the limit is reached.
  bool readFile(const std::string& path) {
    GzipFile file(path, "a TFRecord file");
    file_ = &file;
    TfRecordReader reader(
        [&](char* dst, size_t bytes) {
          const size_t got = file.read(dst, bytes);
          if (got < bytes && file.status() != Z_OK && file.status() != Z_BUF_ERROR)
            throw InputError(path + ": corrupt gzip stream: " + file.error());
          return got;
        },
        path, kMaxRecordBytes);
    std::string record;
    tensorflow::Example example;
    while (!full()) {
      offset_ = reader.bytesRead();
      index_ = reader.recordsRead();
      if (!reader.next(record)) break;
      if (!example.ParseFromString(record))
        fail("expected a tf.train.Example message, got " + std::to_string(record.size()) +
             " bytes that are none");
      take(example);
    }
    // A gzip stream cut short between two records would pass for a shorter file.
    if (!full() && file.status() != Z_OK)
      throw InputError(path + ": corrupt gzip stream after " +
                       std::to_string(reader.recordsRead()) + " records: " + file.error());
    file_ = nullptr;
    return !full();
  }

  Dataset finish() {
    if (data_.size == 0)
      throw InputError(source_.records.size() == 1
                           ? source_.records.front() + ": holds no records"
                           : fmt::format("the {} files from {} on hold no records",
                                         source_.records.size(), source_.records.front()));
    data_.example_shape = shape_;
    if (!data_.labels.empty())
      data_.num_classes = 1 + *std::max_element(data_.labels.begin(), data_.labels.end());
    return std::move(data_);
  }

 private:
  enum class ImageKind { Pixels, Floats };
  enum class LabelKind { Class, Target };

  bool full() const { return source_.limit > 0 && data_.size >= source_.limit; }

  [[noreturn]] void fail(std::string_view what) const {
    throw InputError(
        fmt::format("{}: record {} at byte {}: {}", file_->path(), index_, offset_, what));
  }

  [[noreturn]] void failFeature(std::string_view name, std::string_view what) const {
    fail(fmt::format("feature '{}' {}", printable(name), what));
  }

  void take(const tensorflow::Example& example) {
    const Feature* image = nullptr;
    const Feature* label = nullptr;
    const Feature* height = nullptr;
    const Feature* width = nullptr;
    const Feature* depth = nullptr;
    std::vector<std::string_view> names;
    for (const tensorflow::FeatureEntry& entry : example.features().feature()) {
      const std::string& key = entry.key();
      if (std::find(names.begin(), names.end(), key) != names.end())
        failFeature(key, "is given twice");
      names.push_back(key);
      if (key == source_.image_feature) image = &entry.value();
      if (key == source_.label_feature) label = &entry.value();
      if (key == "height") height = &entry.value();
      if (key == "width") width = &entry.value();
      if (key == "depth") depth = &entry.value();
    }
    const auto missing = [&](const std::string& name, std::string_view field) {
      std::string listed;
      for (size_t i = 0; i < names.size() && i < 10; ++i)
        listed += (i ? ", " : "") + printable(names[i]);
      if (names.size() > 10) listed += fmt::format(" and {} more", names.size() - 10);
      fail(fmt::format("has no feature '{}' (its features: {}); set {} to the one that holds {}",
                       printable(name), names.empty() ? "none" : listed, field,
                       field == "image_feature" ? "the image" : "the label"));
    };
    if (!image) missing(source_.image_feature, "image_feature");
    if (!label) missing(source_.label_feature, "label_feature");

    if (height && width) takeShape(*height, *width, depth);
    if (data_.size == 0) begin(*image, *label);
    grow();
    takeImage(*image);
    takeLabel(*label);
    ++data_.size;
  }

  // A dimension feature: one int64 from 1 to kMaxExampleElements.
  int64_t dimension(const Feature& feature, std::string_view name) const {
    if (feature.kind_case() != Feature::kInt64List || feature.int64_list().value_size() != 1)
      failFeature(name, fmt::format("holds {}; expected one int64", kindOf(feature)));
    const int64_t value = feature.int64_list().value(0);
    if (value < 1 || value > kMaxExampleElements)
      failFeature(name,
                  fmt::format("is {}; expected a size from 1 to {}", value, kMaxExampleElements));
    return value;
  }

  void takeShape(const Feature& height, const Feature& width, const Feature* depth) {
    const Shape shape{dimension(height, "height"), dimension(width, "width"),
                      depth ? dimension(*depth, "depth") : 1};
    if (double(shape[0]) * double(shape[1]) * double(shape[2]) > double(kMaxExampleElements))
      fail(fmt::format("height, width and depth give images of {}, more than {} values",
                       shapeToString(shape), kMaxExampleElements));
    if (data_.size == 0 && !shape_from_records_) {
      shape_ = shape;
      shape_from_records_ = true;
    } else if (shape != shape_) {
      fail(fmt::format("height, width and depth give an image of {}, {} {}", shapeToString(shape),
                       shape_from_records_ ? "the records before it" : "the model's input",
                       shapeToString(shape_)));
    }
  }

  // The first record chooses what every record's features hold.
  void begin(const Feature& image, const Feature& label) {
    if (image.kind_case() == Feature::kFloatList) image_kind_ = ImageKind::Floats;
    if (label.kind_case() == Feature::kFloatList) label_kind_ = LabelKind::Target;
  }

  void grow() {
    if (data_.size < capacity_) return;
    int64_t capacity = std::max(kFirstCapacity, 2 * capacity_);
    if (source_.limit > 0) capacity = std::min(capacity, source_.limit);
    if (check_growth_)
      check_growth_(shape_, capacity, image_kind_ == ImageKind::Pixels ? 1 : int(sizeof(float)));
    const size_t elements = size_t(numElements(shape_)) * size_t(capacity);
    if (image_kind_ == ImageKind::Pixels)
      data_.pixels.reserve(elements);
    else
      data_.floats.reserve(elements);
    if (label_kind_ == LabelKind::Class)
      data_.labels.reserve(size_t(capacity));
    else
      data_.targets.reserve(size_t(capacity));
    capacity_ = capacity;
  }

  void takeImage(const Feature& image) {
    const std::string& name = source_.image_feature;
    const int64_t elements = numElements(shape_);
    const std::string expected =
        image_kind_ == ImageKind::Pixels
            ? fmt::format("the {} raw pixels (bytes) of an image of {}", elements,
                          shapeToString(shape_))
            : fmt::format("the {} floats of an image of {}", elements, shapeToString(shape_));
    if (image_kind_ == ImageKind::Pixels && image.kind_case() == Feature::kBytesList &&
        image.bytes_list().value_size() == 1) {
      const std::string& bytes = image.bytes_list().value(0);
      if (int64_t(bytes.size()) != elements)
        failFeature(name, fmt::format("holds {} bytes{}; expected {}{}", bytes.size(),
                                      encodingOf(bytes), expected,
                                      encodingOf(bytes).empty()
                                          ? ""
                                          : " (decode the images as the records are written)"));
      data_.pixels.insert(data_.pixels.end(), bytes.begin(), bytes.end());
      return;
    }
    if (image_kind_ == ImageKind::Floats && image.kind_case() == Feature::kFloatList) {
      const auto& values = image.float_list().value();
      if (values.size() != elements)
        failFeature(name, fmt::format("holds {} floats; expected {}", values.size(), expected));
      for (int i = 0; i < values.size(); ++i)
        if (!std::isfinite(values[i]))
          failFeature(name,
                      fmt::format("holds {} at value {}; expected finite floats", values[i], i));
      data_.floats.insert(data_.floats.end(), values.begin(), values.end());
      return;
    }
    const int count =
        image.kind_case() == Feature::kBytesList ? image.bytes_list().value_size() : 0;
    failFeature(name, fmt::format("holds {}{}; expected {}{}", kindOf(image),
                                  count > 1 ? fmt::format(" ({} values)", count) : "", expected,
                                  data_.size > 0 ? ", as the records before it" : ""));
  }

  void takeLabel(const Feature& label) {
    const std::string& name = source_.label_feature;
    if (label_kind_ == LabelKind::Class && label.kind_case() == Feature::kInt64List &&
        label.int64_list().value_size() == 1) {
      const int64_t value = label.int64_list().value(0);
      if (value < 0 || value > kMaxClass)
        failFeature(name, fmt::format("is {}; expected a class from 0 to {}", value, kMaxClass));
      data_.labels.push_back(int32_t(value));
      return;
    }
    if (label_kind_ == LabelKind::Target && label.kind_case() == Feature::kFloatList &&
        label.float_list().value_size() == 1) {
      const float value = label.float_list().value(0);
      if (!std::isfinite(value))
        failFeature(name, fmt::format("is {}; expected a finite target", value));
      data_.targets.push_back(value);
      return;
    }
    const int count = label.kind_case() == Feature::kInt64List   ? label.int64_list().value_size()
                      : label.kind_case() == Feature::kFloatList ? label.float_list().value_size()
                                                                 : 0;
    failFeature(name,
                fmt::format("holds {}{}; expected {}{}", kindOf(label),
                            count > 1 ? fmt::format(" ({} values)", count) : "",
                            label_kind_ == LabelKind::Class ? "one int64, the class"
                                                            : "one float, the regression target",
                            data_.size > 0 ? ", as the records before it" : ""));
  }

  const DataFiles& source_;
  Shape shape_;
  bool shape_from_records_ = false;
  const ExampleGrowthCheck& check_growth_;
  ImageKind image_kind_ = ImageKind::Pixels;
  LabelKind label_kind_ = LabelKind::Class;
  Dataset data_;
  int64_t capacity_ = 0;  // examples the buffers hold
  // Where the record being read is, for messages.
  const GzipFile* file_ = nullptr;
  int64_t index_ = 0;
  uint64_t offset_ = 0;
};

}  // namespace

Dataset loadExampleRecords(const DataFiles& source, const Shape& model_input,
                           const ExampleGrowthCheck& check_growth) {
  ExampleLoader loader(source, model_input, check_growth);
  for (const std::string& path : source.records)
    if (!loader.readFile(path)) break;
  return loader.finish();
}

}  // namespace traind
