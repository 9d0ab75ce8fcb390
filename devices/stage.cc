#include "devices/stage.h"

#include "core/error.h"

namespace traind {

std::unique_ptr<StageReplica> Device::createStage(const LayerGraph&, const VariableLayout&,
                                                  const StageRange&, int64_t, int, uint64_t) {
  throw InputError("device " + name() +
                   " cannot run a pipeline stage: placed layers (device:, stages:) and "
                   "micro_batches > 1 run on CPU devices only in this build");
}

}  // namespace traind
