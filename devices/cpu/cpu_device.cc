#include "devices/cpu/cpu_device.h"

#include <new>
#include <oneapi/dnnl/dnnl.hpp>
#include <utility>

#include "devices/cpu/cpu_replica.h"
#include "devices/cpu/cpu_stage.h"

namespace traind {
namespace {

// `build()`, with oneDNN's failure to allocate thrown as std::bad_alloc:
// its own words ("could not create a memory object") name no cause, and
// traind says what to do about memory (the daemon's main).
template <typename Build>
auto allocating(Build build) {
  try {
    return build();
  } catch (const dnnl::error& e) {
    if (e.status == dnnl_out_of_memory) throw std::bad_alloc();
    throw;
  }
}

// Replicas share the engine; each sets the thread count itself, for the
// thread that builds it and for every step.
class CpuDevice : public Device {
 public:
  CpuDevice(int threads, std::string name)
      : threads_(threads), name_(std::move(name)), engine_(dnnl::engine::kind::cpu, 0) {}

  std::string name() const override { return name_; }

  std::unique_ptr<Replica> createReplica(const LayerGraph& graph, const VariableLayout& layout,
                                         int64_t batch_size, uint64_t seed) override {
    return allocating([&] {
      return std::make_unique<CpuReplica>(engine_, graph, layout, batch_size, seed, threads_);
    });
  }

  std::unique_ptr<StageReplica> createStage(const LayerGraph& graph, const VariableLayout& layout,
                                            const StageRange& range, int64_t micro_batch_size,
                                            int slots, uint64_t seed) override {
    return allocating([&] {
      return std::make_unique<CpuStage>(engine_, graph, layout, range, micro_batch_size, slots,
                                        seed, threads_);
    });
  }

 private:
  int threads_;
  std::string name_;
  dnnl::engine engine_;
};

}  // namespace

std::unique_ptr<Device> createCpuDevice(int threads, std::string name) {
  return std::make_unique<CpuDevice>(threads, std::move(name));
}

}  // namespace traind
