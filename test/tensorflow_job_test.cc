// Taking over a TensorFlow 1 job's state: TensorFlow 1's slot names, and
// what an import of the fixture TensorFlow's Saver wrote
// (test/data/tensorflow_checkpoint) takes and refuses; and a Keras model's
// and its optimizer's, from the fixtures of Keras 3, 2 and 2.11
// (test/make_keras_checkpoint.py). tensorflow_reference.py checks that an
// imported job then trains on as TensorFlow does.
#include "core/tensorflow_job.h"

#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <span>

#include "core/error.h"
#include "core/layer_graph.h"
#include "core/model_spec.h"
#include "core/model_state.h"
#include "core/tensorflow_checkpoint.h"
#include "core/trackable_object_graph.pb.h"
#include "test/temp_dir.h"

namespace traind {
namespace {

const std::filesystem::path kPrefix =
    std::filesystem::path(TRAIND_SOURCE_DIR) / "test/data/tensorflow_checkpoint/model.ckpt-1200";

OptimizerSpec optimizer(OptimizerSpec::Kind kind, bool centered = false) {
  OptimizerSpec spec;
  spec.kind = kind;
  spec.centered = centered;
  return spec;
}

// The fixture's two dense layers, with `optimizer` (a spec's line), and
// `more` spec text; `frozen`: neither layer trained.
ModelSpec fixtureModel(const TempDir& dir, const std::string& optimizer,
                       const std::string& more = "", bool frozen = false) {
  const std::string trainable = frozen ? ", trainable: false" : "";
  return loadModelSpec(
      dir.write("m.yaml",
                "name: imported\ninput: [4]\nlayers:\n"
                "  - {type: dense, name: hidden, units: 3" +
                    trainable +
                    "}\n"
                    "  - {type: dense, name: out, units: 2" +
                    trainable +
                    "}\n"
                    "loss: mse\noptimizer: " +
                    optimizer +
                    "\n"
                    "data:\n  synthetic: {type: regression, points: 10, x_min: -1, x_max: 1}\n"
                    "  batch_size: 2\ntraining: {max_steps: 1}\n" +
                    more));
}

std::string importError(const ModelSpec& spec, const TensorflowNames& how,
                        std::optional<int64_t> global_step) {
  const LayerGraph graph = buildLayerGraph(spec);
  ModelState state(spec, graph);
  try {
    importTensorflowState(TensorflowCheckpointReader(kPrefix), how, global_step, spec, state);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

// What an import of a fixture of test/make_keras_checkpoint.py took:
// element i of a variable is first + i / 8 (first 1 to 4 in the spec's
// order), and element i of its slot s is `factor` x (that + offsets[s]).
void checkKerasFixtureValues(const ModelState& state, const std::vector<float>& offsets,
                             float factor = 1) {
  for (const VariableView& v : state.layout().views()) {
    INFO(v.name);
    const float first = v.name == "hidden/kernel" ? 1
                        : v.name == "hidden/bias" ? 2
                        : v.name == "out/kernel"  ? 3
                                                  : 4;
    const std::span<const float> values = state.parameters().view(v);
    for (size_t i = 0; i < values.size(); ++i) CHECK(values[i] == first + float(i) / 8);
    for (size_t s = 0; s < offsets.size(); ++s) {
      INFO(state.optimizer().slotNames()[s]);
      const std::span<const float> slot = state.optimizer().slot(s).view(v);
      for (size_t i = 0; i < slot.size(); ++i)
        CHECK(slot[i] == factor * (first + float(i) / 8 + offsets[s]));
    }
  }
}

}  // namespace

TEST_CASE("TensorFlow 1 names an optimizer's slots after it, numbered as it makes them",
          "[tensorflow_job]") {
  using Kind = OptimizerSpec::Kind;
  CHECK(tensorflowSlotName(optimizer(Kind::Momentum), "momentum", "") == "Momentum");
  CHECK(tensorflowSlotName(optimizer(Kind::Adagrad), "accumulator", "") == "Adagrad");
  CHECK(tensorflowSlotName(optimizer(Kind::Adam), "m", "") == "Adam");
  CHECK(tensorflowSlotName(optimizer(Kind::Adam), "v", "") == "Adam_1");
  CHECK(tensorflowSlotName(optimizer(Kind::Adam), "v", "MyAdam") == "MyAdam_1");
  CHECK(tensorflowSlotName(optimizer(Kind::RmsProp), "rms", "") == "RMSProp");
  CHECK(tensorflowSlotName(optimizer(Kind::RmsProp), "momentum", "") == "RMSProp_1");
  // Centered, RMSPropOptimizer makes mg before momentum.
  CHECK(tensorflowSlotName(optimizer(Kind::RmsProp, true), "mg", "") == "RMSProp_1");
  CHECK(tensorflowSlotName(optimizer(Kind::RmsProp, true), "momentum", "") == "RMSProp_2");
  CHECK(tensorflowSlotName(optimizer(Kind::Adam), "ExponentialMovingAverage", "") ==
        "ExponentialMovingAverage");
}

TEST_CASE("an import takes every variable, the optimizer's slots and the global step",
          "[tensorflow_job]") {
  TempDir dir;
  const ModelSpec spec = fixtureModel(dir, "{type: adam, learning_rate: 0.1}");
  const LayerGraph graph = buildLayerGraph(spec);
  ModelState state(spec, graph);
  TensorflowNames how;
  how.scope = "net";
  const int64_t step = 0;  // the fixture's Adam took no step; its global step says 1200
  const std::vector<std::string> said =
      importTensorflowState(TensorflowCheckpointReader(kPrefix), how, step, spec, state);
  CHECK(said == std::vector<std::string>{
                    "4 variables from " + kPrefix.string() + " at global step 0 (--global-step)",
                    "'m' state from <variable>/Adam", "'v' state from <variable>/Adam_1",
                    "left 1 float32 tensor of the checkpoint under net/ that this model has no "
                    "place for: 'net/partitioned'"});
  CHECK(state.globalStep() == 0);
  for (const VariableView& v : state.layout().views()) {
    INFO(v.name);
    const std::span<const float> values = std::as_const(state.parameters()).view(v);
    const float first = v.name == "hidden/kernel" ? 1
                        : v.name == "hidden/bias" ? 2
                        : v.name == "out/kernel"  ? 3
                                                  : 4;
    for (size_t i = 0; i < values.size(); ++i) CHECK(values[i] == first + float(i) / 8);
    for (size_t s = 0; s < 2; ++s)
      for (float x : std::as_const(state.optimizer()).slot(s).view(v)) CHECK(x == 0);
  }

  // A layer under another prefix.
  how.scope.clear();
  how.layer_sources = {{"hidden", "net/hidden"}, {"out", "net/out"}};
  CHECK(importError(spec, how, step) == "(no error)");
}

TEST_CASE("an import takes a Keras 3 model's and its Adam's state through the object graph",
          "[tensorflow_job]") {
  // test/make_keras_checkpoint.py: Adam's momentum of a variable is its
  // value + 100, its velocity its value + 200, its iterations 1200.
  const std::filesystem::path keras =
      std::filesystem::path(TRAIND_SOURCE_DIR) / "test/data/keras_checkpoint/ckpt";
  TempDir dir;
  TensorflowNames how;
  how.layer_sources = {{"hidden", "model/_functional/_operations/1"},
                       {"out", "model/_functional/_operations/2"}};
  const auto import = [&](const ModelSpec& spec, ModelState& state) {
    return importTensorflowState(TensorflowCheckpointReader(keras), how, std::nullopt, spec, state);
  };
  const ModelSpec spec = fixtureModel(dir, "{type: adam, learning_rate: 0.001}");
  const LayerGraph graph = buildLayerGraph(spec);
  ModelState state(spec, graph);
  CHECK(import(spec, state) ==
        std::vector<std::string>{"4 variables from " + keras.string() + " at global step 1200",
                                 "'m' state from optimizer/_momentums/<the variable's place in "
                                 "optimizer/_trainable_variables>",
                                 "'v' state from optimizer/_velocities/<the variable's place in "
                                 "optimizer/_trainable_variables>"});
  CHECK(state.globalStep() == 1200);
  checkKerasFixtureValues(state, {100, 200});  // m, v
  // What Keras keeps otherwise, or not at all, is refused.
  const auto refusal = [&](const std::string& optimizer, const std::string& more) {
    const ModelSpec other = fixtureModel(dir, optimizer, more);
    ModelState other_state(other, graph);
    try {
      import(other, other_state);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK_THAT(refusal("{type: momentum, learning_rate: 0.1, momentum: 0.9}", ""),
             Catch::Contains(": the job's Keras optimizer names its step count "
                             "'adam/iteration', not 'sgd/iteration': it is not Keras' SGD"));
  CHECK_THAT(refusal("{type: adam, learning_rate: 0.001}", "moving_average: {decay: 0.99}\n"),
             Catch::Contains("this spec keeps moving averages (moving_average), which an import "
                             "from Keras cannot fill"));
  CHECK(refusal("{type: sgd, learning_rate: 0.1}", "") == "(no error)");
}

TEST_CASE("an import takes a Keras 2 model's and its RMSprop's slot variables",
          "[tensorflow_job]") {
  // test/make_keras_checkpoint.py: RMSprop(momentum=0.5, rho=0.9), the rms
  // of a variable its value + 100, the momentum its value + 200, iter 1200.
  const std::filesystem::path keras2 =
      std::filesystem::path(TRAIND_SOURCE_DIR) / "test/data/keras2_checkpoint/ckpt";
  TempDir dir;
  TensorflowNames how;
  how.layer_sources = {{"hidden", "model/layer_with_weights-0"},
                       {"out", "model/layer_with_weights-1"}};
  const std::string rmsprop = "{type: rmsprop, learning_rate: 0.001, momentum: 0.5";
  std::vector<std::string> said;
  const auto importOf = [&](const std::string& optimizer) {
    const ModelSpec spec = fixtureModel(dir, optimizer);
    const LayerGraph graph = buildLayerGraph(spec);
    ModelState state(spec, graph);
    try {
      said =
          importTensorflowState(TensorflowCheckpointReader(keras2), how, std::nullopt, spec, state);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const ModelSpec spec = fixtureModel(dir, rmsprop + "}");
  const LayerGraph graph = buildLayerGraph(spec);
  ModelState state(spec, graph);
  CHECK(importTensorflowState(TensorflowCheckpointReader(keras2), how, std::nullopt, spec, state) ==
        std::vector<std::string>{
            "4 variables from " + keras2.string() + " at global step 1200",
            "'rms' state from optimizer's slot 'rms' of each variable",
            "'momentum' state from optimizer's slot 'momentum' of each variable"});
  CHECK(state.globalStep() == 1200);
  checkKerasFixtureValues(state, {100, 200});  // rms, momentum
  // Keras 2 keeps its settings: they must be the spec's.
  const std::string prefix = keras2.string() + ": the job's Keras ";
  CHECK(importOf("{type: rmsprop, learning_rate: 0.001, momentum: 0.9}") ==
        prefix +
            "RMSprop ran with momentum 0.5, this spec's rmsprop with momentum 0.9: give the "
            "spec the job's momentum: 0.5 to train on as it would have");
  CHECK_THAT(importOf(rmsprop + ", rho: 0.95}"),
             Catch::Contains("RMSprop ran with rho 0.9, this spec's rmsprop with rho 0.95"));
  CHECK(importOf("{type: rmsprop, learning_rate: 0.001, momentum: 0}") ==
        prefix +
            "optimizer kept 'momentum' as well, which this spec's rmsprop has no place for: "
            "the job's RMSprop had momentum; give the spec the job's");
  CHECK(importOf(rmsprop + ", centered: true}") ==
        prefix +
            "RMSprop kept no 'mg' state, which this spec's rmsprop keeps: the job's "
            "RMSprop was not centered; drop centered from the spec");
  // Another optimizer, by the name Keras 2 gives its step count.
  CHECK_THAT(importOf("{type: adam, learning_rate: 0.001}"),
             Catch::Contains("names its step count 'RMSprop/iter', not 'Adam/iter': it is not "
                             "Keras' Adam"));
  CHECK_THAT(importOf("{type: momentum, learning_rate: 0.001}"), Catch::Contains("not 'SGD/iter'"));
  // A spec of sgd keeps no state: it takes the variables of any.
  CHECK(importOf("{type: sgd, learning_rate: 0.01}") == "(no error)");
  REQUIRE(said.size() == 3);
  CHECK(said[1] ==
        "the job's Keras optimizer kept a learning rate of 0.001; traind trains on at this "
        "spec's (0.01 at the imported step)");
  CHECK_THAT(said[2], Catch::StartsWith("left 8 float32 tensors of the checkpoint that this "
                                        "model has no place for: "));
}

TEST_CASE(
    "an import places a Keras 2.11 optimizer's slots by their names, and SGD's momentum "
    "divided by minus the rate",
    "[tensorflow_job]") {
  // test/make_keras_checkpoint.py: tf_keras.optimizers.SGD(0.5,
  // momentum=0.9), a variable's momentum its value + 100 (Keras' m, which
  // is -rate times traind's), iterations 1200.
  const std::filesystem::path keras211 =
      std::filesystem::path(TRAIND_SOURCE_DIR) / "test/data/keras211_checkpoint/ckpt";
  TempDir dir;
  TensorflowNames how;
  how.layer_sources = {{"hidden", "model/layer_with_weights-0"},
                       {"out", "model/layer_with_weights-1"}};
  const ModelSpec spec = fixtureModel(dir, "{type: momentum, learning_rate: 0.5, momentum: 0.9}");
  const LayerGraph graph = buildLayerGraph(spec);
  ModelState state(spec, graph);
  CHECK(
      importTensorflowState(TensorflowCheckpointReader(keras211), how, std::nullopt, spec, state) ==
      std::vector<std::string>{
          "4 variables from " + keras211.string() + " at global step 1200",
          "'momentum' state from optimizer/momentums/<the entry named after the variable>, "
          "divided by minus the spec's learning rate (Keras' SGD scales it by the rate)"});
  CHECK(state.globalStep() == 1200);
  // Keras' m is -rate times traind's momentum: -(value + 100) / 0.5.
  checkKerasFixtureValues(state, {100}, -2);
  // Keras 2.11 names its slots after the optimizer.
  const ModelSpec adam = fixtureModel(dir, "{type: adam, learning_rate: 0.5}");
  const LayerGraph adam_graph = buildLayerGraph(adam);
  ModelState adam_state(adam, adam_graph);
  try {
    importTensorflowState(TensorflowCheckpointReader(keras211), how, std::nullopt, adam,
                          adam_state);
    FAIL("an SGD's state was taken for Adam's");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()) ==
          keras211.string() +
              ": the job's Keras optimizer names its slots 'SGD/...', not 'Adam/...': it is not "
              "Keras' Adam, whose state this spec's adam takes (give the optimizer's name with "
              "--optimizer-name if the job named it)");
  }
}

TEST_CASE("a Keras 2.11 slot whose name places it on no one variable is refused",
          "[tensorflow_job]") {
  // Two of the model's variables named alike (tf_keras' nested models do
  // not prefix their layers), and an SGD's momentum named after that name.
  TempDir dir;
  tensorflow::TrackableObjectGraph graph;
  for (int i = 0; i < 8; ++i) graph.add_nodes();
  const auto child = [&](int from, int to, const std::string& name) {
    auto* reference = graph.mutable_nodes(from)->add_children();
    reference->set_node_id(to);
    reference->set_local_name(name);
  };
  std::vector<TensorflowTensor> tensors;
  const auto value = [&](int node, const std::string& key, const std::string& name) {
    auto* attribute = graph.mutable_nodes(node)->add_attributes();
    attribute->set_name("VARIABLE_VALUE");
    attribute->set_full_name(name);
    attribute->set_checkpoint_key(key);
    tensors.push_back({key, {}, {1.0f}, std::nullopt});
  };
  child(0, 1, "model");
  child(1, 2, "encoder");
  value(2, "model/encoder/.ATTRIBUTES/VARIABLE_VALUE", "hidden/kernel");
  child(1, 3, "decoder");
  value(3, "model/decoder/.ATTRIBUTES/VARIABLE_VALUE", "hidden/kernel");
  child(0, 4, "optimizer");
  child(4, 5, "_iterations");
  child(4, 6, "momentums");
  child(6, 7, "0");
  value(7, "optimizer/_variables/1/.ATTRIBUTES/VARIABLE_VALUE", "SGD/m/hidden/kernel");
  graph.mutable_nodes(5)->add_attributes()->set_name("VARIABLE_VALUE");
  graph.mutable_nodes(5)->mutable_attributes(0)->set_full_name("iteration");
  graph.mutable_nodes(5)->mutable_attributes(0)->set_checkpoint_key(
      "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE");
  tensors.push_back({"optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE", {}, {}, 7});
  tensors.push_back(
      {"_CHECKPOINTABLE_OBJECT_GRAPH", {}, {}, std::nullopt, graph.SerializeAsString()});
  const std::filesystem::path prefix = dir.path() / "ckpt";
  writeTensorflowCheckpoint(prefix, tensors);

  const ModelSpec spec = fixtureModel(dir, "{type: momentum, learning_rate: 0.1}");
  const LayerGraph layers = buildLayerGraph(spec);
  ModelState state(spec, layers);
  try {
    importTensorflowState(TensorflowCheckpointReader(prefix), {}, std::nullopt, spec, state);
    FAIL("a slot of two variables was placed");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()) ==
          prefix.string() +
              ": the job's Keras 2.11 optimizer names its slots after their variables, and 1 of "
              "them name none this import can place: optimizer/momentums/0 "
              "('SGD/m/hidden/kernel') is of 'hidden/kernel', the name of two variables of the "
              "model");
  }
}

TEST_CASE("a Keras optimizer other than Adam, or an Adam that kept more, is refused by name",
          "[tensorflow_job]") {
  // An object graph of an optimizer alone: its step count under
  // `step_child` (Keras 3's _iterations, Keras 2's iter), named as Keras
  // names it after the optimizer, and more children with a value each.
  TempDir dir;
  int written = 0;
  const auto checkpoint = [&](const std::string& step_child, const std::string& step_name,
                              const std::vector<std::string>& more) {
    tensorflow::TrackableObjectGraph graph;
    for (size_t i = 0; i < 4 + more.size(); ++i) graph.add_nodes();
    const auto child = [&](int from, int to, const std::string& name) {
      auto* reference = graph.mutable_nodes(from)->add_children();
      reference->set_node_id(to);
      reference->set_local_name(name);
    };
    const auto value = [&](int node, const std::string& key, const std::string& name) {
      auto* attribute = graph.mutable_nodes(node)->add_attributes();
      attribute->set_name("VARIABLE_VALUE");
      attribute->set_full_name(name);
      attribute->set_checkpoint_key(key);
    };
    const auto keyOf = [](const std::string& name) {
      return "optimizer/" + name + "/.ATTRIBUTES/VARIABLE_VALUE";
    };
    child(0, 1, "optimizer");
    child(1, 2, step_child);
    value(2, keyOf(step_child), step_name);
    child(1, 3, "_trainable_variables_indices");  // bookkeeping, no values
    std::vector<TensorflowTensor> tensors = {{keyOf(step_child), {}, {}, 7}};
    for (size_t i = 0; i < more.size(); ++i) {
      child(1, int(4 + i), more[i]);
      value(int(4 + i), keyOf(more[i]), more[i]);
      tensors.push_back({keyOf(more[i]), {}, {0.9f}, std::nullopt});
    }
    tensors.push_back(
        {"_CHECKPOINTABLE_OBJECT_GRAPH", {}, {}, std::nullopt, graph.SerializeAsString()});
    const std::filesystem::path prefix = dir.path() / std::to_string(written++) / "ckpt";
    writeTensorflowCheckpoint(prefix, tensors);
    return prefix;
  };
  const auto keras3 = [&](const std::string& step_name, const std::vector<std::string>& more) {
    return checkpoint("_iterations", step_name, more);
  };
  const ModelSpec spec = fixtureModel(dir, "{type: adam, learning_rate: 0.001}");
  const LayerGraph graph = buildLayerGraph(spec);
  const auto importError = [&](const std::filesystem::path& prefix, const std::string& name) {
    ModelState state(spec, graph);
    TensorflowNames how;
    how.optimizer_name = name;
    try {
      importTensorflowState(TensorflowCheckpointReader(prefix), how, std::nullopt, spec, state);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::filesystem::path nadam = keras3("nadam/iteration", {});
  CHECK(importError(nadam, "") ==
        nadam.string() +
            ": the job's Keras optimizer names its step count 'nadam/iteration', not "
            "'adam/iteration': it is not Keras' Adam, whose state this spec's adam takes (give "
            "the optimizer's name with --optimizer-name if the job named it)");
  CHECK_THAT(importError(keras3("adam_w/iteration", {}), ""),
             Catch::Contains("names its step count 'adam_w/iteration'"));
  // A process's second Adam is adam_1; past the name's check, this graph
  // has no moments.
  CHECK_THAT(importError(keras3("adam_1/iteration", {}), ""),
             Catch::Contains("the job's Keras Adam kept no 'm' state"));
  CHECK_THAT(importError(keras3("mine/iteration", {}), "mine"),
             Catch::Contains("the job's Keras Adam kept no 'm' state"));
  CHECK_THAT(importError(keras3("adam/iteration", {"_velocity_hats"}), ""),
             Catch::Contains("the job's Keras optimizer kept '_velocity_hats' as well"));
  // Keras 2's step count made outside the optimizer's name says nothing:
  // its settings and what else it kept tell (Nadam's momentum_cache,
  // RMSprop's rho).
  CHECK_THAT(importError(checkpoint("iter", "iter", {"beta_1", "beta_2", "momentum_cache"}), ""),
             Catch::Contains("the job's Keras optimizer kept 'momentum_cache' as well, which "
                             "this spec's adam has no place for: amsgrad, use_ema, gradient "
                             "accumulation or another optimizer's state"));
  CHECK_THAT(importError(checkpoint("iter", "iter", {"rho", "momentum"}), ""),
             Catch::Contains("the job's Keras optimizer kept no setting 'beta_1', which Keras' "
                             "Adam has: it is not the spec's adam"));
  CHECK_THAT(importError(checkpoint("iter", "Adam/iter", {"beta_1", "beta_2", "rho"}), ""),
             Catch::Contains("the job's Keras optimizer kept a setting 'rho', which Keras' Adam "
                             "has not: it is not the spec's adam"));
}

TEST_CASE("an import refuses what would not train on as TensorFlow would", "[tensorflow_job]") {
  TempDir dir;
  TensorflowNames how;
  how.scope = "net";
  const ModelSpec adam = fixtureModel(dir, "{type: adam, learning_rate: 0.1}");
  // The fixture's global step (1200) is not its Adam's (no step taken).
  CHECK_THAT(importError(adam, how, std::nullopt),
             Catch::StartsWith(kPrefix.string() + ": Adam's beta1_power 0.9 and beta2_power 0.999 "
                                                  "are not those of global step 1200"));
  // Another beta1: the same powers are of no step of it.
  CHECK_THAT(importError(fixtureModel(dir, "{type: adam, learning_rate: 0.1, beta1: 0.8}"), how, 0),
             Catch::Contains("are not those of global step 0"));
  CHECK_THAT(importError(fixtureModel(dir, "{type: momentum, learning_rate: 0.1}"), how, 0),
             Catch::Contains(": no tensor 'net/hidden/kernel/Momentum', the 'momentum' state of "
                             "this spec's "));
  CHECK_THAT(importError(fixtureModel(dir, "{type: momentum, learning_rate: 0.1}"), how, 0),
             Catch::Contains("its optimizer had another name (give it with --optimizer-name)"));
  how.optimizer_name = "MyAdam";
  CHECK_THAT(importError(adam, how, 0), Catch::Contains("no tensor 'net/hidden/kernel/MyAdam'"));
  how.optimizer_name.clear();
  // SGD keeps no state: the parameters and the step are the whole of it.
  CHECK(importError(fixtureModel(dir, "{type: sgd, learning_rate: 0.1}"), how, 0) == "(no error)");
  // A slot past the spec's: the job's optimizer kept more (here: Adam's
  // second slot, read as a momentum optimizer's one).
  how.optimizer_name = "Adam";
  CHECK_THAT(importError(fixtureModel(dir, "{type: momentum, learning_rate: 0.1}"), how, 0),
             Catch::Contains("tensor 'net/hidden/kernel/Adam_1' is state the job's optimizer kept "
                             "past what this spec's momentum (0.9), learning rate 0.1 keeps"));
  how.optimizer_name.clear();
  // A moving average the job did not keep, of a variable it trained.
  const ModelSpec averaged =
      fixtureModel(dir, "{type: adam, learning_rate: 0.1}", "moving_average: {decay: 0.99}\n");
  CHECK_THAT(importError(averaged, how, 0),
             Catch::Contains("no tensor 'net/hidden/kernel/ExponentialMovingAverage', the "
                             "'ExponentialMovingAverage' state of this spec's"));
  CHECK_THAT(importError(averaged, how, 0),
             Catch::Contains("the job kept no moving average of it (drop the spec's "
                             "moving_average)"));
  CHECK(importError(adam, how, kMaxGlobalStep + 1) ==
        fmt::format("{}: global step {} (--global-step): expected a step count from 0 to {}",
                    kPrefix.string(), kMaxGlobalStep + 1, kMaxGlobalStep));
  how.scope = "model";
  CHECK(importError(adam, how, 0) ==
        kPrefix.string() +
            ": no tensor 'model/hidden/kernel' for 'hidden/kernel' (--scope model); "
            "`trainctl inspect " +
            kPrefix.string() + "` lists the tensors it has");
}

TEST_CASE("a variable the job did not train needs no slots nor moving average",
          "[tensorflow_job]") {
  // TensorFlow makes no slots for a variable it does not train, and
  // ema.apply(tf.trainable_variables()) averages none of them: a frozen
  // variable's start as a fresh run's, the averages at the values.
  TempDir dir;
  const ModelSpec spec = fixtureModel(dir, "{type: momentum, learning_rate: 0.1}",
                                      "moving_average: {decay: 0.99}\n", true);
  const LayerGraph graph = buildLayerGraph(spec);
  ModelState state(spec, graph);
  TensorflowNames how;
  how.scope = "net";
  importTensorflowState(TensorflowCheckpointReader(kPrefix), how, std::nullopt, spec, state);
  const Optimizer& optimizer = std::as_const(state).optimizer();
  for (const VariableView& v : state.layout().views()) {
    INFO(v.name);
    const std::span<const float> values = std::as_const(state.parameters()).view(v);
    const std::span<const float> average = optimizer.movingAverage()->view(v);
    CHECK(std::vector<float>(average.begin(), average.end()) ==
          std::vector<float>(values.begin(), values.end()));
    for (float x : optimizer.slot(0).view(v)) CHECK(x == 0);  // momentum, as a fresh run's
  }
}

}  // namespace traind

namespace traind {

TEST_CASE("an exported state is what an import takes back, as TensorFlow 1 names it",
          "[tensorflow_job]") {
  TempDir dir;
  const ModelSpec spec = fixtureModel(dir, "{type: adam, learning_rate: 0.1, beta1: 0.8}",
                                      "moving_average: {decay: 0.99}\n");
  const LayerGraph graph = buildLayerGraph(spec);
  ModelState state(spec, graph);
  state.initialize();
  state.setGlobalStep(41);
  // Slots of values of their own, so that a slot read for another shows.
  for (size_t s = 0; s < state.optimizer().slotNames().size(); ++s)
    for (size_t i = 0; i < size_t(state.optimizer().slot(s).size()); ++i)
      state.optimizer().slot(s).data()[i] = float(s + 1) + float(i) / 1024;
  TensorflowNames names;
  names.scope = "net";
  names.layer_sources = {{"out", "head/logits"}};
  const std::filesystem::path prefix = dir / "exported" / "model.ckpt-41";
  writeTensorflowCheckpoint(prefix, tensorflowState(state, spec, names));

  // TensorFlow's names, a directory TensorFlow's latest_checkpoint finds.
  CHECK(findTensorflowCheckpoint(dir / "exported") == prefix);
  const TensorflowCheckpointReader reader(prefix);
  CHECK(reader.names() ==
        std::vector<std::string>{"beta1_power", "beta2_power", "global_step", "head/logits/bias",
                                 "head/logits/bias/Adam", "head/logits/bias/Adam_1",
                                 "head/logits/bias/ExponentialMovingAverage", "head/logits/kernel",
                                 "head/logits/kernel/Adam", "head/logits/kernel/Adam_1",
                                 "head/logits/kernel/ExponentialMovingAverage", "net/hidden/bias",
                                 "net/hidden/bias/Adam", "net/hidden/bias/Adam_1",
                                 "net/hidden/bias/ExponentialMovingAverage", "net/hidden/kernel",
                                 "net/hidden/kernel/Adam", "net/hidden/kernel/Adam_1",
                                 "net/hidden/kernel/ExponentialMovingAverage"});
  CHECK(reader.readInteger("global_step") == 41);
  float power = 0;
  reader.read("beta1_power", {}, std::span<float>(&power, 1));
  CHECK(power == Approx(std::pow(0.8, 42)).epsilon(1e-6));

  ModelState back(spec, graph);
  importTensorflowState(reader, names, std::nullopt, spec, back);
  CHECK(back.globalStep() == 41);
  // Variable by variable: a buffer's padding between them is no one's.
  auto same = [&](const FlatBuffer& a, const FlatBuffer& b) {
    for (const VariableView& v : state.layout().views()) {
      const std::span<const float> x = a.view(v), y = b.view(v);
      if (!std::equal(x.begin(), x.end(), y.begin(), y.end())) return false;
    }
    return true;
  };
  CHECK(same(back.parameters(), state.parameters()));
  for (size_t s = 0; s < state.optimizer().slotNames().size(); ++s) {
    INFO(state.optimizer().slotNames()[s]);
    CHECK(same(std::as_const(back).optimizer().slot(s), std::as_const(state).optimizer().slot(s)));
  }
  // A checkpoint is not written over.
  CHECK_THROWS_WITH(writeTensorflowCheckpoint(prefix, tensorflowState(state, spec, names)),
                    prefix.string() +
                        ".index is there already: a checkpoint is not written "
                        "over; give another prefix");
}

}  // namespace traind
