#include "core/made_directories.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace traind {

namespace fs = std::filesystem;

std::vector<fs::path> makeDirectories(const fs::path& dir, std::error_code& error) {
  std::vector<fs::path> chain;  // dir and its parents, innermost first
  for (fs::path at = fs::absolute(dir, error).lexically_normal(); !error && !at.empty();
       at = at.parent_path()) {
    if (at.has_filename()) chain.push_back(at);  // "a/b/" names "a/b" again
    if (at == at.parent_path()) break;           // the root
  }
  std::vector<fs::path> made;
  for (auto at = chain.rbegin(); !error && at != chain.rend(); ++at) {
    if (mkdir(at->c_str(), 0777) == 0)
      made.push_back(*at);
    else if (errno != EEXIST)
      error = std::error_code(errno, std::generic_category());
  }
  // Each new directory's entry in its parent is on disk before a checkpoint
  // is: a save fsyncs the checkpoint and the directory it is in, not that
  // directory's parents, which a crash could leave without it. Best effort:
  // a file system that cannot fsync a directory saves no less for it.
  for (const fs::path& at : made) {
    const int fd = ::open(at.parent_path().c_str(), O_RDONLY | O_CLOEXEC | O_DIRECTORY);
    if (fd < 0) continue;
    (void)::fsync(fd);
    ::close(fd);
  }
  return made;
}

void removeMadeDirectories(const std::vector<fs::path>& made) {
  for (auto at = made.rbegin(); at != made.rend(); ++at)
    if (rmdir(at->c_str()) != 0) return;
}

}  // namespace traind
