// What the distributed tests share: model specs of the source tree, cluster
// specs on free ports, and raw connections to a ps for calls no worker makes.
#pragma once

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/cluster_spec.h"
#include "core/layer_graph.h"
#include "core/model_spec.h"
#include "core/placement.h"
#include "rpc/traind.capnp.h"
#include "test/traind_process.h"

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

// A test's own connection to the ps at `address`, to speak the protocol on
// as a worker or the chief would (it says no hello of its own).
struct PsPeer {
  PsPeer(kj::AsyncIoContext& io, const std::string& address);

  kj::Own<kj::AsyncIoStream> stream;
  capnp::TwoPartyClient client;
  wire::ParameterShard::Client shard;
};

// A hello to ps `shard_index` as `worker` of a job of `spec` on `cluster`
// would say it, ready to send (or to spoil).
capnp::Request<wire::ParameterShard::HelloParams, wire::ParameterShard::HelloResults> helloAs(
    wire::ParameterShard::Client& shard, const ModelSpec& spec, const ClusterSpec& cluster,
    uint32_t worker, uint32_t shard_index = 0);

// A fashion_mlp ps task, the one ps of a cluster with 2 workers in `mode`
// ("async" or "sync") on free ports, and what a test that speaks its
// protocol needs beside it: the model and the chunks of its shard.
struct MlpPsTask {
  MlpPsTask(const std::filesystem::path& dir, const std::string& mode);

  // A hello to this ps as `worker` would say it, ready to send (or to spoil).
  capnp::Request<wire::ParameterShard::HelloParams, wire::ParameterShard::HelloResults> hello(
      wire::ParameterShard::Client& shard, uint32_t worker) const;

  std::filesystem::path cluster;  // the spec, <dir>/cluster.yaml
  std::string address;            // the ps's
  BackgroundTraind ps;
  ModelSpec spec;
  LayerGraph graph;
  ShardPlan plan;                  // the shard's variables
  std::vector<ShardChunk> chunks;  // as the ps cuts them
};

}  // namespace traind::testing
