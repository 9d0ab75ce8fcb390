#include "daemon/model_check.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include "core/checkpoint.h"
#include "core/learning_rate.h"
#include "core/model_state.h"
#include "core/stage_plan.h"
#include "core/tensorflow_checkpoint.h"
#include "daemon/standalone.h"
#include "devices/device_list.h"
#include "devices/model_replica.h"
#include "devices/pipeline_schedule.h"

namespace traind {
namespace {

// Why a run could not create `dir` or write in it, or nullopt, as far as
// can be told without creating anything: the nearest of it and its parents
// that exists must be a directory this process may write in.
std::optional<std::string> whyNotCreatable(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code error;
  fs::path at = fs::absolute(dir, error);
  if (error) return fmt::format("{}: {}", dir.string(), error.message());
  // A link to nowhere is there: creating the directory in its place fails.
  while (at.has_relative_path() && !fs::exists(fs::symlink_status(at, error)))
    at = at.parent_path();
  if (std::error_code follow;
      fs::is_symlink(fs::symlink_status(at, error)) && !fs::exists(at, follow))
    return follow ? fmt::format("{}: {}", at.string(), follow.message())
                  : fmt::format("{} is a symbolic link to nothing", at.string());
  if (!fs::is_directory(at, error)) return fmt::format("{} is not a directory", at.string());
  if (access(at.c_str(), W_OK | X_OK) != 0)
    return fmt::format("{}: {}", at.string(), std::strerror(errno));
  return std::nullopt;
}

std::string optimizerSummary(const ModelSpec& spec) {
  const OptimizerSpec& optimizer = spec.optimizer;
  std::string out(optimizerName(optimizer.kind));
  out += ", learning rate " + describeLearningRate(spec.learning_rate);
  if (optimizer.clip_global_norm != 0.0f)
    out += fmt::format(", each step's gradient clipped to a global norm of {}",
                       optimizer.clip_global_norm);
  if (const auto& average = optimizer.moving_average)
    out += fmt::format(", then moving averages of the variables (decay {}{}), used for evaluation",
                       average->decay,
                       average->num_updates ? ", at most (1 + t) / (10 + t) at update t" : "");
  return out;
}

}  // namespace

// Layer, type (15: "conv2d (frozen)"), output shape, parameters.
constexpr const char* kRowFormat = "{:<16} {:<15} {:<16} {:>12}\n";

std::string layerTable(const ModelSpec& spec, const LayerGraph& graph) {
  std::string out = fmt::format("model {} ({})\n", spec.name, spec.path);
  out += fmt::format(fmt::runtime(kRowFormat), "layer", "type", "output shape", "params");
  out += fmt::format(fmt::runtime(kRowFormat), "input", "", shapeToString(graph.input_shape), 0);
  for (const LayerNode& node : graph.layers) {
    int64_t params = 0;
    for (int v : node.variables) params += numElements(graph.variables[size_t(v)].shape);
    std::string type = layerKindName(node.spec.kind);
    if (!node.spec.trainable) type += " (frozen)";
    out += fmt::format(fmt::runtime(kRowFormat), node.spec.name, type,
                       shapeToString(node.output_shape), params);
  }
  out += fmt::format(fmt::runtime(kRowFormat), "total", "", "", graph.parameterCount());
  out += "optimizer: " + optimizerSummary(spec) + "\n";
  return out;
}

namespace {

// The placement proper: layers on devices and the schedule of a step.
std::string layerPlacement(const ModelSpec& spec, const LayerGraph& graph) {
  const std::vector<std::string>& devices = spec.training.devices;
  const StagePlan plan = planStages(spec, graph, devices);
  const int64_t batch_size = spec.data.batch_size;
  const int micro_batches = spec.training.micro_batches;
  checkModelReplica(spec, plan);
  if (!plan.placed) {
    std::string out = devices.size() == 1
                          ? "placement: none: the whole model on " + devices.front() + "\n"
                          : fmt::format("placement: none: towers, the whole model on each of {} "
                                        "devices, each on its share of the batch\n",
                                        devices.size());
    if (micro_batches > 1)
      out += fmt::format("micro-batches: {} per {}, one after the other, gradients accumulated\n",
                         micro_batches, devices.size() == 1 ? "step" : "device's share");
    return out;
  }
  // One stage is neither: every layer placed on one device.
  const char* kind = plan.stages.size() == 1 ? "every layer on one device"
                     : micro_batches == 1    ? "model parallel"
                                             : "pipeline";
  std::string out =
      fmt::format("placement: {} stage{} ({}), {} micro-batch{} of {} per step\n",
                  plan.stages.size(), plan.stages.size() == 1 ? "" : "s", kind, micro_batches,
                  micro_batches == 1 ? "" : "es", batch_size / micro_batches);
  out += fmt::format("{:<16} {:<10} {}\n", "layer", "device", "stage");
  for (const PipelineStage& stage : plan.stages)
    for (int i = stage.first_layer; i < stage.end_layer; ++i)
      out += fmt::format("{:<16} {:<10} {}\n", graph.layers[size_t(i)].spec.name, stage.device,
                         stage.name);
  // A chart grows with stages x micro-batches: past what a screen shows,
  // only its size is given (micro_batches can be a batch of millions).
  constexpr int kMostCharted = 64;
  if (micro_batches > kMostCharted || plan.stages.size() > size_t(kMostCharted))
    return out + fmt::format(
                     "schedule of a step, 1F1B: {} micro-batches through {} stages, too "
                     "many to draw (a chart takes at most {} of each)\n",
                     micro_batches, plan.stages.size(), kMostCharted);
  std::vector<std::string> labels;
  // A stage runs backward passes once it or an earlier one trains a variable.
  std::vector<bool> backward;
  bool trains = false;
  for (const PipelineStage& stage : plan.stages) {
    labels.push_back(stage.name + " (" + stage.device + ")");
    for (int i = stage.first_layer; i < stage.end_layer; ++i)
      for (int v : graph.layers[size_t(i)].variables)
        trains = trains || graph.variables[size_t(v)].trainable;
    backward.push_back(trains);
  }
  out +=
      "schedule of a step, 1F1B (Fm, Bm: forward, backward of micro-batch m; every pass one "
      "unit of time; ..: waiting";
  if (!backward.front())
    out +=
        "; a stage with no trainable variable in it or before it runs no "
        "backward pass";
  out += "):\n";
  out += scheduleChart(labels, micro_batches, backward);
  return out;
}

}  // namespace

std::string placementReport(const ModelSpec& spec, const LayerGraph& graph) {
  std::string out = layerPlacement(spec, graph);
  const int k = spec.training.concurrent_steps;
  if (k > 1)
    out += fmt::format("concurrent steps: {} in flight, each on its own batch with 1/{} of the "
                       "compute threads (at least one)\n",
                       k, k);
  if (everyDeviceIsGpu(spec.training.devices)) {
    const std::optional<std::string> reason = gpuReplicaPathReason(spec);
    out += reason ? fmt::format("on GPUs: {}: each step's update runs on the host, "
                                "standalone as on a worker\n",
                                *reason)
                  : "on GPUs: a standalone run keeps the model and the optimizer's slots "
                    "there; a worker's steps take the parameters from the host and give the "
                    "gradients back to it\n";
  }
  return out;
}

// The line before what a run that starts now would refuse.
constexpr const char* kWarning = "warning: a run that starts before this changes stops at once: ";

std::string resumeReport(const ModelSpec& spec, const LayerGraph& graph) {
  if (spec.checkpoint.dir.empty()) return "";
  if (const auto why = whyNotCreatable(spec.checkpoint.dir))
    return fmt::format("{}checkpoint directory {}: cannot create it or write in it: {}\n", kWarning,
                       spec.checkpoint.dir, *why);
  try {
    const std::optional<std::filesystem::path> latest = findLatestCheckpoint(spec.checkpoint.dir);
    if (!latest)
      return fmt::format("resumes: nothing to resume in {}: a run starts afresh\n",
                         spec.checkpoint.dir);
    std::string report = fmt::format("resumes: from {} at global step {}\n", latest->string(),
                                     readManifest(*latest).global_step);
    try {
      ModelState::checkRestorable(spec, graph, *latest);
    } catch (const InputError& e) {
      report += kWarning + std::string(e.what()) + "\n";
    }
    return report;
  } catch (const InputError& e) {
    return kWarning + std::string(e.what()) + "\n";
  }
}

std::string summaryReport(const ModelSpec& spec) {
  const std::string dir = summaryDirectory(spec);
  if (dir.empty()) return "";
  if (const auto why = whyNotCreatable(dir))
    return fmt::format("{}summary directory {}: cannot create it or write in it: {}\n", kWarning,
                       dir, *why);
  return fmt::format("summaries: TensorBoard event files in {}\n", dir);
}

std::string initFromReport(const ModelSpec& spec) {
  if (!spec.init_from) return "";
  const InitFromSpec& init_from = *spec.init_from;
  // A run that resumes from its own checkpoint reads no init_from.
  std::optional<std::filesystem::path> resumes;
  if (!spec.checkpoint.dir.empty()) {
    try {
      resumes = findLatestCheckpoint(spec.checkpoint.dir);
    } catch (const InputError&) {
      // A damaged directory is the run's to report, as it starts.
    }
  }
  if (resumes)
    return fmt::format("init_from: not read: a run resumes from {}\n", resumes->string());
  std::vector<std::string> layers;
  for (const InitFromLayer& layer : init_from.layers) layers.push_back(layer.name);
  std::string report = fmt::format("init_from: {} from {} (copied as a run starts)\n",
                                   fmt::join(layers, ", "), init_from.checkpoint);
  // Its tensors' names and shapes against the layers', as a run checks
  // them; a warning, as the checkpoint may be written or changed before the
  // run starts.
  try {
    checkInitFromFits(init_from, buildLayerGraph(spec));
  } catch (const InputError& e) {
    report += fmt::format("{}{}\n", kWarning, e.what());
  }
  return report;
}

std::string taskTable(const ClusterSpec& cluster) {
  std::string out;
  for (size_t i = 0; i < cluster.ps.size(); ++i)
    out += fmt::format("ps {} {}\n", i, cluster.ps[i].toString());
  for (size_t i = 0; i < cluster.worker.size(); ++i)
    out += fmt::format("worker {} {}\n", i, cluster.worker[i].toString());
  return out;
}

}  // namespace traind
