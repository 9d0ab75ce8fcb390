// augment_throughput: how fast a model spec's training batches are
// gathered, with its data.augment, on one thread: the input pipeline of a
// run without read-ahead (prefetch_batches: 0), no model around it.
// bench/augment_compare.py runs it beside TensorFlow's tf.data doing the
// same to the same files (docs/benchmarks.md, "Augmentation").
//
//   build/bench/augment_throughput --model spec.yaml --epochs 2
//
// It loads data.train as a run does (loadTrainingData: every record read
// and judged), gathers one batch untimed, then times the batches of
// --epochs epochs and prints one JSON line:
//   {"images": N, "seconds": S, "load_seconds": L}
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <exception>

#include "core/error.h"
#include "core/input_pipeline.h"
#include "core/layer_graph.h"
#include "core/model_spec.h"
#include "daemon/training_data.h"

using namespace traind;

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times the training batches of a model spec's data, gathered on one thread"};
  std::string model;
  int epochs = 1;
  app.add_option("--model", model, "the model spec")->required();
  app.add_option("--epochs", epochs, "epochs timed")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    const ModelSpec spec = loadModelSpec(model);
    const LayerGraph graph = buildLayerGraph(spec);
    const Clock::time_point load_start = Clock::now();
    const TrainingData data = loadTrainingData(spec, graph, {}, DataMemory::Alone);
    const double load_seconds = secondsSince(load_start);
    InputPipeline input(data.train, spec.data.batch_size, spec.data.shuffle, spec.seed,
                        /*first_step=*/0, /*prefetch_batches=*/0, 0, 1, spec.data.augment,
                        spec.data.shuffle_buffer);
    input.next();  // untimed: the first touch of every buffer
    const int64_t batches = input.stepsPerEpoch() * epochs;
    const Clock::time_point start = Clock::now();
    for (int64_t i = 0; i < batches; ++i) input.next();
    const double seconds = secondsSince(start);
    std::printf("%s\n",
                fmt::format(R"({{"images": {}, "seconds": {:.4f}, "load_seconds": {:.3f}}})",
                            batches * spec.data.batch_size, seconds, load_seconds)
                    .c_str());
    return 0;
  } catch (const InputError& e) {
    std::fprintf(stderr, "augment_throughput: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "augment_throughput: %s\n", e.what());
    return 1;
  }
}
