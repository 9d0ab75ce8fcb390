#include "core/directory_lock.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "test/temp_dir.h"

namespace traind {
namespace {

namespace fs = std::filesystem;

std::string refusalOf(std::variant<DirectoryLock, DirectoryLockRefusal> locked) {
  const auto* refusal = std::get_if<DirectoryLockRefusal>(&locked);
  return refusal ? (refusal->in_use ? "in use:" : "not taken:") + refusal->text : "taken";
}

}  // namespace

TEST_CASE("a directory's .lock is one holder's, named by its pid, until it lets go",
          "[directory_lock]") {
  TempDir tmp;
  {
    auto first = lockDirectory(tmp.path());
    REQUIRE(std::holds_alternative<DirectoryLock>(first));
    std::ifstream pid(tmp.path() / ".lock");
    CHECK(std::string(std::istreambuf_iterator<char>(pid), {}) == std::to_string(getpid()) + "\n");
    // flock holds per open file: a second open, in this process too, is refused.
    CHECK(refusalOf(lockDirectory(tmp.path())) ==
          "in use: is in use by another run (pid " + std::to_string(getpid()) + ")");
  }
  CHECK(refusalOf(lockDirectory(tmp.path())) == "taken");
  // A .lock that is a link is never followed.
  fs::remove(tmp.path() / ".lock");
  fs::create_symlink(tmp.path() / "elsewhere", tmp.path() / ".lock");
  CHECK(refusalOf(lockDirectory(tmp.path())) ==
        "not taken:: cannot open .lock: it is a symbolic link; remove it (only a run holds it, "
        "and a link or other file there is not one of traind's)");
  CHECK_FALSE(fs::exists(tmp.path() / "elsewhere"));
}

TEST_CASE("a directory itself is one holder's, and holds no file of the lock's",
          "[directory_lock]") {
  TempDir tmp;
  {
    auto first = lockDirectoryItself(tmp.path());
    REQUIRE(std::holds_alternative<DirectoryLock>(first));
    CHECK(refusalOf(lockDirectoryItself(tmp.path())) == "in use: is in use by another run");
    CHECK(fs::is_empty(tmp.path()));
    // The two kinds are apart: a .lock in it is another lock.
    CHECK(refusalOf(lockDirectory(tmp.path())) == "taken");
  }
  CHECK(refusalOf(lockDirectoryItself(tmp.path())) == "taken");
  CHECK_THAT(refusalOf(lockDirectoryItself(tmp.path() / "missing")),
             Catch::StartsWith("not taken:: cannot open it: No such file or directory"));
  // A released lock's descriptor is the caller's: the lock outlives the DirectoryLock.
  int fd = -1;
  {
    auto held = lockDirectoryItself(tmp.path());
    fd = std::get<DirectoryLock>(held).release();
  }
  CHECK(refusalOf(lockDirectoryItself(tmp.path())) == "in use: is in use by another run");
  close(fd);
  CHECK(refusalOf(lockDirectoryItself(tmp.path())) == "taken");
}

TEST_CASE("a descriptor is the file at its path until that is removed or replaced",
          "[directory_lock]") {
  TempDir tmp;
  const fs::path path = tmp.path() / "held";
  std::ofstream(path) << "x";
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  CHECK(isFileAt(fd, path));
  std::ofstream(tmp.path() / "other") << "y";
  fs::rename(tmp.path() / "other", path);
  CHECK_FALSE(isFileAt(fd, path));
  fs::remove(path);
  CHECK_FALSE(isFileAt(fd, path));
  close(fd);
}

// A run that saved nothing unlinks its .lock as it ends (CheckpointDirLock),
// while another may have opened that file and be about to lock it: locked
// once its holder lets go, it is no longer the directory's lock, and a third
// run may take the new one beside it. lockDirectory refuses such a lock.
// Threads stand in for runs (a flock is per open file, so they exclude each
// other as processes do); the race is rare, so they take and leave the lock
// many times.
TEST_CASE("a .lock unlinked by its ending holder is never held twice", "[directory_lock]") {
  TempDir tmp;
  std::atomic<int> holders{0}, held_twice{0}, taken{0};
  auto run = [&] {
    while (taken < 1500) {
      auto locked = lockDirectory(tmp.path());
      if (!std::holds_alternative<DirectoryLock>(locked)) continue;
      if (++holders > 1) ++held_twice;
      ++taken;
      std::this_thread::sleep_for(std::chrono::microseconds(50));  // a run's time in it
      --holders;
      fs::remove(tmp.path() / kDirectoryLockFile);  // then the lock goes, as `locked` does
    }
  };
  std::vector<std::thread> runs;
  for (int i = 0; i < 3; ++i) runs.emplace_back(run);
  for (std::thread& t : runs) t.join();
  CHECK(held_twice == 0);
}

}  // namespace traind
