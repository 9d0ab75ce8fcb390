// trainctl against real traind processes: status, checkpoint and stop of a
// standalone run and of a local cluster over their ops endpoints, and the
// file commands (inspect, placement, eval) on what they left behind.
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/checkpoint.h"
#include "core/event_file.h"
#include "core/json.h"
#include "daemon/ops_client.h"
#include "test/traind_process.h"

using namespace traind;
using namespace traind::testing;

namespace {

ProcessResult runTrainctl(const std::string& args) { return runDaemonBinary("trainctl", args); }

// True once GET /healthz on 127.0.0.1:port answers 200.
bool waitHealthy(int port, double seconds) {
  const HostPort address{"127.0.0.1", uint16_t(port), {}};
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    try {
      if (requestOps(address, "GET", "/healthz", 1.0).status == 200) return true;
    } catch (const OpsUnreachable&) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

std::string address(int port) { return "127.0.0.1:" + std::to_string(port); }

// fashion_mlp without scheduled checkpoints: the only ones are asked for.
std::string writeModel(const std::filesystem::path& dir) {
  std::string spec = readFile(std::string(TRAIND_SOURCE_DIR) + "/configs/models/fashion_mlp.yaml");
  spec = replaceAll(spec, "every_steps: 600", "every_steps: 0");
  writeFile(dir / "model.yaml", spec);
  return (dir / "model.yaml").string();
}

}  // namespace

TEST_CASE("a command whose output cannot be written says so and fails") {
  // `trainctl inspect ... > report.txt` on a full disk: no empty report
  // taken for the answer.
  const auto dir = freshTempDir("full-output");
  for (const std::string command :
       {"trainctl --version", "trainctl placement --model configs/models/fashion_mlp.yaml --ps 2",
        "traind --version", "traind check --model configs/models/regression.yaml"}) {
    INFO(command);
    const std::string line = std::string("cd '") + TRAIND_SOURCE_DIR + "' && '" +
                             TRAIND_BINARY_DIR + "/daemon/'" + command + " > /dev/full 2> '" +
                             (dir / "stderr.txt").string() + "'";
    const int status = std::system(line.c_str());
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 1);
    CHECK_THAT(readFile(dir / "stderr.txt"), Catch::Contains("write error on standard output"));
  }
}

TEST_CASE("trainctl reads, checkpoints and stops a standalone run") {
  const auto dir = freshTempDir("standalone-ops");
  const std::string model = writeModel(dir);
  const int port = freePortRange(1);
  const std::string checkpoints = (dir / "ckpt").string();
  BackgroundTraind traind("--model " + model + " --max-steps 1000000 --threads 1 --eval-every 0 " +
                              "--log-every 50 --checkpoint-dir " + checkpoints + " --http " +
                              address(port),
                          dir / "traind.log");
  REQUIRE(waitHealthy(port, 60));
  INFO(traind.output());

  const ProcessResult status = runTrainctl("status --node " + address(port));
  INFO(status.output);
  CHECK(status.exit_code == 0);
  CHECK_THAT(status.output, Catch::Contains("NODE") && Catch::Contains("standalone") &&
                                Catch::Contains("training"));

  CHECK_FALSE(findLatestCheckpoint(checkpoints));
  const ProcessResult checkpoint = runTrainctl("checkpoint --node " + address(port));
  INFO(checkpoint.output);
  CHECK(checkpoint.exit_code == 0);
  CHECK_THAT(checkpoint.output, Catch::Contains("standalone: saved " + checkpoints + "/ckpt-"));
  REQUIRE(findLatestCheckpoint(checkpoints));

  const ProcessResult stop = runTrainctl("stop --node " + address(port));
  INFO(stop.output);
  CHECK(stop.exit_code == 0);
  CHECK(traind.wait(30) == 0);
  CHECK_THAT(traind.output(), Catch::Contains("stop requested by POST /stop from 127.0.0.1:"));

  const ProcessResult gone = runTrainctl("status --timeout 1 --node " + address(port));
  CHECK(gone.exit_code == 1);
  CHECK_THAT(gone.output, Catch::Contains("unreachable"));
  CHECK(runTrainctl("stop --timeout 1 --node " + address(port)).exit_code == 1);

  const CheckpointManifest manifest = readManifest(*findLatestCheckpoint(checkpoints));
  const ProcessResult inspect = runTrainctl("inspect " + checkpoints);
  INFO(inspect.output);
  CHECK(inspect.exit_code == 0);
  CHECK_THAT(inspect.output, Catch::Contains("model: fashion_mlp\nglobal step: " +
                                             std::to_string(manifest.global_step) + "\n") &&
                                 Catch::Contains("TENSOR") &&
                                 Catch::Contains("6 tensors, 266610 floats"));
  CHECK_THAT(inspect.output,
             Catch::Matches("(.|\\n)*hidden1/kernel +\\[784, 300\\] +235200\\n(.|\\n)*"));

  // The checkpoint written at the stop holds the parameters traind's own
  // final evaluation saw.
  const ProcessResult eval =
      runTrainctl("eval --threads 1 --model " + model + " --checkpoint " + checkpoints);
  INFO(eval.output);
  CHECK(eval.exit_code == 0);
  CHECK_THAT(eval.output, Catch::Contains(fmt::format("test loss = {:.4f}",
                                                      summaryValue(traind.output(), "test loss"))));
  CHECK_THAT(
      eval.output,
      Catch::Contains("(global step " + std::to_string(manifest.global_step) + "): test loss = ") &&
          Catch::Contains("test accuracy = 0.") && Catch::Contains("(10000 examples)"));

  // trainctl eval of the checkpoint with the model spec changed from `what` to `with`.
  auto evalWithSpec = [&](const std::string& name, const std::string& what,
                          const std::string& with) {
    const auto variant = dir / name;
    writeFile(variant, replaceAll(readFile(model), what, with));
    REQUIRE(readFile(variant) != readFile(model));
    return runTrainctl("eval --threads 1 --model " + variant.string() + " --checkpoint " +
                       checkpoints);
  };
  // Evaluation needs the parameters only: a spec with another optimizer reads them too.
  const ProcessResult other = evalWithSpec("adam.yaml", "type: sgd", "type: adam");
  INFO(other.output);
  CHECK(other.exit_code == 0);
  CHECK_THAT(other.output, Catch::Contains(fmt::format(
                               "test loss = {:.4f}", summaryValue(traind.output(), "test loss"))));
  // Nor the training set: a machine that evaluates may hold the test set alone.
  const ProcessResult no_training_set =
      evalWithSpec("elsewhere.yaml", "/usr/share/datasets/fashion-mnist/train-",
                   "/nonexistent/fashion-mnist/train-");
  INFO(no_training_set.output);
  CHECK(no_training_set.exit_code == 0);
  CHECK_THAT(no_training_set.output, Catch::Contains("(10000 examples)"));

  // Without a test set, the error points at the data section that lacks it.
  const ProcessResult no_test_set =
      evalWithSpec("untested.yaml",
                   "  test:\n"
                   "    images: /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz\n"
                   "    labels: /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz\n",
                   "");
  INFO(no_test_set.output);
  CHECK(no_test_set.exit_code == 2);
  CHECK_THAT(no_test_set.output,
             Catch::Contains("untested.yaml:16:3: data.test: expected a test set"));

  // Another architecture's spec is refused, pointing at the spec.
  const ProcessResult refused = evalWithSpec("wider.yaml", "units: 300", "units: 301");
  INFO(refused.output);
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.output,
             Catch::Contains("evaluate it with the model spec it was trained with"));
}

TEST_CASE("trainctl status says what a waiting node waits for") {
  const auto dir = freshTempDir("status-waiting");
  const int base = freePortRange(4);
  const std::filesystem::path cluster = dir / "cluster.yaml";
  writeFile(cluster, "cluster:\n  ps: " + localAddresses(base, 1) +
                         "\n  worker: " + localAddresses(base + 1, 1) +
                         "\nhttp:\n  ps: " + localAddresses(base + 3, 1) +
                         "\n  worker: " + localAddresses(base + 2, 1) + "\n");
  // No ps comes.
  BackgroundTraind chief("--job worker --task 0 --cluster " + cluster.string() + " --model " +
                             writeModel(dir) + " --threads 1 --checkpoint-dir ''",
                         dir / "worker0.log");
  ProcessResult status;
  for (int tries = 0; tries < 100; ++tries) {
    status = runTrainctl("status --node " + address(base + 2));
    if (status.output.find("waiting") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  INFO(status.output);
  CHECK(status.exit_code == 0);
  CHECK_THAT(status.output, Catch::Contains("worker 0  " + address(base + 2) +
                                            "  waiting: connecting to the ps tasks"));
  chief.signal(SIGTERM);
  CHECK(chief.wait(30) == 0);
}

TEST_CASE("trainctl reads and stops a local sync cluster, workers first") {
  const auto dir = freshTempDir("cluster-ops");
  const std::string model = writeModel(dir);
  const int base = freePortRange(6);
  const std::filesystem::path cluster = dir / "cluster.yaml";
  writeFile(cluster, "cluster:\n  ps: " + localAddresses(base, 1) +
                         "\n  worker: " + localAddresses(base + 1, 2) +
                         "\nhttp:\n  ps: " + localAddresses(base + 3, 1) + "\n  worker: " +
                         localAddresses(base + 4, 2) + "\ntraining:\n  mode: sync\n");
  const std::string common = " --cluster " + cluster.string() + " --model " + model +
                             " --max-steps 1000000 --threads 1 --eval-every 0 --checkpoint-dir " +
                             (dir / "ckpt").string();
  BackgroundTraind ps("--job ps --task 0" + common, dir / "ps0.log");
  BackgroundTraind chief("--job worker --task 0" + common, dir / "worker0.log");
  BackgroundTraind worker("--job worker --task 1" + common, dir / "worker1.log");
  auto logs = [&] { return ps.output() + chief.output() + worker.output(); };
  for (int port = base + 3; port < base + 6; ++port) {
    INFO(logs());
    REQUIRE(waitHealthy(port, 60));
  }

  const ProcessResult status = runTrainctl("status --cluster " + cluster.string());
  INFO(status.output);
  CHECK(status.exit_code == 0);
  CHECK_THAT(status.output, Catch::Contains("ps 0") && Catch::Contains("serving") &&
                                Catch::Contains("worker 1") && Catch::Contains("training"));

  const ProcessResult placement =
      runTrainctl("placement --model " + model + " --cluster " + cluster.string());
  INFO(placement.output);
  CHECK(placement.exit_code == 0);
  CHECK_THAT(placement.output, Catch::Contains("fashion_mlp: 266610 parameters on 1 ps task\n") &&
                                   Catch::Contains("ps 0: ") &&
                                   Catch::Contains("  hidden1/kernel (235200 floats)"));

  // The same nodes listed out of order: status says which is which, and
  // stop refuses before it stops any (it would have stopped the ps first).
  const std::filesystem::path swapped = dir / "swapped.yaml";
  writeFile(swapped, "cluster:\n  ps: " + localAddresses(base, 1) +
                         "\n  worker: " + localAddresses(base + 1, 2) +
                         "\nhttp:\n  ps: " + localAddresses(base + 4, 1) +
                         "\n  worker: [127.0.0.1:" + std::to_string(base + 3) +
                         ", 127.0.0.1:" + std::to_string(base + 5) + "]\n");
  const ProcessResult misread = runTrainctl("status --cluster " + swapped.string());
  INFO(misread.output);
  CHECK(misread.exit_code == 1);
  CHECK_THAT(misread.output, Catch::Contains("ps 0 (says it is worker 0)") &&
                                 Catch::Contains("worker 0 (says it is ps 0)"));
  const ProcessResult refused = runTrainctl("stop --cluster " + swapped.string());
  INFO(refused.output);
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.output, Catch::Contains("the http section lists nodes as other tasks"));

  const ProcessResult stop = runTrainctl("stop --cluster " + cluster.string());
  INFO(stop.output);
  INFO(logs());
  CHECK(stop.exit_code == 0);
  CHECK(chief.wait(30) == 0);
  CHECK(worker.wait(30) == 0);
  CHECK(ps.wait(30) == 0);
  CHECK_THAT(chief.output(), Catch::Contains("saved checkpoint"));
  CHECK(findLatestCheckpoint(dir / "ckpt"));

  // Stopped again, the job says it is gone, not that its ps tasks were left running.
  const ProcessResult again = runTrainctl("stop --cluster " + cluster.string());
  INFO(again.output);
  CHECK(again.exit_code == 1);
  CHECK_THAT(again.output, Catch::StartsWith("no node of the job answers: it has stopped "
                                             "already, or its ops endpoints cannot be reached") &&
                               !Catch::Contains("left running"));
}

namespace {

// 1 ps and its chief, each with an ops server (127.0.0.1:base + 2 and
// base + 3), and `more_workers` other workers (worker 1 at base + 4, its ops
// server at base + 5, ...), training async until stopped.
struct ChiefAndPs {
  explicit ChiefAndPs(const std::string& name, int more_workers = 0)
      : dir(freshTempDir(name)),
        cluster(dir / "cluster.yaml"),
        base(freePortRange(4 + 2 * more_workers)) {
    std::string workers = address(base + 1), workers_http = address(base + 3);
    for (int w = 1; w <= more_workers; ++w) {
      workers += ", " + address(base + 2 + 2 * w);
      workers_http += ", " + address(base + 3 + 2 * w);
    }
    writeFile(cluster, "cluster:\n  ps: " + localAddresses(base, 1) + "\n  worker: [" + workers +
                           "]\nhttp:\n  ps: " + localAddresses(base + 2, 1) + "\n  worker: [" +
                           workers_http + "]\ntraining:\n  mode: async\n");
    common = " --cluster " + cluster.string() + " --model " + writeModel(dir) +
             " --max-steps 1000000 --threads 1 --eval-every 0 --checkpoint-dir " +
             (dir / "ckpt").string();
    ps = std::make_unique<BackgroundTraind>("--job ps --task 0" + common, dir / "ps0.log");
    startChief();
    for (int w = 1; w <= more_workers; ++w)
      others.push_back(
          std::make_unique<BackgroundTraind>(fmt::format("--job worker --task {}{}", w, common),
                                             dir / fmt::format("worker{}.log", w)));
  }
  // The chief, started (again; its log goes on).
  void startChief() {
    chief =
        std::make_unique<BackgroundTraind>("--job worker --task 0" + common, dir / "worker0.log");
  }
  std::string stop(const std::string& flags) const {
    return "stop --cluster " + cluster.string() + " " + flags;
  }

  std::filesystem::path dir, cluster;
  int base;
  std::string common;  // the flags of every task
  std::unique_ptr<BackgroundTraind> ps, chief;
  std::vector<std::unique_ptr<BackgroundTraind>> others;  // worker 1, 2, ...
};

}  // namespace

TEST_CASE("trainctl stop leaves the ps running when the chief cannot checkpoint, unless forced") {
  ChiefAndPs job("stop-hung-chief");
  BackgroundTraind& ps = *job.ps;
  BackgroundTraind& chief = *job.chief;
  const int base = job.base;
  REQUIRE(waitHealthy(base + 3, 60));
  // Trained past its start: the ps holds steps no checkpoint has.
  REQUIRE(chief.waitForOutput(", loss = ", 60));

  // A hung chief takes no stop and writes no checkpoint: the ps, which holds
  // all the job trained, is left running, within the timeout given.
  chief.signal(SIGSTOP);
  const auto start = std::chrono::steady_clock::now();
  const ProcessResult hung = runTrainctl(job.stop("--timeout 3"));
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(hung.output);
  CHECK(hung.exit_code == 1);
  CHECK_THAT(
      hung.output,
      Catch::Contains("worker 0: unreachable") &&
          Catch::Contains("the ps tasks are left running: the chief (worker 0) did "
                          "not take the stop") &&
          Catch::Matches("(.|\n)*ps 0 \\(127.0.0.1:[0-9]+\\): at global step [1-9][0-9]*, in no "
                         "checkpoint(.|\n)*"));
  CHECK(took < 4.5);
  CHECK(waitHealthy(base + 2, 5));

  // Forced: the ps stops (once it has waited 5 s for the chief to go); the
  // chief, once it goes on, hears that the job is over and says that it
  // wrote no final checkpoint.
  const ProcessResult forced = runTrainctl(job.stop("--timeout 30 --force"));
  INFO(forced.output);
  CHECK(forced.exit_code == 1);
  CHECK_THAT(forced.output, Catch::Contains("ps 0 (" + address(base + 2) + "): stopping") &&
                                Catch::Contains("stopped, but for the nodes above"));
  CHECK_THAT(forced.output, Catch::Contains("--force: stopping the ps tasks, and what they hold "
                                            "that no checkpoint does:\n  ps 0 (" +
                                            address(base + 2) + "): at global step "));
  CHECK(ps.wait(30) == 0);
  chief.signal(SIGCONT);
  CHECK(chief.wait(30) == 0);
  INFO(chief.output());
  CHECK_THAT(chief.output(), Catch::Contains("no final checkpoint written"));
}

TEST_CASE("trainctl stop leaves the ps running when the chief's final save fails") {
  ChiefAndPs job("stop-failed-save");
  REQUIRE(waitHealthy(job.base + 3, 60));
  // The checkpoint directory becomes a file: the chief's final save fails.
  const std::filesystem::path checkpoints = job.dir / "ckpt";
  std::filesystem::rename(checkpoints, job.dir / "ckpt.away");
  writeFile(checkpoints, "not a directory\n");
  const ProcessResult stop = runTrainctl(job.stop("--timeout 30"));
  INFO(stop.output);
  CHECK(stop.exit_code == 1);
  CHECK_THAT(stop.output,
             Catch::Contains("worker 0 (" + address(job.base + 3) + "): stopping") &&
                 Catch::Contains("the ps tasks are left running: the chief (worker 0) stopped, "
                                 "but its last checkpoint does not hold what they do"));
  CHECK(job.chief->wait(30) == 1);
  CHECK_THAT(job.chief->output(),
             Catch::Contains("no checkpoint written into " + checkpoints.string() + ": "));
  CHECK(waitHealthy(job.base + 2, 5));

  // The directory back, the chief started again rejoins and saves it all.
  std::filesystem::remove(checkpoints);
  std::filesystem::rename(job.dir / "ckpt.away", checkpoints);
  job.startChief();
  REQUIRE(waitHealthy(job.base + 3, 60));
  const ProcessResult again = runTrainctl(job.stop("--timeout 30"));
  INFO(again.output);
  CHECK(again.exit_code == 0);
  CHECK(job.chief->wait(30) == 0);
  CHECK(job.ps->wait(30) == 0);
  INFO(job.chief->output());
  CHECK_THAT(job.chief->output(),
             Catch::Contains("joining the job") && Catch::Contains("saved checkpoint"));
}

TEST_CASE("trainctl stop stops the ps of a chief that stopped alone after its checkpoint") {
  ChiefAndPs job("stop-lone-chief");
  REQUIRE(waitHealthy(job.base + 3, 60));
  // The chief, stopped alone, writes its checkpoint and tells the ps, which
  // shows it in its status; no other worker trains on.
  job.chief->signal(SIGTERM);
  REQUIRE(job.chief->wait(30) == 0);
  const std::optional<std::filesystem::path> latest = findLatestCheckpoint(job.dir / "ckpt");
  REQUIRE(latest);
  const HostPort ps_ops{"127.0.0.1", uint16_t(job.base + 2), {}};
  const auto holds = [&] {
    return requestOps(ps_ops, "GET", "/status", 5.0).body.find(latest->string()) !=
           std::string::npos;
  };
  for (int i = 0; i < 20 && !holds(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::string status = requestOps(ps_ops, "GET", "/status", 5.0).body;
  INFO(status);
  CHECK(holds());

  // Nothing is lost by stopping the ps: trainctl does, unforced.
  const ProcessResult stop = runTrainctl(job.stop("--timeout 30"));
  INFO(stop.output);
  CHECK_THAT(stop.output,
             Catch::Contains("worker 0: unreachable") &&
                 Catch::Contains("the ps tasks hold nothing its last checkpoint does not") &&
                 Catch::Contains("in the chief's checkpoint " + latest->string()) &&
                 Catch::Contains("ps 0 (" + address(job.base + 2) + "): stopping"));
  CHECK(stop.exit_code == 1);  // the chief did not answer
  CHECK(job.ps->wait(30) == 0);
}

TEST_CASE("trainctl stop with a paused worker still stops the chief and the ps in time") {
  ChiefAndPs job("stop-paused-worker", 1);
  for (const int port : {job.base + 2, job.base + 3, job.base + 5}) REQUIRE(waitHealthy(port, 60));
  REQUIRE(job.others[0]->waitForOutput(", loss = ", 60));
  // A paused worker answers nothing: its stop takes a share of the time,
  // not all of it, and the chief and the ps are asked in what is left.
  job.others[0]->signal(SIGSTOP);
  const auto start = std::chrono::steady_clock::now();
  const ProcessResult stop = runTrainctl(job.stop("--timeout 20"));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(stop.output);
  CHECK(stop.exit_code == 1);  // worker 1 did not answer
  CHECK_THAT(stop.output,
             Catch::Contains("worker 1: unreachable") && Catch::Contains("the stop went out") &&
                 Catch::Contains("worker 0 (" + address(job.base + 3) + "): stopping") &&
                 Catch::Contains("ps 0 (" + address(job.base + 2) + "): stopping") &&
                 Catch::Contains("stopped, but for the nodes above") &&
                 !Catch::Contains("did not stop"));
  CHECK(seconds < 20);
  CHECK(job.chief->wait(30) == 0);
  CHECK_THAT(job.chief->output(), Catch::Contains("saved checkpoint"));
  // Let go, the worker hears the stop it was sent and ends cleanly, as the ps does.
  job.others[0]->signal(SIGCONT);
  CHECK(job.others[0]->wait(30) == 0);
  CHECK(job.ps->wait(30) == 0);
}

TEST_CASE("trainctl stop names the step a ps ends at when a worker trained until just before") {
  ChiefAndPs job("stop-fresh-ps-step", 1);
  REQUIRE(waitHealthy(job.base + 5, 60));
  REQUIRE(job.others[0]->waitForOutput(", loss = ", 60));
  // The chief gone, worker 1 trains on until trainctl stops it; the ps, left
  // running, is reported at the step worker 1 left it at, not at one its
  // status showed a moment before worker 1's last steps.
  job.chief->signal(SIGKILL);
  job.chief->wait(30);
  const ProcessResult stop = runTrainctl(job.stop("--timeout 30"));
  INFO(stop.output);
  CHECK(stop.exit_code == 1);
  CHECK(job.others[0]->wait(30) == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const HostPort ps_ops{"127.0.0.1", uint16_t(job.base + 2), {}};
  const std::string status = requestOps(ps_ops, "GET", "/status", 5.0).body;
  INFO(status);
  const JsonValue ps_status = parseJson(status, "ps 0's /status");
  const JsonValue* global_step = ps_status.find("global_step");
  REQUIRE(global_step);
  const int64_t step = global_step->asInt64().value_or(0);
  CHECK(step > 0);
  CHECK_THAT(stop.output,
             Catch::Contains("the ps tasks are left running") &&
                 Catch::Contains("ps 0 (" + address(job.base + 2) + "): at global step " +
                                 std::to_string(step) + ", in no checkpoint"));
  CHECK(runTrainctl(job.stop("--timeout 30 --force")).exit_code == 1);
  CHECK(job.ps->wait(30) == 0);
}

TEST_CASE("trainctl prints what a node says escaped and cut, whatever answers on its port") {
  // A server that answers each of `replies` connections with the next one.
  const int port = freePortRange(1);
  const int listener = listenOnLoopback(port, 4);
  REQUIRE(listener >= 0);
  auto http = [](const std::string& status, const std::string& body) {
    return fmt::format("HTTP/1.1 {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}", status,
                       body.size(), body);
  };
  const std::vector<std::string> replies = {
      http("500 Oops", "\x1b[2J\x1b[31mred\xff" + std::string(5000, 'x') + "\n"),
      http("200 OK",
           "{\"role\":\"worker\",\"task\":0,\"state\":\"tr\\u001b[2Jaining\","
           "\"global_step\":3,\"loss\":null,\"examples_per_sec\":null,"
           "\"last_checkpoint\":null,\"last_checkpoint_step\":null,"
           "\"stalled\":null}"),
      // Numbers no node says: a negative step, a negative rate; a huge loss fits its column.
      http("200 OK",
           "{\"role\":\"worker\",\"task\":0,\"state\":\"training\",\"global_step\":-5,"
           "\"loss\":null,\"examples_per_sec\":null,\"last_checkpoint\":null,"
           "\"last_checkpoint_step\":null,\"stalled\":null}"),
      http("200 OK",
           "{\"role\":\"worker\",\"task\":0,\"state\":\"training\",\"global_step\":5,"
           "\"loss\":1,\"examples_per_sec\":-1,\"last_checkpoint\":null,"
           "\"last_checkpoint_step\":null,\"stalled\":null}"),
      http("200 OK",
           "{\"role\":\"worker\",\"task\":0,\"state\":\"training\",\"global_step\":5,"
           "\"loss\":1e308,\"examples_per_sec\":10,\"last_checkpoint\":null,"
           "\"last_checkpoint_step\":null,\"stalled\":null}")};
  std::thread server([&] {
    for (const std::string& reply : replies) {
      // A trainctl that never came would leave accept() waiting: 30 s at most.
      pollfd incoming{listener, POLLIN, 0};
      if (poll(&incoming, 1, 30000) != 1) return;
      const int peer = accept(listener, nullptr, nullptr);
      if (peer < 0) return;
      char request[4096];
      (void)!read(peer, request, sizeof request);
      (void)!write(peer, reply.data(), reply.size());
      close(peer);
    }
  });
  const ProcessResult error = runTrainctl("status --node " + address(port));
  const ProcessResult odd = runTrainctl("status --node " + address(port));
  const ProcessResult negative_step = runTrainctl("status --node " + address(port));
  const ProcessResult negative_rate = runTrainctl("status --node " + address(port));
  const ProcessResult huge_loss = runTrainctl("status --node " + address(port));
  server.join();
  close(listener);
  INFO(error.output + odd.output);
  CHECK(error.exit_code == 1);
  CHECK_THAT(error.output, Catch::Contains("answered 500: \\x1b[2J\\x1b[31mred\\xff"));
  CHECK_THAT(error.output, Catch::Contains("xxx ...)"));  // a long answer cut in the table
  CHECK(odd.exit_code == 0);
  CHECK_THAT(odd.output, Catch::Contains("tr\\x1b[2Jaining"));
  for (const ProcessResult* r : {&error, &odd}) CHECK(r->output.find('\x1b') == std::string::npos);
  CHECK(negative_step.exit_code == 1);
  CHECK_THAT(negative_step.output,
             Catch::Contains("expected 'global_step' to be a non-negative integer, got -5"));
  CHECK(negative_rate.exit_code == 1);
  CHECK_THAT(negative_rate.output, Catch::Contains("expected 'examples_per_sec' to be a finite "
                                                   "number of at least 0, got -1"));
  CHECK(huge_loss.exit_code == 0);
  CHECK_THAT(huge_loss.output, Catch::Contains(" 1e+308 "));
}

TEST_CASE("trainctl placement counts each ps task's parameters, and its padding apart") {
  const ProcessResult r = runTrainctl("placement --model configs/models/fashion_mlp.yaml --ps 2");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  // ps 1 holds 119010 parameters in pieces that each start on a 64-byte
  // line; the two figures add up to the model's 266610 only without it.
  CHECK_THAT(r.output,
             Catch::Contains("fashion_mlp: 266610 parameters on 2 ps tasks\n"
                             "ps 0: 147600 floats (0.56 MiB)\n") &&
                 Catch::Contains("ps 1: 119010 floats (0.45 MiB, 119040 floats with each piece "
                                 "aligned to 64 bytes)\n"));
}

TEST_CASE("trainctl refuses bad input with exit code 2") {
  const std::string no_http = std::string(TRAIND_SOURCE_DIR) + "/configs/clusters/local_async.yaml";
  ProcessResult r = runTrainctl("status --cluster " + no_http);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("no http addresses (http.ps and http.worker)"));
  r = runTrainctl("status --node localhost");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("--node: expected host:port, got 'localhost'"));
  r = runTrainctl("status --node '[::1]'");  // quoted as given, brackets and all
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("--node: expected [ipv6]:port, got '[::1]'"));
  CHECK(runTrainctl("status").exit_code == 2);
  r = runTrainctl("frobnicate");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output,
             Catch::Contains("trainctl: unknown command 'frobnicate': expected one of "
                             "status, stop, checkpoint, inspect, placement, eval, import, export"));
  const auto dir = freshTempDir("bad-ops");
  r = runTrainctl("inspect " + (dir / "nothing").string());
  CHECK(r.exit_code == 2);
  writeFile(dir / "empty.tfrecord", "");
  r = runTrainctl("inspect " + (dir / "empty.tfrecord").string());
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("empty.tfrecord: an empty file: no TFRecord file's "
                                       "records, nor a checkpoint"));
  r = runTrainctl("placement --model configs/models/fashion_mlp.yaml");
  CHECK(r.exit_code == 2);
  r = runTrainctl("placement --model configs/models/fashion_mlp.yaml --ps 0");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("--ps: expected an integer from 1 to 65536, got '0'"));
  r = runTrainctl("status --node 127.0.0.1:1 --timeout 1e300");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("--timeout: expected seconds above 0 and at most 604800"));
  CHECK(runTrainctl("--help").exit_code == 0);

  // Nobody on the port: not bad input, a node that cannot be asked.
  const std::string nobody = address(freePortRange(1));
  r = runTrainctl("checkpoint --node " + nobody + " --timeout 2");
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::StartsWith(nobody + ": unreachable (" + nobody + ": "));
}

TEST_CASE("trainctl stop says what is lost when a ps restarted empty beside one that trained") {
  // 2 ps and the chief: ps 1 killed and started again holds nothing, so a
  // chief started again restores the checkpoint into both; ps 0's steps
  // since are lost whatever is done, not kept by starting the chief.
  const auto dir = freshTempDir("stop-ps-empty");
  const int base = freePortRange(6);
  const auto cluster = dir / "cluster.yaml";
  writeFile(cluster, "cluster:\n  ps: " + localAddresses(base, 2) +
                         "\n  worker: " + localAddresses(base + 2, 1) +
                         "\nhttp:\n  ps: " + localAddresses(base + 3, 2) + "\n  worker: " +
                         localAddresses(base + 5, 1) + "\ntraining:\n  mode: async\n");
  const std::string common = " --cluster " + cluster.string() + " --model " + writeModel(dir) +
                             " --max-steps 1000000 --threads 1 --eval-every 0 --checkpoint-dir " +
                             (dir / "ckpt").string();
  BackgroundTraind ps0("--job ps --task 0" + common, dir / "ps0.log");
  auto ps1 = std::make_unique<BackgroundTraind>("--job ps --task 1" + common, dir / "ps1.log");
  BackgroundTraind chief("--job worker --task 0" + common, dir / "worker0.log");
  REQUIRE(chief.waitForOutput(", loss = ", 60));
  ps1->signal(SIGKILL);
  CHECK(ps1->wait(30) == 128 + SIGKILL);
  CHECK(chief.wait(60) == 1);  // its ps is lost
  ps1 = std::make_unique<BackgroundTraind>("--job ps --task 1" + common, dir / "ps1-again.log");
  REQUIRE(ps1->waitForOutput("waiting for the chief", 60));
  const ProcessResult stop = runTrainctl("stop --cluster " + cluster.string() + " --timeout 30");
  INFO(stop.output);
  CHECK(stop.exit_code == 1);
  CHECK_THAT(
      stop.output,
      Catch::Contains("ps 1 (" + address(base + 4) + "): holds no parameters yet (restarted") &&
          Catch::Contains("what the others trained since it is lost either way") &&
          !Catch::Contains("it rejoins the job"));
  const ProcessResult forced = runTrainctl("stop --cluster " + cluster.string() + " --force");
  INFO(forced.output);
  CHECK(ps0.wait(30) == 0);
  CHECK(ps1->wait(30) == 0);
}

TEST_CASE("trainctl stop does not blame the chief's save for a ps it cannot ask") {
  ChiefAndPs job("stop-ps-unasked");
  REQUIRE(waitHealthy(job.base + 3, 60));
  // The cluster as trainctl reads it names an ops port where nothing
  // answers for the ps: the chief stops and saves, the ps cannot be asked.
  const std::filesystem::path elsewhere = job.dir / "elsewhere.yaml";
  writeFile(elsewhere, replaceAll(readFile(job.cluster), address(job.base + 2),
                                  address(freePortRange(1))));
  const ProcessResult stop = runTrainctl("stop --cluster " + elsewhere.string() + " --timeout 30");
  INFO(stop.output);
  CHECK(stop.exit_code == 1);
  CHECK_THAT(stop.output, Catch::Contains("no ps task was stopped: the chief (worker 0) stopped, "
                                          "but some ps tasks cannot be asked whether its last "
                                          "checkpoint holds what they do (down, or their ops "
                                          "endpoints cannot be reached from here)") &&
                              !Catch::Contains("did its final save fail?"));
  CHECK(job.chief->wait(30) == 0);
  CHECK_THAT(job.chief->output(), Catch::Contains("saved checkpoint"));
  job.ps->signal(SIGTERM);
  CHECK(job.ps->wait(30) == 0);
}

TEST_CASE("trainctl stop asks nothing of a job whose http section lists another program's port") {
  ChiefAndPs job("stop-foreign");
  REQUIRE(waitHealthy(job.base + 3, 60));
  // A web server where the chief's ops endpoint should be: it answers every
  // request with a page and 200, and keeps the connection open after it.
  const int port = freePortRange(1);
  const int listener = listenOnLoopback(port, 8);
  REQUIRE(listener >= 0);
  std::atomic<bool> done{false};
  std::string requests;  // what it was asked, the server thread's until joined
  std::thread server([&] {
    const std::string page = "<html>it works</html>";
    const std::string answer =
        fmt::format("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n{}",
                    page.size(), page);
    std::vector<int> open;
    while (!done) {
      pollfd incoming{listener, POLLIN, 0};
      if (poll(&incoming, 1, 100) != 1) continue;
      const int peer = accept(listener, nullptr, nullptr);
      if (peer < 0) continue;
      char request[4096];
      const ssize_t n = read(peer, request, sizeof request);
      if (n > 0) requests.append(request, size_t(n));
      (void)!write(peer, answer.data(), answer.size());
      open.push_back(peer);
    }
    for (const int peer : open) close(peer);
  });
  const std::filesystem::path wrong = job.dir / "wrong.yaml";
  writeFile(wrong, replaceAll(readFile(job.cluster), address(job.base + 3), address(port)));
  const auto start = std::chrono::steady_clock::now();
  const ProcessResult stop = runTrainctl("stop --cluster " + wrong.string() + " --timeout 30");
  const ProcessResult status = runTrainctl("status --cluster " + wrong.string());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  done = true;
  server.join();
  close(listener);
  INFO(stop.output + status.output + requests);
  CHECK(stop.exit_code == 2);
  CHECK_THAT(
      stop.output,
      Catch::Contains("no traind node answers at some of the addresses given") &&
          Catch::Contains("worker 0 (" + address(port) + "): no traind node answers there (") &&
          Catch::Contains("nothing was asked of any node"));
  CHECK(requests.find("POST") == std::string::npos);
  CHECK(status.exit_code == 1);
  CHECK_THAT(status.output, Catch::Contains("no traind node answers there ("));
  CHECK(seconds < 20);  // answers heard at their length, not at a close that never came
  // Nothing was stopped: the job, asked where it is, stops as it should.
  CHECK(job.ps->wait(0) == -1);
  CHECK(job.chief->wait(0) == -1);
  CHECK(runTrainctl(job.stop("--timeout 60")).exit_code == 0);
  CHECK(job.chief->wait(30) == 0);
  CHECK(job.ps->wait(30) == 0);
}

TEST_CASE(
    "trainctl import takes over a TensorFlow job's checkpoint, and traind trains on from it") {
  const auto dir = freshTempDir("import");
  const std::string tensorflow =
      std::string(TRAIND_SOURCE_DIR) + "/test/data/tensorflow_checkpoint";
  const std::string model = (dir / "model.yaml").string();
  // 2x2 images of two classes: the fixture's model takes 4 inputs.
  auto idx = [](std::vector<uint32_t> header, const std::string& bytes) {
    std::string file;
    for (uint32_t v : header)
      for (int shift = 24; shift >= 0; shift -= 8) file += char((v >> shift) & 0xff);
    return file + bytes;
  };
  std::string pixels, labels;
  for (int i = 0; i < 16; ++i) {
    pixels += std::string(4, char(i % 2 ? 200 : 20));
    labels += char(i % 2);
  }
  writeFile(dir / "images.idx", idx({0x803, 16, 2, 2}, pixels));
  writeFile(dir / "labels.idx", idx({0x801, 16}, labels));
  // A spec with Adam, the fixture's optimizer (which has taken no step yet).
  auto writeSpec = [&](const std::string& layers) {
    writeFile(model, "name: from_tensorflow\nseed: 3\ninput: [4]\nlayers:\n" + layers +
                         "optimizer: {type: adam, learning_rate: 0.01}\ndata:\n  train: {images: " +
                         (dir / "images.idx").string() +
                         ", labels: " + (dir / "labels.idx").string() +
                         "}\n  batch_size: 8\ntraining: {max_steps: 3}\ncheckpoint: {dir: " +
                         (dir / "ckpt").string() + "}\n");
  };
  const std::string fixture_layers =
      "  - {type: dense, name: hidden, units: 3, activation: relu}\n"
      "  - {type: dense, name: out, units: 2}\n";

  // A layer the checkpoint lacks is named, with where it was looked for.
  writeSpec(fixture_layers + "  - {type: dense, name: output, units: 2}\n");
  ProcessResult r = runTrainctl("import --model " + model + " --scope net " + tensorflow);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output,
             Catch::Contains("no tensor 'net/output/kernel' for 'output/kernel' (--scope net)"));

  // The fixture's layers: its global step says 1200, its Adam has taken no step.
  writeSpec(fixture_layers);
  for (const auto& [flags, error] : std::vector<std::pair<std::string, std::string>>{
           {"--scope net/",
            "--scope 'net/': expected a variable scope without a leading, trailing or "
            "doubled '/', such as net"},
           {"--scope net//a",
            "--scope 'net//a': expected a variable scope without a leading, "
            "trailing or doubled '/', such as net"},
           {"--layer out=net/out/", "--layer 'out=net/out/': expected NAME=PREFIX"},
           {"--layer outs=net/out",
            "--layer 'outs=net/out': 'outs' is not a dense or conv2d layer"},
           {"--layer out=a --layer out=b", "--layer 'out=b': layer 'out' is given twice"},
           {"--global-step -1", "--global-step: expected an integer from 0 to 9007199254740992"},
           {"--checkpoint-dir ''", "--checkpoint-dir: expected a directory, got ''"}}) {
    INFO(flags);
    r = runTrainctl("import --model " + model + " " + flags + " " + tensorflow);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains(error));
  }
  CHECK(!std::filesystem::exists(dir / "ckpt"));  // nothing written by a refused import
  r = runTrainctl("import --model " + model + " --scope net " + tensorflow);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("Adam's beta1_power 0.9 and beta2_power 0.999 are not "
                                       "those of global step 1200"));
  r = runTrainctl("import --model " + model + " --scope net --global-step 0 " + tensorflow);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("4 variables from " + tensorflow +
                                       "/model.ckpt-1200 at global step 0"));
  CHECK_THAT(r.output, Catch::Contains("'v' state from <variable>/Adam_1"));
  const std::vector<float> imported_bias = {2, 2.125f, 2.25f};  // the fixture's values
  CHECK(readCheckpointTensor(dir / "ckpt", "hidden/bias") == imported_bias);
  // Once: a directory with checkpoints belongs to a run.
  r = runTrainctl("import --model " + model + " --scope net --global-step 0 " + tensorflow);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("already holds checkpoints (ckpt-0000000000)"));
  // A spec whose data a run would refuse (3x3 images for 4 inputs): the
  // import is written, and the run it names is not said to train on.
  writeFile(dir / "images3.idx", idx({0x803, 16, 3, 3}, std::string(16 * 9, char(20))));
  const std::string other_images = (dir / "other_images.yaml").string();
  writeFile(other_images, replaceAll(readFile(model), (dir / "images.idx").string(),
                                     (dir / "images3.idx").string()));
  const std::string other = (dir / "other").string();
  r = runTrainctl("import --model " + other_images +
                  " --scope net --global-step 0 --checkpoint-dir " + other + " " + tensorflow);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("wrote " + other +
                                       "/ckpt-0000000000\nwarning: `traind "
                                       "--model " +
                                       other_images + " --checkpoint-dir " + other +
                                       "` would stop at once: ") &&
                           Catch::Contains("images3.idx"));
  CHECK_THAT(r.output, !Catch::Contains("trains on from it"));

  r = runTraind("--model " + model);
  CHECK(r.exit_code == 0);
  CHECK(std::filesystem::exists(dir / "ckpt" / "ckpt-0000000003"));
  CHECK(readCheckpointTensor(dir / "ckpt", "hidden/bias") != imported_bias);

  // And back: the run's checkpoint as the TensorFlow job's, which an import takes again.
  const std::string exported = (dir / "tf" / "model.ckpt-3").string();
  r = runTrainctl("export --model " + model + " --checkpoint " + (dir / "ckpt").string() +
                  " --scope net " + exported);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("wrote " + exported +
                                       " (15 tensors: 4 variables, their optimizer slots (m, "
                                       "v), Adam's beta1_power and beta2_power, the global "
                                       "step) from "));
  r = runTrainctl("inspect " + (dir / "tf").string());
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("global step: 3"));
  CHECK_THAT(r.output, Catch::Contains("net/hidden/kernel/Adam_1  float32  [4, 3]"));
  r = runTrainctl("export --model " + model + " --checkpoint " + (dir / "ckpt").string() +
                  " --scope net " + exported);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains(exported + ".index is there already"));
  r = runTrainctl("export --model " + model + " --checkpoint " + (dir / "ckpt").string() +
                  " --scope net --layer hidden=net/out " + (dir / "tf2" / "m").string());
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("'hidden/kernel' and 'out/kernel' would both be saved as "
                                       "'net/out/kernel': give each layer a prefix of its own"));
  // A spec of another optimizer than the checkpoint's: an export's advice, not a resume's.
  writeFile(dir / "momentum.yaml",
            replaceAll(readFile(model), "optimizer: {type: adam, learning_rate: 0.01}",
                       "optimizer: {type: momentum, learning_rate: 0.01, momentum: 0.9}"));
  r = runTrainctl("export --model " + (dir / "momentum.yaml").string() + " --checkpoint " +
                  (dir / "ckpt").string() + " " + (dir / "tf3" / "m").string());
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("holds no 'momentum' state of this spec's momentum") &&
                           Catch::Contains("Export it with the spec it was trained with") &&
                           !Catch::Contains("Resuming"));
  // One of sgd, which keeps no state: exported, Adam's state left out, said.
  writeFile(dir / "sgd.yaml",
            replaceAll(readFile(model), "optimizer: {type: adam, learning_rate: 0.01}",
                       "optimizer: {type: sgd, learning_rate: 0.01}"));
  r = runTrainctl("export --model " + (dir / "sgd.yaml").string() + " --checkpoint " +
                  (dir / "ckpt").string() + " " + (dir / "tf4" / "m").string());
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("(5 tensors: 4 variables, the global step)") &&
                           Catch::Contains("left out: the 'm' and 'v' state of the checkpoint, "
                                           "which this spec's update rule (sgd, learning rate "
                                           "0.01) does not keep"));
  r = runTrainctl("import --model " + model + " --scope net --checkpoint-dir " +
                  (dir / "again").string() + " " + (dir / "tf").string());
  CHECK(r.exit_code == 0);
  CHECK(readCheckpointTensor(dir / "again", "hidden/bias") ==
        readCheckpointTensor(dir / "ckpt", "hidden/bias"));

  r = runTrainctl("inspect " + tensorflow);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("global step: 1200"));
  CHECK_THAT(r.output, Catch::Contains("net/partitioned           float32  [150, 2] in 2 parts"));
  CHECK_THAT(r.output, !Catch::Contains("object graph"));
  // An object-based checkpoint also lists the paths init_from's `from` takes.
  r = runTrainctl("inspect " + std::string(TRAIND_SOURCE_DIR) + "/test/data/keras_checkpoint/ckpt");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("object graph: each variable's paths"));
  // A line of it, found without a regex over the whole output: libstdc++'s
  // recursion per character overflows the stack under AddressSanitizer.
  const std::regex line(
      "model/_functional/_operations/1/_kernel +optimizer/_trainable_variables/"
      "0/.ATTRIBUTES/VARIABLE_VALUE");
  std::istringstream lines(r.output);
  bool listed = false;
  for (std::string l; std::getline(lines, l);) listed = listed || std::regex_match(l, line);
  CHECK(listed);
  // And what import would take of its optimizer.
  CHECK_THAT(r.output, Catch::EndsWith("\nKeras 3 optimizer under optimizer at step 1200, its "
                                       "step count named 'adam/iteration'; slots '_momentums', "
                                       "'_velocities' of 4 variables\n"));
  r = runTrainctl("inspect " + std::string(TRAIND_SOURCE_DIR) +
                  "/test/data/keras2_checkpoint/ckpt");
  CHECK_THAT(r.output, Catch::EndsWith("\nKeras 2 optimizer under optimizer at step 1200, its "
                                       "step count named 'RMSprop/iter'; slots 'rms', "
                                       "'momentum'\n"));
  r = runTrainctl("inspect " + std::string(TRAIND_SOURCE_DIR) +
                  "/test/data/keras211_checkpoint/ckpt");
  CHECK_THAT(r.output, Catch::EndsWith("\nKeras 2.11 optimizer under optimizer at step 1200, its "
                                       "slots named after 'SGD'; slots 'momentums' of 4 "
                                       "variables\n"));
}

TEST_CASE("trainctl inspect shows a TFRecord file's records and its first record's features") {
  // Written by TensorFlow (test/make_tfrecord_fixture.py).
  const std::string fixture = std::string(TRAIND_SOURCE_DIR) + "/test/data/tfrecord/";
  ProcessResult r = runTrainctl("inspect " + fixture + "images-1.tfrecord.gz");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("images-1.tfrecord.gz (gzip)\n5 records, "));
  CHECK_THAT(r.output, Catch::Contains("FEATURE    KIND    VALUES  FIRST"));
  CHECK_THAT(r.output, Catch::Contains("image_raw  bytes   1       24 bytes"));
  CHECK_THAT(r.output, Catch::Contains("label      int64s  1       7"));
  r = runTrainctl("inspect " + fixture + "regression.tfrecord");
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("regression.tfrecord (raw)\n3 records, "));
  CHECK_THAT(r.output, Catch::Contains("x        floats  2       0"));
  // An encoded image shows its own shape: the names build_image_data.py gives.
  r = runTrainctl("inspect " + fixture + "jpeg.tfrecord");
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Matches("(.|\n)*image/encoded +bytes +1 +[0-9]+ bytes, a JPEG "
                                      "image of \\[4, 3, 3\\]\n(.|\n)*"));
  CHECK_THAT(r.output, Catch::Contains("image/class/label"));

  const auto dir = freshTempDir("inspect-records");
  writeFile(dir / "cut", readFile(fixture + "images-0.tfrecord").substr(0, 300));
  r = runTrainctl("inspect " + (dir / "cut").string());
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains((dir / "cut").string() +
                                       ": record 2 at byte 252: the record declares 110 bytes"));
  // A first record whose header is damaged is a TFRecord file's fault all
  // the same, as is any other file's.
  std::string damaged = readFile(fixture + "images-0.tfrecord");
  damaged[9] ^= 1;  // the CRC of the first record's length
  writeFile(dir / "damaged", damaged);
  r = runTrainctl("inspect " + (dir / "damaged").string());
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains((dir / "damaged").string() +
                                       ": neither a TFRecord file (record 0 at byte 0: the CRC "
                                       "of the length does not match"));
  CHECK_THAT(r.output, Catch::Contains(") nor a checkpoint, which is a directory"));
  // TensorBoard's event files are TFRecord files too, of Event messages.
  const EventFileWriter events(dir / "summaries");
  r = runTrainctl("inspect " + events.path().string());
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output,
             Catch::Contains(events.path().string() +
                             ": record 0 at byte 0: expected a tf.train.Example message, got "));
}
