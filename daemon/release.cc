#include "daemon/release.h"

#include "rpc/shard_server.h"

namespace traind {

// TRAIND_VERSION is defined for this file alone (daemon/CMakeLists.txt): a
// new version rebuilds it, not every file.
const char* releaseVersion() { return TRAIND_VERSION; }

std::string releaseText(const std::string& program) {
  return program + " " + releaseVersion() + " (wire version " + std::to_string(kWireVersion) + ")";
}

}  // namespace traind
