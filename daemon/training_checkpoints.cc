#include "daemon/training_checkpoints.h"

#include <spdlog/spdlog.h>

#include <optional>
#include <utility>

#include "daemon/training_data.h"

namespace traind {

std::string restoreToTrain(ModelState& state, const std::filesystem::path& checkpoint,
                           const SourceLocation& dir_location, const Dataset& train) {
  state.restore(checkpoint, dir_location);
  if (const auto note = otherTrainingSetNote(state.restoredTrainingSet(), train, checkpoint))
    spdlog::warn("{}", *note);
  if (const auto note = state.unusedStateNote(checkpoint)) spdlog::warn("{}", *note);
  if (const auto note = state.startedAveragesNote(checkpoint, "they start from its parameters"))
    spdlog::info("{}", *note);
  return fmt::format("restored {} at global step {}", checkpoint.string(), state.globalStep());
}

SavedCheckpoint CheckpointWriter::save(const ModelState& state) {
  if (const std::optional<std::string> retaken = lock_.retakeIfLost()) spdlog::warn("{}", *retaken);
  return state.save(spec_.dir, spec_.keep);
}

void CheckpointWriter::report(const SavedCheckpoint& saved, int64_t global_step) {
  metrics_.recordCheckpoint(global_step, saved.path);
  spdlog::info("step {}, saved checkpoint {}", global_step, saved.path.string());
  if (!saved.not_pruned.empty() && !std::exchange(not_pruned_said_, true))
    spdlog::warn("{}", notPrunedWarning(saved, spec_.keep));
}

}  // namespace traind
