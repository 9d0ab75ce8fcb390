// Directories a run makes for itself, and takes away again when it leaves
// nothing in them: a checkpoint or summary directory of a run that saved
// nothing is left as the run found it (docs/checkpoints.md).
#pragma once

#include <filesystem>
#include <system_error>
#include <vector>

namespace traind {

// Makes `dir` and whichever of its parents are missing, as
// create_directories does, and lists those this call made (mkdir answered
// 0, not EEXIST: another process may make one meanwhile), outermost first.
// Each one made is fsynced into its parent (best effort). `error` says why
// one could not be made; those made before it are listed.
std::vector<std::filesystem::path> makeDirectories(const std::filesystem::path& dir,
                                                   std::error_code& error);

// Removes what makeDirectories made, innermost first, while each is empty.
void removeMadeDirectories(const std::vector<std::filesystem::path>& made);

}  // namespace traind
