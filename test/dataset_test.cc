#include "core/dataset.h"

#include <zlib.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <fstream>
#include <numeric>
#include <set>
#include <thread>

#include "core/error.h"
#include "core/input_pipeline.h"
#include "test/temp_dir.h"

using Catch::Matchers::Contains;
using Catch::Matchers::EndsWith;
using Catch::Matchers::Equals;
using Catch::Matchers::StartsWith;

namespace traind {
namespace {

const std::string kFashion = "/usr/share/datasets/fashion-mnist/";

std::string idxBytes(uint32_t magic, const std::vector<uint32_t>& dims,
                     const std::vector<uint8_t>& elements) {
  std::string bytes;
  auto put = [&bytes](uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) bytes += char((v >> shift) & 0xff);
  };
  put(magic);
  for (uint32_t d : dims) put(d);
  bytes.append(elements.begin(), elements.end());
  return bytes;
}

DataFiles idxFiles(const std::filesystem::path& images, const std::filesystem::path& labels,
                   int64_t limit = 0) {
  DataFiles files;
  files.images = images;
  files.labels = labels;
  files.limit = limit;
  return files;
}

void writeRaw(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

void writeGzip(const std::filesystem::path& path, const std::string& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  REQUIRE(file != nullptr);
  REQUIRE(gzwrite(file, bytes.data(), unsigned(bytes.size())) == int(bytes.size()));
  REQUIRE(gzclose(file) == Z_OK);
}

std::string readRaw(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Three 2x2 images whose pixels are 0, 51, ..., 255 and labels 2, 0, 1.
const std::vector<uint8_t> kPixels = {0, 51, 102, 153, 204, 255, 0, 51, 102, 153, 204, 255};
const std::string kImages = idxBytes(idx_format::kImagesMagic, {3, 2, 2}, kPixels);
const std::string kLabels = idxBytes(idx_format::kLabelsMagic, {3}, {2, 0, 1});

// Examples whose inputs say which they are: example i is {i, -i}, label i % 7,
// target 10 i.
Dataset indexedDataset(int64_t n) {
  Dataset data;
  data.example_shape = {2};
  data.size = n;
  for (int64_t i = 0; i < n; ++i) {
    data.floats.push_back(float(i));
    data.floats.push_back(-float(i));
    data.labels.push_back(int32_t(i % 7));
    data.targets.push_back(10.0f * float(i));
  }
  data.num_classes = 7;
  return data;
}

// The example indices of a batch of an indexedDataset, checking that inputs,
// labels and targets travelled together.
std::vector<int64_t> exampleIndices(const Batch& batch) {
  std::vector<int64_t> indices;
  for (int64_t j = 0; j < batch.size; ++j) {
    const int64_t i = int64_t(batch.inputs[2 * j]);
    REQUIRE(batch.inputs[2 * j + 1] == -float(i));
    REQUIRE(batch.labels[j] == int32_t(i % 7));
    REQUIRE(batch.targets[j] == 10.0f * float(i));
    indices.push_back(i);
  }
  return indices;
}

std::vector<std::vector<int64_t>> readSteps(const Dataset& data, int64_t batch_size, bool shuffle,
                                            uint64_t seed, int64_t first_step, int64_t steps,
                                            int prefetch = 3,
                                            const ShuffleBuffer& shuffle_buffer = {}) {
  InputPipeline pipeline(data, batch_size, shuffle, seed, first_step, prefetch, 0, 1, {},
                         shuffle_buffer);
  std::vector<std::vector<int64_t>> batches;
  for (int64_t s = 0; s < steps; ++s) batches.push_back(exampleIndices(pipeline.next()));
  return batches;
}

}  // namespace

// Speed is measured in bench/, not here: a timed test fails on a loaded machine.
TEST_CASE("Fashion-MNIST's training set loads whole", "[dataset][idx]") {
  const Dataset data = loadIdxDataset(
      idxFiles(kFashion + "train-images-idx3-ubyte.gz", kFashion + "train-labels-idx1-ubyte.gz"));

  REQUIRE(data.size == 60000);
  REQUIRE(data.example_shape == Shape{28, 28, 1});
  REQUIRE(data.pixels.size() == size_t(60000 * 28 * 28));
  REQUIRE(data.floats.empty());
  REQUIRE(data.labels.size() == 60000);
  REQUIRE(data.targets.empty());
  REQUIRE(data.num_classes == 10);
  std::vector<int> per_class(10);
  for (int32_t label : data.labels) {
    REQUIRE(label >= 0);
    REQUIRE(label < 10);
    ++per_class[label];
  }
  CHECK(per_class == std::vector<int>(10, 6000));
  const auto [lo, hi] = std::minmax_element(data.pixels.begin(), data.pixels.end());
  CHECK(*lo == 0);
  CHECK(*hi == 255);
  const double mean =
      std::accumulate(data.pixels.begin(), data.pixels.end(), 0.0) / double(data.pixels.size());
  CHECK(mean == Approx(72.94).epsilon(0.01));  // Fashion-MNIST's known pixel mean
}

TEST_CASE("limit keeps the first examples of the test set", "[dataset][idx]") {
  DataFiles source;
  source.images = kFashion + "t10k-images-idx3-ubyte.gz";
  source.labels = kFashion + "t10k-labels-idx1-ubyte.gz";
  const Dataset all = loadIdxDataset(source);
  REQUIRE(all.size == 10000);
  DataFiles limited = source;
  limited.limit = 100;
  const Dataset first = loadIdxDataset(limited);
  REQUIRE(first.size == 100);
  REQUIRE(first.pixels.size() == size_t(100 * 784));
  CHECK(std::equal(first.pixels.begin(), first.pixels.end(), all.pixels.begin()));
  CHECK(std::equal(first.labels.begin(), first.labels.end(), all.labels.begin()));
  limited.limit = 20000;  // more than the files hold: all of them
  CHECK(loadIdxDataset(limited).size == 10000);
}

TEST_CASE("a worker's share keeps every n-th example of the files, within limit",
          "[dataset][idx][share]") {
  DataFiles source;
  source.images = kFashion + "t10k-images-idx3-ubyte.gz";
  source.labels = kFashion + "t10k-labels-idx1-ubyte.gz";
  source.limit = 1001;
  const Dataset all = loadIdxDataset(source);
  std::vector<int64_t> checked_counts;
  const DataLoadCheck check = [&](const Shape&, int64_t examples, int) {
    checked_counts.push_back(examples);
  };
  for (int index = 0; index < 3; ++index) {
    INFO("share " << index << " of 3");
    const Dataset share = loadIdxDataset(source, check, DataShare{index, 3});
    // 1001 examples: 334, 334 and 333.
    REQUIRE(share.size == (index < 2 ? 334 : 333));
    CHECK(checked_counts.back() == share.size);
    CHECK(share.whole_size == 1001);
    CHECK(share.share.index == index);
    CHECK(share.share.count == 3);
    REQUIRE(share.pixels.size() == size_t(share.size * 784));
    for (int64_t j = 0; j < share.size; ++j) {
      const int64_t k = j * 3 + index;
      REQUIRE(std::equal(share.pixels.begin() + j * 784, share.pixels.begin() + (j + 1) * 784,
                         all.pixels.begin() + k * 784));
      REQUIRE(share.labels[size_t(j)] == all.labels[size_t(k)]);
    }
    // What every worker of a job must hold, whichever share it keeps.
    CHECK(contentText(share) == contentText(all));
  }
  CHECK(all.whole_size == 0);
  CHECK(all.share.count == 1);
  CHECK_THAT(contentText(all), Catch::StartsWith("1001 examples, CRC-32C 0x"));
  // Fewer examples, or as many of another set: another content.
  source.limit = 1000;
  CHECK(loadIdxDataset(source).content_crc != all.content_crc);
  source.limit = 1001;
  source.images = kFashion + "train-images-idx3-ubyte.gz";
  source.labels = kFashion + "train-labels-idx1-ubyte.gz";
  CHECK(loadIdxDataset(source).content_crc != all.content_crc);

  // More shares than examples: the last ones hold none, which is refused.
  TempDir dir;
  writeRaw(dir / "images", kImages);
  writeRaw(dir / "labels", kLabels);
  CHECK(loadIdxDataset(idxFiles(dir / "images", dir / "labels"), nullptr, DataShare{2, 4}).size ==
        1);
  CHECK_THROWS_WITH(
      loadIdxDataset(idxFiles(dir / "images", dir / "labels"), nullptr, DataShare{3, 4}),
      EndsWith("images: 3 images, none for share 3 of 4 (data.shard_by_worker): every "
               "worker's share must hold a batch (data.batch_size) at least"));
  CHECK_THROWS_WITH(
      loadIdxDataset(idxFiles(dir / "images", dir / "labels", 2), nullptr, DataShare{2, 3}),
      EndsWith("images: the first 2 images (limit), none for share 2 of 3 "
               "(data.shard_by_worker): every worker's share must hold a batch (data.batch_size) "
               "at least"));
  CHECK_THROWS_AS(
      loadIdxDataset(idxFiles(dir / "images", dir / "labels"), nullptr, DataShare{4, 4}),
      std::invalid_argument);

  // Images of 1100x1000 (1.1 MB each, more than the reader's 1 MiB buffer
  // and no divisor of it), gzip-compressed: each share's are the whole
  // set's, byte for byte.
  std::vector<uint8_t> big(5 * 1100 * 1000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = uint8_t((i * 2654435761u) >> 13);
  writeGzip(dir / "big-images.gz", idxBytes(idx_format::kImagesMagic, {5, 1100, 1000}, big));
  writeGzip(dir / "big-labels.gz", idxBytes(idx_format::kLabelsMagic, {5}, {0, 1, 2, 3, 4}));
  for (int index = 0; index < 2; ++index) {
    const Dataset share = loadIdxDataset(idxFiles(dir / "big-images.gz", dir / "big-labels.gz"),
                                         nullptr, DataShare{index, 2});
    REQUIRE(share.size == (index == 0 ? 3 : 2));
    for (int64_t j = 0; j < share.size; ++j) {
      const size_t k = size_t(2 * j + index);
      CHECK(share.labels[size_t(j)] == int32_t(k));
      CHECK(std::equal(share.pixels.begin() + j * 1100000, share.pixels.begin() + (j + 1) * 1100000,
                       big.begin() + k * 1100000));
    }
  }
  // Cut short inside the last image: refused as the whole set's reader refuses it.
  const std::string whole = idxBytes(idx_format::kImagesMagic, {5, 1100, 1000}, big);
  writeRaw(dir / "cut-images", whole.substr(0, whole.size() - 1000));
  CHECK_THROWS_WITH(
      loadIdxDataset(idxFiles(dir / "cut-images", dir / "big-labels.gz"), nullptr, DataShare{1, 2}),
      Contains("header declares 5 images of 1100x1000 but the file holds"));
}

TEST_CASE("a share is its worker's own order, as many batches an epoch as the smallest share",
          "[pipeline][share]") {
  // 10 examples in shares of 4, 3 and 3 (examples 0, 3, 6, 9 / 1, 4, 7 /
  // 2, 5, 8): every share takes 1 batch of 3 an epoch.
  const Dataset whole = indexedDataset(10);
  const auto shareOf = [&](int index) {
    Dataset share;
    share.example_shape = whole.example_shape;
    share.share = DataShare{index, 3};
    share.whole_size = 10;
    for (int64_t k = index; k < 10; k += 3) {
      share.floats.insert(share.floats.end(), {float(k), -float(k)});
      share.labels.push_back(int32_t(k % 7));
      share.targets.push_back(10.0f * float(k));
      ++share.size;
    }
    return share;
  };
  std::set<int64_t> seen_in_epoch;
  for (int index = 0; index < 3; ++index) {
    const Dataset share = shareOf(index);
    InputPipeline pipeline(share, 3, true, 5, 0, 1);
    CHECK(pipeline.stepsPerEpoch() == 1);
    std::set<int64_t> seen;
    for (int step = 0; step < 20; ++step)
      for (int64_t i : exampleIndices(pipeline.next())) {
        REQUIRE(i % 3 == index);
        seen.insert(i);
      }
    CHECK(seen.size() == size_t(share.size));  // 20 epochs of its own order visit all of it
    // Through a shuffle buffer too: a buffer of 1 takes the share in its order.
    InputPipeline buffered(share, 3, true, 5, 0, 1, 0, 1, {}, {1});
    CHECK(exampleIndices(buffered.next()) == std::vector<int64_t>{index, index + 3, index + 6});
    // Dealt out among workers once more, a share would lose examples.
    CHECK_THROWS_AS(InputPipeline(share, 1, true, 5, 0, 0, 0, 2), std::invalid_argument);
  }
  // Shares 1 and 2 hold as many examples: their orders differ.
  const Dataset one = shareOf(1), two = shareOf(2);
  std::vector<int64_t> order_one, order_two;
  InputPipeline p1(one, 3, true, 5, 0, 0), p2(two, 3, true, 5, 0, 0);
  for (int step = 0; step < 8; ++step) {
    for (int64_t i : exampleIndices(p1.next())) order_one.push_back(i / 3);
    for (int64_t i : exampleIndices(p2.next())) order_two.push_back(i / 3);
  }
  CHECK(order_one != order_two);  // 24 draws from 6 permutations each, alike by chance 6^-8
}

TEST_CASE("raw and gzip IDX files load alike, told apart by content, not name", "[dataset][idx]") {
  TempDir dir;
  writeRaw(dir / "images.raw", kImages);
  writeRaw(dir / "labels.raw", kLabels);
  writeGzip(dir / "images.gz", kImages);
  writeGzip(dir / "labels.gz", kLabels);
  // Misleading names: gzip content named .idx, raw content named .gz.
  writeGzip(dir / "images.idx", kImages);
  writeRaw(dir / "labels-raw.gz", kLabels);

  for (const auto& [images, labels] :
       std::vector<std::pair<std::string, std::string>>{{"images.raw", "labels.raw"},
                                                        {"images.gz", "labels.gz"},
                                                        {"images.idx", "labels-raw.gz"}}) {
    INFO(images << " + " << labels);
    const Dataset data = loadIdxDataset(idxFiles(dir / images, dir / labels));
    REQUIRE(data.size == 3);
    REQUIRE(data.example_shape == Shape{2, 2, 1});
    CHECK(data.pixels == kPixels);
    std::vector<float> inputs(12);
    copyInputs(data, 0, 3, inputs.data());
    for (size_t i = 0; i < kPixels.size(); ++i) CHECK(inputs[i] == float(kPixels[i]) / 255.0f);
    CHECK(inputs[5] == 1.0f);
    CHECK(data.labels == std::vector<int32_t>{2, 0, 1});
    CHECK(data.num_classes == 3);
  }
}

TEST_CASE("rank-4 IDX images are colour images, height x width x channels", "[dataset][idx]") {
  TempDir dir;
  // Two 1x2 images of 3 channels, HWC: pixel (0, 0) of image 0 is 1, 2, 3.
  const std::vector<uint8_t> pixels = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 255};
  writeGzip(dir / "images", idxBytes(idx_format::kChannelImagesMagic, {2, 1, 2, 3}, pixels));
  writeRaw(dir / "labels", idxBytes(idx_format::kLabelsMagic, {2}, {1, 0}));
  const Dataset data = loadIdxDataset(idxFiles(dir / "images", dir / "labels"));
  REQUIRE(data.size == 2);
  CHECK(data.example_shape == Shape{1, 2, 3});
  CHECK(data.pixels == pixels);
  std::vector<float> second(6);
  copyInputs(data, 1, 1, second.data());
  CHECK(second ==
        std::vector<float>{7 / 255.0f, 8 / 255.0f, 9 / 255.0f, 10 / 255.0f, 11 / 255.0f, 1.0f});
  CHECK(data.labels == std::vector<int32_t>{1, 0});
}

TEST_CASE("corrupt IDX files are rejected naming the file and the fault", "[dataset][idx]") {
  TempDir dir;
  const std::string images = dir / "images";
  const std::string labels = dir / "labels";
  writeRaw(labels, kLabels);
  auto loadWithImages = [&](const std::string& bytes) {
    writeRaw(images, bytes);
    return loadIdxDataset(idxFiles(images, labels));
  };

  SECTION("truncated pixels") {
    CHECK_THROWS_MATCHES(
        loadWithImages(kImages.substr(0, kImages.size() - 2)), InputError,
        Catch::Message(images +
                       ": header declares 3 images of 2x2 but the file holds 10 bytes of pixels"));
  }
  SECTION("more pixels than the header declares") {
    CHECK_THROWS_MATCHES(
        loadWithImages(kImages + "x"), InputError,
        Catch::Message(images +
                       ": header declares 3 images of 2x2 but the file holds 13 bytes of pixels"));
  }
  SECTION("a header that claims far more than the file holds") {
    CHECK_THROWS_MATCHES(
        loadWithImages(idxBytes(idx_format::kImagesMagic, {60000, 28, 28}, {1, 2, 3})), InputError,
        Catch::Message(
            images +
            ": header declares 60000 images of 28x28 but the file holds 3 bytes of pixels"));
  }
  SECTION("far more pixels than the header declares: read no further than about 2 MiB past") {
    // A gzip stream of 64 MiB of zeros (64 KiB of file) after a valid file.
    std::string bytes = kImages + std::string(size_t(64) << 20, '\0');
    writeGzip(images, bytes);
    CHECK(std::filesystem::file_size(images) < (size_t(1) << 20));
    CHECK_THROWS_MATCHES(loadIdxDataset(idxFiles(images, labels)), InputError,
                         Catch::Predicate<std::exception>([&](const std::exception& e) {
                           const std::string m = e.what();
                           INFO(m);
                           const std::string head =
                               images +
                               ": header declares 3 images of 2x2 but the file holds at least ";
                           if (!m.starts_with(head) || !m.ends_with(" bytes of pixels"))
                             return false;
                           const long long held = std::stoll(m.substr(head.size()));
                           return held > (1 << 20) && held <= (3 << 20);  // not the 64 MiB
                         }));
  }
  SECTION("the header check sees the images' shape and count before any pixel is read") {
    // 100000 images of 40000x40000 declared; the pixels are not there, and
    // the check refuses them first.
    writeGzip(images, idxBytes(idx_format::kImagesMagic, {100000, 40000, 40000}, {1, 2, 3}));
    Shape seen;
    int64_t examples = 0;
    CHECK_THROWS_MATCHES(loadIdxDataset(idxFiles(images, labels, 7),
                                        [&](const Shape& shape, int64_t count, int) {
                                          seen = shape;
                                          examples = count;
                                          throw InputError("refused by the check");
                                        }),
                         InputError, Catch::Message("refused by the check"));
    CHECK(seen == Shape{40000, 40000, 1});
    CHECK(examples == 7);  // the limit: what would be kept
  }
  SECTION("a labels file given as images") {
    CHECK_THROWS_MATCHES(loadWithImages(kLabels), InputError,
                         Catch::Message(images + ": expected IDX magic 0x00000803 or 0x00000804 "
                                                 "(images), got 0x00000801 (a labels file)"));
  }
  SECTION("not an IDX file") {
    CHECK_THROWS_MATCHES(
        loadWithImages("PK\x03\x04 a zip archive"), InputError,
        Catch::Message(images +
                       ": expected IDX magic 0x00000803 or 0x00000804 (images), got 0x504b0304"));
  }
  SECTION("float elements") {
    CHECK_THROWS_MATCHES(
        loadWithImages(idxBytes(0x00000d03, {1, 1, 1}, {0, 0, 0, 0})), InputError,
        Catch::Message(images +
                       ": expected IDX magic 0x00000803 or 0x00000804 (images), got 0x00000d03"));
  }
  SECTION("a file that ends inside its header") {
    CHECK_THROWS_MATCHES(
        loadWithImages(kImages.substr(0, 10)), InputError,
        Catch::Message(images + ": file ends after 10 bytes, inside its 16-byte IDX header"));
    CHECK_THROWS_MATCHES(
        loadWithImages(""), InputError,
        Catch::Message(images + ": file ends after 0 bytes, inside its 16-byte IDX header"));
  }
  SECTION("a colour file that ends inside its longer header") {
    const std::string colour = idxBytes(idx_format::kChannelImagesMagic, {1, 1, 1, 3}, {1, 2, 3});
    CHECK_THROWS_MATCHES(
        loadWithImages(colour.substr(0, 18)), InputError,
        Catch::Message(images + ": file ends after 18 bytes, inside its 20-byte IDX header"));
  }
  SECTION("a colour header whose pixels pass 2^64 bytes") {
    CHECK_THROWS_MATCHES(
        loadWithImages(idxBytes(idx_format::kChannelImagesMagic, {1, 1u << 22, 1u << 21, 1u << 21},
                                {1, 2, 3})),
        InputError,
        Catch::Message(images + ": header declares 1 images of 4194304x2097152x2097152: more than "
                                "any memory holds"));
  }
  SECTION("a colour file short of pixels") {
    CHECK_THROWS_MATCHES(
        loadWithImages(idxBytes(idx_format::kChannelImagesMagic, {1, 2, 2, 3}, {1, 2, 3})),
        InputError,
        Catch::Message(images + ": header declares 1 images of 2x2x3 but the file holds 3 bytes "
                                "of pixels"));
  }
  SECTION("no images") {
    CHECK_THROWS_MATCHES(loadWithImages(idxBytes(idx_format::kImagesMagic, {0, 2, 2}, {})),
                         InputError, Catch::Message(images + ": header declares 0 images of 2x2"));
  }
  SECTION("image and label counts differ") {
    writeRaw(labels, idxBytes(idx_format::kLabelsMagic, {2}, {0, 1}));
    CHECK_THROWS_MATCHES(
        loadWithImages(kImages), InputError,
        Catch::Message(images + ": 3 images but " + labels + ": 2 labels; the counts must match"));
  }
  SECTION("a missing file") {
    CHECK_THROWS_MATCHES(
        loadIdxDataset(idxFiles(dir / "nope", labels)), InputError,
        Catch::Message((dir / "nope").string() + ": cannot open: No such file or directory"));
  }
  SECTION("a directory") {
    CHECK_THROWS_MATCHES(loadIdxDataset(idxFiles(dir.path(), labels)), InputError,
                         Catch::Message(dir.path().string() + ": is a directory, not an IDX file"));
  }
  SECTION("a truncated gzip file") {
    const std::string gz = readRaw(kFashion + "t10k-labels-idx1-ubyte.gz");
    writeRaw(images, readRaw(kFashion + "t10k-images-idx3-ubyte.gz"));
    writeRaw(labels, gz.substr(0, gz.size() / 2));
    CHECK_THROWS_MATCHES(
        loadIdxDataset(idxFiles(images, labels)), InputError,
        Catch::Matchers::Predicate<std::exception>([&](const std::exception& e) {
          const std::string m = e.what();
          return m.starts_with(labels + ": header declares 10000 labels but the file holds ") &&
                 m.ends_with(" bytes of labels (gzip: unexpected end of file)");
        }));
  }
  SECTION("a gzip file with a wrong checksum") {
    std::string gz = readRaw(kFashion + "t10k-labels-idx1-ubyte.gz");
    gz[gz.size() - 6] ^= 0x55;  // the CRC-32 in the trailer
    writeRaw(images, readRaw(kFashion + "t10k-images-idx3-ubyte.gz"));
    writeRaw(labels, gz);
    CHECK_THROWS_MATCHES(loadIdxDataset(idxFiles(images, labels)), InputError,
                         Catch::Message(labels + ": corrupt gzip stream: incorrect data check"));
  }
  SECTION("a gzip file with bytes after its end") {
    // Damaged in transfer, or two files run together: the IDX count alone
    // would not see them, as they are no part of the gzip data.
    writeRaw(images, readRaw(kFashion + "t10k-images-idx3-ubyte.gz"));
    writeRaw(labels, readRaw(kFashion + "t10k-labels-idx1-ubyte.gz") + "garbage");
    CHECK_THROWS_MATCHES(
        loadIdxDataset(idxFiles(images, labels)), InputError,
        Catch::Message(labels + ": corrupt gzip stream: bytes after the end of the gzip data"));
  }
}

TEST_CASE("synthetic regression data is y = x^2 + noise, fixed by the seed", "[dataset]") {
  const SyntheticRegressionSpec spec{5000, -2.0f, 3.0f, 0.1f};
  const Dataset data = makeSyntheticRegression(spec, 42);
  REQUIRE(data.size == 5000);
  REQUIRE(data.example_shape == Shape{1});
  REQUIRE(data.floats.size() == 5000);
  REQUIRE(data.pixels.empty());
  REQUIRE(data.targets.size() == 5000);
  REQUIRE(data.labels.empty());
  REQUIRE(data.num_classes == 0);
  double sum = 0, sum_squares = 0;
  for (int64_t i = 0; i < data.size; ++i) {
    const float x = data.floats[i];
    REQUIRE(x >= -2.0f);
    REQUIRE(x <= 3.0f);
    const double noise = data.targets[i] - double(x) * x;
    sum += noise;
    sum_squares += noise * noise;
  }
  CHECK(std::abs(sum / 5000) < 0.01);
  CHECK(std::sqrt(sum_squares / 5000) == Approx(0.1).epsilon(0.05));
  const auto [lo, hi] = std::minmax_element(data.floats.begin(), data.floats.end());
  CHECK(*lo < -1.99f);
  CHECK(*hi > 2.99f);

  const Dataset again = makeSyntheticRegression(spec, 42);
  CHECK(again.floats == data.floats);
  CHECK(again.targets == data.targets);
  CHECK(makeSyntheticRegression(spec, 43).floats != data.floats);
}

TEST_CASE("sliceBatch copies the inputs and points into the labels and targets", "[dataset]") {
  const Dataset data = indexedDataset(10);
  std::vector<float> inputs(6);
  const Batch batch = sliceBatch(data, 4, 3, inputs.data());
  CHECK(batch.size == 3);
  CHECK(batch.inputs == inputs.data());
  CHECK(batch.labels == data.labels.data() + 4);
  CHECK(batch.targets == data.targets.data() + 4);
  CHECK(exampleIndices(batch) == std::vector<int64_t>{4, 5, 6});
  CHECK(sliceBatch(data, 10, 0, inputs.data()).size == 0);
  CHECK_THROWS_AS(sliceBatch(data, 8, 3, inputs.data()), std::out_of_range);
  CHECK_THROWS_AS(sliceBatch(data, -1, 1, inputs.data()), std::out_of_range);

  const Dataset regression = makeSyntheticRegression({}, 1);
  CHECK(sliceBatch(regression, 0, 2, inputs.data()).labels == nullptr);
}

TEST_CASE("images become floats as a batch is gathered, each pixel / 255", "[dataset][pipeline]") {
  TempDir dir;
  writeRaw(dir / "images", kImages);
  writeRaw(dir / "labels", kLabels);
  const Dataset data = loadIdxDataset(idxFiles(dir / "images", dir / "labels"));
  // Every byte value, against the quotient: a multiplication by 1 / 255
  // rounds some of them differently.
  Dataset every;
  every.example_shape = {256};
  every.size = 1;
  every.pixels.resize(256);
  std::iota(every.pixels.begin(), every.pixels.end(), uint8_t(0));
  std::vector<float> values(256);
  copyInputs(every, 0, 1, values.data());
  for (int v = 0; v < 256; ++v) REQUIRE(values[size_t(v)] == float(v) / 255.0f);

  std::vector<float> inputs(8);
  const Batch slice = sliceBatch(data, 1, 2, inputs.data());
  CHECK(std::vector<float>(slice.inputs, slice.inputs + 8) ==
        std::vector<float>{204 / 255.0f, 1.0f, 0.0f, 51 / 255.0f, 102 / 255.0f, 153 / 255.0f,
                           204 / 255.0f, 1.0f});
  CHECK(slice.labels[0] == 0);

  // No shuffle, batches of one: the pipeline's batches in the file's order.
  InputPipeline pipeline(data, 1, false, 7, 0, 0);
  for (int64_t i = 0; i < 3; ++i) {
    const Batch& batch = pipeline.next();
    for (size_t k = 0; k < 4; ++k)
      CHECK(batch.inputs[k] == float(kPixels[size_t(i) * 4 + k]) / 255.0f);
    CHECK(batch.labels[0] == std::vector<int32_t>{2, 0, 1}[size_t(i)]);
  }
}

TEST_CASE("per_image_standardization: (x - mean) / max(stddev, 1 / (255 sqrt(n)))",
          "[dataset][pipeline]") {
  // By hand: mean 0.3, population stddev sqrt(0.14 / 4).
  std::vector<float> values{0.1f, 0.2f, 0.3f, 0.6f};
  standardizeExample(values.data(), 4, /*pixel_scale=*/true);
  const double stddev = std::sqrt(0.035);
  for (size_t i = 0; i < 4; ++i)
    CHECK(values[i] ==
          Approx((std::vector<double>{-0.2, -0.1, 0.0, 0.3}[i]) / stddev).margin(1e-6));
  // Below the bound, as TensorFlow bounds 0-255 pixels' stddev by 1 / sqrt(n):
  // 1 / (255 sqrt(2)) here.
  std::vector<float> flat{0.5f, 0.5f + 1.0f / 2550.0f};
  const double half_gap = (double(flat[1]) - double(flat[0])) / 2;  // the stddev
  std::vector<float> as_given = flat;
  standardizeExample(flat.data(), 2, /*pixel_scale=*/true);
  const double bound = 1.0 / (255.0 * std::sqrt(2.0));
  REQUIRE(half_gap < bound);
  CHECK(flat[0] == Approx(-half_gap / bound).margin(1e-6));
  CHECK(flat[1] == Approx(half_gap / bound).margin(1e-6));
  // Floats as given: TensorFlow's own bound, 1 / sqrt(n), whatever their scale.
  standardizeExample(as_given.data(), 2, /*pixel_scale=*/false);
  CHECK(as_given[1] == Approx(half_gap * std::sqrt(2.0)).margin(1e-7));
  std::vector<float> constant(5, 0.25f);
  standardizeExample(constant.data(), 5, /*pixel_scale=*/true);
  CHECK(constant == std::vector<float>(5, 0.0f));

  // sliceBatch and the pipeline standardize each example of a data set that asks for it.
  Dataset data = indexedDataset(6);
  data.per_image_standardization = true;
  std::vector<float> inputs(4);
  const Batch slice = sliceBatch(data, 2, 2, inputs.data());
  CHECK(std::vector<float>(slice.inputs, slice.inputs + 4) ==
        std::vector<float>{1.0f, -1.0f, 1.0f, -1.0f});  // {i, -i}: mean 0, stddev i
  InputPipeline pipeline(data, 3, false, 1, 0, 1);
  const Batch& batch = pipeline.next();
  CHECK(std::vector<float>(batch.inputs, batch.inputs + 6) ==
        std::vector<float>{0.0f, 0.0f, 1.0f, -1.0f, 1.0f, -1.0f});  // example 0 is all zeros
}

TEST_CASE("without shuffle the pipeline goes in order and drops partial batches", "[pipeline]") {
  const Dataset data = indexedDataset(10);
  const auto batches = readSteps(data, 3, false, 7, 0, 7);
  const std::vector<std::vector<int64_t>> expected = {{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {0, 1, 2},
                                                      {3, 4, 5}, {6, 7, 8}, {0, 1, 2}};
  CHECK(batches == expected);
  CHECK(InputPipeline(data, 3, false, 7, 0, 1).stepsPerEpoch() == 3);
}

TEST_CASE("each shuffled epoch is a new permutation of the data set", "[pipeline]") {
  const Dataset data = indexedDataset(103);  // 10 batches of 10 a epoch, 3 dropped
  const auto batches = readSteps(data, 10, true, 7, 0, 30);
  std::vector<std::vector<int64_t>> epochs(3);
  for (size_t s = 0; s < batches.size(); ++s)
    epochs[s / 10].insert(epochs[s / 10].end(), batches[s].begin(), batches[s].end());
  for (const std::vector<int64_t>& epoch : epochs) {
    REQUIRE(epoch.size() == 100);
    REQUIRE(std::set<int64_t>(epoch.begin(), epoch.end()).size() == 100);  // no repeats
    CHECK(!std::is_sorted(epoch.begin(), epoch.end()));
  }
  CHECK(epochs[0] != epochs[1]);
  CHECK(epochs[1] != epochs[2]);
  CHECK(readSteps(data, 10, true, 7, 0, 30) == batches);  // same seed, same order
  // Without read-ahead (no input thread) the batches are the same.
  CHECK(readSteps(data, 10, true, 7, 0, 30, /*prefetch=*/0) == batches);
  CHECK(readSteps(data, 10, true, 8, 0, 10) !=
        std::vector<std::vector<int64_t>>(batches.begin(), batches.begin() + 10));
}

TEST_CASE("through a shuffle buffer each example is drawn from the next ones of the set",
          "[pipeline]") {
  // tf.data's shuffle(B): the k-th example drawn is one of the set's first
  // k + B, so a set left in its files is read nearly in order.
  const Dataset data = indexedDataset(200);
  const auto epochsOf = [&](int64_t buffer, uint64_t seed) {
    const auto batches = readSteps(data, 10, true, seed, 0, 60, 3, {buffer});
    std::vector<std::vector<int64_t>> epochs(3);
    for (size_t s = 0; s < batches.size(); ++s)
      epochs[s / 20].insert(epochs[s / 20].end(), batches[s].begin(), batches[s].end());
    return epochs;
  };
  const auto epochs = epochsOf(16, 7);
  for (const std::vector<int64_t>& epoch : epochs) {
    REQUIRE(epoch.size() == 200);
    CHECK(std::set<int64_t>(epoch.begin(), epoch.end()).size() == 200);  // a permutation
    CHECK(!std::is_sorted(epoch.begin(), epoch.end()));
    for (size_t k = 0; k < epoch.size(); ++k) CHECK(epoch[k] < int64_t(k) + 16);
  }
  CHECK(epochs[0] != epochs[1]);
  CHECK(epochsOf(16, 7) == epochs);  // same seed, same order
  CHECK(epochsOf(16, 8) != epochs);
  // A buffer of one draws the set in order; one of the whole set or more
  // draws from all of it.
  std::vector<int64_t> in_order(200);
  std::iota(in_order.begin(), in_order.end(), int64_t(0));
  CHECK(epochsOf(1, 7)[1] == in_order);
  const auto whole = epochsOf(1000, 7);
  CHECK(std::set<int64_t>(whole[0].begin(), whole[0].end()).size() == 200);
  CHECK(*std::max_element(whole[0].begin(), whole[0].begin() + 10) > 100);
  CHECK_THROWS_AS(InputPipeline(data, 10, true, 7, 0, 0, 0, 1, {}, {-1}), std::invalid_argument);
  // Resumed mid-epoch, and without read-ahead, the same batches.
  const auto uninterrupted = readSteps(data, 10, true, 7, 0, 60, 3, {16});
  CHECK(readSteps(data, 10, true, 7, 27, 33, 0, {16}) ==
        std::vector<std::vector<int64_t>>(uninterrupted.begin() + 27, uninterrupted.end()));
}

TEST_CASE("a shuffle buffer reads the files a few at a time, in an order drawn every epoch",
          "[pipeline]") {
  // Files of 3, 1 and 2 examples: 0 1 2 | 3 | 4 5. Through a buffer of one
  // the batches are the stream itself.
  Dataset data = indexedDataset(6);
  data.file_examples = {3, 1, 2};
  const auto epochsOf = [&](const ShuffleBuffer& stream, uint64_t seed, int64_t epochs) {
    return readSteps(data, 6, true, seed, 0, epochs, 0, stream);  // an epoch a step
  };
  // As tf.data.Dataset.from_tensor_slices of the files .interleave(...,
  // cycle_length=k) gives them (TensorFlow 2.21): a file that ends leaves
  // its place to the next file when the turn comes back to it.
  CHECK(epochsOf({1, 1}, 7, 1)[0] == std::vector<int64_t>{0, 1, 2, 3, 4, 5});
  CHECK(epochsOf({1, 2}, 7, 1)[0] == std::vector<int64_t>{0, 3, 1, 2, 4, 5});
  CHECK(epochsOf({1, 3}, 7, 1)[0] == std::vector<int64_t>{0, 3, 4, 1, 5, 2});
  CHECK(epochsOf({1, 100}, 7, 1)[0] == std::vector<int64_t>{0, 3, 4, 1, 5, 2});
  SECTION("a file of no examples (a share with none of its records) takes a turn") {
    Dataset gaps = indexedDataset(5);
    gaps.file_examples = {2, 0, 2, 1};
    const auto order = readSteps(gaps, 5, true, 7, 0, 1, 0, {1, 2});
    CHECK(order[0] == std::vector<int64_t>{0, 1, 2, 3, 4});
  }
  SECTION("the files' order is drawn anew every epoch, whole files in turn") {
    const auto epochs = epochsOf({1, 1, true}, 7, 12);
    const std::set<std::vector<int64_t>> concatenations = {{0, 1, 2, 3, 4, 5}, {0, 1, 2, 4, 5, 3},
                                                           {3, 0, 1, 2, 4, 5}, {3, 4, 5, 0, 1, 2},
                                                           {4, 5, 0, 1, 2, 3}, {4, 5, 3, 0, 1, 2}};
    for (const std::vector<int64_t>& epoch : epochs) CHECK(concatenations.count(epoch) == 1);
    CHECK(std::set<std::vector<int64_t>>(epochs.begin(), epochs.end()).size() > 2);
    CHECK(epochsOf({1, 1, true}, 7, 12) == epochs);  // same seed, same orders
    CHECK(epochsOf({1, 1, true}, 8, 12) != epochs);
  }
  SECTION("with a buffer, a permutation; resumed and unprefetched runs see the same batches") {
    Dataset files = indexedDataset(200);
    files.file_examples = {50, 30, 70, 40, 10};
    const ShuffleBuffer stream{16, 3, true};
    const auto uninterrupted = readSteps(files, 10, true, 5, 0, 60, 3, stream);
    for (size_t e = 0; e < 3; ++e) {
      std::set<int64_t> epoch;
      for (size_t s = 20 * e; s < 20 * (e + 1); ++s)
        epoch.insert(uninterrupted[s].begin(), uninterrupted[s].end());
      CHECK(epoch.size() == 200);
    }
    CHECK(readSteps(files, 10, true, 5, 27, 33, 0, stream) ==
          std::vector<std::vector<int64_t>>(uninterrupted.begin() + 27, uninterrupted.end()));
    // The files read in turn: the first 30 drawn come from three files,
    // not from the first one alone.
    CHECK(std::any_of(uninterrupted[0].begin(), uninterrupted[0].end(),
                      [](int64_t i) { return i >= 50; }));
    CHECK(readSteps(files, 10, true, 5, 0, 60, 3, {16}) != uninterrupted);
  }
  SECTION("files that do not add up to the set, or an interleave below one, are refused") {
    Dataset wrong = indexedDataset(6);
    wrong.file_examples = {3, 2};
    CHECK_THROWS_AS(InputPipeline(wrong, 2, true, 7, 0, 0, 0, 1, {}, {2, 2}),
                    std::invalid_argument);
    CHECK_THROWS_AS(InputPipeline(data, 2, true, 7, 0, 0, 0, 1, {}, {2, 0}), std::invalid_argument);
  }
}

TEST_CASE("a pipeline started at step s yields what an uninterrupted one did", "[pipeline]") {
  const Dataset data = indexedDataset(57);
  for (const bool shuffle : {true, false}) {
    const auto uninterrupted = readSteps(data, 8, shuffle, 99, 0, 40);
    for (const int64_t resume : {1, 6, 7, 13, 27}) {
      INFO("shuffle " << shuffle << ", resumed at step " << resume);
      const auto resumed = readSteps(data, 8, shuffle, 99, resume, 40 - resume);
      CHECK(resumed ==
            std::vector<std::vector<int64_t>>(uninterrupted.begin() + resume, uninterrupted.end()));
    }
  }
}

TEST_CASE("a seek goes on as a pipeline started at its step", "[pipeline]") {
  const Dataset data = indexedDataset(64);  // 16 steps of 4 an epoch
  const auto uninterrupted = readSteps(data, 4, /*shuffle=*/true, 9, 0, 60);
  for (int prefetch : {0, 2}) {
    for (int sharded : {0, 1}) {
      INFO("prefetch " << prefetch << ", dealt out among " << (sharded ? 2 : 1));
      const int shards = sharded ? 2 : 1;
      InputPipeline moved(data, 4, true, 9, 0, prefetch, shards - 1, shards);
      moved.next();
      // Ahead within the epoch, into the next ones, back (a pipeline may
      // be sought anywhere), and to where it stands.
      for (int64_t step : {3, 5, 7, 20, 2, 2, 29}) {
        moved.seek(step);
        InputPipeline started(data, 4, true, 9, step, prefetch, shards - 1, shards);
        for (int k = 0; k < 3; ++k) {
          const std::vector<int64_t> batch = exampleIndices(moved.next());
          CHECK(batch == exampleIndices(started.next()));
          if (!sharded) CHECK(batch == uninterrupted[size_t(step + k)]);
        }
      }
    }
  }
  InputPipeline pipeline(data, 4, true, 9, 0, 1);
  pipeline.next();
  CHECK_THROWS_AS(pipeline.seek(-1), std::invalid_argument);
  CHECK(exampleIndices(pipeline.next()) == uninterrupted[1]);  // unmoved by the refusal
}

TEST_CASE("a batch stays intact while the pipeline reads ahead", "[pipeline]") {
  const Dataset data = indexedDataset(64);
  InputPipeline pipeline(data, 4, true, 5, 0, 2);
  for (int step = 0; step < 40; ++step) {
    const Batch& batch = pipeline.next();
    const std::vector<int64_t> before = exampleIndices(batch);
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // the reader fills the ring
    CHECK(exampleIndices(batch) == before);
  }
}

TEST_CASE("the pipeline shuts down cleanly wherever the consumer stops", "[pipeline]") {
  const Dataset data = indexedDataset(64);
  { InputPipeline unused(data, 4, true, 5, 0, 4); }
  {
    InputPipeline once(data, 4, true, 5, 0, 4);
    once.next();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the ring is full, reader waits
  }
  {
    InputPipeline no_read_ahead(data, 4, false, 5, 3, 0);
    CHECK(exampleIndices(no_read_ahead.next()) == std::vector<int64_t>{12, 13, 14, 15});
    CHECK(exampleIndices(no_read_ahead.next()) == std::vector<int64_t>{16, 17, 18, 19});
  }
  CHECK_THROWS_AS(InputPipeline(data, 65, true, 5, 0, 4), std::invalid_argument);
  CHECK_THROWS_AS(InputPipeline(data, 0, true, 5, 0, 4), std::invalid_argument);
}

TEST_CASE("regression batches carry targets and no labels", "[pipeline]") {
  const Dataset data = makeSyntheticRegression({20, -1.0f, 1.0f, 0.0f}, 3);
  InputPipeline pipeline(data, 5, false, 1, 0, 2);
  const Batch& batch = pipeline.next();
  CHECK(batch.labels == nullptr);
  REQUIRE(batch.targets != nullptr);
  for (int j = 0; j < 5; ++j) CHECK(batch.targets[j] == Approx(batch.inputs[j] * batch.inputs[j]));
}

}  // namespace traind
