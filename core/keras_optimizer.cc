#include "core/keras_optimizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <span>

#include "core/error.h"
#include "core/optimizer.h"
#include "core/printable.h"
#include "core/tensorflow_checkpoint.h"

namespace traind {
namespace {

using Generation = KerasOptimizerState::Generation;
using Kind = OptimizerSpec::Kind;

// Keras' class for the spec's kind, said in errors.
std::string_view className(Kind kind) {
  switch (kind) {
    case Kind::Sgd:
    case Kind::Momentum:
      return "SGD";
    case Kind::Adagrad:
      return "Adagrad";
    case Kind::Adam:
      return "Adam";
    case Kind::RmsProp:
      return "RMSprop";
  }
  return "";
}

// The name Keras gives an optimizer of the spec's kind by default (its
// step count is "<name>/iteration" in Keras 3, "<name>/iter" in Keras 2;
// Keras 2's names are its classes').
std::string defaultName(Kind kind, Generation generation) {
  if (generation != Generation::Keras3) return std::string(className(kind));
  switch (kind) {
    case Kind::Sgd:
    case Kind::Momentum:
      return "sgd";
    case Kind::Adagrad:
      return "adagrad";
    case Kind::Adam:
      return "adam";
    case Kind::RmsProp:
      return "rm_sprop";
  }
  return "";
}

// Whether `base` is `name`, or `name` numbered as Keras numbers a
// process's second optimizer of a kind ("adam_1").
bool isNamed(std::string_view base, const std::string& name) {
  if (base == name) return true;
  return base.size() > name.size() + 1 && base.starts_with(name + "_") &&
         std::all_of(base.begin() + std::ptrdiff_t(name.size() + 1), base.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

// Keras 3's and 2.11's lists that hold slots, and the kinds of slot
// Keras 2.11 names their entries after ("Adam/m/hidden/kernel",
// "RMSprop/momentum/hidden/kernel").
const std::map<std::string, std::vector<std::string>>& kerasListKinds() {
  static const std::map<std::string, std::vector<std::string>> kinds = {
      {"_momentums", {"m", "momentum"}},
      {"_velocities", {"v", "velocity"}},
      {"_average_gradients", {"average_gradient"}},
      {"_accumulators", {"accumulator"}},
      {"momentums", {"m"}}};
  return kinds;
}

const std::set<std::string>& kerasLists() {
  static const std::set<std::string> lists = [] {
    std::set<std::string> names;
    for (const auto& [list, kinds] : kerasListKinds()) names.insert(list);
    return names;
  }();
  return lists;
}

// The kind Keras 2.11 names traind's slot `slot` of an optimizer of `kind`.
std::string kerasSlotKind(Kind kind, const std::string& slot) {
  if (kind == Kind::RmsProp)
    return slot == "rms" ? "velocity" : slot == "mg" ? "average_gradient" : slot;
  if (kind == Kind::Momentum) return "m";
  return slot;  // Adam's m and v, Adagrad's accumulator
}

// Keras 2's settings kept as variables beside the slots, and what of the
// spec each must be (nullopt: a setting the spec's optimizer has not, and
// Keras' optimizer of its kind keeps not: Adam its betas, RMSprop its rho
// and momentum, SGD its momentum, Adagrad none).
std::optional<float> specSetting(const OptimizerSpec& optimizer, const std::string& name) {
  if (optimizer.kind == Kind::Adam && name == "beta_1") return optimizer.beta1;
  if (optimizer.kind == Kind::Adam && name == "beta_2") return optimizer.beta2;
  if (optimizer.kind == Kind::RmsProp && name == "rho") return optimizer.rho;
  if ((optimizer.kind == Kind::RmsProp || optimizer.kind == Kind::Momentum) && name == "momentum")
    return optimizer.momentum;
  return std::nullopt;
}

// The spec's name for a Keras 2 setting.
std::string specSettingName(const std::string& name) {
  if (name == "beta_1") return "beta1";
  if (name == "beta_2") return "beta2";
  return name;
}

}  // namespace

KerasOptimizerState::KerasOptimizerState(const TensorflowCheckpointReader& reader,
                                         Generation generation, std::string path,
                                         std::string step_key)
    : reader_(&reader),
      generation_(generation),
      path_(std::move(path)),
      step_key_(std::move(step_key)) {
  bookkeeping_.insert(step_key_);
  for (const std::string name :
       {"_learning_rate", "learning_rate", "decay", "beta_1", "beta_2", "rho", "momentum"})
    if (std::optional<std::string> key = reader.objectKey(path_ + "/" + name))
      bookkeeping_.insert(*key);
}

std::optional<KerasOptimizerState> KerasOptimizerState::find(
    const TensorflowCheckpointReader& reader) {
  for (std::string path : {"optimizer", "model/optimizer"}) {
    // A LossScaleOptimizer of Keras 3 or 2.11 keeps the optimizer it wraps,
    // and its state, under inner_optimizer (Keras 2's keeps it in its own).
    for (int depth = 0; depth < 4 && reader.objectKey(path + "/inner_optimizer/_iterations");
         ++depth)
      path += "/inner_optimizer";
    if (const std::optional<std::string> iter = reader.objectKey(path + "/iter"))
      return KerasOptimizerState(reader, Generation::Keras2, path, *iter);
    const std::optional<std::string> iterations = reader.objectKey(path + "/_iterations");
    if (!iterations) continue;
    std::vector<std::string> trainable;
    const size_t tensors = reader.names().size();  // no list holds more
    for (size_t i = 0; i < tensors; ++i) {
      const std::optional<std::string> key =
          reader.objectKey(fmt::format("{}/_trainable_variables/{}", path, i));
      if (!key) break;
      trainable.push_back(*key);
    }
    // Keras 2.11 keeps its lists with no _trainable_variables: its slots
    // are named after their variables ("Adam/m/hidden/kernel" of
    // "hidden/kernel"), each variable's name held once by the model.
    const bool named =
        trainable.empty() &&
        std::any_of(kerasLists().begin(), kerasLists().end(), [&](const std::string& list) {
          return reader.objectKey(path + "/" + list + "/0");
        });
    KerasOptimizerState keras(reader, named ? Generation::Keras211 : Generation::Keras3, path,
                              *iterations);
    keras.trained_.insert(trainable.begin(), trainable.end());
    std::map<std::string, std::string> by_name;
    std::set<std::string> named_twice;
    if (named)
      for (const auto& [object_path, key] : reader.objectPaths().paths) {
        if (object_path.starts_with(path + "/")) continue;  // the optimizer's own
        const std::string name = reader.objectValueName(object_path).value_or("");
        if (const auto [at, fresh] = by_name.emplace(name, key); !fresh && at->second != key)
          named_twice.insert(name);
      }
    for (const std::string& list : kerasLists()) {
      for (size_t i = 0; i < tensors; ++i) {
        const std::string entry = fmt::format("{}/{}/{}", path, list, i);
        const std::optional<std::string> key = reader.objectKey(entry);
        if (!key) break;
        std::string variable;
        if (!named) {
          if (i < trainable.size()) variable = trainable[i];
        } else {
          const std::string name = reader.objectValueName(entry).value_or("");
          variable = keras.placeByName(list, entry, name, by_name, named_twice);
        }
        if (variable.empty()) continue;
        if (!keras.slot_keys_.emplace(std::pair{list, variable}, *key).second)
          keras.unplaced_.push_back(
              fmt::format("{} is a second '{}' of {}", entry, list, quotedPrintable(variable)));
        keras.trained_.insert(variable);
      }
    }
    return keras;
  }
  return std::nullopt;
}

std::string KerasOptimizerState::describe() const {
  const bool three = generation_ == Generation::Keras3;
  std::string kept;
  size_t kept_count = 0;
  const auto add = [&](const std::string& what) {
    if (++kept_count <= 8) kept += (kept.empty() ? "" : ", ") + quotedPrintable(what);
  };
  if (generation_ == Generation::Keras2) {
    for (const std::string& slot : reader_->objectSlotNames(path_)) add(slot);
  } else {
    for (const std::string& list : kerasLists())
      if (!reader_->objectChildren(path_ + "/" + list).empty()) add(list);
  }
  if (kept_count > 8) kept += fmt::format(", ... ({} in all)", kept_count);
  std::string named;
  if (generation_ == Generation::Keras211) {
    for (const std::string& name : job_names_)
      named += (named.empty() ? "" : ", ") + quotedPrintable(name);
    named = named.empty() ? "its slots named after no optimizer" : "its slots named after " + named;
  } else {
    named = "its step count named " +
            quotedPrintable(
                reader_->objectValueName(path_ + (three ? "/_iterations" : "/iter")).value_or(""));
  }
  const std::string step = reader_->isIntegerScalar(step_key_)
                               ? fmt::format(" at step {}", reader_->readInteger(step_key_))
                               : "";
  return fmt::format("{} optimizer under {}{}, {}; {}{}",
                     three                                 ? "Keras 3"
                     : generation_ == Generation::Keras211 ? "Keras 2.11"
                                                           : "Keras 2",
                     path_, step, named, kept.empty() ? "no slots" : "slots ",
                     kept.empty()
                         ? ""
                         : kept + (generation_ == Generation::Keras2
                                       ? ""
                                       : fmt::format(" of {} variables", trained_.size())));
}

std::string KerasOptimizerState::placeByName(const std::string& list, const std::string& entry,
                                             const std::string& name,
                                             const std::map<std::string, std::string>& by_name,
                                             const std::set<std::string>& named_twice) {
  // "[<optimizer>/]<kind>/<variable's name>", the kind one of the list's
  // ("m" or "momentum" in _momentums): every split of the name at such a
  // kind that leaves a variable's name of the model. One must, and only one.
  std::set<std::string> variables;
  std::string optimizer, kind;
  for (const std::string& candidate : kerasListKinds().at(list)) {
    for (size_t at = name.find(candidate + "/"); at != std::string::npos;
         at = name.find(candidate + "/", at + 1)) {
      if (at > 0 && name[at - 1] != '/') continue;
      const std::string variable_name = name.substr(at + candidate.size() + 1);
      const auto found = by_name.find(variable_name);
      if (found == by_name.end()) continue;
      if (named_twice.count(variable_name)) {
        unplaced_.push_back(fmt::format("{} ({}) is of {}, the name of two variables of the model",
                                        entry, quotedPrintable(name),
                                        quotedPrintable(variable_name)));
        return "";
      }
      variables.insert(found->second);
      kind = candidate;
      // The optimizer's name, the last of what comes before ("train/Adam").
      const std::string before = at > 0 ? name.substr(0, at - 1) : "";
      optimizer = before.substr(before.rfind('/') + 1);
    }
  }
  if (variables.size() != 1) {
    unplaced_.push_back(fmt::format(
        "{} ({}) is of {}", entry, quotedPrintable(name),
        variables.empty() ? "no variable of the model" : "more than one variable of the model"));
    return "";
  }
  list_kinds_[list].insert(kind);
  if (!optimizer.empty()) job_names_.insert(optimizer);
  return *variables.begin();
}

std::string KerasOptimizerState::checkpoint() const { return reader_->prefix().string(); }

std::string KerasOptimizerState::listOf(Kind kind, const std::string& slot) {
  if (slot == "m" || (slot == "momentum" && kind == Kind::RmsProp)) return "_momentums";
  if (slot == "momentum") return "momentums";  // SGD's
  if (slot == "v" || slot == "rms") return "_velocities";
  if (slot == "mg") return "_average_gradients";
  if (slot == "accumulator") return "_accumulators";
  throw std::invalid_argument("KerasOptimizerState: no Keras 3 list holds slot '" + slot + "'");
}

std::optional<float> KerasOptimizerState::setting(const std::string& name) const {
  const std::optional<std::string> key = reader_->objectKey(path_ + "/" + name);
  if (!key || reader_->dtypeName(*key) != "float32" || !reader_->shape(*key).empty())
    return std::nullopt;
  float value = 0;
  reader_->read(*key, {}, std::span<float>(&value, 1));
  return value;
}

void KerasOptimizerState::checkRunsSpec(const ModelSpec& spec,
                                        const std::string& optimizer_name) const {
  const OptimizerSpec& optimizer = spec.optimizer;
  const std::vector<std::string> slots = Optimizer::slotNamesOf(optimizer);
  if (std::find(slots.begin(), slots.end(), Optimizer::kMovingAverageSlot) != slots.end())
    throw InputError(checkpoint() +
                     ": this spec keeps moving averages (moving_average), which an import from "
                     "Keras cannot fill: a Keras checkpoint's own (use_ema) are not read. Drop "
                     "the spec's moving_average for the import; a run that turns it on later "
                     "starts the averages at the imported parameters");
  if (optimizer.kind == Kind::Sgd) return;  // keeps no state: the variables of any
  const bool lists = generation_ != Generation::Keras2;

  // Named as Keras names the spec's optimizer: Nadam's, Adamax's and
  // RMSprop's state come in the lists and slots Adam's does. Keras 3 and
  // Keras 2 name the step count after the optimizer ("adam/iteration",
  // "Adam/iter"), Keras 2.11 the slots ("Adam/m/hidden/kernel"). A Keras 2
  // step count made before training (optimizer.iterations read first) is
  // "iter" alone: the slots must tell.
  const std::string name =
      optimizer_name.empty() ? defaultName(optimizer.kind, generation_) : optimizer_name;
  const auto refuseName = [&](const std::string& what, const std::string& expected) {
    throw InputError(fmt::format(
        "{}: the job's Keras optimizer names {}, not {}: it is not Keras' {}{}, whose state "
        "this spec's {} takes (give the optimizer's name with --optimizer-name if the job "
        "named it)",
        checkpoint(), what, expected, className(optimizer.kind),
        optimizer_name.empty() ? "" : " named " + optimizer_name, optimizerName(optimizer.kind)));
  };
  if (generation_ == Generation::Keras211) {
    if (!unplaced_.empty()) {
      std::string listed;
      for (size_t i = 0; i < std::min<size_t>(unplaced_.size(), 3); ++i)
        listed += (i ? "; " : "") + unplaced_[i];
      throw InputError(fmt::format(
          "{}: the job's Keras 2.11 optimizer names its slots after their variables, and {} of "
          "them name none this import can place: {}{}",
          checkpoint(), unplaced_.size(), listed, unplaced_.size() > 3 ? "; ..." : ""));
    }
    // Slots made outside the optimizer's name ("m/hidden/kernel") name none.
    for (const std::string& job_name : job_names_)
      if (!isNamed(job_name, name))
        refuseName("its slots '" + job_name + "/...'", "'" + name + "/...'");
  } else {
    const bool three = generation_ == Generation::Keras3;
    const std::string step =
        reader_->objectValueName(path_ + (three ? "/_iterations" : "/iter")).value_or("");
    const std::string suffix = three ? "/iteration" : "/iter";
    const std::string_view base = std::string_view(step).substr(0, step.rfind('/'));
    if (!(!three && step == "iter") && (!step.ends_with(suffix) || !isNamed(base, name)))
      refuseName("its step count " + quotedPrintable(step), "'" + name + suffix + "'");
  }

  // What the job kept, in its generation's terms: the lists that hold
  // values and the optimizer's other children that do (amsgrad's
  // _velocity_hats, use_ema's averages; not bookkeeping such as
  // _trainable_variables_indices), or Keras 2's slots (amsgrad's vhat,
  // Ftrl's linear).
  std::vector<std::string> kept;
  if (lists) {
    // tf_keras' LossScaleOptimizer keeps the optimizer's state as its own,
    // beside its loss scale.
    static const std::set<std::string> kBookkeeping = {
        "_iterations", "_learning_rate", "_trainable_variables", "_variables", "loss_scale"};
    for (const std::string& child : reader_->objectChildren(path_))
      if (!kBookkeeping.count(child) && reader_->objectHoldsValues(path_ + "/" + child))
        kept.push_back(child);
  } else {
    kept = reader_->objectSlotNames(path_);
    // Beside its slots Keras 2 keeps its step count and settings (and a
    // LossScaleOptimizer its loss scale); more is another optimizer's
    // (Nadam's momentum_cache).
    static const std::set<std::string> kSettings = {
        "iter", "learning_rate", "decay", "beta_1", "beta_2", "rho", "momentum", "loss_scale"};
    for (const std::string& child : reader_->objectChildren(path_))
      if (!kSettings.count(child) && reader_->objectHoldsValues(path_ + "/" + child))
        kept.push_back(child);
    for (const std::string setting_name : {"beta_1", "beta_2", "rho", "momentum"})
      if (setting(setting_name).has_value() != specSetting(optimizer, setting_name).has_value())
        throw InputError(fmt::format(
            "{}: the job's Keras optimizer {} {}, which Keras' {} {}: it is not the spec's {}",
            checkpoint(), setting(setting_name) ? "kept a setting" : "kept no setting",
            quotedPrintable(setting_name), className(optimizer.kind),
            setting(setting_name) ? "has not" : "has", optimizerName(optimizer.kind)));
  }
  // RMSprop keeps its momentum only where it is not 0.
  const auto optional = [&](const std::string& slot) {
    return optimizer.kind == Kind::RmsProp && slot == "momentum" && optimizer.momentum == 0;
  };
  const auto keptAs = [&](const std::string& slot) {
    return lists ? listOf(optimizer.kind, slot) : slot;
  };
  std::set<std::string> wanted;
  for (const std::string& slot : slots)
    if (!optional(slot)) wanted.insert(keptAs(slot));
  // Slots traind's optimizers keep, as Keras keeps them: kept beyond the
  // spec's, they are another optimizer's state.
  static const std::set<std::string> kSlots = {
      "m",          "v",           "rms",           "momentum",           "mg",       "accumulator",
      "_momentums", "_velocities", "_accumulators", "_average_gradients", "momentums"};
  for (const std::string& what : kept) {
    if (wanted.count(what)) continue;
    const bool rmsprop = optimizer.kind == Kind::RmsProp;
    const bool centered = rmsprop && (what == "mg" || what == "_average_gradients");
    const bool momentum = rmsprop && (what == "momentum" || what == "_momentums");
    throw InputError(fmt::format(
        "{}: the job's Keras optimizer kept {} as well, which this spec's {} has no place for: "
        "{}",
        checkpoint(), quotedPrintable(what), optimizerName(optimizer.kind),
        centered             ? "the job's RMSprop was centered; set centered: true in the spec"
        : momentum           ? "the job's RMSprop had momentum; give the spec the job's"
        : kSlots.count(what) ? "the job's optimizer is not the spec's"
                             : "amsgrad, use_ema, gradient accumulation or another optimizer's "
                               "state, which traind does not run"));
  }
  // Keras 2.11's slots name their kind, which tells the optimizer where
  // nothing names it: an Adam's "m" is not an RMSprop's "momentum".
  if (generation_ == Generation::Keras211)
    for (const std::string& slot : slots) {
      const std::string expected = kerasSlotKind(optimizer.kind, slot);
      const auto seen = list_kinds_.find(listOf(optimizer.kind, slot));
      if (seen == list_kinds_.end()) continue;
      for (const std::string& kind : seen->second)
        if (kind != expected)
          throw InputError(fmt::format(
              "{}: the job's Keras optimizer names the slots of {} '{}', which Keras' {} names "
              "'{}': it is not the spec's {}",
              checkpoint(), quotedPrintable(seen->first), kind, className(optimizer.kind), expected,
              optimizerName(optimizer.kind)));
    }
  // What the spec's optimizer keeps, the job's must have.
  for (const std::string& slot : slots) {
    if (optional(slot) || std::find(kept.begin(), kept.end(), keptAs(slot)) != kept.end()) continue;
    throw InputError(fmt::format(
        "{}: the job's Keras {} kept no '{}' state, which this spec's {} keeps: {}", checkpoint(),
        className(optimizer.kind), slot, optimizerName(optimizer.kind),
        slot == "mg"         ? "the job's RMSprop was not centered; drop centered from the spec"
        : slot == "momentum" ? "the job ran with a momentum of 0; give the spec the job's"
                             : "the spec's optimizer is not the job's"));
  }

  if (lists) return;
  // Keras 2 keeps its settings as variables: they must be the spec's.
  for (const std::string setting_name : {"beta_1", "beta_2", "rho", "momentum"}) {
    const std::optional<float> theirs = setting(setting_name);
    const std::optional<float> ours = specSetting(optimizer, setting_name);
    if (!theirs || !ours) continue;
    if (std::abs(*theirs - *ours) > 1e-6f * std::max(1.0f, std::abs(*ours)))
      throw InputError(fmt::format(
          "{}: the job's Keras {} ran with {} {}, this spec's {} with {} {}: give the spec "
          "the job's {}: {} to train on as it would have",
          checkpoint(), className(optimizer.kind), setting_name, *theirs,
          optimizerName(optimizer.kind), specSettingName(setting_name), *ours,
          specSettingName(setting_name), *theirs));
  }
}

bool KerasOptimizerState::trains(const std::string& variable_key) const {
  if (generation_ != Generation::Keras2) return trained_.count(variable_key) > 0;
  for (const std::string& slot : reader_->objectSlotNames(path_))
    if (reader_->objectSlotKey(path_, variable_key, slot)) return true;
  return false;
}

std::optional<std::string> KerasOptimizerState::slotKey(const ModelSpec& spec,
                                                        const std::string& variable_key,
                                                        const std::string& slot) const {
  if (!keeps(spec, slot)) return std::nullopt;
  if (generation_ == Generation::Keras2) {
    if (std::optional<std::string> key = reader_->objectSlotKey(path_, variable_key, slot))
      return key;
    // The key TensorFlow gives a slot, for the error that it is missing.
    const std::string value = "/.ATTRIBUTES/VARIABLE_VALUE";
    const std::string variable = variable_key.ends_with(value)
                                     ? variable_key.substr(0, variable_key.size() - value.size())
                                     : variable_key;
    return fmt::format("{}/.OPTIMIZER_SLOT/{}/{}{}", variable, path_, slot, value);
  }
  const std::string list = listOf(spec.optimizer.kind, slot);
  if (const auto key = slot_keys_.find({list, variable_key}); key != slot_keys_.end())
    return key->second;
  return fmt::format("{}/{}/<no entry for it>", path_, list);
}

bool KerasOptimizerState::keeps(const ModelSpec& spec, const std::string& slot) const {
  if (generation_ == Generation::Keras2) {
    const std::vector<std::string>& kept = reader_->objectSlotNames(path_);
    return std::find(kept.begin(), kept.end(), slot) != kept.end();
  }
  return !reader_->objectChildren(path_ + "/" + listOf(spec.optimizer.kind, slot)).empty();
}

float KerasOptimizerState::slotFactor(const ModelSpec& spec, const std::string& slot,
                                      float rate) const {
  if (spec.optimizer.kind != Kind::Momentum || slot != "momentum") return 1.0f;
  if (!(rate > 0))
    throw InputError(fmt::format(
        "{}: Keras' SGD keeps its momentum scaled by the learning rate, and this spec's rate "
        "at the imported step is {}: traind's momentum is Keras' divided by minus the rate",
        checkpoint(), rate));
  return -1.0f / rate;
}

std::string KerasOptimizerState::describeSlot(const ModelSpec& spec,
                                              const std::string& slot) const {
  if (!keeps(spec, slot))
    return fmt::format("'{}' state at 0: the job's RMSprop kept none (it ran without momentum)",
                       slot);
  const std::string scaled =
      spec.optimizer.kind == Kind::Momentum && slot == "momentum"
          ? ", divided by minus the spec's learning rate (Keras' SGD scales it by the rate)"
          : "";
  if (generation_ == Generation::Keras2)
    return fmt::format("'{}' state from {}'s slot '{}' of each variable{}", slot, path_, slot,
                       scaled);
  if (generation_ == Generation::Keras211)
    return fmt::format("'{}' state from {}/{}/<the entry named after the variable>{}", slot, path_,
                       listOf(spec.optimizer.kind, slot), scaled);
  return fmt::format("'{}' state from {}/{}/<the variable's place in {}/_trainable_variables>{}",
                     slot, path_, listOf(spec.optimizer.kind, slot), path_, scaled);
}

bool KerasOptimizerState::isBookkeeping(const std::string& key) const {
  return bookkeeping_.count(key) > 0;
}

std::optional<std::string> KerasOptimizerState::describeRate(float rate) const {
  const bool lists = generation_ != Generation::Keras2;
  const std::optional<float> theirs = setting(lists ? "_learning_rate" : "learning_rate");
  const float decay = lists ? 0.0f : setting("decay").value_or(0.0f);
  if (!theirs || (std::abs(*theirs - rate) <= 1e-6f * std::abs(rate) && decay == 0))
    return std::nullopt;
  return fmt::format(
      "the job's Keras optimizer kept a learning rate of {}{}; traind trains on at this "
      "spec's ({} at the imported step)",
      *theirs, decay ? fmt::format(" with a decay of {} (rate / (1 + decay * step))", decay) : "",
      rate);
}

}  // namespace traind
