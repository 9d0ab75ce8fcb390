// One run at a time in a directory that runs write into: an exclusive
// flock on <dir>/.lock (checkpoints), with the holder's pid written in it
// for the message the next run gets, or on the directory itself (TensorBoard
// summaries, whose directory other tools read: no file of traind's in it).
// The kernel lets go of the lock when the process ends, however it ends, so
// a stale .lock file never blocks a start.
//
//   auto locked = lockDirectory(dir);
//   if (auto* refusal = std::get_if<DirectoryLockRefusal>(&locked))
//     throw ...("directory " + dir.string() + refusal->text);
//   DirectoryLock lock = std::get<DirectoryLock>(std::move(locked));
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <variant>

namespace traind {

inline constexpr const char* kDirectoryLockFile = ".lock";

// The open descriptor a lock was taken on (the .lock file, or the
// directory): the lock is held until it closes. -1 holds none.
class DirectoryLock {
 public:
  explicit DirectoryLock(int fd) : fd_(fd) {}
  DirectoryLock(DirectoryLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  DirectoryLock& operator=(DirectoryLock&&) = delete;
  ~DirectoryLock();

  // The descriptor, still the lock's, or -1.
  int fd() const { return fd_; }
  // The descriptor, now the caller's to close.
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// Why the lock was not taken, as the end of a sentence that starts with the
// directory's name: " is in use by another run (pid 4242)" (in_use), or
// ": cannot open .lock: it is a symbolic link; remove it (...)".
struct DirectoryLockRefusal {
  bool in_use = false;
  std::string text;
};

// Whether descriptor `fd` is the file `path` names now (not one deleted,
// or replaced, since it was opened).
bool isFileAt(int fd, const std::filesystem::path& path);

// Opens <dir>/.lock (creating it; never through a link, and only a plain
// file: the pid must not land in a file that someone else's link points
// at), takes the flock without waiting and writes this process's pid in
// it. The lock, or why not: refused too when, once locked, the file is no
// longer the one <dir>/.lock names (a holder that saved nothing unlinks it
// as it ends, CheckpointDirLock), for the caller to try again.
std::variant<DirectoryLock, DirectoryLockRefusal> lockDirectory(const std::filesystem::path& dir);

// The flock on `dir` itself (a directory there), without waiting; in_use
// names no holder.
std::variant<DirectoryLock, DirectoryLockRefusal> lockDirectoryItself(
    const std::filesystem::path& dir);

}  // namespace traind
