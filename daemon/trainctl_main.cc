// trainctl: talks to the nodes of a running job over their ops endpoints
// (daemon/ops_server.h), and works on spec and checkpoint files.
//
//   trainctl status --cluster c.yaml          every node's state, one table
//   trainctl status --node 127.0.0.1:8080     the same for nodes named here (a standalone run)
//   trainctl stop --cluster c.yaml            workers first (the chief checkpoints), then ps
//   trainctl checkpoint --cluster c.yaml      the chief writes a checkpoint now
//   trainctl inspect /tmp/ckpt                tensors, shapes, global step of a checkpoint
//                                             (traind's, or TensorFlow's)
//   trainctl inspect train.tfrecord.gz        records and features of a TFRecord data file
//   trainctl placement --model m.yaml --cluster c.yaml   which ps shard holds what
//   trainctl eval --model m.yaml --checkpoint /tmp/ckpt  test-set loss and accuracy
//   trainctl import --model m.yaml /tf/train_dir   a TensorFlow 1 job's state, to train on
//   trainctl export --model m.yaml --checkpoint /tmp/ckpt /tf/model.ckpt   and back
//
// Exit codes: 0 done, 2 bad configuration or input (stop and checkpoint:
// nodes that say they are other tasks than the http section lists them as,
// or addresses where another program answers),
// 1 runtime failure (a node unreachable, refusing, misplaced or stalled in
// status, a stop or checkpoint that did not happen in time).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/checkpoint.h"
#include "core/cluster_spec.h"
#include "core/example_records.h"
#include "core/json.h"
#include "core/keras_optimizer.h"
#include "core/layer_graph.h"
#include "core/memory_need.h"
#include "core/model_state.h"
#include "core/placement.h"
#include "core/printable.h"
#include "core/safetensors.h"
#include "core/tensorflow_checkpoint.h"
#include "core/tensorflow_job.h"
#include "daemon/evaluation.h"
#include "daemon/flag_checks.h"
#include "daemon/logging.h"
#include "daemon/node_metrics.h"
#include "daemon/ops_client.h"
#include "daemon/release.h"
#include "daemon/standard_output.h"
#include "daemon/training_data.h"
#include "devices/cpu/cpu_device.h"

namespace traind {
namespace {

using Clock = std::chrono::steady_clock;

// Bounds of flags, so that a typo gets an error instead of an allocation
// of billions of shards or a deadline past what a clock holds.
constexpr int64_t kMaxPsTasks = 65536;
constexpr int64_t kMaxTimeoutSeconds = 7 * 24 * 3600;

// A node as trainctl addresses it.
struct Node {
  std::string name;  // "worker 0"; for --node, the address until the node says what it is
  HostPort address;
  std::string job;  // "ps", "worker", or empty when not known (--node)
  int task = 0;
};

// The nodes to talk to, from --cluster (its http section) or --node flags.
struct NodeFlags {
  std::string cluster;
  std::vector<std::string> nodes;
  double timeout = 0.0;
  bool force = false;  // stop: the ps tasks even when the chief did not stop
};

void addNodeFlags(CLI::App& command, NodeFlags& flags, double default_timeout) {
  flags.timeout = default_timeout;
  command.add_option("--cluster", flags.cluster, "cluster spec with an http section (YAML)")
      ->check(traind::fileFlag());
  // One value per --node: CLI11 reads a vector option's "[a,b]" as a list,
  // and would take "[::1]" for "::1".
  command.add_option("--node", flags.nodes, "a node's ops address HOST:PORT (repeatable)")
      ->allow_extra_args(false);
  command.add_option("--timeout", flags.timeout, "seconds to wait")
      ->capture_default_str()
      ->check(traind::secondsFlag(kMaxTimeoutSeconds));
}

std::vector<Node> nodesOf(const NodeFlags& flags) {
  if (flags.cluster.empty() == flags.nodes.empty())
    throw InputError("name the nodes with either --cluster c.yaml or --node HOST:PORT");
  std::vector<Node> nodes;
  if (!flags.cluster.empty()) {
    const ClusterSpec cluster = loadClusterSpec(flags.cluster);
    if (cluster.ps_http.empty())
      throw InputError(flags.cluster +
                       ": no http addresses (http.ps and http.worker), so trainctl cannot "
                       "reach the nodes: name them with --node HOST:PORT "
                       "(docs/cluster-spec.md#http-optional)");
    for (size_t i = 0; i < cluster.ps_http.size(); ++i)
      nodes.push_back({fmt::format("ps {}", i), cluster.ps_http[i], "ps", int(i)});
    for (size_t i = 0; i < cluster.worker_http.size(); ++i)
      nodes.push_back({fmt::format("worker {}", i), cluster.worker_http[i], "worker", int(i)});
    return nodes;
  }
  for (const std::string& text : flags.nodes)
    nodes.push_back({text, parseHostPort(text, "--node"), "", 0});
  return nodes;
}

// A node's GET /status.
struct NodeStatus {
  std::string role;
  int64_t task = 0;
  std::string state;
  std::string detail;  // what it waits for, while it waits
  std::optional<int64_t> global_step;  // none before it has restored, initialised or pulled
  std::optional<double> loss, examples_per_sec;
  bool writes_checkpoints = false;
  std::optional<std::string> last_checkpoint;
  std::optional<int64_t> last_checkpoint_step;
  std::optional<std::string> stalled;  // why its step has stood too long
};

// What a node said, as trainctl prints it: its bytes may be anything, so
// control characters and bytes that are not UTF-8 are escaped, and a long
// answer is cut (whatever answers on the port may not be traind).
std::string nodeSaid(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  return printablePrefix(text, 2000);
}

// A loss as the status table shows it: four decimals, or four significant
// digits where those would not fit its column (a diverging run's 3.1e+12).
std::string lossColumn(double loss) {
  return std::abs(loss) < 1e6 ? fmt::format("{:.4f}", loss) : fmt::format("{:.4g}", loss);
}

// Throws OpsUnreachable when the node cannot be asked, runtime_error when
// its answer is not a traind node's status (queryFailure tells them apart).
NodeStatus queryStatus(const Node& node, double timeout) {
  const OpsReply reply = requestOps(node.address, "GET", "/status", timeout);
  const std::string where = node.address.toString() + "/status";
  // A traind node answers its status with 200 only: a 502, 503 or 504 is a
  // proxy's in front of a node it cannot reach; anything else, another
  // program's.
  if (reply.status == 502 || reply.status == 503 || reply.status == 504)
    throw OpsUnreachable(
        fmt::format("{} answered {}: {}", where, reply.status, nodeSaid(reply.body)));
  if (reply.status != 200)
    throw std::runtime_error(
        fmt::format("{} answered {}: {}", where, reply.status, nodeSaid(reply.body)));
  JsonValue json;
  try {
    json = parseJson(reply.body, where);
  } catch (const InputError& e) {
    throw std::runtime_error(nodeSaid(e.what()));  // it may quote the node's text
  }
  auto member = [&](const char* key, JsonValue::Type type) -> const JsonValue* {
    const JsonValue* value = json.find(key);
    if (value && value->type == type) return value;
    if (value && value->type == JsonValue::Type::Null) return nullptr;
    throw std::runtime_error(
        fmt::format("{}: expected '{}' to be {}", where, key, jsonTypeName(type)));
  };
  // A node's counts and rates are never negative, nor its numbers beyond a
  // double: a peer that says otherwise is not believed, as its text is not.
  auto number = [&](const char* key, double min) -> std::optional<double> {
    const JsonValue* value = member(key, JsonValue::Type::Number);
    if (!value) return std::nullopt;
    const double x = std::strtod(value->text.c_str(), nullptr);
    if (std::isfinite(x) && x >= min) return x;
    throw std::runtime_error(fmt::format("{}: expected '{}' to be a finite number{}, got {}",
                                         where, key, min > -HUGE_VAL ? " of at least 0" : "",
                                         nodeSaid(value->text)));
  };
  auto integer = [&](const char* key) -> std::optional<int64_t> {
    const JsonValue* value = member(key, JsonValue::Type::Number);
    if (!value) return std::nullopt;
    if (const std::optional<int64_t> i = value->asInt64(); i && *i >= 0) return i;
    throw std::runtime_error(fmt::format("{}: expected '{}' to be a non-negative integer, got {}",
                                         where, key, nodeSaid(value->text)));
  };
  auto text = [&](const char* key) -> std::optional<std::string> {
    const JsonValue* value = member(key, JsonValue::Type::String);
    if (!value) return std::nullopt;
    return nodeSaid(value->text);
  };
  if (json.type != JsonValue::Type::Object)
    throw std::runtime_error(where + ": expected a JSON object");
  // Every traind node's status says what it is and does: without them the
  // answer is another program's (a JSON API on a port listed by mistake).
  auto required = [&](const char* key) {
    if (!json.find(key))
      throw std::runtime_error(
          fmt::format("{}: expected a traind node's status, with '{}'", where, key));
  };
  for (const char* key : {"role", "task", "state"}) required(key);
  NodeStatus status;
  status.role = text("role").value_or("?");
  status.task = integer("task").value_or(0);
  status.state = text("state").value_or("?");
  if (json.find("detail")) status.detail = text("detail").value_or("");
  status.global_step = integer("global_step");
  status.loss = number("loss", -HUGE_VAL);
  status.examples_per_sec = number("examples_per_sec", 0.0);
  // Nodes before it lack it.
  if (json.find("writes_checkpoints"))
    if (const JsonValue* writes = member("writes_checkpoints", JsonValue::Type::Bool))
      status.writes_checkpoints = writes->boolean;
  status.last_checkpoint = text("last_checkpoint");
  status.last_checkpoint_step = integer("last_checkpoint_step");
  if (json.find("stalled")) status.stalled = text("stalled");  // nodes before it lack it
  return status;
}

// Why queryStatus failed, for a node's line: "unreachable (why)" when it
// could not be asked; "no traind node answers there (why)" when another
// program answered (an address in the http section that is wrong).
std::string queryFailure(const std::exception& e) {
  const bool unreachable = dynamic_cast<const OpsUnreachable*>(&e) != nullptr;
  // Another program's page may be long: enough of it to know it by.
  constexpr size_t kMostShown = 300;
  std::string why = e.what();
  if (why.size() > kMostShown) why = why.substr(0, kMostShown) + " ...";
  return fmt::format("{} ({})", unreachable ? "unreachable" : "no traind node answers there", why);
}

// "worker 0 (10.0.0.3:9100)"; a --node is named by its address alone.
std::string describe(const Node& node) {
  const std::string address = node.address.toString();
  return node.name == address ? address : node.name + " (" + address + ")";
}

std::string nodeName(const Node& node, const NodeStatus& status) {
  if (!node.job.empty()) return node.name;
  return status.role == "standalone" ? status.role : fmt::format("{} {}", status.role, status.task);
}

// Columns padded to their widest cell.
std::string table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) {
      if (widths.size() <= i) widths.push_back(0);
      widths[i] = std::max(widths[i], row[i].size());
    }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i)
      line += i + 1 < row.size() ? fmt::format("{:<{}}  ", row[i], widths[i]) : row[i];
    out += line + "\n";
  }
  return out;
}

// The node says it is another task than the http section lists it as.
bool misplaced(const Node& node, const NodeStatus& status) {
  return !node.job.empty() && (status.role != node.job || status.task != node.task);
}

// Every node's state; 1 when one could not be asked or says it is another
// task than the cluster spec's http section lists it as.
int runStatus(const NodeFlags& flags) {
  const std::vector<Node> nodes = nodesOf(flags);
  std::vector<std::vector<std::string>> rows = {
      {"NODE", "ADDRESS", "STATE", "STEP", "LOSS", "EXAMPLES/S", "LAST CHECKPOINT"}};
  int failing = 0;  // unreachable, misplaced or stalled
  for (const Node& node : nodes) {
    try {
      const NodeStatus s = queryStatus(node, flags.timeout);
      std::string checkpoint = "-";
      if (s.last_checkpoint)
        checkpoint = fmt::format("{} (step {})",
                                 std::filesystem::path(*s.last_checkpoint).filename().string(),
                                 s.last_checkpoint_step.value_or(0));
      std::string name = nodeName(node, s);
      if (misplaced(node, s)) {
        name += fmt::format(" (says it is {})", nodeName(Node{}, s));
        ++failing;
      }
      if (s.stalled) ++failing;
      const std::string state = s.stalled          ? *s.stalled
                                : s.detail.empty() ? s.state
                                                   : s.state + ": " + s.detail;
      rows.push_back(
          {name, node.address.toString(), state,
           s.global_step ? std::to_string(*s.global_step) : "-", s.loss ? lossColumn(*s.loss) : "-",
           s.examples_per_sec ? fmt::format("{:.1f}", *s.examples_per_sec) : "-", checkpoint});
    } catch (const std::exception& e) {
      ++failing;
      rows.push_back(
          {node.job.empty() ? "?" : node.name, node.address.toString(), queryFailure(e)});
    }
  }
  std::fputs(table(rows).c_str(), stdout);
  return failing == 0 ? 0 : 1;
}

// True once the node no longer answers or says it is done.
bool isGone(const Node& node) {
  try {
    return queryStatus(node, 1.0).state == "done";
  } catch (const std::exception&) {
    return true;
  }
}

// Waits until every node of `nodes` is gone or `deadline` passes; returns
// those still there.
std::vector<const Node*> waitUntilGone(std::vector<const Node*> nodes, Clock::time_point deadline) {
  for (;;) {
    std::erase_if(nodes, [](const Node* node) { return isGone(*node); });
    if (nodes.empty() || Clock::now() >= deadline) return nodes;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

// POST /stop; false (and a line saying why) when the node did not take it.
bool postStop(const Node& node, double timeout) {
  try {
    const OpsReply reply = requestOps(node.address, "POST", "/stop", timeout);
    if (reply.status / 100 == 2) {
      std::printf("%s: stopping\n", describe(node).c_str());
      return true;
    }
    std::printf("%s: refused the stop: %d %s\n", describe(node).c_str(), reply.status,
                nodeSaid(reply.body).c_str());
  } catch (const OpsUnreachable& e) {
    std::printf("%s: unreachable (%s)%s\n", node.name.c_str(), e.what(),
                e.requestSent() ? "; the stop went out: a node that is only paused stops once "
                                  "it goes on"
                                : "");
  } catch (const std::exception& e) {
    std::printf("%s: not asked (%s)\n", node.name.c_str(), e.what());
  }
  return false;
}

// The most a node is waited for in one request of stop and checkpoint.
constexpr double kRequestSeconds = 5.0;

Clock::time_point deadlineIn(double seconds) {
  return Clock::now() + std::chrono::milliseconds(int64_t(seconds * 1000));
}

// What one request may take of what is left until `deadline`: at most
// kRequestSeconds, at least a moment (a node that answers at once still can).
double requestSeconds(Clock::time_point deadline) {
  const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
  return std::clamp(left, 0.2, kRequestSeconds);
}

// The cluster spec's http section says which node is which; stop and
// checkpoint act on that order, so a node that says it is another task (the
// section lists them out of order), or an address where another program
// answers, is an error before anything is asked of any: a stop would take
// that program's word for the chief's checkpoint. Returns a line for each
// node that does not answer ("worker 1 (addr): unreachable (why)"), for the
// command to report.
std::vector<std::string> checkRoles(const std::vector<Node>& nodes, Clock::time_point deadline) {
  std::string wrong, foreign;
  std::vector<std::string> unreachable;
  for (const Node& node : nodes) {
    NodeStatus status;
    try {
      status = queryStatus(node, requestSeconds(deadline));
    } catch (const OpsUnreachable& e) {
      unreachable.push_back(fmt::format("{}: {}", describe(node), queryFailure(e)));
      continue;
    } catch (const std::exception& e) {
      foreign += fmt::format("\n  {}: {}", describe(node), queryFailure(e));
      continue;
    }
    if (misplaced(node, status))
      wrong += fmt::format("\n  {} says it is {}", describe(node), nodeName(Node{}, status));
  }
  if (!foreign.empty())
    throw InputError(
        "no traind node answers at some of the addresses given (the http section's, or "
        "--node): another program is on the port (a wrong port or host?); nothing was asked "
        "of any node:" +
        foreign + wrong);
  if (!wrong.empty())
    throw InputError("the http section lists nodes as other tasks than they are:" + wrong);
  return unreachable;
}

// Whether stopping the ps tasks now loses nothing: each one's global step
// is the one the chief last reported a checkpoint of its shard at (or it
// has none: it holds no parameters yet). A line per ps, saying where its state is, goes to
// `report`; one that cannot be asked counts as not saved, and in
// `*unreachable` when given; one that holds no parameters (restarted, or
// never initialised: it waits for the chief) counts in `*empty` when given.
bool psStateSaved(const std::vector<Node>& nodes, Clock::time_point deadline, std::string& report,
                  int* unreachable = nullptr, int* empty = nullptr) {
  bool saved = true;
  for (const Node& node : nodes) {
    if (node.job != "ps") continue;
    try {
      const NodeStatus status = queryStatus(node, requestSeconds(deadline));
      const bool held = status.global_step.value_or(0) == status.last_checkpoint_step.value_or(0);
      saved = saved && held;
      if (status.state == "waiting") {
        if (empty) ++*empty;
        report += fmt::format(
            "\n  {}: holds no parameters yet (restarted, or never initialised: it waits for the "
            "chief to initialise it)",
            describe(node));
        continue;
      }
      report += status.global_step ? fmt::format("\n  {}: at global step {}, ", describe(node),
                                                 *status.global_step)
                                   : fmt::format("\n  {}: at no global step yet, ", describe(node));
      report += status.last_checkpoint
                    ? fmt::format("in the chief's checkpoint {} at global step {}",
                                  *status.last_checkpoint, *status.last_checkpoint_step)
                    : std::string("in no checkpoint");
    } catch (const std::exception& e) {
      saved = false;
      if (unreachable) ++*unreachable;
      report += fmt::format("\n  {}: cannot be asked ({})", describe(node), e.what());
    }
  }
  return saved;
}

// Polls psStateSaved() for up to 2 s: a ps publishes the chief's word of a
// checkpoint in its status within kShardPublishPeriod, and the chief may
// exit sooner.
bool psStateSavedSoon(const std::vector<Node>& nodes, Clock::time_point deadline,
                      std::string& report, int* unreachable) {
  const Clock::time_point until = std::min(deadline, Clock::now() + std::chrono::seconds(2));
  for (;;) {
    report.clear();
    *unreachable = 0;
    const bool saved = psStateSaved(nodes, deadline, report, unreachable);
    if (saved || Clock::now() >= until) return saved;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

// Waits until every ps's global step has stood for two of its publishing
// periods, for 2 s at most: the workers stopped just now may have left a
// push on its way (a worker waits 1 s at most for its last replies after a
// stop, and a worker that does not answer its status within 1 s counts as
// gone), and a ps shows what it applied a period later. Read sooner, its
// status could miss their last steps: it would understate what no
// checkpoint holds, or show the chief's last checkpoint as holding all.
void waitForPsStepsToSettle(const std::vector<Node>& nodes, Clock::time_point deadline) {
  const Clock::time_point until = std::min(deadline, Clock::now() + std::chrono::seconds(2));
  std::vector<std::optional<int64_t>> before;
  for (;;) {
    std::vector<std::optional<int64_t>> steps;
    for (const Node& node : nodes) {
      if (node.job != "ps") continue;
      try {
        // None yet (not initialised) reads as unreachable: neither moves.
        steps.push_back(queryStatus(node, std::min(1.0, requestSeconds(deadline))).global_step);
      } catch (const std::exception&) {
        steps.push_back(std::nullopt);  // psStateSaved asks again, and says why
      }
    }
    if (steps == before || Clock::now() >= until) return;
    before = std::move(steps);
    std::this_thread::sleep_for(2 * kShardPublishPeriod);
  }
}

// Stops the other workers first, and once they are gone the chief, which
// writes a final checkpoint through the ps shards (a gradient pushed after
// it would be in no checkpoint); then the ps tasks. Unless `flags.force`,
// the ps tasks are left running while they hold anything the chief's last
// checkpoint does not: a chief that did not take the stop (down, hung) or
// whose final save failed leaves them the job's only copy of what it
// trained since. A chief that stopped alone after its checkpoint, with no
// worker training on, leaves nothing unsaved.
int runStop(const NodeFlags& flags) {
  const std::vector<Node> nodes = nodesOf(flags);
  const Clock::time_point deadline = deadlineIn(flags.timeout);
  // A node that does not answer (paused) takes each request's whole time:
  // the role checks, and then the other workers' stops and the wait for
  // them to go, take a part of the time left at most, so that the chief's
  // stop and final checkpoint have the rest of a short --timeout.
  const auto partLeft = [deadline](int parts) {
    const Clock::time_point now = Clock::now();
    return now + (deadline - now) / parts;
  };
  const std::vector<std::string> unreachable = checkRoles(nodes, partLeft(4));
  if (unreachable.size() == nodes.size()) {
    std::printf(
        "no node of the job answers: it has stopped already, or its ops endpoints "
        "cannot be reached from here:\n");
    for (const std::string& line : unreachable) std::printf("  %s\n", line.c_str());
    return 1;
  }
  const auto isChief = [](const Node& node) { return node.job == "worker" && node.task == 0; };
  bool all_stopped = true;
  std::vector<const Node*> stopping;
  auto stop = [&](const Node& node, Clock::time_point by) {
    const bool took = postStop(node, requestSeconds(by));
    if (took)
      stopping.push_back(&node);
    else
      all_stopped = false;
    return took;
  };
  bool other_workers = false;
  const Clock::time_point workers_by = partLeft(4);
  for (const Node& node : nodes)
    if (node.job != "ps" && !isChief(node)) {
      other_workers = true;
      stop(node, workers_by);
    }
  stopping =
      waitUntilGone(stopping, std::min(partLeft(3), Clock::now() + std::chrono::seconds(10)));
  const bool other_workers_stopped = other_workers && all_stopped && stopping.empty();
  const auto chief = std::find_if(nodes.begin(), nodes.end(), isChief);
  if (chief != nodes.end()) {
    bool writes_checkpoints = false;
    try {
      writes_checkpoints = queryStatus(*chief, requestSeconds(deadline)).writes_checkpoints;
    } catch (const std::exception&) {
      // Unreachable: the stop below says so.
    }
    const bool took = stop(*chief, deadline);
    if (took && !waitUntilGone({&*chief}, deadline).empty()) {
      std::printf("%s did not stop within %g s\n", chief->name.c_str(), flags.timeout);
      return 1;
    }
    std::string report;
    if (!took && !flags.force) {
      waitForPsStepsToSettle(nodes, deadline);
      int ps_unreachable = 0, ps_empty = 0;
      const bool saved = psStateSaved(nodes, deadline, report, &ps_unreachable, &ps_empty);
      if (!saved && ps_empty > 0 && ps_unreachable == 0) {
        // The chief does not rejoin shards of which one is empty: it
        // restores the last checkpoint into every one.
        std::printf(
            "the ps tasks are left running: the chief (worker 0) did not take the stop, and a "
            "ps task holds no parameters (restarted, or never initialised), so a chief started "
            "again restores the last checkpoint into every shard: what the others trained "
            "since it is lost either way:%s\nStop the ps tasks with --force, or start the chief "
            "again (the job goes on from its last checkpoint)\n",
            report.c_str());
        return 1;
      }
      if (!saved && ps_unreachable > 0) {
        // A ps that is down lost its shard: no chief can rejoin the job.
        std::printf(
            "no ps task was stopped: the chief (worker 0) did not take the stop and some ps "
            "tasks cannot be asked (down? then they lost their shards, and a chief started "
            "again restores the last checkpoint into every shard):%s\nStart the ps tasks that "
            "are down and the chief again (the job goes on from its last checkpoint), or stop "
            "the rest with --force\n",
            report.c_str());
        return 1;
      }
      if (!saved) {
        std::printf(
            "the ps tasks are left running: the chief (worker 0) did not take the stop, so no "
            "final checkpoint was written now, and the ps tasks hold what the job trained since "
            "the last one%s:%s\nStart the chief again (it rejoins the job) and stop the job "
            "then, or stop the ps tasks with --force and lose it\n",
            other_workers_stopped ? " (the other workers were stopped)" : "", report.c_str());
        return 1;
      }
      std::printf(
          "the chief (worker 0) did not take the stop, but the ps tasks hold nothing its "
          "last checkpoint does not:%s\n",
          report.c_str());
    } else if (int ps_unreachable = 0; took && writes_checkpoints && !flags.force &&
                                       !psStateSavedSoon(nodes, deadline, report, &ps_unreachable)) {
      if (ps_unreachable > 0) {
        // Not the chief's save to blame: what they hold is not known.
        std::printf(
            "no ps task was stopped: the chief (worker 0) stopped, but some ps tasks cannot be "
            "asked whether its last checkpoint holds what they do (down, or their ops "
            "endpoints cannot be reached from here):%s\nCheck them (their ops endpoints, their "
            "logs) and stop them then, or stop them with --force\n",
            report.c_str());
        return 1;
      }
      std::printf(
          "the ps tasks are left running: the chief (worker 0) stopped, but its last checkpoint "
          "does not hold what they do (did its final save fail? its log says):%s\nStart the "
          "chief again (it rejoins the job and checkpoints) and stop the job then, or stop the "
          "ps tasks with --force and lose it\n",
          report.c_str());
      return 1;
    }
  }
  stopping = waitUntilGone(stopping, std::min(deadline, Clock::now() + std::chrono::seconds(5)));
  if (std::string report; flags.force && !psStateSaved(nodes, deadline, report))
    std::printf("--force: stopping the ps tasks, and what they hold that no checkpoint does:%s\n",
                report.c_str());
  for (const Node& node : nodes)
    if (node.job == "ps") stop(node, deadline);
  const std::vector<const Node*> left = waitUntilGone(stopping, deadline);
  for (const Node* node : left)
    std::printf("%s did not stop within %g s\n", node->name.c_str(), flags.timeout);
  if (!left.empty()) return 1;
  std::printf(all_stopped ? "stopped\n" : "stopped, but for the nodes above\n");
  return all_stopped ? 0 : 1;
}

// Why a chief's step may stand, as the other nodes of its cluster show it:
// a line for each that does not answer (stopped, hung or gone: a sync step
// waits for its gradient) or says it is stalled; up to a second for each.
// Empty for a lone node.
std::string stepHolders(const std::vector<Node>& nodes, const Node& chief) {
  std::string lines;
  for (const Node& node : nodes) {
    if (&node == &chief) continue;
    try {
      const NodeStatus status = queryStatus(node, 1.0);
      if (status.stalled) lines += fmt::format("  {}: {}\n", describe(node), *status.stalled);
    } catch (const std::exception& e) {
      lines += fmt::format("  {}: {}\n", describe(node), queryFailure(e));
    }
  }
  return lines.empty() ? lines
                       : "the nodes that may hold the step (a sync step waits for every gradient "
                         "it aggregates):\n" +
                             lines;
}

// Asks the chief (or the one --node) for a checkpoint and waits until one
// at least as new as its step at the time of asking exists; past the
// timeout, says why none came.
int runCheckpoint(const NodeFlags& flags) {
  const std::vector<Node> nodes = nodesOf(flags);
  const Node* target = nullptr;
  const Clock::time_point deadline = deadlineIn(flags.timeout);
  if (!flags.cluster.empty()) {
    for (const Node& node : nodes)
      if (node.job == "worker" && node.task == 0) target = &node;
    // Only the chief is asked: a paused worker would cost the wait.
    if (target) checkRoles({*target}, deadline);
  } else if (nodes.size() == 1) {
    target = &nodes[0];
    checkRoles({*target}, deadline);
  } else {
    throw InputError("checkpoint: name one node (the chief or a standalone run) with --node");
  }
  NodeStatus before;
  OpsReply reply;
  try {
    before = queryStatus(*target, requestSeconds(deadline));
    reply = requestOps(target->address, "POST", "/checkpoint", requestSeconds(deadline));
  } catch (const std::exception& e) {
    std::printf("%s: %s\n", describe(*target).c_str(), queryFailure(e).c_str());
    return 1;
  }
  if (reply.status / 100 != 2) {
    std::printf("%s: refused: %d %s\n", describe(*target).c_str(), reply.status,
                nodeSaid(reply.body).c_str());
    return 1;
  }
  for (;;) {
    NodeStatus now = before;
    std::optional<std::string> silent;  // why the node did not answer this time
    try {
      now = queryStatus(*target, requestSeconds(deadline));
    } catch (const std::exception& e) {
      silent = e.what();
      // A node slow to answer near the deadline: said as the deadline's.
      if (Clock::now() < deadline) {
        std::printf(
            "%s: stopped answering before it showed a checkpoint%s (%s): it ended meanwhile (a "
            "stop, whose final checkpoint its log names; a failed save or a crash, whose reason "
            "its log gives) or hangs\n",
            describe(*target).c_str(),
            before.global_step
                ? fmt::format(" at global step {} or later", *before.global_step).c_str()
                : "",
            e.what());
        return 1;
      }
    }
    // Asked before it knew its step (starting: a chief may join shards
    // that trained past its last checkpoint), it saves at the first step
    // it knows or later.
    if (!before.global_step) before.global_step = now.global_step;
    if (now.last_checkpoint && before.global_step &&
        now.last_checkpoint_step.value_or(-1) >= *before.global_step) {
      std::printf("%s: saved %s at global step %lld\n", nodeName(*target, now).c_str(),
                  now.last_checkpoint->c_str(), static_cast<long long>(*now.last_checkpoint_step));
      return 0;
    }
    if (Clock::now() >= deadline && silent) {
      std::printf("%s: no checkpoint within %g s, and no answer at the end (%s)\n",
                  describe(*target).c_str(), flags.timeout, silent->c_str());
      return 1;
    }
    if (Clock::now() >= deadline) {
      const bool stood = now.global_step == before.global_step;
      std::printf("%s: no checkpoint within %g s%s\n", nodeName(*target, now).c_str(),
                  flags.timeout,
                  !stood            ? ""
                  : now.global_step ? fmt::format(": its global step stood at {} all along, "
                                                  "and it saves between steps",
                                                  *now.global_step)
                                          .c_str()
                                    : ": it is at no global step yet (starting), and saves "
                                      "between steps");
      if (stood) std::fputs(stepHolders(nodes, *target).c_str(), stdout);
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// A TensorFlow checkpoint's tensors, with their dtypes: what init_from's
// names and scope are chosen from.
void inspectTensorflowCheckpoint(const std::filesystem::path& prefix) {
  const TensorflowCheckpointReader reader(prefix);
  std::printf("TensorFlow checkpoint: %s\n", prefix.string().c_str());
  const std::string global_step(tensorflow_checkpoint_format::kGlobalStep);
  if (reader.contains(global_step) && reader.isIntegerScalar(global_step))
    std::printf("global step: %lld\n", static_cast<long long>(reader.readInteger(global_step)));
  std::vector<std::vector<std::string>> rows = {{"TENSOR", "DTYPE", "SHAPE"}};
  for (const std::string& name : reader.names()) {
    std::string shape = shapeToString(reader.shape(name));
    if (reader.partCount(name) > 0) shape += fmt::format(" in {} parts", reader.partCount(name));
    rows.push_back({printable(name), reader.dtypeName(name), shape});
  }
  std::fputs(table(rows).c_str(), stdout);
  std::printf("%zu tensors\n", rows.size() - 1);
  // An object-based checkpoint: init_from's `from` is a path of the model's
  // objects, which the key need not be.
  const TensorflowCheckpointReader::ObjectPaths objects = reader.objectPaths();
  if (objects.paths.empty() && objects.complete) return;
  std::printf(
      "\nobject graph: each variable's paths (a layer's `from` is the path to its "
      "kernel, less /kernel or /_kernel)\n");
  std::vector<std::vector<std::string>> object_rows = {{"PATH", "TENSOR"}};
  for (const auto& [path, key] : objects.paths)
    object_rows.push_back({printable(path), printable(key)});
  std::fputs(table(object_rows).c_str(), stdout);
  if (!objects.complete)
    std::printf("(%zu paths: the graph holds more, or longer ones, than are listed)\n",
                objects.paths.size());
  // What trainctl import would take of the job's optimizer.
  if (const std::optional<KerasOptimizerState> keras = KerasOptimizerState::find(reader))
    std::printf("\n%s\n", keras->describe().c_str());
}

// A TFRecord file of examples: its records and its first one's features,
// what a spec's image_feature and label_feature are chosen from.
void inspectRecordFile(const std::string& path) {
  const RecordFileSummary summary = summarizeRecordFile(path);
  std::printf("TFRecord file: %s (%s)\n%lld records, %s\n", path.c_str(),
              summary.compression.c_str(), static_cast<long long>(summary.records),
              byteSize(int64_t(summary.bytes)).c_str());
  if (summary.records == 0) return;
  std::vector<std::vector<std::string>> rows = {{"FEATURE", "KIND", "VALUES", "FIRST"}};
  for (const RecordFileSummary::Feature& feature : summary.first_features)
    rows.push_back({printable(feature.name), feature.kind, std::to_string(feature.values),
                    printable(feature.first)});
  std::printf("the first record's features:\n");
  std::fputs(table(rows).c_str(), stdout);
}

int runInspect(const std::string& path) {
  if (const auto prefix = findTensorflowCheckpoint(path)) {
    inspectTensorflowCheckpoint(*prefix);
    return 0;
  }
  // A checkpoint is a directory: a file is a data set's, or a mistake.
  if (isRecordFile(path)) {
    inspectRecordFile(path);
    return 0;
  }
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) {
    if (std::filesystem::file_size(path, ec) == 0)
      throw InputError(path + ": an empty file: no TFRecord file's records, nor a checkpoint");
    // A file that does not begin as a TFRecord file does: one whose first
    // record is damaged, or another kind of file. Its first record's fault
    // says which, and a checkpoint is a directory.
    try {
      inspectRecordFile(path);
      return 0;
    } catch (const InputError& e) {
      std::string why = e.what();
      if (why.starts_with(path + ": ")) why.erase(0, path.size() + 2);
      throw InputError(path + ": neither a TFRecord file (" + why +
                       ") nor a checkpoint, which is a directory");
    }
  }
  readResolvedCheckpoint(path, [](const std::filesystem::path& checkpoint) {
    const CheckpointManifest manifest = readManifest(checkpoint);
    const SafetensorsReader reader(checkpoint / manifest.tensors_file);
    checkAgreesWithManifest(checkpoint, manifest, reader);
    std::printf("checkpoint: %s\nmodel: %s\nglobal step: %lld\ncreated: %s\narchitecture: %s\n",
                checkpoint.string().c_str(), printable(manifest.model_name).c_str(),
                static_cast<long long>(manifest.global_step), printable(manifest.created).c_str(),
                printable(manifest.architecture_hash).c_str());
    std::vector<std::vector<std::string>> rows = {{"TENSOR", "SHAPE", "FLOATS"}};
    int64_t floats = 0;
    for (const std::string& name : reader.names()) {
      const Shape& shape = reader.shape(name);
      floats += numElements(shape);
      rows.push_back({printable(name), shapeToString(shape), std::to_string(numElements(shape))});
    }
    std::fputs(table(rows).c_str(), stdout);
    std::printf("%zu tensors, %lld floats (%.2f MiB)\n", rows.size() - 1,
                static_cast<long long>(floats), double(floats) * 4.0 / (1 << 20));
  });
  return 0;
}

int runPlacement(const std::string& model, const std::string& cluster_path,
                 std::optional<int> ps_tasks) {
  if (cluster_path.empty() == !ps_tasks)
    throw InputError("placement: give either --cluster c.yaml or --ps N");
  const int shards = ps_tasks ? *ps_tasks : int(loadClusterSpec(cluster_path).ps.size());
  const ModelSpec spec = loadModelSpec(model);
  const LayerGraph graph = buildLayerGraph(spec);
  const VariableLayout layout(graph.variables);
  std::printf("%s: %lld parameters on %d ps task%s\n", spec.name.c_str(),
              static_cast<long long>(graph.parameterCount()), shards, shards == 1 ? "" : "s");
  std::fputs(describePlacement(layout, placeVariables(layout, shards)).c_str(), stdout);
  return 0;
}

// How a TensorFlow 1 job named its variables and optimizer, as flags.
struct TensorflowNameFlags {
  std::string scope;
  std::vector<std::string> layers;  // "name=prefix"
  std::string optimizer_name;
};

void addTensorflowNameFlags(CLI::App& command, TensorflowNameFlags& flags) {
  command.add_option("--scope", flags.scope,
                     "the variable scope the layers were built under (net for net/hidden1/kernel)");
  command.add_option("--layer", flags.layers,
                     "NAME=PREFIX: a layer's variables under another name (logits=net/output); "
                     "repeat for more");
  command.add_option("--optimizer-name", flags.optimizer_name,
                     "the name the TensorFlow or Keras optimizer was given, which names its "
                     "slots or step count (default: TensorFlow's or Keras', Adam, Momentum, "
                     "adam, ...)");
}

TensorflowNames tensorflowNames(const TensorflowNameFlags& flags, const ModelSpec& spec,
                                const std::string& model) {
  TensorflowNames names;
  if (!flags.scope.empty() && !isVariablePrefix(flags.scope))
    throw InputError(
        "--scope " + quotedPrintable(flags.scope) +
        ": expected a variable scope without a leading, trailing or doubled '/', such as net");
  names.scope = flags.scope;
  names.optimizer_name = flags.optimizer_name;
  for (const std::string& layer : flags.layers) {
    const size_t equals = layer.find('=');
    const std::string name = layer.substr(0, equals);
    if (equals == std::string::npos || !isVariablePrefix(layer.substr(equals + 1)))
      throw InputError("--layer " + quotedPrintable(layer) +
                       ": expected NAME=PREFIX, a layer and its variables' prefix in the "
                       "checkpoint without a leading, trailing or doubled '/' (logits=net/output)");
    const auto it = std::find_if(spec.layers.begin(), spec.layers.end(),
                                 [&](const LayerSpec& l) { return l.name == name; });
    if (it == spec.layers.end() || !hasVariables(it->kind))
      throw InputError("--layer " + quotedPrintable(layer) + ": " + quotedPrintable(name) +
                       " is not a dense or conv2d layer of " + model);
    if (!names.layer_sources.emplace(name, layer.substr(equals + 1)).second)
      throw InputError("--layer " + quotedPrintable(layer) + ": layer " + quotedPrintable(name) +
                       " is given twice");
  }
  return names;
}

struct ImportFlags {
  std::string model;
  std::string tensorflow;      // its prefix, or its directory
  std::string checkpoint_dir;  // empty: the spec's checkpoint.dir
  TensorflowNameFlags names;
  std::optional<int64_t> global_step;
};

// A TensorFlow 1 job's whole state as this spec's first checkpoint, which
// traind then resumes from as from its own.
int runImport(const ImportFlags& flags) {
  const ModelSpec spec = loadModelSpec(flags.model);
  const LayerGraph graph = buildLayerGraph(spec);
  const TensorflowNames names = tensorflowNames(flags.names, spec, flags.model);
  const bool from_flag = !flags.checkpoint_dir.empty();
  const std::string dir = from_flag ? flags.checkpoint_dir : spec.checkpoint.dir;
  if (dir.empty())
    throw InputError(flags.model + ": no checkpoint.dir to import into; give --checkpoint-dir");
  // Asked before the long read, and again under the directory's lock.
  auto refuseIfUsed = [&] {
    std::error_code ec;
    if (!std::filesystem::exists(dir, ec)) return;
    if (const auto latest = findLatestCheckpoint(dir))
      throw InputError(dir + " already holds checkpoints (" + latest->filename().string() +
                       "): a run resumes from its latest, not from an import; import into a "
                       "directory of its own");
  };
  refuseIfUsed();
  const std::optional<std::filesystem::path> prefix = findTensorflowCheckpoint(flags.tensorflow);
  if (!prefix)
    throw InputError(flags.tensorflow + ": not a TensorFlow checkpoint (no " + flags.tensorflow +
                     ".index, and not a directory with TensorFlow's 'checkpoint' file)");
  const TensorflowCheckpointReader reader(*prefix);
  ModelState state(spec, graph);
  const std::vector<std::string> said =
      importTensorflowState(reader, names, flags.global_step, spec, state);

  const CheckpointDirLock lock = createCheckpointDir(
      dir, from_flag ? SourceLocation{"--checkpoint-dir"} : spec.checkpoint.dir_location);
  refuseIfUsed();
  const std::filesystem::path saved = state.save(dir, spec.checkpoint.keep).path;
  for (const std::string& line : said) std::printf("%s\n", line.c_str());
  const std::string run =
      "traind --model " + flags.model + (from_flag ? " --checkpoint-dir " + dir : "");
  // The run named reads the spec's data first: one that would refuse them
  // (files of another shape than the model's input, damaged, too big for
  // this machine's memory beside the model) is said, the import kept. The
  // spec's loading refused files that are not there.
  std::optional<std::string> data_refused;
  try {
    (void)loadTrainingData(spec, graph);
  } catch (const InputError& e) {
    data_refused = e.what();
  }
  if (data_refused)
    std::printf("wrote %s\nwarning: `%s` would stop at once: %s\n", saved.string().c_str(),
                run.c_str(), data_refused->c_str());
  else
    std::printf("wrote %s: `%s` trains on from it\n", saved.string().c_str(), run.c_str());
  return 0;
}

struct ExportFlags {
  std::string model;
  std::string checkpoint;  // a checkpoint, or a directory with a latest
  std::string tensorflow;  // the prefix to write
  TensorflowNameFlags names;
};

// SIGINT, SIGTERM and SIGHUP held back while an export writes (trainctl
// runs one thread). stopIfHeld, at writeTensorflowCheckpoint's stop points,
// ends the write when one is pending, and the export takes back what it
// wrote; the signal, let through as this goes, then ends the process as it
// would have.
class HeldTerminationSignals {
 public:
  HeldTerminationSignals() {
    sigset_t held;
    sigemptyset(&held);
    for (const int signal : kHeld) sigaddset(&held, signal);
    pthread_sigmask(SIG_BLOCK, &held, &before_);
  }
  ~HeldTerminationSignals() { pthread_sigmask(SIG_SETMASK, &before_, nullptr); }
  HeldTerminationSignals(const HeldTerminationSignals&) = delete;
  HeldTerminationSignals& operator=(const HeldTerminationSignals&) = delete;

  // Throws when one of them is pending. One the process ignores (nohup's
  // SIGHUP) is pending while held too, and stops nothing.
  static void stopIfHeld() {
    sigset_t pending;
    if (sigpending(&pending) != 0) return;
    for (const int signal : kHeld)
      if (struct sigaction action{}; sigismember(&pending, signal) == 1 &&
                                     sigaction(signal, nullptr, &action) == 0 &&
                                     action.sa_handler != SIG_IGN)
        throw std::runtime_error(std::string("interrupted (") + strsignal(signal) +
                                 "): nothing of the export is left");
  }

 private:
  static constexpr int kHeld[] = {SIGINT, SIGTERM, SIGHUP};
  sigset_t before_;
};

// A checkpoint's whole state as a TensorFlow 1 job's, which a TensorFlow 1
// graph of the spec's variables restores with its Saver and trains on from.
int runExport(const ExportFlags& flags) {
  const ModelSpec spec = loadModelSpec(flags.model);
  const LayerGraph graph = buildLayerGraph(spec);
  const TensorflowNames names = tensorflowNames(flags.names, spec, flags.model);
  ModelState state(spec, graph);
  const std::filesystem::path checkpoint = readResolvedCheckpoint(
      flags.checkpoint,
      [&](const std::filesystem::path& resolved) { state.restoreForExport(resolved); });
  const std::vector<TensorflowTensor> tensors = tensorflowState(state, spec, names);
  // What tensorflowState wrote, by kind: "4 variables, their optimizer
  // slots (m, v), their moving averages, Adam's beta1_power and beta2_power".
  std::string written = std::to_string(state.layout().views().size()) + " variables";
  std::vector<std::string> rule_slots;
  bool averages = false;
  for (const std::string& slot : Optimizer::slotNamesOf(spec.optimizer)) {
    if (slot == Optimizer::kMovingAverageSlot)
      averages = true;
    else
      rule_slots.push_back(slot);
  }
  if (!rule_slots.empty())
    written += fmt::format(", their optimizer slots ({})", fmt::join(rule_slots, ", "));
  if (averages) written += ", their moving averages";
  if (spec.optimizer.kind == OptimizerSpec::Kind::Adam)
    written += ", Adam's beta1_power and beta2_power";
  // Said before a signal held back meanwhile is let through: the export is whole.
  const HeldTerminationSignals held;
  writeTensorflowCheckpoint(flags.tensorflow, tensors, HeldTerminationSignals::stopIfHeld);
  std::printf("wrote %s (%zu tensors: %s, the global step) from %s at global step %lld\n",
              flags.tensorflow.c_str(), tensors.size(), written.c_str(),
              checkpoint.string().c_str(), static_cast<long long>(state.globalStep()));
  if (!state.restoredUnusedState().empty())
    std::printf(
        "left out: %s of the checkpoint, which this spec's update rule (%s) does not "
        "keep\n",
        state.restoredUnusedState().c_str(), updateRule(spec).c_str());
  if (const auto note =
          state.startedAveragesNote(checkpoint, "the moving averages written are its parameters"))
    std::printf("%s\n", note->c_str());
  std::fflush(stdout);
  return 0;
}

int runEval(const std::string& model, const std::string& checkpoint_path, int threads) {
  // The test set alone is read: the training set may be on other machines.
  const ModelSpec spec = loadModelSpec(model, SpecFiles::TestSetOnly);
  const LayerGraph graph = buildLayerGraph(spec);
  const std::optional<Dataset> test = loadTestData(spec, graph);
  if (!test)
    throwInputError(spec.data.location, "data.test",
                    "expected a test set (its images and labels, or records) for trainctl "
                    "eval to evaluate the checkpoint on, got none");
  ModelState state(spec, graph);
  const std::filesystem::path checkpoint =
      readResolvedCheckpoint(checkpoint_path, [&state](const std::filesystem::path& checkpoint) {
        state.restoreForEvaluation(checkpoint);
      });
  const std::unique_ptr<Device> device = createCpuDevice(threads);
  Evaluator evaluator(*device, graph, state.layout(), *test, spec.data.batch_size, spec.seed);
  // As the chief and a standalone run evaluate: the moving averages, if any.
  const EvalResult r = evaluator.evaluate(state.evaluationValues().data());
  std::string accuracy;
  if (spec.loss == LossKind::SoftmaxCrossEntropy)
    accuracy = fmt::format(", test accuracy = {:.4f}", r.accuracy);
  std::printf("%s (global step %lld): test loss = %.4f%s (%lld examples)\n",
              checkpoint.string().c_str(), static_cast<long long>(state.globalStep()), r.loss,
              accuracy.c_str(), static_cast<long long>(r.examples));
  if (const auto note = state.startedAveragesNote(
          checkpoint, "evaluated with its parameters, not with averages of them"))
    std::printf("%s\n", note->c_str());
  return 0;
}

}  // namespace
}  // namespace traind

namespace {

// The command line's command; main says whether its output got out.
int runCommand(int argc, char** argv) {
  using namespace traind;
  setupLogging();
  CLI::App app{"trainctl: talk to a running traind job, inspect and evaluate its checkpoints"};
  app.require_subcommand(1);
  app.set_version_flag("--version", releaseText("trainctl"));

  NodeFlags status_flags, stop_flags, checkpoint_flags;
  CLI::App* status = app.add_subcommand("status", "every node's state, step and throughput");
  addNodeFlags(*status, status_flags, 3.0);
  CLI::App* stop = app.add_subcommand(
      "stop", "stop the job cleanly: workers first (the chief checkpoints), then the ps tasks");
  addNodeFlags(*stop, stop_flags, 60.0);
  stop->add_flag("--force", stop_flags.force,
                 "stop the ps tasks even when the chief did not stop (what the job trained since "
                 "its last checkpoint is lost)");
  CLI::App* checkpoint =
      app.add_subcommand("checkpoint", "have the chief (or a standalone run) checkpoint now");
  addNodeFlags(*checkpoint, checkpoint_flags, 60.0);

  std::string inspect_path;
  CLI::App* inspect = app.add_subcommand(
      "inspect", "a checkpoint's step and tensors, or a TFRecord file's records and features");
  inspect
      ->add_option("checkpoint", inspect_path,
                   "a checkpoint, or a directory with a 'latest'; or a TensorFlow checkpoint "
                   "(its prefix, or its directory); or a TFRecord file of tf.train.Example")
      ->required();

  std::string placement_model, placement_cluster;
  std::optional<int> placement_ps;
  CLI::App* placement = app.add_subcommand("placement", "which ps task holds which variables");
  placement->add_option("--model,-m", placement_model, "model spec (YAML)")
      ->required()
      ->check(traind::fileFlag());
  placement->add_option("--cluster", placement_cluster, "cluster spec (YAML)")
      ->check(traind::fileFlag());
  placement->add_option("--ps", placement_ps, "number of ps tasks")
      ->transform(traind::integerFlag(1, kMaxPsTasks));

  std::string eval_model, eval_checkpoint;
  int eval_threads = 0;
  CLI::App* eval = app.add_subcommand("eval", "test-set loss and accuracy of a checkpoint");
  eval->add_option("--model,-m", eval_model, "model spec (YAML)")
      ->required()
      ->check(traind::fileFlag());
  eval->add_option("--checkpoint", eval_checkpoint, "a checkpoint, or a directory with a 'latest'")
      ->required();
  eval->add_option("--threads", eval_threads, "compute threads (0: one per core)")
      ->transform(traind::integerFlag(0, traind::kMaxThreads));

  ImportFlags import_flags;
  CLI::App* import = app.add_subcommand(
      "import",
      "a TensorFlow 1 job's checkpoint (parameters, optimizer state, moving "
      "averages, global step), or a Keras model's with its optimizer's state, as a model's "
      "first checkpoint, to train on in traind");
  import
      ->add_option(
          "tensorflow", import_flags.tensorflow,
          "the TensorFlow checkpoint: its prefix (model.ckpt-1200), one of its files, or its "
          "directory")
      ->required();
  import->add_option("--model,-m", import_flags.model, "model spec (YAML)")
      ->required()
      ->check(traind::fileFlag());
  import
      ->add_option("--checkpoint-dir", import_flags.checkpoint_dir,
                   "where to write it (default: the spec's checkpoint.dir); must hold none yet")
      ->check(traind::directoryFlag());
  addTensorflowNameFlags(*import, import_flags.names);
  import
      ->add_option("--global-step", import_flags.global_step,
                   "the global step to resume at, in place of the checkpoint's global_step")
      ->transform(traind::integerFlag(0, kMaxGlobalStep));

  ExportFlags export_flags;
  CLI::App* export_command = app.add_subcommand(
      "export",
      "a checkpoint as a TensorFlow 1 job's (parameters, optimizer state, moving "
      "averages, global step), for a TensorFlow 1 graph's Saver to restore");
  export_command
      ->add_option("tensorflow", export_flags.tensorflow,
                   "the TensorFlow checkpoint prefix to write (/models/tf/model.ckpt-1200)")
      ->required();
  export_command->add_option("--model,-m", export_flags.model, "model spec (YAML)")
      ->required()
      ->check(traind::fileFlag());
  export_command
      ->add_option("--checkpoint", export_flags.checkpoint,
                   "a checkpoint, or a directory with a 'latest'")
      ->required();
  addTensorflowNameFlags(*export_command, export_flags.names);

  try {
    // CLI11 says only "A subcommand is required" of a word that is none.
    const std::vector<CLI::App*> commands = app.get_subcommands({});
    if (argc > 1 && argv[1][0] != '-' &&
        std::none_of(commands.begin(), commands.end(),
                     [&](const CLI::App* command) { return command->check_name(argv[1]); })) {
      std::string names;
      for (const CLI::App* command : commands)
        names += (names.empty() ? "" : ", ") + command->get_name();
      std::fprintf(stderr, "trainctl: unknown command '%s': expected one of %s\n",
                   printable(argv[1]).c_str(), names.c_str());
      return 2;
    }
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  try {
    if (status->parsed()) return runStatus(status_flags);
    if (stop->parsed()) return runStop(stop_flags);
    if (checkpoint->parsed()) return runCheckpoint(checkpoint_flags);
    if (inspect->parsed()) return runInspect(inspect_path);
    if (placement->parsed()) return runPlacement(placement_model, placement_cluster, placement_ps);
    if (import->parsed()) return runImport(import_flags);
    if (export_command->parsed()) return runExport(export_flags);
    return runEval(eval_model, eval_checkpoint, eval_threads);
  } catch (const InputError& e) {
    spdlog::error("{}", e.what());
    return 2;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}
}  // namespace

int main(int argc, char** argv) {
  traind::openClosedStandardStreams();
  return traind::exitAfterOutput(runCommand(argc, argv), "trainctl");
}
