#include "core/directory_lock.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <variant>

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

}  // namespace traind
