// memoryNeed: the least a run of a model needs, and the spec's line that a
// run refused for it names.
#include "core/memory_need.h"

#include <catch2/catch.hpp>

#include "core/error.h"
#include "test/test_models.h"

namespace traind {
namespace {

// 784 -> 300 -> 10 with a batch of 50 and `optimizer`.
ModelSpec mlp(OptimizerSpec::Kind optimizer) {
  ModelSpec spec = modelSpec({784}, {dense(300), dense(10)});
  spec.optimizer.kind = optimizer;
  spec.data.batch_size = 50;
  spec.data.batch_size_location = {"m.yaml", 20, 3};
  spec.layers[0].location = {"m.yaml", 8, 5};
  spec.layers[1].location = {"m.yaml", 9, 5};
  return spec;
}

constexpr int64_t kFloats = 784 * 300 + 300 + 300 * 10 + 10;

TEST_CASE("a model needs its variables, gradients and slots, and a step's outputs",
          "[memory_need]") {
  ModelSpec spec = mlp(OptimizerSpec::Kind::Adam);
  MemoryNeed need = memoryNeed(spec, buildLayerGraph(spec), MemoryOf::StandaloneRun);
  // Values, gradients, Adam's m and v.
  CHECK(need.state_bytes == kFloats * 4 * 4);
  CHECK(need.activation_bytes == (300 + 10) * 50 * 4 * 2);  // the outputs and their gradients
  CHECK(need.largest_layer == 0);
  CHECK(need.largest_layer_bytes == (784 * 300 + 300) * 4 * 4);
  // A cluster's chief: the values and slots, and a step's gradients and the
  // parameters it pulled (5 copies with Adam; a worker measured 5.1 of them
  // when every worker held the values and slots). Another worker: the
  // step's buffers alone.
  MemoryNeed chief = memoryNeed(spec, buildLayerGraph(spec), MemoryOf::ClusterChief);
  CHECK(chief.state_bytes + chief.step_buffer_bytes == kFloats * 4 * 5);
  CHECK_THAT(memoryReport(chief, std::nullopt),
             Catch::Contains(" of the steps' pulled parameters and gradients, "));
  MemoryNeed worker = memoryNeed(spec, buildLayerGraph(spec), MemoryOf::ClusterWorker);
  CHECK(worker.state_bytes + worker.step_buffer_bytes == kFloats * 4 * 2);
  // Three steps in flight: three of each.
  spec.training.concurrent_steps = 3;
  chief = memoryNeed(spec, buildLayerGraph(spec), MemoryOf::ClusterChief);
  CHECK(chief.state_bytes + chief.step_buffer_bytes == kFloats * 4 * 9);
  CHECK(chief.total() ==
        chief.state_bytes + chief.step_buffer_bytes + chief.activation_bytes + chief.input_bytes);
  worker = memoryNeed(spec, buildLayerGraph(spec), MemoryOf::ClusterWorker);
  CHECK(worker.state_bytes + worker.step_buffer_bytes == kFloats * 4 * 6);
  spec.training.concurrent_steps = 1;

  spec.optimizer.kind = OptimizerSpec::Kind::Sgd;
  spec.optimizer.moving_average = MovingAverageSpec{};
  spec.training.concurrent_steps = 3;
  need = memoryNeed(spec, buildLayerGraph(spec), MemoryOf::StandaloneRun);
  CHECK(need.state_bytes == kFloats * 3 * 4);  // values, gradients, the averages
  CHECK(need.activation_bytes == (300 + 10) * 50 * 4 * 2 * 3);
  CHECK(need.input_bytes == 0);  // prefetch_batches auto: none counted
  spec.data.prefetch_batches = 1024;
  need = memoryNeed(spec, buildLayerGraph(spec), MemoryOf::StandaloneRun);
  CHECK(need.input_bytes == int64_t(1024) * 50 * 784 * 4);
  CHECK(need.total() == need.state_bytes + need.activation_bytes + need.input_bytes);
  CHECK_THAT(memoryReport(need, std::nullopt),
             Catch::Contains(", 153.1 MiB of input batches read ahead)"));

  // A frozen first layer runs forward only: its output has no gradient.
  spec.layers[0].trainable = false;
  CHECK(memoryNeed(spec, buildLayerGraph(spec), MemoryOf::StandaloneRun).activation_bytes ==
        (300 + 10 * 2) * 50 * 4 * 3);
  spec.layers[0].trainable = true;

  // Three CPU towers: two more gradient buffers; a pipeline's devices hold
  // each its own layers' only.
  const int64_t state =
      memoryNeed(spec, buildLayerGraph(spec), MemoryOf::StandaloneRun).state_bytes;
  spec.training.devices = {"cpu:0", "cpu:1", "cpu:2"};
  CHECK(memoryNeed(spec, buildLayerGraph(spec), MemoryOf::StandaloneRun).state_bytes ==
        state + 2 * kFloats * 4);
  spec.layers[1].device = "cpu:1";
  CHECK(memoryNeed(spec, buildLayerGraph(spec), MemoryOf::StandaloneRun).state_bytes == state);
  spec.layers[1].device.clear();

  // On GPUs the layer outputs take the GPU's memory, not the host's.
  spec.training.devices = {"cuda:0", "cuda:1"};
  CHECK(memoryNeed(spec, buildLayerGraph(spec), MemoryOf::StandaloneRun).activation_bytes == 0);
}

TEST_CASE("a model that needs more than the machine gives is refused at the line to change",
          "[memory_need]") {
  const ModelSpec spec = mlp(OptimizerSpec::Kind::Adam);
  const LayerGraph graph = buildLayerGraph(spec);
  const MemoryNeed need = memoryNeed(spec, graph, MemoryOf::StandaloneRun);
  CHECK_NOTHROW(checkMemoryFits(spec, graph, need, need.total()));
  CHECK_NOTHROW(checkMemoryFits(spec, graph, need, std::nullopt));  // unknown: not refused
  CHECK_THROWS_MATCHES(
      checkMemoryFits(spec, graph, need, need.total() - 1), InputError,
      Catch::Message("m.yaml:8:5: layers[0] (layer0): the model needs at least 3.8 MiB of "
                     "memory (3.6 MiB of variables with their gradients and optimizer slots, "
                     "121.1 KiB of layer outputs and their gradients for a batch of 50), and this "
                     "machine gives a process 3.8 MiB (physical memory and swap, or what its "
                     "cgroup or ulimit -v and -d allow); this "
                     "layer's part is 3.6 MiB: expected a smaller layer"));

  // Layer outputs take the most: the batch is the field to change.
  ModelSpec big_batch = spec;
  big_batch.data.batch_size = 5000;
  const MemoryNeed batch_need = memoryNeed(big_batch, graph, MemoryOf::StandaloneRun);
  CHECK_THROWS_WITH(checkMemoryFits(big_batch, graph, batch_need, int64_t(1) << 20),
                    Catch::StartsWith("m.yaml:20:3: data.batch_size: the model needs at least") &&
                        Catch::EndsWith(": expected a smaller batch"));
}

TEST_CASE("sizes read in binary units", "[memory_need]") {
  CHECK(byteSize(512) == "512 bytes");
  CHECK(byteSize(1536) == "1.5 KiB");
  CHECK(byteSize(int64_t(300) << 20) == "300.0 MiB");
  CHECK(byteSize(int64_t(33) << 30) == "33.0 GiB");
}

TEST_CASE("this machine gives a process some memory", "[memory_need]") {
  const std::optional<int64_t> available = memoryAvailable();
  REQUIRE(available);
  CHECK(*available > (int64_t(64) << 20));
}

}  // namespace
}  // namespace traind
