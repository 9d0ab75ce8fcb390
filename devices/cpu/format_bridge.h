// A tensor seen in the memory format a primitive wants. When the formats name
// the same bytes (sameLayout) the bridge is an alias and costs nothing;
// otherwise it is a buffer of its own and a reorder that the layer runs
// every step.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include "devices/cpu/bound_memory.h"
#include "devices/cpu/primitive_set.h"

namespace traind {

struct FormatBridge {
  dnnl::memory memory;                     // in the wanted format
  const PrimitiveCall* reorder = nullptr;  // null when memory is an alias

  void run(dnnl::stream& stream) const {
    if (reorder) reorder->run(stream);
  }
};

// To read `source` in `format`: run() before the reader.
FormatBridge readAs(PrimitiveSet& primitives, BoundMemory& memory, const dnnl::memory& source,
                    const dnnl::memory::desc& format);

// To write `target` in `format`: the writer writes bridge.memory, then run()
// copies it into `target`.
FormatBridge writeAs(PrimitiveSet& primitives, BoundMemory& memory, const dnnl::memory& target,
                     const dnnl::memory::desc& format);

}  // namespace traind
