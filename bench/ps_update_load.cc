// ps_update_load: a ps's work for an async job's pushes, with no job around
// it. distributed_compare.py runs it beside two standalone traind, so that
// the machine carries both workers' compute and the ps's updates but
// nothing waits: the most an async job of two workers and a ps on this
// host's cores can reach (docs/benchmarks.md, item 3).
//
//   build/bench/ps_update_load --model m.yaml --pushes-per-sec 200
//
// It holds the whole model as one ps shard (ParameterShard, async) and
// applies --pushes-per-sec pushes, alternating between two workers, each
// with a gradient buffer and a parameter buffer of the model's size as
// its shared memory region: every chunk through ParameterShard::push with
// the region as values_out, as the ps does for a worker on its host. Pushes
// are paced from the start; one that falls behind goes at once. It runs
// until SIGTERM or SIGINT (or --seconds), then prints on stdout one JSON
// line: {"pushes": N, "push_ms": mean CPU-side time of a push}.
#include <fmt/format.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <exception>
#include <thread>
#include <vector>

#include "core/cluster_spec.h"
#include "core/error.h"
#include "core/layer_graph.h"
#include "core/model_spec.h"
#include "core/parameter_shard.h"

using namespace traind;

namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_stop = 0;

void onStopSignal(int) { g_stop = 1; }

// One ps, two workers, async: the shard ParameterShard builds is the whole
// model. The addresses only have to differ; nothing listens.
ClusterSpec asyncClusterOfTwoWorkers() {
  ClusterSpec cluster;
  cluster.ps.push_back({"127.0.0.1", 1, {}});
  cluster.worker.push_back({"127.0.0.1", 2, {}});
  cluster.worker.push_back({"127.0.0.1", 3, {}});
  cluster.mode = TrainingMode::Async;
  cluster.replicas_to_aggregate = 2;
  cluster.total_num_replicas = 2;
  return cluster;
}

struct Region {
  std::vector<float> gradients, parameters;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A ps's update work for an async job's pushes, paced, with no job"};
  std::string model_path;
  double pushes_per_sec = 0.0, seconds = 0.0;
  app.add_option("--model", model_path, "model spec (YAML)")->required();
  app.add_option("--pushes-per-sec", pushes_per_sec, "pushes applied per second")
      ->required()
      ->check(CLI::Range(0.1, 1e5));
  app.add_option("--seconds", seconds, "stop after this long (0: at SIGTERM or SIGINT only)")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);

  try {
    signal(SIGTERM, onStopSignal);
    signal(SIGINT, onStopSignal);
    const ModelSpec spec = loadModelSpec(model_path);
    const LayerGraph graph = buildLayerGraph(spec);
    ParameterShard shard(spec, graph, asyncClusterOfTwoWorkers(), 0);
    shard.markReady(0);
    Region regions[2];
    for (Region& r : regions) {
      r.gradients.assign(size_t(shard.modelSize()), 1e-3f);
      r.parameters.assign(size_t(shard.modelSize()), 0.0f);
    }

    const Clock::duration period = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(1.0 / pushes_per_sec));
    const Clock::time_point start = Clock::now();
    const std::chrono::duration<double> run_for(seconds);
    Clock::duration working{};
    int64_t pushes = 0;
    for (;; ++pushes) {
      const Clock::time_point due = start + pushes * period;
      if (seconds > 0 && due - start >= run_for) break;
      std::this_thread::sleep_until(due);  // a stop waits for this sleep's end
      if (g_stop) break;
      const Clock::time_point began = Clock::now();
      Region& region = regions[pushes % 2];
      for (const ShardChunk& c : shard.chunks())
        shard.push(uint32_t(pushes % 2), shard.globalStep(), c.shard_offset,
                   {region.gradients.data() + c.layout_offset, size_t(c.size)},
                   region.parameters.data() + c.layout_offset);
      working += Clock::now() - began;
    }
    const double push_ms =
        pushes ? std::chrono::duration<double, std::milli>(working).count() / double(pushes) : 0.0;
    fmt::print("{{\"pushes\": {}, \"push_ms\": {:.3f}}}\n", pushes, push_ms);
    return 0;
  } catch (const InputError& e) {
    fmt::print(stderr, "ps_update_load: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "ps_update_load: {}\n", e.what());
    return 1;
  }
}
