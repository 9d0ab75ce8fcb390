// The standalone loop on a resident trainer (devices/resident_trainer.h),
// through a host-side stand-in for a GPU's: what it trains and checkpoints
// must be what the Replica path does with the same spec, bit for bit, and
// what it evaluates the same to the digits logged, however its steps
// overlap, stop and are asked for checkpoints.
#include <catch2/catch.hpp>
#include <cstring>
#include <deque>
#include <functional>
#include <regex>
#include <string>

#include "core/checkpoint.h"
#include "core/layer_graph.h"
#include "core/model_state.h"
#include "core/optimizer.h"
#include "core/summary.pb.h"
#include "core/tfrecord.h"
#include "daemon/standalone.h"
#include "devices/device_list.h"
#include "test/captured_log.h"
#include "test/traind_process.h"

using namespace traind;
using namespace traind::testing;

namespace {

// A ResidentTrainer whose "device" is the host: a CPU replica and the host
// optimizer, each step computed when it is submitted. It holds at most two
// steps' results, as CudaTrainer holds two steps in flight, and tells
// `on_submit` of every step it takes.
class HostResidentTrainer final : public ResidentTrainer {
 public:
  HostResidentTrainer(const ModelSpec& spec, const LayerGraph& graph, const VariableLayout& layout,
                      std::function<void(int64_t)> on_submit)
      : devices_(createDevices(spec.training.devices, spec.training.threads)),
        replica_(devices_.front()->createReplica(graph, layout, spec.data.batch_size, spec.seed)),
        optimizer_(spec.optimizer, layout),
        parameters_(layout.totalSize()),
        gradients_(layout.totalSize()),
        on_submit_(std::move(on_submit)) {}

  void setParameters(const float* host) override { copy(parameters_.data(), host); }
  void getParameters(float* host) override { copy(host, parameters_.data()); }
  size_t slotCount() const override { return optimizer_.slotNames().size(); }
  void setSlot(size_t i, const float* host) override { copy(optimizer_.slot(i).data(), host); }
  void getSlot(size_t i, float* host) override { copy(host, optimizer_.slot(i).data()); }

  void submit(const Batch& batch, float learning_rate, uint64_t step) override {
    REQUIRE(results_.size() < 2);  // the loop collects before a third
    results_.push_back(replica_->trainStep(batch, parameters_.data(), gradients_.data(), step));
    optimizer_.apply(parameters_, gradients_, learning_rate, int64_t(step) + 1);
    if (on_submit_) on_submit_(int64_t(step));
  }
  StepResult collect() override {
    REQUIRE_FALSE(results_.empty());
    const StepResult result = results_.front();
    results_.pop_front();
    return result;
  }

 private:
  void copy(float* to, const float* from) const {
    std::memcpy(to, from, size_t(parameters_.size()) * sizeof(float));
  }

  std::vector<std::unique_ptr<Device>> devices_;
  std::unique_ptr<Replica> replica_;
  Optimizer optimizer_;
  FlatBuffer parameters_, gradients_;
  std::deque<StepResult> results_;
  std::function<void(int64_t)> on_submit_;
};

// fashion_mlp with Adam (two slots to carry) on 2000 training and 500 test
// examples, one thread, checkpoints into `dir`.
ModelSpec smallSpec(const std::filesystem::path& dir, int64_t max_steps) {
  ModelSpec spec = loadModelSpec(std::string(TRAIND_SOURCE_DIR) + "/configs/models/fashion_mlp.yaml");
  spec.optimizer.kind = OptimizerSpec::Kind::Adam;
  spec.learning_rate.initial = 0.001f;
  spec.data.train.limit = 2000;
  spec.data.test->limit = 500;
  spec.training.max_steps = max_steps;
  spec.training.threads = 1;
  spec.training.log_every = 10;
  spec.training.eval_every = 15;
  spec.checkpoint.dir = dir.string();
  spec.checkpoint.every_steps = 10;
  spec.checkpoint.every_seconds = 0;
  return spec;
}

struct Trained {
  TrainingSummary summary;
  std::vector<std::string> evaluations;  // "step 15, test loss = ...", in order
};

// Trains `spec`, on the Replica path without `resident`, else through the
// stand-in, which tells `on_submit` of each step.
Trained train(const ModelSpec& spec, const std::atomic<bool>& stop, std::atomic<bool>& requested,
              bool resident = false, std::function<void(int64_t)> on_submit = {}) {
  NodeMetrics metrics("standalone", 0, spec.training.log_every);
  ResidentTrainerFactory factory;
  if (resident)
    factory = [&](const ModelSpec& s, const LayerGraph& g, const VariableLayout& l) {
      return std::make_unique<HostResidentTrainer>(s, g, l, on_submit);
    };
  CapturedLog log;
  Trained trained;
  trained.summary = runStandalone(spec, stop, requested, metrics, factory);
  const std::string text = log.text();
  const std::regex evaluation("step [0-9]+, test loss = [0-9.]+, test accuracy = [0-9.]+");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), evaluation);
       it != std::sregex_iterator(); ++it)
    trained.evaluations.push_back(it->str());
  return trained;
}

// The two checkpoints hold the same step, parameters and Adam slots (and
// moving averages), bit for bit.
void checkSameCheckpoint(const ModelSpec& spec, const std::filesystem::path& a,
                         const std::filesystem::path& b) {
  const LayerGraph graph = buildLayerGraph(spec);
  ModelState first(spec, graph), second(spec, graph);
  first.restore(a);
  second.restore(b);
  CHECK(first.globalStep() == second.globalStep());
  const size_t bytes = size_t(first.parameters().size()) * sizeof(float);
  CHECK(std::memcmp(first.parameters().data(), second.parameters().data(), bytes) == 0);
  REQUIRE(first.optimizer().slotNames().size() >= 2);
  for (size_t i = 0; i < first.optimizer().slotNames().size(); ++i)
    CHECK(std::memcmp(first.optimizer().slot(i).data(), second.optimizer().slot(i).data(),
                      bytes) == 0);
}

std::filesystem::path checkpointAt(const std::filesystem::path& dir, int64_t step) {
  return dir / checkpointDirName(step);
}

// The histograms of the event files in `dir`: "step 7 hidden1/kernel: sum
// 1.25, 300 values", in order.
std::vector<std::string> histogramsIn(const std::filesystem::path& dir) {
  std::vector<std::string> found;
  for (const auto& file : std::filesystem::directory_iterator(dir)) {
    const std::string bytes = readFile(file.path());
    for (std::string_view record : splitTfRecords(bytes, file.path().string())) {
      tensorboard::Event event;
      REQUIRE(event.ParseFromArray(record.data(), int(record.size())));
      for (const auto& value : event.summary().value())
        if (value.has_histo())
          found.push_back("step " + std::to_string(event.step()) + " " + value.tag() + ": sum " +
                          std::to_string(value.histo().sum()) + ", " +
                          std::to_string(int64_t(value.histo().num())) + " values");
    }
  }
  return found;
}

}  // namespace

TEST_CASE("the resident loop's histograms are of the parameters at their steps") {
  // The resident trainer holds the parameters on its device: a histogram
  // step reads them back, as an evaluation does, or it would show the
  // host's copy of an earlier step.
  const auto dir = freshTempDir("resident-histograms");
  std::atomic<bool> stop{false}, requested{false};
  auto spec = [&](const char* name) {
    ModelSpec s = smallSpec(dir / name, 20);
    s.training.histogram_every = 7;
    s.training.summary_dir = (dir / name / "summaries").string();
    return s;
  };
  const ModelSpec replica_spec = spec("replica"), resident_spec = spec("resident");
  train(replica_spec, stop, requested);
  train(resident_spec, stop, requested, /*resident=*/true);
  const std::vector<std::string> replica = histogramsIn(replica_spec.training.summary_dir);
  REQUIRE(replica.size() == 2 * 6);  // steps 7 and 14, six variables
  CHECK(histogramsIn(resident_spec.training.summary_dir) == replica);
}

TEST_CASE("the resident loop trains, evaluates and checkpoints what the Replica path does") {
  const auto dir = freshTempDir("resident-loop");
  std::atomic<bool> stop{false}, requested{false};
  // 40 steps over two epochs, evaluations after steps 15 and 30 and at the end,
  // checkpoints every 10; evaluated on the parameters or on moving averages.
  const bool average = GENERATE(false, true);
  auto spec = [&](const char* name) {
    ModelSpec s = smallSpec(dir / (name + std::string(average ? "-average" : "")), 40);
    if (average) s.optimizer.moving_average = MovingAverageSpec{0.9f, true};
    return s;
  };
  const ModelSpec replica_spec = spec("replica");
  const Trained replica = train(replica_spec, stop, requested);
  std::vector<int64_t> submitted;
  const ModelSpec resident_spec = spec("resident");
  const Trained resident = train(resident_spec, stop, requested, /*resident=*/true,
                                 [&](int64_t step) { submitted.push_back(step); });

  REQUIRE(submitted.size() == 40);
  for (size_t i = 0; i < submitted.size(); ++i) CHECK(submitted[i] == int64_t(i));
  CHECK(resident.summary.global_step == 40);
  CHECK(resident.summary.steps_run == 40);
  REQUIRE(resident.summary.test_loss);
  CHECK(*resident.summary.test_loss == *replica.summary.test_loss);
  CHECK(*resident.summary.test_accuracy == *replica.summary.test_accuracy);
  // Steps 15, 30 and 40, evaluated on the same values.
  REQUIRE(replica.evaluations.size() == 3);
  CHECK(resident.evaluations == replica.evaluations);
  for (int64_t step : {10, 20, 30, 40})
    checkSameCheckpoint(replica_spec, checkpointAt(resident_spec.checkpoint.dir, step),
                        checkpointAt(replica_spec.checkpoint.dir, step));
  std::filesystem::remove_all(dir);  // 8 checkpoints of 3-4 MB each
}

TEST_CASE("the resident loop: a requested checkpoint holds its step, a stop ends at the step in flight") {
  const auto dir = freshTempDir("resident-loop-stop");
  std::atomic<bool> stop{false}, requested{false};
  ModelSpec spec = smallSpec(dir / "resident", 1000);
  spec.checkpoint.every_steps = 0;
  spec.training.eval_every = 0;
  // Asked while step 5 is submitted: the checkpoint after step 5, at global
  // step 6; stopped while step 12 is submitted: step 12 still finishes.
  const Trained resident = train(spec, stop, requested, /*resident=*/true, [&](int64_t step) {
    if (step == 5) requested = true;
    if (step == 12) stop = true;
  });
  CHECK(resident.summary.stopped);
  CHECK(resident.summary.global_step == 13);

  // The Replica path's state after 6 and after 13 steps.
  std::atomic<bool> no_stop{false};
  for (int64_t steps : {6, 13}) {
    const auto replica_dir = dir / ("replica-" + std::to_string(steps));
    train(smallSpec(replica_dir, steps), no_stop, requested);
    REQUIRE(std::filesystem::exists(checkpointAt(dir / "resident", steps)));
    checkSameCheckpoint(spec, checkpointAt(dir / "resident", steps),
                        checkpointAt(replica_dir, steps));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "the resident loop: a test set that fails under it leaves its step saved, slots and all") {
  // The evaluation after step 15 reads a test set left in its file, cut
  // short while step 12 trains: the run saves step 15 (parameters and Adam
  // slots alike, as the Replica path's 15 steps) and fails naming the file.
  const auto dir = freshTempDir("resident-loop-test-set");
  const std::string records = fashionMnistRecords("t10k", 500);
  writeFile(dir / "intact.tfrecords", records);
  writeFile(dir / "cut.tfrecords", records);
  const auto spec = [&](const std::string& name, int64_t max_steps, const std::string& test_set) {
    ModelSpec s = smallSpec(dir / name, max_steps);
    DataFiles test;
    test.format = DataFiles::Format::TfRecord;
    test.records = {(dir / test_set).string()};
    test.in_memory = false;
    s.data.test = test;
    return s;
  };
  std::atomic<bool> stop{false}, requested{false};
  const ModelSpec resident_spec = spec("resident", 40, "cut.tfrecords");
  CHECK_THROWS_WITH(train(resident_spec, stop, requested, /*resident=*/true,
                          [&](int64_t step) {
                            if (step == 12)
                              std::filesystem::resize_file(dir / "cut.tfrecords", 1000);
                          }),
                    Catch::Contains((dir / "cut.tfrecords").string()));
  const ModelSpec replica_spec = spec("replica", 15, "intact.tfrecords");
  train(replica_spec, stop, requested);
  REQUIRE(std::filesystem::exists(checkpointAt(dir / "resident", 15)));
  checkSameCheckpoint(replica_spec, checkpointAt(dir / "resident", 15),
                      checkpointAt(dir / "replica", 15));
  std::filesystem::remove_all(dir);
}
