// Models, batches and gradient checks built in code, shared by the tests of
// the back ends (cpu_layers_test, cuda_layers_test) and of what runs them
// (towers_test, pipeline_test).
//
//   const ModelSpec spec = modelSpec({12, 12, 1}, {conv2d(4, 3, 1, Padding::Same),
//                                                 flatten(), dense(10)});
//   Model model(spec);                           // graph, layout, parameters
//   const TestBatch data(model.graph, 8, 100);   // 8 random examples
//   FlatBuffer gradients = untouchedGradients(model.layout);
//   replica->trainStep(data.batch(), model.parameters.data(), gradients.data(), 0);
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/layer_graph.h"
#include "core/model_spec.h"
#include "core/variable_layout.h"
#include "devices/device.h"

namespace traind {

// ---- layers ----

LayerSpec dense(int64_t units, Activation activation = Activation::Linear);
LayerSpec conv2d(int64_t filters, int64_t window, int64_t stride, Padding padding,
                 Activation activation = Activation::Tanh);
LayerSpec pooling(LayerKind kind, int64_t window, int64_t stride, Padding padding);
LayerSpec flatten();
LayerSpec dropout(float rate);
LayerSpec activation(Activation activation);
LayerSpec frozen(LayerSpec l);
LayerSpec withoutBias(LayerSpec l);

// A model named "test", seed 5, its layers named layer0, layer1, ...
ModelSpec modelSpec(Shape input, std::vector<LayerSpec> layers,
                    LossKind loss = LossKind::SoftmaxCrossEntropy);

// A frozen convolution, a convolution, pooling, dense, dropout, dense: what
// the progress tests of the back ends train (variables 0-7, two per layer).
ModelSpec progressModel();

// ---- devices, models, batches ----

// One CPU device with two threads, made once.
Device& cpuDevice();
// cpu:0 .. cpu:n-1, one thread each.
std::vector<std::unique_ptr<Device>> cpuDevices(int n);

constexpr uint64_t kReplicaSeed = 99;

// A model's graph, layout and initialised parameters, moved a little off
// their initial values (biases too, so that no unit sits exactly on a relu
// kink).
struct Model {
  LayerGraph graph;
  VariableLayout layout;
  FlatBuffer parameters;

  explicit Model(const ModelSpec& spec);
};

// Inputs uniform in [-1, 1], labels and targets at random.
struct TestBatch {
  std::vector<float> inputs;
  std::vector<int32_t> labels;
  std::vector<float> targets;

  TestBatch(const LayerGraph& graph, int64_t size, uint64_t seed);

  Batch batch() const {
    return {int64_t(labels.size()), inputs.data(), labels.data(), targets.data()};
  }
  // Examples [begin, begin + size).
  Batch slice(const LayerGraph& graph, int64_t begin, int64_t size) const;
};

// ---- gradients ----

// Gradient buffers start as NaN: whatever a step does not write stays NaN.
FlatBuffer untouchedGradients(const VariableLayout& layout);

// Every trainable variable's gradient agrees within float tolerance; frozen
// ones are left untouched (NaN) in `actual`. Checks with Catch2.
void checkSameGradients(const VariableLayout& layout, const FlatBuffer& expected,
                        const FlatBuffer& actual);

// trainStepWithProgress against trainStep on the same step of `batch`,
// `steps` times (a CUDA replica captures its step on the third): the
// progress calls are `expected_calls`, the gradients the same, and at each
// call the gradients from its variable on are already final, while
// overwriting those variables' parameters with NaN there (a pull's values
// landing) changes nothing. Checks with Catch2.
void checkGradientProgress(Replica& replica, const Model& model, const Batch& batch,
                           const std::vector<size_t>& expected_calls, int steps = 1);

// `split` (towers, a pipeline) against `whole` (one device with the whole
// batch), both for batches of batch_size: the same loss, correct count and
// gradients in 3 training steps, the parameters moved a little between
// them as an update would, and the same evaluation. Checks with Catch2.
void checkSameTraining(Replica& whole, Replica& split, Model& model, int64_t batch_size);

// A device's SAME padding of a stride-2 convolution puts the odd pixel at
// the bottom and the right, as TensorFlow does: 4x4 ones, a 3x3 kernel of
// ones, 2x2 outputs of 9, 6, 6 and 4 (padding before would give 4, 6, 6,
// 9). Checks with Catch2.
void checkSamePaddingAfter(Device& device);

// A naive NHWC forward pass of `spec`'s layers on one example, in double
// (dropout as in evaluation): what a device's forward must compute.
std::vector<double> referenceForward(const ModelSpec& spec, const VariableLayout& layout,
                                     const float* parameters, const float* example);

struct GradientCheck {
  // Central differences with each step in turn until one agrees: a max
  // pooling window whose two largest inputs are closer than a step breaks
  // the difference quotient of that step (and with many windows some always
  // are), while float rounding grows as the step shrinks.
  std::vector<double> epsilons{1e-2};
  int samples_per_variable = 24;  // every element of smaller variables
  double abs_tolerance = 5e-4;
  double rel_tolerance = 2e-2;
  // Dropout: differentiate trainStep's loss at this step (the mask is fixed
  // for a step) instead of evaluate's.
  bool through_train_step = false;
  uint64_t step = 3;
};

// Compares trainStep's gradient of every trainable variable (or a random
// sample of its elements) with central differences of the loss, and checks
// that frozen variables' gradients are left untouched.
void checkReplicaGradients(Replica& replica, Model& model, const GradientCheck& check = {});

}  // namespace traind
