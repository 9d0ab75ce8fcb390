// traind: a node of a training cluster, or the whole training loop in one
// process.
//
//   traind --model configs/models/fashion_cnn.yaml [--max-steps N] ...      (standalone)
//   traind --cluster c.yaml --model m.yaml --job ps --task 0                (a ps task)
//   traind --cluster c.yaml --model m.yaml --job worker --task 0            (the chief)
//   traind check --model configs/models/fashion_cnn.yaml
//
// TRAIND_JOB and TRAIND_TASK stand in for --job and --task (containers,
// templated systemd units). --http HOST:PORT (or the cluster spec's http
// section) serves /healthz, /metrics and /status (docs/operations.md).
//
// Exit codes: 0 done (or stopped cleanly by SIGINT/SIGTERM/SIGHUP), 2 bad
// configuration or input, 3 the run diverged (core/error.h: Diverged), 1
// another runtime failure.
#include <malloc.h>
#include <omp.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>

#include "core/cluster_spec.h"
#include "core/device_name.h"
#include "core/float_environment.h"
#include "core/layer_graph.h"
#include "core/memory_need.h"
#include "core/model_state.h"
#include "core/printable.h"
#include "core/stage_plan.h"
#include "daemon/cluster_fit.h"
#include "daemon/cluster_roles.h"
#include "daemon/concurrent_steps.h"
#include "daemon/flag_checks.h"
#include "daemon/host_threads.h"
#include "daemon/logging.h"
#include "daemon/model_check.h"
#include "daemon/node_metrics.h"
#include "daemon/ops_server.h"
#include "daemon/release.h"
#include "daemon/standalone.h"
#include "daemon/standard_output.h"
#include "daemon/stop_request.h"
#include "daemon/stop_signals.h"
#include "daemon/this_host.h"
#include "daemon/training_data.h"
#include "devices/device_list.h"
#include "devices/model_replica.h"

namespace {

traind::StopRequest g_stop;
// Set by POST /checkpoint, cleared by the training loop when it checkpoints.
std::atomic<bool> g_checkpoint_requested{false};

// glibc returns big freed blocks to the kernel and faults them in again on
// the next allocation; keep them (see ../shared/onednn-notes.md, Malloc).
void keepFreedMemory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

struct RunFlags {
  std::string model;
  std::optional<int64_t> max_steps, log_every, summary_every, eval_every;
  std::optional<std::string> checkpoint_dir;
  std::optional<std::string> summary_dir;
  std::optional<int> threads;
  std::optional<std::string> devices;
  std::optional<uint64_t> seed;
  std::string cluster;
  std::string job;
  std::optional<int> task;
  std::optional<std::string> http;
  std::optional<int64_t> stall_seconds;
};

// --devices checked as training.devices is, before anything loads.
CLI::Validator deviceListFlag() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        try {
          traind::checkDeviceList(traind::splitDeviceList(text));
          return {};
        } catch (const traind::InputError& e) {
          return e.what();
        }
      },
      "DEVICES");
}

void applyFlags(const RunFlags& flags, traind::ModelSpec& spec) {
  if (flags.max_steps) {
    spec.training.max_steps = *flags.max_steps;
    spec.training.epochs = 0;
  }
  if (flags.log_every) spec.training.log_every = *flags.log_every;
  if (flags.summary_every) spec.training.summary_every = *flags.summary_every;
  if (flags.eval_every) spec.training.eval_every = *flags.eval_every;
  if (flags.checkpoint_dir) {
    spec.checkpoint.dir = *flags.checkpoint_dir;
    spec.checkpoint.dir_location = traind::SourceLocation{.file = "--checkpoint-dir"};
  }
  if (flags.summary_dir) {
    spec.training.summary_dir = *flags.summary_dir;
    spec.training.summary_dir_location = traind::SourceLocation{.file = "--summary-dir"};
  }
  if (flags.threads) spec.training.threads = *flags.threads;
  if (flags.devices) {
    spec.training.devices = traind::splitDeviceList(*flags.devices);
    spec.training.devices_location = traind::SourceLocation{.file = "--devices"};
  }
  if (flags.seed) spec.seed = *flags.seed;
}

void addRunFlags(CLI::App& app, RunFlags& flags) {
  // A flag given twice takes the last value, so that a wrapper's defaults
  // (scripts/demo.sh, a unit's ExecStart) can be overridden by appending.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--model,-m", flags.model, "model spec (YAML)")
      ->required()
      ->check(traind::fileFlag());
  app.add_option("--max-steps", flags.max_steps,
                 "train until this global step (overrides training.max_steps and epochs)")
      ->transform(traind::integerFlag(1, traind::kMaxSteps));
  app.add_option("--log-every", flags.log_every,
                 "log a line every N steps (overrides training.log_every)")
      ->transform(traind::integerFlag(1));
  app.add_option("--summary-every", flags.summary_every,
                 "write TensorBoard's scalars every N steps (overrides training.summary_every; "
                 "default: with each log line)")
      ->transform(traind::integerFlag(1));
  app.add_option("--eval-every", flags.eval_every,
                 "evaluate on the test set every N steps (0: at the end only; overrides "
                 "training.eval_every)")
      ->transform(traind::integerFlag(0));
  app.add_option("--checkpoint-dir", flags.checkpoint_dir,
                 "where checkpoints are written and resumed from (overrides checkpoint.dir)");
  app.add_option("--summary-dir", flags.summary_dir,
                 "where the chief writes TensorBoard event files (overrides "
                 "training.summary_dir; default <checkpoint dir>/summaries)")
      ->check(traind::directoryFlag());
  app.add_option("--threads", flags.threads, "compute threads (0: one per core)")
      ->transform(traind::integerFlag(0, traind::kMaxThreads));
  app.add_option("--devices", flags.devices,
                 "devices to train on, one tower each: cpu, cpu:0,cpu:1 (overrides "
                 "training.devices)")
      ->check(deviceListFlag());
  app.add_option("--seed", flags.seed,
                 "seed of initialisers, shuffling and dropout (overrides seed)")
      ->transform(traind::integerFlag(0));
  app.add_option("--cluster", flags.cluster, "cluster spec (YAML): run as one of its tasks")
      ->check(traind::fileFlag());
  app.add_option("--job", flags.job, "this node's job in the cluster: ps or worker")
      ->envname("TRAIND_JOB")
      ->check(CLI::Validator(
          [](std::string& job) -> std::string {
            if (job == "ps" || job == "worker") return {};
            return "expected ps or worker, got '" + traind::printable(job) + "'";
          },
          "ps or worker"));
  app.add_option("--task", flags.task, "this node's index within its job (worker 0 is the chief)")
      ->envname("TRAIND_TASK")
      ->transform(traind::integerFlag(0, std::numeric_limits<int>::max()));
  app.add_option("--http", flags.http,
                 "serve /healthz, /metrics and /status on HOST:PORT (overrides the cluster "
                 "spec's http section)");
  app.add_option("--stall-seconds", flags.stall_seconds,
                 "/healthz answers 503 once the global step has stood this long (0: never; "
                 "overrides http.stall_seconds, default 300)")
      ->transform(traind::integerFlag(0, traind::kMaxStallSeconds));
}

// OpenMP takes OMP_NUM_THREADS as it is, where neither the spec nor
// --threads chooses: a team of 100000 threads crashes inside libgomp.
// InputError beyond the most --threads takes.
void checkOpenMpThreads(const traind::ModelSpec& spec) {
  const char* omp_threads = std::getenv("OMP_NUM_THREADS");
  if (spec.training.threads == 0 && omp_threads && omp_get_max_threads() > traind::kMaxThreads)
    throw traind::InputError(fmt::format(
        "OMP_NUM_THREADS={}: expected at most {} compute threads, as --threads takes (0 or "
        "unset: one per core)",
        traind::printable(omp_threads), traind::kMaxThreads));
}

// The compute threads of a run of `threads`: each CPU device of each step
// slot computes with a team of its own, threads / (K x CPU devices), one at
// least (daemon/concurrent_steps.cc, devices/device_list.cc). A team of one
// has nothing to spin-wait for; the teams together are the threads busy.
struct ComputeTeams {
  int team;
  int busy;
};

ComputeTeams computeTeams(const traind::ModelSpec& spec, int threads) {
  int cpu_devices = 0;
  for (const std::string& name : spec.training.devices)
    if (const auto device = traind::parseDeviceName(name);
        device && device->kind == traind::DeviceName::Kind::Cpu)
      ++cpu_devices;
  cpu_devices = std::max(1, cpu_devices);
  const int k = std::max(1, spec.training.concurrent_steps);
  const int team = std::max(1, traind::threadsPerStep(threads, k) / cpu_devices);
  return {team, team * cpu_devices * k};
}

// A worker's compute threads when nothing chose them: its host's cores
// shared among the cluster's workers there (daemon/host_threads.h). Threads
// chosen otherwise that oversubscribe the host's cores get a warning. A ps
// starts no compute threads.
void chooseThreads(const traind::ClusterSpec* cluster, const std::string& job, int task,
                   traind::ModelSpec& spec) {
  if (job == "ps") return;
  // Read here first, before any replica changes this thread's setting.
  const int default_threads = traind::defaultCpuThreads();
  const int cores = omp_get_num_procs();
  traind::HostShare share{cores, 1};
  if (cluster) share = traind::shareHostCores(*cluster, task, cores, traind::isThisHost);
  const char* omp_threads = std::getenv("OMP_NUM_THREADS");
  checkOpenMpThreads(spec);
  if (cluster && spec.training.threads == 0 && !omp_threads) {
    spec.training.threads = share.threads;
    const int busy = computeTeams(spec, share.threads).busy;
    if (share.workers > 1)
      spdlog::info(
          "{} compute thread{} of this host's {} cores{}: {} workers of the cluster run "
          "here (training.threads, --threads or OMP_NUM_THREADS to choose)",
          busy, busy == 1 ? "" : "s", cores,
          busy > share.threads ? " (one at least for each device and step slot)" : "",
          share.workers);
    return;
  }
  const ComputeTeams teams =
      computeTeams(spec, spec.training.threads > 0 ? spec.training.threads : default_threads);
  const int threads = teams.busy;
  const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
  const bool passive = wait_policy && std::string_view(wait_policy) == "passive";
  // Teams of one thread have nothing to spin-wait for: they share the cores
  // as any processes' threads do.
  if (threads * share.workers <= cores || passive || teams.team == 1) return;
  if (share.workers > 1)
    spdlog::warn(
        "{} workers of the cluster run on this host with {} compute threads each, more "
        "than its {} cores: their OpenMP threads spin against each other and every "
        "step may take many times as long; leave training.threads at 0 (each takes "
        "{}), or set OMP_WAIT_POLICY=passive",
        share.workers, threads, cores, share.threads);
  else
    spdlog::warn(
        "{} compute threads on this host's {} cores: OpenMP threads beyond the cores spin "
        "against each other and every step may take many times as long; use at most {}, or "
        "set OMP_WAIT_POLICY=passive",
        threads, cores, cores);
}

void warnIfUnreachable(const traind::ClusterSpec& cluster, const traind::HostPort& address,
                       const std::string& field, traind::Listener listener) {
  if (const auto why = traind::unreachableFromOtherHosts(cluster, address, field, listener))
    spdlog::warn("{}", *why);
}

// What a run or a check says of a spec in which no layer trains.
std::string nothingTrains(const std::string& spec_path) {
  return spec_path +
         ": no layer trains (every dense and conv2d layer is trainable: false, or there is "
         "none): a run of it trains nothing";
}

// Whether `flag` ("--job") is on the command line, not only in its
// environment variable.
bool typedOnCommandLine(const std::string& flag, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == flag || arg.starts_with(flag + "=")) return true;
  }
  return false;
}

// CLI11 reports a bad TRAIND_JOB or TRAIND_TASK under the flag it stands in
// for ("--job: expected ...", as checkTask does: "--task 5: the cluster
// has ..."), a flag that a unit's or a container's user never typed: where
// that flag is not on the command line, the message names the variable.
std::string nameTheVariable(const CLI::App& app, std::string message, int argc, char** argv) {
  for (const CLI::Option* option : app.get_options()) {
    const std::string& variable = option->get_envname();
    if (variable.empty() || !std::getenv(variable.c_str()) || option->get_lnames().empty())
      continue;
    const std::string flag = "--" + option->get_lnames().front();
    if (!message.starts_with(flag + ":") && !message.starts_with(flag + " ")) continue;
    if (!typedOnCommandLine(flag, argc, argv))
      message.replace(0, flag.size(), variable + " (for " + flag + ")");
  }
  return message;
}

}  // namespace

int main(int argc, char** argv) {
  traind::openClosedStandardStreams();
  keepFreedMemory();
  traind::flushDenormalsToZero();  // before any thread starts: they inherit it
  // A run whose log reader has gone (`traind ... | head`, the pipe of a
  // closed session) trains on and checkpoints: its log lines, written
  // nowhere, are lost, not the run.
  std::signal(SIGPIPE, SIG_IGN);
  traind::setupLogging();

  CLI::App app{
      "traind: a distributed-training node (standalone mode: the whole loop in one process)"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", traind::releaseText("traind"));
  RunFlags run_flags;
  bool standalone = false;
  addRunFlags(app, run_flags);
  app.add_flag("--standalone", standalone,
               "run the whole training loop in this process (the default without a cluster)");
  CLI::App* check = app.add_subcommand(
      "check", "validate a model spec (print its layer table) or a cluster spec (print its tasks)");
  std::string check_model, check_cluster;
  RunFlags check_flags;  // what a run would take from its flags
  check->add_option("--model,-m", check_model, "model spec (YAML)")->check(traind::fileFlag());
  check->add_option("--cluster", check_cluster, "cluster spec (YAML)")->check(traind::fileFlag());
  check->add_option("--threads", check_flags.threads, "compute threads, as a run takes them")
      ->transform(traind::integerFlag(0, traind::kMaxThreads));
  check->add_option("--devices", check_flags.devices, "devices, as a run takes them")
      ->check(deviceListFlag());
  check->add_option("--checkpoint-dir", check_flags.checkpoint_dir,
                    "checkpoint directory, as a run takes it (where it resumes from; '': none)");
  // The run flags are required only when no subcommand is given.
  app.get_option("--model")->required(false);

  // A run asked for with --standalone in a container or unit whose
  // environment names its cluster task (TRAIND_JOB, TRAIND_TASK) trains
  // alone all the same, whatever the variables hold: `docker compose exec
  // worker0 traind --standalone`.
  if (typedOnCommandLine("--standalone", argc, argv) && !typedOnCommandLine("--job", argc, argv) &&
      !typedOnCommandLine("--task", argc, argv)) {
    unsetenv("TRAIND_JOB");
    unsetenv("TRAIND_TASK");
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ValidationError& e) {
    std::fprintf(stderr, "%s\nRun with --help for more information.\n",
                 nameTheVariable(app, e.what(), argc, argv).c_str());
    return 2;
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // --help and --version print, exit 0
    return traind::exitAfterOutput(code == 0 ? 0 : 2, "traind");
  }

  try {
    if (check->parsed()) {
      if (check_model.empty() && check_cluster.empty())
        throw traind::InputError("check: expected --model m.yaml, --cluster c.yaml, or both");
      std::optional<traind::ModelSpec> checked_spec;
      int64_t training_examples = 0;  // the whole set's, of checked_spec
      std::optional<traind::ClusterSpec> cluster;
      if (!check_cluster.empty()) cluster = traind::loadClusterSpec(check_cluster);
      if (!check_model.empty()) {
        traind::ModelSpec& spec = checked_spec.emplace(traind::loadModelSpec(check_model));
        // As a cluster's node takes them: the cluster spec's section, then the flags.
        if (cluster && cluster->checkpoint) spec.checkpoint = *cluster->checkpoint;
        applyFlags(check_flags, spec);
        checkOpenMpThreads(spec);
        const traind::LayerGraph graph = traind::buildLayerGraph(spec);
        std::fputs(traind::layerTable(spec, graph).c_str(), stdout);
        if (traind::trainsNothing(spec))
          std::printf("warning: %s\n", nothingTrains(check_model).c_str());
        const traind::MemoryNeed memory = traind::memoryNeed(
            spec, graph,
            // The most a worker needs: the chief's.
            cluster ? traind::MemoryOf::ClusterChief : traind::MemoryOf::StandaloneRun);
        const std::optional<int64_t> available = traind::memoryAvailable();
        std::fputs(traind::memoryReport(memory, available).c_str(), stdout);
        // The machine that trains may be another than the one that checks.
        try {
          traind::checkMemoryFits(spec, graph, memory, available);
        } catch (const traind::InputError& e) {
          std::printf("warning: a run on this machine would stop at once: %s\n", e.what());
        }
        // Read as a run reads it: what the files hold must fit the model.
        const traind::TrainingData data =
            traind::loadTrainingData(spec, graph, {}, traind::DataMemory::Alone);
        training_examples = data.train.wholeSize();
        const long long tests = data.test ? data.test->size : 0;
        const std::string train_images =
            data.train.own_sizes ? "their own sizes, each decoded again as it is gathered"
                                 : traind::shapeToString(data.train.example_shape);
        std::printf("data: %lld training examples of %s, %lld test example%s\n",
                    static_cast<long long>(data.train.size), train_images.c_str(), tests,
                    tests == 1 ? "" : "s");
        // What a ps holds every worker of a job to, to compare hosts by.
        std::printf("training set: %s\n", traind::contentText(data.train).c_str());
        if (spec.data.shuffle_buffer.size > 0)
          std::printf("shuffle: %s\n", traind::shuffleBufferText(spec.data.shuffle_buffer).c_str());
        if (const auto note = traind::interleaveNote(spec, data.train))
          std::printf("note: %s\n", note->c_str());
        if (spec.data.augment.any())
          std::printf("augment: %s\n", traind::augmentationText(spec.data.augment).c_str());
        if (spec.data.standardize_per_image) std::printf("standardize: per_image\n");
        // A GPU the spec names may be on the machine that trains only.
        try {
          const auto devices = traind::createDevices(spec.training.devices, spec.training.threads,
                                                     spec.training.devices_location);
          std::printf("devices: %s\n", traind::deviceNames(devices).c_str());
        } catch (const traind::InputError& e) {
          std::printf("warning: a run on this machine would stop at once: %s\n", e.what());
        }
        // A run would refuse its checkpoint directory at once.
        if (!spec.checkpoint.dir.empty())
          traind::ModelState::checkSavable(spec, graph, spec.checkpoint.dir_location);
        std::fputs(traind::placementReport(spec, graph).c_str(), stdout);
        std::fputs(traind::resumeReport(spec, graph).c_str(), stdout);
        std::fputs(traind::summaryReport(spec).c_str(), stdout);
        std::fputs(traind::initFromReport(spec).c_str(), stdout);
      }
      if (cluster) {
        std::fputs(traind::taskTable(*cluster).c_str(), stdout);
        if (checked_spec) {
          traind::checkModelFitsCluster(*checked_spec, *cluster);
          // Each worker's share (or turn) of the set holds a batch.
          traind::checkBatchPerWorker(*checked_spec, training_examples,
                                      int(cluster->worker.size()));
        }
      }
      return traind::exitAfterOutput(0, "traind");
    }
    if (run_flags.model.empty()) {
      std::fputs("traind: --model is required (see traind --help)\n", stderr);
      return 2;
    }
    // A node whose --cluster was forgotten must not train alone.
    if (run_flags.cluster.empty() && (!run_flags.job.empty() || run_flags.task))
      throw traind::InputError(
          "--job and --task (or TRAIND_JOB and TRAIND_TASK) name a task of a cluster: give "
          "--cluster c.yaml as well, or neither for a standalone run");
    traind::ModelSpec spec = traind::loadModelSpec(run_flags.model);
    if (traind::trainsNothing(spec)) spdlog::warn("{}", nothingTrains(run_flags.model));
    std::optional<traind::ClusterSpec> cluster;
    if (!run_flags.cluster.empty()) {
      if (standalone) throw traind::InputError("--standalone and --cluster exclude each other");
      cluster = traind::loadClusterSpec(run_flags.cluster);
      if (run_flags.job.empty() || !run_flags.task)
        throw traind::InputError("--cluster needs --job (ps or worker) and --task N "
                                 "(or TRAIND_JOB and TRAIND_TASK)");
      try {
        traind::checkTask(*cluster, run_flags.job, *run_flags.task);
      } catch (const traind::InputError& e) {
        throw traind::InputError(nameTheVariable(app, e.what(), argc, argv));
      }
      if (cluster->checkpoint) spec.checkpoint = *cluster->checkpoint;
    }
    applyFlags(run_flags, spec);
    // Before the first thread of the run starts: they all inherit its mask.
    const traind::StopSignals stop_signals(g_stop);
    // One progress line per terminal: the standalone run's or the chief's.
    traind::enableProgress(!cluster || (run_flags.job == "worker" && *run_flags.task == 0));
    const std::string job = cluster ? run_flags.job : "standalone";
    const int task = cluster ? *run_flags.task : 0;
    if (cluster) traind::setLogPrefix(fmt::format("{} {}", job, task));
    chooseThreads(cluster ? &*cluster : nullptr, job, task, spec);
    // A ps holds its shard only; the others the whole model and its steps.
    if (job != "ps") {
      const traind::LayerGraph graph = traind::buildLayerGraph(spec);
      traind::checkMemoryFits(spec, graph,
                              traind::memoryNeed(spec, graph,
                                                 job != "worker" ? traind::MemoryOf::StandaloneRun
                                                 : task == 0     ? traind::MemoryOf::ClusterChief
                                                                 : traind::MemoryOf::ClusterWorker),
                              traind::memoryAvailable());
      // The placement on the run's devices (a stage on a device not listed,
      // micro-batches that do not divide the batch) before the data loads
      // and the checkpoint directory is locked, as `traind check` does.
      traind::checkModelReplica(spec, traind::planStages(spec, graph, spec.training.devices));
    }
    traind::NodeMetrics metrics(job, task, spec.training.log_every);
    metrics.setStallLimit(std::chrono::seconds(run_flags.stall_seconds ? *run_flags.stall_seconds
                                               : cluster               ? cluster->stall_seconds
                                                         : traind::kDefaultStallSeconds));
    metrics.setState(traind::NodeState::Starting, "loading the model and the data");
    const bool checkpoints = job == "standalone" || (job == "worker" && task == 0);
    metrics.setWritesCheckpoints(checkpoints && !spec.checkpoint.dir.empty());
    std::optional<traind::HostPort> http;
    if (cluster) http = traind::httpAddress(*cluster, job, task);
    if (run_flags.http) {
      http = traind::parseHostPort(*run_flags.http, "--http");
      // The spec's own entry for this node's ops server is the one --http replaces.
      const std::string own = fmt::format("http.{}[{}]", job, task);
      if (cluster)
        if (const auto taken = traind::fieldHolding(*cluster, *http); taken && *taken != own)
          throw traind::InputError(fmt::format(
              "--http: {} is {}'s address in {}: expected another port for this node's ops "
              "server",
              http->toString(), *taken, run_flags.cluster));
    }
    // Two spellings of one place ("vm:2221" and "127.0.0.1:2221") pass the
    // spec's duplicate check; the second bind would blame another process.
    if (cluster && http && job == "ps")
      if (const auto why = traind::sameListeningPort(*http, cluster->ps[size_t(task)])) {
        const std::string what = fmt::format(
            "{} is the port this node's ps listens on (cluster.ps[{}]: {}; {}): expected another "
            "port for its ops server",
            http->toString(), task, cluster->ps[size_t(task)].toString(), *why);
        if (run_flags.http) throw traind::InputError("--http: " + what);
        traind::throwInputError(http->location, fmt::format("http.ps[{}]", task), what);
      }
    if (cluster) {
      // Before the node waits for anyone: a worker elsewhere would only say
      // "Connection refused" until peer_wait_seconds ran out.
      if (job == "ps")
        warnIfUnreachable(*cluster, cluster->ps[size_t(task)], fmt::format("cluster.ps[{}]", task),
                          traind::Listener::Ps);
      // --http is this node's choice, loopback only maybe on purpose.
      if (http && !run_flags.http)
        warnIfUnreachable(*cluster, *http, fmt::format("http.{}[{}]", job, task),
                          traind::Listener::OpsServer);
    }
    std::optional<traind::OpsServer> ops;
    if (http) {
      try {
        ops.emplace(*http, metrics,
                    traind::OpsControls{&g_stop, checkpoints ? &g_checkpoint_requested : nullptr});
      } catch (const traind::InputError& e) {
        // The address to change: the flag's, or the spec's line.
        if (run_flags.http) throw traind::InputError(std::string("--http: ") + e.what());
        traind::throwInputError(http->location, fmt::format("http.{}[{}]", job, task), e.what());
      }
    }
    if (!cluster)
      traind::runStandalone(spec, g_stop.flag(), g_checkpoint_requested, metrics);
    else if (job == "ps")
      traind::runParameterServer(spec, *cluster, task, g_stop, metrics);
    else
      traind::runWorker(spec, *cluster, task, g_stop.flag(), g_checkpoint_requested, metrics);
    return 0;
  } catch (const traind::InputError& e) {
    spdlog::error("{}", e.what());
    return 2;
  } catch (const traind::Diverged& e) {
    spdlog::error("{}", e.what());
    return 3;
  } catch (const std::bad_alloc&) {
    spdlog::error(
        "out of memory: this process could not get the memory the run needs (traind check "
        "--model M prints the least a model needs, and what this machine gives)");
    return 1;
  } catch (const std::system_error& e) {
    // std::thread's failure to start one says only "Resource temporarily
    // unavailable".
    if (e.code() == std::errc::resource_unavailable_try_again)
      spdlog::error(
          "could not start a thread ({}): the run needs more threads than this process may "
          "start (compute threads of each device, towers, step slots, pipeline stages; limits "
          "such as ulimit -u, systemd's TasksMax, or a memory limit under ulimit -v)",
          e.what());
    else
      spdlog::error("{}", e.what());
    return 1;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}
