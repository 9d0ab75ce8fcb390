#include "daemon/training_data.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/augmentation.h"
#include "core/example_records.h"
#include "core/memory_need.h"
#include "core/printable.h"
#include "core/random.h"

namespace traind {
namespace {

// `where` and `field` name the data set's entry in the spec; `examples`
// says what example_shape is of, where not the examples themselves.
void checkShapeFits(const LayerGraph& graph, const Shape& example_shape,
                    const SourceLocation& where, std::string_view field,
                    const std::string& examples = "examples") {
  // A flat input takes images as their values in order; an image input
  // takes them only as they are (a [14, 56, 1] view of 28x28 images would
  // train on scrambled pictures). Elements as a double: an IDX header's
  // dimensions may multiply past int64.
  double elements = 1.0;
  for (int64_t d : example_shape) elements *= double(d);
  const bool images = example_shape.size() == 3 && graph.input_shape.size() == 3;
  if (elements != double(numElements(graph.input_shape)) ||
      (images && example_shape != graph.input_shape))
    throwInputError(where, std::string(field),
                    examples + " of shape " + shapeToString(example_shape) +
                        " do not fit the model's input " + shapeToString(graph.input_shape));
}

// Where example `index` of `data`, read from `source`, came from, as an
// error names it: an IDX set's labels file and the example's index in it;
// a TFRecord set's file, and the record's index in it unless the set is a
// share, whose examples the file's index does not tell.
std::string exampleOrigin(const Dataset& data, const DataFiles& source, int64_t index) {
  const int64_t whole_index = data.share.wholeIndex(index);
  if (source.format == DataFiles::Format::Idx)
    return fmt::format("{}, example {} (from 0)", source.labels, whole_index);
  int64_t first = 0;  // of the file's examples in `data`
  for (size_t file = 0; file < data.file_examples.size(); ++file) {
    if (index < first + data.file_examples[file])
      return data.isShare()
                 ? fmt::format("{}, example {} of the whole set (from 0)", source.records[file],
                               whole_index)
                 : fmt::format("{}, record {} (from 0)", source.records[file], index - first);
    first += data.file_examples[file];
  }
  return fmt::format("example {} (from 0)", whole_index);
}

// `source`: the files `data` was read from, which an error names; nullptr
// for synthetic data.
void checkFits(const LayerGraph& graph, const Dataset& data, const SourceLocation& where,
               const std::string& field, const DataFiles* source = nullptr) {
  checkShapeFits(graph, data.inputShape(), where, field);
  const int64_t outputs = graph.output_shape[0];
  if (graph.loss == LossKind::SoftmaxCrossEntropy) {
    if (data.labels.empty())
      throwInputError(where, field,
                      "softmax_cross_entropy needs class labels, but this data set has "
                      "regression targets (use loss: mse)");
    if (data.num_classes > outputs) {
      const auto first_beyond = std::find_if(data.labels.begin(), data.labels.end(),
                                             [outputs](int32_t label) { return label >= outputs; });
      const std::string origin =
          source ? fmt::format(" (the first, {}, at {})", *first_beyond,
                               exampleOrigin(data, *source, first_beyond - data.labels.begin()))
                 : "";
      throwInputError(where, field,
                      fmt::format("labels go up to {} but the last layer has only {} outputs{}",
                                  data.num_classes - 1, outputs, origin));
    }
  } else {
    if (data.targets.empty())
      throwInputError(where, field,
                      "mse needs regression targets, but this data set has class labels "
                      "(use loss: softmax_cross_entropy)");
    if (outputs != 1)
      throwInputError(where, field,
                      "the regression targets have 1 value per example but the last layer "
                      "has " + std::to_string(outputs) + " outputs");
  }
}

// What an example's inputs keep, each of its values taking `value_bytes`
// (DataLoadCheck): for one left in its files, where its record is.
int64_t inputBytes(const Shape& example_shape, int value_bytes) {
  return value_bytes == 0 ? kRecordPlaceBytes : numElements(example_shape) * value_bytes;
}

// What a data set of `examples` examples keeps, each of `input_bytes` bytes
// of pixels or floats: those and its labels as int32.
double keptBytes(int64_t input_bytes, int64_t examples) {
  return double(examples) * double(input_bytes + int64_t(sizeof(int32_t)));
}

// What the model takes of examples of `example_shape` from the data set
// `field` (data.train or data.test): the window of data.augment's crop of
// each image where it has a size, else the example itself. InputError
// where data.augment cannot distort the examples: training examples that
// are not images, not RGB for saturation or hue, or smaller than a crop's
// window even once padded. A test image may be smaller than the window:
// evaluation pads it (centreWindow).
Shape modelInputOf(const Augmentation& augment, const Shape& example_shape,
                   std::string_view field) {
  const bool training = field == "data.train";
  if (training && augment.any() && example_shape.size() != 3)
    throwInputError(augment.location, "data.augment",
                    "expected images of [height, width, channels] to distort, got examples of "
                    "shape " +
                        shapeToString(example_shape) +
                        " (TFRecord float images without height, width and depth take the "
                        "model's input as their shape)");
  if (training && augment.colours() && example_shape[2] != 3)
    throwInputError(
        augment.colours_location,
        augment.saturation_upper > 0.0f ? "data.augment.saturation" : "data.augment.hue",
        "saturation and hue change RGB images: expected images of 3 channels, got " +
            shapeToString(example_shape));
  // Padding of a window's side or more leaves some windows holding padding
  // alone (the spec says so where the model's input is an image).
  const int64_t padding = augment.crop_padding;
  if (training && padding > 0) {
    const int64_t window_height = augment.crop_height > 0 ? augment.crop_height : example_shape[0];
    const int64_t window_width = augment.crop_width > 0 ? augment.crop_width : example_shape[1];
    if (padding >= window_height || padding >= window_width)
      throwInputError(augment.crop_padding_location, "data.augment.random_crop.padding",
                      fmt::format("expected padding less than the window's height and width [{}, "
                                  "{}] ({}), so that every window holds some of the image, got {}",
                                  window_height, window_width,
                                  augment.crop_height > 0
                                      ? std::string("data.augment.random_crop.size")
                                      : "the training images' of " + shapeToString(example_shape),
                                  padding));
  }
  if (augment.crop_height == 0) return example_shape;
  if (example_shape.size() != 3)
    throwInputError(augment.crop_size_location, "data.augment.random_crop.size",
                    "expected images of [height, width, channels] to take a window of, got " +
                        std::string(field) + " examples of shape " + shapeToString(example_shape));
  if (training && (augment.crop_height > example_shape[0] + 2 * padding ||
                   augment.crop_width > example_shape[1] + 2 * padding))
    throwInputError(augment.crop_size_location, "data.augment.random_crop.size",
                    fmt::format("expected a window inside the training images of {} padded by "
                                "{} on every side, got [{}, {}]",
                                shapeToString(example_shape), padding, augment.crop_height,
                                augment.crop_width));
  return augmentedShape(augment, example_shape);
}

// What it takes while it loads, at most: beside what it keeps, the buffers
// its inputs and labels grow out of. The IDX reader doubles them as
// examples arrive, copying; the TFRecord reader gathers its inputs in
// blocks of 4 MiB and hands each back as it joins them, and doubles its
// labels (core/example_records.h).
double loadingBytes(DataFiles::Format format, int64_t input_bytes, int64_t examples) {
  if (format == DataFiles::Format::TfRecord)
    return keptBytes(input_bytes, examples) + double(examples) * double(sizeof(int32_t)) +
           double(int64_t(4) << 20);
  return keptBytes(input_bytes, examples) + double(examples) * double(input_bytes + 1);
}

// What is held in memory beside the data sets as they load, and what the
// message says it is.
struct MemoryHeld {
  double bytes = 0;
  const char* what = "";
};

// The data set's files, as a message names them.
std::string filesOf(const DataFiles& source) {
  if (source.format == DataFiles::Format::Idx) return source.images;
  if (source.records.size() == 1) return source.records.front();
  return fmt::format("{} and {} more files", source.records.front(), source.records.size() - 1);
}

// The files of a spec's data.train or data.test; what they hold that
// refutes the spec names the entry too, as the spec's own errors do. Images
// that cannot feed the model, or would not fit in memory beside `held`
// bytes (the model and the data sets already loaded), are refused before
// they are read: an IDX file from its header, TFRecord files from their
// first record and then before each block of examples. `held` then grows by
// what this set keeps. Its examples are standardized as the spec's
// data.standardize asks.
Dataset loadDataFiles(const ModelSpec& spec, const DataFiles& source, std::string_view field,
                      const LayerGraph& graph, std::optional<int64_t> available, MemoryHeld& held,
                      DataShare share = {}) {
  const bool idx = source.format == DataFiles::Format::Idx;
  bool checking = false;  // an InputError thrown meanwhile names the entry already
  const auto check = [&](const Shape& example_shape, int64_t examples, int value_bytes) {
    checking = true;
    const Shape input = modelInputOf(spec.data.augment, example_shape, field);
    // An IDX set's shape is its images file's, which the entry names
    // beside its labels file; a TFRecord set's its first record's.
    const std::string what = idx ? printable(source.images) + ": examples"
                                 : printable(filesOf(source)) +
                                       ": examples (as its first record "
                                       "read gives them)";
    checkShapeFits(graph, input, source.location, field,
                   input == example_shape
                       ? what
                       : "windows (data.augment.random_crop.size) of its examples of " +
                             shapeToString(example_shape) + ",");
    const double bytes =
        loadingBytes(source.format, inputBytes(example_shape, value_bytes), examples);
    if (available && held.bytes + bytes > double(*available))
      throwInputError(
          source.location, std::string(field),
          fmt::format("{}: {}{} examples of {} take {} of memory as they load{}, and this machine "
                      "gives a process {} ({}): expected fewer examples (`limit` keeps the "
                      "first N)",
                      filesOf(source), idx ? "" : "the first ", examples,
                      shapeToString(example_shape), byteSize(int64_t(std::min(bytes, 0x1p62))),
                      held.bytes > 0 ? fmt::format(", beside {} of {}",
                                                   byteSize(int64_t(held.bytes)), held.what)
                                     : std::string(),
                      byteSize(*available), kMemoryAvailableWords));
    checking = false;
  };
  Dataset data;
  try {
    // A model that takes a window of each image takes images of any size:
    // a record without height and width gives its image's own.
    const RecordShape record_shape =
        spec.data.augment.crop_height > 0 ? RecordShape::FirstImage : RecordShape::ModelInput;
    data = idx ? loadIdxDataset(source, check, share)
               : loadExampleRecords(source, graph.input_shape, check, share, record_shape);
  } catch (const InputError& e) {
    if (checking) throw;
    throwInputError(source.location, field, e.what());
  }
  if (spec.data.augment.crop_height > 0)
    data.window = modelInputOf(spec.data.augment, data.example_shape, field);
  // Through a shuffle buffer smaller than the set the reads go nearly in
  // order within each file (a few files at a time with data.interleave),
  // which the system's read-ahead of each file serves.
  if (data.files && spec.data.shuffle && field == "data.train" &&
      (spec.data.shuffle_buffer.size == 0 || spec.data.shuffle_buffer.size >= data.size))
    data.files->adviseRandomOrder();
  data.per_image_standardization = spec.data.standardize_per_image;
  const int value_bytes = data.files ? 0 : data.pixels.empty() ? int(sizeof(float)) : 1;
  held.bytes += keptBytes(inputBytes(data.example_shape, value_bytes), data.size);
  return data;
}

// A synthetic data set's test examples: a fifth as many as for training.
Dataset syntheticTestSet(const ModelSpec& spec) {
  SyntheticRegressionSpec test = spec.data.synthetic;
  test.points = std::max<int64_t>(1, spec.data.synthetic.points / 5);
  return makeSyntheticRegression(test, hashCombine(spec.seed, 1));
}

MemoryHeld heldBeside(const ModelSpec& spec, const LayerGraph& graph, DataMemory memory,
                      MemoryOf whose) {
  // Beside the model, which a run has checked on its own already.
  if (memory == DataMemory::BesideTheModel)
    return {double(memoryNeed(spec, graph, whose).total()), "the model and the data before them"};
  return {0.0, "the data before them"};
}

}  // namespace

std::optional<std::string> interleaveNote(const ModelSpec& spec, const Dataset& train) {
  const int interleave = spec.data.shuffle_buffer.interleave;
  const size_t files = train.file_examples.size();
  if (interleave <= 1 || files == 0 || files >= size_t(interleave)) return std::nullopt;
  return fmt::format(
      "data.interleave: {} reads the training set's files {} at a time, and it has {}: {}",
      interleave, interleave, files,
      files == 1 ? "its one file is read in order, nothing interleaved (the shuffle buffer alone "
                   "mixes it)"
                 : fmt::format("all {} are read at once", files));
}

TrainingData loadTrainingData(const ModelSpec& spec, const LayerGraph& graph,
                              const DataReader& reader, DataMemory memory) {
  const int readers = reader.workers;
  TrainingData data;
  if (spec.data.kind == DataSpec::Kind::SyntheticRegression) {
    data.train = makeSyntheticRegression(spec.data.synthetic, spec.seed);
    data.test = syntheticTestSet(spec);
  } else {
    const std::optional<int64_t> available = memoryAvailable();
    MemoryHeld held = heldBeside(spec, graph, memory, reader.memory_of);
    const DataShare share =
        spec.data.shard_by_worker ? DataShare{reader.task, readers} : DataShare{};
    data.train = loadDataFiles(spec, spec.data.train, "data.train", graph, available, held, share);
    if (spec.data.test && reader.evaluates)
      data.test = loadDataFiles(spec, *spec.data.test, "data.test", graph, available, held);
  }
  if (spec.data.kind == DataSpec::Kind::SyntheticRegression) {
    checkFits(graph, data.train, spec.data.synthetic_location, "data.synthetic");
    checkFits(graph, *data.test, spec.data.synthetic_location, "data.synthetic");
  } else {
    checkFits(graph, data.train, spec.data.train.location, "data.train", &spec.data.train);
    if (data.test)
      checkFits(graph, *data.test, spec.data.test->location, "data.test", &*spec.data.test);
  }
  // Judged by the whole set, also where this reader holds its share alone.
  checkBatchPerWorker(spec, data.train.wholeSize(), readers);
  return data;
}

std::optional<std::string> otherTrainingSetNote(const std::string& restored, const Dataset& train,
                                                const std::filesystem::path& checkpoint) {
  const std::string now = contentText(train);
  if (restored.empty() || restored == now) return std::nullopt;
  return fmt::format(
      "{} was trained on another training set ({}; this run's: {}): a data file changed, or a "
      "pattern matches other files; the run goes on with this one from the checkpoint's step, "
      "whose place in the epoch now falls on other examples",
      checkpoint.string(), restored, now);
}

void checkBatchPerWorker(const ModelSpec& spec, int64_t whole, int workers) {
  if (whole < spec.data.batch_size)
    throwInputError(spec.data.batch_size_location, "data.batch_size",
                    "expected at most the training set's " + std::to_string(whole) +
                        " examples, got " + std::to_string(spec.data.batch_size));
  // The set is too small, whatever the batch: said at the set's entry.
  const bool synthetic = spec.data.kind == DataSpec::Kind::SyntheticRegression;
  if (whole < workers)
    throwInputError(synthetic ? spec.data.synthetic_location : spec.data.train.location,
                    synthetic ? "data.synthetic" : "data.train",
                    fmt::format("the training set's {} examples are fewer than the cluster's {} "
                                "workers, each of which takes a batch of them at least: expected "
                                "a larger training set, or fewer workers",
                                whole, workers));
  // batch_size <= 2^31 and workers a cluster's worker count: no overflow.
  if (whole < spec.data.batch_size * workers)
    throwInputError(spec.data.batch_size_location, "data.batch_size",
                    fmt::format("expected at most {} (the training set's {} examples shared by "
                                "{} workers, a batch each at least), got {}",
                                whole / workers, whole, workers, spec.data.batch_size));
}

std::optional<Dataset> loadTestData(const ModelSpec& spec, const LayerGraph& graph) {
  if (spec.data.kind == DataSpec::Kind::SyntheticRegression) {
    Dataset test = syntheticTestSet(spec);
    checkFits(graph, test, spec.data.synthetic_location, "data.synthetic");
    return test;
  }
  if (!spec.data.test) return std::nullopt;
  MemoryHeld held = heldBeside(spec, graph, DataMemory::Alone, MemoryOf::StandaloneRun);
  Dataset test = loadDataFiles(spec, *spec.data.test, "data.test", graph, memoryAvailable(), held);
  checkFits(graph, test, spec.data.test->location, "data.test", &*spec.data.test);
  return test;
}

int readAheadBatches(const DataSpec& data, bool cluster_worker) {
  return data.prefetch_batches.value_or(cluster_worker ? 0 : 4);
}

void saveBeforeInputFailure(int64_t global_step, const std::function<void()>& save) {
  spdlog::warn("the input failed after global step {}: saving the steps trained before it",
               global_step);
  try {
    save();
  } catch (const std::exception& e) {
    spdlog::error("that checkpoint failed too: {}", e.what());
  }
}

}  // namespace traind
