// The roles of a cluster node (design §1): a ps task serves its shard of the
// parameters; a worker task trains on its share of the data against the ps
// shards; worker 0, the chief, also initialises or restores the parameters,
// evaluates, writes checkpoints and ends the job.
#pragma once

#include <atomic>

#include "core/cluster_spec.h"
#include "core/model_spec.h"
#include "daemon/node_metrics.h"
#include "daemon/standalone.h"
#include "daemon/stop_request.h"

namespace traind {

// Serves until the chief says the job is done or `stop` is requested (then
// its workers' pulls say the job is done, as at the end, and its log who
// asked). Reports its
// state and counters in `metrics`.
void runParameterServer(const ModelSpec& spec, const ClusterSpec& cluster, int task,
                        const StopRequest& stop, NodeMetrics& metrics);

// Trains until the job's global step reaches its end, the ps shards stop, or
// `stop_requested` is set (the chief then checkpoints first). The chief
// also checkpoints at the first step boundary after `checkpoint_requested`
// is set, and clears it. Reports its state, steps and transfers in `metrics`.
TrainingSummary runWorker(const ModelSpec& spec, const ClusterSpec& cluster, int task,
                          const std::atomic<bool>& stop_requested,
                          std::atomic<bool>& checkpoint_requested, NodeMetrics& metrics);

}  // namespace traind
