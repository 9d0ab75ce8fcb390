// Integration tests of training.concurrent_steps (docs/devices.md,
// "Concurrent steps"): the real traind binary with K steps in flight,
// standalone and as a worker of an async cluster, and the errors.
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>

#include "core/checkpoint.h"
#include "test/traind_process.h"

using namespace traind;
using namespace traind::testing;

namespace {

constexpr double kTimeout = 240.0;

// fashion_mlp with `concurrent_steps` and a learning rate that decays to a
// tenth over the 1200 steps the accuracy test runs, so that the accuracy at
// the end is not the noise of the last few steps at a constant rate (with
// SGD at 0.1 it moves by two points between evaluations 50 steps apart).
std::filesystem::path writeModel(const std::filesystem::path& dir, int concurrent_steps) {
  std::string spec =
      readFile(std::string(TRAIND_SOURCE_DIR) + "/configs/models/fashion_mlp.yaml");
  spec = replaceAll(spec, "learning_rate: 0.1",
                    "learning_rate: {initial: 0.1, decay: exponential, decay_steps: 600, "
                    "decay_rate: 0.3}");
  spec = replaceAll(spec, "  log_every: 100\n",
                    "  log_every: 100\n  concurrent_steps: " + std::to_string(concurrent_steps) +
                        "\n");
  REQUIRE(spec.find("concurrent_steps") != std::string::npos);
  REQUIRE(spec.find("decay_rate") != std::string::npos);
  const auto path = dir / ("mlp" + std::to_string(concurrent_steps) + ".yaml");
  writeFile(path, spec);
  return path;
}

// A cluster of one ps and `workers` workers on free ports, mode `mode`;
// `extra`: more of the spec (a transport section).
std::filesystem::path writeCluster(const std::filesystem::path& dir, const std::string& mode,
                                   int workers = 1, const std::string& extra = "") {
  const int base = freePortRange(1 + workers);
  writeFile(dir / "cluster.yaml", "cluster:\n  ps: " + localAddresses(base, 1) +
                                      "\n  worker: " + localAddresses(base + 1, workers) +
                                      "\ntraining:\n  mode: " + mode + "\n" + extra);
  return dir / "cluster.yaml";
}

// The number after `key` in `output`'s last line that has it; -1 without one.
int64_t numberAfter(const std::string& output, const std::string& key) {
  const size_t at = output.rfind(key);
  if (at == std::string::npos) return -1;
  return std::stoll(output.substr(at + key.size()));
}

}  // namespace

TEST_CASE("K = 2 and 4 steps in flight train fashion_mlp to K = 1's accuracy") {
  const auto dir = freshTempDir("concurrent_accuracy");
  double accuracy[5] = {};
  for (int k : {1, 2, 4}) {
    const ProcessResult r = runTraind("--model " + writeModel(dir, k).string() +
                                      " --max-steps 1200 --threads 2 --eval-every 0 "
                                      "--checkpoint-dir \"\"");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    // Every step started was applied: the run ends exactly at max_steps.
    CHECK_THAT(r.output, Catch::Contains("done: global step 1200, 1200 steps"));
    if (k > 1) CHECK_THAT(r.output, Catch::Contains(std::to_string(k) + " steps in flight"));
    accuracy[k] = summaryValue(r.output, "test accuracy");
  }
  INFO("K = 1: " << accuracy[1] << ", K = 2: " << accuracy[2] << ", K = 4: " << accuracy[4]);
  CHECK(accuracy[1] > 0.80);
  CHECK(std::abs(accuracy[2] - accuracy[1]) <= 0.01);
  CHECK(std::abs(accuracy[4] - accuracy[1]) <= 0.01);
}

TEST_CASE("K = 2 checkpoints and resumes at the step it stopped at") {
  const auto dir = freshTempDir("concurrent_resume");
  const std::string common = "--model " + writeModel(dir, 2).string() +
                             " --threads 2 --eval-every 0 --checkpoint-dir " +
                             (dir / "ckpt").string();
  const ProcessResult first = runTraind(common + " --max-steps 100");
  const ProcessResult second = runTraind(common + " --max-steps 200");
  INFO(first.output + second.output);
  REQUIRE(first.exit_code == 0);
  REQUIRE(second.exit_code == 0);
  CHECK_THAT(second.output, Catch::Contains("at global step 100"));
  CHECK_THAT(second.output, Catch::Contains("done: global step 200, 100 steps"));
}

TEST_CASE("traind check says how many steps are in flight") {
  const auto dir = freshTempDir("concurrent_check");
  const ProcessResult r = runTraind("check --model " + writeModel(dir, 4).string());
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("concurrent steps: 4 in flight"));
}

TEST_CASE("concurrent_steps below 1 is an error naming the field") {
  const auto dir = freshTempDir("concurrent_zero");
  const std::string spec = readFile(writeModel(dir, 1));
  writeFile(dir / "zero.yaml", replaceAll(spec, "concurrent_steps: 1", "concurrent_steps: 0"));
  for (const char* command : {"check --model ", "--model "}) {
    const ProcessResult r = runTraind(command + (dir / "zero.yaml").string());
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("zero.yaml:"));
    CHECK_THAT(r.output, Catch::Contains("training.concurrent_steps"));
  }
}

TEST_CASE("sync refuses K > 1 on every node and in traind check, naming both files' fields") {
  const auto dir = freshTempDir("concurrent_sync");
  const auto cluster = writeCluster(dir, "sync");
  const auto model = writeModel(dir, 2);
  // A node refuses before it looks for its peers: none runs.
  const std::string files = "--cluster " + cluster.string() + " --model " + model.string();
  for (const std::string& command : {files + " --job worker --task 0 --threads 1",
                                     files + " --job ps --task 0", "check " + files}) {
    const ProcessResult r = runTraind(command);
    INFO(command << "\n" << r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains(model.string() + ":"));
    CHECK_THAT(r.output, Catch::Contains("training.concurrent_steps"));
    CHECK_THAT(r.output, Catch::Contains(cluster.string()));
    CHECK_THAT(r.output, Catch::Contains("mode: sync"));
  }
}

TEST_CASE("an async worker with K = 2 trains against a ps and all exit 0") {
  const auto dir = freshTempDir("concurrent_async");
  const auto cluster = writeCluster(dir, "async");
  const std::string common = "--cluster " + cluster.string() + " --model " +
                             writeModel(dir, 2).string() +
                             " --max-steps 600 --threads 2 --eval-every 0 --checkpoint-dir " +
                             (dir / "ckpt").string();
  BackgroundTraind worker(common + " --job worker --task 0", dir / "worker0.log");
  BackgroundTraind ps(common + " --job ps --task 0", dir / "ps0.log");
  CHECK(worker.wait(kTimeout) == 0);
  CHECK(ps.wait(30) == 0);
  INFO(worker.output() + ps.output());
  CHECK_THAT(worker.output(), Catch::Contains("2 steps in flight"));
  CHECK_THAT(worker.output(), Catch::Contains("done: global step 600"));
  CHECK(summaryValue(worker.output(), "test accuracy") > 0.78);
  CHECK(findLatestCheckpoint(dir / "ckpt").has_value());
}

TEST_CASE("async workers with K = 4 over TCP count every step the ps applied, to the job's end") {
  // Their push+pulls overlap; at the job's end those in flight were applied
  // by the ps, and each worker waits for them rather than dropping them.
  const auto dir = freshTempDir("concurrent_overlap_end");
  const auto cluster = writeCluster(dir, "async", 2, "transport:\n  shared_memory: off\n");
  const std::string common = "--cluster " + cluster.string() + " --model " +
                             writeModel(dir, 4).string() +
                             " --max-steps 300 --threads 1 --eval-every 0 --checkpoint-dir ";
  BackgroundTraind ps(common + "'' --job ps --task 0", dir / "ps0.log");
  BackgroundTraind worker1(common + "'' --job worker --task 1", dir / "worker1.log");
  BackgroundTraind chief(common + (dir / "ckpt").string() + " --job worker --task 0",
                         dir / "worker0.log");
  CHECK(chief.wait(kTimeout) == 0);
  CHECK(worker1.wait(kTimeout) == 0);
  CHECK(ps.wait(30) == 0);
  INFO(chief.output() + worker1.output() + ps.output());
  CHECK_THAT(chief.output(), Catch::Contains("4 steps in flight"));
  // "done: global step 303, 227 steps in ...", and "ps 0 done at global
  // step 303 (303 pushes applied, ...": one ps from step 0, a push a step.
  const auto stepsRun = [](const std::string& output) {
    const size_t done = output.rfind("done: global step ");
    const size_t comma = output.find(", ", done);
    return done == std::string::npos || comma == std::string::npos
               ? int64_t(-1)
               : int64_t(std::stoll(output.substr(comma + 2)));
  };
  const int64_t applied = numberAfter(ps.output(), "done at global step ");
  CHECK(applied >= 300);
  CHECK(stepsRun(chief.output()) + stepsRun(worker1.output()) == applied);
}
