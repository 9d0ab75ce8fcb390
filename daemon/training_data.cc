#include "daemon/training_data.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/random.h"

namespace traind {
namespace {

// `where` and `field` name the data set's entry in the spec.
void checkFits(const LayerGraph& graph, const Dataset& data, const SourceLocation& where,
               const std::string& field) {
  // A flat input takes images as their values in order; an image input
  // takes them only as they are (a [14, 56, 1] view of 28x28 images would
  // train on scrambled pictures).
  const bool images = data.example_shape.size() == 3 && graph.input_shape.size() == 3;
  if (numElements(data.example_shape) != numElements(graph.input_shape) ||
      (images && data.example_shape != graph.input_shape))
    throwInputError(where, field,
                    "examples of shape " + shapeToString(data.example_shape) +
                        " do not fit the model's input " + shapeToString(graph.input_shape));
  const int64_t outputs = graph.output_shape[0];
  if (graph.loss == LossKind::SoftmaxCrossEntropy) {
    if (data.labels.empty())
      throwInputError(where, field,
                      "softmax_cross_entropy needs class labels, but this data set has "
                      "regression targets (use loss: mse)");
    if (data.num_classes > outputs)
      throwInputError(where, field,
                      "labels go up to " + std::to_string(data.num_classes - 1) +
                          " but the last layer has only " + std::to_string(outputs) + " outputs");
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

// The files of a spec's data.train or data.test; what they hold that
// refutes the spec names the entry too, as the spec's own errors do.
Dataset loadDataFiles(const IdxSource& source, std::string_view field) {
  try {
    return loadIdxDataset(source);
  } catch (const InputError& e) {
    throwInputError(source.location, field, e.what());
  }
}

}  // namespace

TrainingData loadTrainingData(const ModelSpec& spec, const LayerGraph& graph, int readers) {
  TrainingData data;
  if (spec.data.kind == DataSpec::Kind::SyntheticRegression) {
    data.train = makeSyntheticRegression(spec.data.synthetic, spec.seed);
    SyntheticRegressionSpec test = spec.data.synthetic;
    test.points = std::max<int64_t>(1, spec.data.synthetic.points / 5);
    data.test = makeSyntheticRegression(test, hashCombine(spec.seed, 1));
  } else {
    data.train = loadDataFiles(spec.data.train, "data.train");
    if (spec.data.test) data.test = loadDataFiles(*spec.data.test, "data.test");
  }
  if (spec.data.kind == DataSpec::Kind::SyntheticRegression) {
    checkFits(graph, data.train, spec.data.synthetic_location, "data.synthetic");
    checkFits(graph, *data.test, spec.data.synthetic_location, "data.synthetic");
  } else {
    checkFits(graph, data.train, spec.data.train.location, "data.train");
    if (data.test) checkFits(graph, *data.test, spec.data.test->location, "data.test");
  }
  if (data.train.size < spec.data.batch_size)
    throwInputError(spec.data.batch_size_location, "data.batch_size",
                    "expected at most the training set's " + std::to_string(data.train.size) +
                        " examples, got " + std::to_string(spec.data.batch_size));
  // batch_size <= 2^31 and readers a cluster's worker count: no overflow.
  if (data.train.size < spec.data.batch_size * readers)
    throwInputError(
        spec.data.batch_size_location, "data.batch_size",
        fmt::format("expected at most {} (the training set's {} examples shared by "
                    "{} workers, a batch each at least), got {}",
                    data.train.size / readers, data.train.size, readers, spec.data.batch_size));
  return data;
}

int readAheadBatches(const DataSpec& data, bool cluster_worker) {
  return data.prefetch_batches.value_or(cluster_worker ? 0 : 4);
}

}  // namespace traind
