#include "core/model_spec.h"

#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>

#include "core/float_environment.h"
#include "core/layer_graph.h"
#include "core/yaml_fields.h"
#include "test/temp_dir.h"

namespace fs = std::filesystem;
using namespace traind;

namespace {

std::string loadError(const std::string& path) {
  try {
    loadModelSpec(path);
  } catch (const InputError& e) {
    return e.what();
  }
  FAIL("loading " << path << " did not throw InputError");
  return {};
}

// The smallest valid spec; error tests write their own variations of it.
const std::string kMinimal =
    "input: [4]\n"
    "layers:\n"
    "  - {type: dense, units: 3}\n"
    "optimizer: {type: sgd, learning_rate: 0.1}\n"
    "data:\n"
    "  synthetic: {type: regression}\n"
    "  batch_size: 8\n"
    "training: {max_steps: 10}\n";

std::string configPath(const std::string& name) {
  return std::string(TRAIND_SOURCE_DIR) + "/configs/models/" + name;
}

// Writes kMinimal with `from` replaced by `to` as variant.yaml.
std::string writeVariant(const TempDir& dir, const std::string& from, const std::string& to) {
  std::string text = kMinimal;
  const size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
  return dir.write("variant.yaml", text);
}

std::string errorWith(const TempDir& dir, const std::string& from, const std::string& to) {
  return loadError(writeVariant(dir, from, to));
}

ModelSpec loadVariant(const TempDir& dir, const std::string& from, const std::string& to) {
  return loadModelSpec(writeVariant(dir, from, to));
}

// A spec of one dense layer on `input` whose data section is `data` (its
// lines, indented), as spec.yaml: for the data section's own fields. The
// data section starts on line 5; a regression spec's (mse) on line 6.
std::string writeDataSpec(const TempDir& dir, const std::string& input, const std::string& data,
                          bool regression = false) {
  return dir.write("spec.yaml", "input: " + input + "\nlayers: [{type: dense, units: 2}]\n" +
                                    (regression ? "loss: mse\n" : "") +
                                    "optimizer: {type: sgd, learning_rate: 0.1}\ndata:\n" + data +
                                    "training: {epochs: 1}\n");
}

}  // namespace

TEST_CASE("every example config loads", "[model_spec]") {
  for (const char* name : {"fashion_mlp.yaml", "fashion_cnn.yaml", "fashion_base.yaml",
                           "fashion_finetune.yaml", "regression.yaml"}) {
    INFO(name);
    REQUIRE_NOTHROW(loadModelSpec(configPath(name)));
  }
}

TEST_CASE("a cluster spec given as the model spec says so", "[model_spec]") {
  const std::string cluster = std::string(TRAIND_SOURCE_DIR) + "/configs/clusters/local_sync.yaml";
  CHECK_THAT(loadError(cluster),
             Catch::EndsWith("cluster: this is a cluster spec (a cluster section, no layers): "
                             "give it to --cluster, and a model spec to --model"));
}

TEST_CASE("a run without checkpoints says what turned them off", "[model_spec]") {
  CheckpointSpec none;
  CHECK(describeCheckpoints(none) == "no checkpoints (no checkpoint section, no "
                                     "--checkpoint-dir): a stop or a crash loses what this run "
                                     "trains");
  none.dir_location = SourceLocation{"--checkpoint-dir"};
  CHECK_THAT(describeCheckpoints(none), Catch::StartsWith("no checkpoints (--checkpoint-dir is "
                                                          "empty): "));
  // The field cannot turn them off: only the flag can.
  TempDir dir;
  CHECK_THAT(errorWith(dir, "\ntraining:", "\ncheckpoint: {dir: ''}\ntraining:"),
             Catch::Contains("checkpoint.dir: expected a path, got the quoted string ''"));
}

TEST_CASE("a checkpoint directory without a cadence saves every 600 s, TensorFlow 1's default",
          "[model_spec]") {
  TempDir dir;
  const std::string section = "\ncheckpoint: {dir: " + (dir.path() / "ckpt").string();
  const ModelSpec plain = loadVariant(dir, "\ntraining:", section + "}\ntraining:");
  CHECK(plain.checkpoint.every_steps == 0);
  CHECK(plain.checkpoint.every_seconds == 600.0);
  CHECK(describeCheckpoints(plain.checkpoint) ==
        "checkpoints in " + (dir.path() / "ckpt").string() +
            " every 600 s and at the end, keeping the newest 5");
  // every_steps alone: by steps only; both given: both.
  const ModelSpec steps =
      loadVariant(dir, "\ntraining:", section + ", every_steps: 50}\ntraining:");
  CHECK(steps.checkpoint.every_steps == 50);
  CHECK(steps.checkpoint.every_seconds == 0.0);
  const ModelSpec both =
      loadVariant(dir, "\ntraining:", section + ", every_steps: 50, every_seconds: 30}\ntraining:");
  CHECK(both.checkpoint.every_seconds == 30.0);
  // A directory from --checkpoint-dir alone gets the default too.
  CHECK(CheckpointSpec{}.every_seconds == 600.0);
}

TEST_CASE("fashion_cnn.yaml reads as written", "[model_spec]") {
  const ModelSpec spec = loadModelSpec(configPath("fashion_cnn.yaml"));
  CHECK(spec.name == "fashion_cnn");
  CHECK(spec.seed == 42);
  CHECK(spec.input == Shape{28, 28, 1});
  REQUIRE(spec.layers.size() == 6);
  const LayerSpec& conv2 = spec.layers[1];
  CHECK(conv2.kind == LayerKind::Conv2D);
  CHECK(conv2.name == "conv2");
  CHECK(conv2.filters == 64);
  CHECK(conv2.window == std::array<int64_t, 2>{3, 3});
  CHECK(conv2.stride == std::array<int64_t, 2>{2, 2});
  CHECK(conv2.padding == Padding::Same);
  CHECK(conv2.activation == Activation::Relu);
  CHECK(conv2.location.line == 8);
  CHECK(conv2.location.column == 5);
  CHECK(spec.layers[2].kind == LayerKind::MaxPool);
  CHECK(spec.layers[2].name == "pool");
  CHECK(spec.layers[3].name == "flatten_1");
  CHECK(spec.layers[5].name == "logits");
  CHECK(spec.layers[5].activation == Activation::Linear);
  CHECK(spec.loss == LossKind::SoftmaxCrossEntropy);
  CHECK(spec.optimizer.kind == OptimizerSpec::Kind::Adam);
  CHECK(spec.learning_rate.kind == LearningRateSpec::Kind::Constant);
  CHECK(spec.learning_rate.initial == 0.001f);
  CHECK(spec.data.kind == DataSpec::Kind::Files);
  CHECK(spec.data.train.images == "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
  REQUIRE(spec.data.test);
  CHECK(spec.data.test->labels == "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz");
  CHECK(spec.data.batch_size == 100);
  CHECK(spec.training.epochs == 10);
  CHECK(spec.training.max_steps == 0);
  CHECK(spec.checkpoint.dir == "/tmp/traind/fashion_cnn");
  CHECK(!spec.init_from);
}

TEST_CASE("fashion_finetune.yaml freezes and reuses the base layers", "[model_spec]") {
  const ModelSpec spec = loadModelSpec(configPath("fashion_finetune.yaml"));
  REQUIRE(spec.init_from);
  CHECK(spec.init_from->checkpoint == "/tmp/traind/fashion_base");
  CHECK(spec.init_from->layers == std::vector<InitFromLayer>{{"hidden1", "hidden1", {}},
                                                             {"hidden2", "hidden2", {}},
                                                             {"hidden3", "hidden3", {}}});
  for (const LayerSpec& layer : spec.layers) {
    INFO(layer.name);
    const bool base = layer.name == "hidden1" || layer.name == "hidden2" || layer.name == "hidden3";
    CHECK(layer.trainable == !base);
  }
  CHECK(spec.layers[4].name == "hidden4");
  CHECK(spec.layers[4].units == 20);
}

TEST_CASE("regression.yaml uses synthetic data and max_steps", "[model_spec]") {
  const ModelSpec spec = loadModelSpec(configPath("regression.yaml"));
  CHECK(spec.loss == LossKind::MeanSquaredError);
  CHECK(spec.data.kind == DataSpec::Kind::SyntheticRegression);
  CHECK(spec.data.synthetic.points == 1000);
  CHECK(spec.data.synthetic.x_min == -1.0f);
  CHECK(spec.data.synthetic.x_max == 1.0f);
  CHECK(spec.data.synthetic.noise_stddev == 0.05f);
  CHECK(spec.data.batch_size == 32);
  CHECK(spec.training.max_steps == 2000);
  CHECK(spec.training.epochs == 0);
  CHECK(spec.checkpoint.dir.empty());
}

TEST_CASE("omitted fields take their documented defaults", "[model_spec]") {
  TempDir dir;
  const ModelSpec spec = loadModelSpec(dir.write("my_model.yaml",
                                                 "input: [8, 8, 2]\n"
                                                 "layers:\n"
                                                 "  - {type: conv2d, filters: 4, kernel: [3, 2]}\n"
                                                 "  - {type: avg_pool, size: [2, 3]}\n"
                                                 "  - {type: flatten}\n"
                                                 "  - {type: dense, name: middle, units: 5}\n"
                                                 "  - {type: dropout, rate: 0.25}\n"
                                                 "  - {type: dense, units: 2}\n"
                                                 "  - {type: activation, activation: sigmoid}\n"
                                                 "  - {type: dense, units: 2}\n"
                                                 "optimizer: {type: momentum, learning_rate: 0.5}\n"
                                                 "data:\n"
                                                 "  synthetic: {type: regression}\n"
                                                 "training: {epochs: 1}\n"));
  CHECK(spec.name == "my_model");
  CHECK(spec.seed == 0);
  CHECK(spec.loss == LossKind::SoftmaxCrossEntropy);

  const LayerSpec& conv = spec.layers[0];
  CHECK(conv.name == "conv2d_1");
  CHECK(conv.window == std::array<int64_t, 2>{3, 2});
  CHECK(conv.stride == std::array<int64_t, 2>{1, 1});
  CHECK(conv.padding == Padding::Valid);
  CHECK(conv.activation == Activation::Linear);
  CHECK(conv.use_bias);
  CHECK(conv.trainable);
  CHECK(conv.kernel_initializer.kind == InitializerSpec::Kind::GlorotUniform);
  CHECK(conv.bias_initializer.kind == InitializerSpec::Kind::Zeros);

  const LayerSpec& pool = spec.layers[1];
  CHECK(pool.name == "avg_pool_1");
  CHECK(pool.stride == std::array<int64_t, 2>{2, 3});  // the size
  CHECK(pool.padding == Padding::Valid);

  CHECK(spec.layers[2].name == "flatten_1");
  CHECK(spec.layers[3].name == "middle");
  CHECK(spec.layers[4].name == "dropout_1");
  CHECK(spec.layers[4].rate == 0.25f);
  CHECK(spec.layers[5].name == "dense_2");  // counts the named dense layer too
  CHECK(spec.layers[6].name == "activation_1");
  CHECK(spec.layers[6].activation == Activation::Sigmoid);
  CHECK(spec.layers[7].name == "dense_3");

  CHECK(spec.optimizer.kind == OptimizerSpec::Kind::Momentum);
  CHECK(spec.optimizer.momentum == 0.9f);
  CHECK(!spec.optimizer.nesterov);
  CHECK(spec.optimizer.weight_decay == 0.0f);
  CHECK(spec.learning_rate.kind == LearningRateSpec::Kind::Constant);
  CHECK(spec.learning_rate.initial == 0.5f);

  CHECK(spec.data.synthetic.points == 1000);
  CHECK(spec.data.synthetic.x_min == -1.0f);
  CHECK(spec.data.synthetic.x_max == 1.0f);
  CHECK(spec.data.synthetic.noise_stddev == 0.05f);
  CHECK(spec.data.batch_size == 32);
  CHECK(spec.data.shuffle);
  CHECK(spec.data.prefetch_batches == std::nullopt);  // auto
  CHECK(spec.training.log_every == 100);
  CHECK(!spec.training.summary_every);  // with each log line
  CHECK(spec.training.eval_every == 0);
  CHECK(spec.training.threads == 0);
  CHECK(spec.checkpoint.dir.empty());
  CHECK(spec.checkpoint.keep == 5);
  CHECK(!spec.init_from);
}

TEST_CASE("rmsprop: TensorFlow 1's defaults, and every field read", "[model_spec]") {
  TempDir dir;
  const ModelSpec defaults = loadVariant(dir, "type: sgd", "type: rmsprop");
  CHECK(defaults.optimizer.kind == OptimizerSpec::Kind::RmsProp);
  CHECK(defaults.optimizer.rho == 0.9f);
  CHECK(defaults.optimizer.momentum == 0.0f);
  CHECK(defaults.optimizer.epsilon == 1e-10f);
  CHECK(defaults.optimizer.initial_rms == 1.0f);
  CHECK(!defaults.optimizer.centered);
  CHECK(updateRule(defaults) ==
        "rmsprop (rho 0.9, momentum 0, initial_rms 1, epsilon 1e-10), learning rate 0.1");

  const ModelSpec set = loadVariant(
      dir, "type: sgd",
      "type: rmsprop, rho: 0.95, momentum: 0.9, centered: true, initial_rms: 0, epsilon: 1e-7");
  CHECK(set.optimizer.rho == 0.95f);
  CHECK(set.optimizer.momentum == 0.9f);
  CHECK(set.optimizer.centered);
  CHECK(set.optimizer.initial_rms == 0.0f);
  CHECK(set.optimizer.epsilon == 1e-7f);
  CHECK(updateRule(set) ==
        "rmsprop (rho 0.95, momentum 0.9, initial_rms 0, epsilon 1e-07, centered), learning rate "
        "0.1");
  CHECK_THAT(errorWith(dir, "type: sgd", "type: rmsprop, decay: 0.9"),
             Catch::EndsWith("optimizer.decay: unknown field of the rmsprop optimizer: TensorFlow "
                             "1's decay is rho here (the mean square's decay; a decaying learning "
                             "rate is a learning_rate schedule)"));
  // Momentum's defaults stay momentum's.
  CHECK(loadVariant(dir, "type: sgd", "type: momentum").optimizer.momentum == 0.9f);
  CHECK(loadVariant(dir, "type: sgd", "type: adam").optimizer.epsilon == 1e-7f);
  CHECK_THAT(errorWith(dir, "type: sgd", "type: adam, rho: 0.9"),
             Catch::EndsWith(
                 "optimizer: unknown field 'rho' (the fields of the adam optimizer are "
                 "type, learning_rate, weight_decay, clip_global_norm, beta1, beta2, epsilon)"));
}

TEST_CASE(
    "clip_global_norm: any optimizer's, in its update rule, not with gradients sent during "
    "backward",
    "[model_spec]") {
  TempDir dir;
  const ModelSpec clipped =
      loadVariant(dir, "type: sgd", "type: momentum, clip_global_norm: 5, weight_decay: 0.01");
  CHECK(clipped.optimizer.clip_global_norm == 5.0f);
  CHECK(updateRule(clipped) ==
        "momentum (0.9), weight_decay 0.01, clip_global_norm 5, learning rate 0.1");
  CHECK(loadVariant(dir, "type: sgd", "type: sgd").optimizer.clip_global_norm == 0.0f);
  const std::string path = (dir.path() / "variant.yaml").string();
  CHECK(errorWith(dir, "type: sgd", "type: adam, clip_global_norm: 0") ==
        path + ":4:43: optimizer.clip_global_norm: expected a positive number, got 0");
  const std::string during_backward = "{max_steps: 10, gradient_push: during_backward}";
  CHECK_NOTHROW(loadVariant(dir, "{max_steps: 10}", during_backward));
  std::string text = kMinimal;
  text.replace(text.find("type: sgd"), 9, "type: sgd, clip_global_norm: 1");
  text.replace(text.find("{max_steps: 10}"), 15, during_backward);
  const std::string both = dir.write("both.yaml", text);
  CHECK(loadError(both) == both +
                               ":8:42: training.gradient_push: expected after_step or auto with "
                               "optimizer.clip_global_norm, got during_backward (the global norm "
                               "needs the whole gradient before any of it is sent)");
}

TEST_CASE("loss: a name, or a mapping with label_smoothing", "[model_spec]") {
  TempDir dir;
  CHECK(loadVariant(dir, "type: sgd", "type: sgd").label_smoothing == 0.0f);
  const ModelSpec smoothed = loadVariant(dir, "\noptimizer:",
                                         "\nloss: {type: softmax_cross_entropy, label_smoothing: "
                                         "0.1}\noptimizer:");
  CHECK(smoothed.loss == LossKind::SoftmaxCrossEntropy);
  CHECK(smoothed.label_smoothing == 0.1f);
  CHECK(updateRule(smoothed) == "sgd, label_smoothing 0.1, learning rate 0.1");
  CHECK(loadVariant(dir, "\noptimizer:", "\nloss: {type: mse}\noptimizer:").loss ==
        LossKind::MeanSquaredError);
  const std::string path = (dir.path() / "variant.yaml").string();
  CHECK(errorWith(dir, "\noptimizer:", "\nloss: {type: mse, label_smoothing: 0.1}\noptimizer:") ==
        path + ":4:36: loss.label_smoothing: only meaningful with type: softmax_cross_entropy");
  CHECK(errorWith(dir, "\noptimizer:",
                  "\nloss: {type: softmax_cross_entropy, label_smoothing: 1}\noptimizer:") ==
        path + ":4:54: loss.label_smoothing: expected a number in [0, 1), got 1");
  CHECK(errorWith(dir, "\noptimizer:", "\nloss: {smoothing: 0.1}\noptimizer:") ==
        path +
            ":4:8: loss: unknown field 'smoothing' (the fields of the loss are type, "
            "label_smoothing)");
}

TEST_CASE("a dense or conv2d layer's weight_decay: its kernel's, in the update rule",
          "[model_spec]") {
  TempDir dir;
  const ModelSpec own = loadVariant(dir, "{type: dense, units: 3}",
                                    "{type: dense, name: out, units: 3, weight_decay: 0.001}");
  REQUIRE(own.layers[0].weight_decay);
  CHECK(*own.layers[0].weight_decay == 0.001f);
  CHECK(updateRule(own) == "sgd, weight_decay of out 0.001, learning rate 0.1");
  const LayerGraph graph = buildLayerGraph(own);
  CHECK(graph.variables[0].weight_decay == 0.001f);     // out/kernel
  CHECK(!graph.variables[1].weight_decay.has_value());  // out/bias
  CHECK(!loadVariant(dir, "type: sgd", "type: sgd").layers[0].weight_decay);
  const std::string path = (dir.path() / "variant.yaml").string();
  CHECK(errorWith(dir, "{type: dense, units: 3}", "{type: dense, units: 3, weight_decay: -1}") ==
        path + ":3:43: layers[0].weight_decay: expected a non-negative number, got -1");
}

TEST_CASE("every optional field is read", "[model_spec]") {
  TempDir dir;
  const ModelSpec spec = loadModelSpec(dir.write(
      "full.yaml",
      "name: full-model.v2\n"
      "seed: 9223372036854775807\n"
      "input: [6, 6, 1]\n"
      "layers:\n"
      "  - type: conv2d\n"
      "    filters: 2\n"
      "    kernel: 3\n"
      "    stride: [1, 2]\n"
      "    padding: same\n"
      "    activation: tanh\n"
      "    use_bias: false\n"
      "    trainable: false\n"
      "    kernel_initializer: he_normal\n"
      "  - {type: max_pool, size: 2, stride: 1, padding: same}\n"
      "  - {type: flatten}\n"
      "  - {type: dense, units: 1, kernel_initializer: glorot_normal, "
      "bias_initializer: he_uniform}\n"
      "  - {type: dense, units: 1, bias_initializer: {constant: 0.1}}\n"
      "loss: mse\n"
      "optimizer:\n"
      "  type: adam\n"
      "  learning_rate: {initial: 0.1, decay: exponential, decay_steps: 1000, "
      "decay_rate: 0.96, staircase: true}\n"
      "  weight_decay: 0.0005\n"
      "  beta1: 0.8\n"
      "  beta2: 0.99\n"
      "  epsilon: 1e-8\n"
      "data:\n"
      "  synthetic: {type: regression, points: 50, x_min: -2, x_max: 3.5, noise_stddev: 0}\n"
      "  batch_size: 10\n"
      "  shuffle: false\n"
      "  prefetch_batches: 2\n"
      "training: {max_steps: 7, log_every: 1, summary_every: 5, eval_every: 3, threads: 2}\n"
      "checkpoint: {dir: /tmp/x, every_steps: 5, every_seconds: 1.5, keep: 2}\n"));
  CHECK(spec.name == "full-model.v2");
  CHECK(spec.seed == 9223372036854775807ull);
  const LayerSpec& conv = spec.layers[0];
  CHECK(conv.stride == std::array<int64_t, 2>{1, 2});
  CHECK(conv.padding == Padding::Same);
  CHECK(conv.activation == Activation::Tanh);
  CHECK(!conv.use_bias);
  CHECK(!conv.trainable);
  CHECK(conv.kernel_initializer.kind == InitializerSpec::Kind::HeNormal);
  CHECK(spec.layers[1].stride == std::array<int64_t, 2>{1, 1});
  CHECK(spec.layers[1].padding == Padding::Same);
  CHECK(spec.layers[3].kernel_initializer.kind == InitializerSpec::Kind::GlorotNormal);
  CHECK(spec.layers[3].bias_initializer.kind == InitializerSpec::Kind::HeUniform);
  CHECK(spec.layers[4].bias_initializer.kind == InitializerSpec::Kind::Constant);
  CHECK(spec.layers[4].bias_initializer.value == 0.1f);
  CHECK(spec.loss == LossKind::MeanSquaredError);
  CHECK(spec.optimizer.kind == OptimizerSpec::Kind::Adam);
  CHECK(spec.optimizer.weight_decay == 0.0005f);
  CHECK(spec.optimizer.beta1 == 0.8f);
  CHECK(spec.optimizer.beta2 == 0.99f);
  CHECK(spec.optimizer.epsilon == 1e-8f);
  CHECK(spec.learning_rate.kind == LearningRateSpec::Kind::ExponentialDecay);
  CHECK(spec.learning_rate.initial == 0.1f);
  CHECK(spec.learning_rate.decay_steps == 1000);
  CHECK(spec.learning_rate.decay_rate == 0.96f);
  CHECK(spec.learning_rate.staircase);
  CHECK(spec.data.synthetic.points == 50);
  CHECK(spec.data.synthetic.x_min == -2.0f);
  CHECK(spec.data.synthetic.x_max == 3.5f);
  CHECK(spec.data.synthetic.noise_stddev == 0.0f);
  CHECK(!spec.data.shuffle);
  CHECK(spec.data.prefetch_batches == 2);
  CHECK(spec.training.max_steps == 7);
  CHECK(spec.training.log_every == 1);
  CHECK(spec.training.summary_every == 5);
  CHECK(spec.training.eval_every == 3);
  CHECK(spec.training.threads == 2);
  CHECK(spec.checkpoint.dir == "/tmp/x");
  CHECK(spec.checkpoint.every_steps == 5);
  CHECK(spec.checkpoint.every_seconds == 1.5);
  CHECK(spec.checkpoint.keep == 2);
}

TEST_CASE("momentum and adagrad options", "[model_spec]") {
  TempDir dir;
  std::string text = kMinimal;
  text.replace(text.find("{type: sgd"), std::string("{type: sgd, learning_rate: 0.1}").size(),
               "{type: momentum, learning_rate: 0.1, momentum: 0.5, nesterov: true}");
  ModelSpec spec = loadModelSpec(dir.write("m.yaml", text));
  CHECK(spec.optimizer.momentum == 0.5f);
  CHECK(spec.optimizer.nesterov);

  text = kMinimal;
  text.replace(text.find("{type: sgd"), std::string("{type: sgd, learning_rate: 0.1}").size(),
               "{type: adagrad, learning_rate: 0.1, initial_accumulator: 0.2, epsilon: 0.001}");
  spec = loadModelSpec(dir.write("a.yaml", text));
  CHECK(spec.optimizer.kind == OptimizerSpec::Kind::Adagrad);
  CHECK(spec.optimizer.initial_accumulator == 0.2f);
  CHECK(spec.optimizer.epsilon == 0.001f);
}

TEST_CASE("training.devices refuses a repeated CPU device and the whole CPU beside its parts",
          "[model_spec]") {
  TempDir dir;
  const std::string training = "training: {max_steps: 10}";
  const std::string path = (dir.path() / "variant.yaml").string();
  CHECK(loadVariant(dir, training,
                    "training: {max_steps: 10, devices: [cpu:0, cpu:1, cuda:0, cuda:0]}")
            .training.devices.size() == 4);  // a GPU named twice holds two towers
  CHECK(errorWith(dir, training, "training: {max_steps: 10, devices: [cpu:0, cpu:0]}") ==
        path + ":8:44: training.devices[1]: device cpu:0 is listed twice");
  CHECK(errorWith(dir, training, "training: {max_steps: 10, devices: [cpu, cpu:0]}") ==
        path +
            ":8:42: training.devices[1]: devices cpu and cpu:0: cpu is the whole CPU as "
            "one device; name several CPU devices cpu:0, cpu:1, ...");
}

TEST_CASE("learning-rate schedules: each decay's fields, and their mistakes", "[model_spec]") {
  TempDir dir;
  const std::string path = (dir / "variant.yaml").string();
  const std::string constant = "learning_rate: 0.1";
  const auto rate = [&](const std::string& schedule) {
    return loadVariant(dir, constant, "learning_rate: " + schedule).learning_rate;
  };
  using Kind = LearningRateSpec::Kind;

  LearningRateSpec lr = rate("{initial: 0.2}");
  CHECK(lr.kind == Kind::Constant);
  CHECK(lr.initial == 0.2f);

  lr = rate(
      "{initial: 0.2, decay: inverse_time, decay_steps: 10, decay_rate: 0.5, staircase: true}");
  CHECK(lr.kind == Kind::InverseTimeDecay);
  CHECK(lr.decay_steps == 10);
  CHECK(lr.decay_rate == 0.5f);
  CHECK(lr.staircase);

  lr = rate("{decay: piecewise_constant, boundaries: [100, 200], values: [0.1, 0.05, 0.01]}");
  CHECK(lr.kind == Kind::PiecewiseConstant);
  CHECK(lr.boundaries == std::vector<int64_t>{100, 200});
  CHECK(lr.values == std::vector<float>{0.1f, 0.05f, 0.01f});
  CHECK(lr.initial == 0.1f);

  lr = rate("{initial: 0.2, decay: polynomial, decay_steps: 50}");
  CHECK(lr.kind == Kind::PolynomialDecay);
  CHECK(lr.end_learning_rate == 0.0001f);  // TensorFlow's defaults
  CHECK(lr.power == 1.0f);
  CHECK(!lr.cycle);
  lr = rate(
      "{initial: 0.2, decay: polynomial, decay_steps: 50, end_learning_rate: 0, power: 0.5, "
      "cycle: true}");
  CHECK(lr.end_learning_rate == 0.0f);
  CHECK(lr.power == 0.5f);
  CHECK(lr.cycle);

  lr = rate("{initial: 0.2, decay: cosine, decay_steps: 50, alpha: 0.1}");
  CHECK(lr.kind == Kind::CosineDecay);
  CHECK(lr.alpha == 0.1f);
  CHECK(rate("{initial: 0.2, decay: cosine, decay_steps: 50}").alpha == 0.0f);

  // Nodes refuse a peer whose updateRule differs from theirs: each number
  // of a schedule, changed alone, changes it.
  const std::vector<std::string> schedules = {
      "0.2",
      "{initial: 0.2, decay: exponential, decay_steps: 50, decay_rate: 0.5}",
      "{initial: 0.2, decay: exponential, decay_steps: 50, decay_rate: 0.5, staircase: true}",
      "{initial: 0.2, decay: inverse_time, decay_steps: 50, decay_rate: 0.5}",
      "{initial: 0.2, decay: inverse_time, decay_steps: 51, decay_rate: 0.5}",
      "{initial: 0.2, decay: inverse_time, decay_steps: 50, decay_rate: 0.6}",
      "{initial: 0.2, decay: inverse_time, decay_steps: 50, decay_rate: 0.5, staircase: true}",
      "{decay: piecewise_constant, boundaries: [100], values: [0.2, 0.1]}",
      "{decay: piecewise_constant, boundaries: [101], values: [0.2, 0.1]}",
      "{decay: piecewise_constant, boundaries: [100], values: [0.2, 0.3]}",
      "{initial: 0.2, decay: polynomial, decay_steps: 50}",
      "{initial: 0.3, decay: polynomial, decay_steps: 50}",
      "{initial: 0.2, decay: polynomial, decay_steps: 50, end_learning_rate: 0.01}",
      "{initial: 0.2, decay: polynomial, decay_steps: 50, power: 2}",
      "{initial: 0.2, decay: polynomial, decay_steps: 50, cycle: true}",
      "{initial: 0.2, decay: cosine, decay_steps: 50}",
      "{initial: 0.2, decay: cosine, decay_steps: 50, alpha: 0.1}",
  };
  std::set<std::string> rules;
  for (const std::string& schedule : schedules)
    rules.insert(updateRule(loadVariant(dir, constant, "learning_rate: " + schedule)));
  CHECK(rules.size() == schedules.size());

  // The optimizer's line of the layer table says the schedule.
  const ModelSpec spec = loadVariant(
      dir, constant,
      "learning_rate: {decay: piecewise_constant, boundaries: [100], values: [0.1, 0.01]}");
  CHECK_THAT(updateRule(spec), Catch::Contains("learning rate 0.1, 0.01 after step 100"));

  // Each mistake, and what the error says after the spec's path.
  const std::vector<std::pair<std::string, std::string>> mistakes = {
      {"{initial: 0.1, decay: step}",
       ":4:61: optimizer.learning_rate.decay: expected one of exponential, inverse_time, "
       "piecewise_constant, polynomial, cosine, got 'step'"},
      {"{initial: 0.1, decay: cosine, decay_steps: 5, power: 2}",
       ":4:92: optimizer.learning_rate.power: only meaningful with decay: polynomial"},
      {"{initial: 0.1, decay: piecewise_constant, boundaries: [1], values: [1, 2]}",
       ":4:49: optimizer.learning_rate.initial: not used with decay: piecewise_constant, whose "
       "first value is the rate up to the first boundary"},
      {"{decay: piecewise_constant, boundaries: [1, 5], values: [1, 2]}",
       ":4:95: optimizer.learning_rate.values: expected a list of 3 positive numbers (one more "
       "than boundaries), got a list of 2 items"},
      {"{decay: piecewise_constant, boundaries: [5, 5], values: [1, 2, 3]}",
       ":4:83: optimizer.learning_rate.boundaries[1]: expected a step after 5 (boundaries "
       "increase), got 5"},
      {"{decay: piecewise_constant, boundaries: [9223372036854775807, 5], values: [1, 2, 3]}",
       ":4:101: optimizer.learning_rate.boundaries[1]: expected a step after 9223372036854775807 "
       "(boundaries increase), got 5"},
      {"{decay: piecewise_constant, boundaries: [], values: [1]}",
       ":4:79: optimizer.learning_rate.boundaries: expected a list of 1 to 1000 global steps, "
       "increasing, got an empty list"},
      {"{decay: piecewise_constant, values: [1]}",
       ":4:39: optimizer.learning_rate: missing field 'boundaries' (required with decay: "
       "piecewise_constant)"},
      {"{initial: 0.1, decay: cosine, decay_steps: 5, alpha: 1}",
       ":4:92: optimizer.learning_rate.alpha: expected a number in [0, 1), got 1"},
      {"{initial: 0.1, decay: polynomial, decay_steps: 5, end_learning_rate: -1}",
       ":4:108: optimizer.learning_rate.end_learning_rate: expected a non-negative number, got -1"},
  };
  for (const auto& [schedule, message] : mistakes) {
    INFO(schedule);
    CHECK(errorWith(dir, constant, "learning_rate: " + schedule) == path + message);
  }
}

TEST_CASE("moving_average: decay, num_updates, and its mistakes", "[model_spec]") {
  TempDir dir;
  const std::string optimizer = "optimizer: {type: sgd, learning_rate: 0.1}\n";
  CHECK_FALSE(loadVariant(dir, optimizer, optimizer).optimizer.moving_average);
  ModelSpec spec = loadVariant(dir, optimizer, optimizer + "moving_average: {decay: 0.99}\n");
  REQUIRE(spec.optimizer.moving_average);
  CHECK(spec.optimizer.moving_average->decay == 0.99f);
  CHECK(spec.optimizer.moving_average->num_updates);
  spec = loadVariant(dir, optimizer,
                     optimizer + "moving_average: {decay: 0.9, num_updates: false}\n");
  CHECK_FALSE(spec.optimizer.moving_average->num_updates);
  const std::string path = (dir.path() / "variant.yaml").string();
  CHECK(errorWith(dir, optimizer, optimizer + "moving_average: {decay: 1}\n") ==
        path + ":5:25: moving_average.decay: expected a number in (0, 1), got 1");
  CHECK_THAT(errorWith(dir, optimizer, optimizer + "moving_average: {decay: 0.9, decya: 1}\n"),
             Catch::Contains("moving_average"));
  CHECK_THAT(errorWith(dir, optimizer, optimizer + "moving_average: {num_updates: true}\n"),
             Catch::Contains("decay"));
  // Finite, but not as a float32: the message says which bound it broke.
  CHECK(errorWith(dir, optimizer, "optimizer: {type: sgd, learning_rate: 1e39}\n") ==
        path +
            ":4:39: optimizer.learning_rate: expected a number of magnitude at most 3.4e38 "
            "(float32's range), got 1e39");
  // A denormal float (1e-40) too: traind flushes them to 0, whether or not
  // this process does.
  // 1e-310 is a denormal double, which from_chars calls out of range.
  for (const char* tiny : {"1e-50", "1e-40", "1.17e-38", "1e-310"})
    CHECK(errorWith(dir, optimizer,
                    "optimizer: {type: sgd, learning_rate: " + std::string(tiny) + "}\n") ==
          path +
              ":4:39: optimizer.learning_rate: expected a number of magnitude at least "
              "1.17549435e-38 (float32's smallest normal number; traind takes smaller ones as "
              "0), got " +
              tiny);
  CHECK(
      loadVariant(dir, optimizer, "optimizer: {type: adam, learning_rate: 0.1, epsilon: 1.2e-38}\n")
          .optimizer.epsilon == 1.2e-38f);
}

// In a test case of its own: ctest runs each in a process of its own, and
// the flags stay on for the rest of this one.
TEST_CASE("a denormal double is refused as traind reads it, its denormals flushed",
          "[model_spec]") {
  TempDir dir;
  const std::string optimizer = "optimizer: {type: sgd, learning_rate: 0.1}\n";
  // With denormals flushed, 1e-310 compares as 0: a weight_decay of it
  // passed as 0.
  flushDenormalsToZero();
  for (const char* tiny : {"1e-310", "-1e-310"})
    CHECK_THAT(errorWith(dir, optimizer,
                         "optimizer: {type: sgd, learning_rate: 0.1, weight_decay: " +
                             std::string(tiny) + "}\n"),
               Catch::EndsWith("optimizer.weight_decay: expected a number of magnitude at least "
                               "1.17549435e-38 (float32's smallest normal number; traind takes "
                               "smaller ones as 0), got " +
                               std::string(tiny)));
  CHECK(loadVariant(dir, optimizer, "optimizer: {type: sgd, learning_rate: 0.1, weight_decay: 0}\n")
            .optimizer.weight_decay == 0.0f);
}

TEST_CASE("relative paths resolve against the spec's directory", "[model_spec]") {
  TempDir dir;
  dir.write("data/train-images", "x");
  dir.write("data/train-labels", "x");
  dir.write("data/test-images", "x");
  const std::string spec_path = dir.write(
      "specs/model.yaml",
      "input: [4]\n"
      "layers: [{type: dense, name: out, units: 2}]\n"
      "optimizer: {type: sgd, learning_rate: 0.1}\n"
      "data:\n"
      "  train: {images: ../data/train-images, labels: ../data/./train-labels, limit: 10}\n"
      "  test:\n"
      "    images: ../data/test-images\n"
      "    labels: " +
          (dir.path() / "data/train-labels").string() +
          "\n"
          "  batch_size: 2\n"
          "training: {epochs: 1}\n"
          "checkpoint: {dir: ckpt}\n"
          "init_from: {checkpoint: ../base, layers: [out]}\n");
  const fs::path root = fs::weakly_canonical(dir.path());
  const ModelSpec spec = loadModelSpec(spec_path);
  CHECK(spec.path == spec_path);
  CHECK(spec.data.train.images == (root / "data/train-images").string());
  CHECK(spec.data.train.labels == (root / "data/train-labels").string());
  CHECK(spec.data.train.limit == 10);
  REQUIRE(spec.data.test);
  CHECK(spec.data.test->images == (root / "data/test-images").string());
  CHECK(spec.data.test->labels == (dir.path() / "data/train-labels").string());  // kept
  CHECK(spec.checkpoint.dir == (root / "specs/ckpt").string());
  REQUIRE(spec.init_from);
  CHECK(spec.init_from->checkpoint == (root / "base").string());
  CHECK(spec.init_from->layers == std::vector<InitFromLayer>{{"out", "out", {}}});
}

TEST_CASE("a relative spec path resolves from the working directory", "[model_spec]") {
  TempDir dir;
  dir.write("images", "x");
  dir.write("labels", "x");
  const std::string body =
      "input: [4]\n"
      "layers: [{type: dense, units: 2}]\n"
      "optimizer: {type: sgd, learning_rate: 0.1}\n"
      "data: {train: {images: images, labels: labels}, batch_size: 2}\n"
      "training: {epochs: 1}\n";
  dir.write("sub/spec.yaml", body);
  const fs::path previous = fs::current_path();
  fs::current_path(dir.path());
  ModelSpec spec;
  std::string message;
  try {
    spec = loadModelSpec("sub/spec.yaml");
  } catch (const InputError& e) {
    message = e.what();
  }
  fs::current_path(previous);
  // Data relative to sub/, which has none: the message names the resolved path.
  CHECK(message == "sub/spec.yaml:4:24: data.train.images: expected an existing file, got '" +
                       (fs::weakly_canonical(dir.path()) / "sub/images").string() +
                       "' (no such file)");
}

TEST_CASE("a missing data file names the field and the resolved path", "[model_spec]") {
  TempDir dir;
  dir.write("labels.gz", "x");
  const std::string path = dir.write("spec.yaml",
                                     "input: [4]\n"
                                     "layers: [{type: dense, units: 2}]\n"
                                     "optimizer: {type: sgd, learning_rate: 0.1}\n"
                                     "data:\n"
                                     "  train:\n"
                                     "    images: missing/images.gz\n"
                                     "    labels: labels.gz\n"
                                     "  batch_size: 2\n"
                                     "training: {epochs: 1}\n");
  const fs::path root = fs::weakly_canonical(dir.path());
  CHECK(loadError(path) == path + ":6:13: data.train.images: expected an existing file, got '" +
                               (root / "missing/images.gz").string() + "' (no such file)");

  dir.write("spec2.yaml",
            "input: [4]\n"
            "layers: [{type: dense, units: 2}]\n"
            "optimizer: {type: sgd, learning_rate: 0.1}\n"
            "data: {train: {images: labels.gz, labels: .}, batch_size: 2}\n"
            "training: {epochs: 1}\n");
  CHECK(loadError((dir.path() / "spec2.yaml").string()) ==
        (dir.path() / "spec2.yaml").string() +
            ":4:43: data.train.labels: expected an existing file, got '" + root.string() +
            "/' (a directory)");

  REQUIRE(mkfifo((dir.path() / "fifo").c_str(), 0600) == 0);
  dir.write("spec3.yaml",
            "input: [4]\n"
            "layers: [{type: dense, units: 2}]\n"
            "optimizer: {type: sgd, learning_rate: 0.1}\n"
            "data: {train: {images: fifo, labels: labels.gz}, batch_size: 2}\n"
            "training: {epochs: 1}\n");
  CHECK(loadError((dir.path() / "spec3.yaml").string()) ==
        (dir.path() / "spec3.yaml").string() +
            ":4:24: data.train.images: expected an existing file, got '" +
            (root / "fifo").string() + "' (not a regular file)");
}

TEST_CASE("tfrecords: a path, a glob pattern or a list of them, each file once, in order",
          "[model_spec]") {
  TempDir dir;
  for (const char* name : {"data/train-00001-of-00003", "data/train-00000-of-00003",
                           "data/train-00002-of-00003", "data/extra", "data/test"})
    dir.write(name, "x");
  const fs::path root = fs::weakly_canonical(dir.path());
  const auto spec = [&](const std::string& data) {
    return dir.write("spec.yaml",
                     "input: [4]\n"
                     "layers: [{type: dense, units: 2}]\n"
                     "optimizer: {type: sgd, learning_rate: 0.1}\n"
                     "data:\n" +
                         data +
                         "  batch_size: 2\n"
                         "training: {epochs: 1}\n");
  };
  const ModelSpec loaded = loadModelSpec(
      spec("  train: {tfrecords: [data/train-*-of-00003, data/extra], image_feature: image, "
           "label_feature: class, limit: 5}\n"
           "  test: {tfrecords: data/test}\n"));
  CHECK(loaded.data.kind == DataSpec::Kind::Files);
  CHECK(loaded.data.train.format == DataFiles::Format::TfRecord);
  CHECK(loaded.data.train.records ==
        std::vector<std::string>{(root / "data/train-00000-of-00003").string(),
                                 (root / "data/train-00001-of-00003").string(),
                                 (root / "data/train-00002-of-00003").string(),
                                 (root / "data/extra").string()});
  CHECK(loaded.data.train.image_feature == "image");
  CHECK(loaded.data.train.label_feature == "class");
  CHECK(loaded.data.train.limit == 5);
  REQUIRE(loaded.data.test);
  CHECK(loaded.data.test->records == std::vector<std::string>{(root / "data/test").string()});
  CHECK(loaded.data.test->image_feature == "image_raw");  // convert_to_records.py's names
  CHECK(loaded.data.test->label_feature == "label");

  const std::string path = (dir.path() / "spec.yaml").string();
  CHECK(loadError(spec("  train: {tfrecords: data/valid-*}\n")) ==
        path + ":5:22: data.train.tfrecords: expected a pattern that matches files, got '" +
            (root / "data/valid-*").string() + "' (no file matches it)");
  // A pattern is matched within a bound: this one walked /proc and /sys for
  // minutes, past 1.8 GB.
  CHECK_THAT(loadError(spec("  train: {tfrecords: '/*/*/*/*/*/*/*/*'}\n")),
             Catch::EndsWith("data.train.tfrecords: the pattern '/*/*/*/*/*/*/*/*' lists more than "
                             "100000 directory entries as it is matched: narrow it (each '*' of a "
                             "directory lists every one it matches; /proc and /sys hold loops)"));
  CHECK(loadError(spec("  train: {tfrecords: [data/test, data/missing]}\n")) ==
        path + ":5:34: data.train.tfrecords[1]: expected an existing file, got '" +
            (root / "data/missing").string() + "' (no such file)");
  CHECK(loadError(spec("  train: {tfrecords: [data/train-*, data/train-00001-of-00003]}\n")) ==
        path + ":5:37: data.train.tfrecords[1]: lists '" +
            (root / "data/train-00001-of-00003").string() + "' a second time");
  fs::create_symlink("test", root / "data/link");
  CHECK(loadError(spec("  train: {tfrecords: [data/test, data/link]}\n")) ==
        path + ":5:34: data.train.tfrecords[1]: lists '" + (root / "data/link").string() +
            "', the same file as '" + (root / "data/test").string() + "', a second time");
  // A file whose name holds a pattern's characters is that file.
  dir.write("data/odd[1]", "x");
  CHECK(loadModelSpec(spec("  train: {tfrecords: 'data/odd[1]'}\n")).data.train.records ==
        std::vector<std::string>{(root / "data/odd[1]").string()});
  CHECK(loadError(spec("  train: {tfrecords: []}\n")) ==
        path +
            ":5:22: data.train.tfrecords: expected a path, a glob pattern or a list of them, "
            "got an empty list");
  CHECK(loadError(spec("  train: {tfrecords: data/test, images: data/test}\n")) ==
        path +
            ":5:41: data.train.images: expected either images and labels (IDX files) or "
            "tfrecords, got both");
  CHECK(loadError(spec("  train: {images: data/test, labels: data/test, label_feature: y}\n")) ==
        path + ":5:64: data.train.label_feature: only allowed with tfrecords");
  CHECK(loadError(spec("  train: {tfrecords: data/test, image_feature: x, label_feature: x}\n")) ==
        path +
            ":5:10: data.train: expected two different features for the image and the "
            "label, got 'x' for both");
  CHECK(loadError(spec("  train: {tfrecord: data/test}\n")) ==
        path + ":5:11: data.train: unknown field 'tfrecord' (did you mean 'tfrecords'?)");
  CHECK(loadError(spec("  train: {limit: 3}\n")) ==
        path + ":5:10: data.train: missing field 'images' (or tfrecords, for TFRecord files)");
}

TEST_CASE("resize: bilinear, for TFRecord images to an input of [height, width, 1 or 3]",
          "[model_spec]") {
  TempDir dir;
  dir.write("data/train", "x");
  const auto spec = [&](const std::string& input, const std::string& train) {
    return dir.write("spec.yaml", "input: " + input +
                                      "\n"
                                      "layers: [{type: dense, units: 2}]\n"
                                      "optimizer: {type: sgd, learning_rate: 0.1}\n"
                                      "data:\n"
                                      "  train: " +
                                      train +
                                      "\n"
                                      "  batch_size: 2\n"
                                      "training: {epochs: 1}\n");
  };
  CHECK(loadModelSpec(spec("[8, 8, 3]", "{tfrecords: data/train}")).data.train.resize ==
        DataFiles::Resize::None);
  CHECK(loadModelSpec(spec("[8, 8, 3]", "{tfrecords: data/train, resize: bilinear}"))
            .data.train.resize == DataFiles::Resize::Bilinear);
  CHECK(loadModelSpec(spec("[8, 8, 1]", "{tfrecords: data/train, resize: bilinear}"))
            .data.train.resize == DataFiles::Resize::Bilinear);
  const std::string path = (dir.path() / "spec.yaml").string();
  CHECK(loadError(spec("[8, 8, 3]", "{tfrecords: data/train, resize: bicubic}")) ==
        path +
            ":5:42: data.train.resize: expected one of bilinear, legacy_bilinear, got 'bicubic'");
  CHECK(loadModelSpec(spec("[8, 8, 3]", "{tfrecords: data/train, resize: legacy_bilinear}"))
            .data.train.resize == DataFiles::Resize::LegacyBilinear);
  CHECK(loadError(spec("[64]", "{tfrecords: data/train, resize: bilinear}")) ==
        path +
            ":5:42: data.train.resize: expected an input of [height, width, 1] or [height, "
            "width, 3] to resize images to, got [64]");
  CHECK(loadError(spec("[8, 8, 4]", "{tfrecords: data/train, resize: bilinear}")) ==
        path +
            ":5:42: data.train.resize: expected an input of [height, width, 1] or [height, "
            "width, 3] to resize images to, got [8, 8, 4]");
  CHECK(
      loadError(spec("[8, 8, 3]", "{images: data/train, labels: data/train, resize: bilinear}")) ==
      path + ":5:59: data.train.resize: only allowed with tfrecords");

  // in_memory: false leaves a TFRecord set's examples in its files.
  CHECK(loadModelSpec(spec("[8, 8, 3]", "{tfrecords: data/train}")).data.train.in_memory);
  CHECK_FALSE(loadModelSpec(spec("[8, 8, 3]", "{tfrecords: data/train, in_memory: false}"))
                  .data.train.in_memory);
  CHECK(loadError(spec("[8, 8, 3]", "{tfrecords: data/train, in_memory: no}")) ==
        path + ":5:45: data.train.in_memory: expected true or false, got 'no'");
  CHECK(
      loadError(spec("[8, 8, 3]", "{images: data/train, labels: data/train, in_memory: false}")) ==
      path + ":5:62: data.train.in_memory: only allowed with tfrecords");
}

TEST_CASE("augment: TensorFlow 1's random image distortions, each optional", "[model_spec]") {
  TempDir dir;
  dir.write("data/train", "x");
  const auto spec = [&](const std::string& augment) {
    return writeDataSpec(dir, "[8, 8, 3]",
                         "  train: {tfrecords: data/train}\n  augment: " + augment + "\n");
  };
  const Augmentation all =
      loadModelSpec(spec("{random_crop: {padding: 4}, flip_left_right: true, brightness: 0.25, "
                         "contrast: [0.2, 1.8]}"))
          .data.augment;
  CHECK(all.crop_padding == 4);
  CHECK(all.flip_left_right);
  CHECK(all.brightness == 0.25f);
  CHECK(all.contrast_lower == 0.2f);
  CHECK(all.contrast_upper == 1.8f);
  CHECK(all.any());
  CHECK(all.location.line == 6);
  CHECK_FALSE(loadModelSpec(spec("{flip_left_right: false}")).data.augment.any());
  // Every node must distort alike: the data rule a ps compares at hello.
  CHECK(dataRule(loadModelSpec(spec("{random_crop: {padding: 4}, flip_left_right: true, "
                                    "brightness: 0.25, contrast: [0.2, 1.8]}"))) ==
        "batch_size 32, seed 0, shuffled, augmented: random_crop 4 flip_left_right brightness "
        "0.25 contrast [0.2, 1.8]");
  CHECK(dataRule(loadModelSpec(spec("{flip_left_right: false}"))) ==
        "batch_size 32, seed 0, shuffled");
  CHECK(loadModelSpec(spec("{contrast: [0, 0.5]}")).data.augment.any());

  // A crop with a size: the model's input is its window.
  const Augmentation window =
      loadModelSpec(spec("{random_crop: {size: [8, 8], padding: 2}, saturation: [0.5, 1.5], "
                         "hue: 0.2}"))
          .data.augment;
  CHECK(window.crop_height == 8);
  CHECK(window.crop_width == 8);
  CHECK(window.crop_padding == 2);
  CHECK(window.crop_size_location.line == 6);
  CHECK(window.saturation_lower == 0.5f);
  CHECK(window.saturation_upper == 1.5f);
  CHECK(window.hue == 0.2f);
  CHECK(window.colours());
  CHECK(augmentationText(window) == "random_crop 8x8 padding 2 saturation [0.5, 1.5] hue 0.2");
  CHECK(augmentationText(loadModelSpec(spec("{random_crop: {size: [8, 8]}}")).data.augment) ==
        "random_crop 8x8");

  const std::string path = (dir.path() / "spec.yaml").string();
  // Each refused value with what is said of it, after the spec's path.
  const std::pair<const char*, const char*> refused[] = {
      {"{random_crop: {padding: 0}}",
       ":6:36: data.augment.random_crop.padding: expected a positive integer, got 0"},
      {"{random_crop: {padding: 8}}",
       ":6:36: data.augment.random_crop.padding: expected padding less than the window's height "
       "and width [8, 8] (the model's input), so that every window holds some of the image, got "
       "8"},
      {"{random_crop: 4}", ":6:26: data.augment.random_crop: expected a mapping of fields, got 4"},
      {"{brightness: 0}",
       ":6:25: data.augment.brightness: expected a positive number up to 100 (the largest "
       "change), got 0"},
      {"{contrast: [0.5, 3e38]}",
       ":6:29: data.augment.contrast[1]: expected a positive number up to 100, got 3e38"},
      {"{contrast: [1.8, 0.2]}",
       ":6:29: data.augment.contrast[1]: expected an upper bound greater than the lower 1.8, got "
       "0.2"},
      {"{contrast: 0.5}", ":6:23: data.augment.contrast: expected [lower, upper], got 0.5"},
      {"{contrast: [0.5]}",
       ":6:23: data.augment.contrast: expected [lower, upper], two numbers, got a list of 1 item"},
      {"{flip_up_down: true}",
       ":6:13: data.augment: unknown field 'flip_up_down' (the fields of data.augment are "
       "random_crop, flip_left_right, brightness, saturation, hue, contrast)"},
      {"{random_crop: {}}",
       ":6:26: data.augment.random_crop: expected padding, size or both, got neither"},
      {"{random_crop: {size: [6, 8]}}",
       ":6:33: data.augment.random_crop.size: expected the model's input height and width [8, "
       "8] (the window is what the model takes), got [6, 8]"},
      {"{random_crop: {size: 8}}",
       ":6:33: data.augment.random_crop.size: expected [height, width], got 8"},
      {"{random_crop: {size: [8, 0]}}",
       ":6:37: data.augment.random_crop.size[1]: expected a positive integer, got 0"},
      {"{saturation: [1.5, 0.5]}",
       ":6:31: data.augment.saturation[1]: expected an upper bound greater than the lower 1.5, "
       "got 0.5"},
      {"{hue: 0.6}",
       ":6:18: data.augment.hue: expected a positive number up to 0.5 (the largest change, in "
       "turns), got 0.6"},
  };
  for (const auto& [augment, message] : refused) CHECK(loadError(spec(augment)) == path + message);
  // Resized to the model's input, training images would be the window
  // itself: a window is taken of images resized to a size of their own.
  const auto resized = [&](const std::string& train_resize, const std::string& test_resize,
                           const std::string& augment) {
    return writeDataSpec(dir, "[8, 8, 3]",
                         "  train: {tfrecords: data/train, resize: " + train_resize +
                             "}\n  test: {tfrecords: data/train, resize: " + test_resize + "}\n" +
                             (augment.empty() ? "" : "  augment: " + augment + "\n"));
  };
  const DataSpec cropped =
      loadModelSpec(resized("{size: [10, 12]}", "bilinear", "{random_crop: {size: [8, 8]}}")).data;
  CHECK(cropped.train.resize == DataFiles::Resize::Bilinear);
  CHECK(cropped.train.resize_height == 10);
  CHECK(cropped.train.resize_width == 12);
  CHECK(cropped.test->resize_height == 0);  // the test set resized to the window itself
  const DataSpec legacy = loadModelSpec(resized("{method: legacy_bilinear, size: [8, 9]}",
                                                "{size: [6, 6]}", "{random_crop: {size: [8, 8]}}"))
                              .data;
  CHECK(legacy.train.resize == DataFiles::Resize::LegacyBilinear);
  CHECK(legacy.test->resize == DataFiles::Resize::Bilinear);
  CHECK(legacy.test->resize_height == 6);  // smaller than the window: evaluation pads it
  CHECK(loadModelSpec(
            resized("{size: [6, 7]}", "bilinear", "{random_crop: {size: [8, 8], padding: 1}}"))
            .data.train.resize_height == 6);
  CHECK(
      loadModelSpec(resized("{size: [8, 8]}", "{method: bilinear}", "")).data.train.resize_width ==
      8);
  // Each refused train resize, test resize and augment, with what is said.
  const std::array<const char*, 4> refused_resizes[] = {
      {"bilinear", "bilinear", "{random_crop: {size: [8, 8]}}",
       ":5:42: data.train.resize: expected a size to resize to, {size: [H, W]}, with a crop's "
       "window (data.augment.random_crop.size): without one every image would be resized to "
       "the window [8, 8] itself (a crop's padding alone crops images resized to the input; a "
       "random box or shorter_side is drawn on each image at its own size)"},
      {"{size: [10, 10]}", "bilinear", "",
       ":5:49: data.train.resize.size: expected the model's input height and width [8, 8] (a "
       "size of its own is for images the model takes a window of: "
       "data.augment.random_crop.size), got [10, 10]"},
      {"bilinear", "{size: [10, 10]}", "{random_crop: {padding: 2}}",
       ":6:48: data.test.resize.size: expected the model's input height and width [8, 8] (a "
       "size of its own is for images the model takes a window of: "
       "data.augment.random_crop.size), got [10, 10]"},
      {"{method: bicubic}", "bilinear", "",
       ":5:51: data.train.resize.method: expected one of bilinear, legacy_bilinear, got "
       "'bicubic'"},
      {"{size: [8]}", "bilinear", "",
       ":5:49: data.train.resize.size: expected [height, width], two positive integers, got a "
       "list of 1 item"},
      {"{sizes: [8, 8]}", "bilinear", "",
       ":5:43: data.train.resize: unknown field 'sizes' (did you mean 'size'?)"},
      {"{size: [9, 5]}", "bilinear", "{random_crop: {size: [8, 8], padding: 1}}",
       ":5:49: data.train.resize.size: expected a size that holds the window [8, 8] (padded by 1 "
       "on every side: data.augment.random_crop), got [9, 5]"},
      {"{size: [8, 8]}", "bilinear", "{random_crop: {size: [8, 8]}}",
       ":5:49: data.train.resize.size: expected a size that, padded by 0 on every side, is "
       "larger than the window [8, 8]: every image would be the window itself"},
      {"{size: [6, 6]}", "bilinear", "{random_crop: {size: [8, 8], padding: 1}}",
       ":5:49: data.train.resize.size: expected a size that, padded by 1 on every side, is "
       "larger than the window [8, 8]: every image would be the window itself"},
  };
  for (const auto& [train_resize, test_resize, augment, message] : refused_resizes) {
    INFO(message);
    CHECK(loadError(resized(train_resize, test_resize, augment)) == path + message);
  }
  // A test set's shorter side: each image in proportion, then its centre.
  const DataSpec shorter =
      loadModelSpec(resized("{size: [10, 10]}", "{method: legacy_bilinear, shorter_side: 9}",
                            "{random_crop: {size: [8, 8]}}"))
          .data;
  CHECK(shorter.test->resize == DataFiles::Resize::LegacyBilinear);
  CHECK(shorter.test->resize_shorter_side == 9);
  CHECK(shorter.test->resize_height == 0);
  CHECK(
      loadModelSpec(resized("bilinear", "{shorter_side: 8}", "")).data.test->resize_shorter_side ==
      8);
  // The official ResNet's evaluation: each side cut down.
  CHECK(loadModelSpec(resized("bilinear", "{shorter_side: 9, round: down}", ""))
            .data.test->resize_rounding == SideRounding::Down);
  CHECK(shorter.test->resize_rounding == SideRounding::Nearest);
  const std::array<const char*, 4> refused_sides[] = {
      {"bilinear", "{shorter_side: 8, round: down}", "",
       ":6:56: data.test.resize.shorter_side: expected a side longer than the model's input's "
       "height and width [8, 8] with round: down, which may cut it a pixel short, got 8"},
      {"bilinear", "{shorter_side: 9, round: up}", "",
       ":6:66: data.test.resize.round: expected one of nearest, down, got 'up'"},
      {"bilinear", "{size: [8, 8], round: down}", "",
       ":6:63: data.test.resize.round: only allowed with shorter_side (how each side of its "
       "resize is rounded)"},
      {"bilinear", "{shorter_side: 70000}", "",
       ":6:56: data.test.resize.shorter_side: expected a positive integer of at most 65536, got "
       "70000"},
      {"{shorter_side: 10}", "bilinear", "",
       ":5:57: data.train.resize.shorter_side: expected it of a test set only "
       "(data.test.resize): a training set draws a side for each image, "
       "data.augment.random_crop.shorter_side: [lower, upper]"},
      {"bilinear", "{shorter_side: 10, size: [8, 8]}", "",
       ":6:66: data.test.resize.size: expected a size or a shorter_side, not both"},
      {"bilinear", "{shorter_side: 7}", "",
       ":6:56: data.test.resize.shorter_side: expected a side no shorter than the model's "
       "input's height and width [8, 8], the centre window each image gives, got 7"},
      {"bilinear", "{shorter_side: 0}", "",
       ":6:56: data.test.resize.shorter_side: expected a positive integer, got 0"},
  };
  for (const auto& [train_resize, test_resize, augment, message] : refused_sides) {
    INFO(message);
    CHECK(loadError(resized(train_resize, test_resize, augment)) == path + message);
  }
  // A test set's central fraction: each image's centre, resized to the input.
  const DataSpec central =
      loadModelSpec(resized("bilinear", "{method: legacy_bilinear, central_fraction: 0.875}", ""))
          .data;
  CHECK(central.test->resize == DataFiles::Resize::LegacyBilinear);
  CHECK(central.test->resize_central_fraction == 0.875);
  CHECK(central.train.resize_central_fraction == 0.0);
  // Kept in double, as tf.image.central_crop takes it.
  CHECK(loadModelSpec(resized("bilinear", "{central_fraction: 0.9}", ""))
            .data.test->resize_central_fraction == 0.9);
  const std::array<const char*, 3> refused_fractions[] = {
      {"{central_fraction: 0.5}", "bilinear",
       ":5:61: data.train.resize.central_fraction: expected it of a test set only "
       "(data.test.resize): a training set draws its crops, data.augment.random_crop"},
      {"bilinear", "{central_fraction: 0.5, size: [8, 8]}",
       ":6:71: data.test.resize.size: expected one of size, shorter_side and central_fraction, "
       "not two"},
      {"bilinear", "{central_fraction: 0}",
       ":6:60: data.test.resize.central_fraction: expected a number above 0 and up to 1 (of each "
       "side, kept), got 0"},
  };
  for (const auto& [train_resize, test_resize, message] : refused_fractions) {
    INFO(message);
    CHECK(loadError(resized(train_resize, test_resize, "")) == path + message);
  }
  CHECK_THAT(loadError(resized("bilinear", "{central_fraction: 1.5}", "")),
             Catch::EndsWith("central_fraction: expected a number above 0 and up to 1 (of each "
                             "side, kept), got 1.5"));
  // Synthetic data are neither images nor files to share.
  CHECK(loadError(writeDataSpec(dir, "[1]",
                                "  synthetic: {type: regression}\n"
                                "  augment: {flip_left_right: true}\n",
                                /*regression=*/true)) ==
        path + ":7:12: data.augment: only allowed with data.train (synthetic data are not images)");
  CHECK(loadError(writeDataSpec(dir, "[1]",
                                "  synthetic: {type: regression}\n  shard_by_worker: true\n",
                                /*regression=*/true)) ==
        path +
            ":7:20: data.shard_by_worker: only allowed with data.train (every worker makes the "
            "synthetic data whole)");
}

TEST_CASE("augment random_crop area and aspect_ratio: a box of the image resized to the window",
          "[model_spec]") {
  TempDir dir;
  dir.write("data/train", "x");
  const auto spec = [&](const std::string& crop,
                        const std::string& train_resize = "bilinear, in_memory: false") {
    return writeDataSpec(dir, "[8, 8, 3]",
                         "  train: {tfrecords: data/train, resize: " + train_resize +
                             "}\n  augment: {random_crop: " + crop + "}\n");
  };
  const Augmentation box =
      loadModelSpec(spec("{size: [8, 8], area: [0.08, 1], aspect_ratio: [0.5, 2]}")).data.augment;
  CHECK(box.boxes());
  CHECK(box.crop_height == 8);
  CHECK(box.box_area_lower == 0.08f);
  CHECK(box.box_area_upper == 1.0f);
  CHECK(box.box_aspect_lower == 0.5f);
  CHECK(box.box_aspect_upper == 2.0f);
  CHECK(augmentationText(box) == "random_crop 8x8 area [0.08, 1] aspect_ratio [0.5, 2]");
  // Where one range is given, the other is inception_preprocessing's.
  const Augmentation area = loadModelSpec(spec("{size: [8, 8], area: [0.5, 0.5]}")).data.augment;
  CHECK(augmentationText(area) == "random_crop 8x8 area [0.5, 0.5] aspect_ratio [0.75, 1.33]");
  const Augmentation aspect =
      loadModelSpec(spec("{size: [8, 8], aspect_ratio: [1, 1]}")).data.augment;
  CHECK(augmentationText(aspect) == "random_crop 8x8 area [0.05, 1] aspect_ratio [1, 1]");
  CHECK_FALSE(loadModelSpec(spec("{size: [8, 8]}", "{size: [10, 10]}")).data.augment.boxes());
  // Without a size, boxes are of each image as decoded, left in its file;
  // with one, of the image resized to it (the window's own size too).
  const DataFiles own = loadModelSpec(spec("{size: [8, 8], area: [0.5, 1]}")).data.train;
  CHECK(own.own_sizes);
  CHECK(own.resize_height == 0);
  const DataFiles resized =
      loadModelSpec(spec("{size: [8, 8], area: [0.5, 1]}", "{size: [8, 8]}")).data.train;
  CHECK_FALSE(resized.own_sizes);
  CHECK(resized.resize_height == 8);
  CHECK_FALSE(loadModelSpec(spec("{size: [8, 8]}", "{size: [10, 10]}")).data.train.own_sizes);

  const std::string path = (dir.path() / "spec.yaml").string();
  const std::pair<const char*, const char*> refused[] = {
      {"{area: [0.5, 1]}",
       ":6:26: data.augment.random_crop: expected a size, [height, width], to resize a box of "
       "random area and aspect ratio to (area, aspect_ratio), got none"},
      {"{size: [8, 8], padding: 2, area: [0.5, 1]}",
       ":6:50: data.augment.random_crop.padding: expected no padding with a box of random area "
       "and aspect ratio (area, aspect_ratio): the box lies inside the image"},
      {"{size: [8, 8], area: [0, 1]}",
       ":6:48: data.augment.random_crop.area[0]: expected a number above 0 and up to 1 (a "
       "fraction of the image's area), got 0"},
      {"{size: [8, 8], area: [0.5, 1.5]}",
       ":6:53: data.augment.random_crop.area[1]: expected a number above 0 and up to 1 (a "
       "fraction of the image's area), got 1.5"},
      {"{size: [8, 8], area: [0.6, 0.5]}",
       ":6:53: data.augment.random_crop.area[1]: expected an upper bound no less than the lower "
       "0.6, got 0.5"},
      {"{size: [8, 8], area: 0.5}",
       ":6:47: data.augment.random_crop.area: expected [lower, upper], got 0.5"},
      {"{size: [8, 8], aspect_ratio: [0, 2]}",
       ":6:56: data.augment.random_crop.aspect_ratio[0]: expected a number from 0.01 to 100 "
       "(width over height), got 0"},
      {"{size: [8, 8], aspect_ratio: [0.5, 101]}",
       ":6:61: data.augment.random_crop.aspect_ratio[1]: expected a number from 0.01 to 100 "
       "(width over height), got 101"},
      {"{size: [8, 8], aspect_ratio: [1, 2, 3]}",
       ":6:55: data.augment.random_crop.aspect_ratio: expected [lower, upper], two numbers, got a "
       "list of 3 items"},
      {"{size: [8, 8], scale: [0.5, 1]}",
       ":6:41: data.augment.random_crop: unknown field 'scale' (the fields of "
       "data.augment.random_crop are padding, size, area, aspect_ratio, shorter_side)"},
  };
  for (const auto& [crop, message] : refused) {
    INFO(crop);
    CHECK(loadError(spec(crop)) == path + message);
  }
  CHECK(loadError(spec("{size: [8, 8], area: [0.5, 1]}", "{size: [6, 8]}")) ==
        path +
            ":5:49: data.train.resize.size: expected a size that holds the window [8, 8] (padded "
            "by 0 on every side: data.augment.random_crop), got [6, 8]");
  CHECK(loadError(spec("{size: [8, 8], area: [0.5, 1]}", "bilinear")) ==
        path +
            ":5:10: data.train: expected in_memory: false: each training image keeps its own "
            "size, decoded from its file as it is gathered, for a box of it "
            "(data.augment.random_crop's area and aspect_ratio); or resize: {size: [H, W]}, every "
            "image resized to one size first");
}

TEST_CASE("augment random_crop shorter_side: a window of each image resized to a side drawn",
          "[model_spec]") {
  TempDir dir;
  dir.write("data/train", "x");
  dir.write("data/images", "x");
  dir.write("data/labels", "x");
  const auto spec = [&](const std::string& crop,
                        const std::string& train =
                            "tfrecords: data/train, resize: bilinear, in_memory: false") {
    return writeDataSpec(dir, "[8, 8, 3]",
                         "  train: {" + train + "}\n  augment: {random_crop: " + crop + "}\n");
  };
  const ModelSpec scaled = loadModelSpec(spec("{size: [8, 8], shorter_side: [8, 16]}"));
  const Augmentation& augment = scaled.data.augment;
  CHECK(augment.scales());
  CHECK(augment.scale_lower == 8);
  CHECK(augment.scale_upper == 16);
  CHECK_FALSE(augment.boxes());
  CHECK(augmentationText(augment) == "random_crop 8x8 shorter_side [8, 16]");
  CHECK(scaled.data.train.own_sizes);
  CHECK(scaled.data.train.resize_shorter_side == 0);
  // Every node resizes what it draws with the same method.
  CHECK(dataRule(scaled) ==
        "batch_size 32, seed 0, shuffled, augmented: random_crop 8x8 shorter_side [8, 16], "
        "training images of their own sizes, bilinear");
  // Resized to one size, and read from other features: both in the rule too.
  CHECK(
      dataRule(loadModelSpec(spec("{size: [8, 8]}",
                                  "tfrecords: data/train, resize: {method: legacy_bilinear, size: "
                                  "[10, 12]}, image_feature: image/encoded, label_feature: y"))) ==
      "batch_size 32, seed 0, shuffled, augmented: random_crop 8x8, training images resized "
      "legacy_bilinear to 10x12, features 'image/encoded' and 'y'");
  // Resized to the input's size: as without a size.
  auto unaugmented = [&](const std::string& resize) {
    return dataRule(loadModelSpec(writeDataSpec(
        dir, "[8, 8, 3]", "  train: {tfrecords: data/train, resize: " + resize + "}\n")));
  };
  CHECK(unaugmented("{size: [8, 8]}") == unaugmented("bilinear"));
  CHECK(unaugmented("bilinear") ==
        "batch_size 32, seed 0, shuffled, training images resized bilinear");
  CHECK_FALSE(scaled.data.train.in_memory);
  CHECK(loadModelSpec(spec("{size: [8, 8], shorter_side: [9, 9]}")).data.augment.scale_upper == 9);

  const std::string path = (dir.path() / "spec.yaml").string();
  const std::pair<const char*, const char*> refused[] = {
      {"{shorter_side: [8, 16]}",
       ":6:26: data.augment.random_crop: expected a size, [height, width], the window to take of "
       "each image resized to a side in shorter_side, got none"},
      {"{size: [8, 8], shorter_side: [7, 16]}",
       ":6:56: data.augment.random_crop.shorter_side[0]: expected a side no shorter than the "
       "window's height and width [8, 8], which every image resized must hold, got 7"},
      {"{size: [8, 8], shorter_side: [16, 8]}",
       ":6:60: data.augment.random_crop.shorter_side[1]: expected an upper bound no less than "
       "the lower 16, got 8"},
      {"{size: [8, 8], shorter_side: [8, 70000]}",
       ":6:59: data.augment.random_crop.shorter_side[1]: expected a positive integer of at most "
       "65536, got 70000"},
      {"{size: [8, 8], shorter_side: 8}",
       ":6:55: data.augment.random_crop.shorter_side: expected [lower, upper], got 8"},
      {"{size: [8, 8], shorter_side: [8, 8.5]}",
       ":6:59: data.augment.random_crop.shorter_side[1]: expected a positive integer, got 8.5"},
      {"{size: [8, 8], area: [0.5, 1], shorter_side: [8, 16]}",
       ":6:71: data.augment.random_crop.shorter_side: expected either a box (area, "
       "aspect_ratio) or shorter_side, not both"},
      {"{size: [8, 8], padding: 2, shorter_side: [8, 16]}",
       ":6:50: data.augment.random_crop.padding: expected no padding with shorter_side: every "
       "image is resized to hold the window"},
  };
  for (const auto& [crop, message] : refused) {
    INFO(crop);
    CHECK(loadError(spec(crop)) == path + message);
  }
  // The training set: TFRecord images, a method to resize them with, left
  // in their files to be decoded again as each is gathered.
  const std::string crop = "{size: [8, 8], shorter_side: [8, 16]}";
  const std::pair<const char*, const char*> refused_sets[] = {
      {"images: data/images, labels: data/labels",
       ":5:10: data.train: expected tfrecords of PNG or JPEG images: IDX images are of one size, "
       "and data.augment.random_crop.shorter_side resizes each image from its own"},
      {"tfrecords: data/train, in_memory: false",
       ":5:10: data.train: expected a resize method, resize: bilinear or legacy_bilinear, for the "
       "side drawn for each training image (data.augment.random_crop.shorter_side)"},
      {"tfrecords: data/train, resize: bilinear",
       ":5:10: data.train: expected in_memory: false: each training image keeps its own size, "
       "decoded from its file as it is gathered, to be resized to the side drawn for it "
       "(data.augment.random_crop.shorter_side)"},
      {"tfrecords: data/train, resize: bilinear, in_memory: true",
       ":5:63: data.train.in_memory: expected in_memory: false: each training image keeps its "
       "own size, decoded from its file as it is gathered, to be resized to the side drawn for "
       "it (data.augment.random_crop.shorter_side)"},
      {"tfrecords: data/train, resize: {size: [10, 10]}, in_memory: false",
       ":5:49: data.train.resize.size: expected no size: each training image is resized from its "
       "own size to the side drawn for it (data.augment.random_crop.shorter_side)"},
  };
  for (const auto& [train, message] : refused_sets) {
    INFO(train);
    CHECK(loadError(spec(crop, train)) == path + message);
  }
}

TEST_CASE("standardize: per_image, the training and test sets' examples", "[model_spec]") {
  TempDir dir;
  dir.write("data/train", "x");
  const auto spec = [&](const std::string& value) {
    return writeDataSpec(dir, "[8]",
                         "  train: {tfrecords: data/train}\n  standardize: " + value + "\n");
  };
  const ModelSpec standardized = loadModelSpec(spec("per_image"));
  CHECK(standardized.data.standardize_per_image);
  CHECK(dataRule(standardized) == "batch_size 32, seed 0, shuffled, standardized per image");
  const std::string path = (dir.path() / "spec.yaml").string();
  CHECK(loadError(spec("global")) ==
        path + ":6:16: data.standardize: expected one of per_image, got 'global'");
  CHECK(loadError(writeDataSpec(dir, "[1]",
                                "  synthetic: {type: regression}\n  standardize: per_image\n",
                                /*regression=*/true)) ==
        path +
            ":7:16: data.standardize: only allowed with data.train (synthetic data are not "
            "images)");
}

TEST_CASE("shard_by_worker: each worker its own share of the training set", "[model_spec]") {
  TempDir dir;
  dir.write("data/train", "x");
  const auto spec = [&](const std::string& value) {
    return writeDataSpec(dir, "[8]",
                         "  train: {tfrecords: data/train}\n  shard_by_worker: " + value + "\n");
  };
  const ModelSpec sharded = loadModelSpec(spec("true"));
  CHECK(sharded.data.shard_by_worker);
  CHECK(dataRule(sharded) == "batch_size 32, seed 0, shuffled, sharded by worker");
  // The examples dealt out: a worker with another limit deals out others.
  CHECK(dataRule(loadModelSpec(writeDataSpec(
            dir, "[8]",
            "  train: {tfrecords: data/train, limit: 500}\n  shard_by_worker: true\n"))) ==
        "batch_size 32, seed 0, shuffled, sharded by worker, the first 500 training examples");
  CHECK_FALSE(loadModelSpec(spec("false")).data.shard_by_worker);
  CHECK_THAT(loadError(spec("2")), Catch::EndsWith("data.shard_by_worker: expected true or "
                                                   "false, got 2"));
}

TEST_CASE("shuffle_buffer: each example drawn from the next ones of the set", "[model_spec]") {
  TempDir dir;
  dir.write("data/train", "x");
  const auto spec = [&](const std::string& data) {
    return writeDataSpec(dir, "[8]", "  train: {tfrecords: data/train}\n" + data);
  };
  const ModelSpec buffered = loadModelSpec(spec("  shuffle_buffer: 10000\n"));
  CHECK(buffered.data.shuffle_buffer.size == 10000);
  // Every node must draw alike: the data rule a ps compares at hello.
  CHECK(dataRule(buffered) == "batch_size 32, seed 0, shuffled through a buffer of 10000");
  CHECK(loadModelSpec(spec("")).data.shuffle_buffer.size == 0);
  const std::string path = (dir.path() / "spec.yaml").string();
  CHECK(loadError(spec("  shuffle_buffer: 0\n")) ==
        path + ":6:19: data.shuffle_buffer: expected a positive integer, got 0");
  CHECK(loadError(spec("  shuffle: false\n  shuffle_buffer: 100\n")) ==
        path + ":7:19: data.shuffle_buffer: only allowed with shuffle: true");
}

TEST_CASE("interleave and shuffle_files: the files a shuffle buffer reads, and their order",
          "[model_spec]") {
  TempDir dir;
  dir.write("data/train", "x");
  dir.write("data/images", "x");
  dir.write("data/labels", "x");
  const auto spec = [&](const std::string& data) {
    return writeDataSpec(dir, "[8]", "  train: {tfrecords: data/train}\n" + data);
  };
  const ModelSpec read =
      loadModelSpec(spec("  shuffle_buffer: 1000\n  interleave: 8\n  shuffle_files: true\n"));
  CHECK(read.data.shuffle_buffer.size == 1000);
  CHECK(read.data.shuffle_buffer.interleave == 8);
  CHECK(read.data.shuffle_buffer.shuffle_files);
  CHECK(dataRule(read) ==
        "batch_size 32, seed 0, shuffled through a buffer of 1000 from 8 files at a time, the "
        "files shuffled every epoch");
  const ModelSpec plain = loadModelSpec(spec("  shuffle_buffer: 1000\n"));
  CHECK(plain.data.shuffle_buffer.interleave == 1);
  CHECK_FALSE(plain.data.shuffle_buffer.shuffle_files);
  CHECK(dataRule(loadModelSpec(spec("  shuffle_buffer: 10\n  shuffle_files: true\n"))) ==
        "batch_size 32, seed 0, shuffled through a buffer of 10, the files shuffled every epoch");

  const std::string path = (dir.path() / "spec.yaml").string();
  CHECK(loadError(spec("  interleave: 4\n")) ==
        path +
            ":6:15: data.interleave: only allowed with data.shuffle_buffer (without a buffer "
            "each epoch is a permutation of the whole set, whatever order its files are read "
            "in)");
  CHECK(loadError(spec("  shuffle_buffer: 10\n  interleave: 0\n")) ==
        path + ":7:15: data.interleave: expected a positive integer, got 0");
  CHECK(loadError(spec("  shuffle_buffer: 10\n  shuffle_files: 2\n")) ==
        path + ":7:18: data.shuffle_files: expected true or false, got 2");
  CHECK(loadError(writeDataSpec(dir, "[8]",
                                "  train: {images: data/images, labels: data/labels}\n"
                                "  shuffle_buffer: 10\n  shuffle_files: true\n")) ==
        path +
            ":7:18: data.shuffle_files: only allowed with a training set of TFRecord files "
            "(data.train's IDX images are one file)");
  CHECK(loadError(writeDataSpec(dir, "[1]",
                                "  synthetic: {type: regression}\n  shuffle_buffer: 10\n"
                                "  interleave: 2\n",
                                /*regression=*/true)) ==
        path +
            ":8:15: data.interleave: only allowed with a training set of TFRecord files "
            "(synthetic data are in no files)");
}

TEST_CASE("a bad value names file, line, column, field, expectation and value", "[model_spec]") {
  TempDir dir;
  const std::string path = dir.write("cnn.yaml",
                                     "input: [28, 28, 1]\n"
                                     "layers:\n"
                                     "  - {type: conv2d, filters: 8, kernel: 3}\n"
                                     "  - {type: conv2d, filters: 8, kernel: -3}\n");
  CHECK(loadError(path) == path + ":4:40: layers[1].kernel: expected a positive integer, got -3");
}

TEST_CASE("an unknown field suggests the closest known one", "[model_spec]") {
  TempDir dir;
  const std::string path = dir.write("spec.yaml",
                                     "input: [4]\n"
                                     "layers:\n"
                                     "  - {type: dense, units: 3}\n"
                                     "  - {type: dense, units: 3}\n"
                                     "  - type: dense\n"
                                     "    unit: 10\n");
  CHECK(loadError(path) == path + ":6:5: layers[2]: unknown field 'unit' (did you mean 'units'?)");
}

TEST_CASE("an unknown field with no near match lists the known ones", "[model_spec]") {
  TempDir dir;
  std::string path = dir.write("a.yaml", kMinimal + "learning_rate: 0.1\n");
  CHECK(loadError(path) ==
        path +
            ":9:1: unknown field 'learning_rate' (the fields of a model spec are name, seed, "
            "input, layers, stages, loss, optimizer, moving_average, data, training, checkpoint, "
            "init_from)");

  // A field of another layer type is unknown here.
  path = dir.write("b.yaml",
                   "input: [4, 4, 1]\n"
                   "layers:\n"
                   "  - {type: max_pool, size: 2, units: 3}\n");
  CHECK(loadError(path) == path +
                               ":3:31: layers[0]: unknown field 'units' (the fields of a max_pool "
                               "layer are type, name, size, stride, padding, device)");

  // And an option of another optimizer.
  path = dir.write("c.yaml",
                   "input: [4]\n"
                   "layers: [{type: dense, units: 3}]\n"
                   "optimizer:\n"
                   "  type: adam\n"
                   "  learning_rate: 0.1\n"
                   "  nesterov: true\n");
  CHECK(loadError(path) ==
        path +
            ":6:3: optimizer: unknown field 'nesterov' (the fields of the adam optimizer are "
            "type, learning_rate, weight_decay, clip_global_norm, beta1, beta2, epsilon)");

  // A misspelt "type" is reported as such, not as a missing type.
  path = dir.write("d.yaml",
                   "input: [4]\n"
                   "layers: [{tpye: dense, units: 3}]\n");
  CHECK(loadError(path) == path + ":2:11: layers[0]: unknown field 'tpye' (did you mean 'type'?)");
}

TEST_CASE("a value outside its choices lists them", "[model_spec]") {
  TempDir dir;
  std::string text = kMinimal;
  text.replace(text.find("sgd"), 3, "adamw");
  std::string path = dir.write("opt.yaml", text);
  CHECK(loadError(path) == path +
                               ":4:19: optimizer.type: expected one of sgd, momentum, adagrad, "
                               "adam, rmsprop, got 'adamw'");

  path = dir.write("act.yaml",
                   "input: [4]\n"
                   "layers: [{type: dense, units: 3, activation: Relu}]\n");
  CHECK(loadError(path) == path +
                               ":2:46: layers[0].activation: expected one of relu, tanh, sigmoid, "
                               "linear, got 'Relu'");

  path = dir.write("type.yaml",
                   "input: [4]\n"
                   "layers: [{type: lstm, units: 3}]\n");
  CHECK(loadError(path) == path +
                               ":2:17: layers[0].type: expected one of dense, conv2d, max_pool, "
                               "avg_pool, flatten, dropout, activation, got 'lstm'");

  path = dir.write("init.yaml",
                   "input: [4]\n"
                   "layers: [{type: dense, units: 3, kernel_initializer: uniform}]\n");
  const std::string expected =
      "expected one of glorot_uniform, glorot_normal, he_uniform, he_normal, zeros, {constant: "
      "<number>}, {truncated_normal: <stddev>} or {random_normal: <stddev>}";
  CHECK(loadError(path) ==
        path + ":2:54: layers[0].kernel_initializer: " + expected + ", got 'uniform'");

  // TensorFlow 1's truncated and plain normals of a given deviation.
  const std::string layer = "{type: dense, units: 3}";
  const auto initializer = [&](const std::string& value) {
    return loadVariant(dir, layer, "{type: dense, units: 3, kernel_initializer: " + value + "}")
        .layers[0]
        .kernel_initializer;
  };
  InitializerSpec init = initializer("{truncated_normal: 0.05}");
  CHECK(init.kind == InitializerSpec::Kind::TruncatedNormal);
  CHECK(init.value == 0.05f);
  init = initializer("{random_normal: 0.1}");
  CHECK(init.kind == InitializerSpec::Kind::RandomNormal);
  CHECK(init.value == 0.1f);
  const auto error = [&](const std::string& value) {
    return errorWith(dir, layer, "{type: dense, units: 3, kernel_initializer: " + value + "}");
  };
  CHECK_THAT(error("{truncated_normal: 0}"),
             Catch::EndsWith("layers[0].kernel_initializer.truncated_normal: expected a positive "
                             "standard deviation of at most 1e36, got 0"));
  CHECK_THAT(error("{random_normal: 3e38}"),
             Catch::EndsWith("layers[0].kernel_initializer.random_normal: expected a positive "
                             "standard deviation of at most 1e36, got 3e38"));
  CHECK_THAT(error("{constant: 1, random_normal: 0.1}"),
             Catch::EndsWith("layers[0].kernel_initializer: expected exactly one of constant, "
                             "truncated_normal, random_normal, got 2"));
  CHECK_THAT(error("{}"), Catch::EndsWith("layers[0].kernel_initializer: expected exactly one of "
                                          "constant, truncated_normal, random_normal, got 0"));
  CHECK_THAT(error("{uniform: 1}"),
             Catch::Contains("(the fields of an initializer are constant, truncated_normal, "
                             "random_normal)"));
}

TEST_CASE("YAML syntax errors carry their position", "[model_spec]") {
  TempDir dir;
  const std::string path = dir.write("bad.yaml",
                                     "input: [4]\n"
                                     "layers:\n"
                                     "  - {type: dense, units: 3\n"
                                     "optimizer: {type: sgd}\n");
  const std::string message = loadError(path);
  INFO(message);
  CHECK(message.rfind(path + ":4:", 0) == 0);
  CHECK(message.find("invalid YAML: ") != std::string::npos);
}

TEST_CASE("a tfrecords pattern outside quotes is invalid YAML, and the error says to quote it",
          "[model_spec]") {
  TempDir dir;
  const std::string hint = "(a tfrecords pattern must be quoted";
  auto errorOf = [&](const std::string& data) {
    return loadError(dir.write("p.yaml",
                               "input: [4]\nlayers: [{type: dense, units: 3}]\n"
                               "data:\n" +
                                   data + "optimizer: {type: sgd}\n"));
  };
  CHECK_THAT(errorOf("  train: {tfrecords: *.tfrecord}\n"),
             Catch::Contains("p.yaml:4:22: invalid YAML: ") && Catch::Contains(hint));
  CHECK_THAT(errorOf("  train:\n    tfrecords: *.tfrecord\n"), Catch::Contains(hint));
  CHECK_THAT(errorOf("  train: {tfrecords: train-0000[01]-of-00002.tfrecord}\n"),
             Catch::Contains(hint));
  CHECK_THAT(errorOf("  train:\n    tfrecords:\n      - a.tfrecord\n      - *.tfrecord\n"),
             Catch::Contains("p.yaml:7:") && Catch::Contains(hint));
  CHECK_THAT(errorOf("  train: {tfrecords: [a.tfrecord, *.tfrecord]}\n"), Catch::Contains(hint));
  // Another fault beside a valid pattern, or on the line of a plain path:
  // no word of quoting.
  CHECK_THAT(errorOf("  train: {tfrecords: /d/train-*.tfrecord}\n  test: {a: [1}\n"),
             Catch::Contains("invalid YAML") && !Catch::Contains(hint));
  CHECK_THAT(errorOf("  train: {tfrecords: /d/a.tfrecord, resize: {size: [28, 28]}}}\n"),
             Catch::Contains("invalid YAML") && !Catch::Contains(hint));
  CHECK_THAT(errorOf("  train: {tfrecords: [\"/d/a-*\", \"/d/b-?\"]]}\n"),
             Catch::Contains("invalid YAML") && !Catch::Contains(hint));
  // Quoted, it is a pattern (that matches nothing here).
  CHECK_THAT(errorOf("  train: {tfrecords: \"*.tfrecord\"}\n"), !Catch::Contains("invalid YAML"));
}

TEST_CASE("a missing, empty or non-mapping spec file", "[model_spec]") {
  TempDir dir;
  const std::string missing = (dir.path() / "nope.yaml").string();
  CHECK(loadError(missing) == missing + ": cannot read the model spec: No such file or directory");
  CHECK(loadError(dir.path().string()) ==
        dir.path().string() + ": cannot read the model spec: it is a directory");
  const std::string empty = dir.write("empty.yaml", "");
  CHECK(loadError(empty) == empty + ": expected a mapping of fields, got an empty value");
  const std::string list = dir.write("list.yaml", "- 1\n- 2\n");
  CHECK(loadError(list) == list + ":1:1: expected a mapping of fields, got a list of 2 items");
  const std::string huge = dir.write("huge.yaml", std::string(2 << 20, '#'));
  CHECK(loadError(huge) ==
        huge + ": expected a model spec of at most 1048576 bytes, got 2097152 bytes");
  // A FIFO would block the read and a device would never end.
  const std::string fifo = (dir.path() / "fifo.yaml").string();
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(loadError(fifo) == fifo + ": cannot read the model spec: expected a regular file");
  CHECK(loadError("/dev/zero") == "/dev/zero: cannot read the model spec: expected a regular file");
  // A regular file whose read fails is no empty spec (its first page is not mapped).
  CHECK(loadError("/proc/self/mem") ==
        "/proc/self/mem: cannot read the model spec: Input/output error");
  const std::string two = dir.write("two.yaml", "name: a\n---\nname: b\n");
  CHECK(loadError(two) == two + ":3:1: expected one YAML document: another starts here");
  // A stray ',' at the top level: yaml-cpp reads it as endless empty
  // documents, which once filled memory.
  const std::string comma = dir.write("comma.yaml", ",\n");
  CHECK(loadError(comma) == comma + ":1:1: invalid YAML: cannot read on from ','");
  const std::string late_comma = dir.write("late_comma.yaml", kMinimal + "---\n,\n");
  CHECK_THAT(loadError(late_comma), Catch::Contains("invalid YAML: cannot read on from ','"));
  // Control characters and bytes that are not UTF-8 (a file damaged in
  // transit): yaml-cpp would read some as it likes (a NUL ends a scalar).
  const std::string nul = dir.write("nul.yaml", std::string("name: a\0b\n", 10));
  CHECK(loadError(nul) == nul +
                              ":1:8: invalid YAML: a control character '\\x00': expected UTF-8 "
                              "text with no control characters but tab and line breaks");
  const std::string latin1 = dir.write("latin1.yaml", "name: a\n# caf\xe9\n");
  CHECK_THAT(loadError(latin1),
             Catch::StartsWith(latin1 + ":2:6: invalid YAML: a byte that is not UTF-8 '\\xe9'"));
  const std::string escape = dir.write("escape.yaml", "name: \x1b[31m\n");
  CHECK_THAT(loadError(escape), Catch::Contains(":1:7: invalid YAML: a control character '\\x1b'"));
  const std::string csi = dir.write("csi.yaml",
                                    "name: \xc2\x9b"
                                    "31m\n");  // C1: a terminal's CSI
  CHECK_THAT(loadError(csi),
             Catch::Contains(":1:7: invalid YAML: a control character '\\xc2\\x9b'"));
  // A spec with no `name` is named by its file, in the characters a name holds.
  const std::string odd = dir.write("my model\x1b.yaml", kMinimal);
  CHECK(loadModelSpec(odd).name == "my_model_");
  // Nor one that names a directory, which a written `name` may not either.
  CHECK(loadModelSpec(dir.write("..yaml", kMinimal)).name == "model");
  CHECK(loadModelSpec(dir.write("...yaml", kMinimal)).name == "model");
  // Nor does its name in a message: no escape sequence, no forged line.
  const std::string forged = dir.write("a\x1b[31m\nb.yaml", kMinimal + "seed: -7\n");
  CHECK_THAT(loadError(forged), Catch::EndsWith("a\\x1b[31m\\x0ab.yaml:9:7: seed: expected a "
                                                "non-negative integer, got -7"));
  const std::string text =
      dir.write("text.yaml", kMinimal + "# tab\there, CRLF\r\n# caf\xc3\xa9, NEL\xc2\x85\n");
  CHECK_NOTHROW(loadModelSpec(text));
  // A tag says what a value is: `!!null 3` is no count of units.
  auto withUnits = [](const std::string& units) {
    std::string text = kMinimal;
    return text.replace(text.find("units: 3"), 8, "units: " + units);
  };
  const std::string tagged = dir.write("tagged.yaml", withUnits("!!null 3"));
  CHECK_THAT(loadError(tagged),
             Catch::Contains("expected a positive integer, got '3' tagged '!!null'"));
  CHECK_THAT(loadError(dir.write("custom.yaml", withUnits("!units 3"))),
             Catch::Contains("got '3' tagged '!units'"));
  CHECK_NOTHROW(loadModelSpec(dir.write("int_tagged.yaml", withUnits("!!int 3"))));
  // So does a tag on text: `!!null sgd` is no optimizer's name, `!!int 0.1` no integer.
  CHECK_THAT(
      errorWith(dir, "type: sgd", "type: !!null sgd"),
      Catch::EndsWith("optimizer.type: expected one of sgd, momentum, adagrad, adam, rmsprop, got "
                      "'sgd' tagged '!!null'"));
  CHECK_THAT(errorWith(dir, "{type: dense, units: 3}", "{type: !custom dense, units: 3}"),
             Catch::Contains("got 'dense' tagged '!custom'"));
  CHECK_THAT(errorWith(dir, "{type: dense, units: 3}", "{type: dense, name: !!float d, units: 3}"),
             Catch::Contains("layers[0].name: expected a name of letters, digits, '_', '-' and "
                             "'.', got 'd' tagged '!!float'"));
  CHECK_THAT(errorWith(dir, "units: 3}", "units: 3, activation: !!bool relu}"),
             Catch::Contains("got 'relu' tagged '!!bool'"));
  CHECK_THAT(errorWith(dir, "learning_rate: 0.1", "learning_rate: !!int 0.1"),
             Catch::Contains("got '0.1' tagged '!!int'"));
  CHECK(loadVariant(dir, "learning_rate: 0.1", "learning_rate: !!float 0.1")
            .learning_rate.initial == 0.1f);
  // And a tag on a list or a mapping: `!!bool [4]` is no input shape.
  CHECK_THAT(errorWith(dir, "input: [4]", "input: !!bool [4]"),
             Catch::EndsWith("input: expected [features] or [height, width, channels], got a "
                             "list tagged '!!bool'"));
  CHECK_THAT(
      errorWith(dir, "  - {type: dense, units: 3}", "  - !!python/tuple {type: dense, units: 3}"),
      Catch::EndsWith("layers[0]: expected a mapping of fields, got a mapping tagged "
                      "'!!python/tuple'"));
  CHECK_THAT(errorWith(dir, "layers:\n", "layers: !local\n"),
             Catch::Contains("layers: expected a list of layers, got a list tagged '!local'"));
  CHECK(loadVariant(dir, "input: [4]", "input: !!seq [4]").input == Shape{4});
  CHECK(loadVariant(dir, "  - {type: dense, units: 3}", "  - !!map {type: dense, units: 3}")
            .layers[0]
            .units == 3);
  // A rate within [0, 1) as written that a float rounds to 1 says so.
  CHECK_THAT(errorWith(dir, "  - {type: dense, units: 3}\n",
                       "  - {type: dense, units: 3}\n  - {type: dropout, rate: 0.99999999}\n"),
             Catch::EndsWith("layers[1].rate: expected a number in [0, 1), got 0.99999999, which "
                             "is 1 as a 32-bit float"));
  CHECK_THAT(errorWith(dir, "units: 3}", "units: 3, use_bias: false, bias_initializer: zeros}"),
             Catch::EndsWith("layers[0].bias_initializer: only meaningful with use_bias: true "
                             "(this layer has no bias)"));
  // Nor does a frozen layer take a weight decay. A model with nothing to
  // train is said to be so (a run of it says so too).
  CHECK_THAT(errorWith(dir, "  - {type: dense, units: 3}\n",
                       "  - {type: dense, units: 3}\n  - {type: dense, units: 3, trainable: false, "
                       "weight_decay: 0.5}\n"),
             Catch::EndsWith("layers[1].weight_decay: only meaningful on a layer that trains (this "
                             "one is trainable: false)"));
  for (const std::string nothing :
       {"  - {type: dense, units: 3, trainable: false}\n", "  - {type: dropout, rate: 0.1}\n"})
    CHECK(trainsNothing(loadVariant(dir, "  - {type: dense, units: 3}\n", nothing)));
  CHECK_FALSE(trainsNothing(loadModelSpec(dir.write("trains.yaml", kMinimal))));
  CHECK(loadVariant(dir, "type: sgd", "type: !!str sgd").optimizer.kind ==
        OptimizerSpec::Kind::Sgd);
  const std::string mac = dir.write("mac.yaml", "name: a\rinput: [4]\r");
  CHECK(loadError(mac) == mac +
                              ":1:8: invalid YAML: a carriage return ('\\r') with no line feed "
                              "after it: expected line endings of LF or CRLF");
  const std::string list_comma = dir.write("list_comma.yaml", "- a\n,\n");
  CHECK_THAT(loadError(list_comma), Catch::Contains("invalid YAML: cannot read on from ','"));
  // A text of many brackets is read in time (the hint for an unquoted IPv6
  // address once looked at every pair).
  const std::string brackets =
      dir.write("brackets.yaml", "# " + std::string(200000, '[') + ":]\nname: ]\n");
  CHECK_THAT(loadError(brackets), Catch::Contains("invalid YAML"));
  // Markers that start or end the one document are fine.
  const std::string marked = dir.write("marked.yaml", "---\n" + kMinimal + "...\n---\n");
  CHECK_NOTHROW(loadModelSpec(marked));
}

TEST_CASE("missing, empty and duplicate fields", "[model_spec]") {
  TempDir dir;
  std::string path = dir.write("a.yaml",
                               "input: [4]\n"
                               "layers:\n"
                               "  - type: dense\n"
                               "    activation: relu\n");
  CHECK(loadError(path) == path + ":3:5: layers[0]: missing field 'units'");

  path = dir.write("b.yaml",
                   "input: [4]\n"
                   "layers:\n"
                   "  - type: dense\n"
                   "    units:\n"
                   "    activation: relu\n");
  CHECK(loadError(path) ==
        path + ":4:5: layers[0].units: expected a positive integer, got an empty value");

  path = dir.write("c.yaml", "input: [4]\nlayers: [{type: dense, units: 3}]\ninput: [5]\n");
  CHECK(loadError(path) == path + ":3:1: duplicate field 'input' (first given at line 1)");

  // A value reached through an alias is named where the alias is used, and
  // where its anchor wrote it.
  auto replaced = [](std::string text, const std::string& what, const std::string& by) {
    return text.replace(text.find(what), what.size(), by);
  };
  path = dir.write("alias.yaml", replaced(replaced(kMinimal, "input: [4]", "input: &n [4]"),
                                          "training: {max_steps: 10}",
                                          "training:\n  max_steps: 2\n  devices: *n"));
  CHECK(loadError(path) ==
        path +
            ":10:3: training.devices[0]: expected a device: cpu, cpu:N or cuda:N "
            "(N from 0 to 1023, no leading zeros), got 4 (through an alias: the "
            "value is written at line 1, column 12)");
  path = dir.write("alias_map.yaml", replaced(kMinimal, "  - {type: dense, units: 3}\n",
                                              "  - &b {type: dense, units: 3, activation: relu}\n"
                                              "  - {type: dense, units: 2, activation: *b}\n"));
  CHECK_THAT(loadError(path),
             Catch::EndsWith(":4:29: layers[1].activation: expected one of relu, tanh, sigmoid, "
                             "linear, got a mapping (through an alias: the value is written at "
                             "line 3, column 5)"));

  // A field name reached through an alias too: an unknown one, and one
  // given twice in the anchor's mapping, whose first is at the anchor.
  path = dir.write("alias_key.yaml", replaced(replaced(kMinimal, "optimizer: {", "optimizer: &o {"),
                                              "training: {max_steps: 10}", "training: *o"));
  CHECK_THAT(loadError(path),
             Catch::Contains(":8:1: training: unknown field 'type' (the fields of the training ") &&
                 Catch::EndsWith("gradient_push) (through an alias: the field is written at "
                                 "line 4, column 16)"));
  path = dir.write("alias_twice.yaml",
                   replaced(replaced(kMinimal, "optimizer: {type: sgd, learning_rate: 0.1}",
                                     "training: &t {max_steps: 10,\n  max_steps: 2}"),
                            "training: {max_steps: 10}", "optimizer: *t"));
  CHECK_THAT(loadError(path), Catch::Contains("optimizer: duplicate field 'max_steps' (first "
                                              "given at line 4)"));
  // YAML's merge key is no field traind reads, and says so.
  path = dir.write("merge.yaml", replaced(kMinimal, "  - {type: dense, units: 3}\n",
                                          "  - &b {type: dense, units: 3}\n"
                                          "  - {<<: *b, units: 2}\n"));
  CHECK_THAT(loadError(path),
             Catch::Contains("layers[1]: unknown field '<<'") &&
                 Catch::EndsWith("; YAML merge keys are not read: write the fields out"));

  path = dir.write("alias_item.yaml", replaced(kMinimal, "training: {max_steps: 10}",
                                               "training: {max_steps: 10, devices: [&c "
                                               "cpu:0, *c]}"));
  CHECK_THAT(loadError(path),
             Catch::EndsWith("training.devices[1]: device cpu:0 is listed twice (through an alias: "
                             "the value is written at line 8, column 37)"));

  // So is an item of a block list that is an alias, at its own `-`: it was
  // named at the item before it.
  path = dir.write("alias_block_item.yaml",
                   "input: [1]\n"
                   "layers:\n"
                   "  - &L {type: dense, name: output, units: 1}\n"
                   "  - {type: dense, name: h2, units: 4}\n"
                   "  # a comment\n"
                   "\n"
                   "  - *L\n");
  CHECK_THAT(loadError(path),
             Catch::StartsWith(path + ":7:3: layers[2]: duplicate layer name 'output'") &&
                 Catch::EndsWith("(through an alias: the value is written at line 3, column 5)"));

  // An empty item (a bare `-`) is named at its own `-`, which yaml-cpp does
  // not give: not at the item before it, nor at the one after.
  path = dir.write("empty_item.yaml",
                   "input: [4]\n"
                   "layers:\n"
                   "  - type: dense\n"
                   "    units: 3\n"
                   "  # a comment\n"
                   "\n"
                   "  -\n"
                   "  - {type: dense, units: 2}\n");
  CHECK(loadError(path) ==
        path + ":7:3: layers[1]: expected a mapping of fields, got an empty value");
  path = dir.write("empty_items.yaml",
                   "input: [4]\nlayers:\n- {type: dense, units: 3}\n-   # none\n-\n");
  CHECK_THAT(loadError(path), Catch::StartsWith(path + ":4:1: layers[1]: expected a mapping"));
  path = dir.write("empty_last.yaml", "input: [4]\nlayers:\n  - {type: dense, units: 3}\n  -\n");
  CHECK_THAT(loadError(path), Catch::StartsWith(path + ":4:3: layers[1]: expected a mapping"));

  path = dir.write("empty_after_alias.yaml",
                   "input: [4]\nlayers:\n  - &d {type: dense, units: 3}\n  - *d\n  -\n");
  CHECK_THAT(loadError(path), Catch::StartsWith(path + ":5:3: layers[2]: expected a mapping"));
  path = dir.write("empty_anchored.yaml",
                   "input: [4]\nlayers: &l\n  - {type: dense, units: 3}\n  -\n");
  CHECK_THAT(loadError(path), Catch::StartsWith(path + ":4:3: layers[1]: expected a mapping"));

  // An empty key has no place of its own: it is named at its value's.
  path = dir.write("null_key.yaml", "input: [4]\nlayers: [{type: dense, units: 3}]\n~: 1\n");
  CHECK(loadError(path) == path + ":3:4: expected a field name, got an empty value");

  path = dir.write("d.yaml", "layers: [{type: dense, units: 3}]\n");
  CHECK(loadError(path) == path + ":1:1: missing field 'input'");

  path = dir.write("e.yaml", "input: [4]\nlayers: [{units: 3}]\n");
  CHECK(loadError(path) == path +
                               ":2:10: layers[0]: missing field 'type' (one of dense, conv2d, "
                               "max_pool, avg_pool, flatten, dropout, activation)");

  path = dir.write("f.yaml", "input: [4]\nlayers: [{type: dense, units: \"3\"}]\n");
  CHECK(loadError(path) ==
        path + ":2:31: layers[0].units: expected a positive integer, got the quoted string '3'");

  path = dir.write("g.yaml", "input: [4]\nlayers: [{type: dense, units: 2.5}]\n");
  CHECK(loadError(path) == path + ":2:31: layers[0].units: expected a positive integer, got 2.5");

  path =
      dir.write("h.yaml", "input: [4]\nlayers: [{type: conv2d, filters: 1, kernel: [3, 3, 3]}]\n");
  CHECK(loadError(path) == path +
                               ":2:45: layers[0].kernel: expected a positive integer or [height, "
                               "width], got a list of 3 items");

  path = dir.write("i.yaml", "input: [4]\nlayers: [{type: dense, units: 3000000000}]\n");
  CHECK(loadError(path) == path +
                               ":2:31: layers[0].units: expected a positive integer of at most "
                               "2147483647, got 3000000000");

  // Past what 64 bits hold: too large, not a word.
  path = dir.write("j.yaml",
                   "seed: 99999999999999999999\ninput: [4]\nlayers: [{type: dense, "
                   "units: 2}]\n");
  CHECK(loadError(path) == path +
                               ":1:7: seed: expected a non-negative integer of at most "
                               "9223372036854775807, got 99999999999999999999");
}

TEST_CASE("a runaway field name is cut short in the message", "[model_spec]") {
  TempDir dir;
  const std::string path = dir.write("long.yaml", kMinimal + std::string(1000, 'x') + ": 1\n");
  CHECK(loadError(path) == path + ":9:1: unknown field '" + std::string(57, 'x') +
                               "...' (the fields of a model spec are name, seed, input, layers, "
                               "stages, loss, optimizer, moving_average, data, training, "
                               "checkpoint, init_from)");
}

TEST_CASE("duplicate layer names, explicit or default", "[model_spec]") {
  TempDir dir;
  std::string path = dir.write("a.yaml",
                               "input: [4]\n"
                               "layers:\n"
                               "  - {type: dense, name: hidden, units: 3}\n"
                               "  - {type: dense, name: hidden, units: 3}\n");
  CHECK(loadError(path) ==
        path + ":4:5: layers[1]: duplicate layer name 'hidden' (layers[0] at line 3 has it too)");

  path = dir.write("b.yaml",
                   "input: [4]\n"
                   "layers:\n"
                   "  - {type: dense, name: dense_2, units: 3}\n"
                   "  - {type: dense, units: 3}\n");
  CHECK(loadError(path) ==
        path + ":4:5: layers[1]: duplicate layer name 'dense_2' (layers[0] at line 3 has it too)");

  path = dir.write("c.yaml", "input: [4]\nlayers: [{type: dense, name: conv/1, units: 3}]\n");
  CHECK(loadError(path) == path +
                               ":2:30: layers[0].name: expected a name of letters, digits, '_', "
                               "'-' and '.', got 'conv/1'");
  // A control character (a YAML escape: raw, the file is refused as it
  // loads) reaches the message escaped, not raw; well-formed UTF-8 as it is.
  path = dir.write("d.yaml",
                   "input: [4]\nlayers: [{type: dense, name: \"h\xc3\xa9\\x1b\", units: 3}]\n");
  CHECK(loadError(path) == path +
                               ":2:30: layers[0].name: expected a name of letters, digits, '_', "
                               "'-' and '.', got the quoted string 'h\xc3\xa9\\x1b'");
}

TEST_CASE("a path a shell would expand is refused, unless it names what exists", "[model_spec]") {
  // `~/ckpt` made a directory named '~' beside the spec, and `$HOME/ckpt`
  // one named '$HOME'.
  TempDir dir;
  const std::string path = (dir.path() / "variant.yaml").string();
  const auto checkpointDir = [&](const std::string& written) {
    return errorWith(dir, "training: {max_steps: 10}\n",
                     "training: {max_steps: 10}\ncheckpoint: {dir: " + written + "}\n");
  };
  CHECK(checkpointDir("~/ckpt") ==
        path +
            ":9:19: checkpoint.dir: expected a path with the home directory written out "
            "(traind does not expand '~', as a shell does), got '~/ckpt'");
  for (const std::string written : {"$HOME/ckpt", "\"/srv/${JOB}/ckpt\"", "/srv/$_x"})
    CHECK_THAT(checkpointDir(written),
               Catch::Contains("checkpoint.dir: expected a path without environment variables "
                               "(traind does not expand '$NAME', as a shell does)"));
  CHECK_THAT(errorWith(dir, "max_steps: 10", "max_steps: 10, summary_dir: ~/summaries"),
             Catch::Contains("training.summary_dir: expected a path with the home directory"));
  // A dollar that names no variable, and a file that has such a name, are paths.
  CHECK(loadVariant(dir, "training: {max_steps: 10}\n",
                    "training: {max_steps: 10}\ncheckpoint: {dir: ckpt$1}\n")
            .checkpoint.dir == (dir.path() / "ckpt$1").string());
  std::filesystem::create_directories(dir.path() / "~" / "ckpt");
  CHECK(loadVariant(dir, "training: {max_steps: 10}\n",
                    "training: {max_steps: 10}\ncheckpoint: {dir: ~/ckpt}\n")
            .checkpoint.dir == (dir.path() / "~" / "ckpt").string());
}

TEST_CASE("a path holding a NUL is refused where the spec gives it", "[model_spec]") {
  // A quoted "\0" would end the path where the system reads it: the run
  // trained on another file, or made the directory named before it.
  TempDir dir;
  const std::string path = (dir.path() / "variant.yaml").string();
  const std::string cut = "\"" + (dir.path() / "made").string() + "\\0/rest\"";
  const std::string shown = "the quoted string '" + (dir.path() / "made").string() + "\\x00/rest'";
  CHECK(errorWith(dir, "training: {max_steps: 10}\n",
                  "training: {max_steps: 10}\ncheckpoint: {dir: " + cut + "}\n") ==
        path + ":9:19: checkpoint.dir: expected a path without a NUL character, got " + shown);
  CHECK(errorWith(dir, "max_steps: 10", "max_steps: 10, summary_dir: " + cut) ==
        path + ":8:40: training.summary_dir: expected a path without a NUL character, got " +
            shown);
  CHECK(errorWith(dir, "training: {max_steps: 10}\n",
                  "training: {max_steps: 10}\ninit_from: {checkpoint: " + cut + "}\n") ==
        path + ":9:25: init_from.checkpoint: expected a path without a NUL character, got " +
            shown);
  CHECK(errorWith(dir, "synthetic: {type: regression}",
                  "train: {images: " + cut + ", labels: x}") ==
        path + ":6:19: data.train.images: expected a path without a NUL character, got " + shown);
  CHECK_FALSE(std::filesystem::exists(dir.path() / "made"));
}

TEST_CASE("range checks that need no shapes", "[model_spec]") {
  TempDir dir;
  const std::string path = (dir.path() / "variant.yaml").string();
  CHECK(errorWith(dir, "{type: dense, units: 3}", "{type: dropout, rate: 1}") ==
        path + ":3:27: layers[0].rate: expected a number in [0, 1), got 1");
  CHECK(errorWith(dir, "batch_size: 8", "batch_size: 0") ==
        path + ":7:15: data.batch_size: expected a positive integer, got 0");
  CHECK(errorWith(dir, "learning_rate: 0.1", "learning_rate: -0.1") ==
        path +
            ":4:39: optimizer.learning_rate: expected a positive number or a schedule {initial: "
            "..., decay: ...}, got -0.1");
  CHECK(errorWith(dir, "type: sgd", "type: adam, beta1: 1.0") ==
        path + ":4:32: optimizer.beta1: expected a number in [0, 1), got 1.0");
  CHECK(errorWith(dir, "type: sgd", "type: rmsprop, rho: 1") ==
        path + ":4:33: optimizer.rho: expected a number in [0, 1), got 1");
  CHECK(errorWith(dir, "type: sgd", "type: rmsprop, initial_rms: -1") ==
        path + ":4:41: optimizer.initial_rms: expected a non-negative number, got -1");
  CHECK(errorWith(dir, "type: sgd", "type: rmsprop, epsilon: 0") ==
        path + ":4:37: optimizer.epsilon: expected a positive number, got 0");
  CHECK(errorWith(dir, "type: sgd", "type: sgd, weight_decay: -1") ==
        path + ":4:38: optimizer.weight_decay: expected a non-negative number, got -1");
  CHECK(errorWith(dir, "learning_rate: 0.1", "learning_rate: {initial: 0.1, decay: exponential}") ==
        path +
            ":4:39: optimizer.learning_rate: missing field 'decay_steps' (required with decay: "
            "exponential)");
  CHECK(errorWith(dir, "learning_rate: 0.1", "learning_rate: {initial: 0.1, decay_rate: 0.5}") ==
        path +
            ":4:66: optimizer.learning_rate.decay_rate: only meaningful with decay: exponential "
            "or inverse_time");
  CHECK(errorWith(dir, "training: {max_steps: 10}", "training: {max_steps: 10, epochs: 2}") ==
        path + ":8:23: training.max_steps: expected either epochs or max_steps, got both");
  CHECK(errorWith(dir, "training: {max_steps: 10}", "training: {log_every: 10}") ==
        path + ":8:11: training: expected epochs or max_steps, got neither");
  CHECK(errorWith(dir, "training: {max_steps: 10}", "training: {max_steps: 4503599627370497}") ==
        path +
            ":8:23: training.max_steps: expected a positive integer of at most "
            "4503599627370496, got 4503599627370497");
  CHECK(errorWith(dir, "training: {max_steps: 10}", "training: {epochs: 1000001}") ==
        path +
            ":8:20: training.epochs: expected a positive integer of at most 1000000, got 1000001");
  CHECK_THAT(errorWith(dir, "units: 3}",
                       "units: [" + std::string(3000, '[') + std::string(3000, ']') + "]}"),
             Catch::Contains("invalid YAML: nested more than 499 levels deep"));
  CHECK_THAT(errorWith(dir, "units: 3}", "units: !!str 3}"),
             Catch::EndsWith("layers[0].units: expected a positive integer, got the string '3'"));
  CHECK(loadVariant(dir, "units: 3}", "units: +03}").layers[0].units == 3);
  CHECK_THAT(errorWith(dir, "{type: regression}", "{type: regression, points: 100000001}"),
             Catch::EndsWith("data.synthetic.points: expected an integer from 5 to 100000000, got "
                             "100000001"));
  CHECK(errorWith(dir, "training: {max_steps: 10}",
                  "training: {max_steps: 10}\ncheckpoint: {dir: x, keep: 0}") ==
        path + ":9:28: checkpoint.keep: expected a positive integer, got 0");
  CHECK(errorWith(dir, "input: [4]", "input: [4, 4]") ==
        path +
            ":1:8: input: expected [features] or [height, width, channels], got a list of 2 items");
  CHECK(errorWith(dir, "input: [4]", "input: [4, 0, 1]") ==
        path + ":1:12: input[1]: expected a positive integer, got 0");
  CHECK(errorWith(dir, "{type: regression}", "{type: regression, x_min: 1, x_max: 1}") ==
        path +
            ":6:50: data.synthetic.x_max: expected x_max greater than x_min, got x_min = 1 and "
            "x_max = 1");
  // Targets x^2 + noise and their squared errors must be finite floats.
  CHECK(errorWith(dir, "{type: regression}", "{type: regression, x_min: -1e19}") ==
        path + ":6:40: data.synthetic.x_min: expected a number from -1e6 to 1e6, got -1e19");
  CHECK(errorWith(dir, "{type: regression}", "{type: regression, noise_stddev: 1e38}") ==
        path +
            ":6:47: data.synthetic.noise_stddev: expected a non-negative number up to 1e6, got "
            "1e38");
  CHECK(errorWith(dir, "  synthetic: {type: regression}\n",
                  "  synthetic: {type: regression}\n  train: {images: a, labels: b}\n") ==
        path + ":6:14: data.synthetic: expected either data.train or data.synthetic, got both");
  CHECK(errorWith(dir, "{type: regression}", "{type: classification}") ==
        path + ":6:21: data.synthetic.type: expected one of regression, got 'classification'");
  CHECK(errorWith(dir, "batch_size: 8", "batch_size: 8\n  shuffle: yes") ==
        path + ":8:12: data.shuffle: expected true or false, got 'yes'");
  for (const char* bad : {"-1", "lots", "'4'", "[4]", "1025", "99999"})
    CHECK_THAT(
        errorWith(dir, "batch_size: 8", std::string("batch_size: 8\n  prefetch_batches: ") + bad),
        Catch::Contains(path + ":8:21: data.prefetch_batches: expected auto or an integer "
                               "from 0 to 1024, got"));
  CHECK(loadVariant(dir, "batch_size: 8", "batch_size: 8\n  prefetch_batches: 0")
            .data.prefetch_batches == 0);
  CHECK(loadVariant(dir, "batch_size: 8", "batch_size: 8\n  prefetch_batches: auto")
            .data.prefetch_batches == std::nullopt);
}

TEST_CASE("init_from names layers of this spec that have variables", "[model_spec]") {
  TempDir dir;
  const std::string path = (dir.path() / "variant.yaml").string();
  const std::string layers = "  - {type: dense, units: 3}\n";
  const std::string two_layers =
      "  - {type: dense, name: hidden, units: 3}\n  - {type: dropout, rate: 0.5}\n";
  CHECK(errorWith(dir, layers, two_layers + "init_from: {checkpoint: base, layers: []}\n") ==
        path +
            ":5:39: init_from.layers: expected a non-empty list of layer names, got an empty list");
  CHECK(errorWith(dir, layers, two_layers + "init_from: {checkpoint: base, layers: [hiden]}\n") ==
        path +
            ":5:40: init_from.layers[0]: expected the name of a dense or conv2d layer of this "
            "spec, got 'hiden'");
  CHECK(
      errorWith(dir, layers, two_layers + "init_from: {checkpoint: base, layers: [dropout_1]}\n") ==
      path +
          ":5:40: init_from.layers[0]: expected the name of a dense or conv2d layer of this "
          "spec, got 'dropout_1'");
  CHECK(errorWith(dir, layers,
                  two_layers + "init_from: {checkpoint: base, layers: [hidden, hidden]}\n") ==
        path + ":5:48: init_from.layers[1]: layer 'hidden' is listed twice");
  CHECK(errorWith(dir, layers, two_layers + "init_from: {layers: [hidden]}\n") ==
        path + ":5:12: init_from: missing field 'checkpoint'");
}

TEST_CASE("init_from finds a layer's variables under a scope, or a prefix of its own",
          "[model_spec]") {
  TempDir dir;
  const std::string path = (dir.path() / "variant.yaml").string();
  const std::string layers = "  - {type: dense, units: 3}\n";
  const std::string two_layers =
      "  - {type: dense, name: hidden, units: 3}\n  - {type: dense, name: out, units: 2}\n";
  // TensorFlow 1 names a layer's variables after its variable scopes.
  const ModelSpec scoped =
      loadVariant(dir, layers,
                  two_layers +
                      "init_from: {checkpoint: base, scope: net, layers: [hidden, "
                      "{name: out, from: dnn/logits}]}\n");
  REQUIRE(scoped.init_from);
  CHECK(scoped.init_from->layers ==
        std::vector<InitFromLayer>{{"hidden", "net/hidden", {}}, {"out", "dnn/logits", {}}});
  // Each item's place, for the refusals of a run that reads the checkpoint.
  CHECK(scoped.init_from->layers[1].location.toString() == path + ":5:60");
  CHECK(errorWith(dir, layers,
                  two_layers + "init_from: {checkpoint: base, scope: /net, layers: [out]}\n") ==
        path +
            ":5:38: init_from.scope: expected a variable scope without a leading, trailing or "
            "doubled "
            "'/', such as net, got '/net'");
  CHECK(
      errorWith(dir, layers,
                two_layers + "init_from: {checkpoint: base, layers: [{name: out, from: a/}]}\n") ==
      path +
          ":5:58: init_from.layers[0].from: expected the prefix of the layer's variables in "
          "the checkpoint, without a leading, trailing or doubled '/', such as dnn/hiddenlayer_0, "
          "got "
          "'a/'");
  CHECK_THAT(errorWith(dir, layers,
                       two_layers + "init_from: {checkpoint: base, scope: net//a, "
                                    "layers: [out]}\n"),
             Catch::Contains("init_from.scope: expected a variable scope without a leading, "
                             "trailing or doubled '/', such as net, got 'net//a'"));
  CHECK(errorWith(dir, layers,
                  two_layers + "init_from: {checkpoint: base, layers: [{name: out, form: a}]}\n") ==
        path + ":5:52: init_from.layers[0]: unknown field 'form' (did you mean 'from'?)");
  CHECK(
      errorWith(dir, layers, two_layers + "init_from: {checkpoint: base, layers: [{from: a}]}\n") ==
      path + ":5:40: init_from.layers[0]: missing field 'name'");
}

TEST_CASE("architectureHash covers what decides variable shapes, and only that", "[model_spec]") {
  TempDir dir;
  const std::string base = architectureHash(loadModelSpec(dir.write("a.yaml", kMinimal)));
  CHECK(base.size() == 16);
  CHECK(base.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(architectureHash(loadModelSpec(dir.write("b.yaml", kMinimal))) == base);

  // Pinned, so that a change to the hash (which orphans every checkpoint's
  // recorded hash) is deliberate.
  CHECK(architectureHash(loadModelSpec(configPath("regression.yaml"))) == "a0b486ae9f2a1e1d");

  const std::string layer = "{type: dense, units: 3}";
  // Unchanged by training choices and by fields that decide no shape.
  CHECK(architectureHash(loadVariant(dir, "learning_rate: 0.1", "learning_rate: 0.5")) == base);
  CHECK(architectureHash(loadVariant(dir, "type: sgd", "type: adam")) == base);
  CHECK(architectureHash(loadVariant(dir, "batch_size: 8", "batch_size: 16")) == base);
  // (An activation on the last layer under mse: softmax_cross_entropy keeps it linear.)
  auto mseHash = [&](const std::string& last_layer) {
    std::string text = kMinimal + "loss: mse\n";
    text.replace(text.find(layer), layer.size(), last_layer);
    return architectureHash(loadModelSpec(dir.write("mse.yaml", text)));
  };
  CHECK(mseHash("{type: dense, units: 3, activation: relu, kernel_initializer: zeros}") ==
        mseHash(layer));
  const auto twoLayers = [&](const std::string& first_options) {
    return architectureHash(loadVariant(
        dir, layer,
        "{type: dense, units: 3, name: a" + first_options + "}\n  - {type: dense, units: 3}"));
  };
  CHECK(twoLayers(", trainable: false") == twoLayers(""));
  CHECK(architectureHash(loadVariant(dir, layer, "{type: dense, name: dense_1, units: 3}")) ==
        base);
  // Changed by the input, any layer's shape-deciding fields, names and the loss.
  CHECK(architectureHash(loadVariant(dir, layer, "{type: dense, units: 4}")) != base);
  CHECK(architectureHash(loadVariant(dir, layer, "{type: dense, units: 3, use_bias: false}")) !=
        base);
  CHECK(architectureHash(loadVariant(dir, layer, "{type: dense, name: out, units: 3}")) != base);
  CHECK(architectureHash(loadVariant(dir, "input: [4]", "input: [5]")) != base);
  CHECK(architectureHash(loadVariant(dir, "input: [4]", "input: [4]\nloss: mse")) != base);

  const ModelSpec cnn = loadModelSpec(configPath("fashion_cnn.yaml"));
  ModelSpec changed = cnn;
  changed.layers[0].window = {5, 5};
  CHECK(architectureHash(changed) != architectureHash(cnn));
  changed = cnn;
  changed.layers[1].stride = {1, 1};
  CHECK(architectureHash(changed) != architectureHash(cnn));
  changed = cnn;
  changed.layers[2].padding = Padding::Same;
  CHECK(architectureHash(changed) != architectureHash(cnn));
  changed = cnn;
  changed.layers[1].activation = Activation::Tanh;
  CHECK(architectureHash(changed) == architectureHash(cnn));
}

TEST_CASE("forwardRule holds the activations and dropout rates the architecture leaves out",
          "[model_spec]") {
  const ModelSpec cnn = loadModelSpec(configPath("fashion_cnn.yaml"));
  CHECK(forwardRule(cnn) == "conv1 relu, conv2 relu, hidden relu, logits linear");
  ModelSpec changed = cnn;
  changed.layers[4].activation = Activation::Sigmoid;
  CHECK(forwardRule(changed) == "conv1 relu, conv2 relu, hidden sigmoid, logits linear");
  CHECK(architectureHash(changed) == architectureHash(cnn));
  TempDir dir;
  const std::string layer = "{type: dense, units: 3}";
  const ModelSpec dropout = loadVariant(
      dir, layer, "{type: dense, units: 8}\n  - {type: dropout, rate: 0.25}\n  - " + layer);
  CHECK(forwardRule(dropout) == "dense_1 linear, dropout_1 rate 0.25, dense_2 linear");
  changed = dropout;
  changed.layers[1].rate = 0.5f;
  CHECK(forwardRule(changed) == "dense_1 linear, dropout_1 rate 0.5, dense_2 linear");
  CHECK(architectureHash(changed) == architectureHash(dropout));
  CHECK(specIdentity(changed).forward_rule == forwardRule(changed));
}

TEST_CASE("a chief names its checkpoint directory one way however it is spelled", "[model_spec]") {
  // A chief restarted with `ckpt/` or through a link is the same job's
  // to its ps tasks.
  TempDir dir;
  std::filesystem::create_directories(dir / "real" / "ckpt");
  std::filesystem::create_directory_symlink(dir / "real", dir / "link");
  ModelSpec spec;
  auto identity = [&](const std::string& path) {
    spec.checkpoint.dir = path;
    return specIdentity(spec).checkpoint_dir;
  };
  const std::string real = std::filesystem::canonical(dir / "real" / "ckpt").string();
  CHECK(identity((dir / "real" / "ckpt").string()) == real);
  CHECK(identity((dir / "real" / "ckpt").string() + "/") == real);
  CHECK(identity((dir / "link" / "ckpt").string()) == real);
  CHECK(identity((dir / "real" / "." / "ckpt" / "..").string() + "/ckpt//") == real);
  // Not made yet: as it will be.
  CHECK(identity((dir / "link" / "new").string() + "/") ==
        std::filesystem::canonical(dir / "real").string() + "/new");
  CHECK(identity("").empty());
  // Relative (--checkpoint-dir ckpt), before and after the chief made it.
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  const std::string relative = identity("made");
  std::filesystem::create_directory(dir / "made");
  CHECK(identity("made/") == relative);
  std::filesystem::current_path(before);
  CHECK(relative == std::filesystem::canonical(dir / "made").string());
}

TEST_CASE("placement, stages, micro-batches and concurrent steps", "[model_spec]") {
  TempDir dir;
  const ModelSpec spec = loadVariant(
      dir, "training: {max_steps: 10}\n",
      "stages: [{name: head, device: cpu:1, layers: [dense_1]}]\n"
      "training: {max_steps: 10, micro_batches: 4, concurrent_steps: 3}\n");
  REQUIRE(spec.stages.size() == 1);
  CHECK(spec.stages[0].name == "head");
  CHECK(spec.stages[0].device == "cpu:1");
  CHECK(spec.stages[0].layers == std::vector<std::string>{"dense_1"});
  CHECK(spec.training.micro_batches == 4);
  CHECK(spec.training.concurrent_steps == 3);
  CHECK(spec.training.concurrent_steps_location.line == 9);
  CHECK(loadVariant(dir, "units: 3}", "units: 3, device: cuda:1}").layers[0].device == "cuda:1");

  CHECK_THAT(errorWith(dir, "max_steps: 10}", "max_steps: 10, micro_batches: 3}"),
             Catch::Contains("training.micro_batches: expected a divisor of data.batch_size 8"));
  CHECK_THAT(errorWith(dir, "max_steps: 10}", "max_steps: 10, micro_batches: 16}"),
             Catch::Contains("at most 8"));
  CHECK_THAT(errorWith(dir, "max_steps: 10}", "max_steps: 10, concurrent_steps: 0}"),
             Catch::Contains("training.concurrent_steps: expected a positive integer, got 0"));
  CHECK_THAT(errorWith(dir, "units: 3}", "units: 3, device: gpu0}"),
             Catch::Contains("layers[0].device: expected a device: cpu, cpu:N or cuda:N (N from 0 "
                             "to 1023, no leading zeros), got 'gpu0'"));
  // One name a device: an index out of range, or with a leading zero, is none.
  for (const std::string name : {"cpu:1024", "cpu:00", "cuda:01", "cpu:-1", "cpu:"}) {
    INFO(name);
    CHECK_THAT(errorWith(dir, "max_steps: 10}", "max_steps: 10, devices: [cpu:0, '" + name + "']}"),
               Catch::Contains("variant.yaml:8:") &&
                   Catch::Contains("training.devices[1]: expected a device"));
  }
  CHECK(loadVariant(dir, "max_steps: 10}", "max_steps: 10, devices: [cpu:1023, cpu:10]}")
            .training.devices == std::vector<std::string>{"cpu:1023", "cpu:10"});

  // When a worker sends its gradient.
  CHECK(spec.training.gradient_push == TrainingSpec::GradientPush::Auto);
  CHECK(loadVariant(dir, "max_steps: 10}", "max_steps: 10, gradient_push: after_step}")
            .training.gradient_push == TrainingSpec::GradientPush::AfterStep);
  CHECK_THAT(errorWith(dir, "max_steps: 10}", "max_steps: 10, gradient_push: early}"),
             Catch::Contains("training.gradient_push: expected one of auto, during_backward, "
                             "after_step, got 'early'"));
}

TEST_CASE("a name is at most 255 bytes, a file name's most", "[model_spec]") {
  TempDir dir;
  const std::string layer = "  - {type: dense, units: 3}\n";
  CHECK_THAT(
      errorWith(dir, layer, "  - {type: dense, units: 3, name: " + std::string(256, 'n') + "}\n"),
      Catch::Contains("layers[0].name: expected a name of at most 255 bytes, got 256"));
  for (const std::string dots : {".", ".."})
    CHECK_THAT(errorWith(dir, layer, "  - {type: dense, units: 3, name: '" + dots + "'}\n"),
               Catch::Contains("layers[0].name: expected a name other than '.' and '..', which "
                               "name directories, got '" +
                               dots + "'"));
  CHECK(loadVariant(dir, layer, "  - {type: dense, units: 3, name: ...a}\n").layers[0].name ==
        "...a");
  CHECK(
      loadVariant(dir, layer, "  - {type: dense, units: 3, name: " + std::string(255, 'n') + "}\n")
          .layers[0]
          .name.size() == 255);
}

TEST_CASE("the last layer under softmax_cross_entropy stays linear", "[model_spec]") {
  TempDir dir;
  const std::string layer = "  - {type: dense, units: 3}\n";
  CHECK_THAT(errorWith(dir, layer, "  - {type: dense, units: 3, activation: sigmoid}\n"),
             Catch::Contains("layers[0].activation: the last layer under softmax_cross_entropy "
                             "stays linear"));
  CHECK_THAT(errorWith(dir, layer, layer + "  - {type: activation, activation: relu}\n"),
             Catch::Contains("layers[1].activation: the last layer under"));
  // Layers that only pass the logits on hide no activation before them.
  for (const char* after : {"  - {type: flatten}\n", "  - {type: dropout, rate: 0.1}\n",
                            "  - {type: activation, activation: linear}\n"}) {
    INFO(after);
    CHECK_THAT(errorWith(dir, layer,
                         "  - {type: dense, units: 3, activation: sigmoid}\n" + std::string(after) +
                             "  - {type: dropout, rate: 0.2}\n"),
               Catch::Contains("layers[0].activation: the layer that gives the logits under "
                               "softmax_cross_entropy stays linear (the layers after it only pass "
                               "its values on, or pool them)"));
    CHECK(loadVariant(dir, layer, layer + after).layers.size() == 2);
  }
  // Nor does pooling: the logits of an all-convolutional net.
  const std::string image = "input: [4]\nlayers:\n" + layer;
  for (const char* pool : {"max_pool", "avg_pool"}) {
    INFO(pool);
    const std::string conv = "input: [4, 4, 1]\nlayers:\n  - {type: conv2d, filters: 3, kernel: 3";
    const std::string after =
        std::string("}\n  - {type: ") + pool + ", size: 2}\n  - {type: flatten}\n";
    CHECK_THAT(errorWith(dir, image, conv + ", activation: sigmoid" + after),
               Catch::Contains("layers[0].activation: the layer that gives the logits under "
                               "softmax_cross_entropy stays linear (the layers after it only pass "
                               "its values on, or pool them)"));
    CHECK(loadVariant(dir, image, conv + after).layers.size() == 3);
  }
  // Under mse the outputs are the predictions: an activation is the model's.
  CHECK(loadVariant(dir, layer, "  - {type: dense, units: 3, activation: sigmoid}\nloss: mse\n")
            .layers[0]
            .activation == Activation::Sigmoid);
}

TEST_CASE("a stage is a run of consecutive layers, each in one stage", "[model_spec]") {
  TempDir dir;
  const std::string three_layers =
      "  - {type: dense, units: 3, name: a}\n"
      "  - {type: dense, units: 3, name: b}\n"
      "  - {type: dense, units: 3, name: c, device: cpu:0}\n";
  auto stagesError = [&](const std::string& stages) {
    return errorWith(dir, "  - {type: dense, units: 3}\n", three_layers + stages);
  };
  CHECK_THAT(stagesError("stages: [{name: s, device: cpu:1, layers: [a, c]}]\n"),
             Catch::Contains("expected 'b' after 'a', got 'c'"));
  CHECK_THAT(stagesError("stages: [{name: s, device: cpu:1, layers: [a]},"
                         " {name: t, device: cpu:1, layers: [a]}]\n"),
             Catch::Contains("layer 'a' is already in stage 's'"));
  CHECK_THAT(stagesError("stages: [{name: s, device: cpu:1, layers: [c]}]\n"),
             Catch::Contains("layer 'c' is placed on cpu:0 (line 5), stage 's' on cpu:1"));
  CHECK_THAT(stagesError("stages: [{name: s, device: cpu:1, layers: [x]}]\n"),
             Catch::Contains("expected the name of a layer of this spec, got 'x'"));
  CHECK_THAT(stagesError("stages: [{name: s, device: cpu:1, layers: [a]},"
                         " {name: s, device: cpu:1, layers: [b]}]\n"),
             Catch::Contains("duplicate stage name 's'"));
  CHECK_THAT(stagesError("stages: [{name: s, layers: [a]}]\n"), Catch::Contains("device"));
  // Nothing follows the last layer (this read past the list once).
  CHECK_THAT(stagesError("stages: [{name: s, device: cpu:0, layers: [c, b]}]\n"),
             Catch::Contains("expected nothing after 'c', the last layer, got 'b'"));
}

TEST_CASE(
    "an empty list item is named at its own dash, or at the item before where the text "
    "cannot tell",
    "[model_spec]") {
  TempDir dir;
  // "path line:column" of every empty item of every list in the file.
  auto emptyItems = [&](const std::string& text) {
    const std::string path = dir.write("items.yaml", text);
    const yaml_fields::YamlFile file = yaml_fields::loadYamlFile(path, "spec");
    std::vector<std::string> found;
    std::function<void(const yaml_fields::Field&)> walk = [&](const yaml_fields::Field& field) {
      if (field.node.IsMap()) {
        yaml_fields::Mapping map(field);
        for (const auto& entry : field.node) walk(map.get(entry.first.Scalar()));
      } else if (field.node.IsSequence()) {
        for (const yaml_fields::Field& item : yaml_fields::listItems(field, "a list"))
          if (item.node.IsNull())
            found.push_back(item.path + " " + std::to_string(item.where.line) + ":" +
                            std::to_string(item.where.column));
          else
            walk(item);
      }
    };
    walk(yaml_fields::rootField(file, path));
    return found;
  };
  using Found = std::vector<std::string>;
  // Lists in lists, the inner one starting on the outer one's dash.
  CHECK(emptyItems("a:\n- - x\n  -\n  - y\n-\n- - \n  -\n") ==
        Found{"a[0][1] 3:3", "a[1] 5:1", "a[2][0] 6:3", "a[2][1] 7:3"});
  // Comments, blank lines, CRLF, a tab after the dash, a block scalar.
  CHECK(emptyItems("a:\r\n  - |\r\n    - text\r\n# c\r\n\r\n  -\t# c\r\n  - ~\r\n") ==
        Found{"a[1] 6:3", "a[2] 7:3"});
  // A quoted scalar's continuation line that starts with "- " is no item:
  // the text cannot tell the items apart, and the item before names it.
  CHECK(emptyItems("a:\n  - \"x\n  - y\"\n  -\n") == Found{"a[1] 2:5"});
}
