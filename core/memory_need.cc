#include "core/memory_need.h"

#include <fmt/format.h>
#include <sys/sysinfo.h>

#include <fstream>
#include <string_view>

#include "core/error.h"

namespace traind {
namespace {

int64_t optimizerSlots(const ModelSpec& spec) {
  int64_t slots = 0;
  switch (spec.optimizer.kind) {
    case OptimizerSpec::Kind::Sgd:
      slots = 0;
      break;
    case OptimizerSpec::Kind::Momentum:
      slots = 1;
      break;
    case OptimizerSpec::Kind::Adagrad:
      slots = 1;
      break;
    case OptimizerSpec::Kind::Adam:
      slots = 2;
      break;
  }
  return spec.optimizer.moving_average ? slots + 1 : slots;
}

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

// The limits of this process's memory cgroup, v2 and v1, at the path
// /proc/self/cgroup names and at the root a cgroup namespace shows.
std::optional<int64_t> cgroupMemoryLimit() {
  std::optional<int64_t> lowest;
  auto take = [&](std::optional<int64_t> limit) {
    if (limit && (!lowest || *limit < *lowest)) lowest = limit;
  };
  std::ifstream cgroups("/proc/self/cgroup");
  for (std::string line; std::getline(cgroups, line);) {
    if (line.starts_with("0::"))
      take(cgroupLimit("/sys/fs/cgroup" + line.substr(3) + "/memory.max"));
    else if (const size_t at = line.find(":memory:"); at != std::string::npos)
      take(cgroupLimit("/sys/fs/cgroup/memory" + line.substr(at + 8) + "/memory.limit_in_bytes"));
  }
  take(cgroupLimit("/sys/fs/cgroup/memory.max"));
  take(cgroupLimit("/sys/fs/cgroup/memory/memory.limit_in_bytes"));
  return lowest;
}

}  // namespace

MemoryNeed memoryNeed(const ModelSpec& spec, const LayerGraph& graph) {
  MemoryNeed need;
  const int64_t copies = 2 + optimizerSlots(spec);  // values, gradients, slots
  for (size_t i = 0; i < graph.layers.size(); ++i) {
    const LayerNode& layer = graph.layers[i];
    int64_t floats = 0;
    for (int v : layer.variables) floats += numElements(graph.variables[size_t(v)].shape);
    const int64_t state = floats * int64_t(sizeof(float)) * copies;
    need.state_bytes += state;
    if (state > need.largest_layer_bytes) {
      need.largest_layer = int(i);
      need.largest_layer_bytes = state;
    }
    need.activation_bytes += numElements(layer.output_shape) * spec.data.batch_size *
                             int64_t(sizeof(float)) * spec.training.concurrent_steps;
  }
  return need;
}

std::optional<int64_t> memoryAvailable() {
  std::optional<int64_t> available;
  struct sysinfo info {};
  if (sysinfo(&info) == 0)
    available = (int64_t(info.totalram) + int64_t(info.totalswap)) * int64_t(info.mem_unit);
  if (const std::optional<int64_t> limit = cgroupMemoryLimit())
    if (!available || *limit < *available) available = limit;
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

std::string memoryReport(const MemoryNeed& need, std::optional<int64_t> available) {
  return fmt::format(
      "memory: at least {} ({} of variables with their gradients and optimizer slots, {} of "
      "layer outputs per step){}\n",
      byteSize(need.total()), byteSize(need.state_bytes), byteSize(need.activation_bytes),
      available ? fmt::format("; this machine gives a process {}", byteSize(*available)) : "");
}

void checkMemoryFits(const ModelSpec& spec, const LayerGraph& graph, const MemoryNeed& need,
                     std::optional<int64_t> available) {
  if (!available || need.total() <= *available) return;
  const std::string what = fmt::format(
      "the model needs at least {} of memory ({} of variables with their gradients and "
      "optimizer slots, {} of layer outputs for a batch of {}{}), and this machine gives a "
      "process {} (physical memory and swap, or its cgroup's limit)",
      byteSize(need.total()), byteSize(need.state_bytes), byteSize(need.activation_bytes),
      spec.data.batch_size,
      spec.training.concurrent_steps > 1
          ? fmt::format(" times {} steps in flight", spec.training.concurrent_steps)
          : "",
      byteSize(*available));
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
