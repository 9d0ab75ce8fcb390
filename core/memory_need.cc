#include "core/memory_need.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/sysinfo.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <string_view>

#include "core/error.h"
#include "core/optimizer.h"
#include "core/stage_plan.h"

namespace traind {
namespace {

// A cgroup's limit file: a number of bytes, or "max" (none).
std::optional<int64_t> cgroupLimit(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return std::nullopt;
  try {
    const long long bytes = std::stoll(text);
    // cgroup v1 says "none" with a number near 2^63.
    if (bytes <= 0 || bytes >= (int64_t(1) << 62)) return std::nullopt;
    return bytes;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// What a cgroup's limits let its processes have, memory and swap, at its
// directory `dir` (v2, or v1 with `v1`); `host_swap` where it leaves swap
// unbounded.
std::optional<int64_t> cgroupAllows(const std::string& dir, bool v1, int64_t host_swap) {
  if (v1) {
    if (const auto both = cgroupLimit(dir + "/memory.memsw.limit_in_bytes")) return both;
    if (const auto memory = cgroupLimit(dir + "/memory.limit_in_bytes")) return *memory + host_swap;
    return std::nullopt;
  }
  const auto memory = cgroupLimit(dir + "/memory.max");
  if (!memory) return std::nullopt;
  return *memory + cgroupLimit(dir + "/memory.swap.max").value_or(host_swap);
}

// The lowest of what this process's memory cgroups allow, v2 and v1, at the
// paths /proc/self/cgroup names and at the root a cgroup namespace shows.
std::optional<int64_t> cgroupMemoryLimit(int64_t host_swap) {
  std::optional<int64_t> lowest;
  auto take = [&](std::optional<int64_t> limit) {
    if (limit && (!lowest || *limit < *lowest)) lowest = limit;
  };
  std::ifstream cgroups("/proc/self/cgroup");
  for (std::string line; std::getline(cgroups, line);) {
    if (line.starts_with("0::"))
      take(cgroupAllows("/sys/fs/cgroup" + line.substr(3), false, host_swap));
    else if (const size_t at = line.find(":memory:"); at != std::string::npos)
      take(cgroupAllows("/sys/fs/cgroup/memory" + line.substr(at + 8), true, host_swap));
  }
  take(cgroupAllows("/sys/fs/cgroup", false, host_swap));
  take(cgroupAllows("/sys/fs/cgroup/memory", true, host_swap));
  return lowest;
}

// A field of /proc/self/status in bytes ("VmSize:"), 0 when it cannot be read.
int64_t statusBytes(std::string_view field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.starts_with(field)) return std::atoll(line.c_str() + field.size()) * 1024;
  return 0;
}

// What `ulimit -v` (the address space) and `ulimit -d` (the data segment)
// leave this process beyond what it holds now. A run past them fails an
// allocation (oneDNN: "could not create a memory object") instead of
// being refused before it starts.
std::optional<int64_t> roomUnderProcessLimits() {
  std::optional<int64_t> lowest;
  for (const auto& [resource, field] :
       {std::pair{RLIMIT_AS, "VmSize:"}, std::pair{RLIMIT_DATA, "VmData:"}}) {
    rlimit limit{};
    if (getrlimit(resource, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) continue;
    const int64_t most = int64_t(std::min<rlim_t>(limit.rlim_cur, rlim_t(INT64_MAX)));
    const int64_t left = std::max<int64_t>(0, most - statusBytes(field));
    if (!lowest || left < *lowest) lowest = left;
  }
  return lowest;
}

}  // namespace

MemoryNeed memoryNeed(const ModelSpec& spec, const LayerGraph& graph, MemoryOf whose) {
  MemoryNeed need;
  // Values, gradients, the optimizer's slots; a worker but the chief holds
  // a step's gradients and the parameters it pulled.
  const int64_t copies = whose == MemoryOf::ClusterWorker
                             ? 2
                             : 2 + int64_t(Optimizer::slotNamesOf(spec.optimizer).size());
  // Layer outputs on a GPU are its memory, not the host's.
  const bool host_outputs =
      std::none_of(spec.training.devices.begin(), spec.training.devices.end(),
                   [](const std::string& d) { return d.starts_with("cuda"); });
  // A layer's output has a gradient beside it once the backward pass
  // reaches it: from the first layer with variables to train on (the
  // frozen layers before it run forward only).
  bool backward = false;
  int64_t trainable_floats = 0;
  for (size_t i = 0; i < graph.layers.size(); ++i) {
    const LayerNode& layer = graph.layers[i];
    int64_t floats = 0;
    for (int v : layer.variables) {
      floats += numElements(graph.variables[size_t(v)].shape);
      backward = backward || graph.variables[size_t(v)].trainable;
      if (graph.variables[size_t(v)].trainable)
        trainable_floats += numElements(graph.variables[size_t(v)].shape);
    }
    const int64_t state = floats * int64_t(sizeof(float)) * copies;
    need.state_bytes += state;
    if (state > need.largest_layer_bytes) {
      need.largest_layer = int(i);
      need.largest_layer_bytes = state;
    }
    if (host_outputs)
      need.activation_bytes += numElements(layer.output_shape) * spec.data.batch_size *
                               int64_t(sizeof(float)) * spec.training.concurrent_steps *
                               (backward ? 2 : 1);
  }
  // A worker's steps each hold a gradient and the parameters pulled for
  // them, of the whole model: beside the chief's values (counted above with
  // a gradient), 2K - 1 copies more; beside another worker's first step's
  // (counted above), 2K - 2.
  if (whose != MemoryOf::StandaloneRun) {
    const int64_t model_bytes = int64_t(sizeof(float)) * [&] {
      int64_t floats = 0;
      for (const VariableSpec& v : graph.variables) floats += numElements(v.shape);
      return floats;
    }();
    need.step_buffer_bytes = model_bytes * (2 * int64_t(spec.training.concurrent_steps) -
                                            (whose == MemoryOf::ClusterChief ? 1 : 2));
  }
  // CPU towers (several devices, no layer placed on one): every tower but
  // the first computes into a gradient buffer of its own (docs/devices.md).
  if (host_outputs && !isPlaced(spec) && spec.training.devices.size() > 1)
    need.state_bytes +=
        int64_t(spec.training.devices.size() - 1) * trainable_floats * int64_t(sizeof(float));
  need.input_bytes = int64_t(spec.data.prefetch_batches.value_or(0)) * spec.data.batch_size *
                     numElements(graph.input_shape) * int64_t(sizeof(float));
  return need;
}

std::optional<int64_t> memoryAvailable() {
  std::optional<int64_t> available;
  int64_t swap = 0;
  struct sysinfo info {};
  if (sysinfo(&info) == 0) {
    swap = int64_t(info.totalswap) * int64_t(info.mem_unit);
    available = int64_t(info.totalram) * int64_t(info.mem_unit) + swap;
  }
  if (const std::optional<int64_t> limit = cgroupMemoryLimit(swap))
    if (!available || *limit < *available) available = limit;
  if (const std::optional<int64_t> left = roomUnderProcessLimits())
    if (!available || *left < *available) available = left;
  return available;
}

std::string byteSize(int64_t bytes) {
  constexpr std::string_view kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double value = double(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} bytes", bytes) : fmt::format("{:.1f} {}", value, kUnits[unit]);
}

namespace {

// "606.0 MiB of the steps' pulled parameters and gradients, " for a cluster
// worker; empty otherwise.
std::string stepBuffersText(const MemoryNeed& need) {
  if (need.step_buffer_bytes == 0) return "";
  return fmt::format("{} of the steps' pulled parameters and gradients, ",
                     byteSize(need.step_buffer_bytes));
}

}  // namespace

std::string memoryReport(const MemoryNeed& need, std::optional<int64_t> available) {
  return fmt::format(
      "memory: at least {} ({} of variables with their gradients and optimizer slots, {}{} of "
      "layer outputs and their gradients per step{}){}\n",
      byteSize(need.total()), byteSize(need.state_bytes), stepBuffersText(need),
      byteSize(need.activation_bytes),
      need.input_bytes > 0
          ? fmt::format(", {} of input batches read ahead", byteSize(need.input_bytes))
          : "",
      available ? fmt::format("; this machine gives a process {}", byteSize(*available)) : "");
}

void checkMemoryFits(const ModelSpec& spec, const LayerGraph& graph, const MemoryNeed& need,
                     std::optional<int64_t> available) {
  if (!available || need.total() <= *available) return;
  const std::string what = fmt::format(
      "the model needs at least {} of memory ({} of variables with their gradients and "
      "optimizer slots, {}{} of layer outputs and their gradients for a batch of {}{}{}), and "
      "this machine gives a process {} ({})",
      byteSize(need.total()), byteSize(need.state_bytes), stepBuffersText(need),
      byteSize(need.activation_bytes), spec.data.batch_size,
      spec.training.concurrent_steps > 1
          ? fmt::format(" times {} steps in flight", spec.training.concurrent_steps)
          : "",
      need.input_bytes > 0 ? fmt::format(", {} of the {} input batches read ahead",
                                         byteSize(need.input_bytes), *spec.data.prefetch_batches)
                           : "",
      byteSize(*available), kMemoryAvailableWords);
  if (need.state_bytes >= need.activation_bytes && need.largest_layer >= 0) {
    const LayerNode& layer = graph.layers[size_t(need.largest_layer)];
    throwInputError(layer.spec.location,
                    fmt::format("layers[{}] ({})", need.largest_layer, layer.spec.name),
                    fmt::format("{}; this layer's part is {}: expected a smaller layer", what,
                                byteSize(need.largest_layer_bytes)));
  }
  throwInputError(spec.data.batch_size_location, "data.batch_size",
                  what + ": expected a smaller batch");
}

}  // namespace traind
