#include "core/tensorflow_job.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

#include "core/error.h"
#include "core/model_state.h"
#include "core/optimizer.h"
#include "core/printable.h"
#include "core/tensorflow_checkpoint.h"

namespace traind {
namespace {

// A tf.compat.v1.train optimizer's default name, and traind's names for its
// slots in the order it makes them: the first is saved as
// "<var>/<name>", the next as "<var>/<name>_1", "<var>/<name>_2".
struct TensorflowOptimizer {
  std::string name;
  std::vector<std::string> slots;
};

TensorflowOptimizer tensorflowOptimizer(const OptimizerSpec& optimizer) {
  switch (optimizer.kind) {
    case OptimizerSpec::Kind::Sgd:
      return {"GradientDescent", {}};
    case OptimizerSpec::Kind::Momentum:
      return {"Momentum", {"momentum"}};
    case OptimizerSpec::Kind::Adagrad:
      return {"Adagrad", {"accumulator"}};
    case OptimizerSpec::Kind::Adam:
      return {"Adam", {"m", "v"}};
    case OptimizerSpec::Kind::RmsProp:
      // RMSPropOptimizer makes mg, when centered, before momentum.
      if (optimizer.centered) return {"RMSProp", {"rms", "mg", "momentum"}};
      return {"RMSProp", {"rms", "momentum"}};
  }
  throw std::logic_error("tensorflowOptimizer: an optimizer kind without a TensorFlow name");
}

std::string numberedSlotName(const std::string& base, size_t index) {
  return index == 0 ? base : fmt::format("{}_{}", base, index);
}

const std::string kGlobalStep(tensorflow_checkpoint_format::kGlobalStep);
// TensorFlow 1 Adam's powers of beta1 and beta2 (beside its slots).
constexpr const char* kBeta1Power = "beta1_power";
constexpr const char* kBeta2Power = "beta2_power";

// TensorFlow 1's name for traind's variable `variable` ("hidden1/kernel").
std::string tensorflowVariableName(const TensorflowNames& names, const std::string& variable) {
  const size_t slash = variable.rfind('/');
  const std::string layer = variable.substr(0, slash);
  const auto mapped = names.layer_sources.find(layer);
  return (mapped != names.layer_sources.end() ? mapped->second
                                              : scopedVariablePrefix(names.scope, layer)) +
         variable.substr(slash);
}

// Adam's learning-rate factor sqrt(1 - beta2^t) / (1 - beta1^t), from the
// powers TensorFlow keeps or from traind's t.
double adamFactor(double beta1_power, double beta2_power) {
  return std::sqrt(1 - beta2_power) / (1 - beta1_power);
}

// The tensor of Adam's power `name` ("beta1_power"): at the top, or the one
// under a name scope (minimize called inside tf.name_scope("train")).
std::string adamPowerTensor(const TensorflowCheckpointReader& reader, const std::string& name) {
  if (reader.contains(name)) return name;
  std::vector<std::string> scoped;
  for (const std::string& tensor : reader.names())
    if (tensor.size() > name.size() && tensor.ends_with("/" + name)) scoped.push_back(tensor);
  if (scoped.size() == 1) return scoped.front();
  std::string found;
  for (const std::string& tensor : scoped)
    found += (found.empty() ? "" : ", ") + quotedPrintable(tensor);
  throw InputError(reader.prefix().string() + ": no tensor '" + name + "'" +
                   (scoped.empty() ? ": expected TensorFlow 1 Adam's powers of beta1 and beta2 "
                                     "beside its slots"
                                   : " at the top, and several under scopes (" + found +
                                         "): the checkpoint holds more than one Adam's"));
}

// TensorFlow 1's Adam keeps beta1^t and beta2^t as variables, multiplied at
// each update; traind takes t from the global step (t = step + 1 at the next
// update). Refuses a checkpoint whose powers would give its next step
// another factor than traind's: a job whose global step did not count its
// updates (several optimizers, or none given minimize's global_step).
void checkAdamPowers(const TensorflowCheckpointReader& reader, const OptimizerSpec& adam,
                     int64_t global_step) {
  float beta1_power = 0, beta2_power = 0;
  for (auto [name, value] :
       {std::pair{kBeta1Power, &beta1_power}, std::pair{kBeta2Power, &beta2_power}})
    reader.read(adamPowerTensor(reader, name), {}, std::span<float>(value, 1));
  const double t = double(global_step) + 1;
  const double theirs = adamFactor(beta1_power, beta2_power);
  const double ours = adamFactor(std::pow(double(adam.beta1), t), std::pow(double(adam.beta2), t));
  if (!(std::abs(theirs - ours) <= 1e-4 * ours))
    throw InputError(fmt::format(
        "{}: Adam's beta1_power {} and beta2_power {} are not those of global step {} "
        "(beta1^{} = {:.6g}, beta2^{} = {:.6g} with this spec's beta1 {} and beta2 {}): "
        "traind derives Adam's bias correction from the global step, and would take other "
        "steps than TensorFlow. Did the job's global step count its updates (minimize's "
        "global_step)? Give --global-step with the number of updates made, or check the "
        "spec's beta1 and beta2",
        reader.prefix().string(), beta1_power, beta2_power, global_step, t,
        std::pow(double(adam.beta1), t), t, std::pow(double(adam.beta2), t), adam.beta1,
        adam.beta2));
}

// The step count under `key` (global_step, or Keras' iterations), or `given`.
int64_t importedGlobalStep(const TensorflowCheckpointReader& reader, const std::string& key,
                           const std::optional<int64_t>& given) {
  const std::string checkpoint = reader.prefix().string();
  if (!given && !reader.contains(key))
    throw InputError(checkpoint + ": no tensor " + quotedPrintable(key) +
                     ": the job kept no global step under that name; give --global-step");
  const int64_t step = given ? *given : reader.readInteger(key);
  if (step < 0 || step > kMaxGlobalStep)
    throw InputError(fmt::format("{}: global step {}{}: expected a step count from 0 to {}",
                                 checkpoint, step, given ? " (--global-step)" : "",
                                 kMaxGlobalStep));
  return step;
}

// Keras 3's optimizer as an object-based checkpoint holds it: under the
// checkpoint's `optimizer` (tf.train.Checkpoint(model=..., optimizer=...)),
// or a compiled model's own (model/optimizer). Its step count
// (`_iterations`), the variables it trains in order
// (`_trainable_variables`), and for each of its slots a list of variables
// in that order (Adam's `_momentums`, `_velocities`).
struct KerasOptimizer {
  std::string path;                      // "optimizer"
  std::string iterations_key;            // the step count's tensor
  std::map<std::string, size_t> places;  // a trained variable's key: its place in the lists
};

std::optional<KerasOptimizer> findKerasOptimizer(const TensorflowCheckpointReader& reader) {
  for (const std::string path : {"optimizer", "model/optimizer"}) {
    const std::optional<std::string> iterations = reader.objectKey(path + "/_iterations");
    if (!iterations) continue;
    KerasOptimizer keras{path, *iterations, {}};
    const size_t tensors = reader.names().size();  // no list holds more
    for (size_t i = 0; i < tensors; ++i) {
      const std::optional<std::string> key =
          reader.objectKey(fmt::format("{}/_trainable_variables/{}", path, i));
      if (!key) break;
      keras.places.emplace(*key, i);
    }
    return keras;
  }
  return std::nullopt;
}

// The optimizer is Keras 3's Adam (named `optimizer_name`, "adam" by
// default), and keeps nothing traind's adam has no place for; InputError
// otherwise. Keras names the step count after the optimizer
// ("adam/iteration"; "adam_1/iteration" for a process's second Adam,
// "nadam/iteration"): Nadam's and RMSprop's state come in the same lists.
// Its betas, epsilon, weight decay and clipping are in no tensor: the spec
// must say the job's.
void checkKerasAdam(const TensorflowCheckpointReader& reader, const KerasOptimizer& keras,
                    const std::string& optimizer_name) {
  const std::string checkpoint = reader.prefix().string();
  const std::string name = optimizer_name.empty() ? "adam" : optimizer_name;
  const std::string iterations = reader.objectValueName(keras.path + "/_iterations").value_or("");
  const std::string_view base = std::string_view(iterations).substr(0, iterations.rfind('/'));
  const bool numbered = base.size() > name.size() + 1 && base.starts_with(name + "_") &&
                        std::all_of(base.begin() + std::ptrdiff_t(name.size() + 1), base.end(),
                                    [](char c) { return c >= '0' && c <= '9'; });
  if (!iterations.ends_with("/iteration") || (base != name && !numbered))
    throw InputError(fmt::format(
        "{}: the job's Keras optimizer names its step count {}, not '{}/iteration': it is "
        "not Keras' Adam{}, whose state this spec's adam takes (give the optimizer's name with "
        "--optimizer-name if the job named its Adam)",
        checkpoint, quotedPrintable(iterations), name,
        optimizer_name.empty() ? "" : " named " + optimizer_name));
  static const std::set<std::string> kAdamState = {"_iterations",          "_learning_rate",
                                                   "_trainable_variables", "_variables",
                                                   "_momentums",           "_velocities"};
  // Children that hold values (Keras keeps bookkeeping without any, such
  // as _trainable_variables_indices).
  const TensorflowCheckpointReader::ObjectPaths values = reader.objectPaths();
  const auto holdsValues = [&](const std::string& child) {
    const std::string under = keras.path + "/" + child;
    return std::any_of(values.paths.begin(), values.paths.end(), [&](const auto& path) {
      return path.first == under || path.first.starts_with(under + "/");
    });
  };
  std::string more;
  for (const std::string& child : reader.objectChildren(keras.path))
    if (!kAdamState.count(child) && holdsValues(child))
      more += (more.empty() ? "" : ", ") + quotedPrintable(child);
  if (!more.empty())
    throw InputError(checkpoint + ": the job's Keras Adam kept " + more +
                     " as well (amsgrad's _velocity_hats, use_ema's moving averages, gradient "
                     "accumulation), which traind's adam has no place for");
}

// The list of Keras 3's optimizer that holds traind's slot `slot` of the
// spec's optimizer. InputError for an optimizer or a moving average whose
// state is not taken from Keras.
std::string kerasSlotList(const ModelSpec& spec, const KerasOptimizer& keras,
                          const std::string& slot, const std::string& checkpoint) {
  if (slot == Optimizer::kMovingAverageSlot)
    throw InputError(checkpoint +
                     ": a Keras optimizer's moving averages (use_ema) are not taken: drop the "
                     "spec's moving_average (its averages then start at the parameters)");
  if (spec.optimizer.kind == OptimizerSpec::Kind::Adam)
    return keras.path + (slot == "m" ? "/_momentums" : "/_velocities");
  throw InputError(checkpoint + ": a Keras 3 optimizer's state is taken for adam (and sgd, which " +
                   "keeps none), not for this spec's " + updateRule(spec) +
                   ": give the spec the job's adam, or start the state afresh (init_from takes "
                   "the parameters alone)");
}

}  // namespace

std::string tensorflowSlotName(const OptimizerSpec& optimizer, const std::string& slot,
                               const std::string& optimizer_name) {
  if (slot == Optimizer::kMovingAverageSlot) return slot;
  const TensorflowOptimizer tensorflow = tensorflowOptimizer(optimizer);
  const auto at = std::find(tensorflow.slots.begin(), tensorflow.slots.end(), slot);
  if (at == tensorflow.slots.end())
    throw std::invalid_argument("tensorflowSlotName: no slot '" + slot + "' in TensorFlow's " +
                                tensorflow.name);
  return numberedSlotName(optimizer_name.empty() ? tensorflow.name : optimizer_name,
                          size_t(at - tensorflow.slots.begin()));
}

std::vector<std::string> importTensorflowState(const TensorflowCheckpointReader& reader,
                                               const TensorflowNames& names,
                                               std::optional<int64_t> given_step,
                                               const ModelSpec& spec, ModelState& state) {
  const std::string checkpoint = reader.prefix().string();
  const std::string inspect = "; `trainctl inspect " + checkpoint + "` lists the tensors it has";
  // A Keras 3 model saved with its optimizer, or a TensorFlow 1 job's Saver.
  const std::optional<KerasOptimizer> keras_optimizer = findKerasOptimizer(reader);
  const bool keras = keras_optimizer.has_value();
  const int64_t global_step =
      importedGlobalStep(reader, keras ? keras_optimizer->iterations_key : kGlobalStep, given_step);
  Optimizer& optimizer = state.optimizer();
  const std::vector<std::string>& slots = optimizer.slotNames();
  // TensorFlow 1's slot names ("Adam_1"), or Keras 3's lists ("optimizer/_velocities").
  std::vector<std::string> slot_sources;
  for (const std::string& slot : slots)
    slot_sources.push_back(keras ? kerasSlotList(spec, *keras_optimizer, slot, checkpoint)
                                 : tensorflowSlotName(spec.optimizer, slot, names.optimizer_name));
  if (keras && !slots.empty()) checkKerasAdam(reader, *keras_optimizer, names.optimizer_name);
  // The name of a slot past this spec's optimizer's, which the job's kept
  // if it ran another variant (RMSProp centered, where the spec is not).
  const TensorflowOptimizer tensorflow = tensorflowOptimizer(spec.optimizer);
  const std::string past_slots =
      tensorflow.slots.empty() || keras
          ? ""
          : numberedSlotName(names.optimizer_name.empty() ? tensorflow.name : names.optimizer_name,
                             tensorflow.slots.size());

  std::set<std::string> taken;
  for (const VariableView& v : state.layout().views()) {
    const std::string layer = v.name.substr(0, v.name.rfind('/'));
    const auto mapped = names.layer_sources.find(layer);
    const std::string tensorflow_name = tensorflowVariableName(names, v.name);
    const size_t slash = tensorflow_name.rfind('/');
    const std::string name =
        checkpointVariableKey(reader, tensorflow_name.substr(0, slash),
                              std::string_view(tensorflow_name).substr(slash + 1));
    auto readInto = [&](const std::string& key, std::span<float> values) {
      if (!reader.contains(key)) return false;
      if (reader.shape(key) != v.shape)
        throw InputError(checkpoint + ": tensor " + quotedPrintable(key) + " is of shape " +
                         shapeToString(reader.shape(key)) + ", this model's '" + v.name + "' of " +
                         shapeToString(v.shape));
      reader.read(key, v.shape, values);
      taken.insert(key);
      return true;
    };
    if (!readInto(name, state.parameters().view(v)))
      throw InputError(
          checkpoint + ": no tensor " + quotedPrintable(name) + " for '" + v.name + "' (" +
          (mapped != names.layer_sources.end() ? "--layer " + layer + "=" + mapped->second
           : names.scope.empty()               ? std::string("no --scope")
                                               : "--scope " + names.scope) +
          ")" + inspect);
    if (!past_slots.empty() && reader.contains(name + "/" + past_slots))
      throw InputError(checkpoint + ": tensor " + quotedPrintable(name + "/" + past_slots) +
                       " is state the job's optimizer kept past what this spec's " +
                       updateRule(spec) + " keeps" +
                       (spec.optimizer.kind == OptimizerSpec::Kind::RmsProp
                            ? ": the job's RMSProp was centered; set centered: true in the spec"
                            : ": give the spec the job's optimizer and settings"));
    // Keras 3: the variable's place in its optimizer's lists; a variable
    // it did not train has none, and starts its state afresh if frozen.
    std::optional<size_t> keras_place;
    if (keras && !slots.empty()) {
      const auto place = keras_optimizer->places.find(name);
      if (place != keras_optimizer->places.end())
        keras_place = place->second;
      else if (v.trainable)
        throw InputError(checkpoint + ": " + quotedPrintable(name) + " (for '" + v.name +
                         "') is not among the variables the job's Keras optimizer trained (" +
                         keras_optimizer->path +
                         "/_trainable_variables): give its layer trainable: false, or the "
                         "layer's path with --layer" +
                         inspect);
      else
        continue;
    }
    for (size_t s = 0; s < slots.size(); ++s) {
      std::string key = name + "/" + slot_sources[s];
      if (keras) {
        const std::string path = fmt::format("{}/{}", slot_sources[s], *keras_place);
        key = reader.objectKey(path).value_or(path);
      }
      const std::span<float> values = optimizer.slot(s).view(v);
      if (readInto(key, values)) {
        Optimizer::checkReadSlot(slots[s], values, checkpoint, key);
        continue;
      }
      // TensorFlow makes no slots for a variable it does not train, and
      // its moving averages are usually of the trainable ones: a frozen
      // variable's start as a fresh run's do.
      if (!v.trainable) {
        if (slots[s] == Optimizer::kMovingAverageSlot)
          optimizer.startMovingAverage(state.parameters(), v);
        continue;
      }
      throw InputError(
          checkpoint + ": no tensor " + quotedPrintable(key) + ", the '" + slots[s] +
          "' state of this spec's " + updateRule(spec) + " for '" + v.name + "': " +
          (slots[s] == Optimizer::kMovingAverageSlot
               ? "the job kept no moving average of it (drop the spec's moving_average)"
               : "the job was trained with another optimizer, or its optimizer had "
                 "another name (give it with --optimizer-name)") +
          inspect);
    }
  }
  // Keras' Adam, as traind's, derives its bias correction from its step count.
  if (spec.optimizer.kind == OptimizerSpec::Kind::Adam && !keras)
    checkAdamPowers(reader, spec.optimizer, global_step);
  state.setGlobalStep(global_step);

  std::vector<std::string> said;
  said.push_back(fmt::format("{} variables from {} at global step {}",
                             state.layout().views().size(), checkpoint, global_step));
  for (size_t s = 0; s < slots.size(); ++s)
    said.push_back(keras ? fmt::format("'{}' state from {}/<the variable's place in "
                                       "{}/_trainable_variables>",
                                       slots[s], slot_sources[s], keras_optimizer->path)
                         : fmt::format("'{}' state from <variable>/{}", slots[s], slot_sources[s]));
  // What the job had under the scope that this model has no place for (a
  // layer the spec lacks, batch normalisation): said, as it is left behind.
  std::vector<std::string> left;
  const std::string under = names.scope.empty() ? "" : names.scope + "/";
  for (const std::string& tensor : reader.names())
    if (!taken.count(tensor) && tensor.starts_with(under) &&
        reader.dtypeName(tensor) == "float32" && !tensor.ends_with(kBeta1Power) &&
        !tensor.ends_with(kBeta2Power) &&
        !(keras && (tensor == keras_optimizer->iterations_key ||
                    reader.objectKey(keras_optimizer->path + "/_learning_rate") == tensor)))
      left.push_back(quotedPrintable(tensor));
  if (!left.empty()) {
    std::string listed;
    for (size_t i = 0; i < std::min<size_t>(left.size(), 5); ++i)
      listed += (i ? ", " : "") + left[i];
    said.push_back(fmt::format(
        "left {} float32 tensor{} of the checkpoint{} that this model has "
        "no place for: {}{}",
        left.size(), left.size() == 1 ? "" : "s", under.empty() ? "" : " under " + under, listed,
        left.size() > 5 ? ", ..." : ""));
  }
  return said;
}

std::vector<TensorflowTensor> tensorflowState(const ModelState& state, const ModelSpec& spec,
                                              const TensorflowNames& names) {
  const Optimizer& optimizer = state.optimizer();
  const std::vector<std::string>& slots = optimizer.slotNames();
  std::vector<TensorflowTensor> tensors;
  // What each TensorFlow name holds, so that two never share one.
  std::map<std::string, std::string> named;
  auto add = [&](TensorflowTensor tensor, const std::string& what) {
    if (const auto [it, fresh] = named.emplace(tensor.name, what); !fresh)
      throw InputError(it->second + " and " + what + " would both be saved as " +
                       quotedPrintable(tensor.name) +
                       ": give each layer a prefix of its own (--scope, --layer), or the "
                       "optimizer a name of its own (--optimizer-name)");
    tensors.push_back(std::move(tensor));
  };
  auto floats = [](std::span<const float> values) {
    return std::vector<float>(values.begin(), values.end());
  };
  for (const VariableView& v : state.layout().views()) {
    const std::string name = tensorflowVariableName(names, v.name);
    add({name, v.shape, floats(state.parameters().view(v)), std::nullopt}, "'" + v.name + "'");
    for (size_t s = 0; s < slots.size(); ++s)
      add({name + "/" + tensorflowSlotName(spec.optimizer, slots[s], names.optimizer_name), v.shape,
           floats(optimizer.slot(s).view(v)), std::nullopt},
          "the '" + slots[s] + "' state of '" + v.name + "'");
  }
  add({kGlobalStep, {}, {}, state.globalStep()}, "the global step");
  if (spec.optimizer.kind == OptimizerSpec::Kind::Adam) {
    // Adam's powers of its next update, t = global step + 1, as TensorFlow
    // keeps them after `global step` updates.
    const double t = double(state.globalStep()) + 1;
    for (const auto& [name, beta] : {std::pair{kBeta1Power, spec.optimizer.beta1},
                                     std::pair{kBeta2Power, spec.optimizer.beta2}})
      add({name, {}, {float(std::pow(double(beta), t))}, std::nullopt},
          std::string("Adam's ") + name);
  }
  return tensors;
}

}  // namespace traind
