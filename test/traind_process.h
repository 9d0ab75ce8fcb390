// Runs the real traind binary for integration tests and captures what it said.
#pragma once

#include <filesystem>
#include <string>

namespace traind::testing {

struct ProcessResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `build/daemon/traind <args>` through the shell, in the source tree.
ProcessResult runTraind(const std::string& args);

// A fresh empty directory under the system temp dir, unique to this test.
std::filesystem::path freshTempDir(const std::string& name);

std::string readFile(const std::filesystem::path& path);
void writeFile(const std::filesystem::path& path, const std::string& text);

// The text of `from` with every occurrence of `what` replaced by `with`.
std::string replaceAll(std::string from, const std::string& what, const std::string& with);

}  // namespace traind::testing
