// Integration tests of the distributed roles: real traind processes, a ps
// job and a worker job, on free 127.0.0.1 ports.
#include <arpa/inet.h>
#include <capnp/rpc-twoparty.h>
#include <fmt/format.h>
#include <kj/async-io.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <regex>
#include <thread>

#include "core/checkpoint.h"
#include "core/cluster_spec.h"
#include "core/layer_graph.h"
#include "core/model_state.h"
#include "core/parameter_shard.h"
#include "core/placement.h"
#include "core/safetensors.h"
#include "daemon/node_metrics.h"
#include "daemon/ops_client.h"
#include "rpc/push_counts.h"
#include "rpc/shard_server.h"
#include "rpc/sharded_client.h"
#include "rpc/shared_region.h"
#include "rpc/traind.capnp.h"
#include "test/captured_log.h"
#include "test/cluster_fixture.h"
#include "test/input_failure_checks.h"
#include "test/traind_process.h"

using namespace traind;
using namespace traind::testing;

namespace {

constexpr double kTimeout = 240.0;

struct Cluster {
  std::vector<std::unique_ptr<BackgroundTraind>> ps, workers;

  // Starts the workers first: any start order must work. The chief
  // checkpoints in <dir>/ckpt unless the arguments say where: never in the
  // spec's own directory, which every test run would share (and lock).
  Cluster(const std::filesystem::path& dir, const std::filesystem::path& cluster,
          const std::string& model_args, int num_ps, int num_workers, std::string chief_args = "") {
    if ((model_args + chief_args).find("--checkpoint-dir") == std::string::npos)
      chief_args += " --checkpoint-dir " + (dir / "ckpt").string();
    for (int w = num_workers - 1; w >= 0; --w)
      workers.insert(workers.begin(),
                     std::make_unique<BackgroundTraind>(
                         "--cluster " + cluster.string() + " " + model_args +
                             " --job worker --task " + std::to_string(w) +
                             (w == 0 ? " " + chief_args : ""),
                         dir / ("worker" + std::to_string(w) + ".log")));
    for (int p = 0; p < num_ps; ++p)
      ps.push_back(std::make_unique<BackgroundTraind>(
          "--cluster " + cluster.string() + " " + model_args + " --job ps --task " +
              std::to_string(p),
          dir / ("ps" + std::to_string(p) + ".log")));
  }

  std::string logs() const {
    std::string all;
    for (const auto& p : ps) all += p->output();
    for (const auto& w : workers) all += w->output();
    return all;
  }
};

// The largest difference between the values of tensor `name` in the latest
// checkpoints of two directories, which must hold it at one shape.
float largestDifference(const std::filesystem::path& a_dir, const std::filesystem::path& b_dir,
                        const std::string& name) {
  const std::vector<float> a = readCheckpointTensor(a_dir, name);
  const std::vector<float> b = readCheckpointTensor(b_dir, name);
  REQUIRE(a.size() == b.size());
  float worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

// The training losses of a worker's log lines ("step 20, loss = 0.61, ..."), in order.
std::vector<double> loggedLosses(const std::string& output) {
  const std::regex line("step [0-9]+, loss = ([-+0-9.e]+)");
  std::vector<double> losses;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), line);
       it != std::sregex_iterator(); ++it)
    losses.push_back(std::stod((*it)[1]));
  return losses;
}

// What a ps's last log line says its pushAndPull calls carried.
PushCounts pushCountsLogged(const std::string& ps_output) {
  const std::regex done(
      "done at global step [0-9]+ \\([^;]+; gradients in "
      "([0-9]+) calls over TCP, ([0-9]+) chunks in ([0-9]+) calls through shared memory\\)");
  std::smatch m;
  if (!std::regex_search(ps_output, m, done))
    throw std::runtime_error("no \"done at global step\" line of a ps");
  return {std::stoll(m[1]), std::stoll(m[3]), std::stoll(m[2])};
}

// fashion_mlp's spec text with its hidden layers widened to 1200 and 400
// units: a 784-1200-400-10 MLP of 5.4 MiB, six chunks on one ps.
std::string widenedMlp(const std::string& fashion_mlp) {
  std::string wide = replaceAll(replaceAll(fashion_mlp, "units: 300", "units: 1200"), "units: 100,",
                                "units: 400,");
  REQUIRE(wide.find("units: 400,") != std::string::npos);
  return wide;
}

// The model arguments of fashion_mlp training with no end in sight (max_steps
// 10^6), one thread per worker, a line every 20 steps: the jobs that tests
// disturb and then stop.
std::string endlessMlp() {
  return "--model " + modelPath("fashion_mlp.yaml") +
         " --max-steps 1000000 --threads 1 --eval-every 0 --log-every 20";
}

// fashion_mlp on 1 ps and `workers` workers in `mode`, one thread each, a
// line every 20 steps, checkpoints in <dir>/ckpt.
std::unique_ptr<Cluster> mlpJob(const std::filesystem::path& dir, const std::string& mode,
                                int workers, int64_t max_steps, int ps = 1) {
  const auto cluster = writeCluster(dir, ps, workers, "  mode: " + mode + "\n");
  return std::make_unique<Cluster>(
      dir, cluster,
      "--model " + modelPath("fashion_mlp.yaml") + " --max-steps " + std::to_string(max_steps) +
          " --threads 1 --eval-every 0 --log-every 20 --checkpoint-dir " + (dir / "ckpt").string(),
      ps, workers);
}

// The last match of `pattern`'s first group in `text`, as a number; -1 if none.
int64_t lastNumber(const std::string& text, const std::string& pattern) {
  const std::regex number(pattern);
  std::smatch match;
  int64_t last = -1;
  for (auto it = text.cbegin(); std::regex_search(it, text.cend(), match, number);
       it = match.suffix().first)
    last = std::stoll(match[1]);
  return last;
}

// The chief's last checkpoint (its step returned) is past step 0, and
// every ps of `c` ended at that step: no step in no checkpoint, none
// missing from a shard.
int64_t checkEveryPsEndsAtTheLastCheckpoint(Cluster& c) {
  const int64_t saved = lastNumber(c.workers[0]->output(), "saved checkpoint .*ckpt-0*([0-9]+)");
  CHECK(saved > 0);
  for (size_t i = 0; i < c.ps.size(); ++i) {
    INFO("ps " << i);
    CHECK(lastNumber(c.ps[i]->output(), fmt::format("ps {} done at global step ([0-9]+)", i)) ==
          saved);
  }
  return saved;
}

// The end of a job whose workers were all told to stop: each exits 0, then
// the ps tasks do, and the chief's final checkpoint holds every step.
void checkEveryStepInTheFinalCheckpoint(Cluster& c) {
  for (auto& w : c.workers) CHECK(w->wait(30) == 0);
  for (auto& p : c.ps) p->signal(SIGTERM);
  for (auto& p : c.ps) CHECK(p->wait(30) == 0);
  INFO(c.logs());
  CHECK_THAT(c.logs(), !Catch::Contains("in no checkpoint"));
  const int64_t saved = checkEveryPsEndsAtTheLastCheckpoint(c);
  // The chief's last line names the step of its final checkpoint: ps 0's,
  // where async shards differ (the lowest labelled it before).
  CHECK(lastNumber(c.workers[0]->output(), "done: global step ([0-9]+)") == saved);
}

// A fashion_cnn ps task of `cluster` and, for a worker in the test's process
// beside it, the model with its initial state and an event loop.
struct CnnPsBeside {
  BackgroundTraind ps;
  ModelSpec spec;
  LayerGraph graph;
  ModelState state;
  kj::AsyncIoContext io;

  CnnPsBeside(const std::filesystem::path& dir, const std::filesystem::path& cluster)
      : ps("--cluster " + cluster.string() + " --model " + modelPath("fashion_cnn.yaml") +
               " --job ps --task 0",
           dir / "ps.log"),
        spec(loadModelSpec(modelPath("fashion_cnn.yaml"))),
        graph(buildLayerGraph(spec)),
        state(spec, graph),
        io(kj::setupAsyncIo()) {
    state.initialize();
  }
};

// A step of fashion_cnn that fails halfway: its dense layers (variables 4-7)
// are one chunk, its convolutions another; the dense layers' gradient is
// final at once, and the step fails before the convolutions' is.
struct FailingCnnStep : GradientGate {
  kj::Timer& timer;
  explicit FailingCnnStep(kj::Timer& t) : timer(t) {}
  kj::Promise<void> ready(size_t variable) override {
    if (variable >= 4) return kj::READY_NOW;
    return timer.afterDelay(100 * kj::MILLISECONDS).then([]() -> kj::Promise<void> {
      return KJ_EXCEPTION(FAILED, "the training step failed: out of memory");
    });
  }
};

// A fashion_cnn step whose backward pass takes `seconds` to reach the
// convolutions (variables 0-3): the dense layers' chunk goes at once.
struct SlowCnnStep : GradientGate {
  kj::Timer& timer;
  int seconds;
  SlowCnnStep(kj::Timer& t, int s) : timer(t), seconds(s) {}
  kj::Promise<void> ready(size_t variable) override {
    if (variable >= 4) return kj::READY_NOW;
    return timer.afterDelay(seconds * kj::SECONDS);
  }
};

}  // namespace

TEST_CASE("async: 2 ps and 2 workers train fashion_mlp") {
  const auto dir = freshTempDir("async");
  const auto cluster = writeCluster(dir, 2, 2, "  mode: async\n");
  // Each chunk sent as the backward pass finishes it (auto would send after
  // the step in async mode; the sync tests send during backward). Each
  // worker holds half of the training set (data.shard_by_worker).
  std::string spec = replaceAll(readFile(modelPath("fashion_mlp.yaml")), "\ntraining:\n",
                                "\ntraining:\n  gradient_push: during_backward\n");
  spec = replaceAll(spec, "  batch_size: 100", "  batch_size: 100\n  shard_by_worker: true");
  REQUIRE(spec.find("shard_by_worker") != std::string::npos);
  writeFile(dir / "mlp.yaml", spec);
  Cluster c(dir, cluster,
            "--model " + (dir / "mlp.yaml").string() +
                " --max-steps 400 --threads 1 --eval-every 0 --checkpoint-dir " +
                (dir / "ckpt").string(),
            2, 2);
  for (auto& w : c.workers) CHECK(w->wait(kTimeout) == 0);
  for (auto& p : c.ps) CHECK(p->wait(30) == 0);
  INFO(c.logs());
  CHECK(summaryValue(c.workers[0]->output(), "test accuracy") > 0.70);
  const std::vector<double> losses = loggedLosses(c.workers[0]->output());
  REQUIRE(losses.size() >= 2);
  CHECK(losses.back() < 0.8 * losses.front());
  CHECK_THAT(c.workers[1]->output(), Catch::Contains("gradients sent during the backward pass"));
  for (int task : {0, 1})
    CHECK_THAT(c.workers[size_t(task)]->output(),
               Catch::Contains("worker " + std::to_string(task) +
                               " holds its share of the training set: 30000 of its 60000 "
                               "examples (data.shard_by_worker)"));
  for (auto& p : c.ps) {
    CHECK_THAT(p->output(), Catch::Contains("worker 1: tensors through shared memory"));
    // How stale the gradients it applied were (async applies them all).
    CHECK_THAT(p->output(), Catch::Contains(" pushes applied, ") &&
                                Catch::Contains(" steps stale on average, at most "));
  }
  // Both shards held a part of the model.
  for (auto& p : c.ps)
    CHECK_THAT(p->output(),
               Catch::Matches("(?:.|\\n)*its shard of fashion_mlp \\(266610 parameters\\) is "
                              "[1-9][0-9]* floats(?:.|\\n)*"));
  CHECK(findLatestCheckpoint(dir / "ckpt").has_value());
}

TEST_CASE("sync: 2 workers aggregating 2 train what one worker with the doubled batch trains") {
  // Tensors through shared memory (same host), then over TCP; through
  // shared memory also sent after the step, so that one call takes both
  // chunks of the model; and through shared memory with the MLP widened to
  // 784-1200-400-10, whose 5.4 MiB shard writes the workers' regions around
  // the caches (ParameterShard::kStreamingCopyBytes). Over TCP with images
  // augmented: each worker distorts its half of a step's examples as the
  // standalone run distorts them in its batch (core/augmentation.h).
  const std::string shared_memory =
      GENERATE(as<std::string>(), "auto", "off", "after_step", "auto_wide");
  const bool wide = shared_memory == "auto_wide";
  const auto dir = freshTempDir("sync");
  // With moving averages, which the ps keeps beside its shard.
  std::string spec = readFile(modelPath("fashion_mlp.yaml")) + "moving_average: {decay: 0.99}\n";
  spec = replaceAll(spec, "batch_size: 100", "batch_size: 50\n  shuffle: false");
  REQUIRE(spec.find("shuffle: false") != std::string::npos);
  if (shared_memory == "off")
    spec = replaceAll(spec, "shuffle: false",
                      "shuffle: false\n  augment: {random_crop: {padding: 3}, flip_left_right: "
                      "true, brightness: 0.2, contrast: [0.5, 1.5]}");
  if (wide) spec = widenedMlp(spec);
  writeFile(dir / "half.yaml", spec);
  writeFile(dir / "double.yaml", replaceAll(spec, "batch_size: 50", "batch_size: 100"));

  if (shared_memory == "after_step") {
    spec = replaceAll(spec, "training:\n", "training:\n  gradient_push: after_step\n");
    REQUIRE(spec.find("gradient_push") != std::string::npos);
    writeFile(dir / "half.yaml", spec);
  }
  const auto cluster = writeCluster(
      dir, 1, 2,
      "  mode: sync\n  replicas_to_aggregate: 2\n  total_num_replicas: 2\ntransport:\n"
      "  shared_memory: " + std::string(shared_memory == "off" ? "off" : "auto") + "\n");
  Cluster c(dir, cluster,
            "--model " + (dir / "half.yaml").string() +
                " --max-steps 60 --threads 1 --eval-every 0 --checkpoint-dir " +
                (dir / "distributed").string(),
            1, 2);
  for (auto& w : c.workers) CHECK(w->wait(kTimeout) == 0);
  CHECK(c.ps[0]->wait(30) == 0);
  INFO(c.logs());
  // gradient_push: auto, sync.
  CHECK_THAT(c.workers[1]->output(),
             Catch::Contains(shared_memory == "after_step"
                                 ? "gradients sent after each step"
                                 : "gradients sent during the backward pass"));
  CHECK_THAT(c.workers[1]->output(),
             Catch::Contains(shared_memory == "off"
                                 ? "tensors over TCP: transport.shared_memory is off"
                                 : "tensors through shared memory (same host)"));
  // fashion_mlp is two chunks on one ps: 60 steps of 2 workers push 240
  // chunks, over TCP in a call each, streamed during backward a call each
  // too (the chunks hold different variables), after the step in one call
  // per push.
  const PushCounts pushes = pushCountsLogged(c.ps[0]->output());
  if (wide) {
    CHECK(pushes.tcp_calls == 0);
  } else if (shared_memory == "off") {
    CHECK(pushes.tcp_calls == 240);
    CHECK(pushes.shared_calls == 0);
  } else {
    CHECK(pushes.tcp_calls == 0);
    CHECK(pushes.shared_chunks == 240);
    CHECK(pushes.shared_calls == (shared_memory == "after_step" ? 120 : 240));
  }
  const ProcessResult standalone = runTraind("--model " + (dir / "double.yaml").string() +
                                             " --max-steps 60 --threads 1 --eval-every 0 "
                                             "--checkpoint-dir " + (dir / "standalone").string());
  REQUIRE(standalone.exit_code == 0);
  for (const char* name :
       {"hidden1/kernel", "hidden2/bias", "logits/kernel",
        "hidden1/kernel/ExponentialMovingAverage", "logits/bias/ExponentialMovingAverage"}) {
    INFO(name);
    // The wide MLP's longer sums differ more between a batch of 100 and two
    // of 50: up to 5e-4 after 60 steps where oneDNN runs its AVX2 gemm.
    CHECK(largestDifference(dir / "distributed", dir / "standalone", name) <
          (wide ? 2e-3f : 1e-4f));
  }
}

TEST_CASE("sync: shares of photographs at their own sizes train what the doubled batch trains") {
  // Each worker holds every other photograph (data.shard_by_worker) and
  // decodes each again for the crop it draws: VGG's random scales or
  // Inception's boxes. A crop's draws follow the image's place in the whole
  // set, so that the two workers' halves of a step are the doubled batch's
  // examples, cropped alike.
  const std::string crop = GENERATE(as<std::string>(), "shorter_side: [3, 6]", "area: [0.3, 1]");
  const auto dir = freshTempDir("own_sizes");
  std::string spec = R"(input: [3, 3, 3]
layers: [{type: flatten}, {type: dense, units: 7}]
optimizer: {type: sgd, learning_rate: 0.1}
data:
  train: {RECORDS, resize: legacy_bilinear, in_memory: false}
  test: {RECORDS, resize: {shorter_side: 4}}
  batch_size: 1
  shuffle: false
  shard_by_worker: true
  augment: {random_crop: {size: [3, 3], CROP}, flip_left_right: true}
training: {epochs: 4}
)";
  spec = replaceAll(spec, "RECORDS",
                    "tfrecords: " + std::string(TRAIND_SOURCE_DIR) +
                        "/test/data/tfrecord/jpeg.tfrecord, image_feature: image/encoded, "
                        "label_feature: image/class/label");
  spec = replaceAll(spec, "CROP", crop);
  writeFile(dir / "half.yaml", spec);
  writeFile(dir / "double.yaml", replaceAll(spec, "batch_size: 1", "batch_size: 2"));
  const auto cluster = writeCluster(
      dir, 1, 2, "  mode: sync\n  replicas_to_aggregate: 2\n  total_num_replicas: 2\n");
  const std::string args = " --max-steps 12 --threads 1 --eval-every 0 --checkpoint-dir ";
  Cluster c(dir, cluster,
            "--model " + (dir / "half.yaml").string() + args + (dir / "distributed").string(), 1,
            2);
  for (auto& w : c.workers) CHECK(w->wait(kTimeout) == 0);
  CHECK(c.ps[0]->wait(30) == 0);
  INFO(c.logs());
  for (int task : {0, 1})
    CHECK_THAT(c.workers[size_t(task)]->output(),
               Catch::Contains("worker " + std::to_string(task) +
                               " holds its share of the training set: 3 of its 6 examples "
                               "(data.shard_by_worker)"));
  const ProcessResult standalone =
      runTraind("--model " + (dir / "double.yaml").string() + args + (dir / "standalone").string());
  INFO(standalone.output);
  REQUIRE(standalone.exit_code == 0);
  for (const char* name : {"dense_1/kernel", "dense_1/bias"}) {
    INFO(name);
    CHECK(largestDifference(dir / "distributed", dir / "standalone", name) < 1e-6f);
  }
  // Trained on crops drawn: a run whose images are not flipped differs.
  writeFile(dir / "unflipped.yaml",
            replaceAll(readFile(dir / "double.yaml"), ", flip_left_right: true", ""));
  REQUIRE(runTraind("--model " + (dir / "unflipped.yaml").string() + args +
                    (dir / "unflipped").string())
              .exit_code == 0);
  CHECK(largestDifference(dir / "unflipped", dir / "standalone", "dense_1/kernel") > 1e-3f);
}

TEST_CASE("clip_global_norm: a worker clips its gradient before its push as standalone does") {
  // One sync worker: its steps are a standalone run's, over the same
  // batches, so that the clipped updates must agree. Weight decay too, which
  // the ps adds and the worker's clipping counts in (core/gradient_clipping.h).
  const auto dir = freshTempDir("clip");
  std::string spec = readFile(modelPath("fashion_mlp.yaml"));
  spec = replaceAll(spec, "batch_size: 100", "batch_size: 50\n  shuffle: false");
  spec = replaceAll(spec, "learning_rate: 0.1",
                    "learning_rate: 0.1\n  clip_global_norm: 0.5\n  weight_decay: 0.01");
  REQUIRE(spec.find("clip_global_norm") != std::string::npos);
  writeFile(dir / "spec.yaml", spec);
  const auto cluster = writeCluster(
      dir, 1, 1, "  mode: sync\n  replicas_to_aggregate: 1\n  total_num_replicas: 1\n");
  const std::string args = "--model " + (dir / "spec.yaml").string() +
                           " --max-steps 40 --threads 1 --eval-every 0 --log-every 1 ";
  Cluster c(dir, cluster, args + "--checkpoint-dir " + (dir / "distributed").string(), 1, 1);
  CHECK(c.workers[0]->wait(kTimeout) == 0);
  CHECK(c.ps[0]->wait(30) == 0);
  INFO(c.logs());
  // Sync's default is during the backward pass; the norm needs the whole gradient.
  CHECK_THAT(c.workers[0]->output(), Catch::Contains("gradients sent after each step"));
  // Steps were clipped (the log's lines are of one step each), and the
  // clipped run differs from one that does not clip.
  CHECK_THAT(c.workers[0]->output(), Catch::Contains(", 100% clipped ("));
  writeFile(dir / "unclipped.yaml", replaceAll(spec, "\n  clip_global_norm: 0.5", ""));
  const ProcessResult unclipped = runTraind("--model " + (dir / "unclipped.yaml").string() +
                                            " --max-steps 40 --threads 1 --eval-every 0 "
                                            "--log-every 1 --checkpoint-dir " +
                                            (dir / "unclipped").string());
  REQUIRE(unclipped.exit_code == 0);
  CHECK(readCheckpointTensor(dir / "unclipped", "logits/kernel") !=
        readCheckpointTensor(dir / "distributed", "logits/kernel"));
  const ProcessResult standalone =
      runTraind(args + "--checkpoint-dir " + (dir / "standalone").string());
  REQUIRE(standalone.exit_code == 0);
  // The same losses, step by step, as the same updates would give.
  CHECK(loggedLosses(c.workers[0]->output()) == loggedLosses(standalone.output));
  for (const char* name : {"hidden1/kernel", "hidden2/bias", "logits/kernel"}) {
    INFO(name);
    CHECK(largestDifference(dir / "distributed", dir / "standalone", name) < 1e-5f);
  }
}

TEST_CASE("through shared memory an async push is one call and a sync one calls of four chunks") {
  // A 784-1200-400-10 MLP: six chunks on one ps, sent after each step.
  const std::string mode = GENERATE(as<std::string>(), "async", "sync");
  const auto dir = freshTempDir("runs_" + mode);
  const std::string spec = widenedMlp(readFile(modelPath("fashion_mlp.yaml")));
  writeFile(dir / "wide.yaml",
            replaceAll(spec, "\ntraining:\n", "\ntraining:\n  gradient_push: after_step\n"));
  const auto cluster = writeCluster(dir, 1, 1, "  mode: " + mode + "\n");
  Cluster c(dir, cluster,
            "--model " + (dir / "wide.yaml").string() +
                " --max-steps 20 --threads 1 --eval-every 0 --checkpoint-dir " +
                (dir / "ckpt").string(),
            1, 1);
  CHECK(c.workers[0]->wait(kTimeout) == 0);
  CHECK(c.ps[0]->wait(30) == 0);
  INFO(c.logs());
  const PushCounts pushes = pushCountsLogged(c.ps[0]->output());
  CHECK(pushes.tcp_calls == 0);
  CHECK(pushes.shared_chunks == 20 * 6);
  // Async: nothing waits at the ps, and one reply wakes the worker once.
  // Sync: at most four chunks a call (their partial sums wait at the ps).
  CHECK(pushes.shared_calls == (mode == "async" ? 20 : 2 * 20));
}

TEST_CASE("sync with a backup worker survives a worker killed mid-run") {
  const auto dir = freshTempDir("backup");
  const auto cluster = writeCluster(
      dir, 1, 3, "  mode: sync\n  replicas_to_aggregate: 2\n  total_num_replicas: 3\n");
  Cluster c(dir, cluster,
            "--model " + modelPath("fashion_mlp.yaml") +
                " --max-steps 300 --threads 1 --eval-every 0 --log-every 20 --checkpoint-dir " +
                (dir / "ckpt").string(),
            1, 3);
  // Let training start, then kill worker 2 without warning.
  c.workers[2]->waitForOutput("step 40,");
  c.workers[2]->signal(SIGKILL);
  CHECK(c.workers[0]->wait(kTimeout) == 0);
  CHECK(c.workers[1]->wait(kTimeout) == 0);
  CHECK(c.ps[0]->wait(30) == 0);
  INFO(c.logs());
  CHECK_THAT(c.workers[0]->output(), Catch::Contains("done: global step 300"));
}

TEST_CASE("sync with a backup worker: a worker held back takes the batches of the job's step") {
  // A step's batches are those of its global step whoever computes them
  // (docs/distributed.md): worker 1, paused while worker 0 makes the steps
  // alone, pulls a step far past the one its pipeline was at, and seeks
  // its input there.
  const auto dir = freshTempDir("backup-input");
  const auto cluster = writeCluster(
      dir, 1, 2, "  mode: sync\n  replicas_to_aggregate: 1\n  total_num_replicas: 2\n");
  Cluster c(dir, cluster,
            "--model " + modelPath("fashion_mlp.yaml") +
                " --max-steps 3000 --threads 1 --eval-every 0 --log-every 20",
            1, 2);
  REQUIRE(c.workers[1]->waitForOutput(", loss = "));
  c.workers[1]->signal(SIGSTOP);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  c.workers[1]->signal(SIGCONT);
  CHECK(c.workers[0]->wait(kTimeout) == 0);
  CHECK(c.workers[1]->wait(kTimeout) == 0);
  CHECK(c.ps[0]->wait(30) == 0);
  INFO(c.logs());
  // Not a regex over the whole log: std::regex recurses per character.
  CHECK_THAT(c.workers[1]->output(),
             Catch::Contains("this worker's input moved on to the job's step ") &&
                 Catch::Contains(", after pushes that came too late for theirs"));
  CHECK_THAT(c.workers[0]->output(), Catch::Contains("done: global step 3000"));
}

TEST_CASE("sync with a backup worker: every checkpoint holds every shard at one step") {
  // The chief reads the shards for a checkpoint while the two other workers
  // go on training without it: read as they come, a checkpoint mixed chunks
  // (and their Adam slots) of steps before and after an update.
  const auto dir = freshTempDir("consistent");
  std::string spec = widenedMlp(readFile(modelPath("fashion_mlp.yaml")));
  spec = replaceAll(spec, "type: sgd\n  learning_rate: 0.1", "type: adam\n  learning_rate: 0.001");
  spec = replaceAll(spec, "every_steps: 600", "every_steps: 3");
  REQUIRE(spec.find("type: adam") != std::string::npos);
  writeFile(dir / "wide.yaml", spec);
  const auto cluster = writeCluster(dir, 2, 3,
                                    "  mode: sync\n  replicas_to_aggregate: 2\n  "
                                    "total_num_replicas: 3\ntransport:\n  shared_memory: off\n");
  Cluster c(dir, cluster,
            "--model " + (dir / "wide.yaml").string() +
                " --max-steps 150 --threads 1 --eval-every 0 --log-every 50",
            2, 3);
  for (auto& w : c.workers) CHECK(w->wait(kTimeout) == 0);
  for (auto& p : c.ps) CHECK(p->wait(30) == 0);
  INFO(c.logs());
  const std::string chief = c.workers[0]->output();
  CHECK(lastNumber(chief, "saved checkpoint .*ckpt-0*([0-9]+)") == 150);
  CHECK_THAT(chief, !Catch::Contains("not all at global step"));
  // Each ps says at which step each checkpoint holds it: the checkpoint's.
  const std::regex held("checkpoint .*ckpt-0*([0-9]+) holds this shard at global step ([0-9]+)");
  for (auto& p : c.ps) {
    const std::string log = p->output();
    int seen = 0;
    for (auto it = std::sregex_iterator(log.begin(), log.end(), held); it != std::sregex_iterator();
         ++it, ++seen)
      CHECK((*it)[1] == (*it)[2]);
    CHECK(seen >= 10);
  }
}

TEST_CASE("sync: a worker waiting for a step its stopped peer will not finish stops on SIGTERM") {
  const auto dir = freshTempDir("sync-stop");
  const std::unique_ptr<Cluster> job = mlpJob(dir, "sync", 2, 1000000);
  Cluster& c = *job;
  c.workers[0]->waitForOutput("step 40,");
  // Worker 1 stops cleanly; the chief is left waiting for a step that needs
  // worker 1's gradient. Its SIGTERM must end that wait: it checkpoints and
  // exits 0 while the ps still runs.
  c.workers[1]->signal(SIGTERM);
  const int stopped_peer = c.workers[1]->wait(30);
  c.workers[0]->signal(SIGTERM);
  const int chief = c.workers[0]->wait(30);
  INFO(c.logs());
  CHECK(stopped_peer == 0);
  CHECK(chief == 0);
  CHECK_THAT(c.workers[0]->output(), Catch::Contains("saved checkpoint"));
  c.ps[0]->signal(SIGTERM);
  CHECK(c.ps[0]->wait(30) == 0);
}

TEST_CASE("sync: a chief stopped before the job's first step evaluates nothing") {
  const auto dir = freshTempDir("sync-stop-before-first-step");
  const auto cluster = writeCluster(
      dir, 1, 2, "  mode: sync\n  replicas_to_aggregate: 2\n  total_num_replicas: 2\n");
  const std::string node = "--cluster " + cluster.string() + " --model " +
                           modelPath("fashion_mlp.yaml") + " --threads 1 --checkpoint-dir " +
                           (dir / "ckpt").string() + " ";
  BackgroundTraind ps(node + "--job ps --task 0", dir / "ps.log");
  BackgroundTraind chief(node + "--job worker --task 0", dir / "chief.log");
  // Worker 1 never comes: the job's first step waits for its gradient.
  REQUIRE(chief.waitForOutput("in sync mode from global step 0", 60));
  chief.signal(SIGTERM);
  CHECK(chief.wait(kTimeout) == 0);
  INFO(chief.output());
  CHECK_THAT(chief.output(), Catch::Contains("stop requested before the job moved past global "
                                             "step 0: nothing to evaluate"));
  CHECK_THAT(chief.output(), !Catch::Contains("test loss"));
  CHECK_FALSE(findLatestCheckpoint(dir / "ckpt").has_value());
  ps.signal(SIGTERM);
  CHECK(ps.wait(kTimeout) == 0);
}

TEST_CASE("a ps stopped by SIGTERM ends the job with a final checkpoint of its last state") {
  const std::string mode = GENERATE(as<std::string>{}, "async", "sync");
  const auto dir = freshTempDir("ps-stop-" + mode);
  const std::unique_ptr<Cluster> job = mlpJob(dir, mode, 2, 1000000);
  Cluster& c = *job;
  // Mid-run: an async worker's lines fall near multiples of 20, not on them.
  REQUIRE(c.workers[0]->waitForOutput(", loss = ", 60));
  c.ps[0]->signal(SIGTERM);
  // The replies say the shard is stopping: the workers end as at max_steps,
  // the chief with its last checkpoint, all before the ps closes.
  CHECK(c.workers[0]->wait(30) == 0);
  CHECK(c.workers[1]->wait(30) == 0);
  CHECK(c.ps[0]->wait(30) == 0);
  INFO(c.logs());
  CHECK_THAT(c.workers[0]->output(), Catch::Contains("ps 0 is stopping: the job is over"));
  CHECK_THAT(c.workers[1]->output(), Catch::Contains("ps 0 is stopping: the job is over"));
  CHECK_THAT(c.logs(), !Catch::Contains("lost the connection"));
  CHECK_THAT(c.logs(), !Catch::Contains("dropped as stale"));
  CHECK_THAT(c.ps[0]->output(), Catch::Contains("stop requested by SIGTERM"));
  // A stopping ps applies no more gradients: the checkpoint, the chief's
  // last line and the ps's hold one global step.
  const int64_t saved = checkEveryPsEndsAtTheLastCheckpoint(c);
  CHECK(lastNumber(c.workers[0]->output(), "done: global step ([0-9]+)") == saved);
  // A sync chief that started the job pushed a gradient for every step of
  // it, the last one too, which the stopping ps completed (it said a step
  // fewer).
  if (mode == "sync")
    CHECK(lastNumber(c.workers[0]->output(), "done: global step [0-9]+, ([0-9]+) steps") == saved);
}

TEST_CASE("every worker stopped at once: the chief's final checkpoint holds every step") {
  const std::string mode = GENERATE(as<std::string>{}, "async", "sync");
  const auto dir = freshTempDir("workers-stop-" + mode);
  const std::unique_ptr<Cluster> job = mlpJob(dir, mode, 2, 1000000, 2);
  Cluster& c = *job;
  REQUIRE(c.workers[0]->waitForOutput(", loss = ", 60));
  REQUIRE(c.workers[1]->waitForOutput(", loss = ", 60));
  // As `systemctl stop traind@worker-0 traind@worker-1`, `docker compose
  // down` or a host's shutdown do: each worker ends its step and goes, and
  // the chief's last checkpoint must come after the other's last push.
  c.workers[1]->signal(SIGTERM);
  c.workers[0]->signal(SIGTERM);
  checkEveryStepInTheFinalCheckpoint(c);
}

TEST_CASE("workers stopped together, the chief told first: its final checkpoint holds every step") {
  const auto dir = freshTempDir("workers-stop-chief-first");
  const std::unique_ptr<Cluster> job = mlpJob(dir, "async", 2, 1000000, 2);
  Cluster& c = *job;
  REQUIRE(c.workers[0]->waitForOutput(", loss = ", 60));
  REQUIRE(c.workers[1]->waitForOutput(", loss = ", 60));
  // systemctl stop signals its units in no set order: worker 1 trains on
  // for a few of its steps after the chief's signal, then stops too.
  c.workers[0]->signal(SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  c.workers[1]->signal(SIGTERM);
  checkEveryStepInTheFinalCheckpoint(c);
}

TEST_CASE("a chief stopped alone sees the other workers train on and does not wait for them") {
  const std::string mode = GENERATE(as<std::string>{}, "async", "sync");
  const auto dir = freshTempDir("chief-stops-alone-" + mode);
  // Sync with a backup worker: workers 1 and 2 go on without the chief.
  const std::unique_ptr<Cluster> job =
      mode == "async" ? mlpJob(dir, "async", 2, 1000000)
                      : mlpJob(dir, "sync\n  replicas_to_aggregate: 2\n  total_num_replicas: 3", 3,
                               1000000);
  Cluster& c = *job;
  for (auto& w : c.workers) REQUIRE(w->waitForOutput(", loss = ", 60));
  c.workers[0]->signal(SIGTERM);
  CHECK(c.workers[0]->wait(60) == 0);
  INFO(c.logs());
  CHECK_THAT(c.workers[0]->output(),
             Catch::Matches("[\\s\\S]*final checkpoint: waiting up to [0-9.]+ s for workers? "
                            "[\\s\\S]*final checkpoint: workers? [0-9, ]+ trains? on \\(ps 0 "
                            "took [0-9]+ steps[\\s\\S]*"));
  // The others train on, unaware.
  for (size_t i = 1; i < c.workers.size(); ++i) CHECK(c.workers[i]->wait(0) == -1);
  for (size_t i = 1; i < c.workers.size(); ++i) c.workers[i]->signal(SIGTERM);
  for (size_t i = 1; i < c.workers.size(); ++i) CHECK(c.workers[i]->wait(30) == 0);
  c.ps[0]->signal(SIGTERM);
  CHECK(c.ps[0]->wait(30) == 0);
}

TEST_CASE("a chief stopped while another worker is paused waits for it a bounded time") {
  const auto dir = freshTempDir("chief-stops-other-paused");
  const std::unique_ptr<Cluster> job = mlpJob(dir, "async", 2, 1000000);
  Cluster& c = *job;
  for (auto& w : c.workers) REQUIRE(w->waitForOutput(", loss = ", 60));
  c.workers[1]->signal(SIGSTOP);
  const auto stopped = std::chrono::steady_clock::now();
  c.workers[0]->signal(SIGTERM);
  const int chief = c.workers[0]->wait(60);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  c.workers[1]->signal(SIGCONT);
  INFO(c.logs());
  CHECK(chief == 0);
  // Three of its steps, 2 s at least, then the checkpoint.
  CHECK(seconds >= 2.0);
  CHECK(seconds < 40.0);
  CHECK_THAT(c.workers[0]->output(),
             Catch::Contains("final checkpoint: worker 1 still connected after"));
  c.workers[1]->signal(SIGTERM);
  CHECK(c.workers[1]->wait(30) == 0);
  c.ps[0]->signal(SIGTERM);
  CHECK(c.ps[0]->wait(30) == 0);
}

TEST_CASE("sync: a ps stopped alone applies the step the workers compute, as the other ps does") {
  const auto dir = freshTempDir("ps-stop-alone");
  const std::unique_ptr<Cluster> job = mlpJob(dir, "sync", 2, 1000000, 2);
  Cluster& c = *job;
  REQUIRE(c.workers[0]->waitForOutput(", loss = ", 60));
  // Most likely while the workers compute: stopped at once, ps 1 would
  // refuse the step's gradients that ps 0 applies.
  c.ps[1]->signal(SIGTERM);
  CHECK(c.workers[0]->wait(30) == 0);
  CHECK(c.workers[1]->wait(30) == 0);
  CHECK(c.ps[0]->wait(30) == 0);
  CHECK(c.ps[1]->wait(30) == 0);
  INFO(c.logs());
  CHECK_THAT(c.ps[1]->output(), Catch::Contains("stop requested by SIGTERM: stopping once global "
                                                "step "));
  CHECK_THAT(c.workers[0]->output(), Catch::Contains("ps 1 is stopping: the job is over"));
  CHECK_THAT(c.logs(), !Catch::Contains("not all at global step"));
  const int64_t saved = checkEveryPsEndsAtTheLastCheckpoint(c);
  // Told by the replies that the job is over, worker 1 ends at the step they bring.
  CHECK(lastNumber(c.workers[1]->output(), "done: global step ([0-9]+)") == saved);
}

TEST_CASE("sync: a ps stopped alone while a worker is paused: the chief still checkpoints") {
  const auto dir = freshTempDir("ps-stop-paused-worker");
  const std::unique_ptr<Cluster> job = mlpJob(dir, "sync", 2, 1000000, 2);
  Cluster& c = *job;
  REQUIRE(c.workers[0]->waitForOutput(", loss = ", 60));
  // ps 0 waits 5 s for a step that worker 1 holds, then stops without it.
  // The chief's call to ps 1, which waits for the same step, is given up 1 s
  // after ps 0 said so (in a reply, or in its status when the chief had no
  // call there): its final checkpoint comes before ps 0 closes.
  c.workers[1]->signal(SIGSTOP);
  c.ps[0]->signal(SIGTERM);
  CHECK(c.workers[0]->wait(30) == 0);
  CHECK(c.ps[0]->wait(30) == 0);
  CHECK(c.ps[1]->wait(30) == 0);
  c.workers[1]->signal(SIGCONT);
  const int resumed = c.workers[1]->wait(30);
  INFO(c.logs());
  CHECK(resumed == 0);
  // Paused between its steps, worker 1 holds none: ps 0 applies the step
  // the chief computes at once (it says no "was not applied"), and the
  // chief waits for nothing (CI saw that once in many runs).
  if (c.ps[0]->output().find("was not applied") != std::string::npos)
    CHECK_THAT(c.workers[0]->output(),
               Catch::Contains("did not answer within 1 s of ps 0's word that the job is over"));
  CHECK_THAT(c.logs(), !Catch::Contains("no final checkpoint written"));
  // Worker 1, paused halfway through its push, may have completed some
  // chunks' step and not others': the chief says so, naming the steps its
  // checkpoint read (the final one: the job ends long before step 600)
  // ("not all at global step 24 (ps 0 at 24, ps 1 at 23 to 24)"). Each ps
  // then ends at the lowest step it holds, and the checkpoint is at ps 0's.
  const std::string chief = c.workers[0]->output();
  const std::regex apart("not all at global step [0-9]+ \\(([^)]*)\\)");
  std::string steps;
  for (auto it = std::sregex_iterator(chief.begin(), chief.end(), apart);
       it != std::sregex_iterator(); ++it)
    steps = (*it)[1];
  if (steps.empty()) {
    checkEveryPsEndsAtTheLastCheckpoint(c);
    return;
  }
  CHECK_THAT(chief, Catch::Contains("to some chunks only"));
  INFO("the steps the chief named: " << steps);
  CHECK(lastNumber(chief, "saved checkpoint .*ckpt-0*([0-9]+)") ==
        lastNumber(steps, "ps 0 at ([0-9]+)"));
  for (size_t i = 0; i < c.ps.size(); ++i) {
    INFO("ps " << i);
    CHECK(lastNumber(c.ps[i]->output(), fmt::format("ps {} done at global step ([0-9]+)", i)) ==
          lastNumber(steps, fmt::format("ps {} at ([0-9]+)", i)));
  }
}

TEST_CASE("sync: a ps stopped alone waits for the step three times as long as one took lately") {
  const auto dir = freshTempDir("ps-stop-slow-step");
  const std::unique_ptr<Cluster> job = mlpJob(dir, "sync", 2, 1000000, 2);
  Cluster& c = *job;
  REQUIRE(c.workers[0]->waitForOutput(", loss = ", 60));
  // A step of 7 s, as a long evaluation or a big model's step would take.
  c.workers[1]->signal(SIGSTOP);
  std::this_thread::sleep_for(std::chrono::seconds(7));
  c.workers[1]->signal(SIGCONT);
  std::this_thread::sleep_for(std::chrono::seconds(2));  // the ps looks every second
  // The next step takes 8 s: past the 5 s a ps waits at least.
  c.workers[1]->signal(SIGSTOP);
  c.ps[1]->signal(SIGTERM);
  std::this_thread::sleep_for(std::chrono::seconds(8));
  c.workers[1]->signal(SIGCONT);
  CHECK(c.workers[0]->wait(30) == 0);
  CHECK(c.workers[1]->wait(30) == 0);
  CHECK(c.ps[0]->wait(30) == 0);
  CHECK(c.ps[1]->wait(30) == 0);
  INFO(c.logs());
  CHECK(lastNumber(c.ps[1]->output(), "waiting ([0-9]+) s at most") >= 15);
  CHECK_THAT(c.ps[1]->output(), !Catch::Contains("was not applied"));
  CHECK_THAT(c.logs(), !Catch::Contains("not all at global step"));
  checkEveryPsEndsAtTheLastCheckpoint(c);
}

TEST_CASE("sync: the ps names the worker a standing step waits for and healthz says 503") {
  const auto dir = freshTempDir("sync-stall");
  // Ops endpoints for the ps and the chief, which call the node unhealthy
  // once the step has stood for 3 s. One range of free ports for all six.
  const int base = freePortRange(6);
  const auto local = [&](int i) { return fmt::format("127.0.0.1:{}", base + i); };
  const HostPort ps_http{"127.0.0.1", uint16_t(base + 3), {}},
      chief_http{"127.0.0.1", uint16_t(base + 4), {}};
  const auto cluster = dir / "cluster.yaml";
  writeFile(cluster, fmt::format("cluster:\n  ps: [{}]\n  worker: [{}, {}]\ntraining:\n  mode: "
                                 "sync\nhttp:\n  ps: [{}]\n  worker: [{}, {}]\n  "
                                 "stall_seconds: 3\n",
                                 local(0), local(1), local(2), local(3), local(4), local(5)));
  Cluster c(dir, cluster, endlessMlp(), 1, 2);
  c.workers[0]->waitForOutput("step 40,");
  CHECK(requestOps(chief_http, "GET", "/healthz", 5.0).status == 200);
  // Stopped, worker 1 keeps its connection and pushes nothing; killed, it
  // is gone. Either way the step waits for it, as sync training does.
  c.workers[1]->signal(SIGSTOP);
  const bool stopped_named =
      c.ps[0]->waitForOutput("from worker 1 (connected: stopped, hung or slow?)", 40);
  // By now the step has stood for 15 s: past the stall limit.
  const OpsReply chief_health = requestOps(chief_http, "GET", "/healthz", 5.0);
  CHECK(chief_health.status == 503);
  CHECK_THAT(chief_health.body, Catch::StartsWith("training: the global step has stood at "));
  const OpsReply ps_health = requestOps(ps_http, "GET", "/healthz", 5.0);
  CHECK(ps_health.status == 503);
  CHECK_THAT(ps_health.body, Catch::StartsWith("serving: the global step has stood at "));
  // trainctl status (the compose stack's health check) fails on it too.
  const ProcessResult status =
      runDaemonBinary("trainctl", "status --node " + chief_http.toString());
  CHECK(status.exit_code == 1);
  CHECK_THAT(status.output, Catch::Contains("training: the global step has stood at "));
  // A checkpoint asked for meanwhile does not come, and trainctl says why.
  const ProcessResult checkpoint =
      runDaemonBinary("trainctl", "checkpoint --timeout 3 --cluster " + cluster.string());
  INFO(checkpoint.output);
  CHECK(checkpoint.exit_code == 1);
  CHECK_THAT(
      checkpoint.output,
      Catch::Contains("worker 0: no checkpoint within 3 s: its global step stood at ") &&
          Catch::Contains("all along, and it saves between steps") &&
          Catch::Contains("\n  worker 1 (" + local(5) + "): unreachable (") &&
          Catch::Contains("\n  ps 0 (" + local(3) + "): serving: the global step has stood at "));
  c.workers[1]->signal(SIGKILL);
  const bool killed_named = c.ps[0]->waitForOutput("from worker 1 (not connected)", 40);
  // The chief's own log says what its step waits for.
  const bool chief_said = c.workers[0]->waitForOutput("waited 30 s for ps 0 at ", 30);
  c.workers[0]->signal(SIGTERM);
  CHECK(c.workers[0]->wait(30) == 0);
  c.ps[0]->signal(SIGTERM);
  CHECK(c.ps[0]->wait(30) == 0);
  INFO(c.logs());
  CHECK(stopped_named);
  CHECK(killed_named);
  CHECK(chief_said);
  CHECK_THAT(c.workers[0]->output(),
             Catch::Contains("to answer: sync training answers a step once the ps has 2 of the 2 "
                             "workers' gradients of it (the ps's log names those it waits for"));
  CHECK_THAT(c.ps[0]->output(),
             Catch::Matches("(?:.|\\n)*has waited 1[5-7] s for gradients from worker 1 \\(connected: "
                            "stopped, hung or slow\\?\\); each chunk aggregates 2 of the 2 "
                            "workers' gradients(?:.|\\n)*"));
}

TEST_CASE("async with max_staleness: the ps names the stopped worker the others wait for") {
  const auto dir = freshTempDir("async-staleness-stall");
  const auto cluster = writeCluster(dir, 1, 2, "  mode: async\n  max_staleness: 2\n");
  Cluster c(dir, cluster, endlessMlp(), 1, 2);
  c.workers[1]->waitForOutput("connected to ps 0");
  c.workers[0]->waitForOutput("step 40,");
  c.workers[1]->signal(SIGSTOP);
  const bool named = c.ps[0]->waitForOutput(
      "worker 0 is more than max_staleness (2) pushes ahead of worker 1 (connected: stopped, hung "
      "or slow?) "
      "and waits for its gradients",
      40);
  // Gone, it holds nobody back: the chief trains on.
  c.workers[1]->signal(SIGKILL);
  const std::string before = c.workers[0]->output();
  const bool trained_on = c.workers[0]->waitForOutput(", loss = ", 30, before.size());
  c.workers[0]->signal(SIGTERM);
  CHECK(c.workers[0]->wait(30) == 0);
  c.ps[0]->signal(SIGTERM);
  CHECK(c.ps[0]->wait(30) == 0);
  INFO(c.logs());
  CHECK(named);
  CHECK(trained_on);
}

TEST_CASE("sync: a worker killed while it waits for a step leaves the ps serving the others") {
  // The killed worker's calls still wait at the ps when their step
  // completes: their replies must go nowhere, not into its closed connection.
  const auto dir = freshTempDir("sync-killed-waiting");
  const std::unique_ptr<Cluster> job = mlpJob(dir, "sync", 2, 1000000);
  Cluster& c = *job;
  c.workers[1]->waitForOutput("step 40,");
  // Worker 1 freezes: the chief's next step waits for its gradient.
  c.workers[1]->signal(SIGSTOP);
  usleep(300000);
  c.workers[0]->signal(SIGKILL);
  c.workers[0]->wait(30);
  usleep(300000);
  // Worker 1's gradient completes the step the killed chief waited for; then
  // it waits for one that needs the chief, and a stop ends that wait.
  c.workers[1]->signal(SIGCONT);
  usleep(500000);
  c.workers[1]->signal(SIGTERM);
  const int worker = c.workers[1]->wait(30);
  const int ps_before_stop = c.ps[0]->wait(0);
  c.ps[0]->signal(SIGTERM);
  const int ps = c.ps[0]->wait(30);
  INFO(c.logs());
  CHECK(worker == 0);
  CHECK(ps_before_stop == -1);
  CHECK(ps == 0);
}

TEST_CASE("a chief restarted after the others finished the job checkpoints what they trained") {
  // The chief is killed early; worker 1 trains the job to its end, and the
  // ps waits for a chief. The chief, started again, joins shards at the
  // last step: nothing to train, but all of it in no checkpoint yet.
  const auto dir = freshTempDir("chief-rejoins-at-end");
  const std::unique_ptr<Cluster> job = mlpJob(dir, "async", 2, 2000);
  Cluster& c = *job;
  REQUIRE(c.workers[0]->waitForOutput(", loss = ", 60));
  c.workers[0]->signal(SIGKILL);
  c.workers[0]->wait(30);
  REQUIRE(c.workers[1]->wait(kTimeout) == 0);
  const std::string chief_args = "--cluster " + (dir / "cluster.yaml").string() + " --model " +
                                 modelPath("fashion_mlp.yaml") +
                                 " --max-steps 2000 --threads 1 --eval-every 0 --checkpoint-dir " +
                                 (dir / "ckpt").string() + " --job worker --task 0";
  BackgroundTraind chief(chief_args, dir / "worker0-again.log");
  CHECK(chief.wait(kTimeout) == 0);
  CHECK(c.ps[0]->wait(30) == 0);
  INFO(chief.output());
  CHECK_THAT(chief.output(), Catch::Contains("joining the job") &&
                                 Catch::Contains("nothing to train: the job is at global step "));
  const std::optional<std::filesystem::path> latest = findLatestCheckpoint(dir / "ckpt");
  REQUIRE(latest);
  CHECK(readManifest(*latest).global_step >= 2000);
}

TEST_CASE(
    "a chief whose ps hangs during its final checkpoint gives up instead of waiting forever") {
  const auto dir = freshTempDir("hung-ps-final");
  const std::unique_ptr<Cluster> job = mlpJob(dir, "async", 1, 1000000);
  Cluster& c = *job;
  REQUIRE(c.workers[0]->waitForOutput(", loss = ", 60));
  // The stop gives up the step waiting on the paused ps within a second;
  // the checkpoint's reads then wait on it too, until its silence tells.
  c.ps[0]->signal(SIGSTOP);
  c.workers[0]->signal(SIGTERM);
  const int chief = c.workers[0]->wait(60);
  c.ps[0]->signal(SIGCONT);
  c.ps[0]->signal(SIGTERM);
  CHECK(c.ps[0]->wait(30) == 0);
  INFO(c.logs());
  CHECK(chief == 1);
  CHECK_THAT(c.workers[0]->output(), Catch::Contains("no answer to a status call for 20 s"));
}

TEST_CASE("SIGTERM stops a worker still waiting for its peers: exit 0") {
  const auto dir = freshTempDir("stop-waiting");
  const auto cluster = writeCluster(dir, 1, 2, "  mode: async\n");
  const std::string args = "--cluster " + cluster.string() + " --model " +
                           modelPath("fashion_mlp.yaml") + " --max-steps 20 --threads 1 " +
                           "--eval-every 0 --checkpoint-dir \"\" --job ";
  SECTION("for a ps that is not up") {
    BackgroundTraind worker(args + "worker --task 1", dir / "worker1.log");
    REQUIRE(worker.waitForOutput("waiting for ps 0", 60));
    worker.signal(SIGTERM);
    CHECK(worker.wait(15) == 0);
    INFO(worker.output());
    CHECK_THAT(worker.output(), Catch::Contains("stop requested while waiting for ps 0"));
  }
  SECTION("for the chief to initialise the ps") {
    BackgroundTraind ps(args + "ps --task 0", dir / "ps0.log");
    BackgroundTraind worker(args + "worker --task 1", dir / "worker1.log");
    REQUIRE(worker.waitForOutput("waiting for the chief (worker 0) to initialise ps 0", 60));
    worker.signal(SIGTERM);
    CHECK(worker.wait(15) == 0);
    ps.signal(SIGTERM);
    CHECK(ps.wait(15) == 0);
    INFO(worker.output());
    CHECK_THAT(worker.output(),
               Catch::Contains("stop requested while waiting for the chief to initialise ps 0"));
  }
  SECTION("for the chief, with the ps stopped (its kernel still takes the status calls)") {
    BackgroundTraind ps(args + "ps --task 0", dir / "ps0.log");
    BackgroundTraind worker(args + "worker --task 1", dir / "worker1.log");
    REQUIRE(worker.waitForOutput("waiting for the chief (worker 0) to initialise ps 0", 60));
    ps.signal(SIGSTOP);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // a status call unanswered
    worker.signal(SIGTERM);
    const int stopped = worker.wait(15);
    ps.signal(SIGCONT);
    ps.signal(SIGTERM);
    CHECK(ps.wait(15) == 0);
    INFO(worker.output());
    CHECK(stopped == 0);
    CHECK_THAT(worker.output(),
               Catch::Contains("stop requested while waiting for the chief to initialise ps 0"));
  }
}

TEST_CASE("a worker that joins as the job ends says so and exits 0") {
  const auto dir = freshTempDir("late-worker");
  MlpPsTask task(dir, "async");
  BackgroundTraind late("--cluster " + task.cluster.string() + " --model " +
                            modelPath("fashion_mlp.yaml") + " --job worker --task 1 --threads 1",
                        dir / "worker1.log");
  REQUIRE(late.waitForOutput("waiting for the chief (worker 0) to initialise", 60));
  // The chief (this test) says hello and ends the job before it initialises
  // the shard: the waiting worker finds the job over.
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::Own<kj::AsyncIoStream> stream = connectWithin10s(io, task.address);
  capnp::TwoPartyClient client(*stream);
  auto shard = client.bootstrap().castAs<wire::ParameterShard>();
  task.hello(shard, 0).send().wait(io.waitScope);
  shard.stopRequest().send().wait(io.waitScope);
  const int status = late.wait(kTimeout);
  INFO(late.output());
  CHECK(status == 0);
  CHECK_THAT(late.output(), Catch::Contains("ps 0 is stopping: the job is over"));
  CHECK_THAT(late.output(), Catch::Contains("done: the job ended before this worker trained"));
}

TEST_CASE(
    "sync: a worker that pulls a step applied to part of a shard says its gradient mixes two") {
  // Worker 1's earlier process pushed the first chunk of step 0 and died;
  // with the chief's gradient that chunk was applied, the others wait for
  // worker 1's. Started again, it pulls parameters of steps 0 and 1.
  const auto dir = freshTempDir("half-applied");
  MlpPsTask task(dir, "sync");
  REQUIRE(task.chunks.size() >= 2);
  kj::AsyncIoContext io = kj::setupAsyncIo();
  PsPeer chief(io, task.address);
  task.hello(chief.shard, 0).send().wait(io.waitScope);
  for (const ShardChunk& c : task.chunks) {
    const std::vector<float> zeros(size_t(c.size));
    auto request = chief.shard.initializeRequest();
    request.setOffset(uint64_t(c.shard_offset));
    request.setData(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(zeros.data()),
                                        zeros.size() * sizeof(float)));
    request.send().wait(io.waitScope);
  }
  {
    auto ready = chief.shard.markReadyRequest();
    ready.setLastStep(100);
    ready.send().wait(io.waitScope);
  }
  const ShardChunk& first = task.chunks.front();
  const std::vector<float> gradient(size_t(first.size), 0.5f);
  auto pushFirstChunk = [&](wire::ParameterShard::Client& shard, uint32_t worker) {
    auto request = shard.pushAndPullRequest();
    request.setWorkerTask(worker);
    request.setStep(0);
    request.setOffset(uint64_t(first.shard_offset));
    request.setData(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(gradient.data()),
                                        gradient.size() * sizeof(float)));
    return request.send();
  };
  {
    PsPeer earlier(io, task.address);
    task.hello(earlier.shard, 1).send().wait(io.waitScope);
    auto from_worker = pushFirstChunk(earlier.shard, 1);
    auto from_chief = pushFirstChunk(chief.shard, 0);
    CHECK(from_worker.wait(io.waitScope).getGlobalStep() == 1);  // applied
    CHECK(from_chief.wait(io.waitScope).getGlobalStep() == 1);
  }  // its connection closes: the process died

  BackgroundTraind worker("--cluster " + task.cluster.string() + " --model " +
                              modelPath("fashion_mlp.yaml") +
                              " --job worker --task 1 --threads 1 --max-steps 100 "
                              "--checkpoint-dir ''",
                          dir / "worker1.log");
  const bool said = worker.waitForOutput(
      "the parameters pulled from ps 0 are of global steps 0 and 1: it had applied step 0", 60);
  worker.signal(SIGTERM);  // its step waits for the chief's gradients, which never come
  CHECK(worker.wait(kTimeout) == 0);
  INFO(worker.output());
  CHECK(said);
  CHECK_THAT(worker.output(),
             Catch::Contains("this worker's first gradient is computed from both"));
}

TEST_CASE("a refused hello changes nothing the next worker is held to") {
  const auto dir = freshTempDir("refused-hello");
  MlpPsTask task(dir, "async");
  kj::AsyncIoContext io = kj::setupAsyncIo();
  const auto refusal = [&](auto&& request) {
    std::string why;
    KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] { request.send().wait(io.waitScope); }))
      why = e->getDescription().cStr();
    return why;
  };
  kj::Own<kj::AsyncIoStream> stream = connectWithin10s(io, task.address);
  capnp::TwoPartyClient client(*stream);
  auto shard = client.bootstrap().castAs<wire::ParameterShard>();
  // A task the cluster lacks, with a training set of its own: refused, and
  // the set is not the one later workers must match.
  auto stranger = task.hello(shard, 7);
  stranger.setTrainingSet("1 examples, CRC-32C 0xdeadbeef");
  CHECK_THAT(refusal(stranger), Catch::Contains("no worker 7 in a cluster of 2"));
  CHECK(shard.statusRequest().send().wait(io.waitScope).getStatus().getWorkers().size() == 0);
  // The real workers' hellos, with their real training sets, are taken.
  kj::Own<kj::AsyncIoStream> stream1 = connectWithin10s(io, task.address);
  capnp::TwoPartyClient client1(*stream1);
  auto worker1 = client1.bootstrap().castAs<wire::ParameterShard>();
  auto ok = task.hello(worker1, 1);
  ok.setTrainingSet("60000 examples, CRC-32C 0x00000001");
  CHECK(refusal(ok).empty());
  CHECK(shard.statusRequest().send().wait(io.waitScope).getStatus().getWorkers().size() == 1);
}

TEST_CASE("a worker that reads another training set and came first locks nobody out") {
  const auto dir = freshTempDir("chief-training-set");
  const auto cluster = writeCluster(dir, 1, 3, "  mode: async\n");
  const std::string args = " --threads 1 --eval-every 0 --max-steps 5000";
  BackgroundTraind ps("--cluster " + cluster.string() + " --model " +
                          modelPath("fashion_mlp.yaml") + " --job ps --task 0",
                      dir / "ps.log");
  // Worker 1's host holds the test set under the training set's names, and
  // it says hello first; worker 2, with the job's set, and the chief are
  // taken all the same (the first worker's set was the one the others were
  // held to, until the ps restarted), and worker 1 is refused at its first
  // push, as a refused hello is: exit 2.
  const std::string fashion = "/usr/share/datasets/fashion-mnist/";
  const auto test_set = dir / "test-set.yaml";
  writeFile(test_set, replaceAll(readFile(modelPath("fashion_mlp.yaml")), fashion + "train-",
                                 fashion + "t10k-"));
  BackgroundTraind misread("--cluster " + cluster.string() + " --model " + test_set.string() +
                               " --job worker --task 1" + args,
                           dir / "worker1.log");
  REQUIRE(misread.waitForOutput("waiting for the chief", 60));
  const std::string job_spec = " --model " + modelPath("fashion_mlp.yaml");
  BackgroundTraind other(
      "--cluster " + cluster.string() + job_spec + " --job worker --task 2" + args,
      dir / "worker2.log");
  REQUIRE(other.waitForOutput("waiting for the chief", 60));
  BackgroundTraind chief("--cluster " + cluster.string() + job_spec + " --job worker --task 0" +
                             args + " --checkpoint-dir " + (dir / "ckpt").string(),
                         dir / "chief.log");
  CHECK(misread.wait(kTimeout) == 2);
  CHECK(other.wait(kTimeout) == 0);
  CHECK(chief.wait(kTimeout) == 0);
  CHECK(ps.wait(30) == 0);
  INFO(misread.output() << other.output() << ps.output());
  CHECK_THAT(misread.output(),
             Catch::Contains("refused this worker: ps 0 now trains the chief's training set, which "
                             "holds 60000 examples, CRC-32C 0x") &&
                 Catch::Contains("; this worker's holds 10000 examples, CRC-32C 0x") &&
                 Catch::Contains("the nodes read different training data"));
  CHECK_THAT(other.output(), Catch::Contains("training fashion_mlp"));
  CHECK_THAT(chief.output(), Catch::Contains("done: global step "));
}

TEST_CASE("a peer that keeps its answers unreleased is ended, the ps serves on") {
  const auto dir = freshTempDir("kept-answers");
  MlpPsTask task(dir, "async");
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::Own<kj::AsyncIoStream> stream = connectWithin10s(io, task.address);
  capnp::TwoPartyClient client(*stream);
  auto shard = client.bootstrap().castAs<wire::ParameterShard>();
  // Each response kept: Cap'n Proto sends no Finish, the ps keeps the answer.
  std::vector<capnp::Response<wire::ParameterShard::StatusResults>> kept;
  std::string ended;
  for (int i = 0; i < 1000 && ended.empty(); ++i) {
    KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] {
                   kept.push_back(shard.statusRequest().send().wait(io.waitScope));
                 }))
      ended = e->getDescription().cStr();
  }
  INFO(ended);
  CHECK(!ended.empty());
  CHECK(kept.size() <= 512);
  // Another connection is served as before.
  kj::Own<kj::AsyncIoStream> stream2 = connectWithin10s(io, task.address);
  capnp::TwoPartyClient client2(*stream2);
  auto other = client2.bootstrap().castAs<wire::ParameterShard>();
  CHECK(other.statusRequest().send().wait(io.waitScope).getStatus().getGlobalStep() == 0);
  CHECK(
      task.ps.waitForOutput("holds more than 512 calls whose answers the peer has not "
                            "released",
                            10));
}

TEST_CASE("a worker paused while the job ends hears it once it goes on: exit 0") {
  const auto dir = freshTempDir("paused-worker");
  const std::unique_ptr<Cluster> job = mlpJob(dir, "async", 2, 1000000);
  Cluster& c = *job;
  REQUIRE(c.workers[1]->waitForOutput(", loss = ", 60));
  c.workers[1]->signal(SIGSTOP);
  REQUIRE(c.workers[0]->waitForOutput(", loss = ", 60));
  // A stop asked of the ps ends the job; the paused worker does not hear it.
  c.ps[0]->signal(SIGTERM);
  const int chief = c.workers[0]->wait(kTimeout), ps = c.ps[0]->wait(30);
  c.workers[1]->signal(SIGCONT);
  const int paused = c.workers[1]->wait(60);
  INFO(c.logs());
  CHECK(chief == 0);
  CHECK(ps == 0);
  CHECK_THAT(c.ps[0]->output(), Catch::Contains(": the job is over: ps 0 stopped at global step"));
  CHECK(paused == 0);
  // Told as the connection closed; or by a reply the ps sent as it began
  // to stop, which reached the worker just as it was paused.
  CHECK_THAT(
      c.workers[1]->output(),
      Catch::Contains("closed the connection: the job is over: ps 0 stopped at global step") ||
          Catch::Contains("ps 0 is stopping: the job is over"));
}

TEST_CASE("training.peer_wait_seconds: a worker gives up its absent ps, then its absent chief") {
  const auto dir = freshTempDir("peer-wait");
  const auto cluster = writeCluster(dir, 1, 2, "  mode: async\n  peer_wait_seconds: 2\n");
  // A checkpoint directory of its own: one under the spec's default that
  // another run left past step 10 would say the job is over instead.
  const std::string worker1 =
      "--cluster " + cluster.string() + " --model " + modelPath("fashion_mlp.yaml") +
      " --max-steps 10 --threads 1 --job worker --task 1 --checkpoint-dir " +
      (dir / "ckpt").string();
  {
    BackgroundTraind alone(worker1, dir / "alone.log");
    const int exit_code = alone.wait(60);
    INFO(alone.output());
    CHECK(exit_code == 1);
    CHECK_THAT(alone.output(), Catch::Contains("gave up waiting for ps 0 at ") &&
                                   Catch::Contains(" s (the cluster spec's "
                                                   "training.peer_wait_seconds)"));
  }
  {
    // A port that takes the connection and never answers the hello: the
    // wait is the spec's, not a hello's 10 s.
    const HostPort ps = loadClusterSpec(cluster.string()).ps[0];
    const int silent = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr = loopbackAddress(ps.port);
    REQUIRE(bind(silent, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(listen(silent, 8) == 0);
    BackgroundTraind unanswered(worker1, dir / "unanswered.log");
    const auto start = std::chrono::steady_clock::now();
    const int exit_code = unanswered.wait(60);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    close(silent);
    INFO(unanswered.output());
    CHECK(exit_code == 1);
    CHECK_THAT(unanswered.output(),
               Catch::Contains("gave up waiting for ps 0 at " + ps.toString() +
                               " after 2 s (the cluster spec's training.peer_wait_seconds): no "
                               "answer within 2 s"));
    CHECK(seconds < 8);
  }
  // With its ps up, it waits for the chief, which never comes.
  BackgroundTraind ps("--cluster " + cluster.string() + " --model " +
                          modelPath("fashion_mlp.yaml") + " --job ps --task 0",
                      dir / "ps.log");
  BackgroundTraind waiting(worker1, dir / "waiting.log");
  const int exit_code = waiting.wait(60);
  INFO(waiting.output());
  CHECK(exit_code == 1);
  CHECK_THAT(waiting.output(),
             Catch::Contains("gave up waiting for the chief (worker 0) to initialise the ps "
                             "shards after 2 s (the cluster spec's training.peer_wait_seconds)"));
  ps.signal(SIGTERM);
  CHECK(ps.wait(30) == 0);
}

TEST_CASE("a chief paused while one of two ps ends the job stops the other when it goes on") {
  const auto dir = freshTempDir("paused-chief-two-ps");
  const auto cluster = writeCluster(dir, 2, 1, "  mode: async\n");
  Cluster c(dir, cluster, endlessMlp(), 2, 1);
  REQUIRE(c.workers[0]->waitForOutput(", loss = ", 60));
  c.workers[0]->signal(SIGSTOP);
  // ps 0 ends the job and closes the paused chief's connection; ps 1 would
  // wait for workers that are gone, forever.
  c.ps[0]->signal(SIGTERM);
  const int ps0 = c.ps[0]->wait(30);
  c.workers[0]->signal(SIGCONT);
  const int chief = c.workers[0]->wait(60), ps1 = c.ps[1]->wait(30);
  INFO(c.logs());
  CHECK(ps0 == 0);
  CHECK(chief == 0);
  CHECK(ps1 == 0);
  CHECK_THAT(c.ps[1]->output(), Catch::Contains("stop requested by the chief"));
}

TEST_CASE("workers give up a ps whose process is stopped, naming it") {
  // Its kernel still acknowledges, so only the workers' heartbeats see it.
  const auto dir = freshTempDir("ps-stopped");
  const std::unique_ptr<Cluster> job = mlpJob(dir, "sync", 2, 1000000);
  Cluster& c = *job;
  const std::string address = loadClusterSpec((dir / "cluster.yaml").string()).ps[0].toString();
  c.workers[0]->waitForOutput("step 40,");
  c.ps[0]->signal(SIGSTOP);
  const auto stopped = std::chrono::steady_clock::now();
  const int chief = c.workers[0]->wait(60), other = c.workers[1]->wait(60);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  c.ps[0]->signal(SIGCONT);
  c.ps[0]->signal(SIGTERM);
  const int ps = c.ps[0]->wait(30);
  INFO(c.logs());
  CHECK(chief == 1);
  CHECK(other == 1);
  CHECK(waited < 40);
  for (auto& w : c.workers)
    CHECK_THAT(w->output(), Catch::Contains("ps 0 at " + address + " (it stopped"));
  CHECK(ps == 0);
}

TEST_CASE("a ps refuses a worker whose spec has another optimizer: exit 2, both named") {
  const auto dir = freshTempDir("other-optimizer");
  const auto cluster = writeCluster(dir, 1, 1, "  mode: async\n");
  const auto adam = dir / "fashion_mlp_adam.yaml";
  writeFile(adam, replaceAll(readFile(modelPath("fashion_mlp.yaml")), "type: sgd", "type: adam"));
  REQUIRE(readFile(adam) != readFile(modelPath("fashion_mlp.yaml")));
  BackgroundTraind ps("--cluster " + cluster.string() + " --model " +
                          modelPath("fashion_mlp.yaml") + " --job ps --task 0",
                      dir / "ps.log");
  BackgroundTraind chief("--cluster " + cluster.string() + " --model " + adam.string() +
                             " --job worker --task 0 --max-steps 10 --checkpoint-dir ''",
                         dir / "worker.log");
  const int chief_exit = chief.wait(kTimeout);
  ps.signal(SIGTERM);
  const int ps_exit = ps.wait(30);
  INFO(chief.output() << ps.output());
  CHECK(chief_exit == 2);
  CHECK_THAT(chief.output(), Catch::Contains("refused this worker: ps 0 applies sgd, learning "
                                             "rate 0.1; the peer's spec says adam (beta1 0.9,"));
  CHECK_THAT(chief.output(), !Catch::Contains("stack:"));
  CHECK(ps_exit == 0);
}

TEST_CASE("a ps refuses workers of another cluster spec or batch size and another job's chief") {
  const auto dir = freshTempDir("other-job");
  const auto cluster = writeCluster(dir, 1, 2, "  mode: async\n");
  const std::string model = " --model " + modelPath("fashion_mlp.yaml");
  BackgroundTraind ps("--cluster " + cluster.string() + model + " --job ps --task 0",
                      dir / "ps.log");
  auto worker = [&](const std::filesystem::path& spec, const std::string& args,
                    const std::string& log) {
    BackgroundTraind w("--cluster " + spec.string() + args + " --max-steps 1000000 --threads 1 " +
                           "--eval-every 0",
                       dir / log);
    const int exit = w.wait(kTimeout);
    INFO(w.output());
    CHECK(exit == 2);
    CHECK_THAT(w.output(), !Catch::Contains("stack:"));
    return w.output();
  };
  // The same addresses, another mode: read as sync by the worker alone.
  const auto sync = dir / "sync.yaml";
  writeFile(sync, replaceAll(readFile(cluster), "mode: async", "mode: sync"));
  CHECK_THAT(worker(sync, model + " --job worker --task 1", "sync.log"),
             Catch::Contains("refused this worker: ps 0 trains async, max_staleness 0, ps [") &&
                 Catch::Contains("the peer's cluster spec says sync, replicas_to_aggregate 2 of "
                                 "2") &&
                 Catch::Contains("every node must read the same cluster spec"));
  // One more ps: the variables are placed otherwise too, which is said as
  // the cluster spec it comes of, not as another release.
  const auto more_ps = dir / "more_ps.yaml";
  writeFile(more_ps,
            replaceAll(readFile(cluster), "]\n  worker:",
                       ", 127.0.0.1:" + std::to_string(freePortRange(1)) + "]\n  worker:"));
  CHECK_THAT(worker(more_ps, model + " --job worker --task 1", "more_ps.log"),
             Catch::Contains("every node must read the same cluster spec") &&
                 !Catch::Contains("cuts its shard into other chunks"));
  const auto batch = dir / "batch.yaml";
  writeFile(batch, replaceAll(readFile(modelPath("fashion_mlp.yaml")), "batch_size: 100",
                              "batch_size: 50"));
  CHECK_THAT(worker(cluster, " --model " + batch.string() + " --job worker --task 1", "batch.log"),
             Catch::Contains("ps 0 trains on batches of batch_size 100, seed ") &&
                 Catch::Contains("the peer's spec says batch_size 50"));
  // Images distorted by one worker and not by another would break what a
  // sync step trains; a worker holding its share alone while the others
  // deal the whole set out would train some examples twice and others never,
  // as would workers drawing the epoch's order each their own way.
  // So would a worker dealing out the first 5000 examples where the others
  // deal out all 60000.
  struct DataRule {
    const char* after;  // the spec's line that the field follows
    const char* field;  // a line of the spec
    const char* rule;   // in the data rule, after "shuffled"
  };
  const DataRule data_rules[] = {
      {"batch_size: 100\n", "  augment: {flip_left_right: true}\n", ", augmented: flip_left_right"},
      {"batch_size: 100\n", "  shard_by_worker: true\n", ", sharded by worker"},
      {"batch_size: 100\n", "  shuffle_buffer: 1000\n", " through a buffer of 1000"},
      {"train-labels-idx1-ubyte.gz\n", "    limit: 5000\n", ", the first 5000 training examples"}};
  for (const auto& [after, field, rule] : data_rules) {
    const auto spec = dir / "data-rule.yaml";
    writeFile(spec, replaceAll(readFile(modelPath("fashion_mlp.yaml")), after,
                               std::string(after) + field));
    REQUIRE_THAT(readFile(spec), Catch::Contains(field));
    CHECK_THAT(
        worker(cluster, " --model " + spec.string() + " --job worker --task 1", "data-rule.log"),
        Catch::Contains(std::string("ps 0 trains on batches of batch_size 100, seed 42, "
                                    "shuffled; the peer's spec says batch_size 100, seed 42, "
                                    "shuffled") +
                        rule) &&
            Catch::Contains("data.shard_by_worker, data.train.limit, data.train's features and "
                            "resize, data.augment and data.standardize must be the same on every "
                            "node"));
  }

  // Nor one that computes another forward pass: here another activation
  // (which no checkpoint's architecture holds).
  const auto tanh = dir / "tanh.yaml";
  writeFile(tanh, replaceAll(readFile(modelPath("fashion_mlp.yaml")),
                             "name: hidden2, units: 100, activation: relu",
                             "name: hidden2, units: 100, activation: tanh"));
  REQUIRE_THAT(readFile(tanh), Catch::Contains("activation: tanh"));
  CHECK_THAT(worker(cluster, " --model " + tanh.string() + " --job worker --task 1", "tanh.log"),
             Catch::Contains("ps 0 trains workers that compute hidden2 relu; the peer's spec "
                             "says hidden2 tanh (the first layer of their forward rules that "
                             "differs)") &&
                 Catch::Contains("each layer's activation and dropout rate must be the same"));

  // The job's chief initialises the shard; another job's chief, on the
  // same ps ports with its own checkpoints, does not join it (once it would
  // have written this job into its checkpoints and stopped it).
  BackgroundTraind chief("--cluster " + cluster.string() + model +
                             " --job worker --task 0 --max-steps 1000000 --threads 1 "
                             "--eval-every 0 --checkpoint-dir " +
                             (dir / "ckpt").string(),
                         dir / "chief.log");
  REQUIRE(chief.waitForOutput(", loss = ", 60));
  const std::string other = worker(
      cluster, model + " --job worker --task 0 --checkpoint-dir " + (dir / "other-ckpt").string(),
      "other-chief.log");
  CHECK_THAT(other, Catch::Contains("ps 0 holds the state of a job whose chief checkpoints in " +
                                    (dir / "ckpt").string() + "; this chief checkpoints in " +
                                    (dir / "other-ckpt").string() + ": is it another job's"));
  // The spec's rules agree, but its files hold other examples on this
  // worker's host: here the test set's, under the training set's names.
  const std::string fashion = "/usr/share/datasets/fashion-mnist/";
  const auto test_set = dir / "test-set.yaml";
  writeFile(test_set, replaceAll(readFile(modelPath("fashion_mlp.yaml")), fashion + "train-",
                                 fashion + "t10k-"));
  REQUIRE_THAT(readFile(test_set), !Catch::Contains("train-"));
  CHECK_THAT(
      worker(cluster, " --model " + test_set.string() + " --job worker --task 1", "test-set.log"),
      Catch::Contains("ps 0 trains workers whose training set holds 60000 examples, "
                      "CRC-32C 0x") &&
          Catch::Contains(" (the chief's); this worker's holds 10000 examples, CRC-32C 0x") &&
          Catch::Contains("the nodes read different training data"));
  CHECK(chief.wait(0) == -1);  // still training
  chief.signal(SIGTERM);
  CHECK(chief.wait(30) == 0);
  ps.signal(SIGTERM);
  CHECK(ps.wait(30) == 0);
}

TEST_CASE("a worker told another last step than its chief's is refused: exit 2, both named") {
  const auto dir = freshTempDir("other-length");
  const auto cluster = writeCluster(dir, 1, 2, "  mode: sync\n");
  const std::string model = " --model " + modelPath("fashion_mlp.yaml") + " --threads 1 " +
                            "--eval-every 0";
  BackgroundTraind ps("--cluster " + cluster.string() + model + " --job ps --task 0",
                      dir / "ps.log");
  // --max-steps given to the chief alone: the other worker's spec says 3 epochs.
  BackgroundTraind chief("--cluster " + cluster.string() + model +
                             " --job worker --task 0 --max-steps 1000000 --checkpoint-dir " +
                             (dir / "ckpt").string(),
                         dir / "chief.log");
  BackgroundTraind other("--cluster " + cluster.string() + model + " --job worker --task 1",
                         dir / "worker.log");
  const int other_exit = other.wait(kTimeout);
  chief.signal(SIGTERM);
  const int chief_exit = chief.wait(60);
  ps.signal(SIGTERM);
  const int ps_exit = ps.wait(30);
  INFO(chief.output() << other.output() << ps.output());
  CHECK(other_exit == 2);
  CHECK_THAT(other.output(),
             Catch::Contains("ps 0 at 127.0.0.1:") &&
                 Catch::Contains("serves a job that ends at global step 1000000 (its chief's "
                                 "training.max_steps, training.epochs or --max-steps); this "
                                 "worker's ends at 900: every worker must train to the same step"));
  CHECK(chief_exit == 0);
  CHECK(ps_exit == 0);
}

TEST_CASE("a worker waiting for the chief waits on when its ps restarts before the chief came") {
  const auto dir = freshTempDir("ps-restarted-early");
  const auto cluster = writeCluster(dir, 1, 2, "  mode: async\n");
  const std::string node = "--cluster " + cluster.string() + " --model " +
                           modelPath("fashion_mlp.yaml") + " --threads 1 --eval-every 0 ";
  auto ps = std::make_unique<BackgroundTraind>(node + "--job ps --task 0", dir / "ps.log");
  BackgroundTraind other(node + "--job worker --task 1 --max-steps 3000", dir / "worker.log");
  REQUIRE(other.waitForOutput("waiting for the chief (worker 0) to initialise ps 0", 60));
  ps->signal(SIGKILL);  // it held nothing of the job yet
  REQUIRE(ps->wait(30) == 128 + SIGKILL);
  ps = std::make_unique<BackgroundTraind>(node + "--job ps --task 0", dir / "ps2.log");
  // Long enough for the other worker to see the shard ready (it asks every
  // 200 ms) and train: a quiet machine ran 100 steps in 0.14 s.
  BackgroundTraind chief(
      node + "--job worker --task 0 --max-steps 3000 --checkpoint-dir " + (dir / "ckpt").string(),
      dir / "chief.log");
  const int chief_exit = chief.wait(kTimeout), other_exit = other.wait(kTimeout);
  const int ps_exit = ps->wait(60);
  INFO(other.output() << chief.output() << ps->output());
  CHECK(other_exit == 0);
  CHECK_THAT(other.output(), Catch::Contains("went away before the chief initialised it") &&
                                 Catch::Contains("training fashion_mlp") &&
                                 Catch::Contains("done: global step "));
  CHECK(chief_exit == 0);
  CHECK(ps_exit == 0);
}

TEST_CASE("async: the others finish when a worker is killed") {
  const auto dir = freshTempDir("async-kill");
  const std::unique_ptr<Cluster> job = mlpJob(dir, "async", 3, 4000);
  Cluster& c = *job;
  // Mid-run: after its first line of step figures (it starts with the range
  // of global steps, which says "step" too).
  REQUIRE(c.workers[1]->waitForOutput(", loss = ", 60));
  c.workers[1]->signal(SIGKILL);
  CHECK(c.workers[0]->wait(kTimeout) == 0);
  CHECK(c.workers[2]->wait(kTimeout) == 0);
  CHECK(c.ps[0]->wait(30) == 0);
  INFO(c.logs());
  // gradient_push: auto, async, CPU.
  CHECK_THAT(c.workers[2]->output(), Catch::Contains("gradients sent after each step"));
}

TEST_CASE("a chief whose training file is cut short under it saves the shards, then exits 2") {
  // Each worker reads its own copy of one training set, left in its file:
  // the chief's is cut short mid-run.
  const auto dir = freshTempDir("chief-input");
  const std::string records = fashionMnistRecords("train", 2000);
  const std::string mlp = readFile(modelPath("fashion_mlp.yaml"));
  const size_t data_at = mlp.find("  train:\n");
  const std::string train = mlp.substr(data_at, mlp.find("  test:\n") - data_at);
  for (const std::string name : {"chief", "other"}) {
    writeFile(dir / (name + ".tfrecords"), records);
    writeFile(dir / (name + ".yaml"),
              replaceAll(mlp, train,
                         "  train: {tfrecords: " + (dir / (name + ".tfrecords")).string() +
                             ", in_memory: false}\n"));
  }
  const auto cluster = writeCluster(dir, 1, 2, "  mode: async\n");
  const std::string run =
      " --max-steps 1000000 --threads 1 --eval-every 0 --log-every 10 --cluster " +
      cluster.string();
  BackgroundTraind ps("--model " + (dir / "chief.yaml").string() + run + " --job ps --task 0",
                      dir / "ps.log");
  BackgroundTraind chief("--model " + (dir / "chief.yaml").string() + run +
                             " --job worker --task 0 --checkpoint-dir " + (dir / "ckpt").string(),
                         dir / "chief.log");
  BackgroundTraind other(
      "--model " + (dir / "other.yaml").string() + run + " --job worker --task 1",
      dir / "other.log");
  // Two log lines, at global step 20 or past it: with two async workers
  // the chief's lines fall wherever the step crosses a tenth (11, 21, ...).
  REQUIRE(chief.waitForOutput(", loss = ", 60));
  REQUIRE(chief.waitForOutput(", loss = ", 60, chief.output().find(", loss = ") + 1));
  std::filesystem::resize_file(dir / "chief.tfrecords", 50000);
  const int chief_exit = chief.wait(60);
  other.signal(SIGTERM);
  const int other_exit = other.wait(60);
  ps.signal(SIGTERM);
  const int ps_exit = ps.wait(30);
  INFO(chief.output() << other.output() << ps.output());
  CHECK(chief_exit == 2);
  checkSavedBeforeInputFailure(chief.output(), dir / "chief.tfrecords", dir / "ckpt", 20);
  CHECK(other_exit == 0);
  CHECK(ps_exit == 0);
}

TEST_CASE("a step whose loss is not finite pushes nothing to the ps, async or sync") {
  // Ten hidden outputs of 1 (tanh of 3e38) times kernels of 3e38 sum past
  // float: the first step's loss is inf from finite parameters, and its
  // gradients would make them inf and NaN.
  std::string spec = readFile(modelPath("regression.yaml"));
  spec = replaceAll(spec, "activation: tanh}",
                    "activation: tanh, bias_initializer: {constant: 3e38}}");
  spec = replaceAll(spec, "{type: dense, name: output, units: 1}",
                    "{type: dense, name: output, units: 1, kernel_initializer: {constant: 3e38}}");
  // Async sends a step's gradients after it, sync as its backward pass goes.
  for (const std::string mode : {"async", "sync"}) {
    INFO(mode);
    const auto dir = freshTempDir("inf-loss-" + mode);
    const auto cluster = writeCluster(dir, 1, 1, "  mode: " + mode + "\n");
    writeFile(dir / "inf.yaml", spec);
    Cluster c(dir, cluster, "--model " + (dir / "inf.yaml").string() + " --max-steps 100", 1, 1);
    CHECK(c.workers[0]->wait(kTimeout) == 3);  // diverged: no restart helps
    // The chief stopped the job as diverged: the ps ends with it.
    CHECK(c.ps[0]->wait(30) == 3);
    INFO(c.logs());
    CHECK_THAT(c.workers[0]->output(), Catch::Contains("step 1: the loss is inf"));
    CHECK_THAT(c.ps[0]->output(), Catch::Contains("ps 0 done at global step 0"));
    CHECK_THAT(c.ps[0]->output(),
               Catch::Contains("stopped at global step 0: the chief's run diverged: step 1: the "
                               "loss is inf"));
  }
}

// A spec of regression.yaml's model on points where each worker reads its
// own share (shard_by_worker, in order): the chief's (the even ones) have
// targets of 3e38, whose gradient is past float (the output bias's sums 32
// terms of 2/32 x -3e38); the other worker's numbers are finite.
std::filesystem::path divergingChiefSpec(const std::filesystem::path& dir) {
  std::vector<std::pair<float, float>> points;
  for (int i = 0; i < 256; ++i) {
    const float x = float(i) / 128.0f - 1.0f;
    points.emplace_back(x, i % 2 == 0 ? 3e38f : x * x);
  }
  writeFile(dir / "points.tfrecords", regressionRecords(points));
  std::string spec = readFile(modelPath("regression.yaml"));
  const size_t synthetic = spec.find("  synthetic:");
  spec.replace(synthetic, spec.find('\n', synthetic) - synthetic,
               "  train: {tfrecords: " + (dir / "points.tfrecords").string() +
                   ", image_feature: x, label_feature: y}\n  shard_by_worker: true\n"
                   "  shuffle: false");
  writeFile(dir / "points.yaml", spec);
  return dir / "points.yaml";
}

TEST_CASE("a chief whose run diverged stops the job: the ps and the other workers exit 3") {
  // The other worker's step waits for the chief's gradient (sync, both
  // needed) until the chief stops the job.
  const auto dir = freshTempDir("chief-diverged");
  const auto spec = divergingChiefSpec(dir);
  const auto cluster = writeCluster(
      dir, 1, 2, "  mode: sync\n  replicas_to_aggregate: 2\n  total_num_replicas: 2\n");
  Cluster c(dir, cluster, "--model " + spec.string() + " --max-steps 100 --eval-every 0", 1, 2);
  CHECK(c.workers[0]->wait(kTimeout) == 3);
  CHECK(c.workers[1]->wait(30) == 3);
  CHECK(c.ps[0]->wait(30) == 3);
  INFO(c.logs());
  // The chief's words, which the others quote: its loss past float32's
  // range, or the ps's refusal of its gradient (sent during the backward
  // pass, sync) as not finite, whichever comes first.
  CHECK_THAT(c.workers[0]->output(), Catch::Contains("telling the ps tasks to stop the job"));
  const std::string words = "the chief's run diverged: ";
  CHECK_THAT(c.workers[1]->output(),
             Catch::Contains("ps 0 at ") && Catch::Contains(" stopped the job: " + words));
  CHECK_THAT(c.workers[1]->output(),
             Catch::Contains(words + "step 1: the loss is 9e+76, past float32's range") ||
                 Catch::Contains("worker 0 pushed a gradient of step 0 that is not finite"));
  CHECK_THAT(c.ps[0]->output(), Catch::Contains("stopping at global step 0: " + words));
}

TEST_CASE("a worker paused while the chief's run diverged hears it as the ps tasks end its calls") {
  // Async, two ps tasks: the other worker, connected and waiting for the
  // chief to initialise the shards, is paused before the chief starts; the
  // ps tasks wait 5 s for it, then end its connection with the chief's
  // words, which it reads once it goes on.
  const auto dir = freshTempDir("paused-chief-diverged");
  const auto spec = divergingChiefSpec(dir);
  const auto cluster = writeCluster(dir, 2, 2, "  mode: async\n");
  const std::string run = "--model " + spec.string() + " --cluster " + cluster.string() +
                          " --max-steps 100 --eval-every 0 --threads 1";
  BackgroundTraind ps0(run + " --job ps --task 0", dir / "ps0.log");
  BackgroundTraind ps1(run + " --job ps --task 1", dir / "ps1.log");
  BackgroundTraind other(run + " --job worker --task 1", dir / "worker1.log");
  REQUIRE(other.waitForOutput("waiting for the chief", 60));
  other.signal(SIGSTOP);
  BackgroundTraind chief(run + " --job worker --task 0 --checkpoint-dir " + (dir / "ckpt").string(),
                         dir / "chief.log");
  CHECK(chief.wait(kTimeout) == 3);
  CHECK(ps0.wait(30) == 3);
  CHECK(ps1.wait(30) == 3);
  other.signal(SIGCONT);
  CHECK(other.wait(30) == 3);
  INFO(chief.output() << other.output() << ps0.output() << ps1.output());
  CHECK_THAT(other.output(), Catch::Contains("closed the connection: the job is over: ps ") &&
                                 Catch::Contains(" the chief's run diverged: "));
  // Diverged before any checkpoint of its own: none is written.
  CHECK_FALSE(findLatestCheckpoint(dir / "ckpt").has_value());
}

TEST_CASE("a worker started after its job ended, its ps tasks gone, says so and exits 0") {
  const auto dir = freshTempDir("worker-after-job");
  const auto cluster = writeCluster(dir, 1, 2, "  mode: async\n");
  const std::string common = " --model " + modelPath("fashion_mlp.yaml") +
                             " --threads 1 --eval-every 0 --checkpoint-dir " +
                             (dir / "ckpt").string();
  // The job's checkpoint at global step 20 (a standalone run's is the same model's).
  REQUIRE(runTraind(common + " --max-steps 20").exit_code == 0);
  const std::string worker = "--cluster " + cluster.string() + " --job worker --task 1" + common;
  SECTION("at its last step: done") {
    BackgroundTraind late(worker + " --max-steps 20", dir / "worker1.log");
    const int status = late.wait(60);
    INFO(late.output());
    CHECK(status == 0);
    CHECK_THAT(late.output(), Catch::Contains("ps 0 at 127.0.0.1:"));
    CHECK_THAT(late.output(), Catch::Contains("does not answer"));
    CHECK_THAT(late.output(), Catch::Contains("and the job's latest checkpoint, " +
                                              (dir / "ckpt" / "ckpt-0000000020").string() +
                                              ", is at global step 20, its last: the job is over"));
    CHECK_THAT(late.output(), Catch::Contains("done: the job ended before this worker started"));
  }
  SECTION("a peer_wait_seconds shorter than the 30 s before it asks: it asks as it gives up") {
    std::filesystem::create_directories(dir / "short");
    const auto short_wait =
        writeCluster(dir / "short", 1, 2, "  mode: async\n  peer_wait_seconds: 3\n");
    BackgroundTraind late(
        "--cluster " + short_wait.string() + " --job worker --task 1" + common + " --max-steps 20",
        dir / "worker1-short.log");
    const int status = late.wait(60);
    INFO(late.output());
    CHECK(status == 0);
    CHECK_THAT(late.output(), Catch::Contains("its last: the job is over"));
  }
  SECTION("before its last step: it waits for the ps") {
    BackgroundTraind waiting(worker + " --max-steps 30", dir / "worker1.log");
    REQUIRE(waiting.waitForOutput("waiting for ps 0", 60));
    // Past a worker's 30 s of no answer before it asks (daemon/worker_role.cc).
    std::this_thread::sleep_for(std::chrono::seconds(33));
    waiting.signal(SIGTERM);
    CHECK(waiting.wait(15) == 0);
    INFO(waiting.output());
    CHECK_THAT(waiting.output(), !Catch::Contains("the job is over"));
  }
}

TEST_CASE("a chief started alone after its job ended says so after 2 minutes and exits 0") {
  const auto dir = freshTempDir("chief-after-job");
  const auto cluster = writeCluster(dir, 1, 2, "  mode: async\n");
  const std::string common = " --model " + modelPath("fashion_mlp.yaml") +
                             " --threads 1 --eval-every 0 --checkpoint-dir " +
                             (dir / "ckpt").string() + " --max-steps 20";
  REQUIRE(runTraind(common).exit_code == 0);
  BackgroundTraind late("--cluster " + cluster.string() + " --job worker --task 0" + common,
                        dir / "chief.log");
  // Not at a worker's 30 s: ps tasks started again with the chief wait for it.
  REQUIRE(late.waitForOutput("waiting for ps 0", 60));
  std::this_thread::sleep_for(std::chrono::seconds(45));
  CHECK(late.wait(0) == -1);
  const int status = late.wait(120);
  INFO(late.output());
  CHECK(status == 0);
  CHECK_THAT(late.output(), Catch::Contains("is at global step 20, its last: the job is over"));
  CHECK_THAT(late.output(), Catch::Contains("done: the job ended before this worker started"));
}

TEST_CASE("a stopped cluster resumes from its checkpoint") {
  const auto dir = freshTempDir("resume");
  const auto cluster = writeCluster(dir, 2, 1, "  mode: sync\n");
  const std::string args = "--model " + modelPath("fashion_mlp.yaml") +
                           " --threads 1 --eval-every 0 --checkpoint-dir " +
                           (dir / "ckpt").string();
  {
    Cluster first(dir, cluster, args + " --max-steps 50", 2, 1);
    CHECK(first.workers[0]->wait(kTimeout) == 0);
    for (auto& p : first.ps) CHECK(p->wait(30) == 0);
  }
  const std::vector<float> saved = readCheckpointTensor(dir / "ckpt", "hidden1/kernel");
  // The second run trains 10 more steps at a learning rate too small to move
  // a float32 weight of this model, so its final checkpoint, read back from
  // the ps tasks, holds what they restored.
  std::string still = readFile(modelPath("fashion_mlp.yaml"));
  still = replaceAll(still, "learning_rate: 0.1", "learning_rate: 1.0e-30");
  REQUIRE(still.find("1.0e-30") != std::string::npos);
  writeFile(dir / "still.yaml", still);
  Cluster second(dir, cluster,
                 "--model " + (dir / "still.yaml").string() +
                     " --threads 1 --eval-every 0 --max-steps 60 --checkpoint-dir " +
                     (dir / "ckpt").string(),
                 2, 1);
  CHECK(second.workers[0]->wait(kTimeout) == 0);
  for (auto& p : second.ps) CHECK(p->wait(30) == 0);
  INFO(second.logs());
  CHECK_THAT(second.workers[0]->output(), Catch::Contains("at global step 50"));
  CHECK_THAT(second.workers[0]->output(), Catch::Contains("done: global step 60, 10 steps"));
  const auto latest = findLatestCheckpoint(dir / "ckpt");
  REQUIRE(latest.has_value());
  CHECK_THAT(latest->filename().string(), Catch::Contains("60"));
  CHECK(readCheckpointTensor(dir / "ckpt", "hidden1/kernel") == saved);
}

TEST_CASE(
    "sync: workers holding their shards resume where one run would be and train alike from their "
    "files") {
  // Each worker's batches follow the global step in its own order of its
  // share, so a job stopped at step 30 and resumed trains what one run of
  // 60 steps trains (SGD; two gradients add alike in either order).
  const auto dir = freshTempDir("shard-resume");
  const auto cluster = writeCluster(dir, 1, 2, "  mode: sync\n");
  std::string spec = readFile(modelPath("fashion_mlp.yaml"));
  spec = replaceAll(spec, "  batch_size: 100", "  batch_size: 100\n  shard_by_worker: true");
  REQUIRE(spec.find("shard_by_worker") != std::string::npos);
  writeFile(dir / "sharded.yaml", spec);
  const auto run = [&](const std::string& checkpoints, int64_t steps) {
    Cluster c(dir, cluster,
              "--model " + (dir / "sharded.yaml").string() + " --max-steps " +
                  std::to_string(steps) + " --threads 1 --eval-every 0 --checkpoint-dir " +
                  (dir / checkpoints).string(),
              1, 2);
    for (auto& w : c.workers) CHECK(w->wait(kTimeout) == 0);
    CHECK(c.ps[0]->wait(30) == 0);
    INFO(c.logs());
    CHECK_THAT(c.workers[1]->output(),
               Catch::Contains("worker 1 holds its share of the training set: 30000 of its "
                               "60000 examples"));
    return c.workers[0]->output();
  };
  run("whole", 60);
  run("stopped", 30);
  CHECK_THAT(run("stopped", 60), Catch::Contains("at global step 30"));
  CHECK(readCheckpointTensor(dir / "stopped", "hidden1/kernel") ==
        readCheckpointTensor(dir / "whole", "hidden1/kernel"));
  CHECK(readCheckpointTensor(dir / "stopped", "logits/bias") ==
        readCheckpointTensor(dir / "whole", "logits/bias"));

  // The same examples as TFRecords left in their file (in_memory: false):
  // each worker reads its share's records as its steps gather them, and
  // the job trains what the shares held in memory trained.
  writeFile(dir / "train.tfrecords", fashionMnistRecords("train", 60000));
  const std::string idx_train =
      spec.substr(spec.find("  train:\n"), spec.find("  test:") - spec.find("  train:\n"));
  writeFile(dir / "sharded.yaml",
            replaceAll(spec, idx_train,
                       "  train: {tfrecords: " + (dir / "train.tfrecords").string() +
                           ", in_memory: false}\n"));
  REQUIRE(readFile(dir / "sharded.yaml").find("in_memory: false") != std::string::npos);
  run("in_files", 60);
  CHECK(readCheckpointTensor(dir / "in_files", "hidden1/kernel") ==
        readCheckpointTensor(dir / "whole", "hidden1/kernel"));
}

TEST_CASE("a chief that finds one ps restarted empty restarts every shard from the checkpoint") {
  const auto dir = freshTempDir("ps-restarted");
  const auto cluster = writeCluster(dir, 2, 1, "  mode: sync\n");
  // Checkpoints only at the end of a run: the one at step 50 stays the latest.
  writeFile(dir / "mlp.yaml", replaceAll(readFile(modelPath("fashion_mlp.yaml")),
                                         "every_steps: 600", "every_steps: 0"));
  const std::string args =
      "--cluster " + cluster.string() + " --model " + (dir / "mlp.yaml").string() +
      " --threads 1 --eval-every 0 --log-every 20 --checkpoint-dir " + (dir / "ckpt").string();
  {
    Cluster first(dir, cluster, args.substr(args.find("--model")) + " --max-steps 50", 2, 1);
    REQUIRE(first.workers[0]->wait(kTimeout) == 0);
    for (auto& p : first.ps) CHECK(p->wait(30) == 0);
  }
  auto ps = [&](int task, const std::string& log) {
    return std::make_unique<BackgroundTraind>(args + " --job ps --task " + std::to_string(task),
                                              dir / log);
  };
  auto ps0 = ps(0, "ps0-again.log");
  auto ps1 = ps(1, "ps1-again.log");
  {
    BackgroundTraind chief(args + " --job worker --task 0 --max-steps 1000000",
                           dir / "chief-again.log");
    REQUIRE(chief.waitForOutput("step 100,", 60));
    // ps 1 dies and comes back empty; ps 0 holds the job's state past 100.
    ps1->signal(SIGKILL);
    ps1->wait(10);
    CHECK(chief.wait(60) == 1);  // lost its ps
  }
  ps1 = ps(1, "ps1-restarted.log");
  BackgroundTraind chief(args + " --job worker --task 0 --max-steps 70", dir / "chief-last.log");
  CHECK(chief.wait(kTimeout) == 0);
  CHECK(ps0->wait(30) == 0);
  CHECK(ps1->wait(30) == 0);
  INFO(chief.output());
  CHECK_THAT(
      chief.output(),
      Catch::Matches("(?:.|\\n)*some ps tasks hold no parameters \\(restarted\\?\\) while "
                     "others do \\(ps 0 at global step [0-9]{3,}\\): every shard starts again "
                     "from the latest checkpoint, and what was trained since is "
                     "lost(?:.|\\n)*"));
  CHECK_THAT(chief.output(), Catch::Contains("at global step 50"));
  CHECK_THAT(chief.output(), Catch::Contains("done: global step 70, 20 steps"));
}

TEST_CASE("garbage and an oversized message on a ps port do not stop the job") {
  const auto dir = freshTempDir("garbage");
  const int http = freePortRange(2);
  const auto cluster =
      writeCluster(dir, 1, 1,
                   "  mode: async\nhttp:\n  ps: [127.0.0.1:" + std::to_string(http) +
                       "]\n  worker: [127.0.0.1:" + std::to_string(http + 1) + "]\n");
  const int ps_port = loadClusterSpec(cluster.string()).ps[0].port;
  Cluster c(dir, cluster,
            "--model " + modelPath("fashion_mlp.yaml") +
                " --max-steps 3000 --threads 1 --eval-every 0 --log-every 20 --checkpoint-dir " +
                (dir / "ckpt").string(),
            1, 1);
  REQUIRE(c.workers[0]->waitForOutput("step 20,", 60));
  // Sends `bytes` and says whether the ps then closed the connection within
  // 10 s (it reads whatever the ps says before closing).
  auto psHangsUpAfter = [&](const std::string& bytes) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr = loopbackAddress(ps_port);
    REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    (void)!write(fd, bytes.data(), bytes.size());
    bool closed = false;
    pollfd readable{fd, POLLIN, 0};
    for (char reply[4096]; !closed && poll(&readable, 1, 10000) == 1;)
      closed = read(fd, reply, sizeof reply) <= 0;
    close(fd);
    return closed;
  };
  // A connection that says nothing is no worker: the ps counts its one.
  const int silent = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = loopbackAddress(ps_port);
  REQUIRE(connect(silent, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  const HostPort ps_ops{"127.0.0.1", uint16_t(http), {}};
  std::this_thread::sleep_for(5 * kShardPublishPeriod);  // published again since
  CHECK_THAT(requestOps(ps_ops, "GET", "/metrics", 5.0).body,
             Catch::Contains("traind_connected_workers{job=\"ps\",task=\"0\"} 1\n"));
  close(silent);
  std::string garbage(4096, '\0');
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = char((i * 7919 + 13) % 251);
  CHECK(psHangsUpAfter(garbage));
  // A Cap'n Proto frame header claiming one segment of 2^28 words (2 GiB):
  // dropped at the header, not waited for.
  CHECK(psHangsUpAfter(std::string("\x00\x00\x00\x00\x00\x00\x00\x10", 8) +
                       std::string(64, 'x')));
  CHECK(!c.workers[0]->waitForOutput("done: global step", 0));  // it was training meanwhile
  CHECK(c.workers[0]->wait(kTimeout) == 0);
  CHECK(c.ps[0]->wait(30) == 0);
  INFO(c.logs());
  CHECK_THAT(c.workers[0]->output(), Catch::Contains("done: global step 3000"));
  // The ps's log says why it dropped each (what it told the peer).
  CHECK_THAT(c.ps[0]->output(), Catch::Contains("disconnected: Message has too many segments."));
  CHECK_THAT(c.ps[0]->output(), Catch::Contains("disconnected: Message is too large."));
}

namespace {

// Worker 0's gradient of zeros for every chunk of `chunks`, computed at
// `step`: one async step.
void pushEveryChunk(kj::AsyncIoContext& io, wire::ParameterShard::Client& shard,
                    const std::vector<ShardChunk>& chunks, int64_t step) {
  for (const ShardChunk& chunk : chunks) {
    auto push = shard.pushAndPullRequest();
    push.setWorkerTask(0);
    push.setStep(step);
    push.setOffset(uint64_t(chunk.shard_offset));
    push.initData(size_t(chunk.size) * sizeof(float));
    push.send().wait(io.waitScope);
  }
}

}  // namespace

TEST_CASE("a ps that stops past the chief's last checkpoint says what no checkpoint holds") {
  MlpPsTask task(freshTempDir("past-checkpoint"), "async");
  {
    kj::AsyncIoContext io = kj::setupAsyncIo();
    kj::Own<kj::AsyncIoStream> stream = connectWithin10s(io, task.address);
    capnp::TwoPartyClient client(*stream);
    auto shard = client.bootstrap().castAs<wire::ParameterShard>();
    task.hello(shard, 0).send().wait(io.waitScope);
    auto ready = shard.markReadyRequest();
    ready.setGlobalStep(0);
    ready.send().wait(io.waitScope);
    auto saved = shard.savedRequest();
    saved.setGlobalStep(0);
    saved.setCheckpoint("/srv/ckpt/ckpt-0000000000");
    saved.send().wait(io.waitScope);
    // One async step after the save: every chunk pushed once.
    pushEveryChunk(io, shard, task.chunks, 0);
  }
  task.ps.signal(SIGTERM);
  CHECK(task.ps.wait(30) == 0);
  CHECK_THAT(task.ps.output(),
             Catch::Contains("the chief's last checkpoint /srv/ckpt/ckpt-0000000000 holds this "
                             "shard at global step 0: the step after it is in no checkpoint"));
}

TEST_CASE("a ps that stops before the chief's first checkpoint says its steps are in none") {
  MlpPsTask task(freshTempDir("before-checkpoint"), "async");
  {
    kj::AsyncIoContext io = kj::setupAsyncIo();
    PsPeer chief(io, task.address);
    auto hello = task.hello(chief.shard, 0);
    hello.setCheckpointDir("/srv/ckpt");
    hello.send().wait(io.waitScope);
    auto ready = chief.shard.markReadyRequest();
    ready.setGlobalStep(5);
    ready.send().wait(io.waitScope);
    // Two async steps, then the chief is gone without a checkpoint.
    pushEveryChunk(io, chief.shard, task.chunks, 5);
    pushEveryChunk(io, chief.shard, task.chunks, 6);
  }
  task.ps.signal(SIGTERM);
  CHECK(task.ps.wait(30) == 0);
  CHECK_THAT(task.ps.output(),
             Catch::Contains("the chief has reported no checkpoint of this shard since it started "
                             "it at global step 5: the 2 steps after it are in no checkpoint of "
                             "/srv/ckpt"));
}

TEST_CASE(
    "sync: a push is answered once its chunk is applied, whatever step the worker waits for") {
  // With backup workers one shard can run a step ahead of another, and a
  // worker's job-wide step (the lowest) is then behind this shard's: a
  // reply before the chunk was applied would make it push the step twice.
  MlpPsTask task(freshTempDir("sync-push-reply"), "sync");
  kj::AsyncIoContext io = kj::setupAsyncIo();
  struct Peer {
    kj::Own<kj::AsyncIoStream> stream;
    kj::Own<capnp::TwoPartyClient> client;
    wire::ParameterShard::Client shard;
  };
  auto connect = [&](uint32_t worker) {
    kj::Own<kj::AsyncIoStream> stream = connectWithin10s(io, task.address);
    auto client = kj::heap<capnp::TwoPartyClient>(*stream);
    auto shard = client->bootstrap().castAs<wire::ParameterShard>();
    task.hello(shard, worker).send().wait(io.waitScope);
    return Peer{kj::mv(stream), kj::mv(client), kj::mv(shard)};
  };
  Peer chief = connect(0), other = connect(1);
  auto ready = chief.shard.markReadyRequest();
  ready.setGlobalStep(0);
  ready.send().wait(io.waitScope);
  const ShardChunk& chunk = task.chunks[0];
  auto push = [&](Peer& peer, uint32_t worker) {
    auto request = peer.shard.pushAndPullRequest();
    request.setWorkerTask(worker);
    request.setStep(0);
    request.setMinStep(0);  // met already: the worker's step is behind
    request.setOffset(uint64_t(chunk.shard_offset));
    request.initData(size_t(chunk.size) * sizeof(float));
    return request.send();
  };
  bool answered = false;
  auto first = push(chief, 0).then([&](auto reply) {
    answered = true;
    return reply.getGlobalStep();
  });
  io.provider->getTimer().afterDelay(300 * kj::MILLISECONDS).wait(io.waitScope);
  CHECK_FALSE(answered);  // the chunk waits for worker 1's gradient of step 0
  CHECK(push(other, 1).wait(io.waitScope).getGlobalStep() == 1);
  CHECK(first.wait(io.waitScope) == 1);
}

TEST_CASE("a peer that lies about steps cannot make the ps hold calls without bound") {
  MlpPsTask task(freshTempDir("liar"), "sync");
  auto& [cluster, address, ps, spec, graph, plan, chunks] = task;
  const ShardChunk chunk = chunks[0];

  // The liar speaks the protocol: it says hello as worker 0 and marks the
  // shard ready, as a chief would.
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::Own<kj::AsyncIoStream> stream = connectWithin10s(io, address);
  capnp::TwoPartyClient client(*stream);
  auto shard = client.bootstrap().castAs<wire::ParameterShard>();
  auto hello = [&](uint32_t wire_version) {
    auto request = task.hello(shard, 0);
    request.setWireVersion(wire_version);
    request.send().wait(io.waitScope);
  };
  // A peer that cuts chunks another way (an older traind) is refused at hello.
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] { hello(0); }))
    CHECK_THAT(e->getDescription().cStr(),
               Catch::Contains("speaks wire version " + std::to_string(kWireVersion) +
                               ", the peer 0"));
  else
    FAIL("a hello without the wire version was accepted");
  // One that cuts them another way under the same version, as well.
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] {
                 auto request = task.hello(shard, 0);
                 request.setChunks(request.getChunks() + 1);
                 request.send().wait(io.waitScope);
               }))
    CHECK_THAT(e->getDescription().cStr(),
               Catch::Contains("ps 0 cuts its shard into other chunks than the peer does"));
  else
    FAIL("a hello with another chunks fingerprint was accepted");
  hello(kWireVersion);
  auto ready = shard.markReadyRequest();
  ready.setGlobalStep(0);
  ready.send().wait(io.waitScope);

  // Shared memory: an offer the ps cannot trust is refused with the reason
  // (the pair goes on over TCP), and calls through a region the connection
  // does not have fail.
  auto offering = [&](const SharedRegion::Offer& offer) {
    auto request = task.hello(shard, 0);
    writeOffer(offer, request.initSharedRegion());
    auto reply = request.send().wait(io.waitScope);
    return reply.getSharedRegionMapped() ? std::string()
                                         : std::string(reply.getSharedRefusal().cStr());
  };
  const SharedRegion region = SharedRegion::create(VariableLayout(graph.variables).totalSize());
  SharedRegion::Offer lie = region.offer();
  lie.fd = uint32_t(STDERR_FILENO);
  CHECK_THAT(offering(lie), Catch::Contains("is not a memfd"));
  lie = region.offer();
  lie.bytes *= 1000;
  CHECK_THAT(offering(lie), Catch::Contains("this model needs"));
  // Calls through the region: answered without data (the parameters are in
  // the region), or failed.
  auto sharedPush = [&](uint64_t floats, uint32_t chunk_count = 1,
                        int64_t offset = -1) {
    auto request = shard.pushAndPullRequest();
    request.setWorkerTask(0);
    request.setOffset(uint64_t(offset < 0 ? chunk.shard_offset : offset));
    request.setSharedFloats(floats);
    request.setSharedChunks(chunk_count);
    return kj::runCatchingExceptions([&] {
      auto reply = request.send().wait(io.waitScope);
      CHECK(reply.getData().size() == 0);
    });
  };
  auto sharedPull = [&] {
    auto request = shard.pullRequest();
    request.setOffset(uint64_t(chunk.shard_offset));
    request.setLength(uint64_t(chunk.size));
    request.setIntoSharedRegion(true);
    return kj::runCatchingExceptions([&] {
      auto reply = request.send().wait(io.waitScope);
      CHECK(reply.getData().size() == 0);
    });
  };
  KJ_IF_MAYBE(e, sharedPush(uint64_t(chunk.size)))
    CHECK_THAT(e->getDescription().cStr(), Catch::Contains("without a shared region"));
  else
    FAIL("a push through a shared region the ps did not map was accepted");
  KJ_IF_MAYBE(e, sharedPull())
    CHECK_THAT(e->getDescription().cStr(), Catch::Contains("without a shared region"));
  else
    FAIL("a pull into a shared region the ps did not map was accepted");
  CHECK(offering(region.offer()).empty());
  // A connection keeps the region it mapped.
  const SharedRegion another = SharedRegion::create(VariableLayout(graph.variables).totalSize());
  CHECK_THAT(offering(another.offer()), Catch::Contains("mapped a shared region already"));
  // Mapped now: a chunk of the wrong length is still refused before the ps
  // reads the region.
  KJ_IF_MAYBE(e, sharedPush(uint64_t(chunk.size) + 1))
    CHECK_THAT(e->getDescription().cStr(),
               Catch::Contains("holds " + std::to_string(chunk.size) + " floats, got " +
                               std::to_string(chunk.size + 1)));
  else
    FAIL("a shared push of the wrong length was accepted");
  // A call through the region may cover several chunks, but only chunks the
  // shard has, holding the floats it says; over TCP one chunk per call.
  KJ_IF_MAYBE(e, sharedPush(uint64_t(chunk.size), uint32_t(chunks.size() + 1)))
    CHECK_THAT(e->getDescription().cStr(), Catch::Contains("the shard has"));
  else
    FAIL("a shared push of more chunks than the shard has was accepted");
  REQUIRE(chunks.size() > 1);  // fashion_mlp: hidden1, then hidden2 and logits
  KJ_IF_MAYBE(e, sharedPush(uint64_t(chunk.size), 2))
    CHECK_THAT(e->getDescription().cStr(), Catch::Contains("the 2 chunks from offset"));
  else
    FAIL("a shared push of two chunks with one chunk's floats was accepted");
  {
    auto request = shard.pushAndPullRequest();
    request.setWorkerTask(0);
    request.setOffset(uint64_t(chunk.shard_offset));
    request.initData(size_t(chunk.size) * sizeof(float));
    request.setSharedChunks(2);
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] { request.send().wait(io.waitScope); }))
      CHECK_THAT(e->getDescription().cStr(), Catch::Contains("one chunk per call"));
    else
      FAIL("a push of several chunks over TCP was accepted");
  }
  // A pull and a push through the region answer with no data and leave the
  // chunk's parameters in its parameter buffer, as a pull over TCP sends them.
  float* in_region = region.parameters() + chunk.layout_offset;
  std::fill(in_region, in_region + chunk.size, std::nanf(""));
  auto tcp_pull = shard.pullRequest();
  tcp_pull.setOffset(uint64_t(chunk.shard_offset));
  tcp_pull.setLength(uint64_t(chunk.size));
  auto over_tcp = tcp_pull.send().wait(io.waitScope);
  REQUIRE(over_tcp.getData().size() == size_t(chunk.size) * sizeof(float));
  auto sameAsTcp = [&] {
    return std::memcmp(in_region, over_tcp.getData().begin(), over_tcp.getData().size()) == 0;
  };
  CHECK(sharedPull() == nullptr);
  CHECK(sameAsTcp());
  // A run of chunks is checked whole before any is applied: with the second
  // chunk's gradient of step 0 in, a run of both is refused, and the first
  // chunk still takes its gradient afterwards (it was not applied).
  // A sync push is answered once its chunk has been applied for the step,
  // which needs worker 1's gradient too: these wait, unanswered, and are
  // given up before the flood below.
  float* gradient = region.gradients() + chunk.layout_offset;
  bool answered = false;
  auto pendingPush = [&](uint64_t floats, int64_t offset) {
    auto request = shard.pushAndPullRequest();
    request.setWorkerTask(0);
    request.setOffset(uint64_t(offset));
    request.setSharedFloats(floats);
    request.setSharedChunks(1);
    return request.send().then([&answered](auto) { answered = true; }).eagerlyEvaluate(nullptr);
  };
  std::vector<kj::Promise<void>> pending;
  pending.push_back(pendingPush(uint64_t(chunks[1].size), chunks[1].shard_offset));
  KJ_IF_MAYBE(e, sharedPush(uint64_t(chunk.size + chunks[1].size), 2))
    CHECK_THAT(e->getDescription().cStr(), Catch::Contains("twice"));
  else
    FAIL("a run with a chunk pushed twice was accepted");
  // Step 0's gradient from worker 0: one of the two the sync step needs, so
  // the chunk is not applied and its parameters stay as they were.
  std::fill(gradient, gradient + chunk.size, 1.0f);
  pending.push_back(pendingPush(uint64_t(chunk.size), chunk.shard_offset));
  io.provider->getTimer().afterDelay(300 * kj::MILLISECONDS).wait(io.waitScope);
  CHECK_FALSE(answered);
  auto again = shard.pullRequest();
  again.setOffset(uint64_t(chunk.shard_offset));
  again.setLength(uint64_t(chunk.size));
  CHECK(again.send().wait(io.waitScope).getData() == over_tcp.getData());
  pending.clear();

  auto pull = [&](int64_t min_step) {
    auto request = shard.pullRequest();
    request.setMinStep(min_step);
    request.setOffset(uint64_t(chunk.shard_offset));
    request.setLength(uint64_t(chunk.size));
    return request.send();
  };

  // A step far in the future is refused at once (not left to wait).
  kj::Maybe<kj::Exception> future = kj::runCatchingExceptions([&] {
    io.provider->getTimer()
        .timeoutAfter(10 * kj::SECONDS, pull(int64_t(1) << 40))
        .wait(io.waitScope);
  });
  KJ_IF_MAYBE(e, future) {
    CHECK_THAT(e->getDescription().cStr(), Catch::Contains("waits for the next step at most"));
  } else {
    FAIL("a pull for step 2^40 was answered");
  }
  // The next step is a fair wait, but no worker pushes it: the ps holds a
  // bounded number of such calls from one connection and refuses the rest.
  int refused = 0;
  std::vector<kj::Promise<void>> waits;
  auto flood = [&](const std::function<kj::Promise<void>()>& call) {
    refused = 0;
    for (int i = 0; i < 300; ++i)
      waits.push_back(call()
                          .then([] {},
                                [&refused](kj::Exception&& e) {
                                  if (std::string(e.getDescription().cStr()).find("wait already") !=
                                      std::string::npos)
                                    ++refused;
                                })
                          .eagerlyEvaluate(nullptr));
    // Calls on one connection are answered in order: status comes after all.
    auto status = shard.statusRequest().send().wait(io.waitScope);
    CHECK(status.getStatus().getGlobalStep() == 0);  // still serving
  };
  auto pullNext = [&] { return pull(1).ignoreResult(); };
  flood(pullNext);
  CHECK(refused == 300 - 256);
  // Calls the peer gives up (cancels) no longer count.
  waits.clear();
  flood(pullNext);
  CHECK(refused == 300 - 256);
  // The chief's hold at the next step waits as such a pull does, counted alike.
  waits.clear();
  flood([&] {
    auto request = shard.holdAtRequest();
    request.setGlobalStep(1);
    return request.send().ignoreResult();
  });
  CHECK(refused == 300 - 256);

  ps.signal(SIGTERM);
  INFO(ps.output());
  CHECK(ps.wait(30) == 0);
}

TEST_CASE("the ps takes a call only from the worker that said hello on its connection") {
  MlpPsTask task(freshTempDir("identity"), "sync");
  BackgroundTraind& ps = task.ps;
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::Own<kj::AsyncIoStream> stream = connectWithin10s(io, task.address);
  capnp::TwoPartyClient client(*stream);
  auto shard = client.bootstrap().castAs<wire::ParameterShard>();
  auto refusal = [&](auto request) {
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] { request.send().wait(io.waitScope); }))
      return std::string(e->getDescription().cStr());
    return std::string("answered");
  };
  auto push = [&](uint32_t worker) {
    auto request = shard.pushAndPullRequest();
    request.setWorkerTask(worker);
    return request;
  };
  auto hello = [&](uint32_t worker) { return task.hello(shard, worker); };
  CHECK_THAT(refusal(push(1)), Catch::Contains("pushAndPull before hello"));
  CHECK_THAT(refusal(shard.pullRequest()), Catch::Contains("pull before hello"));
  CHECK_THAT(refusal(shard.stopRequest()), Catch::Contains("stop before hello"));
  CHECK(refusal(hello(1)) == "answered");
  CHECK_THAT(refusal(push(0)), Catch::Contains("a push as worker 0 on the connection of worker 1"));
  CHECK_THAT(refusal(hello(0)), Catch::Contains("a hello as worker 0 on the connection of worker 1"));
  for (auto [call, refused] :
       {std::pair{std::string("markReady"), refusal(shard.markReadyRequest())},
        {"initialize", refusal(shard.initializeRequest())},
        {"readState", refusal(shard.readStateRequest())},
        {"saved", refusal(shard.savedRequest())},
        {"stop", refusal(shard.stopRequest())},
        {"holdAt", refusal(shard.holdAtRequest())},
        {"releaseHold", refusal(shard.releaseHoldRequest())}}) {
    INFO(call);
    CHECK_THAT(refused, Catch::Contains(call + " from worker 1: only the chief (worker 0)"));
  }
  const auto reply = shard.statusRequest().send().wait(io.waitScope);
  const auto status = reply.getStatus();
  CHECK(!status.getReady());
  CHECK(!status.getStopping());
  ps.signal(SIGTERM);
  INFO(ps.output());
  CHECK(ps.wait(30) == 0);
}

namespace {

// A sync ps of fashion_mlp where one gradient makes a step
// (replicas_to_aggregate 1), its chief a connection of the test's own that
// has initialised the shard and holds it at step 0, and worker 1, connected
// and with the step's parameters pulled, whose push completes the step:
// the hold keeps its sum.
struct HeldShard {
  std::filesystem::path dir = freshTempDir("held");
  std::filesystem::path cluster =
      writeCluster(dir, 1, 2, "  mode: sync\n  replicas_to_aggregate: 1\n");
  BackgroundTraind ps{"--cluster " + cluster.string() + " --model " +
                          modelPath("fashion_mlp.yaml") + " --job ps --task 0",
                      dir / "ps.log"};
  ModelSpec spec = loadModelSpec(modelPath("fashion_mlp.yaml"));
  LayerGraph graph = buildLayerGraph(spec);
  ClusterSpec cluster_spec = loadClusterSpec(cluster.string());
  ModelState state{spec, graph};
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::Own<kj::AsyncIoStream> stream = connectWithin10s(io, cluster_spec.ps[0].toString());
  kj::Own<capnp::TwoPartyClient> chief = kj::heap<capnp::TwoPartyClient>(*stream);
  wire::ParameterShard::Client shard = chief->bootstrap().castAs<wire::ParameterShard>();
  std::optional<ShardedClient> worker;
  FlatBuffer parameters{state.layout().totalSize()}, gradients{state.layout().totalSize()};
  // The chief asks the shard for its status each second, as a chief's waits
  // do while it holds the shards: silent, it would lose the hold after
  // ServedShard::kHoldSilenceSeconds. Set to nullptr, the chief is stopped.
  kj::Promise<void> heartbeat = nullptr;

  kj::Promise<void> beat() {
    return io.provider->getTimer()
        .afterDelay(1 * kj::SECONDS)
        .then([this] { return shard.statusRequest().send().ignoreResult(); })
        .then([this] { return beat(); });
  }

  HeldShard() {
    state.initialize();
    helloAs(shard, spec, cluster_spec, 0).send().wait(io.waitScope);
    const ShardPlan plan = placeVariables(state.layout(), 1).shards[0];
    for (const ShardChunk& c : transferChunks(graph, plan, ParameterShard::kChunkFloats)) {
      auto request = shard.initializeRequest();
      request.setOffset(uint64_t(c.shard_offset));
      request.setData(capnp::Data::Reader(
          reinterpret_cast<const kj::byte*>(state.parameters().data() + c.layout_offset),
          size_t(c.size) * sizeof(float)));
      request.send().wait(io.waitScope);
    }
    shard.markReadyRequest().send().wait(io.waitScope);
    auto hold = shard.holdAtRequest();
    hold.setGlobalStep(-1);
    CHECK(hold.send().wait(io.waitScope).getGlobalStep() == 0);
    heartbeat = beat().eagerlyEvaluate([](kj::Exception&&) {});
    worker.emplace(io, cluster_spec, graph, state.layout(), specIdentity(spec), 1);
    REQUIRE(worker->connect(60) == ShardedClient::Outcome::Connected);
    std::fill(gradients.data(), gradients.data() + gradients.size(), 1.0f);
    REQUIRE(worker->pull(0, parameters) == 0);
  }

  // Worker 1's push+pull of step 0, given up after 20 s; its step and seconds.
  std::pair<int64_t, double> pushAndPull() {
    std::atomic<bool> give_up{false};
    worker->abandonWaitsOnStop(give_up);
    std::thread watchdog([&give_up] {
      for (int i = 0; i < 200 && !give_up; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      give_up = true;
    });
    const auto start = std::chrono::steady_clock::now();
    const int64_t step = worker->pushAndPull(gradients, 1, parameters);
    give_up = true;
    watchdog.join();
    return {step, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
  }

  int64_t globalStep() {
    return shard.statusRequest().send().wait(io.waitScope).getStatus().getGlobalStep();
  }
};

}  // namespace

TEST_CASE("sync: a chief gone while it holds the shard for a checkpoint read leaves it training") {
  HeldShard held;
  // The chief goes 1 s into worker 1's step, without lifting its hold.
  kj::Promise<void> chief_gone = held.io.provider->getTimer()
                                     .afterDelay(1 * kj::SECONDS)
                                     .then([&held] {
                                       held.heartbeat = nullptr;
                                       held.shard = nullptr;
                                       held.chief = nullptr;
                                       held.stream = nullptr;
                                     })
                                     .eagerlyEvaluate(nullptr);
  const auto [step, seconds] = held.pushAndPull();
  CHECK(step == 1);
  CHECK(seconds >= 0.9);  // held until the chief went
  CHECK(seconds < 10.0);
  CHECK(held.parameters.data()[0] != held.state.parameters().data()[0]);  // applied

  held.worker.reset();  // the ps need not wait for its step
  held.ps.signal(SIGTERM);
  INFO(held.ps.output());
  CHECK(held.ps.wait(30) == 0);
}

TEST_CASE(
    "sync: a chief silent while it holds the shard for a checkpoint read leaves it training") {
  HeldShard held;
  held.heartbeat = nullptr;  // stopped (SIGSTOP) since its hold: no call any more
  const auto [step, seconds] = held.pushAndPull();
  CHECK(step == 1);
  // ServedShard::kHoldSilenceSeconds after the hold, looked at each second.
  CHECK(seconds >= 3.5);
  CHECK(seconds < 10.0);
  CHECK(held.parameters.data()[0] != held.state.parameters().data()[0]);  // applied
  CHECK_THAT(held.ps.output(), Catch::Contains("lifted the chief's hold at global step 0: the "
                                               "chief has made no call, and no data moved on "
                                               "its connection, for"));

  held.worker.reset();
  held.ps.signal(SIGTERM);
  INFO(held.ps.output());
  CHECK(held.ps.wait(30) == 0);
}

TEST_CASE("sync: a ps stopped while the chief holds it applies nothing the hold kept") {
  HeldShard held;
  // Stopped, the ps waits for the step its worker computes, which the hold
  // keeps, and then stops at step 0: the worker hears that the job is over.
  held.ps.signal(SIGTERM);
  const auto [step, seconds] = held.pushAndPull();
  CHECK(step == -1);
  CHECK_THAT(held.ps.output(), Catch::Contains("stopping at global step 0"));
  // The chief lifts its hold: the stopped shard still applies nothing.
  held.shard.releaseHoldRequest().send().wait(held.io.waitScope);
  CHECK(held.globalStep() == 0);
  held.heartbeat = nullptr;
  held.shard = nullptr;
  held.chief = nullptr;
  held.stream = nullptr;
  held.worker.reset();
  INFO(held.ps.output());
  CHECK(held.ps.wait(30) == 0);
  CHECK_THAT(held.ps.output(), Catch::Contains("ps 0 done at global step 0"));
}

namespace {

// Pushes a gradient of 0.01s for `step` to every chunk of a shard, as
// `worker` on `shard`'s connection, and waits for the replies.
void pushStep(wire::ParameterShard::Client& shard, kj::WaitScope& scope,
              const std::vector<ShardChunk>& chunks, uint32_t worker, int64_t step) {
  kj::Vector<kj::Promise<void>> calls;
  for (const ShardChunk& c : chunks) {
    const std::vector<float> gradient(size_t(c.size), 0.01f);
    auto request = shard.pushAndPullRequest();
    request.setWorkerTask(worker);
    request.setStep(step);
    request.setOffset(uint64_t(c.shard_offset));
    request.setMinStep(step + 1);
    request.setData(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(gradient.data()),
                                        gradient.size() * sizeof(float)));
    calls.add(request.send().then([](auto reply) { CHECK(reply.getAccepted()); }));
  }
  kj::joinPromises(calls.releaseAsArray()).wait(scope);
}

// Two sync ps tasks of fashion_mlp where one gradient makes a step of the
// shard it goes to (replicas_to_aggregate 1), initialised at step 0 by a
// chief of the test's own, and worker 1's raw connections to them.
struct TwoSyncShards {
  std::filesystem::path dir = freshTempDir("two-shards");
  std::filesystem::path cluster =
      writeCluster(dir, 2, 2, "  mode: sync\n  replicas_to_aggregate: 1\n");
  std::string common =
      "--cluster " + cluster.string() + " --model " + modelPath("fashion_mlp.yaml") + " --job ps";
  BackgroundTraind ps0{common + " --task 0", dir / "ps0.log"};
  BackgroundTraind ps1{common + " --task 1", dir / "ps1.log"};
  ModelSpec spec = loadModelSpec(modelPath("fashion_mlp.yaml"));
  LayerGraph graph = buildLayerGraph(spec);
  ClusterSpec cluster_spec = loadClusterSpec(cluster.string());
  ModelState state{spec, graph};
  Placement placement = placeVariables(state.layout(), 2);
  kj::AsyncIoContext io = kj::setupAsyncIo();
  std::optional<ShardedClient> chief;

  TwoSyncShards() {
    state.initialize();
    chief.emplace(io, cluster_spec, graph, state.layout(), specIdentity(spec), 0);
    REQUIRE(chief->connect(60) == ShardedClient::Outcome::Connected);
    chief->initialize(state);
  }

  std::vector<ShardChunk> chunksOf(int shard) const {
    return transferChunks(graph, placement.shards[size_t(shard)], ParameterShard::kChunkFloats);
  }

  // Worker 1 pushes `steps` to ps `shard` alone.
  void pushAlone(int shard, std::initializer_list<int64_t> steps) {
    kj::Own<kj::AsyncIoStream> stream =
        connectWithin10s(io, cluster_spec.ps[size_t(shard)].toString());
    capnp::TwoPartyClient client(*stream);
    auto ps = client.bootstrap().castAs<wire::ParameterShard>();
    auto hello = helloAs(ps, spec, cluster_spec, 1, uint32_t(shard));
    hello.send().wait(io.waitScope);
    for (int64_t step : steps) pushStep(ps, io.waitScope, chunksOf(shard), 1, step);
  }

  void stop() {
    chief->stopAll();
    INFO(ps0.output() + ps1.output());
    CHECK(ps0.wait(30) == 0);
    CHECK(ps1.wait(30) == 0);
  }
};

}  // namespace

namespace {

// A step whose backward pass finishes every variable 300 ms into the
// push; `opened` runs then.
struct LateGate final : GradientGate {
  kj::Timer& timer;
  kj::TimePoint open_at = timer.now() + 300 * kj::MILLISECONDS;
  std::function<void()> opened;
  LateGate(kj::Timer& t, std::function<void()> f) : timer(t), opened(std::move(f)) {}
  kj::Promise<void> ready(size_t) override {
    return timer.atTime(open_at).then([this] {
      if (opened) std::exchange(opened, nullptr)();
    });
  }
};

}  // namespace

TEST_CASE("sync: a shard a pull found ahead of the others takes no gradient until they catch up") {
  TwoSyncShards job;
  job.pushAlone(0, {0});  // ps 0 at step 1, ps 1 at 0
  const size_t size = size_t(job.state.layout().totalSize());
  FlatBuffer parameters{int64_t(size)}, gradients{int64_t(size)};
  std::fill(gradients.data(), gradients.data() + size, 0.01f);
  REQUIRE(job.chief->pull(0, parameters) == 0);
  CHECK(job.chief->shardSteps() == std::vector<int64_t>{1, 0});
  // The chief's gradient goes to ps 1 alone; ps 0 waits at step 1. Its
  // parameters are pulled again, but only once the backward pass is done
  // with them (the gate): until then they keep what the step computes on.
  const std::vector<float> pulled(parameters.data(), parameters.data() + size);
  const ShardChunk first = job.chunksOf(0).front();
  const float* ps0_part = parameters.data() + first.layout_offset;
  std::fill_n(parameters.data() + first.layout_offset, first.size, -7.0f);
  bool kept_while_computing = false;
  LateGate gate(job.io.provider->getTimer(), [&] {
    kept_while_computing =
        std::all_of(ps0_part, ps0_part + first.size, [](float v) { return v == -7.0f; });
  });
  CHECK(job.chief->pushAndPull(gradients, 1, parameters, &gate) == 1);
  CHECK(kept_while_computing);
  CHECK(std::equal(ps0_part, ps0_part + first.size, pulled.data() + first.layout_offset));
  CHECK(job.chief->shardSteps() == std::vector<int64_t>{1, 1});
  CHECK(job.chief->pushAndPull(gradients, 2, parameters) == 2);
  CHECK(job.chief->shardSteps() == std::vector<int64_t>{2, 2});
  job.stop();
}

namespace {

// A sync ps, ready at global step 3, that lifts the chief's hold under its
// reads `lifts` times, as a ps does once a hold has stood kMaxHoldSeconds
// (the chief stopped): after the first reply of such a read round the other
// workers' next step is applied. It sends each chunk's values as floats of
// its step.
class LiftingShard final : public wire::ParameterShard::Server {
 public:
  explicit LiftingShard(int lifts) : lifts_(lifts) {}
  int holds() const { return holds_; }

 protected:
  kj::Promise<void> hello(HelloContext context) override {
    fillStatus(context.getResults().initStatus());
    return kj::READY_NOW;
  }
  kj::Promise<void> status(StatusContext context) override {
    fillStatus(context.getResults().initStatus());
    return kj::READY_NOW;
  }
  kj::Promise<void> holdAt(HoldAtContext context) override {
    ++holds_;
    reads_ = 0;
    context.getResults().setGlobalStep(step_);
    return kj::READY_NOW;
  }
  kj::Promise<void> readState(ReadStateContext context) override {
    if (reads_++ == 1 && lifts_ > 0) {  // the hold expired, a step was applied
      --lifts_;
      ++step_;
    }
    auto results = context.getResults();
    results.setGlobalStep(step_);
    const std::vector<float> values(context.getParams().getLength(), float(step_));
    results.setData(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(values.data()),
                                        values.size() * sizeof(float)));
    return kj::READY_NOW;
  }
  kj::Promise<void> releaseHold(ReleaseHoldContext) override { return kj::READY_NOW; }

 private:
  void fillStatus(wire::ShardStatus::Builder status) const {
    status.setReady(true);
    status.setGlobalStep(step_);
  }

  int lifts_;
  int64_t step_ = 3;
  int holds_ = 0;
  int reads_ = 0;  // in this hold
};

}  // namespace

TEST_CASE("sync: a checkpoint whose hold a ps lifted under the reads holds and reads again") {
  const int lifts = GENERATE(1, 2);
  INFO("lifted " << lifts << " times");
  const auto dir = freshTempDir("lifted-hold");
  ClusterSpec cluster = loadClusterSpec(
      writeCluster(dir, 1, 2, "  mode: sync\n  replicas_to_aggregate: 2\n").string());
  cluster.shared_memory = false;
  const ModelSpec spec = loadModelSpec(modelPath("fashion_mlp.yaml"));
  const LayerGraph graph = buildLayerGraph(spec);
  ModelState state(spec, graph);

  kj::AsyncIoContext io = kj::setupAsyncIo();
  auto shard = kj::heap<LiftingShard>(lifts);
  const LiftingShard& ps = *shard;
  capnp::TwoPartyServer server(kj::mv(shard));
  kj::Own<kj::ConnectionReceiver> listener =
      io.provider->getNetwork().parseAddress(cluster.ps[0].toString()).wait(io.waitScope)->listen();
  kj::Promise<void> serving = server.listen(*listener).eagerlyEvaluate(nullptr);
  ShardedClient chief(io, cluster, graph, state.layout(), specIdentity(spec), 0);
  REQUIRE(chief.connect(30) == ShardedClient::Outcome::Connected);

  CapturedLog log;
  chief.readState(state);
  CHECK_THAT(log.text(), Catch::Contains("a ps lifted the hold at global step 3 under the "
                                         "checkpoint's reads (a chunk read was at step 4)"));
  // Each read round holds twice (at -1, then at the step); a read is tried twice.
  CHECK(ps.holds() == 4);
  if (lifts == 1) {
    // The second read is whole at step 4.
    CHECK(state.globalStep() == 4);
    // Every variable's floats (the layout pads between them) at step 4.
    int64_t floats = 0;
    for (const ShardChunk& c : transferChunks(graph, placeVariables(state.layout(), 1).shards[0],
                                              ParameterShard::kChunkFloats))
      floats += c.size;
    const float* p = state.parameters().data();
    CHECK(std::count(p, p + state.parameters().size(), 4.0f) == floats);
    CHECK_THAT(log.text(), !Catch::Contains("not all at global step"));
  } else {
    CHECK_THAT(log.text(), Catch::Contains("not all at global step 4 (ps 0 at 4 to 5): "));
    CHECK_THAT(log.text(), Catch::Contains("the hold was lifted under the reads twice"));
  }
}

TEST_CASE("a push whose step fails ends with the step's error, and the ps serves on") {
  const auto dir = freshTempDir("failed-step");
  // The ps's spec turns shared memory off, this worker's does not: its
  // offer is refused, and it trains over TCP.
  const auto cluster =
      writeCluster(dir, 1, 1, "  mode: async\ntransport:\n  shared_memory: off\n");
  CnnPsBeside job(dir, cluster);
  auto& [ps, spec, graph, state, io] = job;
  ClusterSpec offering = loadClusterSpec(cluster.string());
  offering.shared_memory = true;
  ShardedClient client(io, offering, graph, state.layout(), specIdentity(spec), 0);
  REQUIRE(client.connect(60) == ShardedClient::Outcome::Connected);
  CHECK(client.shardsThroughSharedMemory() == 0);
  client.initialize(state);
  FlatBuffer parameters(state.layout().totalSize()), gradients(state.layout().totalSize());
  REQUIRE(client.pull(0, parameters) == 0);

  FailingCnnStep failing(io.provider->getTimer());
  CHECK_THROWS_WITH(client.pushAndPull(gradients, 0, parameters, &failing),
                    "the training step failed: out of memory");
  // A whole push: the ps took the half push and serves on.
  CHECK(client.pushAndPull(gradients, 0, parameters) >= 1);

  ps.signal(SIGTERM);
  INFO(ps.output());
  CHECK(ps.wait(30) == 0);
}

TEST_CASE("a long backward pass, its gradient sent as it goes, is no wait for the ps in the log") {
  const auto dir = freshTempDir("slow-backward");
  const auto cluster = writeCluster(dir, 1, 1, "  mode: async\n");
  CnnPsBeside job(dir, cluster);
  auto& [ps, spec, graph, state, io] = job;
  ShardedClient client(io, loadClusterSpec(cluster.string()), graph, state.layout(),
                       specIdentity(spec), 0);
  REQUIRE(client.connect(60) == ShardedClient::Outcome::Connected);
  client.initialize(state);
  FlatBuffer parameters(state.layout().totalSize()), gradients(state.layout().totalSize());
  REQUIRE(client.pull(0, parameters) == 0);
  // Past the first notice (30 s): the ps answered the dense layers' chunk
  // at once and the convolutions' once they were sent.
  SlowCnnStep slow(io.provider->getTimer(), 32);
  CapturedLog log;
  CHECK(client.pushAndPull(gradients, 0, parameters, &slow) >= 1);
  CHECK_THAT(log.text(), !Catch::Contains("to answer"));

  ps.signal(SIGTERM);
  INFO(ps.output());
  CHECK(ps.wait(30) == 0);
}

TEST_CASE("sync: a worker pushes no gradient to a shard at the job's last step, it pulls") {
  const auto dir = freshTempDir("last-step");
  const auto cluster = writeCluster(
      dir, 1, 3, "  mode: sync\n  replicas_to_aggregate: 2\n  total_num_replicas: 3\n");
  CnnPsBeside job(dir, cluster);
  auto& [ps, spec, graph, state, io] = job;
  ShardedClient client(io, loadClusterSpec(cluster.string()), graph, state.layout(),
                       specIdentity(spec), 0);
  REQUIRE(client.connect(60) == ShardedClient::Outcome::Connected);
  state.setGlobalStep(7);
  client.initialize(state);
  FlatBuffer parameters(state.layout().totalSize()), gradients(state.layout().totalSize());
  REQUIRE(client.pull(0, parameters) == 7);
  // A backup worker whose last pull saw this shard at the last step and
  // another a step behind (shards with backup workers may be): its gradient
  // would be held here for a step past the last, which another worker's
  // (from such a pull too) would complete.
  client.setLastStep(7);
  std::atomic<bool> give_up{false};
  client.abandonWaitsOnStop(give_up);
  std::thread watchdog([&give_up] {  // a push held at the ps would wait for good
    for (int i = 0; i < 100 && !give_up; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    give_up = true;
  });
  const int64_t step = client.pushAndPull(gradients, 7, parameters);
  give_up = true;
  watchdog.join();
  CHECK(step == 7);
  CHECK(client.lastTransfer().push_bytes == 0);
  CHECK(client.statuses().value().at(0).global_step == 7);

  ps.signal(SIGTERM);
  INFO(ps.output());
  CHECK(ps.wait(30) == 0);
  CHECK_THAT(ps.output(), Catch::Contains("(0 stale gradient chunks dropped"));
}

TEST_CASE("a worker stopped while its ps answered blames no ps when it goes on") {
  const auto dir = freshTempDir("worker-paused-in-call");
  const std::unique_ptr<Cluster> job = mlpJob(dir, "async", 1, 100000000);
  Cluster& c = *job;
  REQUIRE(c.workers[0]->waitForOutput(", loss = ", 60));
  // The worker waits in a call; the ps answers while the worker is stopped,
  // past the first long-wait notice (30 s).
  c.ps[0]->signal(SIGSTOP);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  c.workers[0]->signal(SIGSTOP);
  c.ps[0]->signal(SIGCONT);
  std::this_thread::sleep_for(std::chrono::seconds(33));
  c.workers[0]->signal(SIGCONT);
  REQUIRE(c.workers[0]->waitForOutput("step ", 10));
  std::this_thread::sleep_for(std::chrono::seconds(2));
  c.workers[0]->signal(SIGTERM);
  CHECK(c.workers[0]->wait(30) == 0);
  c.ps[0]->signal(SIGTERM);  // a chief's own stop leaves the ps serving
  CHECK(c.ps[0]->wait(30) == 0);
  INFO(c.logs());
  CHECK_THAT(c.workers[0]->output(), !Catch::Contains("to answer"));
}

TEST_CASE("a worker computing in its shared memory region makes no call into it after a failed "
          "one, other calls go over TCP") {
  const auto dir = freshTempDir("failed-shared-step");
  const auto cluster = writeCluster(dir, 1, 1, "  mode: async\n");
  CnnPsBeside job(dir, cluster);
  auto& [ps, spec, graph, state, io] = job;
  ShardedClient client(io, loadClusterSpec(cluster.string()), graph, state.layout(),
                       specIdentity(spec), 0);
  REQUIRE(client.connect(60) == ShardedClient::Outcome::Connected);
  REQUIRE(client.shardsThroughSharedMemory() == 1);
  client.initialize(state);
  // As traind's worker does: its step's buffers are the region's.
  const ShardedClient::SharedBuffers shared = client.sharedBuffers();
  REQUIRE(shared.gradients);
  const int64_t size = state.layout().totalSize();
  FlatBuffer gradients = FlatBuffer::over(shared.gradients, size);
  FlatBuffer parameters = FlatBuffer::over(shared.parameters, size);
  REQUIRE(client.pull(0, parameters) == 0);
  CHECK(std::memcmp(parameters.data(), state.parameters().data(), size_t(size) * sizeof(float)) ==
        0);
  CHECK(client.pushAndPull(gradients, 0, parameters) >= 1);

  FailingCnnStep failing(io.provider->getTimer());
  CHECK_THROWS_WITH(client.pushAndPull(gradients, 0, parameters, &failing),
                    "the training step failed: out of memory");
  // The ps may still write the given-up call's reply into the region.
  CHECK(client.shardsThroughSharedMemory() == 0);
  CHECK_THROWS_AS(client.pushAndPull(gradients, 0, parameters), std::logic_error);
  FlatBuffer own_gradients(size), own_parameters(size);
  CHECK(client.pushAndPull(own_gradients, 0, own_parameters) >= 1);

  ps.signal(SIGTERM);
  INFO(ps.output());
  CHECK(ps.wait(30) == 0);
}

TEST_CASE("async: a ps task that holds no variable does not end the job early") {
  // A linear model of 2 variables on 3 ps: ps 2 holds none and answers no push.
  const auto dir = freshTempDir("empty-shard");
  writeFile(dir / "linear.yaml",
            replaceAll(readFile(modelPath("regression.yaml")),
                       "  - {type: dense, name: hidden, units: 10, activation: tanh}\n", ""));
  const auto cluster = writeCluster(dir, 3, 1, "  mode: async\n");
  Cluster c(dir, cluster,
            "--model " + (dir / "linear.yaml").string() +
                " --max-steps 60 --threads 1 --eval-every 0 --checkpoint-dir " +
                (dir / "ckpt").string(),
            3, 1);
  CHECK(c.workers[0]->wait(kTimeout) == 0);
  for (auto& p : c.ps) CHECK(p->wait(30) == 0);
  INFO(c.logs());
  CHECK_THAT(c.ps[2]->output(), Catch::Contains("(2 parameters) is 0 floats"));
  CHECK_THAT(c.workers[0]->output(), Catch::Contains("done: global step 60, 60 steps"));
}

TEST_CASE("cluster spec mistakes exit 2 naming the problem") {
  const auto dir = freshTempDir("cluster-bad");
  const auto cluster = writeCluster(dir, 1, 2, "  mode: async\n");
  ProcessResult r = runTraind("--cluster " + cluster.string() + " --model " +
                              modelPath("fashion_mlp.yaml") + " --job worker --task 2");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("--task 2"));
  r = runTraind("--cluster " + cluster.string() + " --model " + modelPath("fashion_mlp.yaml"));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("--job"));

  // Each of 2 workers takes a batch of its own share: 1000 examples give
  // them at most 500 each. Said before the worker looks for its peers.
  const std::string regression =
      replaceAll(readFile(modelPath("regression.yaml")), "batch_size: 32", "batch_size: 600");
  writeFile(dir / "big_batch.yaml", regression);
  r = runTraind("--cluster " + cluster.string() + " --model " + (dir / "big_batch.yaml").string() +
                " --job worker --task 1");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("big_batch.yaml:15:") &&
                           Catch::Contains("data.batch_size: expected at most 500 (the training "
                                           "set's 1000 examples shared by 2 workers"));

  // A ps whose port is taken names the spec's line and the task's address.
  const HostPort ps = loadClusterSpec(cluster.string()).ps[0];
  const int taken = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = loopbackAddress(ps.port);
  REQUIRE(bind(taken, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(listen(taken, 1) == 0);
  r = runTraind("--cluster " + cluster.string() + " --model " + modelPath("fashion_mlp.yaml") +
                " --job ps --task 0");
  close(taken);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains(cluster.string() + ":2:8: ") &&
                           Catch::Contains("cluster.ps[0]: " + ps.toString() +
                                           ": cannot listen (is the port in use?)"));

  // Its own ops server on that port, written another way: said as such,
  // not as another process's port.
  const std::string wildcard = "0.0.0.0:" + std::to_string(ps.port);
  r = runTraind("--cluster " + cluster.string() + " --model " + modelPath("fashion_mlp.yaml") +
                " --job ps --task 0 --http " + wildcard);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output,
             Catch::Contains("--http: " + wildcard +
                             " is the port this node's ps listens on (cluster.ps[0]: " +
                             ps.toString() + "; 0.0.0.0 takes this port of every IPv4 address)"));
}

TEST_CASE("a worker whose ps address another program answers exits 2 naming the spec's line") {
  const auto dir = freshTempDir("foreign-ps");
  const auto cluster = writeCluster(dir, 1, 1, "  mode: async\n");
  const HostPort ps = loadClusterSpec(cluster.string()).ps[0];
  // An HTTP server on the ps's port: it answers every connection, then closes it.
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = loopbackAddress(ps.port);
  REQUIRE(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(listen(listener, 8) == 0);
  std::thread http([listener] {
    for (;;) {
      const int connection = accept(listener, nullptr, nullptr);
      if (connection < 0) return;  // the listener was shut down
      constexpr std::string_view kAnswer = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
      (void)!write(connection, kAnswer.data(), kAnswer.size());
      close(connection);
    }
  });
  BackgroundTraind worker("--cluster " + cluster.string() + " --model " +
                              modelPath("fashion_mlp.yaml") + " --job worker --task 0",
                          dir / "worker.log");
  const int code = worker.wait(60);
  shutdown(listener, SHUT_RDWR);
  http.join();
  close(listener);
  INFO(worker.output());
  CHECK(code == 2);
  CHECK_THAT(worker.output(),
             Catch::Contains(cluster.string() + ":2:8: cluster.ps[0]: " + ps.toString() +
                             " is not a traind ps: 3 answers in a row were not Cap'n Proto RPC "
                             "(Message has too many segments.)"));
}

TEST_CASE("async with max_staleness: a worker waits for a stalled one, then both finish") {
  const auto dir = freshTempDir("staleness");
  const auto cluster = writeCluster(dir, 1, 2, "  mode: async\n  max_staleness: 3\n");
  Cluster c(dir, cluster,
            "--model " + modelPath("fashion_mlp.yaml") +
                " --max-steps 1000 --threads 1 --eval-every 0 --log-every 10 --checkpoint-dir " +
                (dir / "ckpt").string(),
            1, 2);
  // Both are training (worker 1 may join late), then worker 1 stalls.
  c.workers[1]->waitForOutput(", loss = ");
  c.workers[1]->signal(SIGSTOP);
  auto lastStep = [&] {
    const std::string out = c.workers[0]->output();
    int64_t last = 0;
    const std::regex pattern("step ([0-9]+), loss");
    for (auto it = std::sregex_iterator(out.begin(), out.end(), pattern);
         it != std::sregex_iterator(); ++it)
      last = std::stoll((*it)[1]);
    return last;
  };
  usleep(1500000);
  const int64_t held_at = lastStep();
  usleep(1500000);
  CHECK(lastStep() == held_at);  // the chief is held within 3 pushes of worker 1
  CHECK(held_at < 1000);
  c.workers[1]->signal(SIGCONT);
  CHECK(c.workers[0]->wait(kTimeout) == 0);
  CHECK(c.workers[1]->wait(kTimeout) == 0);
  CHECK(c.ps[0]->wait(30) == 0);
  INFO(c.logs());
}
