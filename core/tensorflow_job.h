// A TensorFlow 1 job's whole training state, both ways: taken over from
// one of its checkpoints, or a Keras model's and its optimizer's from an
// object-based checkpoint (below), into a ModelState (trainctl import, which saves it
// as a traind checkpoint that traind resumes as one of its own), and a
// ModelState's given back under TensorFlow 1's names (trainctl export,
// which writes a checkpoint a TensorFlow 1 graph's Saver restores and
// trains on from). Where init_from copies some layers' parameters to start
// a new run, this is everything a run resumes from: every variable, the
// spec's optimizer's slots, the moving averages and the global step, so
// that the job trains on as it would have where it was.
//
// TensorFlow 1's names (tf.compat.v1.train.*Optimizer, a slot named after
// its optimizer and numbered in the order the optimizer makes them):
//   momentum  <var>/Momentum                    -> momentum
//   adagrad   <var>/Adagrad                     -> accumulator
//   adam      <var>/Adam, <var>/Adam_1          -> m, v
//             and beta1_power, beta2_power: beta1^t, beta2^t of the next update
//   rmsprop   <var>/RMSProp, <var>/RMSProp_1    -> rms, momentum
//             centered: RMSProp, RMSProp_1, RMSProp_2 -> rms, mg, momentum
//   tf.train.ExponentialMovingAverage: <var>/ExponentialMovingAverage
//   the global step: global_step (tf.compat.v1.train.get_or_create_global_step)
//
// Keras', saved by tf.train.Checkpoint(model=..., optimizer=...), found
// through the checkpoint's object graph: Keras 3's optimizers' lists and
// Keras 2's slot variables, core/keras_optimizer.h says which is which.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/model_spec.h"

namespace traind {

class ModelState;
class TensorflowCheckpointReader;
struct TensorflowTensor;

// How a TensorFlow 1 job named its variables and its optimizer.
struct TensorflowNames {
  // The variable scope the layers were built under: "net" for
  // "net/hidden1/kernel"; empty for none.
  std::string scope;
  // A layer's variables' prefix in the checkpoint, in place of the scope's
  // ("logits" -> "net/output").
  std::map<std::string, std::string> layer_sources;
  // The name the TensorFlow optimizer was given (its `name` argument),
  // which its slots are named after; empty for its default ("Adam").
  std::string optimizer_name;
};

// TensorFlow 1's name for the slot traind calls `slot` ("v": "Adam_1"), of
// the spec's optimizer named `optimizer_name` (empty: its default).
// std::invalid_argument for a slot the optimizer does not keep.
std::string tensorflowSlotName(const OptimizerSpec& optimizer, const std::string& slot,
                               const std::string& optimizer_name);

// Reads the whole state into `state` (built from `spec`); `given_step`, when
// given, in place of the checkpoint's global step (a job that kept none). InputError naming
// the checkpoint, the tensor it lacks or the one that is wrong, and what to
// do:
//   - a variable or slot missing (another optimizer, or another name for
//     it), of another shape, not finite, a sum of squares below 0;
//   - a slot past the spec's optimizer's (the job's RMSProp was centered);
//   - no global step, or one past kMaxGlobalStep;
//   - Adam's beta1_power and beta2_power not those of the global step
//     (traind derives Adam's bias correction from the global step, so the
//     job would take other steps);
//   - from Keras: another optimizer than the spec's, state the spec's has
//     no place for (amsgrad, use_ema), Keras 2's settings unlike the
//     spec's, a moving average (KerasOptimizerState::checkRunsSpec).
// A variable the spec freezes needs no slots (TensorFlow makes none for a
// variable it does not train) nor a moving average (ema.apply is given
// the trainable variables): those start as a fresh run's do. Returns lines
// saying what came from where, and what of the checkpoint was left.
std::vector<std::string> importTensorflowState(const TensorflowCheckpointReader& reader,
                                               const TensorflowNames& names,
                                               std::optional<int64_t> given_step,
                                               const ModelSpec& spec, ModelState& state);

// What `state` (of `spec`) holds, as TensorFlow 1 names it: what
// importTensorflowState takes. Every variable, every slot of the spec's
// optimizer, the moving averages, global_step (int64), and for Adam its
// beta1_power and beta2_power of the next update. InputError when `names`
// give two variables one name.
std::vector<TensorflowTensor> tensorflowState(const ModelState& state, const ModelSpec& spec,
                                              const TensorflowNames& names);

}  // namespace traind
