#include "core/checkpoint.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>

#include "core/error.h"
#include "core/json.h"
#include "core/layer_graph.h"
#include "core/model_spec.h"
#include "core/model_state.h"
#include "core/printable.h"
#include "core/safetensors.h"
#include "test/temp_dir.h"

namespace traind {
namespace {

namespace fs = std::filesystem;

std::string readFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void writeFile(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A safetensors file from its parts, for files our writer would never make.
std::string safetensorsBytes(const std::string& header, const std::string& data,
                             uint64_t declared_header_size) {
  std::string bytes(reinterpret_cast<const char*>(&declared_header_size), 8);
  return bytes + header + data;
}

std::string safetensorsBytes(const std::string& header, const std::string& data) {
  return safetensorsBytes(header, data, header.size());
}

std::string floatBytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

std::vector<float> iota(size_t n, float start) {
  std::vector<float> values(n);
  std::iota(values.begin(), values.end(), start);
  return values;
}

// A small model's tensors: a kernel, a bias, a scalar and an empty one.
struct SampleTensors {
  std::vector<float> kernel = iota(12, 0.5f);
  std::vector<float> bias = iota(4, -2.0f);
  float scalar = 3.25f;
  std::vector<TensorRef> refs() const {
    return {{"dense/kernel", {3, 4}, kernel.data()},
            {"dense/bias", {4}, bias.data()},
            {"step_scale", {}, &scalar},
            {"empty", {0, 5}, nullptr}};
  }
};

CheckpointManifest manifestAt(int64_t step) {
  CheckpointManifest manifest;
  manifest.global_step = step;
  manifest.model_name = "mnist \"mlp\"";
  manifest.architecture_hash = "0123abcd";
  manifest.created = "2024-05-01T12:00:00Z";
  return manifest;
}

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

// The regression model, initialised and saved into `dir`: its spec, its
// graph (which a ModelState of it refers to) and the checkpoint.
struct SavedRegression {
  ModelSpec spec = loadModelSpec(TRAIND_SOURCE_DIR "/configs/models/regression.yaml");
  LayerGraph graph = buildLayerGraph(spec);
  std::filesystem::path saved;

  explicit SavedRegression(const std::filesystem::path& dir) {
    ModelState state(spec, graph);
    state.initialize();
    saved = state.save(dir, 1).path;
  }
};
}  // namespace

TEST_CASE("the JSON reader takes JSON and only JSON", "[json]") {
  const JsonValue v = parseJson(
      " {\"a\": [1, -2.5e3, true, false, null], \"s\": \"q\\\"\\\\\\/\\n\\u00e9\\ud83d\\ude00\","
      " \"o\": {}} ",
      "t.json");
  REQUIRE(v.type == JsonValue::Type::Object);
  const JsonValue& a = *v.find("a");
  REQUIRE(a.items.size() == 5);
  CHECK(a.items[0].asInt64() == 1);
  CHECK(a.items[1].text == "-2.5e3");
  CHECK(!a.items[1].asInt64());
  CHECK(a.items[2].boolean);
  CHECK(a.items[4].type == JsonValue::Type::Null);
  CHECK(v.find("s")->text == "q\"\\/\n\xc3\xa9\xf0\x9f\x98\x80");
  CHECK(v.find("o")->members.empty());
  CHECK(v.find("missing") == nullptr);
  CHECK(!parseJson("99999999999999999999", "t").asInt64());
  CHECK(parseJson(jsonQuote("a\"b\\c\n\x01"), "t").text == "a\"b\\c\n\x01");
  // A path's bytes that are not UTF-8 (a status's checkpoint) are written as
  // printable() shows them: the reader refused the whole status.
  CHECK(parseJson(jsonQuote("/tmp/ck\xe9x-\xc3\xa9\xf0\x9f\x98\x80\xc3"), "t").text ==
        "/tmp/ck\\xe9x-\xc3\xa9\xf0\x9f\x98\x80\\xc3");

  auto error = [](const std::string& text) {
    try {
      parseJson(text, "t.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error("{\"a\": 1,\n \"a\": 2}") == "t.json:2:2: invalid JSON: duplicate key \"a\"");
  CHECK(error("{\"a\" 1}") ==
        "t.json:1:6: invalid JSON: expected ':' after an object key, got '1'");
  CHECK(error("[1, 2") ==
        "t.json:1:6: invalid JSON: expected ']' or ',' in an array, got end of text");
  CHECK(error("[01]") == "t.json:1:3: invalid JSON: numbers may not have leading zeros");
  CHECK(error("{} x") == "t.json:1:4: invalid JSON: unexpected 'x' after the JSON value");
  CHECK(error("[tru]") == "t.json:1:2: invalid JSON: expected a value, got 't'");
  CHECK(error("\"a\tb\"") ==
        "t.json:1:3: invalid JSON: control character byte 0x09 inside a string");
  CHECK(error("\"\\ud800\"") ==
        "t.json:1:8: invalid JSON: unpaired UTF-16 high surrogate in \\u escape");
  // Strings are UTF-8: well-formed sequences pass as they are, anything else
  // (a stray byte, an overlong form, a surrogate, a cut sequence) is refused.
  CHECK(parseJson("\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"", "t").text ==
        "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
  for (const char* bad : {"\"a\x91\"", "\"a\xc0\xaf\"", "\"a\xed\xa0\x80\"", "\"a\xe2\x82\"",
                          "\"a\xf4\x90\x80\x80\"", "\"a\xff\""}) {
    INFO(bad);
    CHECK_THAT(error(bad), Catch::StartsWith("t.json:1:3: invalid JSON: invalid UTF-8 at byte 0x"));
  }
  CHECK(error(std::string(100, '[')) == "t.json:1:66: invalid JSON: nested deeper than 64 levels");
  CHECK(error("") == "t.json:1:1: invalid JSON: expected a value, got end of text");
}

TEST_CASE("safetensors files round-trip tensors and metadata", "[safetensors]") {
  TempDir dir;
  const SampleTensors sample;
  writeSafetensors(dir / "m.safetensors", sample.refs(), {{"format", "np"}, {"note", "\"q\""}});

  const std::string bytes = readFile(dir / "m.safetensors");
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  CHECK((8 + header_size) % 8 == 0);
  CHECK(bytes.size() == 8 + header_size + (12 + 4 + 1) * 4);

  const SafetensorsReader reader(dir / "m.safetensors");
  CHECK(reader.names() ==
        std::vector<std::string>{"dense/bias", "dense/kernel", "empty", "step_scale"});
  CHECK(reader.metadata() ==
        std::map<std::string, std::string>{{"format", "np"}, {"note", "\"q\""}});
  CHECK(reader.contains("dense/kernel"));
  CHECK(!reader.contains("dense"));
  CHECK(reader.shape("dense/kernel") == Shape{3, 4});
  CHECK(reader.shape("step_scale") == Shape{});
  CHECK(reader.shape("empty") == Shape{0, 5});

  std::vector<float> kernel(12), bias(4);
  float scalar = 0;
  reader.read("dense/kernel", {3, 4}, kernel);
  reader.read("dense/bias", {4}, bias);
  reader.read("step_scale", {}, std::span<float>(&scalar, 1));
  reader.read("empty", {0, 5}, {});
  CHECK(kernel == sample.kernel);
  CHECK(bias == sample.bias);
  CHECK(scalar == 3.25f);

  const std::string file = (dir / "m.safetensors").string();
  CHECK_THROWS_MATCHES(
      reader.read("dense/kernel", {4, 3}, kernel), InputError,
      Catch::Message(file + ": tensor 'dense/kernel': expected shape [4, 3], found [3, 4]"));
  CHECK_THROWS_MATCHES(reader.read("dense/gamma", {4}, bias), InputError,
                       Catch::Message(file + ": no tensor 'dense/gamma'"));
  CHECK_THROWS_MATCHES(reader.shape("x"), InputError, Catch::Message(file + ": no tensor 'x'"));
  CHECK_THROWS_AS(reader.read("dense/bias", {4}, kernel), std::invalid_argument);

  writeSafetensors(dir / "plain.safetensors", {}, {});
  CHECK(readFile(dir / "plain.safetensors").substr(8) == "{}      ");
  CHECK(SafetensorsReader(dir / "plain.safetensors").names().empty());
  CHECK_THROWS_AS(writeSafetensors(dir / "dup", {{"a", {1}, &scalar}, {"a", {1}, &scalar}}, {}),
                  std::invalid_argument);
}

TEST_CASE("corrupt safetensors files are rejected naming the file and the fault", "[safetensors]") {
  TempDir dir;
  const std::string path = (dir / "bad.safetensors").string();
  auto open = [&](const std::string& bytes) {
    writeFile(path, bytes);
    return SafetensorsReader(path);
  };
  auto rejects = [&](const std::string& bytes, const std::string& message) {
    CHECK_THROWS_MATCHES(open(bytes), InputError, Catch::Message(path + ": " + message));
  };
  const std::string six = floatBytes({1, 2, 3, 4, 5, 6});
  const std::string good = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}";
  REQUIRE(open(safetensorsBytes(good, six)).shape("w") == Shape{2, 3});

  SECTION("missing or truncated") {
    CHECK_THROWS_MATCHES(SafetensorsReader(dir / "none"), InputError,
                         Catch::Message((dir / "none").string() + ": cannot open: no such file"));
    rejects(std::string("\x10\0\0", 3),
            "file is 3 bytes, too short for a safetensors header (8-byte size, then JSON)");
    const std::string whole = safetensorsBytes(good, six);
    rejects(whole.substr(0, 40), "header size 57 exceeds the 32 bytes that follow it");
    rejects(whole.substr(0, whole.size() - 4),
            "tensor 'w': data_offsets [0, 24] reach beyond the 20-byte data section");
  }
  SECTION("bytes after the last tensor") {
    rejects(safetensorsBytes(good, six + "junk"),
            "the data section has 4 bytes after its last tensor (28 bytes, the tensors end at 24)");
  }
  SECTION("a header size that lies") {
    rejects(safetensorsBytes(good, six, 1000),
            "header size 1000 exceeds the 81 bytes that follow it");
    rejects(safetensorsBytes(good, six, ~uint64_t(0)),
            "header size 18446744073709551615 exceeds the limit of 16777216 bytes");
  }
  SECTION("bad JSON") {
    CHECK_THROWS_MATCHES(
        open(safetensorsBytes("{\"w\":{\"dtype\":\"F32\",}}", "")), InputError,
        Catch::Message(path + " (JSON header):1:21: invalid JSON: expected a string key, got '}'"));
    rejects(safetensorsBytes("[1]", ""), "header: expected a JSON object, got an array");
    rejects(safetensorsBytes("{\"__metadata__\":{\"k\":1}}", ""),
            "__metadata__.k: expected a string, got a number");
  }
  SECTION("unsupported dtype") {
    rejects(safetensorsBytes("{\"h\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}",
                             floatBytes({0})),
            "tensor 'h': dtype F16 is not supported (traind reads F32 only)");
  }
  SECTION("bad shapes and offsets") {
    rejects(safetensorsBytes("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,-3],\"data_offsets\":[0,24]}}",
                             six),
            "tensor 'w': shape: expected non-negative integers, got -3");
    // No byte of the file reaches a message raw: an escape sequence could
    // clear the screen or forge a log line.
    rejects(
        safetensorsBytes(
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,\"\\u001b[2J\\r\"],\"data_offsets\":[0,24]}}",
            six),
        "tensor 'w': shape: expected non-negative integers, got \\x1b[2J\\x0d");
    rejects(safetensorsBytes("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3]}}", six),
            "tensor 'w': expected the fields dtype, shape and data_offsets");
    rejects(
        safetensorsBytes("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0]}}", six),
        "tensor 'w': data_offsets: expected [begin, end], two non-negative integers");
    rejects(safetensorsBytes("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[24,0]}}",
                             six),
            "tensor 'w': data_offsets [24, 0] end before they begin");
    rejects(safetensorsBytes("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[4,28]}}",
                             six),
            "tensor 'w': data_offsets [4, 28] reach beyond the 24-byte data section");
    rejects(safetensorsBytes("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,24]}}",
                             six),
            "tensor 'w': shape [2, 2] needs 16 bytes of F32 but data_offsets [0, 24] span 24");
    rejects(safetensorsBytes("{\"w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],"
                             "\"data_offsets\":[0,0]}}",
                             ""),
            "tensor 'w': shape [4611686018427387904, 4] needs more than 2^64 bytes of F32 but "
            "data_offsets [0, 0] span 0");
    rejects(safetensorsBytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
                             six),
            "tensors 'a' and 'b' overlap (data_offsets [0, 16] and [12, 20])");
    rejects(safetensorsBytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                             "\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[12,24]}}",
                             six),
            "a gap of 4 bytes between tensors 'a' and 'b' (data_offsets [0, 8] and [12, 24]): "
            "expected them packed, as the safetensors library requires");
    rejects(safetensorsBytes("{\"w\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[4,24]}}",
                             six),
            "the data section has 4 bytes before its first tensor 'w' (data_offsets [4, 24]): "
            "expected the tensors packed from its first byte");
  }
  SECTION("a header that would cost memory out of all proportion") {
    // 33 dimensions of 1: every byte accounted for, and a header of 50
    // million of them took 6 GB to read.
    std::string ones = "1";
    for (int i = 0; i < 32; ++i) ones += ",1";
    CHECK_THROWS_WITH(
        open(safetensorsBytes("{\"w\":{\"dtype\":\"F32\",\"shape\":[" + ones +
                                  "],\"data_offsets\":[0,4]}}",
                              floatBytes({1}))),
        Catch::Contains("invalid JSON: an array of more than 32 items (a shape has at most 32 "
                        "dimensions)"));
    // Values of two bytes each (nested arrays of 32 zeros): past one per 4
    // bytes of the header, refused as they are parsed.
    std::string zeros = "[0";
    for (int i = 1; i < 32; ++i) zeros += ",0";
    zeros += "]";
    std::string nested = "[" + zeros;
    for (int i = 1; i < 32; ++i) nested += "," + zeros;
    nested += "]";
    CHECK_THROWS_WITH(open(safetensorsBytes("{\"x\":" + nested + "}", "")),
                      Catch::Contains("values (a safetensors header holds at most one value per 4 "
                                      "bytes of its text)"));
    const std::string name(5000, 'n');
    CHECK_THROWS_WITH(
        open(safetensorsBytes("{\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[1],"
                                  "\"data_offsets\":[0,4]}}",
                              floatBytes({1}))),
        Catch::Contains(": a tensor name of 5000 bytes: expected at most 4096 ('nnnn"));
  }
  SECTION("values that are not finite") {
    std::vector<float> w(6);
    const SafetensorsReader nan = open(safetensorsBytes(
        good, floatBytes({1, 2, 3, std::numeric_limits<float>::quiet_NaN(), 5, 6})));
    CHECK_THROWS_MATCHES(nan.read("w", {2, 3}, w), InputError,
                         Catch::Message(path + ": tensor 'w': element 3 is NaN: expected finite "
                                               "values (the file is corrupt, or its writer's run "
                                               "diverged)"));
    const SafetensorsReader inf = open(safetensorsBytes(
        good, floatBytes({-std::numeric_limits<float>::infinity(), 2, 3, 4, 5, 6})));
    CHECK_THROWS_WITH(inf.read("w", {2, 3}, w), Catch::Contains("element 0 is infinite"));
  }
}

TEST_CASE("a safetensors header claiming huge tensors costs nothing until one is read",
          "[safetensors]") {
  // 1 TiB claimed in a sparse file: every byte is accounted for, none is on
  // disk. A reader that took the data section in as it opened ran out of
  // memory (std::bad_alloc, naming nothing).
  TempDir dir;
  const fs::path path = dir / "huge.safetensors";
  const uint64_t huge_bytes = uint64_t(1) << 40;
  const std::string header =
      "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
      "\"huge\":{\"dtype\":\"F32\",\"shape\":[262144,1048576],\"data_offsets\":[24," +
      std::to_string(24 + huge_bytes) + "]}}";
  writeFile(path, safetensorsBytes(header, floatBytes({1, 2, 3, 4, 5, 6})));
  fs::resize_file(path, 8 + header.size() + 24 + huge_bytes);

  const SafetensorsReader reader(path);
  CHECK(reader.shape("huge") == Shape{262144, 1048576});
  std::vector<float> w(6);
  reader.read("w", {2, 3}, w);
  CHECK(w == std::vector<float>{1, 2, 3, 4, 5, 6});
  // A caller reads into what its model needs: the shape is refused first.
  std::vector<float> kernel(784 * 300);
  CHECK_THROWS_MATCHES(reader.read("huge", {784, 300}, kernel), InputError,
                       Catch::Message(path.string() +
                                      ": tensor 'huge': expected shape [784, 300], found "
                                      "[262144, 1048576]"));

  // Cut short after it was opened (another writer's file), a read says so.
  fs::resize_file(path, 8 + header.size() + 10);
  CHECK_THROWS_MATCHES(
      reader.read("w", {2, 3}, w), InputError,
      Catch::Message(path.string() + ": file ended early while reading it (is it being written?)"));
}

TEST_CASE("what the safetensors writer writes the reader reads: no header over its limits",
          "[safetensors]") {
  TempDir dir;
  const float value = 1.0f;
  // Names of 4000 bytes: 4,300 tensors make a header over 16 MiB.
  std::vector<TensorRef> tensors;
  for (int i = 0; i < 4300; ++i)
    tensors.push_back({std::to_string(i) + std::string(4000, 'x'), {1}, &value});
  CHECK_THROWS_WITH(writeSafetensors(dir / "big.safetensors", tensors, {}),
                    Catch::Contains("4300 tensors make a safetensors header of") &&
                        Catch::Contains("where a checkpoint's reader takes at most 16777216"));
  CHECK_FALSE(fs::exists(dir / "big.safetensors"));  // refused before the file is made
  tensors.resize(100);
  writeSafetensors(dir / "fits.safetensors", tensors, {});
  CHECK(SafetensorsReader(dir / "fits.safetensors").names().size() == 100);
  CHECK_THROWS_WITH(
      safetensorsHeader({{std::string(4097, 'n'), {1}, &value}}, {}),
      Catch::Contains("a name of 4097 bytes and 1 dimensions, where a checkpoint's reader takes "
                      "at most 4096 and 32"));
  CHECK_THROWS_WITH(safetensorsHeader({{"deep", Shape(33, 1), &value}}, {}),
                    Catch::Contains("33 dimensions"));
}

TEST_CASE("a shape whose dimensions multiply past int64 is refused, though a 0 makes it empty",
          "[safetensors]") {
  TempDir dir;
  const fs::path path = dir / "lying.safetensors";
  writeFile(path, safetensorsBytes("{\"w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4,0],"
                                   "\"data_offsets\":[0,0]}}",
                                   ""));
  CHECK_THROWS_WITH(SafetensorsReader(path),
                    Catch::Contains("shape [4611686018427387904, 4, 0]: its dimensions multiply "
                                    "past 2^63"));
}

TEST_CASE("a file replaced durably is whole or not there, no part of it left beside",
          "[checkpoint]") {
  TempDir dir;
  replaceFileDurably(dir / "latest", "ckpt-0000000001\n");
  replaceFileDurably(dir / "latest", "ckpt-0000000002\n");
  CHECK(readFile(dir / "latest") == "ckpt-0000000002\n");
  // A place the file cannot take (a directory that holds a file): the
  // rename fails after the whole file was written beside it.
  dir.write("taken/inside", "x");
  CHECK_THROWS_AS(replaceFileDurably(dir / "taken", "bytes"), std::system_error);
  CHECK(entries(dir.path()) == std::vector<std::string>{"latest", "taken"});
}

TEST_CASE("a checkpoint is saved with its manifest and named by latest", "[checkpoint]") {
  TempDir dir;
  const SampleTensors sample;
  const fs::path checkpoints = dir / "run" / "checkpoints";  // created on the first save
  CHECK(!findLatestCheckpoint(checkpoints));

  const fs::path saved = saveCheckpoint(checkpoints, manifestAt(1200), sample.refs(), 5).path;
  CHECK(saved == checkpoints / "ckpt-0000001200");
  CHECK(checkpointDirName(12345678901) == "ckpt-12345678901");
  CHECK(readFile(checkpoints / "latest") == "ckpt-0000001200\n");
  CHECK(entries(checkpoints) == std::vector<std::string>{"ckpt-0000001200", "latest"});
  CHECK(entries(saved) == std::vector<std::string>{"manifest.json", "model.safetensors"});
  CHECK(findLatestCheckpoint(checkpoints) == saved);
  CHECK(resolveCheckpoint(checkpoints) == saved);
  CHECK(resolveCheckpoint(saved) == saved);

  const CheckpointManifest manifest = readManifest(saved);
  CHECK(manifest.global_step == 1200);
  CHECK(manifest.model_name == "mnist \"mlp\"");
  CHECK(manifest.architecture_hash == "0123abcd");
  CHECK(manifest.created == "2024-05-01T12:00:00Z");
  CHECK(manifest.tensors_file == "model.safetensors");

  const SafetensorsReader reader(saved / "model.safetensors");
  std::vector<float> kernel(12);
  reader.read("dense/kernel", {3, 4}, kernel);
  CHECK(kernel == sample.kernel);
  CHECK(reader.metadata().at("global_step") == "1200");
}

TEST_CASE("saving keeps the newest checkpoints and cleans up after crashes", "[checkpoint]") {
  TempDir dir;
  const SampleTensors sample;
  const fs::path checkpoints = dir / "checkpoints";
  for (int64_t step : {100, 200, 300})
    saveCheckpoint(checkpoints, manifestAt(step), sample.refs(), 2);
  CHECK(entries(checkpoints) ==
        std::vector<std::string>{"ckpt-0000000200", "ckpt-0000000300", "latest"});
  CHECK(findLatestCheckpoint(checkpoints) == checkpoints / "ckpt-0000000300");

  SECTION("a crash mid-save leaves a temp dir that is ignored, then removed") {
    fs::create_directories(checkpoints / ".tmp-ckpt-0000000400.999");
    writeFile(checkpoints / ".tmp-ckpt-0000000400.999" / "model.safetensors", "half");
    writeFile(checkpoints / ".tmp-latest.999", "ckpt-00000");
    CHECK(findLatestCheckpoint(checkpoints) == checkpoints / "ckpt-0000000300");
    saveCheckpoint(checkpoints, manifestAt(500), sample.refs(), 2);
    CHECK(entries(checkpoints) ==
          std::vector<std::string>{"ckpt-0000000300", "ckpt-0000000500", "latest"});
  }
  SECTION("a name like a leftover's that no save writes is the user's, and stays") {
    // A summary directory given as .tmp-tb in the checkpoint directory.
    for (const char* name :
         {".tmp-tb", ".tmp-ckpt-0000000400", ".tmp-latest.9x", ".tmp-probe.", ".tmp-ckpt-4x.12"})
      fs::create_directories(checkpoints / name);
    // Another start's probe, which it may be making now.
    fs::create_directories(checkpoints / ".tmp-probe.77");
    saveCheckpoint(checkpoints, manifestAt(500), sample.refs(), 2);
    CHECK(entries(checkpoints) ==
          std::vector<std::string>{".tmp-ckpt-0000000400", ".tmp-ckpt-4x.12", ".tmp-latest.9x",
                                   ".tmp-probe.", ".tmp-probe.77", ".tmp-tb", "ckpt-0000000300",
                                   "ckpt-0000000500", "latest"});
  }
  SECTION("an entry that goes as it is listed does not stop the pruning") {
    // A link to nowhere named as a checkpoint: its status fails as the
    // listing reads it, as an entry deleted meanwhile does.
    fs::create_symlink(dir / "gone", checkpoints / "ckpt-0000000150");
    const SavedCheckpoint saved = saveCheckpoint(checkpoints, manifestAt(500), sample.refs(), 2);
    CHECK(saved.not_pruned.empty());
    CHECK(entries(checkpoints) == std::vector<std::string>{"ckpt-0000000150", "ckpt-0000000300",
                                                           "ckpt-0000000500", "latest"});
  }
  SECTION("a latest that cannot be written takes the new checkpoint back out") {
    // A full disk as `latest` is written; a directory in the way of its
    // temp file here.
    const fs::path in_the_way = checkpoints / (".tmp-latest." + std::to_string(::getpid()));
    fs::create_directories(in_the_way / "x");
    CHECK_THROWS(saveCheckpoint(checkpoints, manifestAt(400), sample.refs(), 2));
    CHECK(entries(checkpoints) ==
          std::vector<std::string>{".tmp-latest." + std::to_string(::getpid()), "ckpt-0000000200",
                                   "ckpt-0000000300", "latest"});
    CHECK(findLatestCheckpoint(checkpoints) == checkpoints / "ckpt-0000000300");
    // A step saved before stays: `latest` may name it.
    CHECK_THROWS(saveCheckpoint(checkpoints, manifestAt(300), sample.refs(), 2));
    CHECK(fs::exists(checkpoints / "ckpt-0000000300" / "model.safetensors"));
  }
  SECTION("an old checkpoint that cannot be deleted leaves the save standing, and is said") {
    // Immutable (root, on a file system that has the flag), or in a
    // directory this user may not write in.
    const fs::path old = checkpoints / "ckpt-0000000200";
    const fs::path file = old / "model.safetensors";
    const auto immutable = [&](bool on) {
      const int fd = ::open(file.c_str(), O_RDONLY);
      int flags = 0;
      const bool done = fd >= 0 && ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0 &&
                        (flags = on ? flags | FS_IMMUTABLE_FL : flags & ~FS_IMMUTABLE_FL,
                         ::ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0);
      if (fd >= 0) ::close(fd);
      return done;
    };
    const bool root = ::geteuid() == 0;
    if (root ? !immutable(true) : ::chmod(old.c_str(), 0500) != 0) {
      WARN("cannot make a checkpoint undeletable here: not checked");
      return;
    }
    // Undone whatever the save does: an immutable file would outlive the test.
    const auto undo = [&] { root ? void(immutable(false)) : void(::chmod(old.c_str(), 0700)); };
    SavedCheckpoint saved;
    try {
      saved = saveCheckpoint(checkpoints, manifestAt(400), sample.refs(), 2);
    } catch (...) {
      undo();
      throw;
    }
    undo();
    CHECK(saved.path == checkpoints / "ckpt-0000000400");
    CHECK(findLatestCheckpoint(checkpoints) == saved.path);
    REQUIRE(saved.not_pruned.size() == 1);
    CHECK_THAT(saved.not_pruned[0], Catch::StartsWith("ckpt-0000000200: "));
    CHECK_THAT(
        notPrunedWarning(saved, 2),
        Catch::StartsWith("checkpoint.keep is 2, but old checkpoints or leftovers of interrupted "
                          "saves in " +
                          checkpoints.string() + " could not be deleted: ckpt-0000000200: "));
    // The next save deletes it.
    CHECK(saveCheckpoint(checkpoints, manifestAt(500), sample.refs(), 2).not_pruned.empty());
    CHECK(!fs::exists(old));
  }
  SECTION("keep <= 0 keeps them all") {
    saveCheckpoint(checkpoints, manifestAt(400), sample.refs(), 0);
    CHECK(entries(checkpoints).size() == 4);
  }
  SECTION("after latest was set back, a run keeps its own newest, and leaves later steps be") {
    // A run resumed from an earlier checkpoint: 200 and 300 are of the run
    // it abandoned. They neither count towards its `keep` nor are deleted.
    saveCheckpoint(checkpoints, manifestAt(50), sample.refs(), 2);
    CHECK(findLatestCheckpoint(checkpoints) == checkpoints / "ckpt-0000000050");
    saveCheckpoint(checkpoints, manifestAt(60), sample.refs(), 2);
    saveCheckpoint(checkpoints, manifestAt(70), sample.refs(), 2);
    CHECK(entries(checkpoints) == std::vector<std::string>{"ckpt-0000000060", "ckpt-0000000070",
                                                           "ckpt-0000000200", "ckpt-0000000300",
                                                           "latest"});
    CHECK(findLatestCheckpoint(checkpoints) == checkpoints / "ckpt-0000000070");
  }
  SECTION("saving a step again replaces it in place") {
    SampleTensors changed;
    changed.kernel[0] = 42.0f;
    CheckpointManifest manifest = manifestAt(300);
    manifest.created = "2024-05-02T00:00:00Z";
    saveCheckpoint(checkpoints, manifest, changed.refs(), 2);
    CHECK(entries(checkpoints) ==
          std::vector<std::string>{"ckpt-0000000200", "ckpt-0000000300", "latest"});
    CHECK(readManifest(checkpoints / "ckpt-0000000300").created == "2024-05-02T00:00:00Z");
    std::vector<float> kernel(12);
    SafetensorsReader(checkpoints / "ckpt-0000000300" / "model.safetensors")
        .read("dense/kernel", {3, 4}, kernel);
    CHECK(kernel[0] == 42.0f);
  }
}

TEST_CASE("a run's checkpoint directory is held once, and taken again when it vanishes",
          "[checkpoint]") {
  TempDir tmp;
  const fs::path dir = tmp.path() / "ckpt";
  const SourceLocation where{"--checkpoint-dir"};
  CheckpointDirLock lock = createCheckpointDir(dir, where);
  CHECK(readFile(dir / ".lock") == std::to_string(getpid()) + "\n");
  CHECK_THROWS_WITH(
      createCheckpointDir(dir, where),
      Catch::Contains("checkpoint directory " + dir.string() + " is in use by another run (pid " +
                      std::to_string(getpid()) + ")"));
  CHECK_FALSE(lock.retakeIfLost());
  // Deleted under the run (a /tmp cleaner): taken again at the next save.
  fs::remove_all(dir);
  const std::optional<std::string> retaken = lock.retakeIfLost();
  REQUIRE(retaken);
  CHECK_THAT(*retaken, Catch::Contains("was deleted or moved while this run saved into it"));
  CHECK(fs::exists(dir / ".lock"));
  CHECK_FALSE(lock.retakeIfLost());
  CHECK_THROWS_WITH(createCheckpointDir(dir, where), Catch::Contains("is in use by another run"));
  // Deleted, then taken by another run first: this one may not save there.
  fs::remove_all(dir);
  const CheckpointDirLock other = createCheckpointDir(dir, where);
  // A failed save (exit 1), not bad input; and the next save fails again.
  CHECK_THROWS_WITH(lock.retakeIfLost(),
                    Catch::StartsWith("no checkpoint written into " + dir.string() +
                                      ": it was deleted or moved while this run saved into it, "
                                      "and cannot be taken again") &&
                        Catch::Contains("is in use by another run"));
  CHECK_THROWS_WITH(lock.retakeIfLost(), Catch::Contains("is in use by another run"));
}

TEST_CASE("a checkpoint directory refused as it is made leaves nothing made for it",
          "[checkpoint]") {
  TempDir tmp;
  const SourceLocation where{"--checkpoint-dir"};
  // A name too long for the file system, after its parent was made.
  CHECK_THROWS_WITH(createCheckpointDir(tmp.path() / "new" / std::string(300, 'n'), where),
                    Catch::Contains("cannot create it"));
  CHECK_FALSE(fs::exists(tmp.path() / "new"));
  // A path so long that a save's files would pass PATH_MAX (4096) where
  // the directory does not: refused as it is made, not at the first save.
  fs::path deep = tmp.path() / "deep";
  while (deep.string().size() < 4050)
    deep /= std::string(std::min<size_t>(200, 4050 - deep.string().size()), 'd');
  CHECK_THROWS_WITH(createCheckpointDir(deep, where),
                    Catch::Contains("cannot write in it: File name too long"));
  CHECK_FALSE(fs::exists(tmp.path() / "deep"));
}

TEST_CASE("a run that saved nothing leaves nothing in its checkpoint directory", "[checkpoint]") {
  TempDir tmp;
  const SourceLocation where{"--checkpoint-dir"};
  const fs::path dir = tmp.path() / "made" / "ckpt";
  // Made for the run and unused: gone with the run, and the parent made for it.
  { const CheckpointDirLock lock = createCheckpointDir(dir, where); }
  CHECK_FALSE(fs::exists(tmp.path() / "made"));
  // There before the run: it stays, without the .lock.
  fs::create_directories(dir);
  { const CheckpointDirLock lock = createCheckpointDir(dir, where); }
  CHECK(fs::is_directory(dir));
  CHECK(fs::is_empty(dir));
  // Saved into: the checkpoint and the .lock stay, though the lock does not.
  fs::remove_all(tmp.path() / "made");
  {
    const CheckpointDirLock lock = createCheckpointDir(dir, where);
    saveCheckpoint(dir, manifestAt(3), SampleTensors().refs(), 2);
  }
  CHECK(fs::exists(dir / checkpointDirName(3)));
  CHECK(fs::exists(dir / ".lock"));
  { const CheckpointDirLock again = createCheckpointDir(dir, where); }
  CHECK(fs::exists(dir / ".lock"));
  // A file of someone else's in it: nothing of the directory is traind's to remove.
  fs::remove_all(tmp.path() / "made");
  {
    const CheckpointDirLock lock = createCheckpointDir(dir, where);
    writeFile(dir / "notes.txt", "mine");
  }
  CHECK(fs::exists(dir / ".lock"));
  CHECK(readFile(dir / "notes.txt") == "mine");
}

TEST_CASE("a checkpoint directory whose .lock is a link or no plain file is refused, untouched",
          "[checkpoint]") {
  TempDir tmp;
  const fs::path dir = tmp.path() / "ckpt";
  const SourceLocation where{"--checkpoint-dir"};
  fs::create_directories(dir);
  const fs::path victim = tmp.path() / "victim";
  writeFile(victim, "important content");
  fs::create_symlink(victim, dir / ".lock");
  CHECK_THROWS_WITH(createCheckpointDir(dir, where),
                    Catch::Contains("cannot open .lock: it is a symbolic link; remove it"));
  CHECK(readFile(victim) == "important content");
  fs::remove(dir / ".lock");
  fs::create_symlink(tmp.path() / "dangling", dir / ".lock");
  CHECK_THROWS_AS(createCheckpointDir(dir, where), InputError);
  CHECK_FALSE(fs::exists(tmp.path() / "dangling"));
  fs::remove(dir / ".lock");
  REQUIRE(mkfifo((dir / ".lock").c_str(), 0644) == 0);
  CHECK_THROWS_WITH(createCheckpointDir(dir, where),
                    Catch::Contains("cannot open .lock: it is not a plain file"));
}

TEST_CASE("a checkpoint directory without room for a checkpoint is said at the start",
          "[checkpoint]") {
  TempDir tmp;
  CHECK_FALSE(checkpointRoomShortfall(tmp.path(), 1024));
  const int64_t exabyte = int64_t(1) << 60;  // no disk here has it
  const std::optional<std::string> shortfall = checkpointRoomShortfall(tmp.path(), exabyte);
  REQUIRE(shortfall);
  CHECK_THAT(*shortfall,
             Catch::StartsWith("checkpoint directory " + tmp.path().string() + " has ") &&
                 Catch::EndsWith(" free, and a checkpoint of this model takes "
                                 "1048576.0 TiB: the first save will fail unless "
                                 "room is made"));
  CHECK_FALSE(checkpointRoomShortfall(tmp.path() / "missing", exabyte));  // cannot say
}

TEST_CASE("one checkpoint given as the directory of checkpoints is refused, untouched",
          "[checkpoint]") {
  TempDir tmp;
  const SampleTensors sample;
  const fs::path saved = saveCheckpoint(tmp.path() / "ckpt", manifestAt(7), sample.refs(), 3).path;
  for (const fs::path& given : {saved, saved / ""}) {
    CHECK_THROWS_WITH(
        createCheckpointDir(given, SourceLocation{"--checkpoint-dir"}),
        Catch::Contains("it is one checkpoint (it holds manifest.json), not a directory of them: "
                        "give the directory it is in, " +
                        fs::absolute(tmp.path() / "ckpt").lexically_normal().string() +
                        ", to resume from that directory's latest checkpoint"));
  }
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(saved)) left.push_back(entry.path().filename());
  std::sort(left.begin(), left.end());
  CHECK(left == std::vector<std::string>{"manifest.json", "model.safetensors"});
}

TEST_CASE("a latest that names a missing or incomplete checkpoint is an error, none is the newest",
          "[checkpoint]") {
  TempDir dir;
  const SampleTensors sample;
  const fs::path checkpoints = dir / "checkpoints";
  const fs::path saved = saveCheckpoint(checkpoints, manifestAt(7), sample.refs(), 3).path;
  const std::string latest = (checkpoints / "latest").string();

  SECTION("missing") {
    fs::remove_all(saved);
    CHECK_THROWS_MATCHES(findLatestCheckpoint(checkpoints), InputError,
                         Catch::Message(latest + " names ckpt-0000000007, which does not exist"));
  }
  SECTION("itself") {
    writeFile(latest, "latest\n");
    CHECK_THROWS_MATCHES(
        findLatestCheckpoint(checkpoints), InputError,
        Catch::Message(latest + " names latest, which is not a checkpoint's directory"));
  }
  SECTION("a long name, echoed no longer than 200 bytes") {
    writeFile(latest, std::string(100000, 'c') + "\n");
    CHECK_THROWS_MATCHES(findLatestCheckpoint(checkpoints), InputError,
                         Catch::Message(latest + " names " + std::string(200, 'c') +
                                        "... (99800 bytes more), which does not exist"));
  }
  SECTION("a FIFO, whose size cannot be taken") {
    fs::remove(latest);
    REQUIRE(mkfifo(latest.c_str(), 0644) == 0);
    CHECK_THROWS_MATCHES(
        findLatestCheckpoint(checkpoints), InputError,
        Catch::Message(latest + ": cannot read: expected a regular file, got a FIFO"));
  }
  SECTION("no manifest") {
    fs::remove(saved / "manifest.json");
    CHECK_THROWS_MATCHES(
        findLatestCheckpoint(checkpoints), InputError,
        Catch::Message(saved.string() + ": incomplete checkpoint: no manifest.json"));
  }
  SECTION("no tensors") {
    fs::remove(saved / "model.safetensors");
    CHECK_THROWS_MATCHES(
        resolveCheckpoint(saved), InputError,
        Catch::Message(saved.string() + ": incomplete checkpoint: no model.safetensors"));
  }
  SECTION("tensors that are no plain file") {
    fs::remove(saved / "model.safetensors");
    fs::create_directory(saved / "model.safetensors");
    CHECK_THROWS_MATCHES(
        resolveCheckpoint(saved), InputError,
        Catch::Message(saved.string() +
                       ": corrupt checkpoint: model.safetensors is not a plain file"));
  }
  SECTION("a path instead of a name") {
    writeFile(checkpoints / "latest", "../../etc\n");
    CHECK_THROWS_MATCHES(
        findLatestCheckpoint(checkpoints), InputError,
        Catch::Message(latest + ": expected the name of a checkpoint directory, got '../../etc'"));
  }
  SECTION("no latest: the checkpoint of the highest step, not a fresh start nor an older one") {
    saveCheckpoint(checkpoints, manifestAt(12), sample.refs(), 3);
    saveCheckpoint(checkpoints, manifestAt(9), sample.refs(), 3);
    fs::remove(checkpoints / "latest");
    CHECK(findLatestCheckpoint(checkpoints) == checkpoints / "ckpt-0000000012");
    CHECK(resolveCheckpoint(checkpoints) == checkpoints / "ckpt-0000000012");
    // Damaged: refused, not passed over for ckpt-9 (steps 10-12 would be gone unsaid).
    fs::remove(checkpoints / "ckpt-0000000012" / "model.safetensors");
    CHECK_THROWS_MATCHES(
        findLatestCheckpoint(checkpoints), InputError,
        Catch::Message((checkpoints / "ckpt-0000000012").string() +
                       ": incomplete checkpoint: no model.safetensors (" + checkpoints.string() +
                       " has no latest file: this is its checkpoint of the highest step; remove "
                       "it to resume from the one before it)"));
    fs::remove_all(checkpoints / "ckpt-0000000012");
    CHECK(findLatestCheckpoint(checkpoints) == checkpoints / "ckpt-0000000009");
    // A link whose target is gone (its disk unmounted) is refused too: a
    // fresh start would later save over the checkpoint it names.
    fs::create_directory_symlink(dir / "unmounted" / "ckpt-0000000012",
                                 checkpoints / "ckpt-0000000012");
    CHECK_THROWS_MATCHES(
        findLatestCheckpoint(checkpoints), InputError,
        Catch::Message((checkpoints / "ckpt-0000000012").string() +
                       ": not a checkpoint's directory (a link whose target is gone) (" +
                       checkpoints.string() +
                       " has no latest file: this is its checkpoint of the highest step; remove "
                       "it to resume from the one before it)"));
  }
  SECTION("no latest, and the only checkpoint a link to nowhere") {
    fs::remove(checkpoints / "latest");
    fs::remove_all(saved);
    fs::create_directory_symlink(dir / "unmounted" / "ckpt-0000000012",
                                 checkpoints / "ckpt-0000000012");
    CHECK_THROWS_WITH(findLatestCheckpoint(checkpoints),
                      Catch::EndsWith("this is its checkpoint of the highest step; remove it to "
                                      "start afresh)"));
  }
  SECTION("no latest, no checkpoint") {
    fs::remove(checkpoints / "latest");
    fs::remove_all(saved);
    CHECK(!findLatestCheckpoint(checkpoints));
    CHECK_THROWS_MATCHES(
        resolveCheckpoint(checkpoints), InputError,
        Catch::Message(checkpoints.string() + ": neither a checkpoint (no manifest.json) nor a "
                                              "checkpoint directory (no latest file, no ckpt-N)"));
    // TensorFlow's files without its `checkpoint` file: its prefix is said.
    writeFile(checkpoints / "model.ckpt-200.index", "");
    CHECK_THROWS_WITH(resolveCheckpoint(checkpoints),
                      Catch::EndsWith("(no latest file, no ckpt-N); it holds TensorFlow's "
                                      "model.ckpt-200.index, a TensorFlow checkpoint, whose "
                                      "prefix is " +
                                      (checkpoints / "model.ckpt-200").string() +
                                      ": trainctl import converts it, init_from and trainctl "
                                      "inspect take it as it is"));
    // Named by its prefix or by one of its files (trainctl eval, export).
    CHECK_THROWS_MATCHES(resolveCheckpoint(checkpoints / "model.ckpt-200"), InputError,
                         Catch::Message((checkpoints / "model.ckpt-200").string() +
                                        ": a TensorFlow checkpoint's prefix (model.ckpt-200.index "
                                        "is there), not traind's: trainctl import converts it, "
                                        "init_from and trainctl inspect take it as it is"));
    writeFile(checkpoints / "model.ckpt-200.data-00000-of-00001", "");
    for (const char* file : {"model.ckpt-200.index", "model.ckpt-200.data-00000-of-00001"})
      CHECK_THROWS_WITH(resolveCheckpoint(checkpoints / file),
                        Catch::EndsWith("(with a latest file); it looks like a file of the "
                                        "TensorFlow checkpoint " +
                                        (checkpoints / "model.ckpt-200").string() +
                                        ": trainctl import converts it, init_from and trainctl "
                                        "inspect take it as it is"));
    CHECK_THROWS_MATCHES(resolveCheckpoint(dir / "elsewhere"), InputError,
                         Catch::Message((dir / "elsewhere").string() +
                                        ": no such checkpoint or checkpoint directory"));
    writeFile(dir / "model.safetensors", "x");
    CHECK_THROWS_MATCHES(resolveCheckpoint(dir / "model.safetensors"), InputError,
                         Catch::Message((dir / "model.safetensors").string() +
                                        ": a file, not a checkpoint: expected a checkpoint's "
                                        "directory (ckpt-N) or a checkpoint directory (with a "
                                        "latest file)"));
  }
}

TEST_CASE("a checkpoint pruned as it is read is read again from the directory's latest",
          "[checkpoint]") {
  TempDir dir;
  const SampleTensors sample;
  const fs::path checkpoints = dir / "checkpoints";
  saveCheckpoint(checkpoints, manifestAt(10), sample.refs(), 1);
  // The run writing the directory saves step 11 with keep 1 while step 10
  // is being read: the read fails, its checkpoint gone.
  std::vector<fs::path> read;
  const fs::path got = readResolvedCheckpoint(checkpoints, [&](const fs::path& checkpoint) {
    read.push_back(checkpoint);
    if (read.size() == 1) {
      saveCheckpoint(checkpoints, manifestAt(11), sample.refs(), 1);
      readManifest(checkpoint);
    }
  });
  CHECK(read ==
        std::vector<fs::path>{checkpoints / "ckpt-0000000010", checkpoints / "ckpt-0000000011"});
  CHECK(got == checkpoints / "ckpt-0000000011");

  // Pruned every time: said so.
  int64_t step = 11;
  CHECK_THROWS_WITH(readResolvedCheckpoint(checkpoints,
                                           [&](const fs::path& checkpoint) {
                                             saveCheckpoint(checkpoints, manifestAt(++step),
                                                            sample.refs(), 1);
                                             readManifest(checkpoint);
                                           }),
                    Catch::EndsWith(": removed while it was read, 3 times: the run writing " +
                                    checkpoints.string() +
                                    " keeps too few checkpoints for them to be read "
                                    "(checkpoint.keep)"));
  // A checkpoint named itself, or one still there, fails as it is.
  CHECK_THROWS_WITH(readResolvedCheckpoint(checkpoints / "ckpt-0000000014",
                                           [](const fs::path&) { throw InputError("bad"); }),
                    "bad");
}

TEST_CASE("readManifest checks every field", "[checkpoint]") {
  TempDir dir;
  const std::string path = (dir / "manifest.json").string();
  auto rejects = [&](const std::string& json, const std::string& message) {
    writeFile(path, json);
    CHECK_THROWS_MATCHES(readManifest(dir.path()), InputError,
                         Catch::Message(path + ": " + message));
  };
  const std::string tail =
      "\"model_name\": \"m\", \"architecture_hash\": \"h\", \"created\": \"c\", "
      "\"tensors_file\": \"model.safetensors\"}";
  writeFile(path, "{\"format_version\": 1, \"global_step\": 5, " + tail);
  CHECK(readManifest(dir.path()).global_step == 5);

  rejects("{\"format_version\": 1, \"global_step\": \"5\", " + tail,
          "global_step: expected a number, got a string");
  rejects("{\"format_version\": 1, \"global_step\": -5, " + tail,
          "global_step: expected a non-negative integer, got -5");
  rejects("{\"format_version\": 1, \"global_step\": 5.5, " + tail,
          "global_step: expected a non-negative integer, got 5.5");
  rejects("{\"format_version\": 1, \"global_step\": 9223372036854775807, " + tail,
          "global_step: expected at most 2^53 (9007199254740992), got 9223372036854775807");
  // Past int64 too: too large, not another kind of number.
  rejects("{\"format_version\": 1, \"global_step\": 9223372036854775813, " + tail,
          "global_step: expected at most 2^53 (9007199254740992), got 9223372036854775813");
  rejects("{\"format_version\": 2, \"global_step\": 5, " + tail,
          "format_version: expected 1, got 2 (written by another traind version)");
  rejects("{\"format_version\": 1, " + tail, "global_step: missing");
  rejects(
      "{\"format_version\": 1, \"global_step\": 5, \"model_name\": [], "
      "\"architecture_hash\": \"h\", \"created\": \"c\", \"tensors_file\": \"m\"}",
      "model_name: expected a string, got an array");
  rejects(
      "{\"format_version\": 1, \"global_step\": 5, \"model_name\": \"m\", "
      "\"architecture_hash\": \"h\", \"created\": \"c\", \"tensors_file\": \"../x\"}",
      "tensors_file: expected a file name in the checkpoint directory, got '../x'");
  rejects("[]", "expected a JSON object, got an array");
  writeFile(path, "{\"format_version\": 1,\n  \"global_step\": 5,\n}");
  CHECK_THROWS_MATCHES(readManifest(dir.path()), InputError,
                       Catch::Message(path + ":3:1: invalid JSON: expected a string key, got '}'"));
}

TEST_CASE("a diverged state is not saved: latest stays the last good checkpoint", "[checkpoint]") {
  TempDir dir;
  const ModelSpec spec = loadModelSpec(TRAIND_SOURCE_DIR "/configs/models/regression.yaml");
  const LayerGraph graph = buildLayerGraph(spec);
  ModelState state(spec, graph);
  state.initialize();
  const std::filesystem::path good = state.save(dir.path(), 5).path;
  state.parameters().data()[0] = std::nanf("");  // the first variable's first value
  state.setGlobalStep(7);
  try {
    state.save(dir.path(), 5);
    FAIL("a state holding a NaN was saved");
  } catch (const std::runtime_error& e) {
    CHECK_THAT(e.what(), Catch::Contains("step 7: no checkpoint written: '") &&
                             Catch::Contains("holds a value that is not finite"));
  }
  CHECK(findLatestCheckpoint(dir.path()) == good);
  CHECK_FALSE(std::filesystem::exists(dir.path() / "ckpt-0000000007"));
}

TEST_CASE("a sum of squares below 0 in a checkpoint is refused as corrupt", "[checkpoint]") {
  ModelSpec spec = loadModelSpec(TRAIND_SOURCE_DIR "/configs/models/regression.yaml");
  const auto [kind, slot] =
      GENERATE(std::pair{OptimizerSpec::Kind::Adam, std::string("v")},
               std::pair{OptimizerSpec::Kind::Adagrad, std::string("accumulator")},
               std::pair{OptimizerSpec::Kind::RmsProp, std::string("rms")});
  spec.optimizer.kind = kind;
  const LayerGraph graph = buildLayerGraph(spec);
  TempDir dir;
  ModelState state(spec, graph);
  state.initialize();
  const std::vector<std::string>& slots = state.optimizer().slotNames();
  const size_t s = size_t(std::find(slots.begin(), slots.end(), slot) - slots.begin());
  REQUIRE(s < slots.size());
  const VariableView& kernel = state.layout().views().front();  // more than 1 value
  state.optimizer().slot(s).view(kernel)[1] = -0.001f;          // finite: save() writes it
  const std::filesystem::path saved = state.save(dir.path(), 1).path;
  ModelState target(spec, graph);
  CHECK_THROWS_MATCHES(
      target.restore(saved), InputError,
      Catch::Message((saved / "model.safetensors").string() + ": tensor '" + kernel.name + "/" +
                     slot +
                     "': element 1 is -0.001: expected values >= 0 (a sum of squares; "
                     "the file is corrupt)"));
}

TEST_CASE("rmsprop's state is no momentum optimizer's, though both name a slot 'momentum'",
          "[checkpoint]") {
  using Kind = OptimizerSpec::Kind;
  ModelSpec rmsprop = loadModelSpec(TRAIND_SOURCE_DIR "/configs/models/regression.yaml");
  rmsprop.optimizer.kind = Kind::RmsProp;
  const LayerGraph graph = buildLayerGraph(rmsprop);
  TempDir dir;
  ModelState written(rmsprop, graph);
  written.initialize();
  const std::filesystem::path saved = written.save(dir.path(), 1).path;

  ModelSpec momentum = rmsprop;
  momentum.optimizer.kind = Kind::Momentum;
  ModelState as_momentum(momentum, graph);
  CHECK_THROWS_AS(as_momentum.restore(saved), InputError);
  CHECK_THROWS_WITH(as_momentum.restore(saved),
                    Catch::StartsWith(saved.string() +
                                      ": the checkpoint was written with the rmsprop optimizer (it "
                                      "holds 'rms' state), whose 'momentum' state is another "
                                      "quantity than this spec's momentum (0.9)"));
  // Centered needs a state the plain rule never kept; the plain rule takes
  // the centered one's, less its "mg".
  ModelSpec centered = rmsprop;
  centered.optimizer.centered = true;
  ModelState as_centered(centered, graph);
  CHECK_THROWS_WITH(as_centered.restore(saved),
                    Catch::Contains("holds no 'mg' state of this spec's rmsprop"));
  ModelState centered_state(centered, graph);
  centered_state.initialize();
  TempDir other;
  const std::filesystem::path centered_saved = centered_state.save(other.path(), 1).path;
  ModelState plain(rmsprop, graph);
  CHECK_NOTHROW(plain.restore(centered_saved));
}

TEST_CASE("init_from says what of a layer's it leaves: a bias the layer has none for",
          "[checkpoint]") {
  TempDir dir;
  const auto& [spec, graph, saved] = SavedRegression(dir.path());
  ModelSpec fine_tuning = spec;
  fine_tuning.init_from = InitFromSpec{saved.string(), {{"hidden", "hidden", {}}}, {}, {}};
  ModelState with_bias(fine_tuning, graph);
  CHECK(with_bias.initialize() ==
        "initialised the parameters; layers hidden from " + saved.string());
  ModelSpec biasless_spec = fine_tuning;
  for (LayerSpec& layer : biasless_spec.layers)
    if (layer.name == "hidden") layer.use_bias = false;
  const LayerGraph biasless = buildLayerGraph(biasless_spec);
  ModelState without_bias(biasless_spec, biasless);
  CHECK(without_bias.initialize() ==
        "initialised the parameters; layers hidden from " + saved.string() +
            "; not taken: 'hidden/bias' (layer 'hidden' has no bias: use_bias: false)");
}

TEST_CASE("traind check's question: whether init_from's checkpoint fits the layers",
          "[checkpoint]") {
  TempDir dir;
  const auto& [spec, graph, saved] = SavedRegression(dir.path());
  const SourceLocation item{"ft.yaml", 31, 21}, checkpoint_line{"ft.yaml", 30, 15};
  InitFromSpec init_from;
  init_from.checkpoint = saved.string();
  init_from.layers = {{"hidden", "hidden", item}};
  init_from.checkpoint_location = checkpoint_line;
  CHECK_NOTHROW(checkInitFromFits(init_from, graph));
  ModelSpec wider = spec;
  for (LayerSpec& layer : wider.layers)
    if (layer.name == "hidden") layer.units = 20;
  CHECK_THROWS_WITH(checkInitFromFits(init_from, buildLayerGraph(wider)),
                    Catch::StartsWith("ft.yaml:31:21: init_from.layers[0]: layer 'hidden' does not "
                                      "fit the checkpoint's: " +
                                      saved.string() + " holds 'hidden/kernel' of shape [1, 10]"));
  init_from.layers[0].source = "nosuch";
  CHECK_THROWS_WITH(checkInitFromFits(init_from, graph),
                    Catch::StartsWith("ft.yaml:31:21: init_from.layers[0]: checkpoint " +
                                      saved.string() + " has no tensor 'nosuch/kernel'"));
  init_from.checkpoint = (dir.path() / "missing").string();
  CHECK_THROWS_WITH(checkInitFromFits(init_from, graph),
                    Catch::StartsWith("ft.yaml:30:15: init_from.checkpoint: "));
}

TEST_CASE("a checkpoint with moving averages of some variables only is refused as damaged",
          "[checkpoint]") {
  TempDir dir;
  ModelSpec spec = loadModelSpec(TRAIND_SOURCE_DIR "/configs/models/regression.yaml");
  spec.optimizer.moving_average = MovingAverageSpec{0.99f, false};
  const LayerGraph graph = buildLayerGraph(spec);
  ModelState state(spec, graph);
  state.initialize();
  const std::filesystem::path saved = state.save(dir.path(), 1).path;
  // The file again without one variable's average.
  const std::filesystem::path tensors = saved / "model.safetensors";
  std::vector<std::vector<float>> values;
  std::vector<TensorRef> kept;
  std::map<std::string, std::string> metadata;
  {
    const SafetensorsReader reader(tensors);
    metadata = reader.metadata();
    for (const std::string& name : reader.names()) {
      if (name == "hidden/kernel/ExponentialMovingAverage") continue;
      values.emplace_back(size_t(numElements(reader.shape(name))));
      reader.read(name, reader.shape(name), values.back());
    }
    size_t i = 0;
    for (const std::string& name : reader.names())
      if (name != "hidden/kernel/ExponentialMovingAverage")
        kept.push_back({name, reader.shape(name), values[i++].data()});
  }
  writeSafetensors(tensors, kept, metadata);
  ModelState resumed(spec, graph);
  CHECK_THROWS_WITH(resumed.restore(saved),
                    Catch::Contains("hidden/kernel/ExponentialMovingAverage"));
  // A checkpoint with no average at all (the spec turned them on since)
  // starts them from its parameters.
  ModelSpec plain = spec;
  plain.optimizer.moving_average.reset();
  ModelState before(plain, graph);
  before.initialize();
  const std::filesystem::path without = before.save(dir.path() / "plain", 1).path;
  ModelState turned_on(spec, graph);
  CHECK_NOTHROW(turned_on.restore(without));
  CHECK(turned_on.averagesStartedFromParameters());
  CHECK(turned_on.startedAveragesNote(without, "they start from its parameters") ==
        without.string() +
            ": the checkpoint holds no moving averages (it was written without this spec's "
            "moving_average): they start from its parameters");
  ModelState evaluated(spec, graph);
  evaluated.restoreForEvaluation(without);
  CHECK(evaluated.averagesStartedFromParameters());
  const std::filesystem::path whole = state.save(dir.path() / "whole", 1).path;
  ModelState averaged(spec, graph);
  averaged.restoreForEvaluation(whole);
  CHECK_FALSE(averaged.averagesStartedFromParameters());
  CHECK_FALSE(averaged.startedAveragesNote(whole, "-"));
}

TEST_CASE("a manifest edited apart from its checkpoint is refused", "[checkpoint]") {
  TempDir dir;
  const auto& [spec, graph, saved] = SavedRegression(dir.path());
  REQUIRE(saved.filename() == "ckpt-0000000000");
  const std::string manifest = readFile(saved / "manifest.json");
  const std::string tensors = (saved / "model.safetensors").string();
  auto restoreWith = [&](const std::string& from, const std::string& to) {
    std::string edited = manifest;
    const size_t at = edited.find(from);
    REQUIRE(at != std::string::npos);
    writeFile(saved / "manifest.json", edited.replace(at, from.size(), to));
    ModelState target(spec, graph);
    target.restore(saved);
  };
  CHECK_THROWS_MATCHES(
      restoreWith("\"global_step\": 0", "\"global_step\": 9007199254740992"), InputError,
      Catch::Message(saved.string() +
                     ": corrupt checkpoint: " + (saved / "manifest.json").string() +
                     " says global_step 9007199254740992, " + tensors + " says 0"));
  CHECK_THROWS_WITH(restoreWith("\"model_name\": \"regression\"", "\"model_name\": \"other\""),
                    Catch::Contains("says model_name other, " + tensors + " says regression"));
  // init_from refuses it as well: it took the layers of such a checkpoint.
  ModelSpec fine_tuning = spec;
  fine_tuning.init_from = InitFromSpec{saved.string(), {{"hidden", "hidden", {}}}, {}, {}};
  ModelState fine_tuned(fine_tuning, graph);
  CHECK_THROWS_WITH(fine_tuned.initialize(),
                    Catch::Contains("says model_name other, " + tensors + " says regression"));
  // Manifest and tensors agree, the directory's name does not; a name that
  // is no step says nothing.
  writeFile(saved / "manifest.json", manifest);
  const std::filesystem::path renamed = dir.path() / "ckpt-0000000007";
  std::filesystem::rename(saved, renamed);
  ModelState target(spec, graph);
  CHECK_THROWS_WITH(target.restore(renamed),
                    Catch::Contains("says global_step 0, the directory's name 7"));
  const std::filesystem::path huge = dir.path() / "ckpt-99999999999999999999";  // past int64
  std::filesystem::rename(renamed, huge);
  CHECK_THROWS_WITH(
      target.restore(huge),
      Catch::Contains("says global_step 0, the directory's name 99999999999999999999"));
  std::filesystem::rename(huge, renamed);
  std::filesystem::rename(renamed, dir.path() / "best");
  CHECK_NOTHROW(target.restore(dir.path() / "best"));
}

TEST_CASE("a randomly corrupted checkpoint is restored or refused, naming its file",
          "[checkpoint]") {
  // Bytes of the safetensors header and of the manifest changed, header
  // sizes that lie, truncations: each restore must succeed (the damage hit
  // tensor values) or throw an InputError that names the damaged file, with
  // no raw byte of the damage in it.
  TempDir dir;
  const auto& [spec, graph, saved] = SavedRegression(dir.path() / "good");
  const std::string tensors = readFile(saved / "model.safetensors");
  const std::string manifest = readFile(saved / "manifest.json");
  uint64_t header_size = 0;
  std::memcpy(&header_size, tensors.data(), sizeof header_size);
  REQUIRE(header_size + 8 < tensors.size());

  std::mt19937_64 rng(Catch::rngSeed());
  auto below = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  const char interesting[] = {'"', '\\', '-', '9', '.', 'e', '[', '{', '}', ',', ':', '\0', '\x1b'};
  auto flip = [&](std::string& bytes, size_t begin, size_t end) {
    for (size_t n = 1 + below(3); n > 0; --n)
      bytes[begin + below(end - begin)] =
          below(2) ? interesting[below(sizeof interesting)] : char(below(256));
  };
  int restored = 0, refused = 0;
  for (int i = 0; i < 300; ++i) {
    const std::filesystem::path checkpoint = dir.path() / "bad" / std::to_string(i);
    std::filesystem::create_directories(checkpoint);
    std::string t = tensors, m = manifest;
    std::string damaged = "model.safetensors";  // for the report of a failure
    switch (below(4)) {
      case 0:
        flip(t, 8, 8 + size_t(header_size));
        break;
      case 1: {
        const uint64_t lie = below(2) ? header_size + 1 - 2 * below(2) : rng();
        std::memcpy(t.data(), &lie, sizeof lie);
        break;
      }
      case 2:
        t.resize(below(t.size()));
        break;
      default:
        flip(m, 0, m.size());
        damaged = "manifest.json";
    }
    writeFile(checkpoint / "model.safetensors", t);
    writeFile(checkpoint / "manifest.json", m);
    INFO("case " << i << ", seed " << Catch::rngSeed() << ": " << damaged << " damaged");
    ModelState target(spec, graph);
    try {
      target.restore(checkpoint);
      ++restored;
    } catch (const InputError& e) {
      ++refused;
      const std::string message = e.what();
      CHECK_THAT(message, Catch::Contains(checkpoint.string()));
      CHECK(printable(message) == message);
    }
  }
  CHECK(refused > 200);  // most damage is to the structure
  CHECK(restored + refused == 300);
}

}  // namespace traind
