#include "devices/cuda/cuda_trainer.h"

#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/error.h"
#include "devices/cuda/cuda_check.h"
#include "devices/cuda/cuda_graph.h"
#include "devices/cuda/cuda_network.h"
#include "devices/cuda/cuda_optimizer.h"

namespace traind {

// One GPU: its compute stream (in the context), a copy stream for the
// batches, its copy of the parameters and the optimizer's slots.
struct CudaTrainer::Gpu {
  int device = 0;
  std::unique_ptr<CudaContext> context;
  cudaStream_t copy_stream = nullptr;
  DeviceArray<float> parameters;
  std::unique_ptr<CudaOptimizer> optimizer;
  std::vector<Tower*> towers;  // the first one's gradients receive the sum
  cudaEvent_t uploaded[2] = {nullptr, nullptr};
  cudaEvent_t done[2] = {nullptr, nullptr};
  std::unique_ptr<CapturedWork> step[2];
  ncclComm_t comm = nullptr;

  ~Gpu() {
    cudaSetDevice(device);
    if (comm) ncclCommDestroy(comm);
    for (cudaEvent_t e : {uploaded[0], uploaded[1], done[0], done[1]})
      if (e) cudaEventDestroy(e);
    if (copy_stream) cudaStreamDestroy(copy_stream);
  }
};

// One tower: its share of the batch and a network over it, with the device
// copies of the share of both slots.
struct CudaTrainer::Tower {
  Gpu* gpu = nullptr;
  int64_t first = 0;  // example
  int64_t share = 0;
  DeviceArray<float> gradients;
  DeviceArray<StepScalars> scalars;
  DeviceArray<float> inputs[2];
  DeviceArray<int32_t> labels[2];
  DeviceArray<float> targets[2];
  std::unique_ptr<CudaNetwork> network;
};

// A step's host side: the batch in pinned memory, each tower's scalars and
// the losses it sends back.
struct CudaTrainer::Slot {
  PinnedArray<float> inputs;
  PinnedArray<int32_t> labels;
  PinnedArray<float> targets;
  PinnedArray<StepScalars> scalars;  // per tower
  PinnedArray<LossSums> sums;        // per tower
};

CudaTrainer::CudaTrainer(std::vector<int> gpus, const LayerGraph& graph,
                         const VariableLayout& layout, const OptimizerSpec& optimizer,
                         int64_t batch_size, uint64_t seed, CudaTrainerOptions options)
    : batch_size_(batch_size),
      input_elements_(numElements(graph.input_shape)),
      outputs_(numElements(graph.output_shape)),
      loss_(graph.loss),
      optimizer_spec_(optimizer),
      parameter_count_(layout.totalSize()),
      options_(options) {
  const int64_t tower_count = int64_t(gpus.size());
  if (tower_count == 0) throw std::invalid_argument("CudaTrainer: no GPU given");
  if (batch_size < tower_count)
    throw InputError("a batch of " + std::to_string(batch_size) + " cannot be split over " +
                     std::to_string(tower_count) + " towers");
  for (int device : gpus) {
    const bool known =
        std::any_of(gpus_.begin(), gpus_.end(), [&](const auto& g) { return g->device == device; });
    if (known) continue;
    auto gpu = std::make_unique<Gpu>();
    gpu->device = device;
    gpu->context = std::make_unique<CudaContext>(device);
    checkCuda(cudaStreamCreateWithFlags(&gpu->copy_stream, cudaStreamNonBlocking),
              "cudaStreamCreate (copies)");
    for (int k = 0; k < 2; ++k) {
      checkCuda(cudaEventCreateWithFlags(&gpu->uploaded[k], cudaEventDisableTiming),
                "cudaEventCreate");
      checkCuda(cudaEventCreateWithFlags(&gpu->done[k], cudaEventDisableTiming), "cudaEventCreate");
      gpu->step[k] = std::make_unique<CapturedWork>(options.graph ? options.warmup : -1);
    }
    gpu->parameters = DeviceArray<float>(size_t(parameter_count_));
    gpu->optimizer = std::make_unique<CudaOptimizer>(optimizer, layout);
    gpus_.push_back(std::move(gpu));
  }

  int64_t first = 0;
  for (int64_t t = 0; t < tower_count; ++t) {
    auto tower = std::make_unique<Tower>();
    for (auto& gpu : gpus_)
      if (gpu->device == gpus[size_t(t)]) tower->gpu = gpu.get();
    Gpu& gpu = *tower->gpu;
    checkCuda(cudaSetDevice(gpu.device), "cudaSetDevice");
    tower->first = first;
    tower->share = batch_size / tower_count + (t < batch_size % tower_count ? 1 : 0);
    first += tower->share;
    tower->gradients = DeviceArray<float>(size_t(parameter_count_));
    tower->scalars = DeviceArray<StepScalars>(1);
    for (int k = 0; k < 2; ++k) {
      tower->inputs[k] = DeviceArray<float>(size_t(tower->share * input_elements_));
      tower->labels[k] = DeviceArray<int32_t>(size_t(tower->share));
      if (loss_ == LossKind::MeanSquaredError)
        tower->targets[k] = DeviceArray<float>(size_t(tower->share * outputs_));
    }
    // The whole batch's mean: the towers' gradients sum to it.
    tower->network = std::make_unique<CudaNetwork>(*gpu.context, graph, layout, tower->share, seed,
                                                   gpu.parameters.data(), tower->gradients.data(),
                                                   tower->scalars.data(), batch_size);
    gpu.towers.push_back(tower.get());
    towers_.push_back(std::move(tower));
  }

  if (gpus_.size() > 1) {
    // Several GPUs: one NCCL communicator each, in one process.
    std::vector<int> devices;
    for (auto& gpu : gpus_) devices.push_back(gpu->device);
    std::vector<ncclComm_t> comms(devices.size());
    checkNccl(ncclCommInitAll(comms.data(), int(devices.size()), devices.data()),
              "ncclCommInitAll");
    for (size_t i = 0; i < gpus_.size(); ++i) gpus_[i]->comm = comms[i];
  }

  for (int k = 0; k < 2; ++k) {
    auto slot = std::make_unique<Slot>();
    slot->inputs = PinnedArray<float>(size_t(batch_size * input_elements_));
    slot->labels = PinnedArray<int32_t>(size_t(batch_size));
    if (loss_ == LossKind::MeanSquaredError)
      slot->targets = PinnedArray<float>(size_t(batch_size * outputs_));
    slot->scalars = PinnedArray<StepScalars>(towers_.size());
    slot->sums = PinnedArray<LossSums>(towers_.size());
    slots_.push_back(std::move(slot));
  }
}

CudaTrainer::~CudaTrainer() {
  for (auto& gpu : gpus_) {
    cudaSetDevice(gpu->device);
    cudaStreamSynchronize(gpu->context->stream());
    cudaStreamSynchronize(gpu->copy_stream);
  }
  towers_.clear();  // the networks before the contexts they run on
}

void CudaTrainer::synchronize() {
  for (auto& gpu : gpus_) {
    checkCuda(cudaSetDevice(gpu->device), "cudaSetDevice");
    checkCuda(cudaStreamSynchronize(gpu->context->stream()), "cudaStreamSynchronize");
  }
}

void CudaTrainer::setParameters(const float* host) {
  synchronize();
  for (auto& gpu : gpus_)
    checkCuda(cudaMemcpy(gpu->parameters.data(), host, size_t(parameter_count_) * sizeof(float),
                         cudaMemcpyHostToDevice),
              "cudaMemcpy (parameters to the GPU)");
}

void CudaTrainer::getParameters(float* host) {
  synchronize();
  checkCuda(cudaSetDevice(gpus_[0]->device), "cudaSetDevice");
  checkCuda(cudaMemcpy(host, gpus_[0]->parameters.data(), size_t(parameter_count_) * sizeof(float),
                       cudaMemcpyDeviceToHost),
            "cudaMemcpy (parameters from the GPU)");
}

size_t CudaTrainer::slotCount() const { return gpus_[0]->optimizer->slotCount(); }

void CudaTrainer::setSlot(size_t i, const float* host) {
  synchronize();
  for (auto& gpu : gpus_) {
    checkCuda(cudaSetDevice(gpu->device), "cudaSetDevice");
    checkCuda(cudaMemcpy(gpu->optimizer->slot(i), host, size_t(parameter_count_) * sizeof(float),
                         cudaMemcpyHostToDevice),
              "cudaMemcpy (optimizer slot to the GPU)");
  }
}

void CudaTrainer::getSlot(size_t i, float* host) {
  synchronize();
  checkCuda(cudaSetDevice(gpus_[0]->device), "cudaSetDevice");
  checkCuda(cudaMemcpy(host, gpus_[0]->optimizer->slot(i), size_t(parameter_count_) * sizeof(float),
                       cudaMemcpyDeviceToHost),
            "cudaMemcpy (optimizer slot from the GPU)");
}

// The towers of one GPU: each one's scalars and share to its network, its
// step, its losses back; then their gradients summed into the first's.
void CudaTrainer::enqueueStep(Gpu& gpu, int k) {
  cudaStream_t stream = gpu.context->stream();
  const Slot& slot = *slots_[size_t(k)];
  for (Tower* tower : gpu.towers) {
    const size_t t = size_t(std::find_if(towers_.begin(), towers_.end(),
                                         [&](const auto& p) { return p.get() == tower; }) -
                            towers_.begin());
    CudaNetwork& network = *tower->network;
    checkCuda(cudaMemcpyAsync(tower->scalars.data(), &slot.scalars[t], sizeof(StepScalars),
                              cudaMemcpyHostToDevice, stream),
              "cudaMemcpyAsync (step scalars)");
    checkCuda(cudaMemcpyAsync(network.input(), tower->inputs[k].data(),
                              size_t(network.inputElements()) * sizeof(float),
                              cudaMemcpyDeviceToDevice, stream),
              "cudaMemcpyAsync (batch to the network)");
    if (loss_ == LossKind::SoftmaxCrossEntropy)
      checkCuda(
          cudaMemcpyAsync(network.labels(), tower->labels[k].data(),
                          size_t(tower->share) * sizeof(int32_t), cudaMemcpyDeviceToDevice, stream),
          "cudaMemcpyAsync (labels to the network)");
    else
      checkCuda(cudaMemcpyAsync(network.targets(), tower->targets[k].data(),
                                size_t(tower->share * outputs_) * sizeof(float),
                                cudaMemcpyDeviceToDevice, stream),
                "cudaMemcpyAsync (targets to the network)");
    network.enqueueTrainStep();
    checkCuda(cudaMemcpyAsync(&slot.sums[t], network.sums(), sizeof(LossSums),
                              cudaMemcpyDeviceToHost, stream),
              "cudaMemcpyAsync (loss from the GPU)");
  }
  for (size_t i = 1; i < gpu.towers.size(); ++i)
    addInto(stream, gpu.towers[0]->gradients.data(), gpu.towers[i]->gradients.data(),
            parameter_count_);
}

void CudaTrainer::submit(const Batch& batch, float learning_rate, uint64_t step) {
  if (batch.size != batch_size_)
    throw std::invalid_argument("CudaTrainer: built for batches of " + std::to_string(batch_size_) +
                                ", got " + std::to_string(batch.size));
  const int k = next_slot_;
  next_slot_ ^= 1;
  for (auto& gpu : gpus_) {
    checkCuda(cudaSetDevice(gpu->device), "cudaSetDevice");
    checkCuda(cudaEventSynchronize(gpu->done[k]), "cudaEventSynchronize (a step two back)");
  }
  if (!pending_.empty() && pending_.front() == k) pending_.pop_front();  // never collected

  Slot& slot = *slots_[size_t(k)];
  if (loss_ == LossKind::SoftmaxCrossEntropy) {
    if (!batch.labels) throw std::invalid_argument("softmax_cross_entropy: batch has no labels");
    checkLabels(batch.labels, batch_size_, outputs_);
    std::memcpy(slot.labels.data(), batch.labels, size_t(batch_size_) * sizeof(int32_t));
  } else {
    if (!batch.targets) throw std::invalid_argument("mean_squared_error: batch has no targets");
    std::memcpy(slot.targets.data(), batch.targets, size_t(batch_size_ * outputs_) * sizeof(float));
  }
  std::memcpy(slot.inputs.data(), batch.inputs,
              size_t(batch_size_ * input_elements_) * sizeof(float));
  const uint64_t tower_count = towers_.size();
  for (size_t t = 0; t < towers_.size(); ++t) {
    StepScalars& scalars = slot.scalars[t];
    scalars.step = tower_count > 1 ? step * tower_count + t : step;
    setStepScalars(scalars, optimizer_spec_, learning_rate, int64_t(step) + 1);
  }

  // Uploads on the copy streams, behind nothing: the step that read these
  // device buffers last (two back) has finished.
  for (auto& gpu : gpus_) {
    checkCuda(cudaSetDevice(gpu->device), "cudaSetDevice");
    for (Tower* tower : gpu->towers) {
      auto upload = [&](void* to, const void* from, size_t bytes, const char* what) {
        checkCuda(cudaMemcpyAsync(to, from, bytes, cudaMemcpyHostToDevice, gpu->copy_stream), what);
      };
      upload(tower->inputs[k].data(), slot.inputs.data() + tower->first * input_elements_,
             size_t(tower->share * input_elements_) * sizeof(float),
             "cudaMemcpyAsync (batch to the GPU)");
      if (loss_ == LossKind::SoftmaxCrossEntropy)
        upload(tower->labels[k].data(), slot.labels.data() + tower->first,
               size_t(tower->share) * sizeof(int32_t), "cudaMemcpyAsync (labels to the GPU)");
      else
        upload(tower->targets[k].data(), slot.targets.data() + tower->first * outputs_,
               size_t(tower->share * outputs_) * sizeof(float),
               "cudaMemcpyAsync (targets to the GPU)");
    }
    checkCuda(cudaEventRecord(gpu->uploaded[k], gpu->copy_stream), "cudaEventRecord");
    checkCuda(cudaStreamWaitEvent(gpu->context->stream(), gpu->uploaded[k], 0),
              "cudaStreamWaitEvent");
  }

  if (gpus_.size() == 1) {
    Gpu& gpu = *gpus_[0];
    Tower& first = *gpu.towers[0];
    gpu.step[k]->run(gpu.context->stream(), [&] {
      enqueueStep(gpu, k);
      gpu.optimizer->enqueue(gpu.context->stream(), gpu.parameters.data(), first.gradients.data(),
                             first.scalars.data());
    });
  } else {
    // Several GPUs (not capturable as one graph): each GPU's towers, NCCL's
    // sum over the GPUs, the same update on every GPU.
    for (auto& gpu : gpus_) {
      checkCuda(cudaSetDevice(gpu->device), "cudaSetDevice");
      enqueueStep(*gpu, k);
    }
    checkNccl(ncclGroupStart(), "ncclGroupStart");
    for (auto& gpu : gpus_) {
      float* gradients = gpu->towers[0]->gradients.data();
      checkNccl(ncclAllReduce(gradients, gradients, size_t(parameter_count_), ncclFloat, ncclSum,
                              gpu->comm, gpu->context->stream()),
                "ncclAllReduce (tower gradients)");
    }
    checkNccl(ncclGroupEnd(), "ncclGroupEnd");
    for (auto& gpu : gpus_) {
      checkCuda(cudaSetDevice(gpu->device), "cudaSetDevice");
      gpu->optimizer->enqueue(gpu->context->stream(), gpu->parameters.data(),
                              gpu->towers[0]->gradients.data(), gpu->towers[0]->scalars.data());
    }
  }
  for (auto& gpu : gpus_) {
    checkCuda(cudaSetDevice(gpu->device), "cudaSetDevice");
    checkCuda(cudaEventRecord(gpu->done[k], gpu->context->stream()), "cudaEventRecord");
  }
  pending_.push_back(k);
}

StepResult CudaTrainer::collect() {
  if (pending_.empty()) throw std::logic_error("CudaTrainer::collect: no step in flight");
  const int k = pending_.front();
  pending_.pop_front();
  for (auto& gpu : gpus_) {
    checkCuda(cudaSetDevice(gpu->device), "cudaSetDevice");
    checkCuda(cudaEventSynchronize(gpu->done[k]), "cudaEventSynchronize (train step)");
  }
  // The towers' mean losses weighted by share, their hits summed.
  StepResult result;
  for (size_t t = 0; t < towers_.size(); ++t) {
    const StepResult r = towers_[t]->network->result(slots_[size_t(k)]->sums[t]);
    result.loss += r.loss * double(towers_[t]->share) / double(batch_size_);
    result.correct += r.correct;
  }
  return result;
}

}  // namespace traind
