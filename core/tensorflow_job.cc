#include "core/tensorflow_job.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

#include "core/error.h"
#include "core/keras_optimizer.h"
#include "core/learning_rate.h"
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
  // A Keras model saved with its optimizer, or a TensorFlow 1 job's Saver.
  const std::optional<KerasOptimizerState> keras = KerasOptimizerState::find(reader);
  const int64_t global_step =
      importedGlobalStep(reader, keras ? keras->stepKey() : kGlobalStep, given_step);
  Optimizer& optimizer = state.optimizer();
  const std::vector<std::string>& slots = optimizer.slotNames();
  // TensorFlow 1's name of each slot, the last part of its key.
  std::vector<std::string> tensorflow_slots;
  if (!keras)
    for (const std::string& slot : slots)
      tensorflow_slots.push_back(tensorflowSlotName(spec.optimizer, slot, names.optimizer_name));
  if (keras) keras->checkRunsSpec(spec, names.optimizer_name);
  const float rate = learningRateAt(spec.learning_rate, global_step);
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
    // Keras keeps no state for a variable it did not train: a frozen one
    // starts its state afresh.
    if (keras && !slots.empty() && !keras->trains(name)) {
      if (!v.trainable) continue;
      throw InputError(checkpoint + ": " + quotedPrintable(name) + " (for '" + v.name +
                       "') is not among the variables the job's Keras optimizer (" + keras->path() +
                       ") trained: give its layer trainable: false, or the layer's path "
                       "with --layer" +
                       inspect);
    }
    for (size_t s = 0; s < slots.size(); ++s) {
      const std::span<float> values = optimizer.slot(s).view(v);
      std::string key;
      if (keras) {
        const std::optional<std::string> kept = keras->slotKey(spec, name, slots[s]);
        if (!kept) {
          std::fill(values.begin(), values.end(), 0.0f);  // Keras' RMSprop without momentum
          continue;
        }
        key = *kept;
      } else {
        key = name + "/" + tensorflow_slots[s];
      }
      if (readInto(key, values)) {
        if (keras)
          for (const float factor = keras->slotFactor(spec, slots[s], rate); float& x : values)
            x *= factor;
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
           : keras ? "the job's Keras optimizer kept it for other variables, not this one"
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
  said.push_back(fmt::format("{} variables from {} at global step {}{}",
                             state.layout().views().size(), checkpoint, global_step,
                             given_step ? " (--global-step)" : ""));
  for (size_t s = 0; s < slots.size(); ++s)
    said.push_back(
        keras ? keras->describeSlot(spec, slots[s])
              : fmt::format("'{}' state from <variable>/{}", slots[s], tensorflow_slots[s]));
  if (keras)
    if (std::optional<std::string> job_rate = keras->describeRate(rate)) said.push_back(*job_rate);
  // What the job had under the scope that this model has no place for (a
  // layer the spec lacks, batch normalisation): said, as it is left behind.
  std::vector<std::string> left;
  const std::string under = names.scope.empty() ? "" : names.scope + "/";
  for (const std::string& tensor : reader.names())
    if (!taken.count(tensor) && tensor.starts_with(under) &&
        reader.dtypeName(tensor) == "float32" && !tensor.ends_with(kBeta1Power) &&
        !tensor.ends_with(kBeta2Power) && !(keras && keras->isBookkeeping(tensor)))
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
