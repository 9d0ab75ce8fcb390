// How stale the gradients an async ps shard applied were: for each whole
// push, the global steps the shard had taken since the pull its gradient
// was computed from (0 when none came between). It grows with the workers
// and with a slow one, and with it the loss an async job reaches (what a
// sync job avoids by dropping stale gradients: ParameterShard::staleDropped).
#pragma once

#include <algorithm>
#include <cstdint>

namespace traind {

struct GradientStaleness {
  int64_t pushes = 0;
  double steps = 0.0;  // summed over the pushes (a double: a lying peer's cannot overflow it)
  int64_t most = 0;

  void record(int64_t behind) {
    ++pushes;
    steps += double(behind);
    most = std::max(most, behind);
  }
  double mean() const { return pushes > 0 ? steps / double(pushes) : 0.0; }
};

}  // namespace traind
