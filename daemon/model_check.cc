#include "daemon/model_check.h"

#include <fmt/format.h>

namespace traind {

std::string layerTable(const ModelSpec& spec, const LayerGraph& graph) {
  std::string out = fmt::format("model {} ({})\n", spec.name, spec.path);
  out += fmt::format("{:<16} {:<12} {:<16} {:>12}\n", "layer", "type", "output shape", "params");
  out += fmt::format("{:<16} {:<12} {:<16} {:>12}\n", "input", "", shapeToString(graph.input_shape),
                     0);
  for (const LayerNode& node : graph.layers) {
    int64_t params = 0;
    for (int v : node.variables) params += numElements(graph.variables[size_t(v)].shape);
    std::string type = layerKindName(node.spec.kind);
    if (!node.spec.trainable) type += " (frozen)";
    out += fmt::format("{:<16} {:<12} {:<16} {:>12}\n", node.spec.name, type,
                       shapeToString(node.output_shape), params);
  }
  out += fmt::format("{:<16} {:<12} {:<16} {:>12}\n", "total", "", "", graph.parameterCount());
  return out;
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
