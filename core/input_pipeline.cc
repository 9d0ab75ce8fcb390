#include "core/input_pipeline.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>

#include "core/augmentation.h"
#include "core/random.h"

namespace traind {
namespace {

// `items` in an order drawn from `rng` (Fisher-Yates).
template <typename T>
void shuffleInPlace(std::vector<T>& items, Rng& rng) {
  for (size_t i = items.size(); i > 1; --i) std::swap(items[i - 1], items[rng.below(i)]);
}

// `order`, the examples in the stream's order, drawn through `buffer` as
// tf.data's shuffle(buffer.size()) draws them: the buffer holds the next
// examples of the set, each draw takes one of them at random and the
// set's next example takes its place; once the set is through, the buffer
// empties at random.
void drawThroughBuffer(std::vector<int64_t>& order, std::vector<int64_t>& buffer, Rng& rng) {
  const size_t examples = order.size();
  size_t held = buffer.size();
  std::copy_n(order.begin(), held, buffer.begin());
  // `next` stays the buffer's size ahead of `drawn` until the set is
  // through, so order[next] is not yet overwritten when it is read.
  size_t next = held;
  for (size_t drawn = 0; drawn < examples; ++drawn) {
    const size_t pick = size_t(rng.below(held));
    order[drawn] = buffer[pick];
    buffer[pick] = next < examples ? order[next++] : buffer[--held];
  }
}

// `order`, the examples of files of `file_examples` examples each (file
// f's after those of the files before it), as an epoch's stream reads them
// (tf.data's list_files(shuffle=shuffle_files).interleave(cycle_length=
// interleave)): the files in their order, or in one drawn from `rng`, are
// read `interleave` at a time, one example from each in turn. A file that
// ends leaves its place empty until the turn comes back to it, when the
// next file takes it.
void readFilesInterleaved(std::vector<int64_t>& order, const std::vector<int64_t>& file_examples,
                          const ShuffleBuffer& stream, Rng& rng) {
  std::vector<int64_t> first(file_examples.size());
  std::exclusive_scan(file_examples.begin(), file_examples.end(), first.begin(), int64_t(0));
  std::vector<size_t> files(file_examples.size());
  std::iota(files.begin(), files.end(), size_t(0));
  if (stream.shuffle_files) shuffleInPlace(files, rng);
  struct OpenFile {
    int64_t next, end;  // examples
  };
  // Places that no file will take again are dropped rather than passed
  // over on every turn: the same order (more places than files are never
  // taken at all).
  std::vector<std::optional<OpenFile>> cycle(std::min(files.size(), size_t(stream.interleave)));
  size_t opened = 0, turn = 0, written = 0;
  while (!cycle.empty()) {
    std::optional<OpenFile>& place = cycle[turn];
    if (!place && opened < files.size()) {  // the next file, read at once
      const size_t f = files[opened++];
      place = OpenFile{first[f], first[f] + file_examples[f]};
    }
    if (place && place->next < place->end) {
      order[written++] = place->next++;
    } else if (place && opened < files.size()) {  // ended: the next file on the turn's return
      place.reset();
    } else {  // ended, and no file is left to take the place
      cycle.erase(cycle.begin() + std::ptrdiff_t(turn));
      if (turn == cycle.size()) turn = 0;
      continue;
    }
    turn = (turn + 1) % cycle.size();
  }
}

// Batches of an epoch over all shards: a multiple of the shard count, so
// every shard has as many steps per epoch as the others.
int64_t checkedBatchesPerEpoch(const Dataset& data, int64_t batch_size, int64_t first_step,
                               int prefetch_batches, int shard_index, int num_shards,
                               const Augmentation& augment, const ShuffleBuffer& shuffle_buffer) {
  if (augment.any() && data.example_shape.size() != 3)
    throw std::invalid_argument("InputPipeline: augmentation of examples of shape " +
                                shapeToString(data.example_shape) + ", not images");
  const Shape window = augmentedShape(augment, data.example_shape);
  const int64_t padding = augment.crop_padding;
  if (((augment.any() || !data.window.empty()) && window != data.inputShape()) ||
      (augment.crops() && (window[0] > data.example_shape[0] + 2 * padding ||
                           window[1] > data.example_shape[1] + 2 * padding)))
    throw std::invalid_argument("InputPipeline: a crop to " + shapeToString(window) + ", padding " +
                                std::to_string(padding) + ", of a data set of " +
                                shapeToString(data.example_shape) + " images whose window is " +
                                shapeToString(data.inputShape()));
  // Images of their own sizes are decoded again for a random crop drawn on
  // each; a random scale needs them.
  if (data.own_sizes ? !data.files || !(augment.scales() || augment.boxes()) : augment.scales())
    throw std::invalid_argument(
        std::string("InputPipeline: ") +
        (data.own_sizes ? "images of their own sizes, with no random box or scale to draw on "
                          "them or no files to decode them from"
                        : "a random scale of images kept at one size"));
  // A worker's share of the data (data.shard_by_worker) is dealt out alone,
  // each epoch as many batches as the smallest share holds, so that every
  // worker has as many steps per epoch as the others.
  const int64_t epoch_examples = data.wholeSize() / data.share.count;
  if (data.isShare() && num_shards > 1)
    throw std::invalid_argument(
        "InputPipeline: share " + std::to_string(data.share.index) + " of " +
        std::to_string(data.share.count) + " dealt out again among " + std::to_string(num_shards) +
        " shards: a worker's share is its own, it would skip the others' batches");
  if (batch_size <= 0 || num_shards <= 0 || batch_size * num_shards > epoch_examples ||
      first_step < 0 || prefetch_batches < 0 || shard_index < 0 || shard_index >= num_shards ||
      shuffle_buffer.size < 0 || shuffle_buffer.interleave < 1)
    throw std::invalid_argument(
        "InputPipeline: batch size " + std::to_string(batch_size) + " for a data set of " +
        std::to_string(data.size) + " examples, first step " + std::to_string(first_step) +
        ", prefetch " + std::to_string(prefetch_batches) + ", shard " +
        std::to_string(shard_index) + " of " + std::to_string(num_shards) + ", shuffle buffer " +
        std::to_string(shuffle_buffer.size) + " from " + std::to_string(shuffle_buffer.interleave) +
        " files at a time");
  const int64_t in_files =
      std::reduce(data.file_examples.begin(), data.file_examples.end(), int64_t(0));
  if (!data.file_examples.empty() && in_files != data.size)
    throw std::invalid_argument("InputPipeline: files of " + std::to_string(in_files) +
                                " examples in all, in a data set of " + std::to_string(data.size));
  return epoch_examples / (batch_size * num_shards) * num_shards;
}

}  // namespace

InputPipeline::InputPipeline(const Dataset& data, int64_t batch_size, bool shuffle, uint64_t seed,
                             int64_t first_step, int prefetch_batches, int shard_index,
                             int num_shards, const Augmentation& augment,
                             const ShuffleBuffer& shuffle_buffer)
    : data_(data),
      batch_size_(batch_size),
      shuffle_(shuffle),
      seed_(seed),
      first_step_(first_step),
      shard_index_(shard_index),
      num_shards_(num_shards),
      batches_per_epoch_(checkedBatchesPerEpoch(data, batch_size, first_step, prefetch_batches,
                                                shard_index, num_shards, augment, shuffle_buffer)),
      example_floats_(numElements(data.inputShape())),
      target_floats_(data.targets.empty() ? 0 : int64_t(data.targets.size()) / data.size),
      augment_(augment),
      slots_(size_t(prefetch_batches) + 1),
      permutation_(size_t(data.size)),
      stream_(shuffle_buffer),
      shuffle_buffer_(shuffle && shuffle_buffer.size > 0
                          ? size_t(std::min(shuffle_buffer.size, data.size))
                          : 0) {
  for (Slot& slot : slots_) {
    slot.inputs.resize(size_t(batch_size * example_floats_));
    if (!data.labels.empty()) slot.labels.resize(size_t(batch_size));
    slot.targets.resize(size_t(batch_size * target_floats_));
    slot.batch.size = batch_size;
    slot.batch.inputs = slot.inputs.data();
    slot.batch.labels = slot.labels.empty() ? nullptr : slot.labels.data();
    slot.batch.targets = slot.targets.empty() ? nullptr : slot.targets.data();
  }
  if (prefetch_batches > 0) thread_ = std::thread([this] { produce(); });
}

InputPipeline::~InputPipeline() { stopReadingAhead(); }

bool InputPipeline::stopReadingAhead() {
  if (!thread_.joinable()) return false;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  slot_free_.notify_all();
  thread_.join();
  return true;
}

void InputPipeline::seek(int64_t step) {
  if (step < 0)
    throw std::invalid_argument("InputPipeline: a seek to step " + std::to_string(step));
  const bool reading_ahead = stopReadingAhead();
  // The thread is gone: nothing else reads these now.
  first_step_ = step;
  produced_ = handed_out_ = released_ = 0;
  stopping_ = false;
  failure_ = nullptr;
  if (reading_ahead) thread_ = std::thread([this] { produce(); });
}

const Batch& InputPipeline::next() {
  if (!thread_.joinable()) {  // no read-ahead: the one slot, filled here
    Slot& slot = slots_.front();
    fill(slot, first_step_ + handed_out_);  // a batch that fails is asked for again
    ++handed_out_;
    return slot.batch;
  }
  std::unique_lock lock(mutex_);
  released_ = handed_out_;  // the caller is done with the batch of its previous call
  slot_free_.notify_one();
  batch_ready_.wait(lock, [this] { return produced_ > handed_out_ || failure_; });
  if (produced_ == handed_out_) std::rethrow_exception(failure_);
  return slots_[size_t(handed_out_++ % int64_t(slots_.size()))].batch;
}

void InputPipeline::produce() {
  const int64_t ring = int64_t(slots_.size());
  for (int64_t i = 0;; ++i) {
    {
      std::unique_lock lock(mutex_);
      slot_free_.wait(lock, [&] { return stopping_ || i < released_ + ring; });
      if (stopping_) return;
    }
    std::exception_ptr failure;
    try {
      fill(slots_[size_t(i % ring)], first_step_ + i);
    } catch (...) {
      failure = std::current_exception();
    }
    {
      std::lock_guard lock(mutex_);
      if (failure)
        failure_ = failure;
      else
        produced_ = i + 1;
    }
    batch_ready_.notify_one();
    if (failure) return;
  }
}

void InputPipeline::fill(Slot& slot, int64_t step) {
  const int64_t batch = step * num_shards_ + shard_index_;  // in the job's order
  const int64_t epoch = batch / batches_per_epoch_;
  if (epoch != permutation_epoch_) {
    std::iota(permutation_.begin(), permutation_.end(), int64_t(0));
    if (shuffle_) {
      // Each share its own order; a whole data set's as it always was.
      const uint64_t order_seed =
          data_.isShare()
              ? hashCombine(seed_, hashCombine(uint64_t(epoch), uint64_t(data_.share.index)))
              : hashCombine(seed_, uint64_t(epoch));
      Rng rng(order_seed);
      if (shuffle_buffer_.empty()) {
        shuffleInPlace(permutation_, rng);
      } else {
        if (!data_.file_examples.empty() && (stream_.interleave > 1 || stream_.shuffle_files))
          readFilesInterleaved(permutation_, data_.file_examples, stream_, rng);
        drawThroughBuffer(permutation_, shuffle_buffer_, rng);
      }
    }
    permutation_epoch_ = epoch;
  }
  const int64_t first_position = (batch % batches_per_epoch_) * batch_size_;
  const int64_t* order = permutation_.data() + first_position;
  for (int64_t j = 0; j < batch_size_; ++j) {
    const int64_t example = order[j];
    float* inputs = slot.inputs.data() + j * example_floats_;
    // A share's positions interleaved as its examples are in the whole set.
    const int64_t position = data_.share.wholeIndex(first_position + j);
    if (data_.own_sizes) {
      const Shape decoded = data_.files->decode(example, decoded_);
      augmentDecodedImage(augment_, decoded, data_.resize_centres,
                          augmentationKey(seed_, epoch, position), decoded_.data(), inputs);
    } else if (augment_.any()) {
      image_.resize(size_t(numElements(data_.example_shape)));
      copyInputs(data_, example, 1, image_.data());
      augmentImage(augment_, data_.example_shape, augmentationKey(seed_, epoch, position),
                   image_.data(), inputs);
    } else {
      copyInputs(data_, example, 1, inputs);
    }
    if (data_.per_image_standardization)
      standardizeExample(inputs, example_floats_, data_.pixel_scale);
    if (!slot.labels.empty()) slot.labels[size_t(j)] = data_.labels[size_t(example)];
    if (target_floats_ > 0)
      std::memcpy(slot.targets.data() + j * target_floats_,
                  data_.targets.data() + example * target_floats_,
                  size_t(target_floats_) * sizeof(float));
  }
}

}  // namespace traind
