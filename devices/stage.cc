#include "devices/stage.h"

#include "core/error.h"
#include "devices/device_list.h"

namespace traind {

std::unique_ptr<StageReplica> Device::createStage(const LayerGraph&, const VariableLayout&,
                                                  const StageRange&, int64_t, int, uint64_t) {
  throw InputError("device " + name() + " cannot run a pipeline stage: " + kNoPipelineStages);
}

}  // namespace traind
