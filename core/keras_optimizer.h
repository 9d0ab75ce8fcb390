// A Keras optimizer's state in an object-based checkpoint (saved by
// tf.train.Checkpoint(model=..., optimizer=...), or a compiled model's own
// optimizer), found through the checkpoint's object graph and given in
// traind's terms: which tensor holds a variable's slot, and what traind's
// slot is of it. trainctl import (core/tensorflow_job.h) takes it over.
//
// Keras 3 (tf.keras since TensorFlow 2.16) keeps lists, in the order of the
// optimizer's _trainable_variables:
//   adam      _momentums, _velocities                      -> m, v
//   rmsprop   _velocities, _momentums, _average_gradients  -> rms, momentum, mg
//   adagrad   _accumulators                                -> accumulator
//   momentum  SGD's momentums                              -> momentum (below)
//   its step count _iterations, named "<name>/iteration" after the
//   optimizer ("adam", "rm_sprop", "adagrad", "sgd"; "adam_1" for a
//   process's second Adam).
// Keras 2 (tf.keras of TensorFlow 2.0 to 2.10, tf_keras.optimizers.legacy)
// keeps slot variables, named as traind's slots (m, v; rms, momentum, mg;
// accumulator; SGD's momentum); its step count `iter`, named
// "<name>/iter" ("Adam", "RMSprop", "Adagrad", "SGD"); and its beta_1,
// beta_2, rho and momentum, which must be the spec's.
// Keras 2.11 (tf.keras of TensorFlow 2.11 to 2.15, tf_keras.optimizers)
// keeps Keras 3's lists with no _trainable_variables; each slot is named
// after its optimizer, its kind and its variable ("Adam/m/hidden/kernel"
// of "hidden/kernel"), which places it (on one variable of the model, or
// it is refused); its step count is "iteration".
//
// Keras' SGD keeps m = momentum * m - rate * g and adds m to the variable;
// traind's momentum (TensorFlow 1's) keeps a = momentum * a + g and
// subtracts rate * a. Under a constant rate they take the same steps with
// a = -m / rate: traind's slot is Keras' divided by minus the spec's rate
// at the imported step (slotFactor).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/model_spec.h"

namespace traind {

class TensorflowCheckpointReader;

class KerasOptimizerState {
 public:
  enum class Generation { Keras2, Keras211, Keras3 };

  // The Keras optimizer `reader`'s checkpoint holds, under `optimizer` or a
  // compiled model's `model/optimizer`; nullopt where it holds none. The
  // state reads through `reader`, which must outlive it.
  static std::optional<KerasOptimizerState> find(const TensorflowCheckpointReader& reader);

  // InputError naming the checkpoint unless the job's optimizer is the one
  // `spec` runs, named `optimizer_name` (empty: Keras' name for it, or that
  // name numbered), keeping no state traind has no place for (amsgrad,
  // use_ema, centered where the spec is not), and, for Keras 2, with the
  // spec's betas, rho and momentum. A spec of sgd, which keeps no state,
  // takes the variables of any.
  void checkRunsSpec(const ModelSpec& spec, const std::string& optimizer_name) const;

  // What the checkpoint holds of it, said by trainctl inspect: its
  // generation, path, step count and the state it kept.
  std::string describe() const;

  Generation generation() const { return generation_; }
  const std::string& path() const { return path_; }  // "optimizer"
  const std::string& stepKey() const { return step_key_; }

  // Whether the job's optimizer trained the variable whose value is under
  // `variable_key` (Keras makes no state for a variable it does not train).
  bool trains(const std::string& variable_key) const;
  // The key of the tensor holding traind's slot `slot` (of the spec's
  // optimizer) of a variable it trains (std::invalid_argument for another); where the tensor is
  // missing, the key TensorFlow gives such a slot.
  // nullopt where the job kept no such state for any variable: Keras'
  // RMSprop without momentum takes the steps traind's takes with a
  // momentum of 0 that starts at 0 (checkRunsSpec checks the spec's is 0).
  std::optional<std::string> slotKey(const ModelSpec& spec, const std::string& variable_key,
                                     const std::string& slot) const;
  // Whether the job kept traind's slot `slot` (of the spec's optimizer) at
  // all: all but RMSprop's momentum, which Keras keeps only where it is
  // not 0 (checkRunsSpec checks the rest).
  bool keeps(const ModelSpec& spec, const std::string& slot) const;
  // What traind's slot `slot` is of Keras': -1 / `rate` for SGD's momentum
  // (above), 1 for the others. InputError for a rate of 0.
  float slotFactor(const ModelSpec& spec, const std::string& slot, float rate) const;
  // Where traind's slot `slot` comes from, said to the user.
  std::string describeSlot(const ModelSpec& spec, const std::string& slot) const;
  // Whether the tensor under `key` is the optimizer's own bookkeeping (its
  // step count, rate and settings), which a model has no place for.
  bool isBookkeeping(const std::string& key) const;
  // The job's learning rate (Keras 2's with its decay), when the checkpoint
  // holds it, said where it is not `rate`, the spec's at the imported step.
  std::optional<std::string> describeRate(float rate) const;

 private:
  KerasOptimizerState(const TensorflowCheckpointReader& reader, Generation generation,
                      std::string path, std::string step_key);
  // Keras 3's list holding traind's slot `slot` of an optimizer of `kind`
  // ("_velocities" for Adam's "v").
  static std::string listOf(OptimizerSpec::Kind kind, const std::string& slot);
  std::string checkpoint() const;
  // The key of the variable Keras 2.11's slot `entry` of `list`, named
  // `name`, is of, among the model's variables by name (`named_twice`: the
  // names two variables have); empty, and said in unplaced_, for none or
  // more than one.
  std::string placeByName(const std::string& list, const std::string& entry,
                          const std::string& name,
                          const std::map<std::string, std::string>& by_name,
                          const std::set<std::string>& named_twice);
  // The value of the float scalar child `name` of the optimizer, if any.
  std::optional<float> setting(const std::string& name) const;

  const TensorflowCheckpointReader* reader_;
  Generation generation_;
  std::string path_;
  std::string step_key_;
  // Keras 3 and 2.11: the key of each (list, variable's key)'s slot, the
  // variables the optimizer trains, and (2.11) the names its slots give
  // the optimizer ("Adam" of "Adam/m/hidden/kernel").
  std::map<std::pair<std::string, std::string>, std::string> slot_keys_;
  std::set<std::string> trained_;
  std::set<std::string> job_names_;
  // Keras 2.11: the kinds its slots' names give each list ("m" in
  // _momentums), and the entries no name placed, said when refused.
  std::map<std::string, std::set<std::string>> list_kinds_;
  std::vector<std::string> unplaced_;
  std::set<std::string> bookkeeping_;  // the keys of the step count, rate and settings
};

}  // namespace traind
