// Integration tests of the standalone role: the real traind binary trains the
// example specs on a slice of Fashion-MNIST, resumes, fine-tunes and refuses
// bad input.
#include "daemon/standalone.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <regex>

#include "core/checkpoint.h"
#include "core/safetensors.h"
#include "test/input_failure_checks.h"
#include "test/traind_process.h"

using namespace traind;
using namespace traind::testing;

namespace {

// The text of configs/models/<file>, to change for a test.
std::string exampleSpec(const std::string& file) {
  return readFile(std::string(TRAIND_SOURCE_DIR) + "/configs/models/" + file);
}

// "step N, loss = X ..." lines, in order.
std::vector<std::string> lossLines(const std::string& output) {
  std::vector<std::string> lines;
  const std::regex pattern("step [0-9]+, loss = [0-9.]+");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), pattern);
       it != std::sregex_iterator(); ++it)
    lines.push_back(it->str());
  return lines;
}

// configs/models/fashion_mlp.yaml with the input `input` ("[24, 24, 1]")
// and data.augment `augment`.
std::string augmentedMlpSpec(const std::string& input, const std::string& augment) {
  std::string spec = exampleSpec("fashion_mlp.yaml");
  spec = replaceAll(spec, "input: [28, 28, 1]", "input: " + input);
  spec = replaceAll(spec, "  batch_size: 100", "  batch_size: 100\n  augment: " + augment);
  REQUIRE(spec.find("input: " + input) != std::string::npos);
  REQUIRE(spec.find("augment:") != std::string::npos);
  return spec;
}

// A spec of a dense model of 7 classes over test/data/tfrecord/jpeg.tfrecord's
// photographs of several sizes, for both sets, each with its `resize`,
// batches of 2 distorted by `augment`, two epochs.
std::string photoSpec(const std::string& train_resize, const std::string& test_resize,
                      const std::string& augment) {
  const std::string records = "{tfrecords: " + std::string(TRAIND_SOURCE_DIR) +
                              "/test/data/tfrecord/jpeg.tfrecord, image_feature: image/encoded, "
                              "label_feature: image/class/label, resize: ";
  return "input: [3, 3, 3]\n"
         "layers: [{type: flatten}, {type: dense, units: 7}]\n"
         "optimizer: {type: sgd, learning_rate: 0.1}\n"
         "data:\n"
         "  train: " +
         records + train_resize + "}\n  test: " + records + test_resize +
         "}\n"
         "  batch_size: 2\n"
         "  augment: " +
         augment + "\ntraining: {epochs: 2}\n";
}

// Unsets TRAIND_JOB and TRAIND_TASK as a test that set them ends (the
// traind processes it starts inherit its environment).
struct TaskVariablesUnsetAtEnd {
  ~TaskVariablesUnsetAtEnd() {
    unsetenv("TRAIND_JOB");
    unsetenv("TRAIND_TASK");
  }
};

}  // namespace

TEST_CASE("fashion_mlp learns on a slice") {
  const auto dir = freshTempDir("mlp");
  const ProcessResult r = runTraind("--model configs/models/fashion_mlp.yaml --max-steps 300 "
                                    "--threads 1 --log-every 100 --checkpoint-dir " + dir.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(lossLines(r.output).size() == 3);
  CHECK(summaryValue(r.output, "test accuracy") > 0.70);
  CHECK(findLatestCheckpoint(dir).has_value());
}

TEST_CASE("summary_every without a summary directory says it does nothing") {
  const ProcessResult r = runTraind(
      "--model configs/models/regression.yaml --max-steps 5 "
      "--summary-every 2 --checkpoint-dir ''");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("training.summary_every (or --summary-every) is set, but "
                                       "this run writes no TensorBoard summaries: give it a "
                                       "summary directory"));
}

TEST_CASE("a flag given twice takes its last value") {
  // scripts/demo.sh passes its defaults first and the user's flags after them.
  const ProcessResult r = runTraind(
      "--model configs/models/fashion_mlp.yaml --max-steps 1000 "
      "--log-every 1 --checkpoint-dir '' --max-steps 2");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(lossLines(r.output).size() == 2);
}

TEST_CASE("traind checks --devices as it reads its flags") {
  const ProcessResult r = runTraind(
      "--model configs/models/fashion_mlp.yaml --devices cpu:0,cpu:0 --max-steps 1 "
      "--checkpoint-dir ''");
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("--devices: device cpu:0 is listed twice"));
}

TEST_CASE("a task of a cluster without --cluster is refused, not trained alone") {
  const ProcessResult r = runTraind(
      "--model configs/models/fashion_mlp.yaml --job worker --task 1 --max-steps 1 "
      "--checkpoint-dir ''");
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("--job and --task (or TRAIND_JOB and TRAIND_TASK) name a "
                                       "task of a cluster: give --cluster c.yaml as well"));
}

TEST_CASE("a run with --standalone trains alone where the environment names a cluster task") {
  // docker compose exec worker0 traind --standalone ...: the container's
  // TRAIND_JOB and TRAIND_TASK say its cluster task, which no flag asked for.
  const TaskVariablesUnsetAtEnd unset;
  setenv("TRAIND_JOB", "worker", 1);
  setenv("TRAIND_TASK", "0", 1);
  const std::string run =
      "--model configs/models/regression.yaml --max-steps 2 --checkpoint-dir ''";
  ProcessResult r = runTraind(run + " --standalone");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("done: global step 2"));
  // Whatever they hold: they are not read.
  setenv("TRAIND_JOB", "bogus", 1);
  CHECK(runTraind(run + " --standalone").exit_code == 0);
  setenv("TRAIND_JOB", "worker", 1);
  // Without --standalone, or with --job typed, a task without its cluster.
  CHECK(runTraind(run).exit_code == 2);
  CHECK(runTraind(run + " --standalone --job worker").exit_code == 2);
}

TEST_CASE("a GPU this machine lacks: a run names the spec's line, check warns") {
  const auto dir = freshTempDir("no-such-gpu");
  const std::filesystem::path spec = dir / "gpu.yaml";
  writeFile(spec, replaceAll(exampleSpec("regression.yaml"), "  max_steps: 2000\n",
                             "  max_steps: 2000\n  devices: [cuda:1023]\n"));
  // No machine has GPU 1023: "no such GPU", "no usable CUDA GPU" or a build without CUDA.
  const ProcessResult run = runTraind("--model " + spec.string() + " --checkpoint-dir ''");
  INFO(run.output);
  CHECK(run.exit_code == 2);
  CHECK_THAT(run.output, Catch::Contains(spec.string() + ":18:12: training.devices: cuda:1023: "));
  const ProcessResult flag =
      runTraind("--model " + spec.string() + " --checkpoint-dir '' --devices cpu,cuda:1023");
  CHECK(flag.exit_code == 2);
  CHECK_THAT(flag.output, Catch::Contains("--devices: cuda:1023: "));
  // The machine that trains may be another than the one that checks.
  const ProcessResult check = runTraind("check --model " + spec.string());
  CHECK(check.exit_code == 0);
  CHECK_THAT(check.output,
             Catch::Contains("warning: a run on this machine would stop at once: " + spec.string() +
                             ":18:12: training.devices: cuda:1023: "));
}

TEST_CASE("a bad TRAIND_JOB or TRAIND_TASK is named as the variable, not the flag") {
  const std::string run =
      "--model configs/models/fashion_mlp.yaml --cluster configs/clusters/local_sync.yaml "
      "--max-steps 1 --checkpoint-dir ''";
  // The children inherit this process's environment.
  const TaskVariablesUnsetAtEnd unset;
  setenv("TRAIND_JOB", "chief", 1);
  setenv("TRAIND_TASK", "0", 1);
  ProcessResult r = runTraind(run);
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("TRAIND_JOB (for --job): expected ps or worker, got "
                                       "'chief'"));
  unsetenv("TRAIND_JOB");
  setenv("TRAIND_TASK", "abc", 1);
  r = runTraind(run + " --job ps");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("TRAIND_TASK (for --task): expected an integer"));
  // What a variable holds reaches no terminal raw: an escape sequence is quoted.
  setenv("TRAIND_TASK", "\x1b[2J0", 1);
  r = runTraind(run + " --job ps");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("got '\\x1b[2J0'"));
  CHECK(r.output.find('\x1b') == std::string::npos);
  // A flag on the command line is named as the flag, whatever the environment holds.
  r = runTraind(run + " --job ps --task=x");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("--task: expected an integer"));
  // A task the cluster lacks, and a leading zero read as decimal.
  setenv("TRAIND_TASK", "010", 1);
  r = runTraind(run + " --job worker");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("TRAIND_TASK (for --task) 10: the cluster has 2 worker "
                                       "tasks (0..1) in configs/clusters/local_sync.yaml"));
}

TEST_CASE("OMP_NUM_THREADS beyond what --threads takes is refused, not handed to OpenMP") {
  // The children inherit this process's environment: set for the runs, then as it was.
  const char* before = std::getenv("OMP_NUM_THREADS");
  struct Restore {
    std::optional<std::string> saved;
    ~Restore() {
      if (saved)
        setenv("OMP_NUM_THREADS", saved->c_str(), 1);
      else
        unsetenv("OMP_NUM_THREADS");
    }
  } restore{before ? std::optional<std::string>(before) : std::nullopt};
  setenv("OMP_NUM_THREADS", "100000", 1);
  const std::string run =
      "--model configs/models/regression.yaml --max-steps 1 --checkpoint-dir ''";
  const ProcessResult r = runTraind(run);
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("OMP_NUM_THREADS=100000: expected at most 1024 compute "
                                       "threads, as --threads takes"));
  CHECK(runTraind("check --model configs/models/regression.yaml").exit_code == 2);
  // --threads chooses; the variable is not read.
  CHECK(runTraind(run + " --threads 1").exit_code == 0);
}

TEST_CASE("a run whose log reader has gone trains on and checkpoints") {
  // `traind ... | head`: every log line after the first two goes to a
  // closed pipe (SIGPIPE would kill the run).
  const auto dir = freshTempDir("closed_log");
  const ProcessResult r = runTraind(
      "--model configs/models/regression.yaml --max-steps 200 "
      "--log-every 1 --checkpoint-dir " +
      dir.string() + " 2>&1 | head -n 2");
  INFO(r.output);
  const auto latest = findLatestCheckpoint(dir);
  REQUIRE(latest.has_value());
  CHECK(latest->filename() == "ckpt-0000000200");
}

TEST_CASE("an ops address in use names the flag that gave it") {
  const int port = freePortRange(1);
  const int taken = socket(AF_INET, SOCK_STREAM, 0);
  const sockaddr_in address = loopbackAddress(port);
  REQUIRE(bind(taken, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(listen(taken, 1) == 0);
  const ProcessResult r = runTraind(
      "--model configs/models/fashion_mlp.yaml --max-steps 1 "
      "--checkpoint-dir '' --http 127.0.0.1:" +
      std::to_string(port));
  close(taken);
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("--http: the ops server's address 127.0.0.1:" +
                                       std::to_string(port) + " cannot be bound"));
}

#ifdef TRAIND_HAVE_CUDA
TEST_CASE("TRAIND_CUDA_LIBRARY names the one place the CUDA back end is looked for") {
  // The child's environment is this process's: set for the run, then as it was.
  const char* before = std::getenv("TRAIND_CUDA_LIBRARY");
  const std::optional<std::string> saved =
      before ? std::optional<std::string>(before) : std::nullopt;
  setenv("TRAIND_CUDA_LIBRARY", "/nonexistent/libtraind_cuda.so", 1);
  const ProcessResult r = runTraind(
      "--model configs/models/fashion_mlp.yaml --devices cuda:0 --max-steps 1 --checkpoint-dir ''");
  if (saved)
    setenv("TRAIND_CUDA_LIBRARY", saved->c_str(), 1);
  else
    unsetenv("TRAIND_CUDA_LIBRARY");
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::EndsWith("cannot load the CUDA back end libtraind_cuda.so "
                                       "(/nonexistent/libtraind_cuda.so: no such file)\n"));
}

TEST_CASE("traind check says whether a GPU run keeps its model on the GPU") {
  // A machine without a GPU checks a GPU spec too (with a warning).
  auto check = [](const std::string& flags,
                  const std::string& model = "configs/models/fashion_mlp.yaml") {
    const ProcessResult r = runTraind("check --model " + model + " " + flags);
    INFO(r.output);
    CHECK(r.exit_code == 0);
    return r.output;
  };
  CHECK_THAT(check("--devices cuda:0"),
             Catch::Contains("on GPUs: a standalone run keeps the model and the optimizer's "
                             "slots there;"));
  CHECK_THAT(check("--devices cuda:0,cuda:0"), Catch::Contains("a standalone run keeps"));
  CHECK_THAT(check("--devices cuda:0,cuda:1"),
             Catch::Contains("on GPUs: towers on several GPUs (the resident trainer's NCCL "
                             "all-reduce has not run"));
  const auto dir = freshTempDir("check-gpu-path");
  writeFile(dir / "k2.yaml", replaceAll(exampleSpec("fashion_mlp.yaml"), "\ntraining:\n",
                                        "\ntraining:\n  concurrent_steps: 2\n"));
  CHECK_THAT(check("--devices cuda:0", (dir / "k2.yaml").string()),
             Catch::Contains("on GPUs: concurrent_steps > 1: each step's update runs on the host"));
  CHECK_THAT(check(""), !Catch::Contains("on GPUs"));
}
#endif

TEST_CASE("a storm of SIGTERMs while it computes stops it cleanly") {
  // oneDNN 2.6's jit f32 GEMM kernels point rsp into a heap buffer while they
  // run (oneDNN issue #4845): a signal handled on a computing thread wrote
  // its frame over the heap, and the process aborted later in free().
  // Signals now go to a thread of their own (daemon/stop_signals.h).
  const auto dir = freshTempDir("sigterm-storm");
  BackgroundTraind traind("--model configs/models/fashion_mlp.yaml --max-steps 1000000 "
                          "--threads 1 --log-every 20 --checkpoint-dir " + (dir / "ckpt").string(),
                          dir / "traind.log");
  traind.waitForOutput("step 20,", 60);
  // Through the last steps, the final checkpoint and the test-set evaluation.
  int exit_code = -1;
  for (int i = 0; i < 100000 && (exit_code = traind.wait(0)) < 0; ++i) {
    traind.signal(SIGTERM);
    usleep(200);
  }
  INFO(traind.output());
  CHECK(exit_code == 0);
  CHECK_THAT(traind.output(), Catch::Contains("saved checkpoint"));
}

TEST_CASE("a stop before the first step saves and evaluates nothing") {
  // In-process: no signal can be timed to land between the start and the
  // first step of the binary (10 ms apart).
  const auto dir = freshTempDir("stop-before-first-step");
  ModelSpec spec = loadModelSpec(std::string(TRAIND_SOURCE_DIR) + "/configs/models/fashion_mlp.yaml");
  spec.checkpoint.dir = (dir / "ckpt").string();
  spec.training.threads = 1;
  const std::atomic<bool> stop{true};
  std::atomic<bool> checkpoint{false};
  NodeMetrics metrics("standalone", 0, spec.training.log_every);
  const TrainingSummary summary = runStandalone(spec, stop, checkpoint, metrics);
  CHECK(summary.stopped);
  CHECK(summary.steps_run == 0);
  CHECK_FALSE(summary.test_loss.has_value());
  CHECK_FALSE(findLatestCheckpoint(spec.checkpoint.dir).has_value());
}

TEST_CASE("SIGHUP (its terminal gone) stops a run cleanly, with a checkpoint") {
  const auto dir = freshTempDir("sighup");
  BackgroundTraind traind(
      "--model configs/models/fashion_mlp.yaml --max-steps 1000000 "
      "--threads 1 --log-every 20 --eval-every 0 --checkpoint-dir " +
          (dir / "ckpt").string(),
      dir / "traind.log");
  REQUIRE(traind.waitForOutput("step 20,", 60));
  traind.signal(SIGHUP);
  CHECK(traind.wait(60) == 0);
  INFO(traind.output());
  CHECK_THAT(traind.output(), Catch::Contains("stop requested by SIGHUP"));
  CHECK_THAT(traind.output(), Catch::Contains("saved checkpoint"));
}

TEST_CASE("a run stopped at an evaluation's step reports that evaluation, not a second") {
  const auto dir = freshTempDir("stop-at-eval");
  // Every step is an evaluation's: the stop lands on one.
  BackgroundTraind traind(
      "--model configs/models/fashion_mlp.yaml --max-steps 1000000 "
      "--threads 1 --eval-every 1 --checkpoint-dir ''",
      dir / "traind.log");
  REQUIRE(traind.waitForOutput("step 3, test loss", 60));
  traind.signal(SIGTERM);
  REQUIRE(traind.wait(60) == 0);
  const std::string output = traind.output();
  INFO(output);
  std::smatch done;
  REQUIRE(std::regex_search(output, done, std::regex("done: global step ([0-9]+),")));
  const std::string line = "step " + done[1].str() + ", test loss";
  const size_t first = output.find(line);
  REQUIRE(first != std::string::npos);
  CHECK(output.find(line, first + 1) == std::string::npos);
}

TEST_CASE("moving averages are kept, checkpointed and evaluated, a run can turn them on") {
  const auto dir = freshTempDir("moving-average");
  const std::string base = exampleSpec("fashion_mlp.yaml");
  writeFile(dir / "plain.yaml", base);
  writeFile(dir / "averaged.yaml", base + "moving_average: {decay: 0.99}\n");
  const std::string flags =
      " --threads 1 --log-every 100 --checkpoint-dir " + (dir / "ckpt").string();
  // 100 steps without, then on to 300 with: the averages start from the
  // checkpoint's parameters.
  ProcessResult r =
      runTraind("--model " + (dir / "plain.yaml").string() + " --max-steps 100" + flags);
  REQUIRE(r.exit_code == 0);
  r = runTraind("--model " + (dir / "averaged.yaml").string() + " --max-steps 300" + flags);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(summaryValue(r.output, "test accuracy") > 0.70);
  const std::vector<float> kernel = readCheckpointTensor(dir / "ckpt", "hidden1/kernel");
  const std::vector<float> average =
      readCheckpointTensor(dir / "ckpt", "hidden1/kernel/ExponentialMovingAverage");
  REQUIRE(kernel.size() == average.size());
  float moved = 0;
  for (size_t i = 0; i < kernel.size(); ++i)
    moved = std::max(moved, std::abs(kernel[i] - average[i]));
  CHECK(moved > 1e-4f);  // the average lags the parameters
}

TEST_CASE("fashion_cnn learns on a slice") {
  const auto dir = freshTempDir("cnn");
  const ProcessResult r = runTraind("--model configs/models/fashion_cnn.yaml --max-steps 100 "
                                    "--threads 1 --checkpoint-dir " + dir.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(summaryValue(r.output, "test accuracy") > 0.65);
}

TEST_CASE("regression fits y = x^2") {
  const auto dir = freshTempDir("regression");
  const ProcessResult r = runTraind("--model configs/models/regression.yaml --threads 1 "
                                    "--checkpoint-dir " + dir.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  // The noise alone has variance 0.0025.
  CHECK(summaryValue(r.output, "test loss") < 0.01);
}

TEST_CASE("a run that diverges exits 3, which no restart helps") {
  const auto dir = freshTempDir("diverged");
  const auto spec = dir / "diverging.yaml";
  writeFile(spec, replaceAll(exampleSpec("regression.yaml"), "learning_rate: 0.1",
                             "learning_rate: 1.0e+30"));
  const ProcessResult r =
      runTraind("--model " + spec.string() + " --threads 1 --max-steps 200 --checkpoint-dir " +
                (dir / "ckpt").string());
  INFO(r.output);
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.output, Catch::Contains("lower the learning rate or check the data"));
  CHECK_FALSE(std::filesystem::exists(dir / "ckpt" / "latest"));  // nothing of it saved
}

TEST_CASE("clip_global_norm: a clipped SGD step moves the parameters by the rate times the norm") {
  // From the checkpoint of step 1, one step more: without clipping it moves
  // the parameters further than 0.1 x 0.01, with clipping exactly that far.
  const auto dir = freshTempDir("clip");
  const std::string plain = exampleSpec("regression.yaml");
  writeFile(dir / "plain.yaml", plain);
  writeFile(dir / "clipped.yaml", replaceAll(plain, "learning_rate: 0.1",
                                             "learning_rate: 0.1\n  clip_global_norm: 0.01"));
  const std::vector<std::string> names = {"hidden/kernel", "hidden/bias", "output/kernel",
                                          "output/bias"};
  auto stepLength = [&](const std::string& spec) {
    const std::filesystem::path checkpoints = dir / (spec + "-ckpt");
    const std::string args = "--model " + (dir / (spec + ".yaml")).string() +
                             " --threads 1 --eval-every 0 --checkpoint-dir " + checkpoints.string();
    const ProcessResult first = runTraind(args + " --max-steps 1");
    REQUIRE(first.exit_code == 0);
    std::vector<std::vector<float>> before;
    for (const std::string& name : names) before.push_back(readCheckpointTensor(checkpoints, name));
    const ProcessResult second = runTraind(args + " --max-steps 2");
    INFO(second.output);
    REQUIRE(second.exit_code == 0);
    double squares = 0.0;
    for (size_t v = 0; v < names.size(); ++v) {
      const std::vector<float> after = readCheckpointTensor(checkpoints, names[v]);
      for (size_t i = 0; i < after.size(); ++i)
        squares += double(after[i] - before[v][i]) * double(after[i] - before[v][i]);
    }
    return std::sqrt(squares);
  };
  CHECK(stepLength("plain") > 0.01);
  CHECK(stepLength("clipped") == Approx(0.001).epsilon(1e-3));
}

TEST_CASE("a resumed run continues exactly as an uninterrupted one") {
  // Adam (slots in the checkpoint), dropout (masks from the step) and
  // shuffling (order from the epoch) must all continue where they stopped.
  const auto dir = freshTempDir("resume");
  std::string spec = exampleSpec("fashion_mlp.yaml");
  spec = replaceAll(spec, "- {type: dense, name: logits",
                    "- {type: dropout, rate: 0.3}\n  - {type: dense, name: logits");
  writeFile(dir / "spec.yaml", spec);
  const std::string common = "--model " + (dir / "spec.yaml").string() +
                             " --threads 1 --log-every 10 --eval-every 0 --seed 5 ";
  const ProcessResult whole =
      runTraind(common + "--max-steps 80 --checkpoint-dir " + (dir / "whole").string());
  const ProcessResult first =
      runTraind(common + "--max-steps 40 --checkpoint-dir " + (dir / "parts").string());
  const ProcessResult second =
      runTraind(common + "--max-steps 80 --checkpoint-dir " + (dir / "parts").string());
  INFO(whole.output + first.output + second.output);
  REQUIRE(whole.exit_code == 0);
  REQUIRE(first.exit_code == 0);
  REQUIRE(second.exit_code == 0);
  CHECK_THAT(second.output, Catch::Contains("at global step 40"));
  std::vector<std::string> parts = lossLines(first.output);
  for (const std::string& line : lossLines(second.output)) parts.push_back(line);
  CHECK(parts == lossLines(whole.output));
  CHECK(readCheckpointTensor(dir / "parts", "hidden1/kernel") ==
        readCheckpointTensor(dir / "whole", "hidden1/kernel"));
}

TEST_CASE("TFRecord files of Fashion-MNIST train exactly as its IDX files do") {
  // The same examples, as convert_to_records.py writes them (height, width,
  // depth, label, image_raw): training set gzip-compressed, test set raw.
  const auto dir = freshTempDir("tfrecord");
  const std::string fashion = "/usr/share/datasets/fashion-mnist/";
  writeFile(dir / "test.tfrecords", fashionMnistRecords("t10k", 500));
  const std::string train = fashionMnistRecords("train", 2000);
  gzFile gz = gzopen((dir / "train.tfrecords.gz").c_str(), "wb");
  REQUIRE(gzwrite(gz, train.data(), unsigned(train.size())) == int(train.size()));
  REQUIRE(gzclose(gz) == Z_OK);

  // fashion_mlp.yaml with its data section (up to batch_size) replaced.
  const std::string mlp = exampleSpec("fashion_mlp.yaml");
  const size_t data_at = mlp.find("data:\n");
  const std::string idx_data = mlp.substr(data_at, mlp.find("  batch_size") - data_at);
  const auto files = [&](const std::string& set, int64_t limit) {
    return "{images: " + fashion + set + "-images-idx3-ubyte.gz, labels: " + fashion + set +
           "-labels-idx1-ubyte.gz, limit: " + std::to_string(limit) + "}";
  };
  writeFile(dir / "idx.yaml", replaceAll(mlp, idx_data,
                                         "data:\n  train: " + files("train", 2000) +
                                             "\n  test: " + files("t10k", 500) + "\n"));
  writeFile(dir / "tfrecord.yaml", replaceAll(mlp, idx_data,
                                              "data:\n"
                                              "  train: {tfrecords: " +
                                                  (dir / "train.tfrecords.gz").string() +
                                                  "}\n"
                                                  "  test: {tfrecords: " +
                                                  (dir / "test.tfrecords").string() + "}\n"));
  const std::string common = " --threads 1 --max-steps 60 --log-every 20 --eval-every 30 --seed 3";
  const ProcessResult from_idx = runTraind("--model " + (dir / "idx.yaml").string() + common +
                                           " --checkpoint-dir " + (dir / "idx").string());
  const ProcessResult from_records =
      runTraind("--model " + (dir / "tfrecord.yaml").string() + common + " --checkpoint-dir " +
                (dir / "records").string());
  INFO(from_idx.output + from_records.output);
  REQUIRE(from_idx.exit_code == 0);
  REQUIRE(from_records.exit_code == 0);
  CHECK(lossLines(from_records.output).size() == 3);
  CHECK(lossLines(from_records.output) == lossLines(from_idx.output));
  CHECK(summaryValue(from_records.output, "test accuracy") ==
        summaryValue(from_idx.output, "test accuracy"));
  CHECK(readCheckpointTensor(dir / "records", "hidden1/kernel") ==
        readCheckpointTensor(dir / "idx", "hidden1/kernel"));

  const ProcessResult check = runTraind("check --model " + (dir / "tfrecord.yaml").string());
  CHECK(check.exit_code == 0);
  CHECK_THAT(check.output,
             Catch::Contains("data: 2000 training examples of [28, 28, 1], 500 test examples"));
  CHECK_THAT(check.output, Catch::Contains("\ntraining set: 2000 examples, CRC-32C 0x"));

  // Left in their files (in_memory: false), read as each batch is
  // gathered, they train the same parameters; the files must be
  // uncompressed.
  writeFile(dir / "train.tfrecords", train);
  writeFile(dir / "in_files.yaml",
            replaceAll(mlp, idx_data,
                       "data:\n"
                       "  train: {tfrecords: " +
                           (dir / "train.tfrecords").string() +
                           ", in_memory: false}\n"
                           "  test: {tfrecords: " +
                           (dir / "test.tfrecords").string() + ", in_memory: false}\n"));
  const ProcessResult in_files = runTraind("--model " + (dir / "in_files.yaml").string() + common +
                                           " --checkpoint-dir " + (dir / "in_files").string());
  INFO(in_files.output);
  REQUIRE(in_files.exit_code == 0);
  CHECK(lossLines(in_files.output) == lossLines(from_idx.output));
  CHECK(summaryValue(in_files.output, "test accuracy") ==
        summaryValue(from_idx.output, "test accuracy"));
  CHECK(readCheckpointTensor(dir / "in_files", "hidden1/kernel") ==
        readCheckpointTensor(dir / "idx", "hidden1/kernel"));
  // Through a shuffle buffer, which reads the files nearly in order, the
  // same batches as from the IDX files through one.
  const auto buffered = [&](const std::string& name) {
    const std::string spec = replaceAll(readFile(dir / (name + ".yaml")), "  batch_size: 100",
                                        "  batch_size: 100\n  shuffle_buffer: 500");
    REQUIRE(spec.find("shuffle_buffer") != std::string::npos);
    writeFile(dir / (name + "_buffered.yaml"), spec);
    return runTraind("--model " + (dir / (name + "_buffered.yaml")).string() + common +
                     " --checkpoint-dir " + (dir / (name + "_buffered")).string());
  };
  const ProcessResult idx_buffered = buffered("idx");
  const ProcessResult files_buffered = buffered("in_files");
  INFO(idx_buffered.output + files_buffered.output);
  REQUIRE(files_buffered.exit_code == 0);
  CHECK(lossLines(files_buffered.output) == lossLines(idx_buffered.output));
  CHECK(lossLines(files_buffered.output) != lossLines(in_files.output));
  // The same records in four files, read four at a time in an order drawn
  // every epoch: other batches, and `traind check` says how they are drawn.
  std::vector<std::string> parts(4);
  for (size_t at = 0, record = 0; at < train.size(); ++record) {
    uint64_t length = 0;
    std::memcpy(&length, train.data() + at, sizeof length);  // TFRecord: little-endian length
    const size_t bytes = 8 + 4 + size_t(length) + 4;
    parts[record / 500] += train.substr(at, bytes);  // 2000 records, 500 a file
    at += bytes;
  }
  for (size_t i = 0; i < parts.size(); ++i)
    writeFile(dir / ("part-" + std::to_string(i) + ".tfrecords"), parts[i]);
  const std::string interleaved_spec = replaceAll(
      replaceAll(readFile(dir / "in_files_buffered.yaml"), (dir / "train.tfrecords").string() + ",",
                 (dir / "part-*.tfrecords").string() + ","),
      "  shuffle_buffer: 500", "  shuffle_buffer: 500\n  interleave: 4\n  shuffle_files: true");
  REQUIRE(interleaved_spec.find("part-*") != std::string::npos);
  REQUIRE(interleaved_spec.find("interleave") != std::string::npos);
  writeFile(dir / "interleaved.yaml", interleaved_spec);
  const ProcessResult interleaved =
      runTraind("--model " + (dir / "interleaved.yaml").string() + common + " --checkpoint-dir " +
                (dir / "interleaved").string());
  INFO(interleaved.output);
  REQUIRE(interleaved.exit_code == 0);
  CHECK(lossLines(interleaved.output).size() == 3);
  CHECK(lossLines(interleaved.output) != lossLines(files_buffered.output));
  const ProcessResult interleaved_check =
      runTraind("check --model " + (dir / "interleaved.yaml").string());
  CHECK(interleaved_check.exit_code == 0);
  CHECK_THAT(interleaved_check.output,
             Catch::Contains("data: 2000 training examples of [28, 28, 1]") &&
                 Catch::Contains("shuffle: through a buffer of 500 from 4 files at a time, the "
                                 "files shuffled every epoch"));
  CHECK_THAT(interleaved_check.output, !Catch::Contains("note: data.interleave"));
  // More files at a time than the set has: said, in check and as a run starts.
  writeFile(dir / "over_interleaved.yaml",
            replaceAll(interleaved_spec, "interleave: 4", "interleave: 6"));
  const ProcessResult over_check =
      runTraind("check --model " + (dir / "over_interleaved.yaml").string());
  CHECK(over_check.exit_code == 0);
  CHECK_THAT(over_check.output,
             Catch::Contains("note: data.interleave: 6 reads the training set's files 6 at a "
                             "time, and it has 4: all 4 are read at once"));
  writeFile(dir / "compressed.yaml",
            replaceAll(readFile(dir / "in_files.yaml"), "train.tfrecords,", "train.tfrecords.gz,"));
  const ProcessResult compressed = runTraind("check --model " + (dir / "compressed.yaml").string());
  CHECK(compressed.exit_code == 2);
  CHECK_THAT(compressed.output, Catch::Contains("compressed.yaml:16:10: data.train: ") &&
                                    Catch::Contains("train.tfrecords.gz: compressed with gzip"));
}

TEST_CASE("labels beyond the logits: the first one's file and example named") {
  const auto dir = freshTempDir("labels_beyond");
  // Fashion-MNIST's classes 0-9 for 5 logits; its first training example is of class 9.
  const std::string five =
      replaceAll(exampleSpec("fashion_mlp.yaml"), "{type: dense, name: logits, units: 10}",
                 "{type: dense, name: logits, units: 5}");
  REQUIRE_THAT(five, Catch::Contains("units: 5}"));
  writeFile(dir / "idx.yaml", five);
  const ProcessResult idx = runTraind("check --model " + (dir / "idx.yaml").string());
  CHECK(idx.exit_code == 2);
  CHECK_THAT(idx.output, Catch::Contains("data.train: labels go up to 9 but the last layer has "
                                         "only 5 outputs (the first, 9, at "
                                         "/usr/share/datasets/fashion-mnist/"
                                         "train-labels-idx1-ubyte.gz, example 0 (from 0))"));
  // The same examples as records: the file, and the record's index in it.
  writeFile(dir / "train.tfrecords", fashionMnistRecords("train", 300));
  const size_t data_at = five.find("data:\n");
  writeFile(
      dir / "records.yaml",
      replaceAll(five, five.substr(data_at, five.find("  batch_size") - data_at),
                 "data:\n  train: {tfrecords: " + (dir / "train.tfrecords").string() + "}\n"));
  const ProcessResult records = runTraind("check --model " + (dir / "records.yaml").string());
  CHECK(records.exit_code == 2);
  CHECK_THAT(records.output,
             Catch::Contains("(the first, 9, at " + (dir / "train.tfrecords").string() +
                             ", record 0 (from 0))"));
}

TEST_CASE("a training file cut short under a run: exit 2 naming it, the steps before it saved") {
  const auto dir = freshTempDir("cut_short");
  writeFile(dir / "train.tfrecords", fashionMnistRecords("train", 2000));
  const std::string mlp = exampleSpec("fashion_mlp.yaml");
  const size_t data_at = mlp.find("data:\n");
  writeFile(dir / "in_files.yaml",
            replaceAll(mlp, mlp.substr(data_at, mlp.find("  batch_size") - data_at),
                       "data:\n  train: {tfrecords: " + (dir / "train.tfrecords").string() +
                           ", in_memory: false}\n"));
  BackgroundTraind traind("--model " + (dir / "in_files.yaml").string() +
                              " --threads 1 --max-steps 1000000 --log-every 10 --eval-every 0 "
                              "--checkpoint-dir " +
                              (dir / "ckpt").string(),
                          dir / "traind.log");
  REQUIRE(traind.waitForOutput("step 20, loss = ", 60));
  std::filesystem::resize_file(dir / "train.tfrecords", 50000);
  const int exit_code = traind.wait(60);
  INFO(traind.output());
  CHECK(exit_code == 2);
  checkSavedBeforeInputFailure(traind.output(), dir / "train.tfrecords", dir / "ckpt", 20);
}

TEST_CASE("augment: training images are distorted, the same in every run, the test set not") {
  const auto dir = freshTempDir("augment");
  std::string spec = exampleSpec("fashion_mlp.yaml");
  spec =
      replaceAll(spec, "  batch_size: 100",
                 "  batch_size: 100\n"
                 "  augment: {random_crop: {padding: 2}, flip_left_right: true, brightness: 0.1, "
                 "contrast: [0.8, 1.2]}");
  REQUIRE(spec.find("augment:") != std::string::npos);
  writeFile(dir / "augmented.yaml", spec);
  const std::string common = " --threads 1 --max-steps 100 --log-every 50 --eval-every 100";
  const auto run = [&](const std::string& model, const std::string& name) {
    const ProcessResult r = runTraind("--model " + (dir / model).string() + common +
                                      " --checkpoint-dir " + (dir / name).string());
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    return r;
  };
  const ProcessResult first = run("augmented.yaml", "first");
  const ProcessResult second = run("augmented.yaml", "second");
  const ProcessResult plain = runTraind("--model configs/models/fashion_mlp.yaml" + common +
                                        " --checkpoint-dir " + (dir / "plain").string());
  REQUIRE(plain.exit_code == 0);
  INFO(first.output + plain.output);
  CHECK(lossLines(first.output) == lossLines(second.output));
  CHECK(readCheckpointTensor(dir / "first", "hidden1/kernel") ==
        readCheckpointTensor(dir / "second", "hidden1/kernel"));
  CHECK(lossLines(first.output) != lossLines(plain.output));
  // 100 steps of distorted images still learn: an undistorted run reaches
  // about 0.75 here.
  CHECK(summaryValue(first.output, "test accuracy") > 0.6);
  const ProcessResult check = runTraind("check --model " + (dir / "augmented.yaml").string());
  CHECK(check.exit_code == 0);
  CHECK_THAT(check.output, Catch::Contains("\naugment: random_crop 2 flip_left_right brightness "
                                           "0.1 contrast [0.8, 1.2]\n"));
  // The test set is evaluated as it is: what the spec without augment makes
  // of the same checkpoint.
  const ProcessResult eval = runDaemonBinary(
      "trainctl", "eval --threads 1 --model configs/models/fashion_mlp.yaml --checkpoint " +
                      (dir / "first").string());
  INFO(eval.output);
  CHECK(eval.exit_code == 0);
  CHECK_THAT(eval.output, Catch::Contains(fmt::format("test loss = {:.4f}",
                                                      summaryValue(first.output, "test loss"))));

  // Regression records of 2 floats are not images.
  writeFile(dir / "flat.yaml",
            "input: [2]\n"
            "layers: [{type: dense, units: 1}]\n"
            "loss: mse\n"
            "optimizer: {type: sgd, learning_rate: 0.1}\n"
            "data:\n"
            "  train: {tfrecords: " +
                std::string(TRAIND_SOURCE_DIR) +
                "/test/data/tfrecord/regression.tfrecord, image_feature: x, label_feature: y}\n"
                "  batch_size: 1\n"
                "  augment: {flip_left_right: true}\n"
                "training: {epochs: 1}\n");
  const ProcessResult flat = runTraind("check --model " + (dir / "flat.yaml").string());
  CHECK(flat.exit_code == 2);
  CHECK_THAT(flat.output, Catch::Contains("flat.yaml:8:12: data.augment: expected images of "
                                          "[height, width, channels] to distort, got examples of "
                                          "shape [2]"));
}

TEST_CASE("augment random_crop size: the model takes windows, the test set its centres") {
  // cifar10_input's way: random 24x24 windows of the training images, the
  // centre 24x24 of each test image.
  const auto dir = freshTempDir("window");
  writeFile(
      dir / "window.yaml",
      augmentedMlpSpec("[24, 24, 1]", "{random_crop: {size: [24, 24]}, flip_left_right: true}"));
  const ProcessResult run =
      runTraind("--model " + (dir / "window.yaml").string() +
                " --threads 1 --max-steps 100 --log-every 50 --eval-every 100 --checkpoint-dir " +
                (dir / "ckpt").string());
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(summaryValue(run.output, "test accuracy") > 0.6);
  const ProcessResult check = runTraind("check --model " + (dir / "window.yaml").string());
  CHECK(check.exit_code == 0);
  CHECK_THAT(check.output, Catch::Contains("\naugment: random_crop 24x24 flip_left_right\n"));
  // trainctl eval takes the centres as the run did.
  const ProcessResult eval =
      runDaemonBinary("trainctl", "eval --threads 1 --model " + (dir / "window.yaml").string() +
                                      " --checkpoint " + (dir / "ckpt").string());
  INFO(eval.output);
  CHECK(eval.exit_code == 0);
  CHECK_THAT(eval.output, Catch::Contains(fmt::format("test loss = {:.4f}",
                                                      summaryValue(run.output, "test loss"))));

  // A window beyond the padded images; colours of grey images.
  writeFile(dir / "wide.yaml", augmentedMlpSpec("[24, 24, 1]", "{random_crop: {size: [24, 30]}}"));
  writeFile(dir / "wide.yaml",
            replaceAll(readFile(dir / "wide.yaml"), "input: [24, 24, 1]", "input: [24, 30, 1]"));
  const ProcessResult wide = runTraind("check --model " + (dir / "wide.yaml").string());
  CHECK(wide.exit_code == 2);
  CHECK_THAT(wide.output,
             Catch::Contains("wide.yaml:23:33: data.augment.random_crop.size: expected a window "
                             "inside the training images of [28, 28, 1] padded by 0 on every "
                             "side, got [24, 30]"));
  writeFile(dir / "padded.yaml", replaceAll(readFile(dir / "wide.yaml"), "size: [24, 30]",
                                            "size: [24, 30], padding: 1"));
  CHECK(runTraind("check --model " + (dir / "padded.yaml").string()).exit_code == 0);
  writeFile(dir / "grey.yaml", augmentedMlpSpec("[24, 24, 1]", "{saturation: [0.5, 1.5]}"));
  const ProcessResult grey = runTraind("check --model " + (dir / "grey.yaml").string());
  CHECK(grey.exit_code == 2);
  CHECK_THAT(grey.output,
             Catch::Contains("grey.yaml:23:25: data.augment.saturation: saturation and hue "
                             "change RGB images: expected images of 3 channels, got "
                             "[28, 28, 1]"));

  // The ImageNet pipelines' way: photographs of any size resized to one
  // larger than the window (256 for 224 there), random windows of them for
  // training, the centre window of each for evaluation.
  writeFile(dir / "resized.yaml",
            photoSpec("{size: [5, 4]}", "{size: [5, 4]}", "{random_crop: {size: [3, 3]}}"));
  const ProcessResult resized =
      runTraind("--model " + (dir / "resized.yaml").string() +
                " --threads 1 --log-every 1 --checkpoint-dir " + (dir / "resized").string());
  INFO(resized.output);
  CHECK(resized.exit_code == 0);
  CHECK(lossLines(resized.output).size() == 6);
  const ProcessResult resized_check = runTraind("check --model " + (dir / "resized.yaml").string());
  CHECK(resized_check.exit_code == 0);
  CHECK_THAT(resized_check.output,
             Catch::Contains("data: 6 training examples of [5, 4, 3], 6 test examples"));
  // Resized to the window itself, training images would have no window to draw.
  writeFile(dir / "to_window.yaml", replaceAll(readFile(dir / "resized.yaml"),
                                               "resize: {size: [5, 4]}", "resize: bilinear"));
  const ProcessResult to_window = runTraind("check --model " + (dir / "to_window.yaml").string());
  CHECK(to_window.exit_code == 2);
  CHECK_THAT(to_window.output,
             Catch::Contains("to_window.yaml:5:") &&
                 Catch::Contains(": data.train.resize: expected a size to resize to"));
}

TEST_CASE("augment random_crop area and aspect_ratio: Inception's boxes resized to the window") {
  const auto dir = freshTempDir("boxes");
  writeFile(dir / "boxes.yaml",
            augmentedMlpSpec(
                "[24, 24, 1]",
                "{random_crop: {size: [24, 24], area: [0.5, 1], aspect_ratio: [0.75, 1.33]}, "
                "flip_left_right: true}"));
  const ProcessResult run =
      runTraind("--model " + (dir / "boxes.yaml").string() +
                " --threads 1 --max-steps 100 --log-every 50 --eval-every 100 --checkpoint-dir " +
                (dir / "ckpt").string());
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(summaryValue(run.output, "test accuracy") > 0.6);
  const ProcessResult check = runTraind("check --model " + (dir / "boxes.yaml").string());
  CHECK(check.exit_code == 0);
  CHECK_THAT(check.output, Catch::Contains("\naugment: random_crop 24x24 area [0.5, 1] "
                                           "aspect_ratio [0.75, 1.33] flip_left_right\n"));
  // A window of the images' own size: each box is enlarged to the whole.
  writeFile(dir / "whole.yaml",
            augmentedMlpSpec("[28, 28, 1]", "{random_crop: {size: [28, 28], area: [0.5, 1]}}"));
  CHECK(runTraind("check --model " + (dir / "whole.yaml").string()).exit_code == 0);
  // A window larger than the images is refused, as for windows: the test
  // images would be evaluated through centres padded with 0.
  writeFile(dir / "larger.yaml",
            augmentedMlpSpec("[32, 32, 1]", "{random_crop: {size: [32, 32], area: [0.5, 1]}}"));
  const ProcessResult larger = runTraind("check --model " + (dir / "larger.yaml").string());
  CHECK(larger.exit_code == 2);
  CHECK_THAT(larger.output, Catch::Contains("larger.yaml:23:") &&
                                Catch::Contains(": data.augment.random_crop.size: expected a "
                                                "window inside the training images of [28, 28, "
                                                "1] padded by 0 on every side, got [32, 32]"));
  // Padding goes with windows, not boxes.
  writeFile(dir / "padded.yaml",
            augmentedMlpSpec("[24, 24, 1]",
                             "{random_crop: {size: [24, 24], area: [0.5, 1], padding: 2}}"));
  const ProcessResult padded = runTraind("check --model " + (dir / "padded.yaml").string());
  CHECK(padded.exit_code == 2);
  CHECK_THAT(padded.output, Catch::Contains("padded.yaml:23:") &&
                                Catch::Contains(": data.augment.random_crop.padding: expected no "
                                                "padding with a box of random area and aspect "
                                                "ratio (area, aspect_ratio)"));

  // Inception's way with photographs of any size: boxes of the images
  // resized to one size for training; for evaluation each image resized in
  // proportion (its shorter side 4), then its centre window.
  writeFile(dir / "photos.yaml", photoSpec("{size: [5, 4]}", "{shorter_side: 4}",
                                           "{random_crop: {size: [3, 3], area: [0.3, 1]}}"));
  const ProcessResult photos =
      runTraind("--model " + (dir / "photos.yaml").string() +
                " --threads 1 --log-every 1 --checkpoint-dir " + (dir / "photos").string());
  INFO(photos.output);
  CHECK(photos.exit_code == 0);
  CHECK(lossLines(photos.output).size() == 6);
  CHECK_THAT(photos.output, Catch::Contains("test accuracy") && Catch::Contains("(6 examples)"));
  // Inception's own: boxes of each photograph as decoded, without a size,
  // the images left in their files to be decoded again; for evaluation the
  // centre of each image's sides (Inception's 0.875 would keep these small
  // images whole), resized to the input.
  writeFile(dir / "decoded.yaml",
            photoSpec("legacy_bilinear, in_memory: false",
                      "{method: legacy_bilinear, central_fraction: 0.5}",
                      "{random_crop: {size: [3, 3], area: [0.3, 1]}, flip_left_right: true}"));
  const ProcessResult decoded =
      runTraind("--model " + (dir / "decoded.yaml").string() +
                " --threads 1 --log-every 1 --checkpoint-dir " + (dir / "decoded").string());
  INFO(decoded.output);
  CHECK(decoded.exit_code == 0);
  CHECK(lossLines(decoded.output).size() == 6);
  CHECK_THAT(decoded.output, Catch::Contains("test accuracy") && Catch::Contains("(6 examples)"));
  writeFile(dir / "kept.yaml",
            replaceAll(readFile(dir / "decoded.yaml"), "in_memory: false", "in_memory: true"));
  const ProcessResult kept = runTraind("check --model " + (dir / "kept.yaml").string());
  CHECK(kept.exit_code == 2);
  CHECK_THAT(kept.output, Catch::Contains("kept.yaml:5:") &&
                              Catch::Contains(": data.train.in_memory: expected in_memory: false: "
                                              "each training image keeps its own size"));
}

TEST_CASE("augment random_crop shorter_side: VGG's windows of images resized to a side drawn") {
  // slim's vgg_preprocessing: each training photograph resized in
  // proportion, its shorter side drawn for it, a window of that; the test
  // set's the centre window of each resized to one side.
  const auto dir = freshTempDir("scales");
  writeFile(
      dir / "scales.yaml",
      photoSpec("legacy_bilinear, in_memory: false", "{shorter_side: 4}",
                "{random_crop: {size: [3, 3], shorter_side: [3, 6]}, flip_left_right: true}"));
  // Gathered on the step's own thread as well as read ahead.
  writeFile(dir / "on_step.yaml", replaceAll(readFile(dir / "scales.yaml"), "  batch_size: 2\n",
                                             "  batch_size: 2\n  prefetch_batches: 0\n"));
  REQUIRE_THAT(readFile(dir / "on_step.yaml"), Catch::Contains("prefetch_batches: 0"));
  const auto train = [&](const std::string& spec, const std::string& checkpoints) {
    const ProcessResult run =
        runTraind("--model " + (dir / spec).string() +
                  " --threads 2 --log-every 1 --checkpoint-dir " + (dir / checkpoints).string());
    INFO(run.output);
    CHECK(run.exit_code == 0);
    CHECK(lossLines(run.output).size() == 6);
    CHECK_THAT(run.output, Catch::Contains("test accuracy") && Catch::Contains("(6 examples)"));
    return summaryValue(run.output, "test loss");
  };
  // Each image's draws are its own, whichever thread gathers it.
  CHECK(train("scales.yaml", "first") == train("on_step.yaml", "second"));
  const ProcessResult check = runTraind("check --model " + (dir / "scales.yaml").string());
  CHECK(check.exit_code == 0);
  CHECK_THAT(check.output, Catch::Contains("\naugment: random_crop 3x3 shorter_side [3, 6] "
                                           "flip_left_right\n"));
  CHECK_THAT(check.output, Catch::Contains("data: 6 training examples of their own sizes, each "
                                           "decoded again as it is gathered, 6 test examples"));
  // Kept in memory, the images would be kept at one size.
  writeFile(dir / "kept.yaml",
            replaceAll(readFile(dir / "scales.yaml"), "in_memory: false", "in_memory: true"));
  const ProcessResult kept = runTraind("check --model " + (dir / "kept.yaml").string());
  CHECK(kept.exit_code == 2);
  CHECK_THAT(kept.output, Catch::Contains("kept.yaml:5:") &&
                              Catch::Contains(": data.train.in_memory: expected in_memory: false"));
}

TEST_CASE("standardize: per_image: training and evaluation both see standardized examples") {
  const auto dir = freshTempDir("standardize");
  std::string spec = exampleSpec("fashion_mlp.yaml");
  spec = replaceAll(spec, "  batch_size: 100", "  batch_size: 100\n  standardize: per_image");
  spec = replaceAll(spec, "learning_rate: 0.1", "learning_rate: 0.01");
  REQUIRE(spec.find("standardize:") != std::string::npos);
  REQUIRE(spec.find("learning_rate: 0.01") != std::string::npos);
  writeFile(dir / "standardized.yaml", spec);
  const ProcessResult run =
      runTraind("--model " + (dir / "standardized.yaml").string() +
                " --threads 1 --max-steps 100 --log-every 50 --eval-every 100 --checkpoint-dir " +
                (dir / "ckpt").string());
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(summaryValue(run.output, "test accuracy") > 0.6);
  // trainctl eval standardizes the test set as the run did, and the spec
  // without it evaluates other inputs.
  const auto eval = [&](const std::string& model) {
    const ProcessResult r =
        runDaemonBinary("trainctl", "eval --threads 1 --model " + model + " --checkpoint " +
                                        (dir / "ckpt").string());
    INFO(r.output);
    CHECK(r.exit_code == 0);
    return r.output;
  };
  const std::string test_loss =
      fmt::format("test loss = {:.4f}", summaryValue(run.output, "test loss"));
  CHECK_THAT(eval((dir / "standardized.yaml").string()), Catch::Contains(test_loss));
  CHECK_THAT(eval("configs/models/fashion_mlp.yaml"), !Catch::Contains(test_loss));
}

TEST_CASE("fine-tuning reuses frozen hidden1..3 from another model's checkpoint") {
  const auto dir = freshTempDir("finetune");
  const ProcessResult base = runTraind("--model configs/models/fashion_base.yaml --max-steps 200 "
                                       "--threads 1 --eval-every 0 --checkpoint-dir " +
                                       (dir / "base").string());
  INFO(base.output);
  REQUIRE(base.exit_code == 0);
  std::string spec = exampleSpec("fashion_finetune.yaml");
  spec = replaceAll(spec, "/tmp/traind/fashion_base", (dir / "base").string());
  REQUIRE(spec.find((dir / "base").string()) != std::string::npos);
  writeFile(dir / "finetune.yaml", spec);
  const ProcessResult tuned = runTraind("--model " + (dir / "finetune.yaml").string() +
                                        " --max-steps 200 --threads 1 --eval-every 0 "
                                        "--checkpoint-dir " + (dir / "tuned").string());
  INFO(tuned.output);
  REQUIRE(tuned.exit_code == 0);
  CHECK(summaryValue(tuned.output, "test accuracy") > 0.7);
  for (const char* name : {"hidden1/kernel", "hidden2/bias", "hidden3/kernel"})
    CHECK(readCheckpointTensor(dir / "tuned", name) == readCheckpointTensor(dir / "base", name));
  CHECK(readCheckpointTensor(dir / "tuned", "hidden4/kernel").size() == 50 * 20);
}

TEST_CASE("traind check prints the layer table") {
  const ProcessResult r = runTraind("check --model configs/models/fashion_cnn.yaml");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("conv2"));
  CHECK_THAT(r.output, Catch::Contains("[14, 14, 64]"));
  CHECK_THAT(r.output, Catch::Contains("220234"));
  CHECK_THAT(r.output, Catch::Contains("optimizer: adam, learning rate 0.001\n"));
  CHECK_THAT(r.output, Catch::Contains("memory: at least 36.9 MiB (3.4 MiB of variables with their "
                                       "gradients and optimizer slots, 33.6 MiB of layer outputs "
                                       "and their gradients per step)"));
  CHECK_THAT(r.output, Catch::Contains("devices: cpu\n"));
}

TEST_CASE("traind check takes --devices and --threads as a run does") {
  const ProcessResult towers =
      runTraind("check --model configs/models/fashion_mlp.yaml --devices cpu:0,cpu:1 --threads 2");
  INFO(towers.output);
  CHECK(towers.exit_code == 0);
  CHECK_THAT(towers.output, Catch::Contains("devices: cpu:0, cpu:1\n"));
  CHECK_THAT(towers.output, Catch::Contains("towers, the whole model on each of 2 devices"));
  const ProcessResult bad =
      runTraind("check --model configs/models/fashion_mlp.yaml --devices gpu");
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.output, Catch::Contains("--devices"));
  const ProcessResult none = runTraind("check");
  CHECK(none.exit_code == 2);
  CHECK_THAT(none.output,
             Catch::Contains("check: expected --model m.yaml, --cluster c.yaml, or both"));
}

TEST_CASE("a run past the process's ulimit -v is refused before it allocates, at its layer") {
  // 784 x 1000000 floats: 5.8 GiB with their gradients, past a 4 GB address space.
  const std::filesystem::path dir = freshTempDir("ulimit");
  writeFile(dir / "wide.yaml",
            "input: [784]\n"
            "layers: [{type: dense, name: wide, units: 1000000}]\n"
            "optimizer: {type: sgd, learning_rate: 0.1}\n"
            "data: {synthetic: {type: regression}, batch_size: 8}\n"
            "training: {max_steps: 2}\n");
  const std::string command = "ulimit -v 4000000 && '" + std::string(TRAIND_BINARY_DIR) +
                              "/daemon/traind' --model '" + (dir / "wide.yaml").string() +
                              "' --threads 1 --checkpoint-dir '' > '" +
                              (dir / "output.txt").string() + "' 2>&1";
  const int status = std::system(command.c_str());
  const std::string output = readFile(dir / "output.txt");
  INFO(output);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 2);
  CHECK_THAT(output, Catch::Contains("layers[0] (wide): the model needs at least 5.9 GiB") &&
                         Catch::Contains("or what its cgroup or ulimit -v and -d allow"));
}

TEST_CASE("a run that can write no file leaves nothing in the checkpoint directory it made") {
  // ulimit -f 0 fails every write as a full disk would (EFBIG): the
  // summaries' first event, the .lock's pid, the first checkpoint.
  const std::filesystem::path dir = freshTempDir("no-room");
  const std::string command =
      "(trap '' XFSZ; ulimit -f 0; exec '" + std::string(TRAIND_BINARY_DIR) +
      "/daemon/traind' --model '" + TRAIND_SOURCE_DIR +
      "/configs/models/fashion_mlp.yaml' --threads 1 --max-steps 3 --eval-every 0 "
      "--checkpoint-dir '" +
      (dir / "made" / "ckpt").string() + "') 2>&1 | cat > '" + (dir / "output.txt").string() + "'";
  const int status = std::system(("bash -c \"" + command + "\"").c_str());
  const std::string output = readFile(dir / "output.txt");
  INFO(output);
  CHECK(WIFEXITED(status));
  CHECK_THAT(output, Catch::Contains("no TensorBoard summaries in this run") &&
                         Catch::Contains("no checkpoint written into"));
  CHECK(!std::filesystem::exists(dir / "made"));
}

TEST_CASE("flags refuse an empty summary directory and an integer past 64 bits") {
  const ProcessResult empty = runTraind("--model configs/models/fashion_mlp.yaml --summary-dir ''");
  CHECK(empty.exit_code == 2);
  CHECK_THAT(empty.output, Catch::Contains("--summary-dir: expected a directory, got ''"));
  // `--cluster "$CLUSTER"` with the variable unset checks no cluster unless refused.
  for (const std::string command :
       {"check --model configs/models/fashion_mlp.yaml --cluster ''", "--model ''"}) {
    const ProcessResult empty_file = runTraind(command);
    CHECK(empty_file.exit_code == 2);
    CHECK_THAT(empty_file.output, Catch::Contains(": expected a file, got ''"));
  }
  const ProcessResult seed =
      runTraind("--model configs/models/fashion_mlp.yaml --seed 99999999999999999999");
  CHECK(seed.exit_code == 2);
  CHECK_THAT(seed.output, Catch::Contains("--seed: expected an integer from 0 to "
                                          "9223372036854775807, got '99999999999999999999'"));
}

TEST_CASE("an integer flag with leading zeros is decimal") {
  // CLI11 alone reads "010" as octal 8 and refuses "08".
  for (const auto& [flag, steps] : {std::pair{"010", 10}, {"08", 8}}) {
    const ProcessResult r = runTraind(std::string("--model configs/models/regression.yaml ") +
                                      "--checkpoint-dir '' --max-steps " + flag);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("done: global step " + std::to_string(steps) + ","));
  }
}

TEST_CASE("traind check says where a run resumes, and warns of a checkpoint it would refuse") {
  const auto dir = freshTempDir("check-resume");
  const std::string spec =
      exampleSpec("regression.yaml") + "checkpoint: {dir: " + (dir / "ckpt").string() + "}\n";
  writeFile(dir / "sgd.yaml", spec);
  writeFile(dir / "adam.yaml", replaceAll(spec, "type: sgd", "type: adam"));
  ProcessResult r = runTraind("check --model " + (dir / "sgd.yaml").string());
  INFO(r.output);
  CHECK_THAT(r.output, Catch::Contains("resumes: nothing to resume in " + (dir / "ckpt").string() +
                                       ": a run starts afresh"));
  REQUIRE(runTraind("--model " + (dir / "sgd.yaml").string() + " --max-steps 10 --eval-every 0")
              .exit_code == 0);
  r = runTraind("check --model " + (dir / "sgd.yaml").string());
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("resumes: from " + (dir / "ckpt").string() +
                                       "/ckpt-0000000010 at global step 10\n") &&
                           !Catch::Contains("warning"));
  // Adam's slots are not in an SGD checkpoint: the run would stop at once.
  r = runTraind("check --model " + (dir / "adam.yaml").string());
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("warning: a run that starts before this changes stops at "
                                       "once: " +
                                       (dir / "ckpt").string() + "/ckpt-0000000010"));
  // The directory as a run takes it: --checkpoint-dir, a cluster spec's section.
  r = runTraind("check --model configs/models/regression.yaml --checkpoint-dir " +
                (dir / "ckpt").string());
  CHECK_THAT(r.output, Catch::Contains("resumes: from " + (dir / "ckpt").string()));
  writeFile(dir / "cluster.yaml",
            "cluster:\n  ps: [127.0.0.1:2221]\n  worker: [127.0.0.1:2222]\n"
            "checkpoint: {dir: " +
                (dir / "ckpt").string() + "}\n");
  r = runTraind("check --model configs/models/regression.yaml --cluster " +
                (dir / "cluster.yaml").string());
  INFO(r.output);
  CHECK_THAT(r.output, Catch::Contains("resumes: from " + (dir / "ckpt").string()));
  // A directory the run could not create: a file in the way. Nothing is made.
  writeFile(dir / "afile", "");
  r = runTraind("check --model configs/models/regression.yaml --checkpoint-dir " +
                (dir / "afile" / "ckpt").string());
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output,
             Catch::Contains("warning: a run that starts before this changes stops at once: "
                             "checkpoint directory " +
                             (dir / "afile" / "ckpt").string() +
                             ": cannot create it or write in it: " + (dir / "afile").string() +
                             " is not a directory") &&
                 Catch::Contains("summary directory " + (dir / "afile" / "ckpt").string() +
                                 "/summaries: cannot create it or write in it"));
  // A link to nothing where the directory would be: the run could not
  // create it there either.
  std::filesystem::create_symlink(dir / "nowhere" / "x", dir / "dangling");
  r = runTraind("check --model configs/models/regression.yaml --checkpoint-dir " +
                (dir / "dangling").string());
  CHECK_THAT(r.output,
             Catch::Contains((dir / "dangling").string() + " is a symbolic link to nothing"));
  // No checkpoints, as a run takes --checkpoint-dir '' too.
  r = runTraind("check --model configs/models/regression.yaml --checkpoint-dir ''");
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, !Catch::Contains("resumes:") && !Catch::Contains("summaries:"));
}

TEST_CASE("eval_every without a test set is said, not silently ignored") {
  const auto dir = freshTempDir("eval-no-test-set");
  const std::string fashion = "/usr/share/datasets/fashion-mnist/t10k-";
  writeFile(dir / "m.yaml",
            "input: [784]\nlayers: [{type: dense, units: 10}]\n"
            "optimizer: {type: sgd, learning_rate: 0.1}\n"
            "data:\n  train: {images: " +
                fashion + "images-idx3-ubyte.gz, labels: " + fashion +
                "labels-idx1-ubyte.gz}\n  batch_size: 32\ntraining: {epochs: 1}\n");
  const std::string run =
      "--model " + (dir / "m.yaml").string() + " --max-steps 2 --checkpoint-dir ''";
  ProcessResult r = runTraind(run + " --eval-every 1");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("training.eval_every (or --eval-every) is 1, but the spec "
                                       "names no test set (data.test): this run evaluates "
                                       "nothing"));
  r = runTraind(run);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, !Catch::Contains("evaluates nothing"));
}

TEST_CASE("a run resumed on another training set than its checkpoint's says so") {
  const auto dir = freshTempDir("other-training-set");
  const std::string spec = exampleSpec("regression.yaml");
  writeFile(dir / "a.yaml", spec);
  writeFile(dir / "b.yaml", replaceAll(spec, "points: 1000", "points: 1200"));
  const std::string run =
      " --max-steps 10 --eval-every 0 --checkpoint-dir " + (dir / "ckpt").string();
  REQUIRE(runTraind("--model " + (dir / "a.yaml").string() + run).exit_code == 0);
  CHECK_THAT(readFile(dir / "ckpt" / "ckpt-0000000010" / "manifest.json"),
             Catch::Contains("\"training_set\": \"1000 examples, CRC-32C 0x"));
  // The same set: nothing said.
  ProcessResult r =
      runTraind("--model " + (dir / "a.yaml").string() +
                " --max-steps 20 --eval-every 0 --checkpoint-dir " + (dir / "ckpt").string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, !Catch::Contains("another training set"));
  r = runTraind("--model " + (dir / "b.yaml").string() +
                " --max-steps 30 --eval-every 0 --checkpoint-dir " + (dir / "ckpt").string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("ckpt-0000000020 was trained on another training set "
                                       "(1000 examples, CRC-32C 0x") &&
                           Catch::Contains("; this run's: 1200 examples, CRC-32C 0x"));
}

TEST_CASE("traind check reads the data as a run would and names the field that does not fit") {
  const auto dir = freshTempDir("check-data");
  const std::string spec = exampleSpec("regression.yaml");
  ProcessResult r = runTraind("check --model configs/models/regression.yaml");
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("data: 1000 training examples of [1], 200 test examples"));
  writeFile(dir / "big_batch.yaml", replaceAll(spec, "batch_size: 32", "batch_size: 5000"));
  r = runTraind("check --model " + (dir / "big_batch.yaml").string());
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("big_batch.yaml:15:15: data.batch_size"));
  CHECK_THAT(r.output, Catch::Contains(": data.batch_size: expected at most the training set's "
                                       "1000 examples, got 5000"));
  // With a cluster, a batch for each of its workers, as each worker checks.
  writeFile(dir / "half_batch.yaml", replaceAll(spec, "batch_size: 32", "batch_size: 600"));
  r = runTraind("check --model " + (dir / "half_batch.yaml").string() +
                " --cluster configs/clusters/local_sync.yaml");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("half_batch.yaml:15:15: data.batch_size: expected at most "
                                       "500 (the training set's 1000 examples shared by 2 "
                                       "workers, a batch each at least), got 600"));
  // Fewer examples than workers: the set is too small, whatever the batch.
  writeFile(dir / "one_point.yaml", replaceAll(replaceAll(spec, "batch_size: 32", "batch_size: 1"),
                                               "points: 1000", "points: 5"));
  writeFile(dir / "six.yaml",
            "cluster:\n  ps: [127.0.0.1:2221]\n  worker: " + localAddresses(2222, 6) + "\n");
  r = runTraind("check --model " + (dir / "one_point.yaml").string() + " --cluster " +
                (dir / "six.yaml").string());
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains(": data.synthetic: the training set's 5 examples are fewer "
                                       "than the cluster's 6 workers"));
  // A data file that refutes itself names the spec's entry and the file.
  const std::string mlp = exampleSpec("fashion_mlp.yaml");
  const std::string images = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
  REQUIRE(mlp.find(images) != std::string::npos);
  writeFile(dir / "short.idx", readFile(images).substr(0, 100));  // a gzip stream cut short
  writeFile(dir / "cut.yaml", replaceAll(mlp, images, (dir / "short.idx").string()));
  r = runTraind("check --model " + (dir / "cut.yaml").string());
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output,
             Catch::Contains("cut.yaml:20:5: data.test: " + (dir / "short.idx").string()));

  // Images that cannot fit the model or the memory are refused from their
  // header, before a pixel is read: the files hold none here.
  auto header = [](uint32_t count, uint32_t height, uint32_t width) {
    std::string bytes;
    for (uint32_t v : {0x00000803u, count, height, width})
      for (int shift = 24; shift >= 0; shift -= 8) bytes += char((v >> shift) & 0xff);
    return bytes;
  };
  writeFile(dir / "huge.idx", header(1, 40000, 40000));
  writeFile(dir / "huge.yaml", replaceAll(mlp, images, (dir / "huge.idx").string()));
  r = runTraind("check --model " + (dir / "huge.yaml").string());
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("huge.yaml:20:5: data.test: " + (dir / "huge.idx").string() +
                                       ": examples of shape [40000, 40000, 1] do not fit the "
                                       "model's input"));
  writeFile(dir / "many.idx", header(0x80000000u, 28, 28));
  writeFile(dir / "many.yaml", replaceAll(mlp, images, (dir / "many.idx").string()));
  // A run judges the data beside the model; check (which may run on
  // another machine) and eval the data alone: they must still hold it.
  r = runTraind("--model " + (dir / "many.yaml").string() + " --checkpoint-dir '' --max-steps 1");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("many.yaml:20:5: data.test: " + (dir / "many.idx").string() +
                                       ": 2147483648 examples of [28, 28, 1] take 3.1 TiB of "
                                       "memory as they load, beside "));
  CHECK_THAT(r.output, Catch::Contains("expected fewer examples (`limit` keeps the first N)"));
  const std::string alone = "many.yaml:20:5: data.test: " + (dir / "many.idx").string() +
                            ": 2147483648 examples of [28, 28, 1] take 3.1 TiB of memory as they "
                            "load";
  r = runTraind("check --model " + (dir / "many.yaml").string());
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains(alone + ", beside ") &&
                           Catch::Contains(" of the data before them, and this machine gives"));
  r = runDaemonBinary("trainctl", "eval --model " + (dir / "many.yaml").string() +
                                      " --checkpoint " + (dir / "none").string());
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains(alone + ", and this machine gives a process "));
}

TEST_CASE("bad input exits 2 with the file, line and field") {
  const auto dir = freshTempDir("bad");
  std::string spec = exampleSpec("fashion_cnn.yaml");
  writeFile(dir / "bad.yaml", replaceAll(spec, "filters: 64", "filters: -3"));
  ProcessResult r = runTraind("--model " + (dir / "bad.yaml").string());
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("bad.yaml:"));
  CHECK_THAT(r.output, Catch::Contains("filters"));
  CHECK_THAT(r.output, Catch::Contains("-3"));

  r = runTraind("--model " + (dir / "missing.yaml").string());
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("missing.yaml"));

  // A flag keeps the bounds of the spec field it stands in for, and says them.
  const std::pair<std::string, std::string> bad_flags[] = {
      {"--max-steps -4", "--max-steps: expected an integer from 1 to 4503599627370496, got '-4'"},
      {"--max-steps 4503599627370497",
       "--max-steps: expected an integer from 1 to 4503599627370496, got '4503599627370497'"},
      {"--threads 5000", "--threads: expected an integer from 0 to 1024, got '5000'"},
      {"--log-every 1.5", "--log-every: expected an integer 1 or more, got '1.5'"},
      {"--seed -1", "--seed: expected an integer 0 or more, got '-1'"}};
  for (const auto& [flag, message] : bad_flags) {
    r = runTraind("--model configs/models/fashion_cnn.yaml " + flag);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains(message));
  }

  // A checkpoint directory that cannot be one fails the run as it starts.
  writeFile(dir / "a-file", "x");
  r = runTraind("--model configs/models/fashion_mlp.yaml --max-steps 5 --checkpoint-dir " +
                (dir / "a-file").string());
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("checkpoint directory " + (dir / "a-file").string() +
                                       ": cannot create it"));
  CHECK_THAT(r.output, !Catch::Contains("step 1,"));

  // So does one it may not write in (sysfs takes no new entries, from root
  // either), as a directory of another owner or on a read-only mount.
  r = runTraind(
      "--model configs/models/fashion_mlp.yaml --max-steps 5 --checkpoint-dir "
      "/sys/kernel --summary-dir " +
      (dir / "summaries").string());
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("--checkpoint-dir: checkpoint directory /sys/kernel: "
                                       "cannot write in it"));
  CHECK_THAT(r.output, !Catch::Contains("step 1,"));

  // And one another run saves into: the two would replace each other's
  // checkpoints and remove each other's saves in progress.
  const std::string shared = (dir / "shared").string();
  BackgroundTraind first(
      "--model configs/models/fashion_mlp.yaml --max-steps 1000000 "
      "--threads 1 --eval-every 0 --log-every 20 --checkpoint-dir " +
          shared,
      dir / "first.log");
  REQUIRE(first.waitForOutput("step 20,", 60));
  r = runTraind("--model configs/models/fashion_mlp.yaml --max-steps 5 --checkpoint-dir " + shared);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output,
             Catch::Contains("checkpoint directory " + shared + " is in use by another run (pid " +
                             std::to_string(first.pid()) + ")"));
  first.signal(SIGTERM);
  CHECK(first.wait(60) == 0);
  // Free again once that run is gone, however it went.
  r = runTraind("--model configs/models/fashion_mlp.yaml --max-steps 5 --checkpoint-dir " + shared);
  CHECK(r.exit_code == 0);
}

TEST_CASE("images that do not fit an image input name data.train, even with as many values") {
  const auto dir = freshTempDir("input-shape");
  const std::string cnn = exampleSpec("fashion_cnn.yaml");
  REQUIRE(cnn.find("input: [28, 28, 1]") != std::string::npos);
  writeFile(dir / "m.yaml", replaceAll(cnn, "input: [28, 28, 1]", "input: [14, 56, 1]"));
  const ProcessResult r = runTraind("check --model " + (dir / "m.yaml").string());
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("data.train: /usr/share/datasets/fashion-mnist/"
                                       "train-images-idx3-ubyte.gz: examples of shape [28, 28, 1] "
                                       "do not fit the model's input [14, 56, 1]"));
}

TEST_CASE("random_crop padding of a flat input is held to the images' sides as they load") {
  // A flat input names no window: the spec cannot check the padding, the
  // images can (padding of a side or more trained on windows of zeros).
  const auto dir = freshTempDir("flat-crop-padding");
  const std::string mlp = exampleSpec("fashion_mlp.yaml");
  REQUIRE(mlp.find("  batch_size: 100\n") != std::string::npos);
  REQUIRE(mlp.find("input: [28, 28, 1]\nlayers:\n  - {type: flatten}\n") != std::string::npos);
  const std::string flat = replaceAll(mlp, "input: [28, 28, 1]\nlayers:\n  - {type: flatten}\n",
                                      "input: [784]\nlayers:\n");
  writeFile(dir / "m.yaml",
            replaceAll(flat, "  batch_size: 100\n",
                       "  batch_size: 100\n  augment: {random_crop: {padding: 28}}\n"));
  const ProcessResult r = runTraind("check --model " + (dir / "m.yaml").string());
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("data.augment.random_crop.padding: expected padding less "
                                       "than the window's height and width [28, 28] (the "
                                       "training images' of [28, 28, 1])") &&
                           Catch::Contains("got 28"));
}

TEST_CASE("an init_from checkpoint that is not there names the spec's line") {
  const auto dir = freshTempDir("init-from-missing");
  const std::string spec = exampleSpec("fashion_mlp.yaml") +
                           "init_from:\n  checkpoint: " + (dir / "nothing").string() +
                           "\n  layers: [hidden1]\n";
  writeFile(dir / "m.yaml", spec);
  const ProcessResult r = runTraind("--model " + (dir / "m.yaml").string() +
                                    " --max-steps 1 --threads 1 --checkpoint-dir ''");
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Matches("(.|\\n)*m\\.yaml:[0-9]+:[0-9]+: init_from\\.checkpoint: "
                                      ".*nothing: no such checkpoint(.|\\n)*"));
}

TEST_CASE("an init_from layer of another shape than the checkpoint's names the spec's line") {
  const auto dir = freshTempDir("init-from-shape");
  const std::string mlp = exampleSpec("fashion_mlp.yaml");
  writeFile(dir / "base.yaml", mlp);
  REQUIRE(runTraind("--model " + (dir / "base.yaml").string() +
                    " --max-steps 1 --threads 1 --eval-every 0 --checkpoint-dir " +
                    (dir / "base").string())
              .exit_code == 0);
  REQUIRE(mlp.find("units: 300") != std::string::npos);
  writeFile(dir / "m.yaml", replaceAll(mlp, "units: 300", "units: 200") +
                                "init_from:\n  checkpoint: " + (dir / "base").string() +
                                "\n  layers: [hidden1]\n");
  const ProcessResult r = runTraind("--model " + (dir / "m.yaml").string() +
                                    " --max-steps 1 --threads 1 --checkpoint-dir ''");
  INFO(r.output);
  CHECK(r.exit_code == 2);
  // At the item of the list: `  layers: [hidden1]`, column 12.
  CHECK_THAT(r.output,
             Catch::Matches("(.|\\n)*m\\.yaml:[0-9]+:12: init_from\\.layers\\[0\\]: layer "
                            "'hidden1' does not fit the checkpoint's: .*ckpt-0000000001 "
                            "holds 'hidden1/kernel' of shape \\[784, 300\\], this "
                            "model's 'hidden1/kernel' is \\[784, 200\\](.|\\n)*"));
  // traind check asks the checkpoint's index the same, and warns.
  const ProcessResult check =
      runTraind("check --model " + (dir / "m.yaml").string() + " --checkpoint-dir ''");
  INFO(check.output);
  CHECK(check.exit_code == 0);
  CHECK_THAT(check.output, Catch::Contains("warning: a run that starts before this changes stops "
                                           "at once: ") &&
                               Catch::Contains("init_from.layers[0]: layer 'hidden1' does not "
                                               "fit the checkpoint's: "));
}

TEST_CASE(
    "a checkpoint without the optimizer state a spec needs is refused, one with more is not") {
  const auto dir = freshTempDir("other-optimizer");
  const std::string sgd = exampleSpec("fashion_mlp.yaml");
  REQUIRE(sgd.find("type: sgd") != std::string::npos);
  writeFile(dir / "sgd.yaml", sgd);
  writeFile(dir / "adam.yaml", replaceAll(sgd, "type: sgd", "type: adam"));
  const std::string flags = " --max-steps 5 --threads 1 --eval-every 0 --checkpoint-dir ";
  REQUIRE(runTraind("--model " + (dir / "sgd.yaml").string() + flags + (dir / "a").string())
              .exit_code == 0);
  const ProcessResult r =
      runTraind("--model " + (dir / "adam.yaml").string() + flags + (dir / "a").string());
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("ckpt-0000000005: the checkpoint holds no 'm' state of "
                                       "this spec's adam (beta1 0.9") &&
                           Catch::Contains("init_from"));
  // Adam's checkpoint holds more than sgd needs: sgd trains on from it.
  REQUIRE(runTraind("--model " + (dir / "adam.yaml").string() + flags + (dir / "b").string())
              .exit_code == 0);
  const ProcessResult more = runTraind("--model " + (dir / "sgd.yaml").string() +
                                       " --max-steps 8 --threads 1 --eval-every 0 "
                                       "--checkpoint-dir " +
                                       (dir / "b").string());
  INFO(more.output);
  CHECK(more.exit_code == 0);
  CHECK_THAT(more.output, Catch::Contains("steps 5..8"));  // resumed, not started afresh
  // ... and says what it leaves behind.
  CHECK_THAT(more.output, Catch::Contains("ckpt-0000000005: this spec's update rule (sgd, "
                                          "learning rate 0.1) has no use for the 'm' and 'v' "
                                          "state there: left behind"));
  CHECK_THAT(more.output, !Catch::Contains("ckpt-0000000008: the"));
}

TEST_CASE("a run whose checkpoint is past its end says there is nothing to train") {
  const auto dir = freshTempDir("past-end");
  const std::string flags =
      "--model configs/models/fashion_mlp.yaml --threads 1 --eval-every 0 "
      "--checkpoint-dir " +
      dir.string();
  REQUIRE(runTraind(flags + " --max-steps 5").exit_code == 0);
  const ProcessResult r = runTraind(flags + " --max-steps 3");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("nothing to train: the checkpoint is at step 5, the run "
                                       "ends at 3"));
  CHECK_THAT(r.output, Catch::Contains("done: global step 5, 0 steps"));
}

TEST_CASE("a checkpoint of another architecture is refused") {
  const auto dir = freshTempDir("other");
  REQUIRE(runTraind("--model configs/models/fashion_base.yaml --max-steps 10 --threads 1 "
                    "--eval-every 0 --checkpoint-dir " + dir.string()).exit_code == 0);
  const ProcessResult r = runTraind("--model configs/models/fashion_mlp.yaml --max-steps 10 "
                                    "--threads 1 --checkpoint-dir " + dir.string());
  INFO(r.output);
  CHECK(r.exit_code == 2);
  // Named where the directory was given: the flag here.
  CHECK_THAT(r.output, Catch::Contains("--checkpoint-dir: " + dir.string() + "/ckpt-") &&
                           Catch::Contains("the checkpoint is of another architecture") &&
                           Catch::Contains("point the checkpoint directory elsewhere"));
  // And what differs, the first three, as names and shapes.
  CHECK_THAT(r.output, Catch::Contains("'hidden2/bias' is [50] there, [100] here; ") &&
                           Catch::Contains("; 2 more)"));
  // An optimizer's slots are no variables of their own: an Adam checkpoint
  // differs in as many.
  const auto adam = freshTempDir("other-adam");
  writeFile(adam / "base.yaml",
            replaceAll(exampleSpec("fashion_base.yaml"), "type: sgd", "type: adam"));
  REQUIRE(runTraind("--model " + (adam / "base.yaml").string() +
                    " --max-steps 10 --threads 1 --eval-every 0 --checkpoint-dir " +
                    (adam / "ckpt").string())
              .exit_code == 0);
  const ProcessResult slots = runTraind(
      "check --model configs/models/fashion_mlp.yaml "
      "--checkpoint-dir " +
      (adam / "ckpt").string());
  INFO(slots.output);
  CHECK_THAT(slots.output,
             Catch::Contains("; 2 more)") && !Catch::Contains("/m'") && !Catch::Contains("/v'"));
}
