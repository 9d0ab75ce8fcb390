#include "daemon/cluster_fit.h"

#include <fmt/format.h>

#include "core/error.h"

namespace traind {

void checkModelFitsCluster(const ModelSpec& spec, const ClusterSpec& cluster) {
  const int concurrent_steps = spec.training.concurrent_steps;
  if (cluster.mode == TrainingMode::Sync && concurrent_steps > 1)
    throwInputError(spec.training.concurrent_steps_location, "training.concurrent_steps",
                    fmt::format("{} steps in flight need mode: async, and {} sets mode: sync, "
                                "where a worker's next step waits for the job's global step to "
                                "advance, so its steps cannot overlap; set concurrent_steps: 1 "
                                "or mode: async",
                                concurrent_steps, cluster.path));
}

}  // namespace traind
