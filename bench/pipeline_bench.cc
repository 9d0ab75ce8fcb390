// pipeline_bench: a placed model's training step as a pipeline of its stages
// with 1 micro-batch (plain model parallelism: one stage works at a time)
// against M micro-batches (1F1B: the stages work at once), in one run.
//
//   build/bench/pipeline_bench                                  # M = 1, 4, 8
//   build/bench/pipeline_bench --model configs/models/fashion_mlp_pipeline.yaml --micro-batches 1,4
//
// The model spec's placement and batch size (or --batch) are used, its
// devices made with --threads-per-device compute threads each (default 1:
// each stage one core). Batches are random inputs and labels. The default model,
// configs/models/fashion_wide_pipeline.yaml, cuts a 784-1024-1024-1536-10
// MLP into two stages of about the same work; fashion_mlp's own split
// (fashion_mlp_pipeline.yaml) puts most of the work on its first stage, so
// micro-batches can gain little there.
//
// For each setting: examples/sec of Replica::trainStep (forward, backward,
// the gradients complete; no optimizer), each stage's busy fraction (time
// computing over the steps' time), and the ratio to M = 1. "one device"
// is the whole model on one device with the same threads as one stage: the
// throughput a single core reaches, the ceiling of two stages being twice
// it. Settings take turns, --steps steps each per round, so that load from
// elsewhere hits all alike; the table shows medians over the rounds and the
// min-max of examples/sec, and the cores the rest of the machine used
// meanwhile ("others"): a pipeline of S stages needs S free cores, so its
// figures mean something only where others stays near 0. Wrap it in
// `flock /tmp/traind-bench.lock nice -n -10`.
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/machine_load.h"
#include "core/layer_graph.h"
#include "core/model_spec.h"
#include "core/random.h"
#include "core/stage_plan.h"
#include "core/variable_layout.h"
#include "devices/device_list.h"
#include "devices/pipeline.h"

namespace traind {
namespace {

struct Setting {
  std::string label;
  int micro_batches = 0;  // 0: the whole model on one device
  std::unique_ptr<Replica> replica;
  Pipeline* pipeline = nullptr;  // null for the whole model on one device
  std::vector<double> examples_per_second;
  std::vector<std::vector<double>> busy;  // per round, per stage
  std::vector<double> others;             // per round: cores the rest of the machine used
};

double ownCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

int run(int argc, char** argv) {
  CLI::App app("A placed model as a pipeline: 1 micro-batch against M");
  std::string model = "configs/models/fashion_wide_pipeline.yaml";
  std::vector<int> micro_batches{1, 4, 8};
  int steps = 40, rounds = 5, threads_per_device = 1;
  int64_t batch_option = 0;
  app.add_option("--model", model, "a model spec that places its layers");
  app.add_option("--micro-batches", micro_batches, "settings of M")->delimiter(',');
  app.add_option("--steps", steps, "timed steps per setting and round");
  app.add_option("--rounds", rounds, "rounds (each setting once per round)");
  app.add_option("--threads-per-device", threads_per_device, "compute threads of each device");
  app.add_option("--batch", batch_option, "batch size (default: the spec's data.batch_size)");
  CLI11_PARSE(app, argc, argv);

  const ModelSpec spec = loadModelSpec(model);
  const LayerGraph graph = buildLayerGraph(spec);
  const VariableLayout layout(graph.variables);
  FlatBuffer parameters(layout.totalSize()), gradients(layout.totalSize());
  initializeVariables(graph, layout, spec.seed, parameters);
  const StagePlan plan = planStages(spec, graph, spec.training.devices);
  if (!plan.placed) throw InputError(model + ": the model places no layer on a device");
  const int64_t batch_size = batch_option > 0 ? batch_option : spec.data.batch_size;
  const int devices_count = int(spec.training.devices.size());
  const std::vector<std::unique_ptr<Device>> devices =
      createDevices(spec.training.devices, devices_count * threads_per_device);
  std::vector<Device*> stage_devices;
  for (const PipelineStage& stage : plan.stages)
    for (const auto& device : devices)
      if (device->name() == stage.device) stage_devices.push_back(device.get());
  const std::vector<std::unique_ptr<Device>> single = createDevices({"cpu:0"}, threads_per_device);

  Rng rng(1);
  std::vector<float> inputs(size_t(batch_size * numElements(graph.input_shape)));
  for (float& x : inputs) x = float(rng.uniform());
  std::vector<int32_t> labels(static_cast<size_t>(batch_size));
  const uint64_t classes = uint64_t(numElements(graph.output_shape));
  for (int32_t& label : labels) label = int32_t(rng.below(classes));
  const Batch batch{batch_size, inputs.data(), labels.data(), nullptr};

  std::vector<Setting> settings;
  settings.emplace_back();
  settings.back().label = "one device, whole model";
  settings.back().replica = single[0]->createReplica(graph, layout, batch_size, spec.seed);
  // The largest M on one device, one micro-batch after the other: what
  // micro-batches cost without a pipeline (smaller matrix products, the
  // gradients summed).
  const int most = *std::max_element(micro_batches.begin(), micro_batches.end());
  if (most > 1) {
    const StagePlan whole{.placed = false, .stages = {{"model", "", 0, int(graph.layers.size())}}};
    settings.emplace_back();
    settings.back().label = "one device, M = " + std::to_string(most);
    settings.back().replica =
        createPipeline({single[0].get()}, whole, graph, layout, batch_size, most, spec.seed);
  }
  for (int m : micro_batches) {
    Setting setting;
    setting.label = m == 1 ? "M = 1 (model parallel)" : "M = " + std::to_string(m);
    setting.micro_batches = m;
    std::unique_ptr<Pipeline> pipeline =
        createPipeline(stage_devices, plan, graph, layout, batch_size, m, spec.seed);
    setting.pipeline = pipeline.get();
    setting.replica = std::move(pipeline);
    settings.push_back(std::move(setting));
  }

  std::printf("model %s: batch %lld, %d thread(s) per device\n", spec.name.c_str(),
              static_cast<long long>(batch_size), threads_per_device);
  for (const PipelineStage& stage : plan.stages) {
    int64_t params = 0;
    for (int i = stage.first_layer; i < stage.end_layer; ++i)
      for (int v : graph.layers[size_t(i)].variables)
        params += numElements(graph.variables[size_t(v)].shape);
    std::printf("  stage %s on %s: layers %s..%s, %lld parameters\n", stage.name.c_str(),
                stage.device.c_str(), graph.layers[size_t(stage.first_layer)].spec.name.c_str(),
                graph.layers[size_t(stage.end_layer - 1)].spec.name.c_str(),
                static_cast<long long>(params));
  }

  uint64_t step = 0;
  for (int round = 0; round < rounds; ++round)
    for (Setting& setting : settings) {
      for (int i = 0; i < 3; ++i)  // warm-up: caches, page faults, sleeping threads
        setting.replica->trainStep(batch, parameters.data(), gradients.data(), step++);
      std::vector<Pipeline::StageTime> before;
      double train_before = 0.0;
      if (setting.pipeline) {
        before = setting.pipeline->stageTimes();
        train_before = setting.pipeline->trainSeconds();
      }
      const double busy_before = busyCpuSeconds(), own_before = ownCpuSeconds();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < steps; ++i)
        setting.replica->trainStep(batch, parameters.data(), gradients.data(), step++);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      setting.examples_per_second.push_back(double(steps * batch_size) / seconds);
      const double others = busyCpuSeconds() - busy_before - (ownCpuSeconds() - own_before);
      setting.others.push_back(std::max(0.0, others / seconds));
      if (setting.pipeline) {
        const std::vector<Pipeline::StageTime> after = setting.pipeline->stageTimes();
        const double train = setting.pipeline->trainSeconds() - train_before;
        std::vector<double> busy;
        for (size_t s = 0; s < after.size(); ++s)
          busy.push_back((after[s].busy_seconds - before[s].busy_seconds) / train);
        setting.busy.push_back(busy);
      }
    }

  std::printf("\n%-26s %14s %20s", "setting", "examples/sec", "(min-max)");
  for (const PipelineStage& stage : plan.stages)
    std::printf(" %12s", ("busy " + stage.name).c_str());
  std::printf(" %9s %7s\n", "vs M = 1", "others");
  double plain = 0.0;
  for (const Setting& setting : settings)
    if (setting.micro_batches == 1) plain = median(setting.examples_per_second);
  for (const Setting& setting : settings) {
    const double eps = median(setting.examples_per_second);
    const auto [lo, hi] =
        std::minmax_element(setting.examples_per_second.begin(), setting.examples_per_second.end());
    std::ostringstream range;
    range << "(" << int64_t(*lo) << "-" << int64_t(*hi) << ")";
    std::printf("%-26s %14.0f %20s", setting.label.c_str(), eps, range.str().c_str());
    for (size_t s = 0; s < plan.stages.size(); ++s) {
      if (!setting.pipeline) {
        std::printf(" %12s", "");
        continue;
      }
      std::vector<double> busy;
      for (const std::vector<double>& round : setting.busy) busy.push_back(round[s]);
      std::printf(" %12.2f", median(busy));
    }
    if (plain > 0.0) std::printf(" %8.2fx", eps / plain);
    std::printf(" %7.2f\n", median(setting.others));
  }
  std::printf(
      "others: cores the rest of the machine used meanwhile (well above 0: under load; "
      "a pipeline needs a core per stage)\n");
  return 0;
}

}  // namespace
}  // namespace traind

int main(int argc, char** argv) {
  try {
    return traind::run(argc, argv);
  } catch (const traind::InputError& e) {
    std::fprintf(stderr, "pipeline_bench: %s\n", e.what());
    return 2;
  }
}
