#include "core/example_records.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/example.pb.h"
#include "core/image_resize.h"
#include "core/input_pipeline.h"
#include "core/tfrecord.h"
#include "test/temp_dir.h"

using Catch::Matchers::Contains;

namespace traind {
namespace {

// Written by TensorFlow (test/make_tfrecord_fixture.py).
const std::string kFixture = std::string(TRAIND_SOURCE_DIR) + "/test/data/tfrecord/";
const std::string kFashion = "/usr/share/datasets/fashion-mnist/";

using Features = std::vector<std::pair<std::string, tensorflow::Feature>>;

tensorflow::Feature bytesFeature(const std::string& value) {
  tensorflow::Feature feature;
  feature.mutable_bytes_list()->add_value(value);
  return feature;
}

tensorflow::Feature floatsFeature(const std::vector<float>& values) {
  tensorflow::Feature feature;
  for (float v : values) feature.mutable_float_list()->add_value(v);
  return feature;
}

tensorflow::Feature int64Feature(const std::vector<int64_t>& values) {
  tensorflow::Feature feature;
  for (int64_t v : values) feature.mutable_int64_list()->add_value(v);
  return feature;
}

std::string exampleMessage(const Features& features) {
  tensorflow::Example example;
  for (const auto& [key, value] : features) {
    tensorflow::FeatureEntry* entry = example.mutable_features()->add_feature();
    entry->set_key(key);
    *entry->mutable_value() = value;
  }
  return example.SerializeAsString();
}

std::string framed(const std::vector<std::string>& messages) {
  std::string file;
  for (const std::string& message : messages) appendTfRecord(message, file);
  return file;
}

bool isPngSignature(const std::string& bytes) { return bytes.starts_with("\x89PNG\r\n\x1a\n"); }

std::string readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void writeGzip(const std::string& path, const std::string& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  REQUIRE(file);
  REQUIRE(gzwrite(file, bytes.data(), unsigned(bytes.size())) == int(bytes.size()));
  REQUIRE(gzclose(file) == Z_OK);
}

DataFiles recordFiles(std::vector<std::string> files, int64_t limit = 0) {
  DataFiles source;
  source.format = DataFiles::Format::TfRecord;
  source.records = std::move(files);
  source.limit = limit;
  return source;
}

// An example as convert_to_records.py writes one, of `pixels` raw bytes.
std::string pixelExample(const std::string& pixels, int64_t label) {
  return exampleMessage({{"label", int64Feature({label})}, {"image_raw", bytesFeature(pixels)}});
}

TEST_CASE("TensorFlow's TFRecord files of examples load, raw, GZIP and ZLIB, in order",
          "[example_records]") {
  const DataFiles all =
      recordFiles({kFixture + "images-0.tfrecord", kFixture + "images-1.tfrecord.gz",
                   kFixture + "images-2.tfrecord.zlib"});
  const Dataset data = loadExampleRecords(all, {24});
  REQUIRE(data.size == 15);
  CHECK(data.example_shape == Shape{4, 3, 2});  // from height, width and depth
  REQUIRE(data.pixels.size() == 15 * 24);
  CHECK(data.floats.empty());
  for (int i = 0; i < 15; ++i) {
    CHECK(data.labels[size_t(i)] == i % 10);
    for (int j = 0; j < 24; ++j) CHECK(data.pixels[size_t(24 * i + j)] == (7 * i + j) % 256);
  }
  CHECK(data.num_classes == 10);
  CHECK(data.targets.empty());
  CHECK(data.file_examples == std::vector<int64_t>{7, 5, 3});  // what a shuffle buffer reads

  SECTION("limit keeps the first examples, across files") {
    const Dataset first = loadExampleRecords(
        recordFiles({kFixture + "images-0.tfrecord", kFixture + "images-1.tfrecord.gz"}, 9), {24});
    REQUIRE(first.size == 9);
    CHECK(std::equal(first.pixels.begin(), first.pixels.end(), data.pixels.begin()));
    CHECK(first.labels.back() == 8);
    CHECK(first.file_examples == std::vector<int64_t>{7, 2});
  }
  SECTION("the files past the limit are not opened") {
    const Dataset first = loadExampleRecords(
        recordFiles({kFixture + "images-0.tfrecord", "/nonexistent/x"}, 3), {24});
    CHECK(first.size == 3);
  }
  SECTION("a worker's share keeps every n-th record, across files and within limit") {
    for (const int64_t limit : {0, 11}) {
      const int64_t whole = limit > 0 ? limit : 15;
      DataFiles source = all;
      source.limit = limit;
      // What every worker of a job must hold, whichever share it keeps.
      const std::string content = contentText(loadExampleRecords(source, {24}));
      CHECK(content.starts_with(std::to_string(whole) + " examples, CRC-32C 0x"));
      for (int index = 0; index < 4; ++index) {
        INFO("limit " << limit << ", share " << index << " of 4");
        std::vector<int64_t> checked;
        const Dataset share = loadExampleRecords(
            source, {24}, [&](const Shape&, int64_t n, int) { checked.push_back(n); },
            DataShare{index, 4});
        REQUIRE(share.size == (whole - index + 3) / 4);
        CHECK(share.whole_size == whole);
        CHECK(share.share.index == index);
        CHECK(checked.back() >= share.size);
        // Each file's records of the share; the limit ends the reads in the second file.
        std::vector<int64_t> file_examples;
        const std::vector<int64_t> file_ends =
            limit > 0 ? std::vector<int64_t>{7, 11} : std::vector<int64_t>{7, 12, 15};
        for (size_t f = 0; f < file_ends.size(); ++f) {
          file_examples.push_back(0);
          for (int64_t k = f == 0 ? 0 : file_ends[f - 1]; k < file_ends[f]; ++k)
            file_examples.back() += k % 4 == index;
        }
        CHECK(share.file_examples == file_examples);
        CHECK(contentText(share) == content);
        for (int64_t j = 0; j < share.size; ++j) {
          const int64_t k = 4 * j + index;
          CHECK(share.labels[size_t(j)] == k % 10);
          CHECK(std::equal(share.pixels.begin() + 24 * j, share.pixels.begin() + 24 * (j + 1),
                           data.pixels.begin() + 24 * k));
        }
      }
    }
    CHECK_THROWS_WITH(
        loadExampleRecords(recordFiles({kFixture + "images-0.tfrecord"}, 3), {24}, nullptr,
                           DataShare{3, 4}),
        Catch::Matchers::EndsWith("images-0.tfrecord: holds 3 records within limit, none for "
                                  "share 3 of 4 (data.shard_by_worker): every worker's share "
                                  "must hold a batch (data.batch_size) at least"));
  }
  SECTION(
      "the same records split into files otherwise are another set (interleave reads them "
      "otherwise)") {
    TempDir dir;
    std::vector<std::string> messages;
    for (int k = 0; k < 6; ++k) messages.push_back(pixelExample(std::string(24, char(k)), k));
    auto split = [&](size_t first_file_records) {
      const std::vector<std::string> files = {(dir.path() / "a.tfrecord").string(),
                                              (dir.path() / "b.tfrecord").string()};
      const auto middle = messages.begin() + long(first_file_records);
      std::ofstream(files[0], std::ios::binary) << framed({messages.begin(), middle});
      std::ofstream(files[1], std::ios::binary) << framed({middle, messages.end()});
      return contentText(loadExampleRecords(recordFiles(files), {24}));
    };
    const std::string three_three = split(3);
    CHECK(split(3) == three_three);
    CHECK_THAT(split(2),
               Catch::StartsWith("6 examples, CRC-32C 0x") && !Catch::Equals(three_three));
  }
}

TEST_CASE("PNG images load as tensorflow_datasets writes them, grey and RGB", "[example_records]") {
  for (const auto& [file, shape, count] :
       {std::tuple<std::string, Shape, int>{"png-grey.tfrecord", {4, 3, 1}, 3},
        {"png-rgb.tfrecord", {4, 3, 3}, 2}}) {
    DataFiles source = recordFiles({kFixture + file});
    source.image_feature = "image";
    const Dataset data = loadExampleRecords(source, shape);
    REQUIRE(data.size == count);
    CHECK(data.example_shape == shape);
    const int elements = int(numElements(shape));
    REQUIRE(data.pixels.size() == size_t(count * elements));
    for (int i = 0; i < count; ++i) {
      CHECK(data.labels[size_t(i)] == i);
      for (int j = 0; j < elements; ++j)
        CHECK(data.pixels[size_t(elements * i + j)] == (7 * i + j) % 256);
    }
    // A flat input takes an image's values in order.
    CHECK(loadExampleRecords(source, {int64_t(elements)}).pixels == data.pixels);
  }

  DataFiles rgb = recordFiles({kFixture + "png-rgb.tfrecord"});
  rgb.image_feature = "image";
  CHECK_THROWS_WITH(
      loadExampleRecords(rgb, {4, 3, 1}),
      Contains("png-rgb.tfrecord: record 0 at byte 0: feature 'image' holds a PNG "
               "image of [4, 3, 3]; expected one of [4, 3, 1], as the model's input"));
  DataFiles rgba = recordFiles({kFixture + "png-rgba.tfrecord"});
  rgba.image_feature = "image";
  CHECK_THROWS_WITH(loadExampleRecords(rgba, {2, 2, 4}),
                    Contains("feature 'image' holds a PNG image with transparency (an alpha "
                             "channel or tRNS); expected grey or RGB without"));

  // A gAMA chunk changes nothing: the samples are taken as stored, as
  // TensorFlow's decode_png takes them.
  {
    tensorflow::Example example;
    REQUIRE(
        example.ParseFromString(splitTfRecords(readBytes(kFixture + "png-grey.tfrecord"), "g")[0]));
    std::string* image = nullptr;
    for (tensorflow::FeatureEntry& entry : *example.mutable_features()->mutable_feature())
      if (entry.key() == "image")
        image = entry.mutable_value()->mutable_bytes_list()->mutable_value(0);
    REQUIRE(image);
    std::string& png = *image;
    REQUIRE(isPngSignature(png));
    const std::string chunk_type_and_data =
        std::string("gAMA") + std::string("\x00\x01\x86\xa0", 4);
    const uint32_t crc =
        uint32_t(crc32(0, reinterpret_cast<const Bytef*>(chunk_type_and_data.data()),
                       uInt(chunk_type_and_data.size())));
    std::string chunk = std::string("\x00\x00\x00\x04", 4) + chunk_type_and_data;
    for (int shift = 24; shift >= 0; shift -= 8) chunk += char((crc >> shift) & 0xff);
    png.insert(8 + 25, chunk);  // after the signature and IHDR
    TempDir dir;
    DataFiles gamma = recordFiles({dir.write("gamma", framed({example.SerializeAsString()}))});
    gamma.image_feature = "image";
    const Dataset data = loadExampleRecords(gamma, {4, 3, 1});
    for (int j = 0; j < 12; ++j) CHECK(data.pixels[size_t(j)] == j);
  }

  // A PNG whose data is damaged past its header.
  tensorflow::Example example;
  REQUIRE(
      example.ParseFromString(splitTfRecords(readBytes(kFixture + "png-grey.tfrecord"), "g")[0]));
  for (tensorflow::FeatureEntry& entry : *example.mutable_features()->mutable_feature())
    if (entry.key() == "image") {
      std::string& png = *entry.mutable_value()->mutable_bytes_list()->mutable_value(0);
      png[png.size() - 20] ^= 0x5a;
    }
  TempDir dir;
  DataFiles damaged = recordFiles({dir.write("damaged", framed({example.SerializeAsString()}))});
  damaged.image_feature = "image";
  CHECK_THROWS_WITH(loadExampleRecords(damaged, {4, 3, 1}),
                    Contains("record 0 at byte 0: feature 'image' holds a corrupt PNG image: "));
}

// Little-endian float32 values, as test/make_tfrecord_fixture.py writes TensorFlow's.
std::vector<float> readFloats(const std::string& path) {
  const std::string bytes = readBytes(path);
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

// `values` are TensorFlow's figures in the fixture `name`, to 1e-6.
void checkFixture(const std::vector<float>& values, const std::string& name) {
  const std::vector<float> expected = readFloats(kFixture + name);
  REQUIRE(values.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) CHECK(values[i] == Approx(expected[i]).margin(1e-6));
}

// jpeg.tfrecord as build_image_data.py names its features, `records` of it
// (all when empty) in a file of their own.
DataFiles jpegRecords(TempDir& dir, const std::vector<int>& records = {}) {
  const std::vector<std::string> all =
      splitTfRecords(readBytes(kFixture + "jpeg.tfrecord"), "jpeg.tfrecord");
  std::vector<std::string> taken;
  for (int i : records) taken.push_back(all.at(size_t(i)));
  DataFiles source = recordFiles(
      {records.empty() ? kFixture + "jpeg.tfrecord" : dir.write("jpeg-part", framed(taken))});
  source.image_feature = "image/encoded";
  source.label_feature = "image/class/label";
  return source;
}

// jpeg.tfrecord's record `record` as an Example.
tensorflow::Example jpegFixtureExample(int record) {
  tensorflow::Example example;
  const std::vector<std::string> records =
      splitTfRecords(readBytes(kFixture + "jpeg.tfrecord"), "jpeg.tfrecord");
  REQUIRE(example.ParseFromString(records.at(size_t(record))));
  return example;
}

// Its image/encoded value, the JPEG.
std::string& jpegImageOf(tensorflow::Example& example) {
  for (tensorflow::FeatureEntry& entry : *example.mutable_features()->mutable_feature())
    if (entry.key() == "image/encoded")
      return *entry.mutable_value()->mutable_bytes_list()->mutable_value(0);
  FAIL("no image/encoded");
  throw std::logic_error("unreachable");
}

// jpeg.tfrecord's record `record` with its image changed by `change`, in a
// file of its own, read as jpegRecords reads the fixture.
DataFiles jpegRecordChanged(TempDir& dir, int record,
                            const std::function<void(std::string&)>& change,
                            DataFiles::Resize resize = DataFiles::Resize::None) {
  tensorflow::Example example = jpegFixtureExample(record);
  change(jpegImageOf(example));
  DataFiles source = recordFiles({dir.write("changed", framed({example.SerializeAsString()}))});
  source.image_feature = "image/encoded";
  source.label_feature = "image/class/label";
  source.resize = resize;
  return source;
}

TEST_CASE("JPEG images load as build_image_data.py writes them, decoded as TensorFlow does",
          "[example_records]") {
  TempDir dir;
  // Records 0 and 2 hold images of [4, 3]: colour and grey. Each decodes to
  // the input's channels, byte for byte as tf.io.decode_jpeg(image,
  // channels) gives them (TensorFlow's own figures, jpeg-decoded-*.f32).
  const DataFiles small = jpegRecords(dir, {0, 2});
  for (int channels : {3, 1}) {
    const Dataset data = loadExampleRecords(small, {4, 3, channels});
    REQUIRE(data.size == 2);
    CHECK(data.labels == std::vector<int32_t>{1, 3});
    const std::vector<float> expected =
        readFloats(kFixture + "jpeg-decoded-" + std::to_string(channels) + ".f32");
    REQUIRE(data.pixels.size() == expected.size());
    for (size_t i = 0; i < expected.size(); ++i)
      CHECK(float(data.pixels[i]) / 255.0f == expected[i]);
  }
  // A set of encoded images takes no raw pixels among them.
  {
    DataFiles mixed = small;
    mixed.records.push_back(jpegRecordChanged(dir, 0, [](std::string& image) {
                              image = std::string(36, 'x');
                            }).records[0]);
    CHECK_THROWS_WITH(
        loadExampleRecords(mixed, {4, 3, 3}),
        Contains("changed: record 0 at byte 0: feature 'image/encoded' holds 36 bytes; "
                 "expected a PNG or JPEG image of [4, 3, 3], as the records "
                 "before it"));
  }
  // The other sizes are refused without resize, naming it.
  CHECK_THROWS_WITH(loadExampleRecords(jpegRecords(dir), {4, 3, 3}),
                    Contains("jpeg.tfrecord: record 1 at byte 920: feature 'image/encoded' holds "
                             "a JPEG image of [9, 7, 3]; expected one of [4, 3, 3], as the "
                             "model's input (resize: bilinear takes images of any size)"));

  // resize: bilinear takes every size, as tf.image.resize(tf.io.decode_jpeg(
  // image, channels), [4, 3]) / 255 does (jpeg-resized-*.f32).
  for (int channels : {3, 1}) {
    DataFiles all = jpegRecords(dir);
    all.resize = DataFiles::Resize::Bilinear;
    const Dataset data = loadExampleRecords(all, {4, 3, channels});
    REQUIRE(data.size == 6);
    CHECK(data.example_shape == Shape{4, 3, channels});
    CHECK(data.labels == std::vector<int32_t>{1, 2, 3, 4, 5, 6});
    CHECK(data.pixels.empty());
    checkFixture(data.floats, "jpeg-resized-" + std::to_string(channels) + ".f32");
  }
  // resize: legacy_bilinear as TensorFlow 1's tf.image.resize_images
  // (jpeg-resized-legacy-3.f32): another sampling, the same images.
  DataFiles legacy = jpegRecords(dir);
  legacy.resize = DataFiles::Resize::LegacyBilinear;
  const Dataset data = loadExampleRecords(legacy, {4, 3, 3});
  CHECK(readFloats(kFixture + "jpeg-resized-legacy-3.f32") !=
        readFloats(kFixture + "jpeg-resized-3.f32"));
  checkFixture(data.floats, "jpeg-resized-legacy-3.f32");
}

TEST_CASE("a shorter side keeps each image's aspect, then its centre window is taken",
          "[example_records]") {
  // slim's vgg_preprocessing evaluation: each image resized so that its
  // shorter side is 5, its aspect kept (9x7 to 6x5, 6x8 to 5x7, 2x2 to 5x5),
  // then its centre [4, 3]; jpeg-shorter-side-*.f32 are TensorFlow's own
  // figures, by tf.image.resize and by TensorFlow 1's resize_bilinear.
  // jpeg-shorter-side-down-legacy-3.f32 cuts each side down as the
  // official ResNet's evaluation does (6x8 to 5x6).
  TempDir dir;
  for (const auto& [resize, rounding, fixture] :
       {std::tuple{DataFiles::Resize::Bilinear, SideRounding::Nearest, "jpeg-shorter-side-3.f32"},
        std::tuple{DataFiles::Resize::LegacyBilinear, SideRounding::Nearest,
                   "jpeg-shorter-side-legacy-3.f32"},
        std::tuple{DataFiles::Resize::LegacyBilinear, SideRounding::Down,
                   "jpeg-shorter-side-down-legacy-3.f32"}}) {
    INFO(fixture);
    DataFiles all = jpegRecords(dir);
    all.resize = resize;
    all.resize_shorter_side = 5;
    all.resize_rounding = rounding;
    const Dataset data = loadExampleRecords(all, {4, 3, 3});
    CHECK(data.example_shape == Shape{4, 3, 3});
    checkFixture(data.floats, fixture);
  }
  CHECK(sizeWithShorterSide(9, 7, 5) == std::pair<int64_t, int64_t>{6, 5});
  CHECK(sizeWithShorterSide(6, 8, 5) == std::pair<int64_t, int64_t>{5, 7});
  CHECK(sizeWithShorterSide(2, 2, 5) == std::pair<int64_t, int64_t>{5, 5});
  CHECK(sizeWithShorterSide(6, 8, 5, SideRounding::Down) == std::pair<int64_t, int64_t>{5, 6});
  CHECK(readFloats(kFixture + "jpeg-shorter-side-down-legacy-3.f32") !=
        readFloats(kFixture + "jpeg-shorter-side-legacy-3.f32"));
  // Cut down, float's product can make even the shorter side a pixel short.
  CHECK(sizeWithShorterSide(332, 332, 256) == std::pair<int64_t, int64_t>{256, 256});
  CHECK(sizeWithShorterSide(332, 332, 256, SideRounding::Down) ==
        std::pair<int64_t, int64_t>{255, 255});
  // Ties go to the even side, as tf.math.rint takes them (rounding half up
  // would give 5 wide here).
  CHECK(sizeWithShorterSide(2, 3, 3) == std::pair<int64_t, int64_t>{3, 4});
  CHECK(sizeWithShorterSide(2, 5, 3) == std::pair<int64_t, int64_t>{3, 8});
  // Only the window is ever made, the same values as of the whole resized
  // image: of a ramp 1 x 1000 to 16 x 16000, and of 1 x 100000 to 256 x
  // 25600000, whose whole would take 98 GiB.
  std::vector<uint8_t> ramp(100000);
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = uint8_t(i * 7 % 251);
  for (const PixelCentres centres : {PixelCentres::Half, PixelCentres::Legacy}) {
    const auto [height, width] = sizeWithShorterSide(1, 1000, 16);
    REQUIRE(width == 16000);
    std::vector<float> whole(size_t(height * width));
    resizeBilinear(ramp.data(), 1, 1000, 1, height, width, centres, whole.data());
    std::vector<float> part(4 * 3);
    resizeBilinearPart(ramp.data(), 1, 1000, 1, height, width, 6, 7998, 4, 3, centres, part.data());
    for (int64_t y = 0; y < 4; ++y)
      for (int64_t x = 0; x < 3; ++x)
        CHECK(part[size_t(y * 3 + x)] == whole[size_t((6 + y) * width + 7998 + x)]);
  }
  const auto [height, width] = sizeWithShorterSide(1, 100000, 256);
  CHECK(width == 25600000);
  std::vector<float> centre(4 * 3);
  resizeBilinearPart(ramp.data(), 1, 100000, 1, height, width, (height - 4) / 2, (width - 3) / 2, 4,
                     3, PixelCentres::Half, centre.data());
  // The centre columns of the 256 x 25600000 sample the ramp's middle,
  // about column 50000, where tf.image.resize's float arithmetic puts them.
  for (int64_t y = 0; y < 4; ++y)
    for (int64_t x = 0; x < 3; ++x) {
      const float at = (float(12799998 + x) + 0.5f) * (100000.0f / 25600000.0f) - 0.5f;
      const int64_t below = int64_t(std::floor(at));
      const float expected =
          float(ramp[size_t(below)]) +
          (float(ramp[size_t(below + 1)]) - float(ramp[size_t(below)])) * (at - float(below));
      CHECK(centre[size_t(y * 3 + x)] == expected);
    }
}

TEST_CASE("a central fraction keeps each image's centre, resized to the input",
          "[example_records]") {
  // inception_preprocessing's evaluation: tf.image.central_crop(image,
  // 0.5) of each image (9x7 keeps rows 2-6 and columns 1-5), resized to
  // [4, 3]; jpeg-central-fraction-*.f32 are TensorFlow's own figures, by
  // tf.image.resize and by TensorFlow 1's resize_bilinear.
  TempDir dir;
  for (const auto& [resize, fixture] :
       {std::pair{DataFiles::Resize::Bilinear, "jpeg-central-fraction-3.f32"},
        std::pair{DataFiles::Resize::LegacyBilinear, "jpeg-central-fraction-legacy-3.f32"}}) {
    INFO(fixture);
    DataFiles all = jpegRecords(dir);
    all.resize = resize;
    all.resize_central_fraction = 0.5;
    const Dataset data = loadExampleRecords(all, {4, 3, 3});
    CHECK(data.example_shape == Shape{4, 3, 3});
    checkFixture(data.floats, fixture);
    // Not the whole image resized.
    all.resize_central_fraction = 0.0;
    CHECK(loadExampleRecords(all, {4, 3, 3}).floats != data.floats);
  }
  // The start in double, as TensorFlow 1 (and TensorFlow 2 eagerly) takes
  // it: 500 x 0.8 is 400, kept from column 50.
  CHECK(centralCropStart(9, 0.5) == 2);
  CHECK(centralCropStart(7, 0.5) == 1);
  CHECK(centralCropStart(10, 0.8) == 1);
  CHECK(centralCropStart(500, 0.8) == 50);
  CHECK(centralCropStart(333, 0.875) == 20);
  CHECK(centralCropStart(1, 0.1) == 0);
  CHECK(centralCropStart(2, 1.0) == 0);
  // With a shorter side or a size as well, without a resize, or beyond 1,
  // the call is refused.
  const auto refused = [&](const std::function<void(DataFiles&)>& change) {
    DataFiles source = jpegRecords(dir);
    source.resize = DataFiles::Resize::Bilinear;
    source.resize_central_fraction = 0.5;
    change(source);
    CHECK_THROWS_AS(loadExampleRecords(source, {4, 3, 3}), std::invalid_argument);
  };
  refused([](DataFiles& source) { source.resize_shorter_side = 5; });
  refused([](DataFiles& source) {
    source.resize_height = 5;
    source.resize_width = 5;
  });
  refused([](DataFiles& source) { source.resize = DataFiles::Resize::None; });
  refused([](DataFiles& source) { source.resize_central_fraction = 1.5; });
  refused([](DataFiles& source) { source.resize_central_fraction = std::nan(""); });
}

TEST_CASE("resized images take the model's input, whatever height and width the records give",
          "[example_records]") {
  // convert_to_records.py's height, width and depth give a record's shape;
  // with resize they describe the image before it, and are not read.
  TempDir dir;
  tensorflow::Example example = jpegFixtureExample(1);  // of [9, 7, 3]
  const std::string jpeg = jpegImageOf(example);
  const std::string record = exampleMessage({{"height", int64Feature({9})},
                                             {"width", int64Feature({7})},
                                             {"depth", int64Feature({3})},
                                             {"label", int64Feature({2})},
                                             {"image_raw", bytesFeature(jpeg)}});
  DataFiles source = recordFiles({dir.write("sized", framed({record}))});
  source.resize = DataFiles::Resize::Bilinear;
  const Dataset data = loadExampleRecords(source, {4, 3, 3});
  CHECK(data.example_shape == Shape{4, 3, 3});
  const std::vector<float> resized = readFloats(kFixture + "jpeg-resized-3.f32");
  REQUIRE(data.floats.size() == 36);
  for (size_t i = 0; i < 36; ++i) CHECK(data.floats[i] == Approx(resized[36 + i]).margin(1e-6));
  // A size of the set's own, for a model that takes a window of [2, 2] of
  // the resized images: they take that size, the same values.
  DataFiles own_size = source;
  own_size.resize_height = 4;
  own_size.resize_width = 3;
  const Dataset windowed =
      loadExampleRecords(own_size, {2, 2, 3}, nullptr, {}, RecordShape::FirstImage);
  CHECK(windowed.example_shape == Shape{4, 3, 3});
  CHECK(windowed.floats == data.floats);
  // Without resize they give the shape, which the image must have.
  source.resize = DataFiles::Resize::None;
  CHECK(loadExampleRecords(source, {189}).example_shape == Shape{9, 7, 3});

  // A first image that is a JPEG of the raw pixels' size is a JPEG: its
  // header reads.
  const std::string flat =
      exampleMessage({{"label", int64Feature({2})}, {"image_raw", bytesFeature(jpeg)}});
  CHECK_THROWS_WITH(
      loadExampleRecords(recordFiles({dir.write("flat", framed({flat}))}), {int64_t(jpeg.size())}),
      Contains("holds a JPEG image of [9, 7, 3]; expected one of [" + std::to_string(jpeg.size()) +
               "], as the model's input"));
  // Resizing needs an input of [height, width, 1 or 3].
  source.resize = DataFiles::Resize::Bilinear;
  CHECK_THROWS_AS(loadExampleRecords(source, {189}), std::invalid_argument);
}

TEST_CASE("resize: bilinear takes PNG and JPEG images only, of the input's channels",
          "[example_records]") {
  DataFiles rgb = recordFiles({kFixture + "png-rgb.tfrecord"});
  rgb.image_feature = "image";
  rgb.resize = DataFiles::Resize::Bilinear;
  // A PNG image of [4, 3, 3] to [2, 2, 3]. Value (y, x, c) of example 0 is
  // (3 y + x) 3 + c, which bilinear sampling keeps: output row y samples
  // the input at (y + 0.5) 2 - 0.5, column x at (x + 0.5) 1.5 - 0.5 (half-
  // pixel centres; legacy_bilinear's would be 2 y and 1.5 x).
  const Dataset data = loadExampleRecords(rgb, {2, 2, 3});
  REQUIRE(data.size == 2);
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 2; ++x)
      for (int c = 0; c < 3; ++c) {
        const float at_y = (float(y) + 0.5f) * 2.0f - 0.5f;
        const float at_x = (float(x) + 0.5f) * 1.5f - 0.5f;
        CHECK(data.floats[size_t((y * 2 + x) * 3 + c)] * 255.0f ==
              Approx((3.0f * at_y + at_x) * 3.0f + float(c)));
      }

  DataFiles grey = recordFiles({kFixture + "png-grey.tfrecord"});
  grey.image_feature = "image";
  grey.resize = DataFiles::Resize::Bilinear;
  CHECK_THROWS_WITH(loadExampleRecords(grey, {2, 2, 3}),
                    Contains("png-grey.tfrecord: record 0 at byte 0: feature 'image' holds a "
                             "PNG image of [4, 3, 1]; expected 3 channels (the model's input's) "
                             "to resize to [2, 2, 3]"));
  DataFiles raw = recordFiles({kFixture + "images-0.tfrecord"});
  raw.resize = DataFiles::Resize::Bilinear;
  CHECK_THROWS_WITH(loadExampleRecords(raw, {4, 3, 3}),
                    Contains("feature 'image_raw' holds 24 bytes; expected a PNG or JPEG image "
                             "to resize to [4, 3, 3]"));
}

TEST_CASE("a JPEG image cut short or damaged is refused, as TensorFlow refuses it",
          "[example_records]") {
  TempDir dir;
  const auto withImage = [&](const std::function<void(std::string&)>& change) {
    return jpegRecordChanged(dir, 0, change);
  };
  // Without its last marker (EOI) only: libjpeg would make up the rest;
  // tf.io.decode_jpeg refuses it.
  CHECK_THROWS_WITH(
      loadExampleRecords(withImage([](std::string& jpeg) { jpeg.resize(jpeg.size() - 2); }),
                         {4, 3, 3}),
      Contains("record 0 at byte 0: feature 'image/encoded' holds a JPEG image cut short (its "
               "data ends before the image does)"));
  CHECK_THROWS_WITH(
      loadExampleRecords(withImage([](std::string& jpeg) { jpeg.resize(40); }), {4, 3, 3}),
      Contains("feature 'image/encoded' holds a corrupt JPEG header: "));
  // Bytes between its data and its last marker are taken, as TensorFlow takes them.
  const Dataset data = loadExampleRecords(
      withImage([](std::string& jpeg) { jpeg.insert(jpeg.size() - 2, "\x12\x34"); }), {4, 3, 3});
  CHECK(data.size == 1);
  // A header that claims more pixels than a record may hold is refused
  // before anything is decoded: SOF's height and width at `side`.
  const auto claiming = [](int side) {
    return [side](std::string& jpeg) {
      size_t sof = jpeg.find("\xff\xc0");
      if (sof == std::string::npos) sof = jpeg.find("\xff\xc2");  // progressive
      REQUIRE(sof != std::string::npos);
      const char bytes[4] = {char(side >> 8), char(side & 0xff), char(side >> 8),
                             char(side & 0xff)};
      jpeg.replace(sof + 5, 4, bytes, 4);
    };
  };
  CHECK_THROWS_WITH(loadExampleRecords(withImage(claiming(10000)), {4, 3, 3}),
                    Contains("holds a JPEG image of [10000, 10000, 3], more than the 16777504 "
                             "bytes a record may hold here"));
  DataFiles resized = withImage(claiming(10000));
  resized.resize = DataFiles::Resize::Bilinear;
  CHECK_THROWS_WITH(loadExampleRecords(resized, {4, 3, 3}),
                    Contains("holds a JPEG image of [10000, 10000, 3], more than the 268435456 "
                             "bytes an image to be resized may decode to"));
  // 2^29 values or more TensorFlow refuses as well.
  CHECK_THROWS_WITH(loadExampleRecords(withImage(claiming(65000)), {4, 3, 3}),
                    Contains("holds a JPEG image of 65000 x 65000 pixels; expected fewer than "
                             "2^29 values, as TensorFlow does"));
}

TEST_CASE("a small JPEG file cannot make its decoding take unbounded memory or time",
          "[example_records]") {
  TempDir dir;
  // Record 4 of the fixture is a progressive colour image, whose scans
  // libjpeg keeps in buffers of the whole image, 2 bytes a value.
  const auto withImage = [&](const std::function<void(std::string&)>& change) {
    return jpegRecordChanged(dir, 4, change, DataFiles::Resize::Bilinear);
  };
  // 13000 x 13000 in colour, its chroma not subsampled (4:4:4), decoded to
  // grey: 161 MiB of output, within the bound of an image to be resized,
  // and fewer values than TensorFlow's bound, but 967 MiB of scan buffers.
  CHECK_THROWS_WITH(
      loadExampleRecords(withImage([](std::string& jpeg) {
                           const size_t sof = jpeg.find("\xff\xc2");
                           REQUIRE(sof != std::string::npos);
                           jpeg.replace(sof + 5, 4, "\x32\xc8\x32\xc8", 4);
                           jpeg[sof + 11] = '\x11';  // the luma's sampling, as the chroma's
                         }),
                         {4, 3, 1}),
      Contains("holds a JPEG image that cannot be decoded: it needs more than 512 MiB of memory "
               "to decode"));
  // Its last scan again and again: each one a pass over the whole image.
  CHECK_THROWS_WITH(loadExampleRecords(withImage([](std::string& jpeg) {
                                         const size_t scan = jpeg.rfind("\xff\xda");
                                         REQUIRE(scan != std::string::npos);
                                         const std::string last =
                                             jpeg.substr(scan, jpeg.size() - 2 - scan);
                                         for (int i = 0; i < 120; ++i)
                                           jpeg.insert(jpeg.size() - 2, last);
                                       }),
                                       {4, 3, 3}),
                    Contains("holds a JPEG image that cannot be decoded: it has more than 100 "
                             "scans"));
}

// A PNG chunk: its length, type, data and the CRC of type and data.
std::string pngChunk(const std::string& type, const std::string& data) {
  std::string chunk;
  for (int shift = 24; shift >= 0; shift -= 8) chunk += char((data.size() >> shift) & 0xff);
  chunk += type + data;
  const uint32_t crc =
      uint32_t(crc32(crc32(0, reinterpret_cast<const Bytef*>(type.data()), 4),
                     reinterpret_cast<const Bytef*>(data.data()), uInt(data.size())));
  for (int shift = 24; shift >= 0; shift -= 8) chunk += char((crc >> shift) & 0xff);
  return chunk;
}

// `bytes` as a zlib stream, compressed at `level`.
std::string zlibStream(const std::string& bytes, int level) {
  std::string stream(compressBound(uLong(bytes.size())), '\0');
  uLongf size = uLongf(stream.size());
  REQUIRE(compress2(reinterpret_cast<Bytef*>(stream.data()), &size,
                    reinterpret_cast<const Bytef*>(bytes.data()), uLong(bytes.size()),
                    level) == Z_OK);
  stream.resize(size);
  return stream;
}

// A grey 8-bit PNG of `height` x `width` whose pixel i is i % 256, its
// zlib stream going on for `trailing` bytes past the rows, in IDAT chunks
// of at most `idat_bytes`.
std::string greyPng(uint32_t height, uint32_t width, const std::string& trailing,
                    size_t idat_bytes = SIZE_MAX) {
  std::string ihdr;
  for (uint32_t v : {width, height})
    for (int shift = 24; shift >= 0; shift -= 8) ihdr += char((v >> shift) & 0xff);
  ihdr += std::string("\x08\x00\x00\x00\x00", 5);  // 8 bits, grey, deflate, filters, no interlace
  std::string filtered;
  for (uint32_t y = 0; y < height; ++y) {
    filtered += '\0';  // no filter
    for (uint32_t x = 0; x < width; ++x) filtered += char((y * width + x) % 256);
  }
  filtered += trailing;
  const std::string stream = zlibStream(filtered, Z_BEST_SPEED);
  std::string png = std::string("\x89PNG\r\n\x1a\n", 8) + pngChunk("IHDR", ihdr);
  for (size_t at = 0; at < stream.size(); at += idat_bytes)
    png += pngChunk("IDAT", stream.substr(at, idat_bytes));
  return png + pngChunk("IEND", "");
}

TEST_CASE("a PNG whose compressed data goes on past its pixels is read, a few bytes of it",
          "[example_records]") {
  TempDir dir;
  const auto load = [&](const std::string& png, const Shape& shape) {
    DataFiles source = recordFiles({dir.write(
        "png",
        framed({exampleMessage({{"image", bytesFeature(png)}, {"label", int64Feature({3})}})}))});
    source.image_feature = "image";
    return loadExampleRecords(source, shape);
  };
  // A few bytes more than the rows, as some encoders leave, in one IDAT
  // chunk or in chunks of 7 bytes: the image.
  for (size_t idat_bytes : {SIZE_MAX, size_t(7)}) {
    const Dataset data = load(greyPng(4, 3, std::string(1000, '\0'), idat_bytes), {4, 3, 1});
    REQUIRE(data.size == 1);
    for (int j = 0; j < 12; ++j) CHECK(data.pixels[size_t(j)] == j);
  }
  uint32_t x = 12345;
  const auto noise = [&](std::string& bytes) {
    for (char& c : bytes) c = char((x = x * 1664525u + 1013904223u) >> 24);
  };
  CHECK(load(greyPng(200, 3000, ""), {200, 3000, 1}).size == 1);  // rows of 3000 bytes
  // Past the pixels, libpng would inflate all of it: 20 MiB of zeros in
  // 20 KB, or bytes that do not compress.
  std::string trailing(200 * 1024, '\0');
  noise(trailing);
  for (const std::string& past : {std::string(20 << 20, '\0'), trailing})
    CHECK_THROWS_WITH(load(greyPng(4, 3, past), {4, 3, 1}),
                      Contains("record 0 at byte 0: feature 'image' holds a corrupt PNG image: "
                               "more compressed data past the image's pixels than its last row"));
}

TEST_CASE("a PNG's compressed text chunks are skipped, not inflated", "[example_records]") {
  // libpng inflates each zTXt or iTXt of up to 8 MB and keeps a thousand:
  // a PNG of 1.4 MB with 200 cost 1.4 GB and 18 s, at every record read.
  const std::string stream = zlibStream(std::string(7'000'000, 'a'), Z_BEST_COMPRESSION);
  std::string chunks;
  for (int i = 0; i < 20; ++i) {
    chunks += pngChunk("zTXt", std::string("k\0\0", 3) + stream);  // keyword, method
    // keyword, compressed, method, no language nor translated keyword
    chunks += pngChunk("iTXt", std::string("k\0\1\0\0\0", 6) + stream);
  }
  std::string png = greyPng(4, 3, "");
  png.insert(8 + 25, chunks);  // after the signature and IHDR
  TempDir dir;
  DataFiles source = recordFiles({dir.write(
      "png",
      framed({exampleMessage({{"image", bytesFeature(png)}, {"label", int64Feature({3})}})}))});
  source.image_feature = "image";
  const Dataset data = loadExampleRecords(source, {4, 3, 1});
  REQUIRE(data.size == 1);
  for (int j = 0; j < 12; ++j) CHECK(data.pixels[size_t(j)] == j);
  // 280 MB of text once kept. Read again in a child, whose peak is this
  // read's alone (this process's may be another test's): it starts with
  // this process's resident pages and grows by a few MB at most now.
  std::ifstream statm("/proc/self/statm");
  int64_t size_pages = 0, resident_pages = 0;
  REQUIRE(statm >> size_pages >> resident_pages);
  const int64_t resident_kib = resident_pages * sysconf(_SC_PAGESIZE) / 1024;
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    try {
      loadExampleRecords(source, {4, 3, 1});
    } catch (...) {
      _exit(1);
    }
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  rusage children{};
  REQUIRE(getrusage(RUSAGE_CHILDREN, &children) == 0);
  CHECK(children.ru_maxrss - resident_kib < 64 * 1024);
}

TEST_CASE("float features load as inputs and regression targets", "[example_records]") {
  DataFiles source = recordFiles({kFixture + "regression.tfrecord"});
  source.image_feature = "x";
  source.label_feature = "y";
  const Dataset data = loadExampleRecords(source, {2});
  REQUIRE(data.size == 3);
  CHECK(data.example_shape == Shape{2});  // the model's input: no height and width
  CHECK(data.pixels.empty());
  CHECK(data.labels.empty());
  CHECK(data.floats == std::vector<float>{0.0f, -0.0f, 0.5f, -0.25f, 1.0f, -0.5f});
  CHECK(data.targets == std::vector<float>{0.125f, 1.125f, 2.125f});
  CHECK(data.num_classes == 0);
}

TEST_CASE("Fashion-MNIST written as TFRecord files loads as its IDX files do",
          "[example_records]") {
  DataFiles idx;
  idx.images = kFashion + "t10k-images-idx3-ubyte.gz";
  idx.labels = kFashion + "t10k-labels-idx1-ubyte.gz";
  idx.limit = 1500;
  const Dataset expected = loadIdxDataset(idx);

  // Split over a raw and a gzip file, with no shape in the records: the
  // model's input gives it.
  TempDir dir;
  std::vector<std::string> halves(2);
  for (int64_t i = 0; i < expected.size; ++i) {
    const std::string pixels(expected.pixels.begin() + i * 784,
                             expected.pixels.begin() + (i + 1) * 784);
    appendTfRecord(pixelExample(pixels, expected.labels[size_t(i)]), halves[i < 700 ? 0 : 1]);
  }
  dir.write("train-0", halves[0]);
  writeGzip(dir / "train-1", halves[1]);
  const Dataset data =
      loadExampleRecords(recordFiles({dir / "train-0", dir / "train-1"}), {28, 28, 1});
  REQUIRE(data.size == expected.size);
  CHECK(data.example_shape == expected.example_shape);
  CHECK(data.pixels == expected.pixels);
  CHECK(data.labels == expected.labels);
  CHECK(data.num_classes == expected.num_classes);
}

// Every input of `data`, as batches gather them.
std::vector<float> allInputs(const Dataset& data) {
  std::vector<float> inputs(size_t(data.size * numElements(data.example_shape)));
  copyInputs(data, 0, data.size, inputs.data());
  return inputs;
}

TEST_CASE("in_memory: false leaves the examples in their files, read as kept ones would be",
          "[example_records]") {
  TempDir dir;
  struct Set {
    const char* name;
    DataFiles source;
    Shape input;
  };
  std::vector<Set> sets{{"raw pixels", recordFiles({kFixture + "images-0.tfrecord"}), {24}},
                        {"JPEG, colour", jpegRecords(dir, {0, 2}), {4, 3, 3}},
                        {"JPEG, grey", jpegRecords(dir, {0, 2}), {4, 3, 1}},
                        {"JPEG, resized", jpegRecords(dir), {4, 3, 3}},
                        {"JPEG, legacy resize", jpegRecords(dir), {4, 3, 1}},
                        {"PNG", recordFiles({kFixture + "png-rgb.tfrecord"}), {4, 3, 3}},
                        {"floats", recordFiles({kFixture + "regression.tfrecord"}), {2}},
                        {"JPEG, shorter side", jpegRecords(dir), {4, 3, 3}},
                        {"JPEG, central fraction", jpegRecords(dir), {4, 3, 3}}};
  sets[3].source.resize = DataFiles::Resize::Bilinear;
  sets[4].source.resize = DataFiles::Resize::LegacyBilinear;
  sets[5].source.image_feature = "image";
  sets[6].source.image_feature = "x";
  sets[6].source.label_feature = "y";
  sets[7].source.resize = DataFiles::Resize::Bilinear;
  sets[7].source.resize_shorter_side = 5;
  sets[8].source.resize = DataFiles::Resize::LegacyBilinear;
  sets[8].source.resize_central_fraction = 0.5;  // 0.875 keeps these small images whole
  for (const Set& set : sets) {
    INFO(set.name);
    const Dataset kept = loadExampleRecords(set.source, set.input);
    DataFiles in_files = set.source;
    in_files.in_memory = false;
    std::vector<int> value_bytes;
    const Dataset left =
        loadExampleRecords(in_files, set.input,
                           [&](const Shape&, int64_t, int bytes) { value_bytes.push_back(bytes); });
    REQUIRE(left.files);
    CHECK(left.pixels.empty());
    CHECK(left.floats.empty());
    CHECK(value_bytes == std::vector<int>{0});
    CHECK(left.size == kept.size);
    CHECK(left.example_shape == kept.example_shape);
    CHECK(left.labels == kept.labels);
    CHECK(left.targets == kept.targets);
    CHECK(left.pixel_scale == kept.pixel_scale);
    CHECK(contentText(left) == contentText(kept));
    // Bit for bit, also read in another order and from two threads.
    CHECK(allInputs(left) == allInputs(kept));
    const int64_t floats = numElements(left.example_shape);
    std::vector<float> last(static_cast<size_t>(floats)), last_kept(last.size());
    copyInputs(left, left.size - 1, 1, last.data());
    copyInputs(kept, kept.size - 1, 1, last_kept.data());
    CHECK(last == last_kept);
    std::vector<float> other;
    std::thread reader([&] { other = allInputs(left); });
    const std::vector<float> here = allInputs(left);
    reader.join();
    CHECK(other == here);
    // Told they will be read in no order (a shuffled set), they read the same.
    left.files->adviseRandomOrder();
    CHECK(allInputs(left) == allInputs(kept));
  }

  // Several files, and a limit across them, as kept.
  DataFiles two = recordFiles({kFixture + "images-0.tfrecord",
                               dir.write("copy", readBytes(kFixture + "images-0.tfrecord"))},
                              10);
  const Dataset two_kept = loadExampleRecords(two, {24});
  two.in_memory = false;
  const Dataset two_left = loadExampleRecords(two, {24});
  REQUIRE(two_left.size == 10);
  CHECK(allInputs(two_left) == allInputs(two_kept));
  CHECK(two_left.labels == two_kept.labels);

  // More files than the soft limit on open files lets the process open:
  // it takes its hard limit.
  {
    rlimit before{};
    REQUIRE(getrlimit(RLIMIT_NOFILE, &before) == 0);
    const auto open_now = std::distance(std::filesystem::directory_iterator("/proc/self/fd"),
                                        std::filesystem::directory_iterator());
    if (before.rlim_max == RLIM_INFINITY || before.rlim_max > rlim_t(open_now + 16)) {
      rlimit low = before;
      low.rlim_cur = rlim_t(open_now + 4);
      REQUIRE(setrlimit(RLIMIT_NOFILE, &low) == 0);
      DataFiles many = recordFiles({});
      for (int i = 0; i < 12; ++i)
        many.records.push_back(
            dir.write("many-" + std::to_string(i), readBytes(kFixture + "images-0.tfrecord")));
      many.in_memory = false;
      const Dataset opened = loadExampleRecords(many, {24});
      rlimit after{};
      REQUIRE(getrlimit(RLIMIT_NOFILE, &after) == 0);
      CHECK(after.rlim_cur == before.rlim_max);
      CHECK(opened.size == 12 * 7);
      REQUIRE(setrlimit(RLIMIT_NOFILE, &before) == 0);
    }
  }

  // A share, as kept.
  DataFiles raw = recordFiles({kFixture + "images-0.tfrecord"});
  raw.in_memory = false;
  const Dataset share = loadExampleRecords(raw, {24}, nullptr, DataShare{1, 2});
  CHECK(share.size == 3);
  CHECK(share.whole_size == 7);
  CHECK(allInputs(share) ==
        allInputs(loadExampleRecords(recordFiles({kFixture + "images-0.tfrecord"}), {24}, nullptr,
                                     DataShare{1, 2})));

  // Compressed files give no offsets to read a record at.
  DataFiles all = recordFiles({kFixture + "images-0.tfrecord", kFixture + "images-1.tfrecord.gz"});
  all.in_memory = false;
  CHECK_THROWS_WITH(loadExampleRecords(all, {24}),
                    Contains("images-1.tfrecord.gz: compressed with gzip; with in_memory: false "
                             "each record is read at its offset, which a compressed file cannot "
                             "give: expected uncompressed TFRecord files (or in_memory: true)"));
}

TEST_CASE("a set left in its files gives each encoded image as decoded, at its own size",
          "[example_records]") {
  // What a training set resized to a side drawn for each image
  // (data.augment.random_crop.shorter_side) is gathered from.
  TempDir dir;
  for (int channels : {3, 1}) {
    DataFiles source = jpegRecords(dir, {0, 2});
    source.resize = DataFiles::Resize::Bilinear;
    source.in_memory = false;
    const Dataset data = loadExampleRecords(source, {4, 3, channels});
    REQUIRE(data.files);
    // Byte for byte as tf.io.decode_jpeg(image, channels) gives them.
    const std::vector<float> expected =
        readFloats(kFixture + "jpeg-decoded-" + std::to_string(channels) + ".f32");
    std::vector<float> decoded;
    for (int64_t i = 0; i < 2; ++i) {
      std::vector<uint8_t> pixels;
      CHECK(data.files->decode(i, pixels) == Shape{4, 3, channels});
      for (const uint8_t pixel : pixels) decoded.push_back(float(pixel) / 255.0f);
    }
    CHECK(decoded == expected);
  }
  DataFiles all = jpegRecords(dir);
  all.resize = DataFiles::Resize::LegacyBilinear;
  all.in_memory = false;
  const Dataset data = loadExampleRecords(all, {4, 3, 3});
  std::vector<uint8_t> pixels;
  CHECK(data.files->decode(1, pixels) == Shape{9, 7, 3});
  CHECK(pixels.size() == 9 * 7 * 3);
  CHECK(data.resize_centres == PixelCentres::Legacy);
  // Raw pixels are no encoded image.
  DataFiles raw = recordFiles({kFixture + "images-0.tfrecord"});
  raw.in_memory = false;
  CHECK_THROWS_AS(loadExampleRecords(raw, {24}).files->decode(0, pixels), std::logic_error);
}

TEST_CASE("a model that takes windows takes images of their own size, PNG or JPEG",
          "[example_records]") {
  // tensorflow_datasets' and build_image_data.py's records give no height
  // and width a loader reads: the first image's header does.
  TempDir dir;
  DataFiles png = recordFiles({kFixture + "png-rgb.tfrecord"});
  png.image_feature = "image";
  const Dataset pngs = loadExampleRecords(png, {2, 2, 3}, nullptr, {}, RecordShape::FirstImage);
  CHECK(pngs.example_shape == Shape{4, 3, 3});
  CHECK(pngs.pixels == loadExampleRecords(png, {4, 3, 3}).pixels);
  // A JPEG image decodes to the window's channels, grey ones too.
  const DataFiles jpeg = jpegRecords(dir, {0, 2});
  const Dataset jpegs = loadExampleRecords(jpeg, {2, 2, 1}, nullptr, {}, RecordShape::FirstImage);
  CHECK(jpegs.example_shape == Shape{4, 3, 1});
  CHECK(jpegs.pixels == loadExampleRecords(jpeg, {4, 3, 1}).pixels);
  // Images of another size than the first are refused, naming it.
  CHECK_THROWS_WITH(
      loadExampleRecords(jpegRecords(dir), {2, 2, 3}, nullptr, {}, RecordShape::FirstImage),
      Contains("record 1 at byte 920: feature 'image/encoded' holds a JPEG image of [9, 7, 3]; "
               "expected one of [4, 3, 3], as the first record's image is"));
  // Raw pixels have no size of their own.
  const DataFiles raw = recordFiles({dir.write("raw", framed({pixelExample("abcdef", 1)}))});
  CHECK_THROWS_WITH(
      loadExampleRecords(raw, {1, 1, 1}, nullptr, {}, RecordShape::FirstImage),
      Contains("raw: record 0 at byte 0: feature 'image_raw' holds raw pixels, of no size of "
               "their own: the model takes a window of each image"));
}

TEST_CASE("a file changed under a data set left in it is named when a batch reads it",
          "[example_records][pipeline]") {
  TempDir dir;
  const std::string bytes = readBytes(kFixture + "images-0.tfrecord");
  DataFiles source = recordFiles({dir.write("images.tfrecord", bytes)});
  source.in_memory = false;
  const Dataset data = loadExampleRecords(source, {24});
  REQUIRE(data.size == 7);
  std::vector<float> inputs(24);
  copyInputs(data, 6, 1, inputs.data());
  const auto rewrite = [&](const std::string& with) {
    std::ofstream(source.records[0], std::ios::binary | std::ios::trunc) << with;
  };
  // Rewritten in place, shorter.
  rewrite(bytes.substr(0, bytes.size() / 2));
  CHECK_THROWS_WITH(
      copyInputs(data, 6, 1, inputs.data()),
      Contains("images.tfrecord: the record at byte ") && Contains("cannot be read whole (") &&
          Contains("file ended early while reading it") && Contains("was the file changed?"));
  // A byte of record 4's data changed.
  size_t record_4 = 0;
  const std::vector<std::string> records = splitTfRecords(bytes, "images.tfrecord");
  for (size_t i = 0; i < 4; ++i) record_4 += kTfRecordHeaderSize + records[i].size() + 4;
  std::string damaged = bytes;
  damaged[record_4 + kTfRecordHeaderSize + 10] ^= 0x55;
  rewrite(damaged);
  CHECK_THROWS_WITH(copyInputs(data, 4, 1, inputs.data()),
                    Contains(fmt::format("images.tfrecord: the record at byte {} is not the "
                                         "record it was (its length or a CRC differs)",
                                         record_4)));
  CHECK_NOTHROW(copyInputs(data, 0, 1, inputs.data()));
  // Another record, framed whole with CRCs of its own, in its place.
  const size_t record_4_end = record_4 + kTfRecordHeaderSize + records[4].size() + 4;
  rewrite(bytes.substr(0, record_4) + framed({pixelExample(std::string(24, 'x'), 3)}) +
          bytes.substr(record_4_end));
  CHECK_THROWS_WITH(copyInputs(data, 4, 1, inputs.data()), Contains("is not the record it was"));
  rewrite(damaged);
  // Read ahead on the input thread or not, the error reaches the step that
  // asked for the batch, and every later one; the batches before it come
  // first, and the pipeline stops cleanly.
  for (const int prefetch : {0, 2}) {
    INFO("prefetch " << prefetch);
    InputPipeline input(data, 2, /*shuffle=*/false, 1, 0, prefetch);
    CHECK(input.next().labels[0] == 0);
    CHECK(input.next().labels[0] == 2);
    CHECK_THROWS_AS(input.next(), InputError);  // examples 4 and 5
    CHECK_THROWS_AS(input.next(), InputError);
  }
}

TEST_CASE("the memory check sees each block of examples before it is taken, and can refuse it",
          "[example_records]") {
  // Examples of 4 KiB: blocks of 1024 (4 MiB).
  TempDir dir;
  const std::vector<std::string> messages(2500, pixelExample(std::string(4096, 'p'), 1));
  dir.write("images", framed(messages));
  std::vector<int64_t> asked;
  const auto note = [&](const Shape& shape, int64_t examples, int value_bytes) {
    CHECK(shape == Shape{64, 64, 1});
    CHECK(value_bytes == 1);
    asked.push_back(examples);
  };
  const Dataset data = loadExampleRecords(recordFiles({dir / "images"}), {64, 64, 1}, note);
  CHECK(data.size == 2500);
  CHECK(data.pixels.size() == 2500 * 4096);
  CHECK(asked == std::vector<int64_t>{1024, 2048, 3072});
  asked.clear();
  CHECK(loadExampleRecords(recordFiles({dir / "images"}, 1500), {64, 64, 1}, note).size == 1500);
  CHECK(asked == std::vector<int64_t>{1024, 1500});

  const auto refuse = [&](const Shape&, int64_t examples, int) {
    if (examples > 1024) throw InputError("too many");
  };
  CHECK_THROWS_WITH(loadExampleRecords(recordFiles({dir / "images"}), {64, 64, 1}, refuse),
                    "too many");

  // A record whose height and width ask for huge images holds none: it is
  // refused before any memory is taken for it.
  const std::string huge = exampleMessage({{"height", int64Feature({1 << 30})},
                                           {"width", int64Feature({1 << 30})},
                                           {"label", int64Feature({1})},
                                           {"image_raw", bytesFeature("tiny")}});
  dir.write("huge", framed({huge}));
  asked.clear();
  CHECK_THROWS_WITH(
      loadExampleRecords(recordFiles({dir / "huge"}), {4}, note),
      Contains("record 0 at byte 0: height, width and depth give an image of [1073741824, "
               "1073741824, 1], more values than a record holds (268435456 at most): the size "
               "features are wrong"));
  CHECK(asked.empty());
}

TEST_CASE("how a file was written is told from its first record, not its first two bytes",
          "[example_records]") {
  TempDir dir;
  // Raw files whose first record's length starts them as a gzip member
  // (1f 8b: 35615 bytes) or a zlib stream (78 01: 376 bytes) would.
  for (const size_t length : {size_t(35615), size_t(376)}) {
    std::string padded;
    for (size_t pad = 0; padded.size() != length;)  // the pad's own length bytes vary with it
      padded =
          exampleMessage({{"label", int64Feature({2})},
                          {"image_raw", bytesFeature("abcd")},
                          {"pad", bytesFeature(std::string(pad += length - padded.size(), 'x'))}});
    const std::string file = framed({padded, padded});
    REQUIRE(file.substr(0, 2) == (length == 35615 ? "\x1f\x8b" : "\x78\x01"));
    const std::string path = dir.write("raw-" + std::to_string(length), file);
    const Dataset data = loadExampleRecords(recordFiles({path}), {2, 2, 1});
    CHECK(data.size == 2);
    CHECK(data.labels == std::vector<int32_t>{2, 2});
  }

  // gzip: members one after another, as `cat a.gz b.gz` makes; other bytes
  // after the last are refused, as TensorFlow refuses them.
  writeGzip(dir / "a.gz", framed({pixelExample("abcd", 1)}));
  writeGzip(dir / "b.gz", framed({pixelExample("efgh", 2)}));
  const std::string both = readBytes(dir / "a.gz") + readBytes(dir / "b.gz");
  const std::string members = dir.write("members.gz", both);
  CHECK(loadExampleRecords(recordFiles({members}), {2, 2, 1}).labels == std::vector<int32_t>{1, 2});
  const std::string trailing = dir.write("trailing.gz", both + "garbage!");
  CHECK_THROWS_WITH(
      loadExampleRecords(recordFiles({trailing}), {2, 2, 1}),
      trailing +
          ": corrupt compressed data at record 2 (byte 114 of the decompressed data): "
          "bytes after the end of the gzip data");

  // zlib: one stream, nothing after it.
  const std::string zlib =
      dir.write("after.zlib", readBytes(kFixture + "images-2.tfrecord.zlib") + "more");
  CHECK_THROWS_WITH(loadExampleRecords(recordFiles({zlib}), {24}),
                    zlib +
                        ": corrupt compressed data at record 3 (byte 378 of the decompressed "
                        "data): bytes after the end of the zlib stream");

  // A raw file whose first record's header is damaged, and whose first
  // bytes look like a gzip member's, is neither.
  std::string damaged = readBytes(dir / "raw-35615");
  damaged[9] ^= 0x01;  // the length's CRC
  const std::string neither = dir.write("damaged", damaged);
  CHECK_THROWS_WITH(loadExampleRecords(recordFiles({neither}), {2, 2, 1}),
                    neither +
                        ": neither a TFRecord file (its first record's header has a CRC "
                        "that does not match) nor one compressed with gzip or zlib "
                        "(unknown compression method)");
}

TEST_CASE("features the data set does not take are not judged", "[example_records]") {
  TempDir dir;
  // Many features, given twice, a float `width` unrelated to the image:
  // none is the image, the label or its shape, as TensorFlow's parser sees
  // features it is not asked for.
  Features features{{"width", floatsFeature({0.5f})}, {"label", int64Feature({4})}};
  for (int i = 0; i < 100000; ++i)
    features.push_back({fmt::format("f{}", i % 1000), int64Feature({i})});
  features.push_back({"image_raw", bytesFeature("abcd")});
  features.push_back({"width", floatsFeature({0.25f})});
  const std::string path = dir.write("many", framed({exampleMessage(features)}));
  const Dataset data = loadExampleRecords(recordFiles({path}), {2, 2, 1});
  CHECK(data.size == 1);
  CHECK(data.example_shape == Shape{2, 2, 1});
  CHECK(data.labels == std::vector<int32_t>{4});

  CHECK_THROWS_AS(loadExampleRecords(recordFiles({path}), {2, 0, 1}), std::invalid_argument);
}

TEST_CASE("bad TFRecord data sets are refused, naming file, record, feature and what was expected",
          "[example_records]") {
  TempDir dir;
  const std::string good = pixelExample("abcd", 3);
  // The error of loading `messages` as one raw file of examples of [2, 2, 1].
  const auto errorOf = [&](const std::vector<std::string>& messages) {
    const std::string path = dir.write("bad", framed(messages));
    try {
      loadExampleRecords(recordFiles({path}), {2, 2, 1});
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    FAIL("no error");
    return std::string();
  };

  SECTION("no image feature: the features there are listed") {
    CHECK_THAT(errorOf({good, exampleMessage({{"label", int64Feature({1})},
                                              {"image/encoded", bytesFeature("x")}})}),
               Contains((dir / "bad").string() + ": record 1 at byte 57: has no feature "
                                                 "'image_raw' (its features: label, "
                                                 "image/encoded); set image_feature to the one "
                                                 "that holds the image"));
  }
  SECTION("no label feature") {
    CHECK_THAT(errorOf({exampleMessage({{"image_raw", bytesFeature("abcd")}})}),
               Contains("record 0 at byte 0: has no feature 'label' (its features: image_raw); "
                        "set label_feature"));
  }
  SECTION("an encoded image") {
    CHECK_THAT(errorOf({pixelExample("GIF89a and more", 1)}),
               Contains("feature 'image_raw' holds 15 bytes, a GIF image; expected the 4 raw "
                        "pixels (bytes) of an image of [2, 2, 1] (decode the images as the "
                        "records are written)"));
    CHECK_THAT(errorOf({pixelExample("\xff\xd8\xff\xe0 and more", 1)}),
               Contains("feature 'image_raw' holds a corrupt JPEG header: "));
    // A data set takes one kind of image, as its first record's is.
    tensorflow::Example example = jpegFixtureExample(0);
    const std::string jpeg_bytes = jpegImageOf(example);
    CHECK_THAT(errorOf({good, pixelExample(jpeg_bytes, 1)}),
               Contains("record 1 at byte 57: feature 'image_raw' holds " +
                        std::to_string(jpeg_bytes.size()) +
                        " bytes, a JPEG image; expected the 4 raw pixels (bytes) of an image of "
                        "[2, 2, 1], as the first record's image was"));
  }
  SECTION("raw pixels that begin as a JPEG image does are pixels") {
    TempDir dir;
    const Dataset data = loadExampleRecords(
        recordFiles({dir.write("pixels", framed({pixelExample("\xff\xd8\xff\x01", 1),
                                                 pixelExample("\xff\xd8\xff\x02", 2)}))}),
        {2, 2, 1});
    CHECK(data.pixels == std::vector<uint8_t>{255, 216, 255, 1, 255, 216, 255, 2});
  }
  SECTION("too few pixels") {
    CHECK_THAT(errorOf({good, pixelExample("abc", 1)}),
               Contains("record 1 at byte 57: feature 'image_raw' holds 3 bytes; expected the 4 "
                        "raw pixels"));
  }
  SECTION("an image of int64s") {
    CHECK_THAT(errorOf({exampleMessage(
                   {{"label", int64Feature({1})}, {"image_raw", int64Feature({1, 2, 3, 4})}})}),
               Contains("feature 'image_raw' holds int64s (4 values); expected the 4 raw pixels"));
  }
  SECTION("floats after pixels") {
    CHECK_THAT(
        errorOf({good, exampleMessage({{"label", int64Feature({1})},
                                       {"image_raw", floatsFeature({1, 2, 3, 4})}})}),
        Contains("holds floats (4 values); expected the 4 raw pixels (bytes) of an image of [2, 2, "
                 "1], as the records before it"));
  }
  SECTION("a float that is not finite") {
    CHECK_THAT(errorOf({exampleMessage(
                   {{"label", int64Feature({1})}, {"image_raw", floatsFeature({1, 2, NAN, 4})}})}),
               Contains("feature 'image_raw' holds nan at value 2; expected finite floats"));
  }
  SECTION("a negative class") {
    CHECK_THAT(errorOf({pixelExample("abcd", -1)}),
               Contains("feature 'label' is -1; expected a class from 0 to 2147483646"));
  }
  SECTION("two labels") {
    CHECK_THAT(errorOf({exampleMessage(
                   {{"label", int64Feature({1, 2})}, {"image_raw", bytesFeature("abcd")}})}),
               Contains("feature 'label' holds int64s (2 values); expected one int64, the class"));
  }
  SECTION("a feature given twice") {
    CHECK_THAT(errorOf({exampleMessage({{"label", int64Feature({1})},
                                        {"image_raw", bytesFeature("abcd")},
                                        {"label", int64Feature({2})}})}),
               Contains("feature 'label' is given twice"));
  }
  SECTION("images whose shapes disagree") {
    const auto sized = [](int64_t height, int64_t width) {
      return exampleMessage({{"height", int64Feature({height})},
                             {"width", int64Feature({width})},
                             {"label", int64Feature({0})},
                             {"image_raw", bytesFeature("abcd")}});
    };
    CHECK_THAT(errorOf({sized(2, 2), sized(1, 4)}),
               Contains("record 1 at byte 90: height, width and depth give an image of [1, 4, "
                        "1]; expected [2, 2, 1], as the records before it"));
    CHECK_THAT(errorOf({good, sized(1, 4)}),
               Contains("[1, 4, 1]; expected [2, 2, 1], as the model's input"));
    CHECK_THAT(errorOf({sized(0, 4)}),
               Contains("feature 'height' is 0; expected an image's size in it, from 1 to "
                        "2147483647"));
    // Sizes no record could hold lie (their product overflowed int64).
    CHECK_THAT(errorOf({sized(INT32_MAX, INT32_MAX)}),
               Contains("record 0 at byte 0: height, width and depth give an image of "
                        "[2147483647, 2147483647, 1], more values than a record holds (") &&
                   Contains("the size features are wrong"));
  }
  SECTION("a record that is no Example") {
    CHECK_THAT(errorOf({good, "\xff\xff\xff"}),
               Contains("record 1 at byte 57: expected a tf.train.Example message, got 3 bytes"));
  }
  SECTION("a damaged record") {
    std::string file = framed({good, good});
    file[57 + 20] ^= 0x04;
    const std::string path = dir.write("damaged", file);
    CHECK_THROWS_WITH(loadExampleRecords(recordFiles({path}), {2, 2, 1}),
                      Contains(path + ": record 1 at byte 57: the CRC of the data"));
  }
  SECTION("a gzip file cut short between records") {
    // Deflate's stream ends with the records: cut the gzip trailer, and all
    // the records decompress, and then the stream is found cut short.
    writeGzip(dir / "whole.gz", framed(std::vector<std::string>(200, good)));
    const std::string bytes = readBytes(dir / "whole.gz");
    const std::string path = dir.write("cut.gz", bytes.substr(0, bytes.size() - 8));
    CHECK_THROWS_WITH(loadExampleRecords(recordFiles({path}), {2, 2, 1}),
                      path +
                          ": corrupt compressed data at record 200 (byte 11400 of the decompressed "
                          "data): unexpected end of file");
  }
  SECTION("a gzip file cut short inside a record") {
    writeGzip(dir / "whole.gz", framed(std::vector<std::string>(2000, good)));
    const std::string bytes = readBytes(dir / "whole.gz");
    const std::string path = dir.write("cut.gz", bytes.substr(0, bytes.size() / 2));
    CHECK_THROWS_WITH(loadExampleRecords(recordFiles({path}), {2, 2, 1}),
                      Contains(path + ": corrupt compressed data at record ") &&
                          Contains(" of the decompressed data): unexpected end of file"));
  }
  SECTION("a corrupt gzip stream") {
    writeGzip(dir / "whole.gz", framed({good, good}));
    std::string bytes = readBytes(dir / "whole.gz");
    bytes[bytes.size() / 2] ^= 0x55;
    const std::string path = dir.write("corrupt.gz", bytes);
    CHECK_THROWS_WITH(loadExampleRecords(recordFiles({path}), {2, 2, 1}),
                      Contains(path + ": corrupt compressed data at record ") ||
                          Contains(path + " (decompressed): record"));
  }
  SECTION("a record past the bound a model's input sets") {
    const std::string path =
        dir.write("long", framed({pixelExample(std::string(17 << 20, 'x'), 1)}));
    CHECK_THROWS_WITH(loadExampleRecords(recordFiles({path}), {2, 2, 1}),
                      Contains(path + ": record 0 at byte 0: the record declares 17825844 bytes of "
                                      "data, more than the 16777248 a record may hold here"));
  }
  SECTION("files without a record") {
    const std::string empty = dir.write("empty", "");
    CHECK_THROWS_WITH(loadExampleRecords(recordFiles({empty}), {2, 2, 1}),
                      empty + ": holds no records");
    CHECK_THROWS_WITH(loadExampleRecords(recordFiles({empty, empty + "2"}), {2, 2, 1}),
                      Contains(empty + "2: cannot open"));
    dir.write("empty2", "");
    CHECK_THROWS_WITH(loadExampleRecords(recordFiles({empty, empty + "2"}), {2, 2, 1}),
                      "the 2 files from " + empty + " on hold no records");
  }
  SECTION("a directory") {
    CHECK_THROWS_WITH(loadExampleRecords(recordFiles({dir.path()}), {2, 2, 1}),
                      dir.path().string() + ": is a directory, not a TFRecord file");
  }
}

}  // namespace
}  // namespace traind
