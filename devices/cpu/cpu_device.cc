#include "devices/cpu/cpu_device.h"

#include <oneapi/dnnl/dnnl.hpp>

#include "devices/cpu/cpu_replica.h"

namespace traind {
namespace {

// Replicas share the engine; each sets the thread count itself, for the
// thread that builds it and for every step.
class CpuDevice : public Device {
 public:
  explicit CpuDevice(int threads) : threads_(threads), engine_(dnnl::engine::kind::cpu, 0) {}

  std::string name() const override { return "cpu"; }

  std::unique_ptr<Replica> createReplica(const LayerGraph& graph, const VariableLayout& layout,
                                         int64_t batch_size, uint64_t seed) override {
    return std::make_unique<CpuReplica>(engine_, graph, layout, batch_size, seed, threads_);
  }

 private:
  int threads_;
  dnnl::engine engine_;
};

}  // namespace

std::unique_ptr<Device> createCpuDevice(int threads) {
  return std::make_unique<CpuDevice>(threads);
}

}  // namespace traind
