#include "core/directory_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/printable.h"

namespace traind {

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) close(fd_);
}

bool isFileAt(int fd, const std::filesystem::path& path) {
  struct stat held {
  }, there{};
  return fstat(fd, &held) == 0 && stat(path.c_str(), &there) == 0 && held.st_dev == there.st_dev &&
         held.st_ino == there.st_ino;
}

std::variant<DirectoryLock, DirectoryLockRefusal> lockDirectory(const std::filesystem::path& dir) {
  const std::filesystem::path lock_path = dir / kDirectoryLockFile;
  const int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  struct stat lock_stat {};
  const bool plain = fd >= 0 && fstat(fd, &lock_stat) == 0 && S_ISREG(lock_stat.st_mode);
  if (!plain) {
    const int why = errno;
    if (fd >= 0) close(fd);
    // A .lock this user may not open is another user's, whose run may hold
    // it: removing it would let two runs save into one directory.
    if (fd < 0 && (why == EACCES || why == EPERM)) {
      struct stat owner {};
      const bool known = lstat(lock_path.c_str(), &owner) == 0;
      return DirectoryLockRefusal{
          false, std::string(": cannot open ") + kDirectoryLockFile + ": " + std::strerror(why) +
                     (known ? " (it is uid " + std::to_string(owner.st_uid) + "'s)" : "") +
                     "; a run of another user may hold it: give this run a directory of its own"};
    }
    return DirectoryLockRefusal{
        false, std::string(": cannot open ") + kDirectoryLockFile + ": " +
                   (fd >= 0        ? std::string("it is not a plain file")
                    : why == ELOOP ? std::string("it is a symbolic link")
                                   : std::string(std::strerror(why))) +
                   "; remove it (only a run holds it, and a link or other file there is not one "
                   "of traind's)"};
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int why = errno;
    std::string holder(32, '\0');
    const ssize_t got = pread(fd, holder.data(), holder.size(), 0);
    close(fd);
    holder.resize(size_t(std::max<ssize_t>(got, 0)));
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
    if (why == EWOULDBLOCK)
      return DirectoryLockRefusal{
          true, " is in use by another run" +
                    (holder.empty() ? std::string() : " (pid " + printable(holder) + ")")};
    return DirectoryLockRefusal{
        false, std::string(": cannot lock ") + kDirectoryLockFile + ": " + std::strerror(why)};
  }
  if (!isFileAt(fd, lock_path)) {  // a holder that saved nothing unlinked it as it ended
    close(fd);
    return DirectoryLockRefusal{false, std::string(": cannot lock ") + kDirectoryLockFile +
                                           ": a run ending in this directory removed it as it "
                                           "was taken"};
  }
  // Who holds it, for the message above (the pid as this host sees it); a
  // write that fails only leaves that message without it.
  const std::string pid = std::to_string(getpid()) + "\n";
  [[maybe_unused]] const bool noted =
      ftruncate(fd, 0) == 0 && pwrite(fd, pid.data(), pid.size(), 0) == ssize_t(pid.size());
  return DirectoryLock(fd);
}

std::variant<DirectoryLock, DirectoryLockRefusal> lockDirectoryItself(
    const std::filesystem::path& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    const int why = errno;
    return DirectoryLockRefusal{false, std::string(": cannot open it: ") + std::strerror(why)};
  }
  DirectoryLock lock(fd);
  if (flock(fd, LOCK_EX | LOCK_NB) == 0) return lock;
  const int why = errno;
  if (why == EWOULDBLOCK) return DirectoryLockRefusal{true, " is in use by another run"};
  return DirectoryLockRefusal{false, std::string(": cannot lock it: ") + std::strerror(why)};
}

}  // namespace traind
