// Checkpoints: a directory per saved step, written so that it is complete or
// absent, and a `latest` pointer, as TensorFlow's Saver keeps them.
//
//   <dir>/latest                       "ckpt-0000001200\n"
//   <dir>/ckpt-0000001200/model.safetensors
//   <dir>/ckpt-0000001200/manifest.json
//
// One writer per directory (the chief). manifest.json:
//   {"format_version": 1, "global_step": 1200, "model_name": "mnist_mlp",
//    "architecture_hash": "...", "created": "2024-05-01T12:00:00Z",
//    "tensors_file": "model.safetensors",
//    "training_set": "60000 examples, CRC-32C 0x1a2b3c4d"}
// (training_set absent where it is not known: checkpoints written before
// it, or by trainctl import).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/directory_lock.h"
#include "core/error.h"
#include "core/safetensors.h"

namespace traind {

namespace checkpoint_format {
inline constexpr std::string_view kLatestFile = "latest";
inline constexpr std::string_view kManifestFile = "manifest.json";
inline constexpr std::string_view kDirPrefix = "ckpt-";  // then the step, zero-padded
inline constexpr int kStepDigits = 10;
// Entries being written; a crash can leave one behind, the next save removes it.
inline constexpr std::string_view kTempPrefix = ".tmp-";
// What the run that saves into the directory holds (core/directory_lock.h).
inline constexpr std::string_view kLockFile = kDirectoryLockFile;
inline constexpr int64_t kFormatVersion = 1;
}  // namespace checkpoint_format

struct CheckpointManifest {
  int64_t global_step = 0;
  std::string model_name;
  std::string architecture_hash;
  std::string created;  // ISO 8601 UTC
  std::string tensors_file = "model.safetensors";
  // The training set the run trained on (contentText of core/dataset.h);
  // empty where not known.
  std::string training_set;
};

// "ckpt-0000001200"
std::string checkpointDirName(int64_t global_step);

// What saveCheckpoint did: where, and what pruning could not delete.
struct SavedCheckpoint {
  std::filesystem::path path;
  // The old checkpoints pruning could not delete, each with why
  // ("ckpt-0000000100: Operation not permitted"): the save stands, and the
  // next one tries them again; the run says so, or `keep` fails unseen.
  std::vector<std::string> not_pruned;
};

// Writes <dir>/ckpt-<step, 10 digits>/{model.safetensors, manifest.json},
// atomically: write into a temp dir in <dir>, fsync files and dir, rename into
// place, then replace <dir>/latest (a small text file holding the checkpoint
// dir's name) via temp file + fsync + rename. Then deletes all but the newest
// `keep` checkpoints (by step; never the one just written; keep <= 0 keeps
// all) and leftovers of interrupted saves. A crash at any point leaves
// either the old or the new latest, complete; a failure to write `latest`
// takes a new checkpoint back out, so that the directory is as before.
// Saving a step that already has a checkpoint replaces its files one by
// one, each by an atomic rename, so that it stays complete throughout.
// std::system_error / std::filesystem::filesystem_error when the disk
// refuses.
SavedCheckpoint saveCheckpoint(const std::filesystem::path& dir, const CheckpointManifest& manifest,
                               const std::vector<TensorRef>& tensors, int keep);

// The metadata saveCheckpoint gives the tensors file (global step, model
// name, architecture hash), for safetensorsHeader's question beforehand.
std::map<std::string, std::string> tensorsFileMetadata(const CheckpointManifest& manifest);

// What a run warns of, once, when a save's pruning failed (not_pruned not
// empty): "checkpoint.keep is 2, but old checkpoints or leftovers of
// interrupted saves in DIR could not be deleted: ckpt-0000000100: Operation
// not permitted; ...".
std::string notPrunedWarning(const SavedCheckpoint& saved, int keep);

// A run's hold on its checkpoint directory, for as long as it lives: an
// flock on <dir>/.lock, which the kernel lets go when the process ends,
// however it ends. Two runs saving into one directory would replace each
// other's checkpoints and remove each other's saves in progress. A run that
// saved nothing there leaves nothing there: when the directory holds only
// the .lock as the lock ends (not on a kill), the .lock goes, and so do the
// directories createCheckpointDir made for it.
class CheckpointDirLock {
 public:
  CheckpointDirLock() = default;
  CheckpointDirLock(CheckpointDirLock&& other) noexcept;
  CheckpointDirLock& operator=(CheckpointDirLock&& other) noexcept;
  ~CheckpointDirLock();

  // Before a save: when <dir>/.lock is no longer the file this lock holds
  // (the directory was deleted or moved while the run went on, as a /tmp
  // cleaner does), takes the directory again as createCheckpointDir does and
  // returns a line saying so, for the log; nullopt while it holds (and for
  // a default-made lock). std::runtime_error with createCheckpointDir's
  // reason when that fails (another run took the directory meanwhile, a
  // file is in its place): the save fails, and so does the next.
  std::optional<std::string> retakeIfLost();

 private:
  friend CheckpointDirLock createCheckpointDir(const std::filesystem::path& dir,
                                               const SourceLocation& where);
  CheckpointDirLock(int fd, std::filesystem::path dir, SourceLocation where,
                    std::vector<std::filesystem::path> made)
      : fd_(fd), dir_(std::move(dir)), where_(std::move(where)), made_(std::move(made)) {}
  // Closes the lock's file, first removing what an unused directory holds.
  void letGo();
  int fd_ = -1;
  std::filesystem::path dir_;
  SourceLocation where_;
  std::vector<std::filesystem::path> made_;  // outermost first
};

// Creates `dir` (and its parents) if it is not there, so that a run whose
// checkpoint directory cannot be one fails as it starts, not at its first
// save, and takes it for this run. InputError naming it and why, at `where`
// (the spec's checkpoint.dir or the flag that set it): it cannot be
// created or written in, or another run holds it (naming that run's pid).
[[nodiscard]] CheckpointDirLock createCheckpointDir(const std::filesystem::path& dir,
                                                    const SourceLocation& where);

// A line for the log when the file system of `dir` has less room free than
// a checkpoint of `bytes` takes: the first save would fail, after the steps
// before it had trained. nullopt when it has the room, or cannot say.
std::optional<std::string> checkpointRoomShortfall(const std::filesystem::path& dir,
                                                   int64_t bytes);

// The checkpoint <dir>/latest names; without a latest file the complete
// ckpt-N of dir with the highest step (a crash between a save's rename and
// its latest file, or a deleted latest); nullopt if there is none.
// InputError if latest names a missing or incomplete checkpoint.
std::optional<std::filesystem::path> findLatestCheckpoint(const std::filesystem::path& dir);

// Accepts either a checkpoint directory or a checkpoints dir with a `latest`
// (resolves it). InputError if it is neither, or the checkpoint is incomplete.
std::filesystem::path resolveCheckpoint(const std::filesystem::path& path);

// Resolves `path` as resolveCheckpoint does and calls `read` with the
// checkpoint; returns the checkpoint read. The run writing a directory may
// prune the checkpoint its `latest` named before `read` is done with it
// (with checkpoint.keep 1, one save later), or even before its files are
// checked: when resolving or `read` fails and the directory's latest has
// moved on, it is resolved again, up to 3 times.
std::filesystem::path readResolvedCheckpoint(
    const std::filesystem::path& path,
    const std::function<void(const std::filesystem::path& checkpoint)>& read);

// Replaces (or creates) the file `path` with `bytes`, complete or not at
// all: written under a temporary name beside it, fsynced, renamed into
// place, and the directory fsynced. std::system_error when the disk refuses,
// the temporary file removed.
void replaceFileDurably(const std::filesystem::path& path, std::string_view bytes);

// Reads <checkpoint>/manifest.json. InputError naming the file and the field
// if it is missing, not JSON, or a field is absent or of the wrong type.
CheckpointManifest readManifest(const std::filesystem::path& checkpoint);

// Checks that the tensors file's __metadata__ (what of it there is: files
// written by other tools may carry none) and the checkpoint's directory name
// (when it is ckpt-<step>) agree with `manifest`: a manifest edited alone
// would otherwise resume a run at another step. InputError naming both.
void checkAgreesWithManifest(const std::filesystem::path& checkpoint,
                             const CheckpointManifest& manifest, const SafetensorsReader& tensors);

}  // namespace traind
