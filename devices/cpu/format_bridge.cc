#include "devices/cpu/format_bridge.h"

#include "devices/cpu/memory_format.h"

namespace traind {

FormatBridge readAs(PrimitiveSet& primitives, BoundMemory& memory, const dnnl::memory& source,
                    const dnnl::memory::desc& format) {
  const dnnl::memory::desc source_format = source.get_desc();
  if (source_format == format) return {source, nullptr};
  if (sameLayout(source_format, format)) return {memory.alias(source, format), nullptr};
  FormatBridge bridge{memory.allocate(format), nullptr};
  bridge.reorder = &primitives.addReorder(source, bridge.memory);
  return bridge;
}

FormatBridge writeAs(PrimitiveSet& primitives, BoundMemory& memory, const dnnl::memory& target,
                     const dnnl::memory::desc& format) {
  const dnnl::memory::desc target_format = target.get_desc();
  if (target_format == format) return {target, nullptr};
  if (sameLayout(target_format, format)) return {memory.alias(target, format), nullptr};
  FormatBridge bridge{memory.allocate(format), nullptr};
  bridge.reorder = &primitives.addReorder(bridge.memory, target);
  return bridge;
}

}  // namespace traind
