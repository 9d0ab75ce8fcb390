#include "test/cluster_fixture.h"

#include <unistd.h>

#include <catch2/catch.hpp>

#include "core/cluster_spec.h"
#include "core/parameter_shard.h"
#include "rpc/shard_server.h"
#include "test/traind_process.h"

namespace traind::testing {

std::string modelPath(const char* name) {
  return std::string(TRAIND_SOURCE_DIR) + "/configs/models/" + name;
}

std::filesystem::path writeCluster(const std::filesystem::path& dir, int ps, int workers,
                                   const std::string& training) {
  const int base = freePortRange(ps + workers);
  const std::string text = "cluster:\n  ps: " + localAddresses(base, ps) +
                           "\n  worker: " + localAddresses(base + ps, workers) + "\ntraining:\n" +
                           training;
  writeFile(dir / "cluster.yaml", text);
  return dir / "cluster.yaml";
}

kj::Own<kj::AsyncIoStream> connectWithin10s(kj::AsyncIoContext& io, const std::string& address) {
  kj::Own<kj::AsyncIoStream> stream;
  for (int i = 0; i < 200 && !stream; ++i) {
    kj::runCatchingExceptions([&] {
      stream = io.provider->getNetwork()
                   .parseAddress(address)
                   .wait(io.waitScope)
                   ->connect()
                   .wait(io.waitScope);
    });
    if (!stream) usleep(50000);
  }
  REQUIRE(stream);
  return stream;
}

MlpPsTask::MlpPsTask(const std::filesystem::path& dir, const std::string& mode)
    : cluster(writeCluster(dir, 1, 2, "  mode: " + mode + "\n")),
      address(loadClusterSpec(cluster.string()).ps[0].toString()),
      ps("--cluster " + cluster.string() + " --model " + modelPath("fashion_mlp.yaml") +
             " --job ps --task 0",
         dir / "ps.log"),
      spec(loadModelSpec(modelPath("fashion_mlp.yaml"))),
      graph(buildLayerGraph(spec)),
      plan(placeVariables(VariableLayout(graph.variables), 1).shards[0]),
      chunks(transferChunks(graph, plan, ParameterShard::kChunkFloats)) {}

PsPeer::PsPeer(kj::AsyncIoContext& io, const std::string& address)
    : stream(connectWithin10s(io, address)),
      client(*stream),
      shard(client.bootstrap().castAs<wire::ParameterShard>()) {}

capnp::Request<wire::ParameterShard::HelloParams, wire::ParameterShard::HelloResults> helloAs(
    wire::ParameterShard::Client& shard, const ModelSpec& spec, const ClusterSpec& cluster,
    uint32_t worker, uint32_t shard_index) {
  const LayerGraph graph = buildLayerGraph(spec);
  const Placement placement =
      placeVariables(VariableLayout(graph.variables), int(cluster.ps.size()));
  auto request = shard.helloRequest();
  request.setShardIndex(shard_index);
  request.setChunks(chunksFingerprint(
      transferChunks(graph, placement.shards.at(shard_index), ParameterShard::kChunkFloats)));
  request.setArchitectureHash(architectureHash(spec));
  request.setForwardRule(forwardRule(spec));
  request.setUpdateRule(updateRule(spec));
  request.setDataRule(dataRule(spec));
  request.setTrainingRule(trainingRule(cluster));
  request.setWorkerTask(worker);
  request.setWireVersion(kWireVersion);
  return request;
}

capnp::Request<wire::ParameterShard::HelloParams, wire::ParameterShard::HelloResults>
MlpPsTask::hello(wire::ParameterShard::Client& shard, uint32_t worker) const {
  return helloAs(shard, spec, loadClusterSpec(cluster.string()), worker);
}

}  // namespace traind::testing
