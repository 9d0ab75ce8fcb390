#include "devices/model_replica.h"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "core/error.h"
#include "devices/device_list.h"
#include "devices/pipeline.h"
#include "devices/towers.h"

namespace traind {
namespace {

// A device whose replicas run their batch as micro-batches: a pipeline of
// the whole model as one stage on the device it wraps, which runs on the
// calling thread (the tower's).
class MicroBatchingDevice : public Device {
 public:
  MicroBatchingDevice(Device& device, const StagePlan& whole_model, int micro_batches)
      : device_(device), whole_model_(whole_model), micro_batches_(micro_batches) {}

  std::string name() const override { return device_.name(); }

  std::unique_ptr<Replica> createReplica(const LayerGraph& graph, const VariableLayout& layout,
                                         int64_t batch_size, uint64_t seed) override {
    return createPipeline({&device_}, whole_model_, graph, layout, batch_size, micro_batches_,
                          seed);
  }

 private:
  Device& device_;
  StagePlan whole_model_;
  int micro_batches_;
};

// Towers over MicroBatchingDevices, which it owns.
class MicroBatchedTowers : public Replica {
 public:
  MicroBatchedTowers(const std::vector<Device*>& devices, const LayerGraph& graph,
                     const StagePlan& plan, const VariableLayout& layout, int64_t batch_size,
                     int micro_batches, uint64_t seed) {
    std::vector<Device*> towers;
    for (Device* device : devices) {
      devices_.push_back(std::make_unique<MicroBatchingDevice>(*device, plan, micro_batches));
      towers.push_back(devices_.back().get());
    }
    towers_ = createTowers(towers, graph, layout, batch_size, seed);
  }

  int64_t batchSize() const override { return towers_->batchSize(); }
  StepResult trainStep(const Batch& batch, const float* parameters, float* gradients,
                       uint64_t step) override {
    return towers_->trainStep(batch, parameters, gradients, step);
  }
  StepResult trainStepAndUpdate(const Batch& batch, const float* parameters, float* gradients,
                                uint64_t step, ParameterUpdate& update) override {
    return towers_->trainStepAndUpdate(batch, parameters, gradients, step, update);
  }
  StepResult evaluate(const Batch& batch, const float* parameters) override {
    return towers_->evaluate(batch, parameters);
  }

 private:
  std::vector<std::unique_ptr<Device>> devices_;  // declared first: outlives towers_
  std::unique_ptr<Replica> towers_;
};

std::string joined(const std::vector<std::string>& items) {
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : ", ") + item;
  return text;
}

// A misfit: the spec field to change, and what is wrong with it.
struct Misfit {
  enum class Field { Devices, MicroBatches, BatchSize };
  Field field;
  std::string what;

  std::string_view fieldName() const {
    return field == Field::Devices        ? "training.devices"
           : field == Field::MicroBatches ? "training.micro_batches"
                                          : "data.batch_size";
  }
};

std::optional<Misfit> microBatchesMisfit(int64_t batch_size, int micro_batches, int devices) {
  if (micro_batches <= 0)
    return Misfit{Misfit::Field::MicroBatches,
                  "expected a positive number, got " + std::to_string(micro_batches)};
  const std::vector<int64_t> shares = splitBatch(batch_size, devices);
  if (std::all_of(shares.begin(), shares.end(),
                  [&](int64_t share) { return share % micro_batches == 0; }))
    return std::nullopt;
  std::string what = "the batch of " + std::to_string(batch_size);
  if (devices > 1) {
    std::vector<std::string> listed;
    for (int64_t share : shares) listed.push_back(std::to_string(share));
    what = "each device's share of " + what + " over " + std::to_string(devices) + " devices (" +
           joined(listed) + ")";
  }
  return Misfit{Misfit::Field::MicroBatches,
                std::to_string(micro_batches) + " micro-batches do not divide " + what + " evenly"};
}

std::optional<Misfit> devicesMisfit(const std::vector<std::string>& devices,
                                    const StagePlan& plan) {
  std::vector<std::string> unused;
  for (const std::string& device : devices)
    if (std::none_of(plan.stages.begin(), plan.stages.end(),
                     [&](const PipelineStage& stage) { return stage.device == device; }))
      unused.push_back(device);
  if (unused.empty()) return std::nullopt;
  const std::string names = joined(unused);
  const std::string why =
      " no layer of this placed model: a placed model runs as one pipeline over the devices its "
      "layers name, and towers of pipelines are not supported; remove ";
  return Misfit{Misfit::Field::Devices, names + (unused.size() == 1 ? " holds" : " hold") + why +
                                            names +
                                            " from training.devices (or --devices), or "
                                            "place layers on it"};
}

std::optional<Misfit> batchSizeMisfit(int64_t batch_size, const std::vector<std::string>& devices) {
  if (batch_size >= int64_t(devices.size())) return std::nullopt;
  return Misfit{Misfit::Field::BatchSize,
                "a batch of " + std::to_string(batch_size) + " cannot be split over " +
                    std::to_string(devices.size()) + " devices (" + joined(devices) +
                    "): every device needs at least one example; raise data.batch_size or "
                    "list fewer devices"};
}

// A device whose back end makes no stages (runsPipelineStages): this
// build's limit, not the spec's, said here so that the error names the
// spec's line before any device is made.
std::optional<Misfit> stagesMisfit(const std::vector<std::string>& devices, bool placed,
                                   int micro_batches) {
  if (!placed && micro_batches == 1) return std::nullopt;
  for (const std::string& device : devices) {
    if (runsPipelineStages(device)) continue;
    return Misfit{placed ? Misfit::Field::Devices : Misfit::Field::MicroBatches,
                  device + " cannot run " + (placed ? "a pipeline stage" : "micro-batches") +
                      ": " + kNoPipelineStages};
  }
  return std::nullopt;
}

// The first reason the named devices cannot hold a replica of the plan.
std::optional<Misfit> replicaMisfit(const std::vector<std::string>& devices, const StagePlan& plan,
                                    int64_t batch_size, int micro_batches) {
  if (plan.placed) {
    if (auto misfit = devicesMisfit(devices, plan)) return misfit;
    if (auto misfit = microBatchesMisfit(batch_size, micro_batches, 1)) return misfit;
    return stagesMisfit(devices, true, micro_batches);
  }
  if (auto misfit = batchSizeMisfit(batch_size, devices)) return misfit;
  if (auto misfit = microBatchesMisfit(batch_size, micro_batches, int(devices.size())))
    return misfit;
  return stagesMisfit(devices, false, micro_batches);
}

std::vector<std::string> namesOf(const std::vector<Device*>& devices) {
  std::vector<std::string> names;
  for (const Device* device : devices) names.push_back(device->name());
  return names;
}

}  // namespace

void checkModelReplica(const ModelSpec& spec, const StagePlan& plan) {
  const TrainingSpec& training = spec.training;
  const auto misfit =
      replicaMisfit(training.devices, plan, spec.data.batch_size, training.micro_batches);
  if (!misfit) return;
  using Field = Misfit::Field;
  const SourceLocation& where = misfit->field == Field::Devices ? training.devices_location
                                : misfit->field == Field::BatchSize
                                    ? spec.data.batch_size_location
                                    : training.micro_batches_location;
  throwInputError(where, misfit->fieldName(), misfit->what);
}

std::unique_ptr<Replica> createModelReplica(const std::vector<Device*>& devices,
                                            const LayerGraph& graph, const StagePlan& plan,
                                            const VariableLayout& layout, int64_t batch_size,
                                            int micro_batches, uint64_t seed) {
  if (devices.empty()) throw std::invalid_argument("createModelReplica: no devices");
  if (const auto misfit = replicaMisfit(namesOf(devices), plan, batch_size, micro_batches))
    throwInputError({}, misfit->fieldName(), misfit->what);
  if (plan.placed) {
    std::vector<Device*> stage_devices;
    for (const PipelineStage& stage : plan.stages) {
      const auto found = std::find_if(devices.begin(), devices.end(),
                                      [&](const Device* d) { return d->name() == stage.device; });
      if (found == devices.end())
        throw std::logic_error("stage " + stage.name + " is on " + stage.device +
                               ", which is not one of the run's devices");
      stage_devices.push_back(*found);
    }
    return createPipeline(stage_devices, plan, graph, layout, batch_size, micro_batches, seed);
  }
  if (micro_batches == 1) return createTowers(devices, graph, layout, batch_size, seed);
  if (devices.size() == 1)
    return createPipeline(devices, plan, graph, layout, batch_size, micro_batches, seed);
  return std::make_unique<MicroBatchedTowers>(devices, graph, plan, layout, batch_size,
                                              micro_batches, seed);
}

}  // namespace traind
