// Which release of traind this is: the project's version (CMakeLists.txt)
// and the wire version its ps tasks and workers speak, for `--version` and
// /status. Every node of a job must run one release (docs/operations.md).
#pragma once

#include <string>

namespace traind {

// "0.1.0".
const char* releaseVersion();

// "traind 0.1.0 (wire version 11)": `program` and the two versions.
std::string releaseText(const std::string& program);

}  // namespace traind
