#include "test/cluster_fixture.h"

#include <unistd.h>

#include <catch2/catch.hpp>

#include "test/traind_process.h"

namespace traind::testing {

std::string modelPath(const char* name) {
  return std::string(TRAIND_SOURCE_DIR) + "/configs/models/" + name;
}

std::filesystem::path writeCluster(const std::filesystem::path& dir, int ps, int workers,
                                   const std::string& training) {
  const int base = freePortRange(ps + workers);
  const std::string text = "cluster:\n  ps: " + localAddresses(base, ps) +
                           "\n  worker: " + localAddresses(base + ps, workers) +
                           "\ntraining:\n" + training;
  writeFile(dir / "cluster.yaml", text);
  return dir / "cluster.yaml";
}

kj::Own<kj::AsyncIoStream> connectWithin10s(kj::AsyncIoContext& io, const std::string& address) {
  kj::Own<kj::AsyncIoStream> stream;
  for (int i = 0; i < 200 && !stream; ++i) {
    kj::runCatchingExceptions([&] {
      stream = io.provider->getNetwork().parseAddress(address).wait(io.waitScope)->connect().wait(
          io.waitScope);
    });
    if (!stream) usleep(50000);
  }
  REQUIRE(stream);
  return stream;
}

}  // namespace traind::testing
