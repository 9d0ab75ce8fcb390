// The standalone role: the whole training loop in one process, no network.
// It is what users try first and the baseline of every distributed figure.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/layer_graph.h"
#include "core/model_spec.h"
#include "core/variable_layout.h"
#include "daemon/node_metrics.h"
#include "devices/resident_trainer.h"

namespace traind {

// Why a standalone run of `spec` on GPUs takes the Replica path, or nullopt
// when it keeps the model on the GPU: for its log line and `traind check`.
std::optional<std::string> gpuReplicaPathReason(const ModelSpec& spec);

struct TrainingSummary {
  int64_t global_step = 0;   // where training ended
  int64_t steps_run = 0;     // steps this process ran
  double seconds = 0.0;      // wall time of those steps
  bool stopped = false;      // ended early by a stop request
  std::optional<double> test_loss;
  std::optional<double> test_accuracy;
};

// Trains `spec` to its end: restores the latest checkpoint of
// spec.checkpoint.dir if there is one (else initialises, with init_from),
// logs every log_every steps, evaluates every eval_every steps and at the
// end, checkpoints every every_steps steps / every_seconds seconds and at the
// end. When `stop_requested` becomes true it checkpoints, evaluates and
// returns early (a stop before this process's first step saves and
// evaluates nothing);
// when `checkpoint_requested` is set it checkpoints at the next step boundary
// and clears it. Reports its state and steps in `metrics`.
//
// On GPUs (towers on one GPU), with one step in flight, the model and the
// optimizer's slots stay on the GPU between evaluations and checkpoints
// (devices/resident_trainer.h); otherwise each step goes through a replica
// and the update runs on the host (a log line says why on GPUs).
// `resident_trainer`, when given, makes the resident trainer of any run
// with one step in flight, on any devices: the tests' host-side stand-in
// for a GPU's.
using ResidentTrainerFactory = std::function<std::unique_ptr<ResidentTrainer>(
    const ModelSpec& spec, const LayerGraph& graph, const VariableLayout& layout)>;
TrainingSummary runStandalone(const ModelSpec& spec, const std::atomic<bool>& stop_requested,
                              std::atomic<bool>& checkpoint_requested, NodeMetrics& metrics,
                              const ResidentTrainerFactory& resident_trainer = {});

}  // namespace traind
