#include "devices/towers.h"

#include <algorithm>
#include <atomic>
#include <barrier>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/shape.h"

namespace traind {
namespace {

// A run of floats of a flat buffer.
struct FloatRange {
  int64_t offset = 0;
  int64_t size = 0;
};

// The trainable variables' floats cut into `parts` pieces of nearly equal
// size; piece t is what tower t's thread averages. Frozen variables are left
// out: the caller's gradients of them stay untouched, as Replica promises.
std::vector<std::vector<FloatRange>> averagingPieces(const VariableLayout& layout, int parts) {
  int64_t total = 0;
  for (const VariableView& v : layout.views())
    if (v.trainable) total += v.size;
  std::vector<std::vector<FloatRange>> pieces(static_cast<size_t>(parts));
  int part = 0;
  int64_t part_end = total / parts;  // piece t spans [total * t / parts, total * (t + 1) / parts)
  int64_t at = 0;                    // trainable floats before v + i
  for (const VariableView& v : layout.views()) {
    if (!v.trainable) continue;
    for (int64_t i = 0; i < v.size;) {
      while (at >= part_end) part_end = total * (++part + 1) / parts;
      const int64_t n = std::min(v.size - i, part_end - at);
      pieces[size_t(part)].push_back({v.offset + i, n});
      i += n;
      at += n;
    }
  }
  return pieces;
}

std::string deviceNames(const std::vector<Device*>& devices) {
  std::string names;
  for (const Device* device : devices) names += (names.empty() ? "" : ", ") + device->name();
  return names;
}

class Towers : public Replica {
 public:
  Towers(const std::vector<Device*>& devices, const LayerGraph& graph, const VariableLayout& layout,
         int64_t batch_size, uint64_t seed);
  ~Towers() override { stopThreads(); }

  int64_t batchSize() const override { return batch_size_; }
  StepResult trainStep(const Batch& batch, const float* parameters, float* gradients,
                       uint64_t step) override;
  StepResult evaluate(const Batch& batch, const float* parameters) override;

 private:
  enum class Work { Train, Evaluate, Stop };

  struct Tower {
    int64_t begin = 0;  // its share: examples [begin, begin + size) of every batch
    int64_t size = 0;
    float weight = 0.0f;  // size / batch size
    std::unique_ptr<Replica> replica;
    FlatBuffer gradients;  // the batch-mean gradient of its share
    // The ranges of the caller's gradients this tower's thread averages.
    std::vector<FloatRange> averaging;
    StepResult result;
    std::exception_ptr error;
    std::thread thread;
  };

  // A tower's thread: builds its replica, then runs what the caller posts
  // until it posts Stop.
  void serve(Tower& tower, uint64_t tower_index, Device& device, const LayerGraph& graph,
             const VariableLayout& layout, uint64_t seed);
  void runShare(Tower& tower, uint64_t tower_index, Work work);
  Batch share(const Tower& tower) const;
  void average(const Tower& tower) const;
  // A tower reports that it has done the posted work (or built its replica).
  void finished();
  // Posts `work` to every tower and waits until all have done it.
  void runTowers(Work work);
  void checkBatch(const Batch& batch) const;
  void rethrowFirstError() const;
  // The towers' results as one: the loss weighted by share, correct summed.
  StepResult combinedResult() const;
  void stopThreads();

  int64_t batch_size_;
  int64_t input_floats_;       // per example
  int64_t output_floats_;      // per example
  std::vector<Tower> towers_;  // sized once: the threads hold references into it
  // Every tower's gradient is written before any tower averages.
  std::barrier<> gradients_written_;

  std::mutex mutex_;
  std::condition_variable work_posted_;
  std::condition_variable work_done_;
  uint64_t posted_ = 0;  // postings so far; a tower runs each once
  int busy_ = 0;         // towers still on the current posting
  Work work_ = Work::Train;
  // The current posting's arguments, written before it is posted.
  Batch batch_;
  const float* parameters_ = nullptr;
  float* gradients_ = nullptr;
  uint64_t step_ = 0;
  std::atomic<bool> failed_{false};  // a tower threw during this posting
};

Towers::Towers(const std::vector<Device*>& devices, const LayerGraph& graph,
               const VariableLayout& layout, int64_t batch_size, uint64_t seed)
    : batch_size_(batch_size),
      input_floats_(numElements(graph.input_shape)),
      output_floats_(numElements(graph.output_shape)),
      towers_(devices.size()),
      gradients_written_(std::ptrdiff_t(devices.size())) {
  const int n = int(devices.size());
  const std::vector<int64_t> shares = splitBatch(batch_size, n);
  if (shares.back() == 0)
    throw InputError("a batch of " + std::to_string(batch_size) + " cannot be split over " +
                     std::to_string(n) + " devices (" + deviceNames(devices) +
                     "): every device needs at least one example; raise data.batch_size or "
                     "list fewer devices");
  std::vector<std::vector<FloatRange>> pieces = averagingPieces(layout, n);
  int64_t begin = 0;
  for (int t = 0; t < n; ++t) {
    Tower& tower = towers_[size_t(t)];
    tower.begin = begin;
    tower.size = shares[size_t(t)];
    tower.weight = float(double(tower.size) / double(batch_size));
    tower.gradients = FlatBuffer(layout.totalSize());
    tower.averaging = std::move(pieces[size_t(t)]);
    begin += tower.size;
  }

  busy_ = n;
  int started = 0;
  try {
    for (; started < n; ++started) {
      Tower& tower = towers_[size_t(started)];
      Device& device = *devices[size_t(started)];
      const uint64_t index = uint64_t(started);
      tower.thread = std::thread([this, &tower, index, &device, &graph, &layout, seed] {
        serve(tower, index, device, graph, layout, seed);
      });
    }
  } catch (...) {
    // The towers never started will not report; wait for the others.
    std::unique_lock lock(mutex_);
    busy_ -= n - started;
    work_done_.wait(lock, [this] { return busy_ == 0; });
    lock.unlock();
    stopThreads();
    throw;
  }
  {
    std::unique_lock lock(mutex_);
    work_done_.wait(lock, [this] { return busy_ == 0; });
  }
  try {
    rethrowFirstError();
  } catch (...) {
    stopThreads();
    throw;
  }
}

void Towers::serve(Tower& tower, uint64_t tower_index, Device& device, const LayerGraph& graph,
                   const VariableLayout& layout, uint64_t seed) {
  try {
    tower.replica = device.createReplica(graph, layout, tower.size, seed);
  } catch (...) {
    tower.error = std::current_exception();
  }
  uint64_t seen = 0;  // nothing is posted before every tower has built its replica
  finished();
  for (;;) {
    Work work;
    {
      std::unique_lock lock(mutex_);
      work_posted_.wait(lock, [&] { return posted_ != seen; });
      seen = posted_;
      work = work_;
    }
    if (work == Work::Stop) return;
    runShare(tower, tower_index, work);
    finished();
  }
}

void Towers::runShare(Tower& tower, uint64_t tower_index, Work work) {
  try {
    if (work == Work::Train) {
      const uint64_t step = step_ * towers_.size() + tower_index;
      tower.result =
          tower.replica->trainStep(share(tower), parameters_, tower.gradients.data(), step);
    } else {
      tower.result = tower.replica->evaluate(share(tower), parameters_);
    }
  } catch (...) {
    tower.error = std::current_exception();
    failed_.store(true);
  }
  if (work != Work::Train) return;
  gradients_written_.arrive_and_wait();
  if (!failed_.load()) average(tower);
}

Batch Towers::share(const Tower& tower) const {
  Batch b;
  b.size = tower.size;
  if (batch_.inputs) b.inputs = batch_.inputs + tower.begin * input_floats_;
  if (batch_.labels) b.labels = batch_.labels + tower.begin;
  if (batch_.targets) b.targets = batch_.targets + tower.begin * output_floats_;
  return b;
}

void Towers::average(const Tower& tower) const {
  const Tower& first = towers_.front();
  for (const FloatRange& range : tower.averaging) {
    float* out = gradients_ + range.offset;
    const float* in = first.gradients.data() + range.offset;
    for (int64_t i = 0; i < range.size; ++i) out[i] = first.weight * in[i];
    for (size_t t = 1; t < towers_.size(); ++t) {
      const float weight = towers_[t].weight;
      in = towers_[t].gradients.data() + range.offset;
      for (int64_t i = 0; i < range.size; ++i) out[i] += weight * in[i];
    }
  }
}

void Towers::finished() {
  {
    std::lock_guard lock(mutex_);
    if (--busy_ > 0) return;
  }
  work_done_.notify_one();
}

void Towers::runTowers(Work work) {
  failed_.store(false);
  for (Tower& tower : towers_) tower.error = nullptr;
  {
    std::lock_guard lock(mutex_);
    work_ = work;
    busy_ = int(towers_.size());
    ++posted_;
  }
  work_posted_.notify_all();
  std::unique_lock lock(mutex_);
  work_done_.wait(lock, [this] { return busy_ == 0; });
}

void Towers::checkBatch(const Batch& batch) const {
  if (batch.size != batch_size_)
    throw std::invalid_argument("towers: built for batches of " + std::to_string(batch_size_) +
                                ", got " + std::to_string(batch.size));
}

void Towers::rethrowFirstError() const {
  for (const Tower& tower : towers_)
    if (tower.error) std::rethrow_exception(tower.error);
}

void Towers::stopThreads() {
  {
    std::lock_guard lock(mutex_);
    work_ = Work::Stop;
    ++posted_;
  }
  work_posted_.notify_all();
  for (Tower& tower : towers_)
    if (tower.thread.joinable()) tower.thread.join();
}

StepResult Towers::trainStep(const Batch& batch, const float* parameters, float* gradients,
                             uint64_t step) {
  checkBatch(batch);
  batch_ = batch;
  parameters_ = parameters;
  gradients_ = gradients;
  step_ = step;
  runTowers(Work::Train);
  return combinedResult();
}

StepResult Towers::evaluate(const Batch& batch, const float* parameters) {
  checkBatch(batch);
  batch_ = batch;
  parameters_ = parameters;
  gradients_ = nullptr;
  runTowers(Work::Evaluate);
  return combinedResult();
}

StepResult Towers::combinedResult() const {
  rethrowFirstError();
  StepResult result;
  for (const Tower& tower : towers_) {
    result.loss += tower.result.loss * double(tower.size) / double(batch_size_);
    result.correct += tower.result.correct;
  }
  return result;
}

}  // namespace

std::vector<int64_t> splitBatch(int64_t batch_size, int towers) {
  if (towers <= 0) throw std::invalid_argument("splitBatch: no towers");
  std::vector<int64_t> shares(size_t(towers), batch_size / towers);
  for (int64_t t = 0; t < batch_size % towers; ++t) ++shares[size_t(t)];
  return shares;
}

std::unique_ptr<Replica> createTowers(std::vector<Device*> devices, const LayerGraph& graph,
                                      const VariableLayout& layout, int64_t batch_size,
                                      uint64_t seed) {
  if (devices.empty()) throw std::invalid_argument("createTowers: no devices");
  if (devices.size() == 1) return devices.front()->createReplica(graph, layout, batch_size, seed);
  return std::make_unique<Towers>(devices, graph, layout, batch_size, seed);
}

}  // namespace traind
