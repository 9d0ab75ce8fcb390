// What training changes, in one place: the parameters, the optimizer's slots
// and the global step, with their checkpoint form. Tensors in a checkpoint
// are named "<variable>" for parameters and "<variable>/<slot>" for slots.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>

#include "core/checkpoint.h"
#include "core/layer_graph.h"
#include "core/optimizer.h"
#include "core/variable_layout.h"

namespace traind {

class SafetensorsReader;

// Whether the spec's init_from checkpoint holds every variable of its
// layers in the shapes of `graph` (traind check's question; a run asks as
// it copies them): InputError as the run's, at the layer's init_from.layers
// item or at init_from.checkpoint. Reads the checkpoint's index, no values.
void checkInitFromFits(const InitFromSpec& init_from, const LayerGraph& graph);

class ModelState {
 public:
  ModelState(const ModelSpec& spec, const LayerGraph& graph);

  const VariableLayout& layout() const { return layout_; }
  FlatBuffer& parameters() { return parameters_; }
  const FlatBuffer& parameters() const { return parameters_; }
  // What evaluation computes with: the moving averages when the spec has a
  // moving_average (as TensorFlow evaluates with ema.variables_to_restore()),
  // else the parameters.
  const FlatBuffer& evaluationValues() const {
    const FlatBuffer* average = optimizer_.movingAverage();
    return average ? *average : parameters_;
  }
  Optimizer& optimizer() { return optimizer_; }
  const Optimizer& optimizer() const { return optimizer_; }
  int64_t globalStep() const { return global_step_; }
  void setGlobalStep(int64_t step) { global_step_ = step; }

  // Fresh start: every variable from its initializer, then the spec's
  // init_from layers (fine-tuning) copied from their checkpoint. Returns a
  // line for the log: "initialised the parameters", and from where.
  std::string initialize();

  // Resumes from a checkpoint of this same architecture: parameters, slots
  // and global step. InputError if the checkpoint belongs to another
  // architecture, lacks a tensor, or was written with an optimizer that
  // keeps none of the state this spec's needs (sgd before adam). A run
  // resuming from its checkpoint directory gives `dir_given_at` (the
  // spec's checkpoint.dir, or the flag): its errors start with it.
  void restore(const std::filesystem::path& checkpoint, const SourceLocation& dir_given_at = {});

  // What restore() checks before it reads a value (the manifest, the
  // architecture, the optimizer's state), for `traind check`: the same
  // InputErrors, without dir_given_at. Allocates no state: `check` may run
  // on a smaller machine than the training.
  static void checkRestorable(const ModelSpec& spec, const LayerGraph& graph,
                              const std::filesystem::path& checkpoint);

  // InputError naming `dir_location` (checkpoint.dir, or --checkpoint-dir)
  // when this model's checkpoints could not be read back: a safetensors
  // header over what the reader takes (tens of thousands of layers), or a
  // variable's name too long. A run asks before it makes the directory,
  // `traind check` as well; allocates no state, as checkRestorable.
  static void checkSavable(const ModelSpec& spec, const LayerGraph& graph,
                           const SourceLocation& dir_location);

  // What evaluation needs of a checkpoint (trainctl eval): the parameters,
  // the moving averages when the spec has them, and the global step; the
  // optimizer's other state is left as initialised, so a checkpoint of any
  // optimizer will do.
  void restoreForEvaluation(const std::filesystem::path& checkpoint);

  // What an export needs (trainctl export): everything restore() reads,
  // refused as restore() refuses, the advice an export's.
  void restoreForExport(const std::filesystem::path& checkpoint);

  // Writes a checkpoint into `dir` at the current global step; throws
  // Diverged, writing nothing, when a tensor holds a NaN or an infinity.
  SavedCheckpoint save(const std::filesystem::path& dir, int keep) const;

  // The training set save() names in each checkpoint's manifest
  // (contentText of core/dataset.h), and the one the checkpoint restore()
  // read was trained on (empty where it does not say): a run that resumes
  // on another set (a file replaced, a pattern that matches one more) is
  // told so.
  void setTrainingSet(std::string text) { training_set_ = std::move(text); }
  const std::string& restoredTrainingSet() const { return restored_training_set_; }

  // The state of the checkpoint restore() or restoreForExport() read that
  // this spec keeps no place for, as a phrase: "the 'm' and 'v' state" (an
  // adam checkpoint resumed with sgd), "the moving averages" (a spec
  // without moving_average); empty when none. Not restored, and not in
  // the checkpoints that follow: the run or the export says so.
  const std::string& restoredUnusedState() const { return restored_unused_state_; }
  // Whether the checkpoint restore(), restoreForEvaluation() or
  // restoreForExport() read held no moving averages for this spec's
  // moving_average (written before it was turned on): they start from its
  // parameters, and an evaluation or export of it is of the parameters.
  bool averagesStartedFromParameters() const { return averages_started_from_parameters_; }
  // What each of those says of it: "<checkpoint>: the checkpoint holds no
  // moving averages ..."; nullopt when it held them or the spec has none.
  std::optional<std::string> startedAveragesNote(const std::filesystem::path& checkpoint,
                                                 const std::string& consequence) const;
  // What a run resuming from `checkpoint` warns of it: "<checkpoint>:
  // this spec's update rule (sgd, learning rate 0.1) has no use for the 'm'
  // and 'v' state there: left behind, ..."; nullopt when restore() left
  // nothing.
  std::optional<std::string> unusedStateNote(const std::filesystem::path& checkpoint) const;

  // The bytes of the tensors save() writes: the parameters and each
  // optimizer slot (the manifest and the safetensors header add a little).
  int64_t checkpointBytes() const;

 private:
  // Resume and Export read every slot, Evaluation the moving averages only;
  // each says what to do instead its own way.
  enum class Purpose { Resume, Export, Evaluation };
  void restoreFrom(const std::filesystem::path& checkpoint, Purpose purpose);
  static void checkCheckpoint(const ModelSpec& spec, const VariableLayout& layout,
                              const std::filesystem::path& checkpoint,
                              const CheckpointManifest& manifest, const SafetensorsReader& reader,
                              Purpose purpose);
  // Returns where the layers came from, for initialize()'s line: "from
  // <checkpoint>", and what of theirs was left (a bias the layer lacks).
  std::string initFrom(const InitFromSpec& init_from);
  static void checkHoldsOptimizerState(const ModelSpec& spec, const VariableLayout& layout,
                                       const std::filesystem::path& checkpoint,
                                       const SafetensorsReader& reader, Purpose purpose);

  const ModelSpec& spec_;
  const LayerGraph& graph_;
  VariableLayout layout_;
  FlatBuffer parameters_;
  Optimizer optimizer_;
  int64_t global_step_ = 0;
  std::string training_set_;           // setTrainingSet's
  std::string restored_training_set_;  // of the checkpoint restore() read
  std::string restored_unused_state_;  // restoredUnusedState's
  bool averages_started_from_parameters_ = false;
};

}  // namespace traind
