// Optimizer updates against values worked out by hand from TensorFlow's rules.
#include "core/optimizer.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <utility>
#include <vector>

#include "core/learning_rate.h"
#include "core/streaming_store.h"

using namespace traind;

namespace {

// One trainable kernel of two elements and one frozen bias.
struct TwoVariables {
  LayerGraph graph;
  VariableLayout layout;
  FlatBuffer params, grads;

  TwoVariables() : graph(makeGraph()), layout(graph.variables), params(layout.totalSize()),
                   grads(layout.totalSize()) {
    float* p = params.data();
    float* g = grads.data();
    const VariableView& k = layout.views()[0];
    const VariableView& b = layout.views()[1];
    p[k.offset] = 1.0f;
    p[k.offset + 1] = -2.0f;
    g[k.offset] = 0.5f;
    g[k.offset + 1] = -1.0f;
    p[b.offset] = 3.0f;
    g[b.offset] = 7.0f;
  }
  static LayerGraph makeGraph() {
    LayerGraph g;
    VariableSpec k;
    k.name = "d/kernel";
    k.shape = {1, 2};
    k.is_kernel = true;
    VariableSpec b;
    b.name = "d/bias";
    b.shape = {1};
    b.trainable = false;
    g.variables = {k, b};
    return g;
  }
  float p(int i) const { return params.data()[layout.views()[0].offset + i]; }
  float bias() const { return params.data()[layout.views()[1].offset]; }
};

}  // namespace

TEST_CASE("sgd: p -= lr * g, frozen untouched") {
  TwoVariables t;
  OptimizerSpec spec;
  spec.kind = OptimizerSpec::Kind::Sgd;
  Optimizer opt(spec, t.layout);
  opt.apply(t.params, t.grads, 0.1f, 1);
  CHECK(t.p(0) == Approx(0.95f));
  CHECK(t.p(1) == Approx(-1.9f));
  CHECK(t.bias() == 3.0f);
  CHECK(opt.slotNames().empty());
}

TEST_CASE("sgd with weight decay on kernels") {
  TwoVariables t;
  OptimizerSpec spec;
  spec.kind = OptimizerSpec::Kind::Sgd;
  spec.weight_decay = 0.1f;
  Optimizer opt(spec, t.layout);
  opt.apply(t.params, t.grads, 0.1f, 1);
  // g' = 0.5 + 0.1 * 1 = 0.6 -> 1 - 0.06; g' = -1 + 0.1 * -2 = -1.2 -> -2 + 0.12
  CHECK(t.p(0) == Approx(0.94f));
  CHECK(t.p(1) == Approx(-1.88f));
}

TEST_CASE("a layer's own weight decay replaces the optimizer's for its kernel") {
  OptimizerSpec spec;
  spec.kind = OptimizerSpec::Kind::Sgd;
  spec.weight_decay = 0.1f;
  LayerGraph graph = TwoVariables::makeGraph();
  graph.variables[0].weight_decay = 0.5f;
  const VariableLayout layout(graph.variables);
  CHECK(weightDecayOf(layout.views()[0], spec.weight_decay) == 0.5f);
  CHECK(weightDecayOf(layout.views()[1], spec.weight_decay) == 0.0f);  // a bias
  FlatBuffer params(layout.totalSize()), grads(layout.totalSize());
  params.data()[layout.views()[0].offset] = 1.0f;
  grads.data()[layout.views()[0].offset] = 0.5f;
  Optimizer opt(spec, layout);
  opt.apply(params, grads, 0.1f, 1);  // g' = 0.5 + 0.5 * 1 -> 1 - 0.1
  CHECK(params.data()[layout.views()[0].offset] == Approx(0.9f));
}

TEST_CASE("momentum, two steps") {
  TwoVariables t;
  OptimizerSpec spec;
  spec.kind = OptimizerSpec::Kind::Momentum;
  spec.momentum = 0.9f;
  Optimizer opt(spec, t.layout);
  opt.apply(t.params, t.grads, 0.1f, 1);  // a = 0.5;  p = 1 - 0.05 = 0.95
  opt.apply(t.params, t.grads, 0.1f, 2);  // a = 0.95; p = 0.95 - 0.095 = 0.855
  CHECK(t.p(0) == Approx(0.855f));
  CHECK(opt.slot(0).data()[t.layout.views()[0].offset] == Approx(0.95f));
  CHECK(opt.slotNames() == std::vector<std::string>{"momentum"});
}

TEST_CASE("nesterov momentum, two steps") {
  TwoVariables t;
  OptimizerSpec spec;
  spec.kind = OptimizerSpec::Kind::Momentum;
  spec.momentum = 0.9f;
  spec.nesterov = true;
  Optimizer opt(spec, t.layout);
  opt.apply(t.params, t.grads, 0.1f, 1);  // a = 0.5;  p = 1 - 0.1 * (0.5 + 0.45) = 0.905
  opt.apply(t.params, t.grads, 0.1f, 2);  // a = 0.95; p = 0.905 - 0.1 * (0.5 + 0.855) = 0.7695
  CHECK(t.p(0) == Approx(0.7695f));
}

TEST_CASE("adagrad, two steps") {
  TwoVariables t;
  OptimizerSpec spec;
  spec.kind = OptimizerSpec::Kind::Adagrad;
  spec.initial_accumulator = 0.1f;
  spec.epsilon = 0.0f;
  Optimizer opt(spec, t.layout);
  opt.apply(t.params, t.grads, 0.1f, 1);  // a = 0.35; p = 1 - 0.05 / sqrt(0.35)
  const double p1 = 1.0 - 0.05 / std::sqrt(0.35);
  CHECK(t.p(0) == Approx(p1));
  opt.apply(t.params, t.grads, 0.1f, 2);  // a = 0.6
  CHECK(t.p(0) == Approx(p1 - 0.05 / std::sqrt(0.6)));
  CHECK(t.p(1) == Approx(-2.0 + 0.1 / std::sqrt(1.1) + 0.1 / std::sqrt(2.1)));
}

TEST_CASE("adam, two steps with bias correction") {
  TwoVariables t;
  OptimizerSpec spec;
  spec.kind = OptimizerSpec::Kind::Adam;
  spec.epsilon = 1e-7f;
  Optimizer opt(spec, t.layout);
  opt.apply(t.params, t.grads, 0.01f, 1);
  // t=1: m = 0.05, v = 0.00025; lr_t = 0.01 * sqrt(0.001) / 0.1; step = lr_t * m / sqrt(v) = 0.01
  CHECK(t.p(0) == Approx(0.99f).epsilon(1e-5));
  CHECK(t.p(1) == Approx(-1.99f).epsilon(1e-5));
  opt.apply(t.params, t.grads, 0.01f, 2);
  // t=2: m = 0.095, v = 0.00049975; lr_t = 0.01 * sqrt(1 - 0.999^2) / (1 - 0.81)
  const double m = 0.095, v = 0.00049975;
  const double lr_t = 0.01 * std::sqrt(1 - 0.999 * 0.999) / (1 - 0.81);
  CHECK(t.p(0) == Approx(0.99 - lr_t * m / (std::sqrt(v) + 1e-7)).epsilon(1e-5));
  CHECK(opt.slotNames() == std::vector<std::string>{"m", "v"});
}

// tf.compat.v1.train.RMSPropOptimizer's rule: r starts at 1 (initial_rms),
// r += (g^2 - r)(1 - rho), a = momentum * a + lr * g / sqrt(r + eps), p -= a.
TEST_CASE("rmsprop, two steps with momentum") {
  TwoVariables t;
  OptimizerSpec spec;
  spec.kind = OptimizerSpec::Kind::RmsProp;
  spec.rho = 0.9f;
  spec.momentum = 0.5f;
  spec.epsilon = 0.01f;
  Optimizer opt(spec, t.layout);
  CHECK(opt.slotNames() == std::vector<std::string>{"rms", "momentum"});
  opt.apply(t.params, t.grads, 0.1f, 1);
  // g = 0.5: r = 1 + (0.25 - 1) * 0.1 = 0.925; a = 0.05 / sqrt(0.935); p = 1 - a
  const double a1 = 0.05 / std::sqrt(0.935);
  CHECK(t.p(0) == Approx(1.0 - a1));
  opt.apply(t.params, t.grads, 0.1f, 2);
  // r = 0.925 + (0.25 - 0.925) * 0.1 = 0.8575; a = 0.5 * a1 + 0.05 / sqrt(0.8675)
  const double a2 = 0.5 * a1 + 0.05 / std::sqrt(0.8675);
  CHECK(t.p(0) == Approx(1.0 - a1 - a2));
  const int64_t k = t.layout.views()[0].offset;
  CHECK(opt.slot(0).data()[k] == Approx(0.8575));
  CHECK(opt.slot(1).data()[k] == Approx(a2));
  // g = -1: r = 1 + (1 - 1) * 0.1 = 1 both times; a = -0.1 / sqrt(1.01), then 1.5 times that
  const double b1 = -0.1 / std::sqrt(1.01);
  CHECK(t.p(1) == Approx(-2.0 - b1 - 1.5 * b1));
  CHECK(t.bias() == 3.0f);  // frozen
}

TEST_CASE("centered rmsprop and a zero initial_rms (Keras' start)") {
  TwoVariables t;
  OptimizerSpec spec;
  spec.kind = OptimizerSpec::Kind::RmsProp;
  spec.rho = 0.9f;
  spec.momentum = 0.0f;
  spec.centered = true;
  spec.initial_rms = 0.0f;
  spec.epsilon = 1e-3f;
  Optimizer opt(spec, t.layout);
  CHECK(opt.slotNames() == std::vector<std::string>{"rms", "momentum", "mg"});
  opt.apply(t.params, t.grads, 0.1f, 1);
  // g = 0.5: r = 0.025, mg = 0.05; denominator 0.025 - 0.0025 + 0.001 = 0.0235
  const double p1 = 1.0 - 0.05 / std::sqrt(0.0235);
  CHECK(t.p(0) == Approx(p1));
  opt.apply(t.params, t.grads, 0.1f, 2);
  // r = 0.025 + 0.0225 = 0.0475, mg = 0.05 + 0.045 = 0.095; 0.0475 - 0.009025 + 0.001
  CHECK(t.p(0) == Approx(p1 - 0.05 / std::sqrt(0.039475)));
  const int64_t k = t.layout.views()[0].offset;
  CHECK(opt.slot(2).data()[k] == Approx(0.095));
}

TEST_CASE("moving average: after each update, fixed decay and num_updates, frozen untouched") {
  TwoVariables t;
  OptimizerSpec spec;
  spec.kind = OptimizerSpec::Kind::Momentum;
  spec.momentum = 0.5f;
  spec.moving_average = MovingAverageSpec{0.9f, false};
  Optimizer opt(spec, t.layout);
  CHECK(opt.slotNames() == std::vector<std::string>{"momentum", "ExponentialMovingAverage"});
  opt.startMovingAverage(t.params);  // averages start at (1, -2), bias 3
  const float* average = opt.movingAverage()->data() + t.layout.views()[0].offset;
  // lr 1: a = g = (0.5, -1), p = (0.5, -1); average = 0.9 * (1, -2) + 0.1 * p
  opt.apply(t.params, t.grads, 1.0f, 1);
  CHECK(average[0] == Approx(0.95f));
  CHECK(average[1] == Approx(-1.9f));
  // a = 0.5 * a + g = (0.75, -1.5), p = (-0.25, 0.5); average = 0.9 * avg + 0.1 * p
  opt.apply(t.params, t.grads, 1.0f, 2);
  CHECK(average[0] == Approx(0.9f * 0.95f + 0.1f * -0.25f));
  CHECK(average[1] == Approx(0.9f * -1.9f + 0.1f * 0.5f));
  CHECK(opt.movingAverage()->data()[t.layout.views()[1].offset] == 3.0f);  // frozen

  // num_updates: decay min(0.9, (1 + t) / (10 + t)) = 2/11 at t = 1.
  TwoVariables u;
  spec.kind = OptimizerSpec::Kind::Sgd;
  spec.moving_average = MovingAverageSpec{0.9f, true};
  Optimizer warm(spec, u.layout);
  warm.startMovingAverage(u.params);
  warm.apply(u.params, u.grads, 1.0f, 1);  // p = (0.5, -1)
  const float d = 2.0f / 11.0f;
  CHECK(warm.movingAverage()->data()[u.layout.views()[0].offset] ==
        Approx(d * 1.0f + (1 - d) * 0.5f));
  // applyRange, as a ps applies a chunk: the same rule on the range.
  TwoVariables r;
  Optimizer ranged(spec, r.layout);
  ranged.startMovingAverage(r.params);
  const int64_t k = r.layout.views()[0].offset;
  ranged.applyRange(r.params.data() + k, 0, k, 2, r.grads.data() + k, 1.0f, 1);
  CHECK(ranged.movingAverage()->data()[k] == Approx(d * 1.0f + (1 - d) * 0.5f));
  CHECK(ranged.movingAverage()->data()[k + 1] == Approx(d * -2.0f + (1 - d) * -1.0f));
}

TEST_CASE("applyRange with a copy out: the same update, its values copied there, frozen ones too") {
  using Kind = OptimizerSpec::Kind;
  for (Kind kind : {Kind::Sgd, Kind::Momentum, Kind::Adagrad, Kind::Adam, Kind::RmsProp})
    for (bool around_caches : {false, true}) {
      CAPTURE(int(kind), around_caches);
      OptimizerSpec spec;
      spec.kind = kind;
      spec.momentum = 0.5f;
      spec.nesterov = true;
      spec.centered = true;  // rmsprop's third slot
      spec.weight_decay = 0.1f;
      TwoVariables plain, copied;
      Optimizer a(spec, plain.layout), b(spec, copied.layout);
      std::vector<float> out(size_t(copied.layout.totalSize()), -99.0f);
      for (int64_t update = 1; update <= 2; ++update) {
        for (size_t v = 0; v < 2; ++v) {
          const VariableView& view = plain.layout.views()[v];
          a.applyRange(plain.params.data() + view.offset, v, view.offset, view.size,
                       plain.grads.data() + view.offset, 0.5f, update);
          b.applyRange(copied.params.data() + view.offset, v, view.offset, view.size,
                       copied.grads.data() + view.offset, 0.5f, update,
                       {out.data() + view.offset, around_caches});
        }
      }
      for (size_t v = 0; v < 2; ++v) {
        const VariableView& view = plain.layout.views()[v];
        for (int64_t i = view.offset; i < view.offset + view.size; ++i) {
          CHECK(copied.params.data()[i] == plain.params.data()[i]);
          CHECK(out[size_t(i)] == plain.params.data()[i]);
        }
      }
      CHECK(out[size_t(plain.layout.views()[1].offset)] == 3.0f);  // frozen: copied unchanged
      // The padding between the variables is not theirs: left alone.
      for (int64_t i = plain.layout.views()[0].offset + 2; i < plain.layout.views()[1].offset; ++i)
        CHECK(out[size_t(i)] == -99.0f);
    }
  // With a moving average the copy is of the parameters, not of the average.
  OptimizerSpec spec;
  spec.kind = Kind::Sgd;
  spec.moving_average = MovingAverageSpec{0.5f, false};
  TwoVariables t;
  Optimizer averaged(spec, t.layout);
  averaged.startMovingAverage(t.params);
  const int64_t k = t.layout.views()[0].offset;
  float out[2] = {0.0f, 0.0f};
  averaged.applyRange(t.params.data() + k, 0, k, 2, t.grads.data() + k, 1.0f, 1, {out});
  CHECK(out[0] == 0.5f);  // p = (1, -2) - (0.5, -1); the average is (0.75, -1.5)
  CHECK(out[1] == -1.0f);
  CHECK(averaged.movingAverage()->data()[k] == 0.75f);
}

TEST_CASE("applyRange around the caches: ranges over several blocks at any alignment") {
  // One kernel of 10007 elements: ranges that start off a 16-byte boundary
  // and span many of the 256-float blocks the streamed copy goes in.
  LayerGraph graph;
  VariableSpec kernel;
  kernel.name = "d/kernel";
  kernel.shape = {1, 10007};
  kernel.is_kernel = true;
  graph.variables = {kernel};
  VariableLayout layout(graph.variables);
  OptimizerSpec spec;
  spec.kind = OptimizerSpec::Kind::Adam;
  spec.weight_decay = 0.01f;
  spec.moving_average = MovingAverageSpec{0.9f, false};
  FlatBuffer plain(layout.totalSize()), streamed(layout.totalSize()), grads(layout.totalSize());
  for (int64_t i = 0; i < layout.totalSize(); ++i) {
    plain.data()[i] = streamed.data()[i] = 0.001f * float(i % 97) - 0.05f;
    grads.data()[i] = 0.002f * float(i % 89) - 0.08f;
  }
  Optimizer a(spec, layout), b(spec, layout);
  std::vector<float> out(size_t(layout.totalSize()) + 4, -99.0f);
  const int64_t base = layout.views()[0].offset;
  for (auto [offset, count] :
       {std::pair<int64_t, int64_t>{0, 10007}, {3, 5001}, {5, 1}, {6, 4100}}) {
    CAPTURE(offset, count);
    const int64_t at = base + offset;
    a.applyRange(plain.data() + at, 0, at, count, grads.data() + at, 0.1f, 1);
    b.applyRange(streamed.data() + at, 0, at, count, grads.data() + at, 0.1f, 1,
                 {out.data() + 1 + at, true});
    for (int64_t i = at; i < at + count; ++i) {
      REQUIRE(streamed.data()[i] == plain.data()[i]);
      REQUIRE(out[size_t(1 + i)] == plain.data()[i]);
      REQUIRE(b.slot(0).data()[i] == a.slot(0).data()[i]);
      REQUIRE(b.movingAverage()->data()[i] == a.movingAverage()->data()[i]);
    }
  }
  CHECK(out[0] == -99.0f);      // nothing before the ranges' copies
  CHECK(out.back() == -99.0f);  // nor after them
}

TEST_CASE("streamingCopy copies every length at every alignment of its destination") {
  std::vector<float> source(5000);
  for (size_t i = 0; i < source.size(); ++i) source[i] = float(i) + 0.5f;
  for (int64_t n : {0, 1, 3, 4, 5, 17, 2048, 4099})
    for (size_t skew = 0; skew < 4; ++skew) {
      CAPTURE(n, skew);
      std::vector<float> target(size_t(n) + 8, -1.0f);
      streamingCopy(target.data() + skew, source.data() + 1, n);
      streamingStoreFence();
      for (size_t i = 0; i < skew; ++i) REQUIRE(target[i] == -1.0f);
      for (int64_t i = 0; i < n; ++i) REQUIRE(target[skew + size_t(i)] == source[size_t(i) + 1]);
      for (size_t i = skew + size_t(n); i < target.size(); ++i) REQUIRE(target[i] == -1.0f);
    }
}

TEST_CASE("exponential decay, smooth and staircase") {
  LearningRateSpec lr;
  lr.kind = LearningRateSpec::Kind::ExponentialDecay;
  lr.initial = 0.1f;
  lr.decay_steps = 100;
  lr.decay_rate = 0.5f;
  CHECK(learningRateAt(lr, 0) == Approx(0.1f));
  CHECK(learningRateAt(lr, 150) == Approx(0.1 * std::pow(0.5, 1.5)));
  lr.staircase = true;
  CHECK(learningRateAt(lr, 150) == Approx(0.05f));
  CHECK(learningRateAt(lr, 200) == Approx(0.025f));
  lr.kind = LearningRateSpec::Kind::Constant;
  CHECK(learningRateAt(lr, 1000) == Approx(0.1f));
}

// Each schedule against its formula worked by hand (tf.compat.v1.train's
// functions of the same names; test/tensorflow_reference.py trains with
// them against TensorFlow itself).
TEST_CASE("inverse-time, piecewise-constant, polynomial and cosine decay") {
  using Kind = LearningRateSpec::Kind;
  LearningRateSpec lr;
  lr.initial = 0.1f;
  lr.decay_steps = 100;

  lr.kind = Kind::InverseTimeDecay;
  lr.decay_rate = 0.5f;
  CHECK(learningRateAt(lr, 0) == Approx(0.1f));
  CHECK(learningRateAt(lr, 150) == Approx(0.1 / 1.75));  // 1 + 0.5 * 1.5
  lr.staircase = true;
  CHECK(learningRateAt(lr, 150) == Approx(0.1 / 1.5));
  CHECK(learningRateAt(lr, 200) == Approx(0.05f));

  lr.kind = Kind::PiecewiseConstant;
  lr.boundaries = {10, 20};
  lr.values = {1.0f, 0.5f, 0.25f};
  // A boundary step still takes the value before it.
  for (const auto& [step, rate] :
       {std::pair{0, 1.0f}, std::pair{10, 1.0f}, std::pair{11, 0.5f}, std::pair{20, 0.5f},
        std::pair{21, 0.25f}, std::pair{1000, 0.25f}})
    CHECK(learningRateAt(lr, step) == rate);

  lr.kind = Kind::PolynomialDecay;
  lr.end_learning_rate = 0.02f;
  lr.power = 2.0f;
  CHECK(learningRateAt(lr, 0) == Approx(0.1f));
  CHECK(learningRateAt(lr, 50) == Approx(0.08 * 0.25 + 0.02));  // (1 - 0.5)^2
  CHECK(learningRateAt(lr, 100) == Approx(0.02f));
  CHECK(learningRateAt(lr, 250) == Approx(0.02f));
  // Cycling: at step 150 the decay runs over 200 steps, so p = 0.75.
  lr.cycle = true;
  CHECK(learningRateAt(lr, 0) == Approx(0.1f));
  CHECK(learningRateAt(lr, 100) == Approx(0.02f));
  CHECK(learningRateAt(lr, 150) == Approx(0.08 * 0.0625 + 0.02));
  CHECK(learningRateAt(lr, 101) > learningRateAt(lr, 100));

  lr.kind = Kind::CosineDecay;
  lr.alpha = 0.1f;
  CHECK(learningRateAt(lr, 0) == Approx(0.1f));
  CHECK(learningRateAt(lr, 50) == Approx(0.1 * (0.9 * 0.5 + 0.1)));  // cos(pi / 2) = 0
  CHECK(learningRateAt(lr, 100) == Approx(0.01f));
  CHECK(learningRateAt(lr, 500) == Approx(0.01f));
}
