// The input pipeline: batches for consecutive global steps, gathered from a
// data set in memory, on the caller's thread or read ahead on a background
// thread so that the next batch is ready when a step ends.
//
// The batch of step s is a pure function of (data, batch_size, shuffle,
// shuffle_buffer, seed, s): epoch e = s / stepsPerEpoch() visits the
// examples in the permutation drawn from Rng(hashCombine(seed, e))
// (Fisher-Yates, or through a shuffle buffer from the files in an order
// of their own; the identity without shuffle; a share's own, below), step
// s takes the (s % stepsPerEpoch())-th batch_size examples of it, and the
// last partial batch of an epoch is dropped. So a run resumed from a checkpoint at step s sees
// exactly what an uninterrupted one saw.
//
// Sharded over the workers of a cluster (shard_index of num_shards), the
// job's batches are dealt out in turn: step s of shard i is the job's batch
// s * num_shards + i. The batches of one step over all shards are then the
// examples of one step of a standalone run with num_shards times the batch,
// so sync data parallelism trains exactly what a big batch trains.
//
// A data set that is one worker's share of the whole (data.shard_by_worker,
// Dataset::share) is not dealt out again: the worker goes through its own
// permutation of it, drawn from (seed, epoch, share), num_shards 1. Every
// epoch takes as many batches as the smallest share holds.
//
// With data.augment each image is distorted as it is gathered
// (core/augmentation.h), drawn from (seed, epoch, its position in the
// epoch's order): the same for a resumed run, and for a step's shards as for
// the big batch.
//
//   InputPipeline input(data, 32, /*shuffle=*/true, seed, state.globalStep(), 4);
//   while (...) { const Batch& batch = input.next(); ... }
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/batch.h"
#include "core/dataset.h"
#include "core/model_spec.h"

namespace traind {

class InputPipeline {
 public:
  // Starts reading at global step `first_step`, keeping up to
  // `prefetch_batches` batches ready beyond the one the consumer holds on a
  // thread of its own; with 0, next() gathers each batch itself and no
  // thread starts. The consumer then wakes no other thread of its process
  // for its batches, which a cluster worker needs (docs/distributed.md,
  // "The input thread and the ps's core").
  // `data` must outlive the pipeline. std::invalid_argument unless
  // 0 < batch_size * num_shards <= the examples of an epoch (data.size, or
  // a share's whole_size / share.count), first_step >= 0 and
  // prefetch_batches >= 0, or if `augment` asks for something and the
  // examples are not images of [height, width, channels], or crops another
  // window than the data set's (Dataset::window), or draws a random scale
  // of images not of their own sizes (Dataset::own_sizes), or draws no box
  // or scale of images of their own sizes or has no files to decode them
  // from, or for a share dealt out
  // again (num_shards > 1), or for a shuffle buffer of a negative size or
  // an interleave below 1. A shuffle buffer of a size B > 0 draws each
  // epoch's order as tf.data's shuffle(B) does, from a stream of the data
  // set's files (Dataset::file_examples) read as its interleave and
  // shuffle_files say (ShuffleBuffer).
  InputPipeline(const Dataset& data, int64_t batch_size, bool shuffle, uint64_t seed,
                int64_t first_step, int prefetch_batches, int shard_index = 0, int num_shards = 1,
                const Augmentation& augment = {}, const ShuffleBuffer& shuffle_buffer = {});
  // Stops and joins the thread, also when the consumer stopped mid-way.
  ~InputPipeline();

  InputPipeline(const InputPipeline&) = delete;
  InputPipeline& operator=(const InputPipeline&) = delete;

  // The batch of the next step; blocks until it is ready. Valid until the
  // next call. Calls must not overlap (several threads take turns under
  // their own lock). Throws what gathering it threw (InputError from
  // examples left in their files), on whichever thread it was gathered;
  // with read-ahead again at every later call, without it the next call
  // gathers the same batch again: the step's batch is never skipped.
  const Batch& next();

  // Goes on at global step `step`, as a pipeline started there would: the
  // batches read ahead are dropped, the batch of the last next() is no
  // longer valid, and an epoch's order already drawn is kept (a cluster
  // worker that the job left behind moves on to the job's step without
  // drawing its epoch again). std::invalid_argument for a negative step;
  // std::system_error when the read-ahead thread cannot start again (the
  // pipeline then gathers each batch in next(), as without read-ahead).
  void seek(int64_t step);

  // Steps of this shard per epoch of the job's data.
  int64_t stepsPerEpoch() const { return batches_per_epoch_ / num_shards_; }

 private:
  // A preallocated batch buffer; the ring of them is all the pipeline allocates.
  struct Slot {
    std::vector<float> inputs;
    std::vector<int32_t> labels;
    std::vector<float> targets;
    Batch batch;  // points into the vectors above
  };

  void produce();
  void fill(Slot& slot, int64_t step);
  // Stops and joins the read-ahead thread; true if there was one.
  bool stopReadingAhead();

  const Dataset& data_;
  const int64_t batch_size_;
  const bool shuffle_;
  const uint64_t seed_;
  int64_t first_step_;  // where the pipeline started, or was last sought
  const int shard_index_;
  const int num_shards_;
  const int64_t batches_per_epoch_;  // of the whole job, a multiple of num_shards_
  const int64_t example_floats_;
  const int64_t target_floats_;
  const Augmentation augment_;

  std::vector<Slot> slots_;
  // fill()'s thread only: the order of the examples in permutation_epoch_.
  std::vector<int64_t> permutation_;
  int64_t permutation_epoch_ = -1;
  const ShuffleBuffer stream_;           // how the buffer's stream reads the files
  std::vector<int64_t> shuffle_buffer_;  // fill()'s thread only: empty without one
  // fill()'s thread only: an image before augmentation, as floats or, of
  // its own size (Dataset::own_sizes), as decoded
  std::vector<float> image_;
  std::vector<uint8_t> decoded_;

  // Batches are numbered from first_step_ (from 0 again at a seek). Batch i
  // lives in slots_[i % size] and may be filled once batch i - size is
  // released, so the producer never writes the slot the consumer holds.
  std::mutex mutex_;
  std::condition_variable batch_ready_;
  std::condition_variable slot_free_;
  int64_t produced_ = 0;    // batches filled
  int64_t handed_out_ = 0;  // batches returned by next()
  int64_t released_ = 0;    // batches the consumer is done with
  bool stopping_ = false;
  std::exception_ptr failure_;  // what filling batch produced_ threw

  // Last: starts after everything it uses exists. Not started without
  // read-ahead.
  std::thread thread_;
};

}  // namespace traind
