#include "core/tensorflow_import.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/model_state.h"
#include "core/optimizer.h"
#include "core/printable.h"
#include "core/tensorflow_checkpoint.h"

namespace traind {
namespace {

// The names tf.compat.v1.train's optimizers give themselves by default.
std::string defaultOptimizerName(OptimizerSpec::Kind kind) {
  switch (kind) {
    case OptimizerSpec::Kind::Momentum: return "Momentum";
    case OptimizerSpec::Kind::Adagrad: return "Adagrad";
    case OptimizerSpec::Kind::Adam: return "Adam";
    case OptimizerSpec::Kind::RmsProp: return "RMSProp";
    case OptimizerSpec::Kind::Sgd: return "GradientDescent";
  }
  return "";
}

constexpr const char* kGlobalStep = "global_step";

// Adam's learning-rate factor sqrt(1 - beta2^t) / (1 - beta1^t), from the
// powers TensorFlow keeps or from traind's t.
double adamFactor(double beta1_power, double beta2_power) {
  return std::sqrt(1 - beta2_power) / (1 - beta1_power);
}

// TensorFlow 1's Adam keeps beta1^t and beta2^t as variables, multiplied at
// each update; traind takes t from the global step (t = step + 1 at the next
// update). Refuses a checkpoint whose powers would give its next step
// another factor than traind's: a job whose global step did not count its
// updates (several optimizers, or none given minimize's global_step).
void checkAdamPowers(const TensorflowCheckpointReader& reader, const OptimizerSpec& adam,
                     int64_t global_step) {
  float beta1_power = 0, beta2_power = 0;
  for (auto [name, value] : {std::pair{"beta1_power", &beta1_power}, {"beta2_power", &beta2_power}}) {
    if (!reader.contains(name))
      throw InputError(reader.prefix().string() + ": no tensor '" + name +
                       "': expected TensorFlow 1 Adam's powers of beta1 and beta2 beside its "
                       "slots");
    reader.read(name, {}, std::span<float>(value, 1));
  }
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

}  // namespace

std::string tensorflowSlotName(const OptimizerSpec& optimizer, const std::string& slot,
                               const std::string& optimizer_name) {
  if (slot == Optimizer::kMovingAverageSlot) return slot;
  const std::string base =
      optimizer_name.empty() ? defaultOptimizerName(optimizer.kind) : optimizer_name;
  // The order the optimizer makes its slots in: the first takes the bare
  // name, the next "_1", "_2" (TensorFlow makes names unique so).
  std::vector<std::string> order = Optimizer::slotNamesOf(optimizer);
  if (optimizer.kind == OptimizerSpec::Kind::RmsProp && optimizer.centered)
    order = {"rms", "mg", "momentum"};
  const auto at = std::find(order.begin(), order.end(), slot);
  const auto index = at - order.begin();
  return index == 0 ? base : fmt::format("{}_{}", base, index);
}

std::vector<std::string> importTensorflowState(const TensorflowCheckpointReader& reader,
                                               const TensorflowImport& how,
                                               const ModelSpec& spec, ModelState& state) {
  const std::string checkpoint = reader.prefix().string();
  int64_t global_step = 0;
  if (how.global_step) {
    global_step = *how.global_step;
  } else if (!reader.contains(kGlobalStep)) {
    throw InputError(checkpoint + ": no tensor 'global_step': the job kept no global step "
                                  "under that name; give --global-step");
  } else {
    global_step = reader.readInt64(kGlobalStep);
    if (global_step < 0)
      throw InputError(fmt::format("{}: global_step is {}: expected a step count >= 0",
                                   checkpoint, global_step));
  }

  Optimizer& optimizer = state.optimizer();
  const std::vector<std::string>& slots = optimizer.slotNames();
  std::vector<std::string> slot_sources;
  for (const std::string& slot : slots)
    slot_sources.push_back(tensorflowSlotName(spec.optimizer, slot, how.optimizer_name));
  for (const VariableView& v : state.layout().views()) {
    const size_t slash = v.name.rfind('/');
    const std::string layer = v.name.substr(0, slash);
    const auto mapped = how.layer_sources.find(layer);
    const std::string source = mapped != how.layer_sources.end() ? mapped->second
                               : how.scope.empty()               ? layer
                                                                 : how.scope + "/" + layer;
    const std::string name = source + v.name.substr(slash);
    auto readInto = [&](const std::string& key, std::span<float> values) {
      if (!reader.contains(key))
        return false;
      if (reader.shape(key) != v.shape)
        throw InputError(checkpoint + ": tensor " + quotedPrintable(key) + " is of shape " +
                         shapeToString(reader.shape(key)) + ", this model's '" + v.name +
                         "' of " + shapeToString(v.shape));
      reader.read(key, v.shape, values);
      return true;
    };
    if (!readInto(name, state.parameters().view(v)))
      throw InputError(checkpoint + ": no tensor " + quotedPrintable(name) + " for '" + v.name +
                       "' (" + (how.scope.empty() ? "no --scope" : "--scope " + how.scope) +
                       "); `trainctl inspect " + checkpoint + "` lists the tensors it has");
    for (size_t s = 0; s < slots.size(); ++s) {
      const std::string key = name + "/" + slot_sources[s];
      const std::span<float> values = optimizer.slot(s).view(v);
      if (readInto(key, values)) {
        if (Optimizer::slotIsSumOfSquares(slots[s])) {
          const auto negative =
              std::find_if(values.begin(), values.end(), [](float x) { return x < 0; });
          if (negative != values.end())
            throw InputError(fmt::format(
                "{}: tensor {}: element {} is {}: expected values >= 0 (a sum of squares)",
                checkpoint, quotedPrintable(key), negative - values.begin(), *negative));
        }
        continue;
      }
      // TensorFlow makes no slots for a variable it does not train.
      if (!v.trainable && slots[s] != Optimizer::kMovingAverageSlot) continue;
      throw InputError(
          checkpoint + ": no tensor " + quotedPrintable(key) + ", the '" + slots[s] +
          "' state of this spec's " + updateRule(spec) + " for '" + v.name +
          "': the job was trained with another optimizer or moving average, or its optimizer " +
          "had another name (give it with --optimizer-name); `trainctl inspect " + checkpoint +
          "` lists the tensors it has");
    }
  }
  if (spec.optimizer.kind == OptimizerSpec::Kind::Adam)
    checkAdamPowers(reader, spec.optimizer, global_step);
  state.setGlobalStep(global_step);

  std::vector<std::string> said;
  said.push_back(fmt::format("{} variables from {} at global step {}",
                             state.layout().views().size(), checkpoint, global_step));
  for (size_t s = 0; s < slots.size(); ++s)
    said.push_back(fmt::format("'{}' state from <variable>/{}", slots[s], slot_sources[s]));
  return said;
}

}  // namespace traind
