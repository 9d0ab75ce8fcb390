// What a run that trains (standalone, or a cluster's chief) does with its
// checkpoints, and says of them: the restore at its start, and each save.
// One place, so that both say the same words.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "core/checkpoint.h"
#include "core/dataset.h"
#include "core/model_spec.h"
#include "core/model_state.h"
#include "daemon/node_metrics.h"

namespace traind {

// Restores `checkpoint` into `state` for a run that trains on `train`
// (ModelState::restore's errors), warns of what of it this run cannot use
// as it was meant (another training set: the checkpoint's place in the
// epoch falls on other examples; optimizer state or moving averages this
// spec has no use for), and returns the line that says the restore:
// "restored PATH at global step N".
std::string restoreToTrain(ModelState& state, const std::filesystem::path& checkpoint,
                           const SourceLocation& dir_location, const Dataset& train);

// Saves a run's checkpoints into spec.dir, which `lock` holds, and reports
// each: in two calls, as a chief tells the ps tasks of a save between them.
class CheckpointWriter {
 public:
  CheckpointWriter(const CheckpointSpec& spec, CheckpointDirLock& lock, NodeMetrics& metrics)
      : spec_(spec), lock_(lock), metrics_(metrics) {}

  // Takes the directory again first if it was lost (warning), then
  // ModelState::save with spec.keep (its errors).
  SavedCheckpoint save(const ModelState& state);

  // Records a save of `global_step` in the metrics and the log, and warns,
  // once a run, of old checkpoints its pruning could not delete.
  void report(const SavedCheckpoint& saved, int64_t global_step);

 private:
  const CheckpointSpec& spec_;
  CheckpointDirLock& lock_;
  NodeMetrics& metrics_;
  bool not_pruned_said_ = false;
};

}  // namespace traind
