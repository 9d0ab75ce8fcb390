// Reading TensorFlow's checkpoints: test/data/tensorflow_checkpoint was
// written by TensorFlow's own sharded Saver (test/make_tensorflow_checkpoint.py
// says what it holds), so these tests check the reader against TensorFlow's
// writer, not against a writer of ours.
#include "core/tensorflow_checkpoint.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/layer_graph.h"
#include "core/model_spec.h"
#include "core/model_state.h"
#include "core/printable.h"
#include "core/trackable_object_graph.pb.h"
#include "test/temp_dir.h"

namespace traind {
namespace {

namespace fs = std::filesystem;

const fs::path kFixture = fs::path(TRAIND_SOURCE_DIR) / "test/data/tensorflow_checkpoint";
const fs::path kPrefix = kFixture / "model.ckpt-1200";
// A Keras 3 model and its Adam saved by tf.train.Checkpoint (test/make_keras_checkpoint.py).
const fs::path kKerasPrefix = fs::path(TRAIND_SOURCE_DIR) / "test/data/keras_checkpoint/ckpt";
// A Keras 2 model and its legacy RMSprop, the same way.
const fs::path kKeras2Prefix = fs::path(TRAIND_SOURCE_DIR) / "test/data/keras2_checkpoint/ckpt";

// What the fixture's script set: element i of a tensor is first + i / 8.
std::vector<float> counting(float first, size_t n) {
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = first + float(i) / 8;
  return values;
}

std::vector<float> readFloats(const TensorflowCheckpointReader& reader, const std::string& name) {
  std::vector<float> values(size_t(numElements(reader.shape(name))));
  reader.read(name, reader.shape(name), values);
  return values;
}

std::string readFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

void writeFile(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string errorOf(const std::function<void()>& run) {
  try {
    run();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

// "spec.yaml:13:C: init_from.layers[0]" for the item `item` of the init_from
// line of a fineTuningSpec(init_from): where its refusals point.
std::string itemAt(const std::string& path, const std::string& init_from, const std::string& item) {
  return path + ":13:" + std::to_string(std::string("init_from: " + init_from).find(item) + 1) +
         ": init_from.layers[0]";
}

// A two-layer model of the fixture's shapes, fine-tuned from it.
std::string fineTuningSpec(const std::string& init_from) {
  return "name: from_tensorflow\nseed: 3\ninput: [4]\nlayers:\n"
         "  - {type: dense, name: hidden, units: 3, activation: relu}\n"
         "  - {type: dense, name: out, units: 2}\n"
         "loss: mse\noptimizer: {type: sgd, learning_rate: 0.1}\n"
         "data:\n  synthetic: {type: regression, points: 100, x_min: -1, x_max: 1}\n"
         "  batch_size: 8\ntraining: {max_steps: 1}\n"
         "init_from: " +
         init_from + "\n";
}

using ObjectGraph = tensorflow::TrackableObjectGraph;

// A checkpoint at `prefix` of `graph` and the one variable value its
// objects may name, "v/.ATTRIBUTES/VARIABLE_VALUE".
void writeGraphCheckpoint(const fs::path& prefix, const ObjectGraph& graph) {
  writeTensorflowCheckpoint(
      prefix, {{"_CHECKPOINTABLE_OBJECT_GRAPH", {}, {}, std::nullopt, graph.SerializeAsString()},
               {"v/.ATTRIBUTES/VARIABLE_VALUE", {2}, {1.0f, 2.0f}, std::nullopt}});
}

// Object `from`'s child `name` is object `to`.
void addChild(ObjectGraph& graph, int from, int to, const std::string& name) {
  auto* child = graph.mutable_nodes(from)->add_children();
  child->set_node_id(to);
  child->set_local_name(name);
}

void holdValue(ObjectGraph& graph, int node) {
  auto* attribute = graph.mutable_nodes(node)->add_attributes();
  attribute->set_name("VARIABLE_VALUE");
  attribute->set_checkpoint_key("v/.ATTRIBUTES/VARIABLE_VALUE");
}

// A damaged checkpoint's refusal names it, with no raw byte of it.
void checkNamesCheckpoint(const InputError& e, const fs::path& prefix) {
  const std::string message = e.what();
  CHECK_THAT(message, Catch::Contains(prefix.string()));
  CHECK(printable(message) == message);
}

// Checks that fineTuningSpec's layers hold what the fixtures' scripts set.
void checkFixtureValues(const ModelState& state) {
  for (const VariableView& v : state.layout().views()) {
    const std::span<const float> values = state.parameters().view(v);
    const float first = v.name == "hidden/kernel" ? 1
                        : v.name == "hidden/bias" ? 2
                        : v.name == "out/kernel"  ? 3
                                                  : 4;
    INFO(v.name);
    CHECK(std::vector<float>(values.begin(), values.end()) == counting(first, values.size()));
  }
}

}  // namespace

TEST_CASE("a TensorFlow checkpoint is read as TensorFlow's Saver wrote it",
          "[tensorflow_checkpoint]") {
  const TensorflowCheckpointReader reader(kPrefix);
  const std::vector<std::string> names = reader.names();
  CHECK(names.size() == 17);
  CHECK(std::is_sorted(names.begin(), names.end()));
  CHECK(reader.shape("net/hidden/kernel") == Shape{4, 3});
  CHECK(reader.shape("net/out/bias") == Shape{2});
  CHECK(reader.shape("global_step") == Shape{});
  // Its three data files: the sharded Saver wrote one per device.
  CHECK(readFloats(reader, "net/hidden/kernel") == counting(1, 12));
  CHECK(readFloats(reader, "net/hidden/bias") == counting(2, 3));
  CHECK(readFloats(reader, "net/out/kernel") == counting(3, 6));
  CHECK(readFloats(reader, "net/out/bias") == counting(4, 2));
  CHECK(readFloats(reader, "net/hidden/kernel/Adam_1") == std::vector<float>(12, 0.0f));
  CHECK(reader.dtypeName("global_step") == "int64");
  CHECK(reader.readInteger("global_step") == 1200);
  CHECK(reader.dtypeName("net/double") == "float64");
  CHECK(reader.partCount("net/out/kernel") == 0);
  // Partitioned variables, put together from their parts: net/partitioned's
  // second part starts at row 75, which its key holds in two bytes.
  CHECK(reader.partCount("net/hidden/kernel") == 2);
  CHECK(reader.partCount("net/hidden/kernel/Adam") == 2);
  CHECK(reader.partCount("net/partitioned") == 2);
  CHECK(reader.shape("net/partitioned") == Shape{150, 2});
  CHECK(readFloats(reader, "net/partitioned") == counting(5, 300));
}

TEST_CASE("a TensorFlow checkpoint's tensors of another kind are refused by name",
          "[tensorflow_checkpoint]") {
  const TensorflowCheckpointReader reader(kPrefix);
  std::vector<float> two(2), twelve(12);
  CHECK(errorOf([&] { reader.read("net/double", {2}, two); }) ==
        kPrefix.string() +
            ": tensor 'net/double': expected float32, found float64 (traind's "
            "variables are float32)");
  CHECK(errorOf([&] {
          reader.read("net/hidden/kernel", {3, 4}, twelve);
        }) ==
        kPrefix.string() + ": tensor 'net/hidden/kernel': expected shape [3, 4], found [4, 3]");
  CHECK(errorOf([&] { reader.readInteger("net/out/bias"); }) ==
        kPrefix.string() +
            ": tensor 'net/out/bias': expected an integer scalar (int64 or int32), "
            "found float32 of shape [2]");
  CHECK(errorOf([&] { reader.shape("net/hidden/kernel/Momentum"); }) ==
        kPrefix.string() + ": no tensor 'net/hidden/kernel/Momentum'");
}

TEST_CASE("a directory names its TensorFlow checkpoint in its checkpoint file",
          "[tensorflow_checkpoint]") {
  CHECK(findTensorflowCheckpoint(kFixture) == kPrefix);
  CHECK(findTensorflowCheckpoint(kPrefix) == kPrefix);
  // Named by one of its files, as a shell's completion gives them.
  std::filesystem::path file = kPrefix;
  CHECK(findTensorflowCheckpoint(file += ".index") == kPrefix);
  file = kPrefix;
  CHECK(findTensorflowCheckpoint(file += ".data-00000-of-00001") == kPrefix);
  file = kPrefix;
  CHECK(findTensorflowCheckpoint(file += ".data-0000x-of-00001") == std::nullopt);
  TempDir dir;
  CHECK(findTensorflowCheckpoint(dir.path()) == std::nullopt);  // a traind one, or nothing
  dir.write("model.ckpt-1.data-00000-of-00001", "");            // without its index
  CHECK(findTensorflowCheckpoint(dir / "model.ckpt-1.data-00000-of-00001") == std::nullopt);
  dir.write(".index", "");  // no prefix before the suffix
  CHECK(findTensorflowCheckpoint(dir / ".index") == std::nullopt);
  CHECK(findTensorflowCheckpoint(dir / "model.ckpt-1") == std::nullopt);
  dir.write("checkpoint", "model_checkpoint_path: \"model.ckpt-7\"\n");
  CHECK(errorOf([&] { findTensorflowCheckpoint(dir.path()); }) ==
        (dir / "checkpoint").string() + ":1: model_checkpoint_path names " +
            (dir / "model.ckpt-7").string() + ", but " + (dir / "model.ckpt-7.index").string() +
            " is not there");
  dir.write("checkpoint", "all_model_checkpoint_paths: \"model.ckpt-7\"\n");
  CHECK(errorOf([&] { findTensorflowCheckpoint(dir.path()); }) ==
        (dir / "checkpoint").string() +
            ": no model_checkpoint_path line: expected TensorFlow's checkpoint state naming the "
            "newest checkpoint");
  // An absolute path, as a Saver without save_relative_paths writes it.
  dir.write("checkpoint", "model_checkpoint_path: \"" + kPrefix.string() + "\"\n");
  CHECK(findTensorflowCheckpoint(dir.path()) == kPrefix);
  // A run's checkpoint directory with an export in it: which is meant?
  dir.write("latest", "ckpt-0000000300\n");
  CHECK(errorOf([&] { findTensorflowCheckpoint(dir.path()); }) ==
        dir.path().string() +
            " holds both TensorFlow's checkpoint file and traind's latest: name the checkpoint "
            "to read, one of traind's ckpt-N directories or the TensorFlow checkpoint's prefix");
  CHECK(findTensorflowCheckpoint(kPrefix) == kPrefix);
}

TEST_CASE("init_from copies layers from a TensorFlow checkpoint, under its scope",
          "[tensorflow_checkpoint]") {
  TempDir dir;
  const std::string path = dir.write(
      "m.yaml",
      fineTuningSpec("{checkpoint: " + kFixture.string() + ", scope: net, layers: [hidden, out]}"));
  const ModelSpec spec = loadModelSpec(path);
  const LayerGraph graph = buildLayerGraph(spec);
  ModelState state(spec, graph);
  CHECK(state.initialize() ==
        "initialised the parameters; layers hidden, out from " + kPrefix.string());
  checkFixtureValues(state);

  // Without the scope, the names are not the checkpoint's.
  const std::string unscoped_from = "{checkpoint: " + kFixture.string() + ", layers: [hidden]}";
  const std::string unscoped = dir.write("unscoped.yaml", fineTuningSpec(unscoped_from));
  const ModelSpec unscoped_spec = loadModelSpec(unscoped);
  ModelState unscoped_state(unscoped_spec, graph);
  CHECK(errorOf([&] { unscoped_state.initialize(); }) ==
        itemAt(unscoped, unscoped_from, "hidden]") + ": checkpoint " + kPrefix.string() +
            " has no tensor 'hidden/kernel' (for layer 'hidden'); `trainctl inspect " +
            kPrefix.string() + "` lists the tensors it has");

  // A layer of another shape names both.
  const std::string swapped_from =
      "{checkpoint: " + kFixture.string() + ", layers: [{name: hidden, from: net/out}]}";
  const std::string swapped = dir.write("swapped.yaml", fineTuningSpec(swapped_from));
  const ModelSpec swapped_spec = loadModelSpec(swapped);
  ModelState swapped_state(swapped_spec, graph);
  CHECK(errorOf([&] { swapped_state.initialize(); }) ==
        itemAt(swapped, swapped_from, "{name: hidden") +
            ": layer 'hidden' does not fit the checkpoint's: " + kPrefix.string() +
            " holds 'net/out/kernel' of shape [3, 2], this model's 'hidden/kernel' is [4, 3]");
}

TEST_CASE("an object-based checkpoint's variables are found through its object graph",
          "[tensorflow_checkpoint]") {
  // Saved with its optimizer, the model's variables are keyed by the
  // optimizer's path to them; only the graph tells the model's.
  const TensorflowCheckpointReader reader(kKerasPrefix);
  CHECK_FALSE(
      reader.contains("model/_functional/_operations/1/_kernel/.ATTRIBUTES/VARIABLE_VALUE"));
  CHECK(reader.objectKey("model/_functional/_operations/1/_kernel") ==
        "optimizer/_trainable_variables/0/.ATTRIBUTES/VARIABLE_VALUE");
  CHECK(reader.objectKey("model/_functional/_operations/2/bias") ==
        "optimizer/_trainable_variables/3/.ATTRIBUTES/VARIABLE_VALUE");
  // Adam's slots of the logits' kernel, and its step.
  CHECK(reader.objectKey("optimizer/_momentums/2") ==
        "optimizer/_variables/6/.ATTRIBUTES/VARIABLE_VALUE");
  CHECK(reader.objectKey("optimizer/_velocities/2") ==
        "optimizer/_variables/7/.ATTRIBUTES/VARIABLE_VALUE");
  CHECK(reader.readInteger(*reader.objectKey("optimizer/_iterations")) == 1200);
  CHECK(readFloats(reader, *reader.objectKey("optimizer/_momentums/2")) == counting(103, 6));
  // Paths to no variable's value, and a checkpoint without a graph.
  CHECK(reader.objectKey("model/_functional/_operations/1") == std::nullopt);
  CHECK(reader.objectKey("model/_functional/_operations/9/_kernel") == std::nullopt);
  CHECK(reader.objectKey("model//_functional") == std::nullopt);
  CHECK(reader.objectKey("") == std::nullopt);
  CHECK(TensorflowCheckpointReader(kPrefix).objectKey("net/hidden/kernel") == std::nullopt);
}

TEST_CASE("a Keras 2 optimizer's slots are found through the object graph's slot variables",
          "[tensorflow_checkpoint]") {
  // test/make_keras_checkpoint.py: RMSprop's rms of a variable is its
  // value + 100, its momentum its value + 200.
  const TensorflowCheckpointReader reader(kKeras2Prefix);
  const std::string kernel = "model/layer_with_weights-1/kernel/.ATTRIBUTES/VARIABLE_VALUE";
  CHECK(reader.objectKey("model/layer_with_weights-1/kernel") == kernel);
  CHECK(reader.objectSlotNames("optimizer") == std::vector<std::string>{"rms", "momentum"});
  const std::optional<std::string> rms = reader.objectSlotKey("optimizer", kernel, "rms");
  CHECK(rms ==
        "model/layer_with_weights-1/kernel/.OPTIMIZER_SLOT/optimizer/rms/.ATTRIBUTES/"
        "VARIABLE_VALUE");
  CHECK(readFloats(reader, *rms) == counting(103, 6));
  CHECK(readFloats(reader, *reader.objectSlotKey("optimizer", kernel, "momentum")) ==
        counting(203, 6));
  // No such slot, optimizer or variable; the model keeps none.
  CHECK(reader.objectSlotKey("optimizer", kernel, "m") == std::nullopt);
  CHECK(reader.objectSlotKey("model", kernel, "rms") == std::nullopt);
  CHECK(reader.objectSlotKey("optimizer", "model/kernel", "rms") == std::nullopt);
  CHECK(reader.objectSlotNames("model").empty());
  CHECK(reader.objectSlotNames("nothing").empty());
}

TEST_CASE("init_from takes a Keras 3 model's layers from a checkpoint of it and its optimizer",
          "[tensorflow_checkpoint]") {
  TempDir dir;
  const std::string path = dir.write(
      "m.yaml", fineTuningSpec("{checkpoint: " + kKerasPrefix.string() +
                               ", layers: [{name: hidden, from: model/_functional/_operations/1}, "
                               "{name: out, from: model/_functional/_operations/2}]}"));
  const ModelSpec spec = loadModelSpec(path);
  const LayerGraph graph = buildLayerGraph(spec);
  ModelState state(spec, graph);
  CHECK(state.initialize() ==
        "initialised the parameters; layers hidden, out from " + kKerasPrefix.string());
  checkFixtureValues(state);
  // A path to no layer is named as before.
  const std::string wrong_from = "{checkpoint: " + kKerasPrefix.string() +
                                 ", layers: [{name: hidden, from: model/layer_with_weights-0}]}";
  const std::string wrong = dir.write("wrong.yaml", fineTuningSpec(wrong_from));
  const ModelSpec wrong_spec = loadModelSpec(wrong);
  ModelState wrong_state(wrong_spec, graph);
  CHECK(errorOf([&] { wrong_state.initialize(); }) ==
        itemAt(wrong, wrong_from, "{name: hidden") + ": checkpoint " + kKerasPrefix.string() +
            " has no tensor 'model/layer_with_weights-0/kernel' (for layer 'hidden'); `trainctl "
            "inspect " +
            kKerasPrefix.string() + "` lists the tensors it has");
}

TEST_CASE("a randomly corrupted object graph is read or refused, naming its file",
          "[tensorflow_checkpoint]") {
  // Bytes of the data file changed or cut: the graph's CRC32C refuses them,
  // or what is read is what the fixture holds.
  TempDir dir;
  const std::string data = readFile(kKerasPrefix.string() + ".data-00000-of-00001");
  const std::string index = readFile(kKerasPrefix.string() + ".index");
  std::mt19937_64 rng(Catch::rngSeed());
  auto below = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  int read = 0, refused = 0;
  for (int i = 0; i < 200; ++i) {
    const fs::path prefix = dir.path() / std::to_string(i) / "ckpt";
    fs::create_directories(prefix.parent_path());
    std::string damaged = data;
    damaged[below(damaged.size())] ^= char(1 + below(255));
    writeFile(prefix.string() + ".data-00000-of-00001", damaged);
    writeFile(prefix.string() + ".index", index);
    INFO("case " << i << ", seed " << Catch::rngSeed());
    try {
      const TensorflowCheckpointReader reader(prefix);
      const std::optional<std::string> key =
          reader.objectKey("model/_functional/_operations/1/_kernel");
      const std::vector<float> kernel = readFloats(reader, key.value_or("none"));
      CHECK(kernel == counting(1, 12));
      ++read;
    } catch (const InputError& e) {
      ++refused;
      checkNamesCheckpoint(e, prefix);
    }
  }
  CHECK(refused > 100);
  CHECK(read + refused == 200);
}

TEST_CASE("a lying object graph costs bounded memory and time, or is refused naming its file",
          "[tensorflow_checkpoint]") {
  namespace tc = tensorflow_checkpoint_format;
  TempDir dir;
  int written = 0;
  const auto write = [&](const ObjectGraph& graph) {
    const fs::path prefix = dir.path() / std::to_string(written++) / "ckpt";
    writeGraphCheckpoint(prefix, graph);
    return prefix;
  };
  SECTION("a cycle: each path goes through an object once") {
    ObjectGraph graph;
    for (int i = 0; i < 3; ++i) graph.add_nodes();
    addChild(graph, 0, 1, "model");
    addChild(graph, 1, 2, "kernel");
    addChild(graph, 2, 1, "back");
    addChild(graph, 1, 1, "itself");
    holdValue(graph, 2);
    const TensorflowCheckpointReader reader(write(graph));
    CHECK(reader.objectKey("model/kernel") == "v/.ATTRIBUTES/VARIABLE_VALUE");
    CHECK(reader.objectKey("model/kernel/back/kernel") == "v/.ATTRIBUTES/VARIABLE_VALUE");
    const auto found = reader.objectPaths();
    CHECK(found.complete);
    CHECK(found.paths == std::vector<std::pair<std::string, std::string>>{
                             {"model/kernel", "v/.ATTRIBUTES/VARIABLE_VALUE"}});
  }
  SECTION("a chain of 100000 objects is walked without recursion; its long path left out") {
    ObjectGraph graph;
    for (int i = 0; i < 100000; ++i) graph.add_nodes();
    for (int i = 0; i + 1 < 100000; ++i) addChild(graph, i, i + 1, "a");
    holdValue(graph, 99999);
    holdValue(graph, 3);
    const TensorflowCheckpointReader reader(write(graph));
    const auto found = reader.objectPaths();
    CHECK_FALSE(found.complete);  // 199997 bytes, past a key's
    CHECK(found.paths == std::vector<std::pair<std::string, std::string>>{
                             {"a/a/a", "v/.ATTRIBUTES/VARIABLE_VALUE"}});
  }
  SECTION("2^40 paths through 40 diamonds: the walk stops at its bound") {
    ObjectGraph graph;
    for (int i = 0; i <= 40; ++i) graph.add_nodes();
    for (int i = 0; i < 40; ++i) {
      addChild(graph, i, i + 1, "l");
      addChild(graph, i, i + 1, "r");
    }
    holdValue(graph, 40);
    const TensorflowCheckpointReader reader(write(graph));
    const auto found = reader.objectPaths();
    CHECK_FALSE(found.complete);
    CHECK(found.paths.size() <= tc::kMaxObjectPaths);
    std::string right = "r";
    for (int i = 1; i < 40; ++i) right += "/r";
    CHECK(reader.objectKey(right) == "v/.ATTRIBUTES/VARIABLE_VALUE");
  }
  SECTION("refused: a child that is no object, too many objects, a graph of another dtype") {
    ObjectGraph dangling;
    dangling.add_nodes();
    addChild(dangling, 0, 7, "model");
    fs::path prefix = write(dangling);
    CHECK(errorOf([&] { TensorflowCheckpointReader reader(prefix); }) ==
          prefix.string() +
              ".data-00000-of-00001: tensor '_CHECKPOINTABLE_OBJECT_GRAPH': object 0 names "
              "object 7 of 1 as its child 'model' (the file is corrupt)");
    ObjectGraph many;
    for (size_t i = 0; i <= tc::kMaxObjects; ++i) many.add_nodes();
    prefix = write(many);
    CHECK_THAT(errorOf([&] { TensorflowCheckpointReader reader(prefix); }),
               Catch::Contains("more than 262144 objects, past what a checkpoint of a model "
                               "traind trains holds"));
    ObjectGraph slot_of_nothing;
    slot_of_nothing.add_nodes();
    auto* slot = slot_of_nothing.mutable_nodes(0)->add_slot_variables();
    slot->set_original_variable_node_id(0);
    slot->set_slot_name("m");
    slot->set_slot_variable_node_id(-3);
    prefix = write(slot_of_nothing);
    CHECK(errorOf([&] { TensorflowCheckpointReader reader(prefix); }) ==
          prefix.string() +
              ".data-00000-of-00001: tensor '_CHECKPOINTABLE_OBJECT_GRAPH': object 0's slot "
              "'m' names object -3 of 1 (the file is corrupt)");
    // A slot that is its own variable, or given twice.
    slot->set_slot_variable_node_id(0);
    prefix = write(slot_of_nothing);
    CHECK_THAT(errorOf([&] { TensorflowCheckpointReader reader(prefix); }),
               Catch::EndsWith("object 0's slot 'm' of object 0 is that object itself (the file "
                               "is corrupt)"));
    slot_of_nothing.add_nodes();
    slot->set_slot_variable_node_id(1);
    *slot_of_nothing.mutable_nodes(0)->add_slot_variables() = *slot;
    prefix = write(slot_of_nothing);
    CHECK_THAT(errorOf([&] { TensorflowCheckpointReader reader(prefix); }),
               Catch::EndsWith("object 0's slot 'm' of object 0 is given twice (the file is "
                               "corrupt)"));
    // Slot variables count with the children: each is as small on the wire.
    ObjectGraph many_slots;
    many_slots.add_nodes();
    for (size_t i = 0; i <= tc::kMaxObjectChildren / 2; ++i) {
      addChild(many_slots, 0, 0, "");
      many_slots.mutable_nodes(0)->add_slot_variables();
    }
    prefix = write(many_slots);
    CHECK_THAT(errorOf([&] { TensorflowCheckpointReader reader(prefix); }),
               Catch::Contains("more than 1048576 children and slot variables of objects"));
    prefix = dir.path() / "float" / "ckpt";
    writeTensorflowCheckpoint(prefix,
                              {{"_CHECKPOINTABLE_OBJECT_GRAPH", {1}, {1.0f}, std::nullopt}});
    CHECK(errorOf([&] { TensorflowCheckpointReader reader(prefix); }) ==
          prefix.string() +
              ": tensor '_CHECKPOINTABLE_OBJECT_GRAPH': expected a string scalar (an object "
              "graph), found float32 of shape [1]");
  }
}

TEST_CASE("a randomly corrupted TensorFlow checkpoint is read or refused, naming its file",
          "[tensorflow_checkpoint]") {
  // Bytes of the index or of a data file changed, truncations: each read of
  // the model's tensors must give the fixture's values, or throw an
  // InputError that names the damaged checkpoint, with no raw byte in it.
  TempDir dir;
  const std::string index = readFile(kPrefix.string() + ".index");
  std::vector<fs::path> data_files;
  for (const auto& file : fs::directory_iterator(kFixture))
    if (file.path().filename().string().find(".data-") != std::string::npos)
      data_files.push_back(file.path());
  REQUIRE(data_files.size() == 3);

  std::mt19937_64 rng(Catch::rngSeed());
  auto below = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  int read = 0, refused = 0;
  for (int i = 0; i < 300; ++i) {
    const fs::path copy = dir.path() / std::to_string(i);
    fs::create_directories(copy);
    const fs::path prefix = copy / "model.ckpt-1200";
    std::string damaged_index = index;
    for (const fs::path& file : data_files) fs::copy_file(file, copy / file.filename());
    const fs::path data = copy / data_files[below(data_files.size())].filename();
    std::string damaged_data = readFile(data);
    switch (below(4)) {
      case 0:
      case 1:
        for (size_t n = 1 + below(3); n > 0; --n)
          damaged_index[below(damaged_index.size())] = char(below(256));
        break;
      case 2:
        damaged_index.resize(below(damaged_index.size()));
        break;
      default:
        if (!damaged_data.empty()) damaged_data[below(damaged_data.size())] ^= char(1 + below(255));
    }
    writeFile(prefix.string() + ".index", damaged_index);
    writeFile(data, damaged_data);
    INFO("case " << i << ", seed " << Catch::rngSeed());
    try {
      // Read whole before any CHECK: Catch counts an exception inside one as a failure.
      const TensorflowCheckpointReader reader(prefix);
      const std::vector<std::vector<float>> values = {
          readFloats(reader, "net/hidden/kernel"), readFloats(reader, "net/hidden/bias"),
          readFloats(reader, "net/out/kernel"), readFloats(reader, "net/out/bias")};
      const int64_t step = reader.readInteger("global_step");
      CHECK(values == std::vector<std::vector<float>>{counting(1, 12), counting(2, 3),
                                                      counting(3, 6), counting(4, 2)});
      CHECK(step == 1200);
      ++read;
    } catch (const InputError& e) {
      ++refused;
      checkNamesCheckpoint(e, prefix);
    }
  }
  CHECK(refused > 200);
  CHECK(read + refused == 300);
}

}  // namespace traind

namespace traind {

TEST_CASE("a checkpoint written is read back, listed beside the directory's others",
          "[tensorflow_checkpoint]") {
  TempDir dir;
  // A TensorFlow job's pointer, naming its own checkpoints.
  dir.write("out/checkpoint",
            "model_checkpoint_path: \"model.ckpt-20\"\n"
            "all_model_checkpoint_paths: \"model.ckpt-10\"\n"
            "all_model_checkpoint_paths: \"model.ckpt-20\"\n");
  const std::filesystem::path prefix = dir / "out" / "traind.ckpt-5";
  writeTensorflowCheckpoint(prefix, {{"b", {2}, {1.5f, -2.0f}, std::nullopt},
                                     {"a/kernel", {1, 3}, {1, 2, 3}, std::nullopt},
                                     {"global_step", {}, {}, 5}});
  CHECK(findTensorflowCheckpoint(dir / "out") == prefix);
  CHECK(readFile(dir / "out" / "checkpoint") ==
        "model_checkpoint_path: \"traind.ckpt-5\"\n"
        "all_model_checkpoint_paths: \"model.ckpt-10\"\n"
        "all_model_checkpoint_paths: \"model.ckpt-20\"\n"
        "all_model_checkpoint_paths: \"traind.ckpt-5\"\n");
  const TensorflowCheckpointReader reader(prefix);
  CHECK(reader.names() == std::vector<std::string>{"a/kernel", "b", "global_step"});
  CHECK(readFloats(reader, "a/kernel") == std::vector<float>{1, 2, 3});
  CHECK(readFloats(reader, "b") == std::vector<float>{1.5f, -2.0f});
  CHECK(reader.readInteger("global_step") == 5);

  // Not written over; nothing the reader would refuse is written.
  CHECK(errorOf([&] { writeTensorflowCheckpoint(prefix, {}); }) ==
        prefix.string() +
            ".index is there already: a checkpoint is not written over; give "
            "another prefix");
  CHECK(errorOf([&] { writeTensorflowCheckpoint(dir / "out" / "a\"b", {}); }) ==
        (dir / "out" / "a\"b").string() +
            ": expected a checkpoint prefix ending in a file name without quotes, backslashes "
            "or line breaks, such as /models/exported/model.ckpt-1200");
  // A directory's name: the files went beside it, which then read as that name.
  std::filesystem::create_directories(dir / "a-directory");
  CHECK(errorOf([&] { writeTensorflowCheckpoint(dir / "a-directory", {}); }) ==
        (dir / "a-directory").string() +
            ": a directory; expected a checkpoint prefix inside it, "
            "such as " +
            (dir / "a-directory" / "model.ckpt").string());
  CHECK(!std::filesystem::exists(dir / "a-directory.index"));
  const std::filesystem::path other = dir / "other" / "m";
  CHECK_THROWS_AS(writeTensorflowCheckpoint(other, {{"x", {1}, {NAN}, std::nullopt}}),
                  std::invalid_argument);
  CHECK_THROWS_AS(
      writeTensorflowCheckpoint(other, {{std::string(70000, 'x'), {1}, {1}, std::nullopt}}),
      std::invalid_argument);
  CHECK_THROWS_AS(writeTensorflowCheckpoint(
                      other, {{"x", {1}, {1}, std::nullopt}, {"x", {1}, {2}, std::nullopt}}),
                  std::invalid_argument);
  CHECK_FALSE(std::filesystem::exists(other.string() + ".index"));
  CHECK_FALSE(std::filesystem::exists(dir / "other"));  // refused before the directory is made
}

TEST_CASE("a checkpoint that cannot be written whole leaves nothing, and can be written again",
          "[tensorflow_checkpoint]") {
  TempDir dir;
  const std::vector<TensorflowTensor> tensors = {{"w", {2}, {1, 2}, std::nullopt},
                                                 {"global_step", {}, {}, 3}};
  const auto files = [&](const fs::path& d) {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(d))
      names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  };
  SECTION("a directory where the state file goes: refused before anything is written") {
    fs::create_directories(dir / "out" / "checkpoint");
    CHECK(errorOf([&] { writeTensorflowCheckpoint(dir / "out" / "m", tensors); }) ==
          (dir / "out" / "checkpoint").string() +
              ": expected TensorFlow's checkpoint state file (text) or nothing there, got a "
              "directory");
    CHECK(files(dir / "out") == std::vector<std::string>{"checkpoint"});
    fs::remove(dir / "out" / "checkpoint");
    writeTensorflowCheckpoint(dir / "out" / "m", tensors);
    CHECK(files(dir / "out") ==
          std::vector<std::string>{"checkpoint", "m.data-00000-of-00001", "m.index"});
  }
  SECTION("a file that cannot be written after the data file: the data file is taken back") {
    fs::create_directories(dir / "out" / "m.index.tmp" / "in-the-way");
    CHECK_THROWS(writeTensorflowCheckpoint(dir / "out" / "m", tensors));
    CHECK(files(dir / "out") == std::vector<std::string>{"m.index.tmp"});
  }
  SECTION("the directories made for one that fails are taken back") {
    const fs::path prefix = dir / "made" / "deeper" / std::string(300, 'x');  // too long a name
    CHECK_THROWS_AS(writeTensorflowCheckpoint(prefix, tensors), InputError);
    CHECK_FALSE(fs::exists(dir / "made"));
  }
  SECTION("a stop point that throws (trainctl's held signals): what was written is taken back") {
    // Stop points: before the data file, the index, the state file.
    for (int stop_at = 1; stop_at <= 3; ++stop_at) {
      INFO("stopped at stop point " << stop_at);
      int reached = 0;
      const auto stop_point = [&] {
        if (++reached == stop_at) throw std::runtime_error("interrupted");
      };
      CHECK_THROWS_WITH(writeTensorflowCheckpoint(dir / "sig" / "m", tensors, stop_point),
                        "interrupted");
      CHECK_FALSE(fs::exists(dir / "sig"));
    }
  }
  SECTION("several writers of one directory at once: each listed, none written over") {
    std::vector<std::thread> writers;
    std::atomic<int> refused{0};
    for (int i = 0; i < 4; ++i)
      writers.emplace_back([&, i] {
        writeTensorflowCheckpoint(dir / "par" / ("m-" + std::to_string(i)), tensors);
        try {
          writeTensorflowCheckpoint(dir / "par" / "same", tensors);
        } catch (const InputError&) {
          ++refused;
        }
      });
    for (std::thread& writer : writers) writer.join();
    CHECK(refused == 3);
    const std::string state = readFile(dir / "par" / "checkpoint");
    for (const char* name : {"m-0", "m-1", "m-2", "m-3", "same"})
      CHECK_THAT(state, Catch::Contains(std::string("all_model_checkpoint_paths: \"") + name));
    CHECK(TensorflowCheckpointReader(dir / "par" / "same").names().size() == 2);
  }
}

}  // namespace traind
