#include "core/model_spec.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/device_name.h"
#include "core/learning_rate.h"
#include "core/printable.h"
#include "core/random.h"
#include "core/yaml_fields.h"

namespace traind {

using namespace yaml_fields;

namespace {

namespace fs = std::filesystem;

// Sizes (units, filters, windows, input dimensions) stay below 2^31 so that
// products of two of them cannot overflow int64 in later shape arithmetic.
constexpr int64_t kMaxDimension = INT32_MAX;
// The longest shorter side a test set's images are resized to.
constexpr int64_t kMaxShorterSide = 65536;

std::string formatNumber(float value) {
  char text[32];
  return std::string(text, std::to_chars(text, text + sizeof text, value).ptr);
}

// ---------------------------------------------------------------------------
// Layers: one read function per type, and the table from type names to them.

std::array<int64_t, 2> readWindow(const Field& field) {
  if (field.node.IsSequence()) {
    std::vector<Field> items = listItems(field, "a positive integer or [height, width]");
    if (items.size() != 2) failExpected(field, "a positive integer or [height, width]");
    return {readInt(items[0], 1, kMaxDimension), readInt(items[1], 1, kMaxDimension)};
  }
  if (!field.node.IsScalar()) failExpected(field, "a positive integer or [height, width]");
  const int64_t size = readInt(field, 1, kMaxDimension);
  return {size, size};
}

const Choices<Activation> kActivations = {{"relu", Activation::Relu},
                                          {"tanh", Activation::Tanh},
                                          {"sigmoid", Activation::Sigmoid},
                                          {"linear", Activation::Linear}};

Activation readActivation(const Field& field) {
  return readChoice<Activation>(field, kActivations);
}

std::string_view activationName(Activation activation) {
  return choiceWord(kActivations, activation);
}

Padding readPadding(const Field& field) {
  return readChoice<Padding>(field, {{"valid", Padding::Valid}, {"same", Padding::Same}});
}

InitializerSpec readInitializer(const Field& field) {
  using Kind = InitializerSpec::Kind;
  constexpr std::string_view kExpected =
      "one of glorot_uniform, glorot_normal, he_uniform, he_normal, zeros, {constant: <number>}, "
      "{truncated_normal: <stddev>} or {random_normal: <stddev>}";
  if (field.node.IsMap()) {
    Mapping fields(field);
    fields.allowOnly({"constant", "truncated_normal", "random_normal"}, "an initializer");
    if (field.node.size() != 1)
      fail(field, fmt::format("expected exactly one of constant, truncated_normal, random_normal, "
                              "got {}",
                              field.node.size()));
    if (auto f = fields.find("constant"))
      return {Kind::Constant, readFloat(*f, "a number", isAnyNumber)};
    // Rng::normal draws within 38 deviations (its uniform is at least
    // 1e-300): at most 1e36 keeps every value inside float.
    constexpr std::string_view kStddev = "a positive standard deviation of at most 1e36";
    const auto deviation = [](double x) { return x > 0.0 && x <= 1e36; };
    if (auto f = fields.find("truncated_normal"))
      return {Kind::TruncatedNormal, readFloat(*f, kStddev, deviation)};
    return {Kind::RandomNormal, readFloat(fields.get("random_normal"), kStddev, deviation)};
  }
  if (isText(field.node)) {
    for (const auto& [word, kind] : Choices<Kind>{{"glorot_uniform", Kind::GlorotUniform},
                                                  {"glorot_normal", Kind::GlorotNormal},
                                                  {"he_uniform", Kind::HeUniform},
                                                  {"he_normal", Kind::HeNormal},
                                                  {"zeros", Kind::Zeros}}) {
      if (field.node.Scalar() == word) return {kind, 0.0f};
    }
  }
  failExpected(field, kExpected);
}

// A device name such as cuda:0 (core/device_name.h), for a layer's or a
// stage's `device` and training.devices.
DeviceName readDeviceName(const Field& field) {
  std::optional<DeviceName> name;
  if (isText(field.node)) name = parseDeviceName(field.node.Scalar());
  if (!name) failExpected(field, "a device: " + deviceNameForms());
  return *name;
}

// The fields shared by the layers that own variables (dense, conv2d).
void readVariableOptions(const Mapping& fields, LayerSpec& layer) {
  if (auto f = fields.find("activation")) layer.activation = readActivation(*f);
  if (auto f = fields.find("use_bias")) layer.use_bias = readBool(*f);
  if (auto f = fields.find("trainable")) layer.trainable = readBool(*f);
  if (auto f = fields.find("kernel_initializer")) layer.kernel_initializer = readInitializer(*f);
  if (auto f = fields.find("weight_decay"))
    layer.weight_decay = readFloat(*f, "a non-negative number", isNonNegative);
  if (auto f = fields.find("weight_decay"); f && !layer.trainable)
    fail(*f, "only meaningful on a layer that trains (this one is trainable: false)");
  if (auto f = fields.find("bias_initializer")) {
    // A layer with no bias would ignore it without a word.
    if (!layer.use_bias) fail(*f, "only meaningful with use_bias: true (this layer has no bias)");
    layer.bias_initializer = readInitializer(*f);
  }
}

void readDenseLayer(const Mapping& fields, LayerSpec& layer) {
  layer.units = readInt(fields.get("units"), 1, kMaxDimension);
  readVariableOptions(fields, layer);
}

void readConv2DLayer(const Mapping& fields, LayerSpec& layer) {
  layer.filters = readInt(fields.get("filters"), 1, kMaxDimension);
  layer.window = readWindow(fields.get("kernel"));
  if (auto f = fields.find("stride")) layer.stride = readWindow(*f);
  if (auto f = fields.find("padding")) layer.padding = readPadding(*f);
  readVariableOptions(fields, layer);
}

void readPoolLayer(const Mapping& fields, LayerSpec& layer) {
  layer.window = readWindow(fields.get("size"));
  layer.stride = layer.window;
  if (auto f = fields.find("stride")) layer.stride = readWindow(*f);
  if (auto f = fields.find("padding")) layer.padding = readPadding(*f);
}

void readFlattenLayer(const Mapping&, LayerSpec&) {}

void readDropoutLayer(const Mapping& fields, LayerSpec& layer) {
  layer.rate = readFloat(fields.get("rate"), "a number in [0, 1)", isFraction);
}

void readActivationLayer(const Mapping& fields, LayerSpec& layer) {
  layer.activation = readActivation(fields.get("activation"));
}

struct LayerType {
  std::string_view name;
  LayerKind kind;
  std::vector<std::string_view> fields;  // all of them, "type" and "name" included
  void (*read)(const Mapping& fields, LayerSpec& layer);
};

const std::vector<LayerType>& layerTypes() {
  static const std::vector<LayerType> types = {
      {"dense",
       LayerKind::Dense,
       {"type", "name", "units", "activation", "use_bias", "trainable", "kernel_initializer",
        "bias_initializer", "weight_decay"},
       readDenseLayer},
      {"conv2d",
       LayerKind::Conv2D,
       {"type", "name", "filters", "kernel", "stride", "padding", "activation", "use_bias",
        "trainable", "kernel_initializer", "bias_initializer", "weight_decay"},
       readConv2DLayer},
      {"max_pool",
       LayerKind::MaxPool,
       {"type", "name", "size", "stride", "padding"},
       readPoolLayer},
      {"avg_pool",
       LayerKind::AvgPool,
       {"type", "name", "size", "stride", "padding"},
       readPoolLayer},
      {"flatten", LayerKind::Flatten, {"type", "name"}, readFlattenLayer},
      {"dropout", LayerKind::Dropout, {"type", "name", "rate"}, readDropoutLayer},
      {"activation", LayerKind::Activation, {"type", "name", "activation"}, readActivationLayer},
  };
  return types;
}

const LayerType& layerType(LayerKind kind) {
  for (const LayerType& type : layerTypes())
    if (type.kind == kind) return type;
  throw std::logic_error("layer kind missing from layerTypes()");
}

LayerSpec readLayer(const Field& field) {
  Mapping fields(field);
  std::vector<std::string_view> type_names;
  for (const LayerType& type : layerTypes()) type_names.push_back(type.name);

  const std::optional<Field> type_field = fields.find("type");
  if (!type_field) {
    // A misspelt "type" reads better as an unknown field than as a missing one.
    std::vector<std::string_view> any_layer_field;
    for (const LayerType& type : layerTypes())
      for (std::string_view name : type.fields)
        if (std::find(any_layer_field.begin(), any_layer_field.end(), name) ==
            any_layer_field.end()) {
          any_layer_field.push_back(name);
        }
    any_layer_field.push_back("device");
    fields.allowOnly(any_layer_field, "a layer");
    fail(field, "missing field 'type' (one of " + joined(type_names) + ")");
  }
  const LayerType* type = nullptr;
  for (const LayerType& candidate : layerTypes())
    if (isText(type_field->node) && type_field->node.Scalar() == candidate.name)
      type = &candidate;
  if (!type) failExpected(*type_field, "one of " + joined(type_names));

  std::vector<std::string_view> allowed = type->fields;
  allowed.push_back("device");  // every layer may be placed
  fields.allowOnly(allowed, "a " + std::string(type->name) + " layer");
  LayerSpec layer;
  layer.kind = type->kind;
  layer.location = field.where;
  if (auto f = fields.find("name")) layer.name = readName(*f);
  if (auto f = fields.find("device")) layer.device = readDeviceName(*f).text;
  type->read(fields, layer);
  return layer;
}

std::vector<LayerSpec> readLayers(const Field& field) {
  const std::vector<Field> items = listItems(field, "a list of layers");
  if (items.empty()) failExpected(field, "a non-empty list of layers");
  std::vector<LayerSpec> layers;
  for (const Field& item : items) layers.push_back(readLayer(item));

  // Default names count every layer of the same type, named or not, so the
  // third dense layer is dense_3 whatever the others are called.
  std::vector<int> count(layerTypes().size(), 0);
  for (LayerSpec& layer : layers) {
    const LayerType& type = layerType(layer.kind);
    const int n = ++count[&type - layerTypes().data()];
    if (layer.name.empty()) layer.name = std::string(type.name) + "_" + std::to_string(n);
  }
  // Hashed: aliases let a 1 MiB spec list 250,000 layers, which compared
  // pairwise took minutes.
  std::unordered_map<std::string_view, size_t> first_named;  // name -> its layer
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto [seen, added] = first_named.try_emplace(layers[i].name, i);
    if (added) continue;
    const size_t j = seen->second;
    fail(items[i], "duplicate layer name " + quoted(layers[i].name) + " (layers[" +
                       std::to_string(j) + "] at line " + std::to_string(layers[j].location.line) +
                       " has it too)");
  }
  return layers;
}

// Each layer's index by its name (names are unique: readLayers), viewing
// `layers`' names.
std::unordered_map<std::string_view, size_t> indexByName(const std::vector<LayerSpec>& layers) {
  std::unordered_map<std::string_view, size_t> index;
  index.reserve(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) index.emplace(layers[i].name, i);
  return index;
}

// stages: [{name, device, layers: [...]}]: each stage a run of consecutive
// layers, no layer in two stages, no layer placed elsewhere than its stage.
std::vector<StageSpec> readStages(const Field& field, const std::vector<LayerSpec>& layers) {
  const std::vector<Field> items = listItems(field, "a list of stages {name, device, layers}");
  if (items.empty()) failExpected(field, "a non-empty list of stages");
  std::vector<StageSpec> stages;
  std::vector<int> stage_of(layers.size(), -1);
  // Looked up by name: a spec of 100k layers and 10k stages took 17 s
  // scanning the lists for each name.
  const std::unordered_map<std::string_view, size_t> layer_index = indexByName(layers);
  std::unordered_set<std::string> stage_names;
  for (const Field& item : items) {
    Mapping fields(item);
    fields.allowOnly({"name", "device", "layers"}, "a stage");
    StageSpec stage;
    stage.location = item.where;
    stage.name = readName(fields.get("name"));
    if (!stage_names.insert(stage.name).second)
      fail(fields.get("name"), "duplicate stage name " + quoted(stage.name));
    stage.device = readDeviceName(fields.get("device")).text;
    const Field names = fields.get("layers");
    const std::vector<Field> layer_items = listItems(names, "a list of layer names");
    if (layer_items.empty()) failExpected(names, "a non-empty list of layer names");
    int previous = -1;
    for (const Field& layer_item : layer_items) {
      const auto found =
          isText(layer_item.node) ? layer_index.find(layer_item.node.Scalar()) : layer_index.end();
      if (found == layer_index.end()) failExpected(layer_item, "the name of a layer of this spec");
      const int index = int(found->second);
      const auto layer = layers.begin() + index;
      if (stage_of[index] >= 0) {
        const bool this_stage = size_t(stage_of[index]) == stages.size();
        fail(layer_item, "layer " + quoted(layer->name) + " is already in stage " +
                             quoted(this_stage ? stage.name : stages[stage_of[index]].name));
      }
      if (previous >= 0 && index != previous + 1)
        fail(
            layer_item,
            "a stage is a run of consecutive layers: expected " +
                (size_t(previous) + 1 < layers.size()
                     ? quoted(layers[previous + 1].name) + " after " + quoted(layers[previous].name)
                     : "nothing after " + quoted(layers[previous].name) + ", the last layer") +
                ", got " + quoted(layer->name));
      if (!layer->device.empty() && layer->device != stage.device)
        fail(layer_item, "layer " + quoted(layer->name) + " is placed on " + layer->device +
                             " (line " + std::to_string(layer->location.line) + "), stage " +
                             quoted(stage.name) + " on " + stage.device);
      stage_of[index] = int(stages.size());
      previous = index;
      stage.layers.push_back(layer->name);
    }
    stages.push_back(std::move(stage));
  }
  return stages;
}

// ---------------------------------------------------------------------------
// The other sections.

Shape readInput(const Field& field) {
  constexpr std::string_view kExpected = "[features] or [height, width, channels]";
  if (!field.node.IsSequence() || (field.node.size() != 1 && field.node.size() != 3))
    failExpected(field, kExpected);
  Shape shape;
  for (const Field& item : listItems(field, kExpected))
    shape.push_back(readInt(item, 1, kMaxDimension));
  return shape;
}

// The learning-rate schedules: the word of `decay`, and the fields each
// takes besides it.
struct Schedule {
  std::string_view decay;
  LearningRateSpec::Kind kind;
  std::vector<std::string_view> fields;
};

const std::vector<Schedule>& schedules() {
  using Kind = LearningRateSpec::Kind;
  static const std::vector<Schedule> all = {
      {"exponential",
       Kind::ExponentialDecay,
       {"initial", "decay_steps", "decay_rate", "staircase"}},
      {"inverse_time",
       Kind::InverseTimeDecay,
       {"initial", "decay_steps", "decay_rate", "staircase"}},
      {"piecewise_constant", Kind::PiecewiseConstant, {"boundaries", "values"}},
      {"polynomial",
       Kind::PolynomialDecay,
       {"initial", "decay_steps", "end_learning_rate", "power", "cycle"}},
      {"cosine", Kind::CosineDecay, {"initial", "decay_steps", "alpha"}},
  };
  return all;
}

// piecewise_constant's boundaries (steps, increasing) and values (one more,
// positive). At most kMaxBoundaries: the schedule's words travel in every
// node's hello (updateRule), so they are kept short.
constexpr size_t kMaxBoundaries = 1000;

void readPiecewise(const Mapping& fields, LearningRateSpec& rate) {
  const Field boundaries = fields.get("boundaries", "required with decay: piecewise_constant");
  const std::string kSteps =
      fmt::format("a list of 1 to {} global steps, increasing", kMaxBoundaries);
  const std::vector<Field> steps = listItems(boundaries, kSteps);
  if (steps.empty() || steps.size() > kMaxBoundaries) failExpected(boundaries, kSteps);
  for (const Field& item : steps) {
    const int64_t step = readInt(item, 0);
    if (!rate.boundaries.empty() && step <= rate.boundaries.back())
      fail(item, fmt::format("expected a step after {} (boundaries increase), got {}",
                             rate.boundaries.back(), step));
    rate.boundaries.push_back(step);
  }
  const Field values = fields.get("values", "required with decay: piecewise_constant");
  const std::string expected =
      fmt::format("a list of {} positive numbers (one more than boundaries)", steps.size() + 1);
  const std::vector<Field> rates = listItems(values, expected);
  if (rates.size() != steps.size() + 1) failExpected(values, expected);
  for (const Field& value : rates)
    rate.values.push_back(readFloat(value, "a positive number", isPositive));
  rate.initial = rate.values.front();
}

LearningRateSpec readLearningRate(const Field& field) {
  using Kind = LearningRateSpec::Kind;
  LearningRateSpec rate;
  if (!field.node.IsMap()) {
    rate.initial =
        readFloat(field, "a positive number or a schedule {initial: ..., decay: ...}", isPositive);
    return rate;
  }
  Mapping fields(field);
  std::vector<std::string_view> known = {"decay"}, decays;
  for (const Schedule& schedule : schedules()) {
    decays.push_back(schedule.decay);
    for (std::string_view key : schedule.fields)
      if (std::find(known.begin(), known.end(), key) == known.end()) known.push_back(key);
  }
  fields.allowOnly(known, "a learning-rate schedule");

  // Without decay the rate is constant: {initial: 0.1} is 0.1.
  const Schedule constant{"", Kind::Constant, {"initial"}};
  const Schedule* schedule = &constant;
  if (const std::optional<Field> decay = fields.find("decay")) {
    const auto& all = schedules();
    const auto named = std::find_if(all.begin(), all.end(), [&decay](const Schedule& s) {
      return isText(decay->node) && decay->node.Scalar() == s.decay;
    });
    if (named == all.end()) failExpected(*decay, "one of " + joined(decays));
    schedule = &*named;
  }
  // Another schedule's field names the schedules that take it.
  for (std::string_view key : known) {
    const std::optional<Field> f = fields.find(key);
    const auto& own = schedule->fields;
    if (key == "decay" || !f || std::find(own.begin(), own.end(), key) != own.end()) continue;
    if (key == "initial")  // refused by piecewise_constant alone
      fail(*f,
           "not used with decay: piecewise_constant, whose first value is the rate up to the "
           "first boundary");
    std::vector<std::string_view> takers;
    for (const Schedule& other : schedules())
      if (std::find(other.fields.begin(), other.fields.end(), key) != other.fields.end())
        takers.push_back(other.decay);
    std::string names;
    for (size_t i = 0; i < takers.size(); ++i)
      names += (i == 0 ? "" : i + 1 == takers.size() ? " or " : ", ") + std::string(takers[i]);
    fail(*f, "only meaningful with decay: " + names);
  }

  rate.kind = schedule->kind;
  const std::string why = fmt::format("required with decay: {}", schedule->decay);
  if (rate.kind == Kind::PiecewiseConstant) {
    readPiecewise(fields, rate);
    return rate;
  }
  rate.initial = readFloat(fields.get("initial", rate.kind == Kind::Constant ? "" : why),
                           "a positive number", isPositive);
  if (rate.kind == Kind::Constant) return rate;
  rate.decay_steps = readInt(fields.get("decay_steps", why), 1);
  if (rate.kind == Kind::ExponentialDecay || rate.kind == Kind::InverseTimeDecay) {
    rate.decay_rate = readFloat(fields.get("decay_rate", why), "a positive number", isPositive);
    if (auto f = fields.find("staircase")) rate.staircase = readBool(*f);
  }
  if (rate.kind == Kind::PolynomialDecay) {
    if (auto f = fields.find("end_learning_rate"))
      rate.end_learning_rate = readFloat(*f, "a non-negative number", isNonNegative);
    if (auto f = fields.find("power")) rate.power = readFloat(*f, "a positive number", isPositive);
    if (auto f = fields.find("cycle")) rate.cycle = readBool(*f);
  }
  if (rate.kind == Kind::CosineDecay) {
    if (auto f = fields.find("alpha")) rate.alpha = readFloat(*f, "a number in [0, 1)", isFraction);
  }
  return rate;
}

// `loss: softmax_cross_entropy`, or a mapping that adds the loss's options:
// `loss: {type: softmax_cross_entropy, label_smoothing: 0.1}`.
void readLoss(const Field& field, ModelSpec& spec) {
  const Choices<LossKind> kinds = {{"softmax_cross_entropy", LossKind::SoftmaxCrossEntropy},
                                   {"mse", LossKind::MeanSquaredError}};
  if (!field.node.IsMap()) {
    spec.loss = readChoice<LossKind>(field, kinds);
    return;
  }
  Mapping fields(field);
  fields.allowOnly({"type", "label_smoothing"}, "the loss");
  spec.loss = readChoice<LossKind>(fields.get("type"), kinds);
  if (auto f = fields.find("label_smoothing")) {
    if (spec.loss != LossKind::SoftmaxCrossEntropy)
      fail(*f, "only meaningful with type: softmax_cross_entropy");
    spec.label_smoothing = readFloat(*f, "a number in [0, 1)", isFraction);
  }
}

// The optimizers by their `type` word: what readOptimizer takes and
// optimizerName gives.
const Choices<OptimizerSpec::Kind> kOptimizerKinds = {{"sgd", OptimizerSpec::Kind::Sgd},
                                                      {"momentum", OptimizerSpec::Kind::Momentum},
                                                      {"adagrad", OptimizerSpec::Kind::Adagrad},
                                                      {"adam", OptimizerSpec::Kind::Adam},
                                                      {"rmsprop", OptimizerSpec::Kind::RmsProp}};

void readOptimizer(const Field& field, OptimizerSpec& optimizer, LearningRateSpec& rate) {
  using Kind = OptimizerSpec::Kind;
  Mapping fields(field);
  const std::vector<std::string_view> common = {"type", "learning_rate", "weight_decay",
                                                "clip_global_norm"};
  if (!fields.find("type")) {
    fields.allowOnly(
        {"type", "learning_rate", "weight_decay", "clip_global_norm", "momentum", "nesterov",
         "initial_accumulator", "beta1", "beta2", "rho", "centered", "initial_rms", "epsilon"},
        "an optimizer");
  }
  std::vector<std::string_view> types;
  for (const auto& choice : kOptimizerKinds) types.push_back(choice.first);
  const Field type = fields.get("type", "one of " + joined(types));
  optimizer.kind = readChoice<Kind>(type, kOptimizerKinds);
  std::vector<std::string_view> known = common;
  switch (optimizer.kind) {
    case Kind::Sgd:
      break;
    case Kind::Momentum:
      known.insert(known.end(), {"momentum", "nesterov"});
      break;
    case Kind::Adagrad:
      known.insert(known.end(), {"initial_accumulator", "epsilon"});
      break;
    case Kind::Adam:
      known.insert(known.end(), {"beta1", "beta2", "epsilon"});
      break;
    case Kind::RmsProp:
      known.insert(known.end(), {"rho", "momentum", "centered", "initial_rms", "epsilon"});
      // TensorFlow 1's name of rho, which the spelling check would not reach.
      if (auto f = fields.find("decay"))
        fail(*f,
             "unknown field of the rmsprop optimizer: TensorFlow 1's decay is rho here (the "
             "mean square's decay; a decaying learning rate is a learning_rate schedule)");
      // tf.compat.v1.train.RMSPropOptimizer's defaults where they differ
      // from the other optimizers'.
      optimizer.momentum = 0.0f;
      optimizer.epsilon = 1e-10f;
      break;
  }
  fields.allowOnly(known, "the " + type.node.Scalar() + " optimizer");

  rate = readLearningRate(fields.get("learning_rate"));
  if (auto f = fields.find("weight_decay"))
    optimizer.weight_decay = readFloat(*f, "a non-negative number", isNonNegative);
  if (auto f = fields.find("clip_global_norm"))
    optimizer.clip_global_norm = readFloat(*f, "a positive number", isPositive);
  if (auto f = fields.find("momentum"))
    optimizer.momentum = readFloat(*f, "a number in [0, 1)", isFraction);
  if (auto f = fields.find("nesterov")) optimizer.nesterov = readBool(*f);
  if (auto f = fields.find("initial_accumulator"))
    optimizer.initial_accumulator = readFloat(*f, "a positive number", isPositive);
  if (auto f = fields.find("beta1"))
    optimizer.beta1 = readFloat(*f, "a number in [0, 1)", isFraction);
  if (auto f = fields.find("beta2"))
    optimizer.beta2 = readFloat(*f, "a number in [0, 1)", isFraction);
  if (auto f = fields.find("rho")) optimizer.rho = readFloat(*f, "a number in [0, 1)", isFraction);
  if (auto f = fields.find("centered")) optimizer.centered = readBool(*f);
  if (auto f = fields.find("initial_rms"))
    optimizer.initial_rms = readFloat(*f, "a non-negative number", isNonNegative);
  if (auto f = fields.find("epsilon"))
    optimizer.epsilon = readFloat(*f, "a positive number", isPositive);
}

MovingAverageSpec readMovingAverage(const Field& field) {
  Mapping fields(field);
  fields.allowOnly({"decay", "num_updates"}, "moving_average");
  MovingAverageSpec average;
  average.decay = readFloat(fields.get("decay"), "a number in (0, 1)",
                            [](double v) { return v > 0.0 && v < 1.0; });
  if (auto f = fields.find("num_updates")) average.num_updates = readBool(*f);
  return average;
}

// An image's [height, width]: a crop's window, a resize's size.
std::pair<int64_t, int64_t> readHeightWidth(const Field& field) {
  const std::vector<Field> sides = listItems(field, "[height, width]");
  if (sides.size() != 2) failExpected(field, "[height, width], two positive integers");
  return {readInt(sides[0], 1, kMaxDimension), readInt(sides[1], 1, kMaxDimension)};
}

// data.train.resize or data.test.resize: a method, or {method, size}, or
// a test set's {method, shorter_side, round} or {method,
// central_fraction}. A size other than the model's input is for images
// the model takes a window of; training images need one (resized to the
// input, they would be the window itself), but for a random box or scale,
// drawn on each image at its own size without one.
void readResize(const Field& field, const Shape& input, const Augmentation& augment, bool training,
                DataFiles& source) {
  const auto readMethod = [](const Field& f) {
    return readChoice<DataFiles::Resize>(f,
                                         {{"bilinear", DataFiles::Resize::Bilinear},
                                          {"legacy_bilinear", DataFiles::Resize::LegacyBilinear}});
  };
  std::optional<Field> size, shorter_side, round, central_fraction;
  if (field.node.IsMap()) {
    Mapping fields(field);
    fields.allowOnly({"method", "size", "shorter_side", "round", "central_fraction"}, "a resize");
    source.resize = DataFiles::Resize::Bilinear;
    if (auto f = fields.find("method")) source.resize = readMethod(*f);
    size = fields.find("size");
    shorter_side = fields.find("shorter_side");
    round = fields.find("round");
    central_fraction = fields.find("central_fraction");
  } else {
    source.resize = readMethod(field);
  }
  if (input.size() != 3 || (input[2] != 1 && input[2] != 3))
    fail(field,
         "expected an input of [height, width, 1] or [height, width, 3] to resize images to, "
         "got " +
             shapeToString(input));
  if (round && !shorter_side)
    fail(*round, "only allowed with shorter_side (how each side of its resize is rounded)");
  if (central_fraction) {
    if (training)
      fail(*central_fraction,
           "expected it of a test set only (data.test.resize): a training set draws its crops, "
           "data.augment.random_crop");
    if (size || shorter_side)
      fail(size ? *size : *shorter_side,
           "expected one of size, shorter_side and central_fraction, not two");
    // In double, as TensorFlow 1's tf.image.central_crop reckons with it.
    source.resize_central_fraction =
        readNumber(*central_fraction, "a number above 0 and up to 1 (of each side, kept)",
                   [](double v) { return v > 0.0 && v <= 1.0; });
    return;
  }
  if (shorter_side) {
    // Each image then keeps its own aspect, and so its own size, of which
    // only the centre window is kept: evaluation's.
    if (training)
      fail(*shorter_side,
           "expected it of a test set only (data.test.resize): a training set draws a side for "
           "each image, data.augment.random_crop.shorter_side: [lower, upper]");
    if (size) fail(*size, "expected a size or a shorter_side, not both");
    // Bounded so that float keeps the shorter side exact (sizeWithShorterSide).
    source.resize_shorter_side = readInt(*shorter_side, 1, kMaxShorterSide);
    if (round)
      source.resize_rounding = readChoice<SideRounding>(
          *round, {{"nearest", SideRounding::Nearest}, {"down", SideRounding::Down}});
    if (source.resize_shorter_side < std::max(input[0], input[1]))
      fail(*shorter_side,
           fmt::format("expected a side no shorter than the model's input's height and width "
                       "[{}, {}], the centre window each image gives, got {}",
                       input[0], input[1], source.resize_shorter_side));
    // Cut down, a side may come out a pixel short (SideRounding::Down).
    if (source.resize_rounding == SideRounding::Down &&
        source.resize_shorter_side == std::max(input[0], input[1]))
      fail(*shorter_side,
           fmt::format("expected a side longer than the model's input's height and width "
                       "[{}, {}] with round: down, which may cut it a pixel short, got {}",
                       input[0], input[1], source.resize_shorter_side));
    return;
  }
  if (training && augment.scales()) {
    if (size)
      fail(*size,
           "expected no size: each training image is resized from its own size to the side "
           "drawn for it (data.augment.random_crop.shorter_side)");
    source.own_sizes = true;
    return;
  }
  const bool window = augment.crop_height > 0;
  if (!size) {
    // Inception's boxes, of each image as decoded.
    if (training && augment.boxes()) {
      source.own_sizes = true;
      return;
    }
    if (window && training)
      fail(field, fmt::format("expected a size to resize to, {{size: [H, W]}}, with a crop's "
                              "window (data.augment.random_crop.size): without one every image "
                              "would be resized to the window [{}, {}] itself (a crop's padding "
                              "alone crops images resized to the input; a random box or "
                              "shorter_side is drawn on each image at its own size)",
                              input[0], input[1]));
    return;
  }
  std::tie(source.resize_height, source.resize_width) = readHeightWidth(*size);
  if (!window && (source.resize_height != input[0] || source.resize_width != input[1]))
    fail(*size, fmt::format("expected the model's input height and width [{}, {}] (a size of "
                            "its own is for images the model takes a window of: "
                            "data.augment.random_crop.size), got [{}, {}]",
                            input[0], input[1], source.resize_height, source.resize_width));
  // A test image smaller than the window is padded for evaluation; a
  // training image, padded, must hold every window drawn, and more than one.
  if (!window || !training) return;
  const int64_t padding = augment.crop_padding;
  if (source.resize_height + 2 * padding < augment.crop_height ||
      source.resize_width + 2 * padding < augment.crop_width)
    fail(*size, fmt::format("expected a size that holds the window [{}, {}] (padded by {} on "
                            "every side: data.augment.random_crop), got [{}, {}]",
                            augment.crop_height, augment.crop_width, padding, source.resize_height,
                            source.resize_width));
  // A box of an image of the window's size is resized to the window.
  if (!augment.boxes() && source.resize_height + 2 * padding == augment.crop_height &&
      source.resize_width + 2 * padding == augment.crop_width)
    fail(*size, fmt::format("expected a size that, padded by {} on every side, is larger than "
                            "the window [{}, {}]: every image would be the window itself",
                            padding, augment.crop_height, augment.crop_width));
}

// data.train or data.test (`training` false): IDX files (images, labels) or
// TFRecord files of tf.train.Example (tfrecords and the two features'
// names), for a model whose input is `input`, distorted by `augment`. The
// files must be there unless `files` says they need not (SpecFiles).
DataFiles readDataFiles(const Field& field, const fs::path& spec_dir, const Shape& input,
                        const Augmentation& augment, bool training, SpecFiles files) {
  const bool need_files = files == SpecFiles::All || !training;
  Mapping fields(field);
  fields.allowOnly({"images", "labels", "tfrecords", "image_feature", "label_feature", "resize",
                    "limit", "in_memory"},
                   "a data set");
  DataFiles source;
  const std::optional<Field> tfrecords = fields.find("tfrecords");
  if (tfrecords) {
    source.format = DataFiles::Format::TfRecord;
    for (const char* idx_field : {"images", "labels"})
      if (auto f = fields.find(idx_field))
        fail(*f, "expected either images and labels (IDX files) or tfrecords, got both");
    std::vector<Field> items{*tfrecords};
    if (tfrecords->node.IsSequence()) {
      items = listItems(*tfrecords, "a path, a glob pattern or a list of them");
      if (items.empty()) failExpected(*tfrecords, "a path, a glob pattern or a list of them");
    }
    // A file under two names (a link, a path through one) is still listed
    // twice: each existing file is known by its device and inode.
    std::map<std::pair<dev_t, ino_t>, std::string> listed;
    for (const Field& item : items) {
      for (std::string& file : need_files ? readExistingFiles(item, spec_dir)
                                          : std::vector{resolvePath(item, spec_dir)}) {
        if (std::find(source.records.begin(), source.records.end(), file) != source.records.end())
          fail(item, "lists '" + printable(file) + "' a second time");
        struct stat status {};
        if (::stat(file.c_str(), &status) == 0) {
          const auto [at, added] = listed.emplace(std::pair{status.st_dev, status.st_ino}, file);
          if (!added)
            fail(item, "lists '" + printable(file) + "', the same file as '" +
                           printable(at->second) + "', a second time");
        }
        source.records.push_back(std::move(file));
      }
    }
    if (auto f = fields.find("image_feature"))
      source.image_feature = readText(*f, "a feature name");
    if (auto f = fields.find("label_feature"))
      source.label_feature = readText(*f, "a feature name");
    if (source.image_feature == source.label_feature)
      fail(fields.field(), "expected two different features for the image and the label, got '" +
                               printable(source.image_feature) + "' for both");
    if (auto f = fields.find("resize")) readResize(*f, input, augment, training, source);
    if (auto f = fields.find("in_memory")) source.in_memory = readBool(*f);
    if (training && augment.scales() && source.resize == DataFiles::Resize::None)
      fail(field,
           "expected a resize method, resize: bilinear or legacy_bilinear, for the side drawn "
           "for each training image (data.augment.random_crop.shorter_side)");
    if (source.own_sizes && source.in_memory)
      fail(fields.find("in_memory").value_or(field),
           std::string("expected in_memory: false: each training image keeps its own size, "
                       "decoded from its file as it is gathered, ") +
               (augment.scales()
                    ? "to be resized to the side drawn for it "
                      "(data.augment.random_crop.shorter_side)"
                    : "for a box of it (data.augment.random_crop's area and aspect_ratio); or "
                      "resize: {size: [H, W]}, every image resized to one size first"));
  } else {
    if (training && augment.scales())
      fail(field,
           "expected tfrecords of PNG or JPEG images: IDX images are of one size, and "
           "data.augment.random_crop.shorter_side resizes each image from its own");
    for (const char* tfrecord_field : {"image_feature", "label_feature", "resize", "in_memory"})
      if (auto f = fields.find(tfrecord_field)) fail(*f, "only allowed with tfrecords");
    const Field images = fields.get("images", "or tfrecords, for TFRecord files");
    const Field labels = fields.get("labels");
    source.images = need_files ? readExistingFile(images, spec_dir) : resolvePath(images, spec_dir);
    source.labels = need_files ? readExistingFile(labels, spec_dir) : resolvePath(labels, spec_dir);
  }
  if (auto f = fields.find("limit")) source.limit = readInt(*f, 0);
  source.location = field.where;
  return source;
}

// The test set has points / 5 points, so fewer than 5 would leave it empty;
// the cap keeps a typo from asking for terabytes.
constexpr int64_t kMinSyntheticPoints = 5;
constexpr int64_t kMaxSyntheticPoints = 100'000'000;

SyntheticRegressionSpec readSynthetic(const Field& field) {
  Mapping fields(field);
  fields.allowOnly({"type", "points", "x_min", "x_max", "noise_stddev"}, "a synthetic data set");
  readChoice<DataSpec::Kind>(fields.get("type", "regression"),
                             {{"regression", DataSpec::Kind::SyntheticRegression}});
  SyntheticRegressionSpec synthetic;
  if (auto f = fields.find("points"))
    synthetic.points = readInt(*f, kMinSyntheticPoints, kMaxSyntheticPoints);
  // Bounded far beyond any use, so that every target, x^2 + noise, and its
  // squared error stay finite in float.
  constexpr const char* kWithinAMillion = "a number from -1e6 to 1e6";
  const auto within_a_million = [](double v) { return v >= -1e6 && v <= 1e6; };
  if (auto f = fields.find("x_min"))
    synthetic.x_min = readFloat(*f, kWithinAMillion, within_a_million);
  if (auto f = fields.find("x_max"))
    synthetic.x_max = readFloat(*f, kWithinAMillion, within_a_million);
  if (synthetic.x_max <= synthetic.x_min) {
    const std::optional<Field> x_max = fields.find("x_max");
    fail(x_max ? *x_max : fields.field(),
         "expected x_max greater than x_min, got x_min = " + formatNumber(synthetic.x_min) +
             " and x_max = " + formatNumber(synthetic.x_max));
  }
  if (auto f = fields.find("noise_stddev"))
    synthetic.noise_stddev = readFloat(*f, "a non-negative number up to 1e6",
                                       [](double v) { return v >= 0.0 && v <= 1e6; });
  return synthetic;
}

// data.prefetch_batches: `auto` (unset) or a count of batches.
std::optional<int> readPrefetchBatches(const Field& field) {
  if (isText(field.node) && field.node.Scalar() == "auto") return std::nullopt;
  int64_t count = 0;
  if (isPlainOr(field.node, "int") && parseInt(field.node.Scalar(), count) && count >= 0 &&
      count <= 1024)
    return int(count);
  failExpected(field, "auto or an integer from 0 to 1024");
}

// A [lower, upper) range of data.augment's factors, 0 <= lower < upper <= 100.
std::pair<float, float> readFactorRange(const Field& field) {
  const std::vector<Field> bounds = listItems(field, "[lower, upper]");
  if (bounds.size() != 2) failExpected(field, "[lower, upper], two numbers");
  const float lower = readFloat(bounds[0], "a number from 0 to 100",
                                [](double v) { return v >= 0.0 && v <= 100.0; });
  const float upper = readFloat(bounds[1], "a positive number up to 100",
                                [](double v) { return v > 0.0 && v <= 100.0; });
  if (upper <= lower)
    fail(bounds[1], "expected an upper bound greater than the lower " + formatNumber(lower) +
                        ", got " + formatNumber(upper));
  return {lower, upper};
}

// A [lower, upper] range of a random_crop box's area or aspect ratio, each
// bound as `ok` says; the bounds may be equal.
std::pair<float, float> readBoxRange(const Field& field, std::string_view expected,
                                     bool (*ok)(double)) {
  const std::vector<Field> bounds = listItems(field, "[lower, upper]");
  if (bounds.size() != 2) failExpected(field, "[lower, upper], two numbers");
  const float lower = readFloat(bounds[0], expected, ok);
  const float upper = readFloat(bounds[1], expected, ok);
  if (upper < lower)
    fail(bounds[1], "expected an upper bound no less than the lower " + formatNumber(lower) +
                        ", got " + formatNumber(upper));
  return {lower, upper};
}

// data.augment.random_crop's area and aspect_ratio, where either is given:
// a box of the image resized to the window.
void readRandomBox(const Mapping& crop, const Field& field, Augmentation& augment) {
  const auto area = crop.find("area");
  const auto aspect = crop.find("aspect_ratio");
  if (!area && !aspect) return;
  // inception_preprocessing's distorted_bounding_box_crop, where one is not given.
  augment.box_area_lower = 0.05f;
  augment.box_area_upper = 1.0f;
  augment.box_aspect_lower = 0.75f;
  augment.box_aspect_upper = 1.33f;
  if (area)
    std::tie(augment.box_area_lower, augment.box_area_upper) =
        readBoxRange(*area, "a number above 0 and up to 1 (a fraction of the image's area)",
                     [](double v) { return v > 0.0 && v <= 1.0; });
  if (aspect)
    std::tie(augment.box_aspect_lower, augment.box_aspect_upper) =
        readBoxRange(*aspect, "a number from 0.01 to 100 (width over height)",
                     [](double v) { return v >= 0.01 && v <= 100.0; });
  if (augment.crop_height == 0)
    fail(field,
         "expected a size, [height, width], to resize a box of random area and aspect "
         "ratio to (area, aspect_ratio), got none");
  if (auto padding = crop.find("padding"))
    fail(*padding,
         "expected no padding with a box of random area and aspect ratio (area, "
         "aspect_ratio): the box lies inside the image");
}

// data.augment.random_crop's shorter_side, where it is given: each image
// resized in proportion to a side drawn for it before its window is taken.
void readRandomScale(const Mapping& crop, const Field& field, Augmentation& augment) {
  const auto side = crop.find("shorter_side");
  if (!side) return;
  const std::vector<Field> bounds = listItems(*side, "[lower, upper]");
  if (bounds.size() != 2) failExpected(*side, "[lower, upper], two whole numbers of pixels");
  // Bounded as data.test.resize's shorter_side.
  augment.scale_lower = readInt(bounds[0], 1, kMaxShorterSide);
  augment.scale_upper = readInt(bounds[1], 1, kMaxShorterSide);
  if (augment.scale_upper < augment.scale_lower)
    fail(bounds[1], fmt::format("expected an upper bound no less than the lower {}, got {}",
                                augment.scale_lower, augment.scale_upper));
  if (augment.crop_height == 0)
    fail(field,
         "expected a size, [height, width], the window to take of each image resized to a "
         "side in shorter_side, got none");
  if (augment.scale_lower < std::max(augment.crop_height, augment.crop_width))
    fail(bounds[0], fmt::format("expected a side no shorter than the window's height and width "
                                "[{}, {}], which every image resized must hold, got {}",
                                augment.crop_height, augment.crop_width, augment.scale_lower));
  if (augment.boxes())
    fail(*side, "expected either a box (area, aspect_ratio) or shorter_side, not both");
  if (auto padding = crop.find("padding"))
    fail(*padding,
         "expected no padding with shorter_side: every image is resized to hold the window");
}

// data.augment.random_crop: {padding: P, size: [h, w]}, either or both;
// {size: [h, w], area: [a, b], aspect_ratio: [r, s]}, a box resized to the
// size; or {size: [h, w], shorter_side: [a, b]}, a window of each image
// resized to a side in [a, b]. A window's size is the model's input when
// that is an image.
void readRandomCrop(const Field& field, const Shape& input, Augmentation& augment) {
  Mapping crop(field);
  crop.allowOnly({"padding", "size", "area", "aspect_ratio", "shorter_side"},
                 "data.augment.random_crop");
  if (auto f = crop.find("padding")) {
    augment.crop_padding = readInt(*f, 1, kMaxDimension);
    augment.crop_padding_location = f->where;
  }
  if (auto f = crop.find("size")) {
    std::tie(augment.crop_height, augment.crop_width) = readHeightWidth(*f);
    augment.crop_size_location = f->where;
    if (input.size() == 3 && (input[0] != augment.crop_height || input[1] != augment.crop_width))
      fail(*f, fmt::format("expected the model's input height and width [{}, {}] (the window is "
                           "what the model takes), got [{}, {}]",
                           input[0], input[1], augment.crop_height, augment.crop_width));
  }
  // Padding of a window's side or more would leave some windows holding
  // padding alone, zeros the model would learn nothing from. (A flat input
  // says no window: the data's images do, checked as they load.)
  if (auto f = crop.find("padding");
      f && input.size() == 3 &&
      (augment.crop_padding >= input[0] || augment.crop_padding >= input[1]))
    fail(*f, fmt::format("expected padding less than the window's height and width [{}, {}] "
                         "(the model's input), so that every window holds some of the image, "
                         "got {}",
                         input[0], input[1], augment.crop_padding));
  readRandomBox(crop, field, augment);
  readRandomScale(crop, field, augment);
  if (!augment.crops()) fail(field, "expected padding, size or both, got neither");
}

// data.augment: TensorFlow 1's random image distortions, each optional.
Augmentation readAugmentation(const Field& field, const Shape& input) {
  Mapping fields(field);
  fields.allowOnly(
      {"random_crop", "flip_left_right", "brightness", "saturation", "hue", "contrast"},
      "data.augment");
  Augmentation augment;
  augment.location = field.where;
  if (auto f = fields.find("random_crop")) readRandomCrop(*f, input, augment);
  if (auto f = fields.find("flip_left_right")) augment.flip_left_right = readBool(*f);
  // Bounded far beyond any use (an image's values are pixel / 255), so that
  // a draw cannot overflow to inf.
  if (auto f = fields.find("brightness"))
    augment.brightness = readFloat(*f, "a positive number up to 100 (the largest change)",
                                   [](double v) { return v > 0.0 && v <= 100.0; });
  if (auto f = fields.find("saturation")) {
    std::tie(augment.saturation_lower, augment.saturation_upper) = readFactorRange(*f);
    augment.colours_location = f->where;
  }
  // As tf.image.random_hue: a hue is a turn, half of one the most a delta can be.
  if (auto f = fields.find("hue")) {
    augment.hue = readFloat(*f, "a positive number up to 0.5 (the largest change, in turns)",
                            [](double v) { return v > 0.0 && v <= 0.5; });
    if (augment.saturation_upper == 0.0f) augment.colours_location = f->where;
  }
  if (auto f = fields.find("contrast"))
    std::tie(augment.contrast_lower, augment.contrast_upper) = readFactorRange(*f);
  return augment;
}

DataSpec readData(const Field& field, const fs::path& spec_dir, const Shape& input,
                  SpecFiles files) {
  Mapping fields(field);
  fields.allowOnly(
      {"train", "test", "synthetic", "batch_size", "shuffle", "shuffle_buffer", "interleave",
       "shuffle_files", "prefetch_batches", "augment", "shard_by_worker", "standardize"},
      "the data section");
  DataSpec data;
  data.location = field.where;
  const std::optional<Field> train = fields.find("train");
  const std::optional<Field> synthetic = fields.find("synthetic");
  if (train && synthetic)
    fail(*synthetic, "expected either data.train or data.synthetic, got both");
  if (!train && !synthetic) fail(field, "expected data.train or data.synthetic, got neither");
  if (train) {
    data.kind = DataSpec::Kind::Files;
    // First: how the data sets are resized depends on a crop's window.
    if (auto f = fields.find("augment")) data.augment = readAugmentation(*f, input);
    data.train = readDataFiles(*train, spec_dir, input, data.augment, /*training=*/true, files);
    if (auto f = fields.find("test"))
      data.test = readDataFiles(*f, spec_dir, input, data.augment, /*training=*/false, files);
  } else {
    data.kind = DataSpec::Kind::SyntheticRegression;
    data.synthetic = readSynthetic(*synthetic);
    data.synthetic_location = synthetic->where;
    if (auto f = fields.find("test"))
      fail(*f, "only allowed with data.train (synthetic data makes its own test set)");
    // Fields of the training set's files and images, and why synthetic data take none.
    const std::pair<const char*, const char*> files_only[] = {
        {"augment", "synthetic data are not images"},
        {"shard_by_worker", "every worker makes the synthetic data whole"},
        {"standardize", "synthetic data are not images"}};
    for (const auto& [name, why] : files_only)
      if (auto f = fields.find(name))
        fail(*f, std::string("only allowed with data.train (") + why + ")");
  }
  data.batch_size_location = field.where;
  if (auto f = fields.find("batch_size")) {
    data.batch_size = readInt(*f, 1, kMaxDimension);
    data.batch_size_location = f->where;
  }
  if (auto f = fields.find("shuffle")) data.shuffle = readBool(*f);
  if (auto f = fields.find("shuffle_buffer")) {
    data.shuffle_buffer.size = readInt(*f, 1);
    if (!data.shuffle) fail(*f, "only allowed with shuffle: true");
  }
  const std::optional<Field> interleave = fields.find("interleave");
  const std::optional<Field> shuffle_files = fields.find("shuffle_files");
  if (interleave) data.shuffle_buffer.interleave = readInt(*interleave, 1);
  if (shuffle_files) data.shuffle_buffer.shuffle_files = readBool(*shuffle_files);
  // The order of the files a buffer reads: a permutation of the whole set
  // has none, and only a set of TFRecord files has files to order.
  for (const std::optional<Field>& f : {interleave, shuffle_files}) {
    if (!f) continue;
    if (data.shuffle_buffer.size == 0)
      fail(*f,
           "only allowed with data.shuffle_buffer (without a buffer each epoch is a permutation "
           "of the whole set, whatever order its files are read in)");
    if (data.kind != DataSpec::Kind::Files || data.train.format != DataFiles::Format::TfRecord)
      fail(*f, std::string("only allowed with a training set of TFRecord files (") +
                   (data.kind == DataSpec::Kind::Files ? "data.train's IDX images are one file"
                                                       : "synthetic data are in no files") +
                   ")");
  }
  if (auto f = fields.find("shard_by_worker")) data.shard_by_worker = readBool(*f);
  if (auto f = fields.find("standardize"))
    data.standardize_per_image = readChoice<bool>(*f, {{"per_image", true}});
  if (auto f = fields.find("prefetch_batches")) data.prefetch_batches = readPrefetchBatches(*f);
  return data;
}

std::vector<std::string> readDevices(const Field& field) {
  const std::vector<Field> items = listItems(field, "a list of devices such as [cpu:0, cpu:1]");
  if (items.empty()) failExpected(field, "a non-empty list of devices");
  std::vector<DeviceName> devices;
  for (const Field& item : items) {
    DeviceName name = readDeviceName(item);
    if (const auto conflict = deviceListConflict(devices, name)) fail(item, *conflict);
    devices.push_back(std::move(name));
  }
  std::vector<std::string> names;
  for (const DeviceName& device : devices) names.push_back(device.text);
  return names;
}

TrainingSpec readTraining(const Field& field, const fs::path& spec_dir, int64_t batch_size) {
  Mapping fields(field);
  fields.allowOnly(
      {"epochs", "max_steps", "log_every", "summary_every", "eval_every", "histogram_every",
       "threads", "devices", "summary_dir", "concurrent_steps", "micro_batches", "gradient_push"},
      "the training section");
  TrainingSpec training;
  const std::optional<Field> epochs = fields.find("epochs");
  const std::optional<Field> max_steps = fields.find("max_steps");
  if (epochs && max_steps) fail(*max_steps, "expected either epochs or max_steps, got both");
  if (!epochs && !max_steps) fail(field, "expected epochs or max_steps, got neither");
  if (epochs) training.epochs = readInt(*epochs, 1, kMaxEpochs);
  if (max_steps) training.max_steps = readInt(*max_steps, 1, kMaxSteps);
  if (auto f = fields.find("log_every")) training.log_every = readInt(*f, 1);
  if (auto f = fields.find("summary_every")) training.summary_every = readInt(*f, 1);
  if (auto f = fields.find("eval_every")) training.eval_every = readInt(*f, 0);
  if (auto f = fields.find("histogram_every")) training.histogram_every = readInt(*f, 0);
  if (auto f = fields.find("threads")) training.threads = int(readInt(*f, 0, kMaxThreads));
  training.devices_location = field.where;
  training.micro_batches_location = field.where;
  if (auto f = fields.find("devices")) {
    training.devices = readDevices(*f);
    training.devices_location = f->where;
  }
  if (auto f = fields.find("summary_dir")) {
    training.summary_dir = resolvePath(*f, spec_dir);
    training.summary_dir_location = f->where;
  }
  if (auto f = fields.find("concurrent_steps")) {
    training.concurrent_steps = int(readInt(*f, 1, 64));
    training.concurrent_steps_location = f->where;
  }
  if (auto f = fields.find("micro_batches")) {
    training.micro_batches = int(readInt(*f, 1, batch_size));
    training.micro_batches_location = f->where;
    if (batch_size % training.micro_batches != 0)
      fail(*f, "expected a divisor of data.batch_size " + std::to_string(batch_size) +
                   " (micro-batches are equal shares of a batch), got " +
                   std::to_string(training.micro_batches));
  }
  if (auto f = fields.find("gradient_push")) {
    training.gradient_push = readChoice<TrainingSpec::GradientPush>(
        *f, {{"auto", TrainingSpec::GradientPush::Auto},
             {"during_backward", TrainingSpec::GradientPush::DuringBackward},
             {"after_step", TrainingSpec::GradientPush::AfterStep}});
    training.gradient_push_location = f->where;
  }
  return training;
}

InitFromSpec readInitFrom(const Field& field, const fs::path& spec_dir,
                          const std::vector<LayerSpec>& layers) {
  Mapping fields(field);
  fields.allowOnly({"checkpoint", "scope", "layers"}, "the init_from section");
  InitFromSpec init;
  init.location = field.where;
  const Field checkpoint = fields.get("checkpoint");
  init.checkpoint = resolvePath(checkpoint, spec_dir);
  init.checkpoint_location = checkpoint.where;
  std::string scope;
  if (auto f = fields.find("scope")) {
    scope = readText(*f, "a variable scope, such as net or model/tower_0");
    if (!isVariablePrefix(scope))
      failExpected(*f, "a variable scope without a leading, trailing or doubled '/', such as net");
  }
  const Field names = fields.get("layers");
  const std::vector<Field> items = listItems(names, "a list of layer names");
  if (items.empty()) failExpected(names, "a non-empty list of layer names");
  const std::unordered_map<std::string_view, size_t> layer_index = indexByName(layers);
  std::unordered_set<std::string_view> listed;
  for (const Field& item : items) {
    // A layer's name, or {name: hidden1, from: dnn/hiddenlayer_0}.
    std::optional<Field> name_field = item;
    std::string from;
    if (item.node.IsMap()) {
      Mapping layer_fields(item);
      layer_fields.allowOnly({"name", "from"}, "an init_from layer");
      name_field = layer_fields.get("name");
      if (auto f = layer_fields.find("from")) {
        from = readText(*f, "the prefix of the layer's variables in the checkpoint");
        if (!isVariablePrefix(from))
          failExpected(*f,
                       "the prefix of the layer's variables in the checkpoint, without a "
                       "leading, trailing or doubled '/', such as dnn/hiddenlayer_0");
      }
    }
    const auto found =
        isText(name_field->node) ? layer_index.find(name_field->node.Scalar()) : layer_index.end();
    if (found == layer_index.end() || !hasVariables(layers[found->second].kind))
      failExpected(*name_field, "the name of a dense or conv2d layer of this spec");
    const LayerSpec* layer = &layers[found->second];
    if (!listed.insert(layer->name).second)
      fail(*name_field, "layer " + quoted(layer->name) + " is listed twice");
    init.layers.push_back(
        {layer->name, from.empty() ? scopedVariablePrefix(scope, layer->name) : from, item.where});
  }
  return init;
}

void hashInto(uint64_t& h, uint64_t value) { h = hashCombine(h, value); }
void hashInto(uint64_t& h, std::string_view text) { h = hashCombine(h, hashString(text)); }

}  // namespace

bool hasVariables(LayerKind kind) { return kind == LayerKind::Dense || kind == LayerKind::Conv2D; }

bool trainsNothing(const ModelSpec& spec) {
  return std::none_of(spec.layers.begin(), spec.layers.end(), [](const LayerSpec& layer) {
    return hasVariables(layer.kind) && layer.trainable;
  });
}

bool isVariablePrefix(std::string_view prefix) {
  return !prefix.empty() && prefix.front() != '/' && prefix.back() != '/' &&
         prefix.find("//") == std::string_view::npos;
}

std::string scopedVariablePrefix(const std::string& scope, const std::string& layer) {
  return scope.empty() ? layer : scope + "/" + layer;
}

ModelSpec loadModelSpec(const std::string& path, SpecFiles files) {
  const YamlFile file = loadYamlFile(path, "model spec");
  std::error_code error;
  const fs::path spec_dir = fs::absolute(path, error).parent_path();

  Mapping fields(rootField(file, path));
  // The two specs of a cluster node given the other way round.
  if (auto f = fields.find("cluster"); f && !fields.find("layers"))
    fail(*f, "this is a cluster spec (a cluster section, no layers): give it to --cluster, and "
             "a model spec to --model");
  fields.allowOnly({"name", "seed", "input", "layers", "stages", "loss", "optimizer",
                    "moving_average", "data", "training", "checkpoint", "init_from"},
                   "a model spec");

  ModelSpec spec;
  spec.path = path;
  // Its file's name stands in for a missing `name`, with what a name may
  // not hold (spaces, control characters) as '_': it names directories
  // and goes into logs.
  spec.name = nameFrom(fs::path(path).stem().string());
  if (auto f = fields.find("name")) spec.name = readName(*f);
  if (auto f = fields.find("seed")) spec.seed = uint64_t(readInt(*f, 0));
  spec.input = readInput(fields.get("input"));
  spec.layers = readLayers(fields.get("layers"));
  if (auto f = fields.find("stages")) spec.stages = readStages(*f, spec.layers);
  if (auto f = fields.find("loss")) readLoss(*f, spec);
  // The loss applies the softmax to the last layer's outputs: an activation
  // there would squash the logits first and train far worse, silently. A
  // flatten, a dropout or a linear activation after it passes the values on
  // as they are, and a pooling layer keeps them in their range (a sigmoid
  // before a max_pool trained a conv net to 0.71 test accuracy against
  // 0.81), so the logits are those of the last layer before them.
  size_t logits = spec.layers.size() - 1;
  const auto passesValuesOn = [](const LayerSpec& layer) {
    return layer.kind == LayerKind::Flatten || layer.kind == LayerKind::Dropout ||
           layer.kind == LayerKind::MaxPool || layer.kind == LayerKind::AvgPool ||
           (layer.kind == LayerKind::Activation && layer.activation == Activation::Linear);
  };
  while (logits > 0 && passesValuesOn(spec.layers[logits])) --logits;
  if (spec.loss == LossKind::SoftmaxCrossEntropy &&
      spec.layers[logits].activation != Activation::Linear) {
    const Field layer = listItems(fields.get("layers"), "a list of layers")[logits];
    const std::optional<Field> activation = Mapping(layer).find("activation");
    fail(activation ? *activation : layer,
         logits + 1 == spec.layers.size()
             ? "the last layer under softmax_cross_entropy stays linear: the loss applies the "
               "softmax to its outputs, the logits; remove its activation"
             : "the layer that gives the logits under softmax_cross_entropy stays linear (the "
               "layers after it only pass its values on, or pool them): the loss applies the "
               "softmax to its outputs; remove its activation");
  }
  readOptimizer(fields.get("optimizer"), spec.optimizer, spec.learning_rate);
  if (auto f = fields.find("moving_average")) spec.optimizer.moving_average = readMovingAverage(*f);
  spec.data = readData(fields.get("data"), spec_dir, spec.input, files);
  spec.training = readTraining(fields.get("training"), spec_dir, spec.data.batch_size);
  if (spec.optimizer.clip_global_norm != 0.0f &&
      spec.training.gradient_push == TrainingSpec::GradientPush::DuringBackward)
    throwInputError(spec.training.gradient_push_location, "training.gradient_push",
                    "expected after_step or auto with optimizer.clip_global_norm, got "
                    "during_backward (the global norm needs the whole gradient before any of it "
                    "is sent)");
  if (auto f = fields.find("checkpoint")) spec.checkpoint = readCheckpoint(*f, spec_dir);
  if (auto f = fields.find("init_from")) spec.init_from = readInitFrom(*f, spec_dir, spec.layers);
  return spec;
}

std::string describeCheckpoints(const CheckpointSpec& checkpoint) {
  if (checkpoint.dir.empty()) {
    // What turned them off: the flag, or neither it nor a checkpoint
    // section (whose dir cannot be empty) given.
    const std::string why = checkpoint.dir_location.file == "--checkpoint-dir"
                                ? "--checkpoint-dir is empty"
                                : "no checkpoint section, no --checkpoint-dir";
    return "no checkpoints (" + why + "): a stop or a crash loses what this run trains";
  }
  std::string when;
  if (checkpoint.every_steps > 0) when += fmt::format(" every {} steps", checkpoint.every_steps);
  if (checkpoint.every_seconds > 0)
    when += fmt::format("{} every {} s", when.empty() ? "" : " and", checkpoint.every_seconds);
  return fmt::format("checkpoints in {}{}, keeping {}", checkpoint.dir,
                     when.empty() ? " at the end only" : when + " and at the end",
                     checkpoint.keep > 0 ? fmt::format("the newest {}", checkpoint.keep) : "all");
}

std::string summaryDirectory(const ModelSpec& spec) {
  if (!spec.training.summary_dir.empty()) return spec.training.summary_dir;
  if (spec.checkpoint.dir.empty()) return "";
  return (fs::path(spec.checkpoint.dir) / "summaries").string();
}

std::string architectureHash(const ModelSpec& spec) {
  // Type names rather than enum values are hashed, so reordering an enum
  // does not orphan existing checkpoints. Activations, dropout rates,
  // initialisers and trainable flags decide no shape and are left out.
  uint64_t h = hashString("traind.architecture.v1");
  hashInto(h, uint64_t(spec.input.size()));
  for (int64_t d : spec.input) hashInto(h, uint64_t(d));
  hashInto(h, uint64_t(spec.layers.size()));
  for (const LayerSpec& layer : spec.layers) {
    hashInto(h, layerType(layer.kind).name);
    hashInto(h, layer.name);
    switch (layer.kind) {
      case LayerKind::Dense:
        hashInto(h, uint64_t(layer.units));
        hashInto(h, uint64_t(layer.use_bias));
        break;
      case LayerKind::Conv2D:
        hashInto(h, uint64_t(layer.filters));
        hashInto(h, uint64_t(layer.use_bias));
        [[fallthrough]];
      case LayerKind::MaxPool:
      case LayerKind::AvgPool:
        for (int64_t v : layer.window) hashInto(h, uint64_t(v));
        for (int64_t v : layer.stride) hashInto(h, uint64_t(v));
        hashInto(h, layer.padding == Padding::Same ? "same" : "valid");
        break;
      case LayerKind::Flatten:
      case LayerKind::Dropout:
      case LayerKind::Activation:
        break;
    }
  }
  hashInto(h, spec.loss == LossKind::SoftmaxCrossEntropy ? "softmax_cross_entropy" : "mse");
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016" PRIx64, h);
  return hex;
}

std::string_view optimizerName(OptimizerSpec::Kind kind) {
  return choiceWord(kOptimizerKinds, kind);
}

std::string updateRule(const ModelSpec& spec) {
  using Kind = OptimizerSpec::Kind;
  const OptimizerSpec& o = spec.optimizer;
  std::string rule;
  switch (o.kind) {
    case Kind::Sgd:
      rule = "sgd";
      break;
    case Kind::Momentum:
      rule = fmt::format("momentum ({}{})", o.momentum, o.nesterov ? ", nesterov" : "");
      break;
    case Kind::Adagrad:
      rule = fmt::format("adagrad (initial_accumulator {}, epsilon {})", o.initial_accumulator,
                         o.epsilon);
      break;
    case Kind::Adam:
      rule = fmt::format("adam (beta1 {}, beta2 {}, epsilon {})", o.beta1, o.beta2, o.epsilon);
      break;
    case Kind::RmsProp:
      rule = fmt::format("rmsprop (rho {}, momentum {}, initial_rms {}, epsilon {}{})", o.rho,
                         o.momentum, o.initial_rms, o.epsilon, o.centered ? ", centered" : "");
      break;
  }
  if (o.weight_decay != 0.0f) rule += fmt::format(", weight_decay {}", o.weight_decay);
  for (const LayerSpec& layer : spec.layers)
    if (layer.weight_decay)
      rule += fmt::format(", weight_decay of {} {}", layer.name, *layer.weight_decay);
  // The ps never clips nor computes a loss, but every worker must agree:
  // one that did otherwise would push gradients of another kind into the job.
  if (o.clip_global_norm != 0.0f) rule += fmt::format(", clip_global_norm {}", o.clip_global_norm);
  if (spec.label_smoothing != 0.0f)
    rule += fmt::format(", label_smoothing {}", spec.label_smoothing);
  rule += ", learning rate " + describeLearningRate(spec.learning_rate);
  if (const auto& average = o.moving_average)
    rule += fmt::format(", moving average {}{}", average->decay,
                        average->num_updates ? " (num_updates)" : "");
  // What it leaves alone: frozen layers get no update and no average.
  std::string frozen;
  for (const LayerSpec& layer : spec.layers)
    if (!layer.trainable) frozen += (frozen.empty() ? "" : ", ") + layer.name;
  if (!frozen.empty()) rule += ", frozen " + frozen;
  return rule;
}

std::string augmentationText(const Augmentation& augment) {
  const auto range = [](float lower, float upper) {
    return "[" + formatNumber(lower) + ", " + formatNumber(upper) + "]";
  };
  std::string text;
  // A padding alone reads as it did before crops had a size: a ps compares
  // the line with its workers' (dataRule).
  if (augment.crop_height > 0) {
    text += fmt::format(" random_crop {}x{}", augment.crop_height, augment.crop_width);
    if (augment.crop_padding > 0) text += fmt::format(" padding {}", augment.crop_padding);
    if (augment.boxes())
      text += " area " + range(augment.box_area_lower, augment.box_area_upper) + " aspect_ratio " +
              range(augment.box_aspect_lower, augment.box_aspect_upper);
    if (augment.scales())
      text += fmt::format(" shorter_side [{}, {}]", augment.scale_lower, augment.scale_upper);
  } else if (augment.crop_padding > 0) {
    text += fmt::format(" random_crop {}", augment.crop_padding);
  }
  if (augment.flip_left_right) text += " flip_left_right";
  if (augment.brightness > 0.0f) text += " brightness " + formatNumber(augment.brightness);
  if (augment.saturation_upper > 0.0f)
    text += " saturation " + range(augment.saturation_lower, augment.saturation_upper);
  if (augment.hue > 0.0f) text += " hue " + formatNumber(augment.hue);
  if (augment.contrast_upper > 0.0f)
    text += " contrast " + range(augment.contrast_lower, augment.contrast_upper);
  return text.empty() ? "none" : text.substr(1);
}

std::string shuffleBufferText(const ShuffleBuffer& buffer) {
  std::string text = fmt::format("through a buffer of {}", buffer.size);
  if (buffer.interleave > 1) text += fmt::format(" from {} files at a time", buffer.interleave);
  if (buffer.shuffle_files) text += ", the files shuffled every epoch";
  return text;
}

std::string dataRule(const ModelSpec& spec) {
  std::string rule = fmt::format("batch_size {}, seed {}, {}", spec.data.batch_size, spec.seed,
                                 spec.data.shuffle ? "shuffled" : "not shuffled");
  // Added only when set, so that specs without them word it as before.
  if (spec.data.shuffle_buffer.size > 0) rule += " " + shuffleBufferText(spec.data.shuffle_buffer);
  if (spec.data.shard_by_worker) rule += ", sharded by worker";
  // Which examples there are: a worker with another limit deals out
  // another epoch order.
  if (spec.data.train.limit > 0)
    rule += fmt::format(", the first {} training examples", spec.data.train.limit);
  if (spec.data.augment.any()) rule += ", augmented: " + augmentationText(spec.data.augment);
  // The method resizes what is drawn of each image at its own size.
  const DataFiles& train = spec.data.train;
  const char* method =
      train.resize == DataFiles::Resize::LegacyBilinear ? "legacy_bilinear" : "bilinear";
  if (train.own_sizes) {
    rule += fmt::format(", training images of their own sizes, {}", method);
  } else if (train.resize != DataFiles::Resize::None) {
    rule += fmt::format(", training images resized {}", method);
    // A size that is the input's is the default's: worded as none.
    if (train.resize_height > 0 &&
        (train.resize_height != spec.input[0] || train.resize_width != spec.input[1]))
      rule += fmt::format(" to {}x{}", train.resize_height, train.resize_width);
  }
  if (spec.data.standardize_per_image) rule += ", standardized per image";
  // Which of a record's features are read: the same files, other features,
  // are other examples.
  const DataFiles defaults;
  if (train.format == DataFiles::Format::TfRecord &&
      (train.image_feature != defaults.image_feature ||
       train.label_feature != defaults.label_feature))
    rule += ", features " + quotedPrintable(train.image_feature) + " and " +
            quotedPrintable(train.label_feature);
  return rule;
}

std::string forwardRule(const ModelSpec& spec) {
  std::string rule;
  for (const LayerSpec& layer : spec.layers) {
    std::string what;
    switch (layer.kind) {
      case LayerKind::Dense:
      case LayerKind::Conv2D:
      case LayerKind::Activation:
        what = activationName(layer.activation);
        break;
      case LayerKind::Dropout:
        what = fmt::format("rate {}", layer.rate);
        break;
      case LayerKind::MaxPool:
      case LayerKind::AvgPool:
      case LayerKind::Flatten:
        continue;  // the architecture hash holds all they do
    }
    rule += (rule.empty() ? "" : ", ") + layer.name + " " + what;
  }
  return rule;
}

namespace {

// One spelling of a directory for every path to it: absolute, through no
// link, with no trailing separator (a chief restarted with `ckpt/` or a
// link's name is the same job's).
std::string directoryIdentity(const std::filesystem::path& dir) {
  // Absolute first: weakly_canonical leaves a relative path whose first
  // part is not there yet relative (a chief's first start, before it made
  // the directory, and its restart would differ).
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(dir, ec);
  std::filesystem::path resolved = std::filesystem::weakly_canonical(absolute, ec);
  if (ec) resolved = absolute.lexically_normal();
  if (!resolved.has_filename() && resolved.has_relative_path()) resolved = resolved.parent_path();
  return resolved.string();
}

}  // namespace

SpecIdentity specIdentity(const ModelSpec& spec) {
  const std::string dir =
      spec.checkpoint.dir.empty() ? std::string() : directoryIdentity(spec.checkpoint.dir);
  return {architectureHash(spec), forwardRule(spec), updateRule(spec), dataRule(spec), dir,
          /*training_set=*/{}};
}

}  // namespace traind
