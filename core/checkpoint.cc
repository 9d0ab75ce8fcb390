#include "core/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "core/error.h"
#include "core/json.h"
#include "core/made_directories.h"
#include "core/memory_need.h"
#include "core/model_spec.h"
#include "core/printable.h"

namespace traind {
namespace {

namespace fs = std::filesystem;
namespace layout = checkpoint_format;

// A manifest is a few hundred bytes and `latest` a line; anything much larger
// is not one, and is not read into memory.
constexpr uintmax_t kMaxSmallFileBytes = 1 << 20;

// The directory a start makes and removes to see that a save could
// (createCheckpointDir), under kTempPrefix as a save's.
constexpr std::string_view kProbeName = "probe";

[[noreturn]] void throwErrno(int error, const std::string& what, const fs::path& path) {
  throw std::system_error(error, std::generic_category(), what + " " + path.string());
}

void syncPath(const fs::path& path, bool directory) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  if (fd < 0) throwErrno(errno, "cannot open to fsync", path);
  const int status = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (status != 0) throwErrno(error, "cannot fsync", path);
}

// Creates (or truncates) `path`, writes `text` and fsyncs it.
void writeSyncedFile(const fs::path& path, std::string_view text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throwErrno(errno, "cannot create", path);
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      throwErrno(error, "cannot write", path);
    }
    written += size_t(n);
  }
  const int status = ::fsync(fd);
  const int error = errno;
  if (::close(fd) != 0 || status != 0)
    throwErrno(status != 0 ? error : errno, "cannot write", path);
}

void renameOrThrow(const fs::path& from, const fs::path& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    throwErrno(errno, "cannot rename " + from.string() + " to", to);
}

std::string readSmallFile(const fs::path& path) {
  std::error_code ec;
  // file_size of a FIFO or a device fails with "Operation not supported".
  const fs::file_status status = fs::status(path, ec);
  if (!ec && fs::exists(status) && !fs::is_regular_file(status))
    throw InputError(path.string() + ": cannot read: expected a regular file, got " +
                     (fs::is_directory(status) ? "a directory"
                      : fs::is_fifo(status)    ? "a FIFO"
                      : fs::is_socket(status)  ? "a socket"
                      : fs::is_symlink(status) ? "a link"
                                               : "a device"));
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) throw InputError(path.string() + ": cannot read: " + ec.message());
  if (size > kMaxSmallFileBytes)
    throw InputError(path.string() + ": " + std::to_string(size) + " bytes is too large for a " +
                     std::string(path.filename()));
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) throw InputError(path.string() + ": cannot read");
  return text.str();
}

// A name that stays inside the directory it is looked up in.
bool isPlainFileName(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

std::string manifestJson(const CheckpointManifest& m) {
  return "{\n  \"format_version\": " + std::to_string(layout::kFormatVersion) +
         ",\n  \"global_step\": " + std::to_string(m.global_step) +
         ",\n  \"model_name\": " + jsonQuote(m.model_name) +
         ",\n  \"architecture_hash\": " + jsonQuote(m.architecture_hash) +
         ",\n  \"created\": " + jsonQuote(m.created) +
         ",\n  \"tensors_file\": " + jsonQuote(m.tensors_file) +
         (m.training_set.empty() ? "" : ",\n  \"training_set\": " + jsonQuote(m.training_set)) +
         "\n}\n";
}

// The digits of a checkpoint directory's name ("0000001200" of
// ckpt-0000001200), nullopt for other names.
std::optional<std::string_view> stepDigitsOfDirName(std::string_view name) {
  const size_t prefix = layout::kDirPrefix.size();
  if (name.size() < prefix + layout::kStepDigits || !name.starts_with(layout::kDirPrefix))
    return std::nullopt;
  const std::string_view digits = name.substr(prefix);
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return digits;
}

// The step of a checkpoint directory's name, nullopt for other names and
// for steps past int64.
std::optional<int64_t> stepOfDirName(const std::string& name) {
  const std::optional<std::string_view> digits = stepDigitsOfDirName(name);
  if (!digits) return std::nullopt;
  int64_t step = 0;
  for (char c : *digits) {
    if (step > (INT64_MAX - 9) / 10) return std::nullopt;
    step = step * 10 + (c - '0');
  }
  return step;
}

// Whether `name` is one a save writes under before its rename
// (".tmp-ckpt-0000000005.4242", ".tmp-latest.4242"): what an interrupted
// one leaves. Nothing else in the directory is traind's to delete (a
// summary directory of the user's called .tmp-tb); nor is a start's probe
// (".tmp-probe.4242"), which another process may be making as this one
// prunes, and which a start killed as it probed leaves empty (the next
// start of its pid removes it).
bool isSaveLeftover(std::string_view name, bool checkpoints_only) {
  if (!name.starts_with(layout::kTempPrefix)) return false;
  name.remove_prefix(layout::kTempPrefix.size());
  const size_t dot = name.rfind('.');
  if (dot == std::string_view::npos || dot + 1 == name.size() ||
      !std::all_of(name.begin() + long(dot) + 1, name.end(),
                   [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  const std::string_view base = name.substr(0, dot);
  if (stepOfDirName(std::string(base))) return true;
  return !checkpoints_only && base == layout::kLatestFile;
}

// Deletes leftovers of interrupted saves and all but the newest `keep`
// checkpoints, counting the one of step `current_step` just saved. Checkpoints of
// later steps are another run's, abandoned when `latest` was set back to an
// earlier one: they are neither counted nor deleted (this run's own would go
// first). Failing to delete an old checkpoint does not make the new one any
// less saved, so such failures are returned (SavedCheckpoint::not_pruned)
// for the next save to retry, not thrown as a failed save.
std::vector<std::string> pruneCheckpoints(const fs::path& dir, int keep, int64_t current_step) {
  std::vector<fs::path> leftovers;
  std::vector<std::pair<int64_t, fs::path>> checkpoints;
  std::error_code ec;
  // Stepped with increment(ec): a listing that fails midway is said, not
  // thrown as a failed save.
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::directory_entry& entry = *it;
    const std::string name = entry.path().filename().string();
    std::error_code entry_error;  // its own: an entry gone meanwhile is no checkpoint
    if (isSaveLeftover(name, /*checkpoints_only=*/false)) {
      leftovers.push_back(entry.path());
    } else if (const std::optional<int64_t> step = stepOfDirName(name);
               step && *step < current_step && entry.is_directory(entry_error)) {
      checkpoints.emplace_back(*step, entry.path());
    }
  }
  if (ec) return {dir.filename().string() + ": cannot list it: " + ec.message()};
  if (keep > 0 && checkpoints.size() >= size_t(keep)) {
    std::sort(checkpoints.begin(), checkpoints.end(), std::greater<>());
    // `current` is one of the `keep` kept.
    for (size_t i = size_t(keep) - 1; i < checkpoints.size(); ++i)
      leftovers.push_back(checkpoints[i].second);
  }
  std::vector<std::string> not_pruned;
  for (const fs::path& path : leftovers)
    if (fs::remove_all(path, ec) == static_cast<std::uintmax_t>(-1) || ec)
      not_pruned.push_back(path.filename().string() + ": " + ec.message());
  return not_pruned;
}

// Before a save: the checkpoints interrupted saves left half-written (a
// process killed while it wrote, a rename that failed), which would
// otherwise keep a checkpoint's worth of space until the next save's
// pruning, and make a tight disk refuse that save. Quietly: pruning says
// what it cannot delete, and takes the small leftovers too.
void removeLeftovers(const fs::path& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (isSaveLeftover(it->path().filename().string(), /*checkpoints_only=*/true)) {
      std::error_code ignored;
      fs::remove_all(it->path(), ignored);
    }
}

void checkComplete(const fs::path& checkpoint) {
  const CheckpointManifest manifest = readManifest(checkpoint);
  std::error_code ec;
  const fs::file_status tensors = fs::status(checkpoint / manifest.tensors_file, ec);
  if (!fs::exists(tensors))
    throw InputError(checkpoint.string() + ": incomplete checkpoint: no " + manifest.tensors_file);
  if (!fs::is_regular_file(tensors))
    throw InputError(checkpoint.string() + ": corrupt checkpoint: " + manifest.tensors_file +
                     " is not a plain file");
}

}  // namespace

std::string checkpointDirName(int64_t global_step) {
  std::string digits = std::to_string(global_step);
  if (digits.size() < size_t(layout::kStepDigits))
    digits.insert(0, size_t(layout::kStepDigits) - digits.size(), '0');
  return std::string(layout::kDirPrefix) + digits;
}

CheckpointDirLock::CheckpointDirLock(CheckpointDirLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      dir_(std::move(other.dir_)),
      where_(std::move(other.where_)),
      made_(std::move(other.made_)) {}

CheckpointDirLock& CheckpointDirLock::operator=(CheckpointDirLock&& other) noexcept {
  if (this != &other) {
    letGo();
    fd_ = std::exchange(other.fd_, -1);
    dir_ = std::move(other.dir_);
    where_ = std::move(other.where_);
    made_ = std::move(other.made_);
  }
  return *this;
}

std::optional<std::string> CheckpointDirLock::retakeIfLost() {
  if (dir_.empty()) return std::nullopt;  // a default-made lock holds nothing
  if (fd_ >= 0 && isFileAt(fd_, dir_ / layout::kLockFile)) return std::nullopt;
  // The old file goes first; the directory stays this lock's, so that a
  // retake that fails fails again at the next save rather than passing.
  if (fd_ >= 0) close(std::exchange(fd_, -1));
  const fs::path dir = dir_;
  const SourceLocation where = where_;
  try {
    *this = createCheckpointDir(dir, where);
  } catch (const InputError& e) {
    // Not the input's fault, mid-run: a failed save, as a full disk's.
    throw std::runtime_error("no checkpoint written into " + dir.string() +
                             ": it was deleted or moved while this run saved into it, and cannot "
                             "be taken again: " +
                             e.what());
  }
  return "checkpoint directory " + dir.string() + " (or its " + std::string(layout::kLockFile) +
         ") was deleted or moved while this run saved into it: it is created again, and held "
         "by this run again";
}

CheckpointDirLock::~CheckpointDirLock() { letGo(); }

void CheckpointDirLock::letGo() {
  if (fd_ < 0) return;
  // The .lock is unlinked while still locked: a run that opened it already
  // finds, once it has the flock, that it is no longer the file there
  // (lockDirectory), and starts over (createCheckpointDir).
  const fs::path lock_path = dir_ / layout::kLockFile;
  std::error_code error;
  int entries = 0;
  for (fs::directory_iterator at(dir_, error), end; !error && at != end && entries < 2;
       at.increment(error))
    ++entries;
  const bool unused =
      !error && entries == 1 && isFileAt(fd_, lock_path) && unlink(lock_path.c_str()) == 0;
  close(std::exchange(fd_, -1));  // lets go of the flock
  if (unused) removeMadeDirectories(made_);
}

CheckpointDirLock createCheckpointDir(const fs::path& dir, const SourceLocation& where) {
  // One attempt; a lambda, to make the lock as this friend may.
  bool in_use = false;  // the attempt found the directory another run's
  auto takeOnce = [&]() -> CheckpointDirLock {
    std::error_code error;
    // A directory refused below goes again, with the parents made for it.
    struct RemoveMadeUnlessHeld {
      std::vector<fs::path> made;
      bool held = false;
      ~RemoveMadeUnlessHeld() {
        if (!held) removeMadeDirectories(made);
      }
    } made_guard{makeDirectories(dir, error)};
    if (!error && !fs::is_directory(dir, error))
      error = std::make_error_code(std::errc::not_a_directory);
    if (error)
      throwInputError(
          where, where.line > 0 ? "checkpoint.dir" : "",
          "checkpoint directory " + dir.string() + ": cannot create it: " + error.message());
    // One checkpoint given for the directory of them would start a new run
    // from scratch and save inside it.
    if (fs::exists(dir / layout::kManifestFile, error)) {
      fs::path checkpoint = fs::absolute(dir, error).lexically_normal();
      if (!checkpoint.has_filename()) checkpoint = checkpoint.parent_path();  // "ckpt-5/"
      throwInputError(where, where.line > 0 ? "checkpoint.dir" : "",
                      "checkpoint directory " + dir.string() + ": it is one checkpoint (it holds " +
                          std::string(layout::kManifestFile) +
                          "), not a directory of them: give the directory it is in, " +
                          checkpoint.parent_path().string() +
                          ", to resume from that directory's latest checkpoint");
    }
    // A save writes a directory of its own in it first: one this process may
    // not create (another owner, a read-only mount) would fail the first save,
    // after the steps before it had trained.
    // A probe left by a process of this pid that was killed (pid 1 in a
    // container, every start) goes first.
    // Its file's path is as long as the longest a save writes (a path
    // near PATH_MAX fails only there).
    const std::string pid = std::to_string(getpid());
    const std::string probe_name =
        std::string(layout::kTempPrefix) + std::string(kProbeName) + "." + pid;
    const fs::path probe = dir / probe_name;
    const size_t longest_save = layout::kTempPrefix.size() +
                                checkpointDirName(kMaxGlobalStep).size() + 1 + pid.size() + 1 +
                                CheckpointManifest{}.tensors_file.size();
    const fs::path probe_file = probe / std::string(longest_save - probe_name.size() - 1, 'p');
    fs::remove_all(probe, error);
    // create_directory clears `error` when the probe is there still.
    if (!error && !fs::create_directory(probe, error) && !error)
      error = std::make_error_code(std::errc::file_exists);
    if (!error) {
      const int fd = ::open(probe_file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd < 0)
        error = std::error_code(errno, std::generic_category());
      else
        ::close(fd);
      std::error_code ignored;
      fs::remove_all(probe, ignored);
    }
    if (error)
      throwInputError(
          where, where.line > 0 ? "checkpoint.dir" : "",
          "checkpoint directory " + dir.string() + ": cannot write in it: " + error.message());

    auto locked = lockDirectory(dir);
    const auto* refusal = std::get_if<DirectoryLockRefusal>(&locked);
    in_use = refusal && refusal->in_use;
    if (refusal)
      throwInputError(where, where.line > 0 ? "checkpoint.dir" : "",
                      "checkpoint directory " + dir.string() + refusal->text +
                          (refusal->in_use ? ": two runs saving into one directory would replace "
                                             "each other's checkpoints; give this one a directory "
                                             "of its own"
                                           : ""));
    CheckpointDirLock lock(std::get<DirectoryLock>(locked).release(), dir, where, made_guard.made);
    made_guard.held = true;
    return lock;
  };
  // A run that made the directory and saved nothing removes it as it ends
  // (letGo): a run starting there meanwhile finds it gone at any step of its
  // attempt (creating, probing, locking), or its .lock replaced once it
  // holds it (lockDirectory), and starts over, making it again.
  // Whether it was gone cannot be told after the fact (a third run may have
  // made it again), so any refusal but another run's hold is tried again: a
  // lasting one fails the same way each time.
  constexpr int kAttempts = 4;
  for (int attempt = 1;; ++attempt) {
    try {
      return takeOnce();
    } catch (const InputError&) {
      if (in_use || attempt == kAttempts) throw;
    }
  }
}

std::optional<std::string> checkpointRoomShortfall(const fs::path& dir, int64_t bytes) {
  struct statvfs room {};
  if (statvfs(dir.c_str(), &room) != 0) return std::nullopt;
  const uint64_t free_bytes = uint64_t(room.f_bavail) * uint64_t(room.f_frsize);
  if (bytes <= 0 || free_bytes >= uint64_t(bytes)) return std::nullopt;
  return fmt::format(
      "checkpoint directory {} has {} free, and a checkpoint of this model takes {}: the "
      "first save will fail unless room is made",
      dir.string(), byteSize(int64_t(std::min<uint64_t>(free_bytes, INT64_MAX))), byteSize(bytes));
}

std::map<std::string, std::string> tensorsFileMetadata(const CheckpointManifest& manifest) {
  return {{"global_step", std::to_string(manifest.global_step)},
          {"model_name", manifest.model_name},
          {"architecture_hash", manifest.architecture_hash}};
}

SavedCheckpoint saveCheckpoint(const fs::path& dir, const CheckpointManifest& manifest,
                               const std::vector<TensorRef>& tensors, int keep) {
  if (manifest.global_step < 0 || manifest.global_step > kMaxGlobalStep)
    throw std::invalid_argument("saveCheckpoint: global step " +
                                std::to_string(manifest.global_step));  // readManifest refuses it
  if (!isPlainFileName(manifest.tensors_file) || manifest.tensors_file == layout::kManifestFile)
    throw std::invalid_argument("saveCheckpoint: tensors_file '" + manifest.tensors_file + "'");

  fs::create_directories(dir);
  removeLeftovers(dir);
  const std::string name = checkpointDirName(manifest.global_step);
  const std::string pid = std::to_string(::getpid());
  const fs::path temp = dir / (std::string(layout::kTempPrefix) + name + "." + pid);
  fs::remove_all(temp);
  fs::create_directory(temp);
  try {
    writeSafetensors(temp / manifest.tensors_file, tensors, tensorsFileMetadata(manifest));
    syncPath(temp / manifest.tensors_file, false);
    writeSyncedFile(temp / layout::kManifestFile, manifestJson(manifest));
    syncPath(temp, true);
  } catch (...) {
    // Most likely a full disk: give the space back now rather than at the next save.
    std::error_code ec;
    fs::remove_all(temp, ec);
    throw;
  }

  const fs::path checkpoint = dir / name;
  const bool is_new = !fs::exists(checkpoint);
  if (is_new) {
    renameOrThrow(temp, checkpoint);
  } else {
    // This step was saved before (say, periodically and again at shutdown),
    // and `latest` may name it: replace its files one at a time, tensors
    // first, so that its manifest always names a complete tensors file.
    renameOrThrow(temp / manifest.tensors_file, checkpoint / manifest.tensors_file);
    renameOrThrow(temp / layout::kManifestFile, checkpoint / layout::kManifestFile);
    syncPath(checkpoint, true);
    fs::remove_all(temp);
  }
  const fs::path latest_temp =
      dir / (std::string(layout::kTempPrefix) + std::string(layout::kLatestFile) + "." + pid);
  try {
    syncPath(dir, true);
    writeSyncedFile(latest_temp, name + "\n");
    renameOrThrow(latest_temp, dir / layout::kLatestFile);
  } catch (...) {
    // `latest` still names the checkpoint before, or there is none (a full
    // disk, most likely): a new one is taken back out, complete though it
    // is, so that the save failed as a whole, as its error says, and a
    // retry (an import's) finds the directory as it was.
    std::error_code ec;
    fs::remove(latest_temp, ec);
    if (is_new) fs::remove_all(checkpoint, ec);
    throw;
  }
  syncPath(dir, true);

  return {checkpoint, pruneCheckpoints(dir, keep, manifest.global_step)};
}

std::string notPrunedWarning(const SavedCheckpoint& saved, int keep) {
  constexpr size_t kNamed = 3;
  std::string named;
  for (size_t i = 0; i < std::min(kNamed, saved.not_pruned.size()); ++i)
    named += (i == 0 ? "" : "; ") + printablePrefix(saved.not_pruned[i], 300);
  if (saved.not_pruned.size() > kNamed)
    named += fmt::format("; {} more", saved.not_pruned.size() - kNamed);
  return fmt::format(
      "checkpoint.keep is {}, but old checkpoints or leftovers of interrupted saves in {} could "
      "not be deleted: {}; they stay and take room, each save tries again (said once)",
      keep, saved.path.parent_path().string(), named);
}

std::optional<fs::path> findLatestCheckpoint(const fs::path& dir) {
  std::error_code ec;
  const fs::path latest = dir / layout::kLatestFile;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  if (!fs::exists(latest, ec)) {
    // A save renames its checkpoint into place before it writes `latest`:
    // a crash in between, or a deleted `latest`, leaves checkpoints that a
    // fresh start would shadow and its pruning delete. With no pointer to
    // trust, the one of the highest step. A save renames it into place
    // whole, so one that is incomplete or unreadable was damaged after:
    // refused as `latest` naming it is, not passed over for an older one,
    // which would drop the steps between them without a word.
    // An entry of a checkpoint's name that is no directory (a link whose
    // target's disk is gone) counts too: passed over, the run would start
    // afresh and later save over the checkpoint it names.
    std::optional<std::pair<int64_t, fs::path>> newest;
    int named = 0;  // entries of a checkpoint's name
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
      if (const auto step = stepOfDirName(it->path().filename().string())) {
        ++named;
        if (!newest || *step > newest->first) newest.emplace(*step, it->path());
      }
    if (!newest) return std::nullopt;
    try {
      if (!fs::is_directory(newest->second, ec))
        throw InputError(newest->second.string() + ": not a checkpoint's directory" +
                         (fs::is_symlink(newest->second, ec) && !fs::exists(newest->second, ec)
                              ? " (a link whose target is gone)"
                              : ""));
      checkComplete(newest->second);
    } catch (const InputError& e) {
      throw InputError(std::string(e.what()) + " (" + dir.string() + " has no " +
                       std::string(layout::kLatestFile) +
                       " file: this is its checkpoint of the highest step; remove it to " +
                       (named > 1 ? "resume from the one before it)" : "start afresh)"));
    }
    return newest->second;
  }
  std::string name = readSmallFile(latest);
  while (!name.empty() && std::isspace(uint8_t(name.back()))) name.pop_back();
  if (!isPlainFileName(name))
    throw InputError(latest.string() + ": expected the name of a checkpoint directory, got '" +
                     printablePrefix(name, 200) + "'");
  const fs::path checkpoint = dir / name;
  if (!fs::is_directory(checkpoint, ec))
    throw InputError(
        latest.string() + " names " + printablePrefix(name, 200) + ", which " +
        (fs::exists(checkpoint, ec) ? "is not a checkpoint's directory" : "does not exist"));
  checkComplete(checkpoint);
  return checkpoint;
}

namespace {

// What to do with a TensorFlow checkpoint given where traind's is read.
constexpr std::string_view kTensorflowAdvice =
    "trainctl import converts it, init_from and trainctl inspect take it as it is";

}  // namespace

fs::path resolveCheckpoint(const fs::path& path) {
  std::error_code ec;
  if (fs::exists(path, ec) && !fs::is_directory(path, ec)) {
    // One of a TensorFlow checkpoint's files (P.index, P.data-00000-of-00001).
    const std::string extension = path.extension().string();
    const std::string tensorflow =
        extension == ".index" || extension.starts_with(".data-")
            ? "; it looks like a file of the TensorFlow checkpoint " +
                  printable((path.parent_path() / path.stem()).string()) + ": " +
                  std::string(kTensorflowAdvice)
            : "";
    throw InputError(path.string() + ": a file, not a checkpoint: expected a checkpoint's " +
                     "directory (" + std::string(layout::kDirPrefix) +
                     "N) or a checkpoint directory (with a " + std::string(layout::kLatestFile) +
                     " file)" + tensorflow);
  }
  if (!fs::is_directory(path, ec)) {
    fs::path index = path;
    index += ".index";
    if (fs::is_regular_file(index, ec))
      throw InputError(path.string() + ": a TensorFlow checkpoint's prefix (" +
                       printable(index.filename().string()) +
                       " is there), not traind's: " + std::string(kTensorflowAdvice));
    throw InputError(path.string() + ": no such checkpoint or checkpoint directory");
  }
  if (fs::exists(path / layout::kManifestFile, ec)) {
    checkComplete(path);
    return path;
  }
  if (std::optional<fs::path> latest = findLatestCheckpoint(path)) return *latest;
  // A TensorFlow checkpoint without TensorFlow's `checkpoint` file (which
  // would name it) is read by its prefix where TensorFlow's are read: the
  // newest one there is said.
  std::optional<fs::path> index;
  fs::file_time_type newest{};
  for (fs::directory_iterator at(path, ec), end; !ec && at != end; at.increment(ec)) {
    std::error_code time_error;
    const fs::file_time_type written = at->last_write_time(time_error);
    if (at->path().extension() == ".index" && !time_error && (!index || written > newest)) {
      index = at->path();
      newest = written;
    }
  }
  const std::string tensorflow =
      index ? "; it holds TensorFlow's " + printable(index->filename().string()) +
                  ", a TensorFlow checkpoint, whose prefix is " +
                  printable((path / index->stem()).string()) + ": " + std::string(kTensorflowAdvice)
            : "";
  throw InputError(path.string() + ": neither a checkpoint (no " +
                   std::string(layout::kManifestFile) + ") nor a checkpoint directory (no " +
                   std::string(layout::kLatestFile) + " file, no " +
                   std::string(layout::kDirPrefix) + "N)" + tensorflow);
}

fs::path readResolvedCheckpoint(const fs::path& path,
                                const std::function<void(const fs::path& checkpoint)>& read) {
  constexpr int kAttempts = 3;
  for (int attempt = 1;; ++attempt) {
    fs::path checkpoint;
    try {
      checkpoint = resolveCheckpoint(path);
    } catch (const InputError&) {
      // The checkpoint `latest` named may be pruned before its files are
      // checked: resolved again, as after a failed read. A damaged one
      // fails the same way each time; a checkpoint named itself at once.
      std::error_code ec;
      if (attempt == kAttempts || fs::exists(path / layout::kManifestFile, ec)) throw;
      continue;
    }
    try {
      read(checkpoint);
      return checkpoint;
    } catch (const InputError&) {
      // Pruned mid-read (its files go before its directory): `latest` has
      // moved on since. A checkpoint named itself, or one still latest,
      // failed for what it holds.
      if (checkpoint == path) throw;
      std::optional<fs::path> now;
      try {
        now = resolveCheckpoint(path);
      } catch (const InputError&) {
      }
      if (!now || *now == checkpoint) throw;
      if (attempt == kAttempts)
        throw InputError(checkpoint.string() + ": removed while it was read, " +
                         std::to_string(kAttempts) + " times: the run writing " + path.string() +
                         " keeps too few checkpoints for them to be read (checkpoint.keep)");
    }
  }
}

void replaceFileDurably(const std::filesystem::path& path, std::string_view bytes) {
  fs::path temp = path;
  temp += ".tmp";
  try {
    writeSyncedFile(temp, bytes);
    renameOrThrow(temp, path);
  } catch (...) {
    // A full disk's part of a file is no one's: nothing is left of it.
    std::error_code ignored;
    fs::remove(temp, ignored);
    throw;
  }
  syncPath(path.parent_path().empty() ? fs::path(".") : path.parent_path(), true);
}

CheckpointManifest readManifest(const fs::path& checkpoint) {
  const fs::path path = checkpoint / layout::kManifestFile;
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw InputError(checkpoint.string() + ": incomplete checkpoint: no " +
                     std::string(layout::kManifestFile));
  const JsonValue root = parseJson(readSmallFile(path), path.string());
  const SourceLocation where{path.string()};
  if (root.type != JsonValue::Type::Object)
    throwInputError(where, "",
                    "expected a JSON object, got " + std::string(jsonTypeName(root.type)));

  auto field = [&](std::string_view key, JsonValue::Type type) -> const JsonValue& {
    const JsonValue* value = root.find(key);
    if (!value) throwInputError(where, key, "missing");
    if (value->type != type)
      throwInputError(where, key,
                      "expected " + std::string(jsonTypeName(type)) + ", got " +
                          std::string(jsonTypeName(value->type)));
    return *value;
  };
  // At most `max`, which `at_most` words: digits past int64 are a number
  // too large, not one of another kind.
  auto integer = [&](std::string_view key, int64_t max, const std::string& at_most) {
    const JsonValue& value = field(key, JsonValue::Type::Number);
    const std::optional<int64_t> n = value.asInt64();
    const bool digits =
        !value.text.empty() && std::all_of(value.text.begin(), value.text.end(),
                                           [](char c) { return c >= '0' && c <= '9'; });
    if ((!n && digits) || (n && *n > max))
      throwInputError(where, key,
                      "expected at most " + at_most + ", got " + printablePrefix(value.text, 200));
    if (!n || *n < 0)
      throwInputError(where, key,
                      "expected a non-negative integer, got " + printablePrefix(value.text, 200));
    return *n;
  };

  const int64_t version = integer("format_version", INT64_MAX, std::to_string(INT64_MAX));
  if (version != layout::kFormatVersion)
    throwInputError(where, "format_version",
                    "expected " + std::to_string(layout::kFormatVersion) + ", got " +
                        std::to_string(version) + " (written by another traind version)");
  CheckpointManifest manifest;
  manifest.global_step =
      integer("global_step", kMaxGlobalStep, "2^53 (" + std::to_string(kMaxGlobalStep) + ")");
  manifest.model_name = field("model_name", JsonValue::Type::String).text;
  manifest.architecture_hash = field("architecture_hash", JsonValue::Type::String).text;
  manifest.created = field("created", JsonValue::Type::String).text;
  manifest.tensors_file = field("tensors_file", JsonValue::Type::String).text;
  if (root.find("training_set"))
    manifest.training_set =
        printablePrefix(field("training_set", JsonValue::Type::String).text, 200);
  if (!isPlainFileName(manifest.tensors_file))
    throwInputError(where, "tensors_file",
                    "expected a file name in the checkpoint directory, got '" +
                        printable(manifest.tensors_file) + "'");
  return manifest;
}

void checkAgreesWithManifest(const fs::path& checkpoint, const CheckpointManifest& manifest,
                             const SafetensorsReader& tensors) {
  const std::string manifest_path = (checkpoint / layout::kManifestFile).string();
  const std::string tensors_path = (checkpoint / manifest.tensors_file).string();
  auto agree = [&](const std::string& key, const std::string& in_manifest) {
    const auto it = tensors.metadata().find(key);
    if (it == tensors.metadata().end() || it->second == in_manifest) return;
    throw InputError(checkpoint.string() + ": corrupt checkpoint: " + manifest_path + " says " +
                     key + " " + printable(in_manifest) + ", " + tensors_path + " says " +
                     printable(it->second));
  };
  agree("global_step", std::to_string(manifest.global_step));
  agree("model_name", manifest.model_name);
  agree("architecture_hash", manifest.architecture_hash);
  // The name's step compared as digits: one past int64 differs from every
  // manifest's too.
  // "ckpt-5/", "ckpt-5//" and "ckpt-5/." name the directory ckpt-5 too.
  fs::path named = checkpoint.lexically_normal();
  if (!named.has_filename()) named = named.parent_path();
  const std::string name = named.filename().string();
  std::optional<std::string_view> digits = stepDigitsOfDirName(name);
  if (!digits) return;
  digits->remove_prefix(std::min(digits->find_first_not_of('0'), digits->size() - 1));
  if (*digits != std::to_string(manifest.global_step))
    throw InputError(checkpoint.string() + ": corrupt checkpoint: " + manifest_path +
                     " says global_step " + std::to_string(manifest.global_step) +
                     ", the directory's name " + std::string(*digits));
}

}  // namespace traind
