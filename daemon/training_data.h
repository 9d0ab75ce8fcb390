// The data a model spec names, loaded and checked against the model before
// anything trains: example shape, label range, regression targets.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "core/dataset.h"
#include "core/layer_graph.h"
#include "core/memory_need.h"

namespace traind {

struct TrainingData {
  Dataset train;
  std::optional<Dataset> test;
};

// Who reads the data: worker `task` of a cluster's `workers`, which take
// disjoint shares of the training set (holding only their own with
// data.shard_by_worker), and load the test set only if they evaluate it
// (the chief); standalone, the defaults.
struct DataReader {
  int task = 0;
  int workers = 1;
  bool evaluates = true;
  MemoryOf memory_of = MemoryOf::StandaloneRun;  // whose model the data loads beside
};

// InputError (naming the data field and both shapes) when the data cannot
// feed the model: another example size, labels beyond the logits, class
// labels for an mse model or regression targets for a softmax one; or
// naming data.batch_size when the training set holds fewer than a batch
// for each of the reader's workers. With data.shard_by_worker and more
// than one worker, the training set loaded is the reader's share of it
// (DataShare {task, workers}).
// Data that would not fit in this machine's memory is refused from the
// files' headers (InputError, before they are read; a gzip file of 8 MB
// can hold 8 GB of pixels): beside the model for a run, alone for `traind
// check`, which may run on another machine than the training.
enum class DataMemory { BesideTheModel, Alone };
TrainingData loadTrainingData(const ModelSpec& spec, const LayerGraph& graph,
                              const DataReader& reader = {},
                              DataMemory memory = DataMemory::BesideTheModel);

// InputError naming data.batch_size unless a training set of `whole`
// examples holds a batch for each of `workers` (every share holds whole /
// workers examples at least): loadTrainingData's check, and `traind
// check`'s for a cluster's workers.
void checkBatchPerWorker(const ModelSpec& spec, int64_t whole, int workers);

// What to warn of a run that resumes from `checkpoint`, trained on the
// training set `restored` (its manifest's contentText), with another set
// `train` (a file replaced, a pattern that matches one more): the run goes
// on, but the checkpoint's place in the epoch falls on other examples.
// nullopt when they agree, or the checkpoint does not say.
std::optional<std::string> otherTrainingSetNote(const std::string& restored, const Dataset& train,
                                                const std::filesystem::path& checkpoint);

// What data.interleave cannot do with the training set `train` loaded for
// `spec`: a set of fewer files than it reads at a time is read from all
// its files at once (one file: in order, nothing interleaved). Said by
// `traind check` and as a run starts; nothing where it does what it says.
std::optional<std::string> interleaveNote(const ModelSpec& spec, const Dataset& train);

// The test set alone, checked against the model as above, its memory
// judged alone (`trainctl eval`); nothing when the spec names none.
std::optional<Dataset> loadTestData(const ModelSpec& spec, const LayerGraph& graph);

// What a run does when its input fails under it (an InputError from a
// batch or from the test set of an evaluation: a file changed or damaged
// since it was loaded) after global step `global_step`: it saves the steps
// applied before it by `save` (a checkpoint), then the error ends the run,
// so that only what could not be read is lost. A failure of `save` is
// logged, not thrown: the input's error is the one to report.
void saveBeforeInputFailure(int64_t global_step, const std::function<void()>& save);

// data.prefetch_batches with `auto` decided: 4 batches read ahead on the
// input thread standalone, and none on a cluster worker, whose step gathers
// its batch itself (about 45 us for a Fashion-MNIST batch of 100). A worker
// that woke its input thread every step kept the kernel from running the ps
// on the worker's core while it waits for its push (docs/distributed.md,
// "The input thread and the ps's core").
int readAheadBatches(const DataSpec& data, bool cluster_worker);

}  // namespace traind
