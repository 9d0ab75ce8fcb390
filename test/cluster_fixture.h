// What the distributed tests share: model specs of the source tree, cluster
// specs on free ports, and raw connections to a ps for calls no worker makes.
#pragma once

#include <kj/async-io.h>

#include <filesystem>
#include <string>

namespace traind::testing {

// configs/models/<name> of the source tree.
std::string modelPath(const char* name);

// A cluster of `ps` ps tasks and `workers` workers on consecutive free ports,
// written to <dir>/cluster.yaml with `training` as its training section.
std::filesystem::path writeCluster(const std::filesystem::path& dir, int ps, int workers,
                                   const std::string& training);

// A raw connection to `address` (a ps starting up); fails the test when the
// ps does not listen within 10 s.
kj::Own<kj::AsyncIoStream> connectWithin10s(kj::AsyncIoContext& io, const std::string& address);

}  // namespace traind::testing
