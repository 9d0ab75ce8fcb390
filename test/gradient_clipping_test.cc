// Clipping by global norm against values worked out by hand from
// tf.clip_by_global_norm (test/tensorflow_reference.py trains with it
// against TensorFlow itself).
#include "core/gradient_clipping.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"

using namespace traind;

namespace {

VariableSpec variable(const std::string& name, const Shape& shape) {
  VariableSpec v;
  v.name = name;
  v.shape = shape;
  return v;
}

// A kernel of two elements, a bias of one and a frozen kernel of one.
struct ThreeVariables {
  VariableLayout layout;
  std::vector<float> gradients, parameters;

  ThreeVariables() : layout(variables()) {
    gradients.assign(size_t(layout.totalSize()), 0.0f);
    parameters.assign(size_t(layout.totalSize()), 0.0f);
    set(gradients, {3.0f, 0.0f}, {4.0f}, {100.0f});
    set(parameters, {1.0f, -2.0f}, {5.0f}, {7.0f});
  }
  static std::vector<VariableSpec> variables() {
    VariableSpec kernel = variable("d/kernel", {1, 2});
    kernel.is_kernel = true;
    const VariableSpec bias = variable("d/bias", {1});
    VariableSpec frozen = variable("f/kernel", {1});
    frozen.is_kernel = true;
    frozen.trainable = false;
    return {kernel, bias, frozen};
  }
  void set(std::vector<float>& buffer, std::vector<float> kernel, std::vector<float> bias,
           std::vector<float> frozen) const {
    const std::vector<float>* values[] = {&kernel, &bias, &frozen};
    for (size_t v = 0; v < 3; ++v)
      for (size_t i = 0; i < values[v]->size(); ++i)
        buffer[size_t(layout.views()[v].offset) + i] = (*values[v])[i];
  }
  float gradient(size_t variable, int64_t i = 0) const {
    return gradients[size_t(layout.views()[variable].offset + i)];
  }
  double clip(float clip_norm, float weight_decay = 0.0f) {
    return clipByGlobalNorm(gradients.data(), parameters.data(), layout, clip_norm, weight_decay,
                            7);
  }
};

}  // namespace

TEST_CASE("a gradient within the norm is left as it is") {
  ThreeVariables t;
  CHECK(t.clip(5.0f) == Approx(5.0));  // sqrt(3^2 + 4^2); the frozen kernel is not counted
  CHECK(t.gradient(0) == 3.0f);
  CHECK(t.gradient(1) == 4.0f);
  CHECK(t.clip(6.0f) == Approx(5.0));
  CHECK(t.gradient(0) == 3.0f);
}

TEST_CASE("a gradient above the norm is scaled to it, frozen variables untouched") {
  ThreeVariables t;
  CHECK(t.clip(1.0f) == Approx(5.0));
  CHECK(t.gradient(0) == Approx(0.6f));
  CHECK(t.gradient(0, 1) == 0.0f);
  CHECK(t.gradient(1) == Approx(0.8f));
  CHECK(t.gradient(2) == 100.0f);
}

TEST_CASE("with weight decay the norm and the clipping are those of g + decay * kernel") {
  ThreeVariables t;
  // Kernel g + 0.5 p = (3.5, -1), bias 4: norm sqrt(12.25 + 1 + 16) = sqrt(29.25).
  const double norm = std::sqrt(29.25);
  CHECK(t.clip(2.0f, 0.5f) == Approx(norm));
  const double s = 2.0 / norm;
  // What the update rule then adds, 0.5 p, brings the kernel's to s (g + 0.5 p).
  CHECK(t.gradient(0) + 0.5 * 1.0 == Approx(s * 3.5));
  CHECK(t.gradient(0, 1) + 0.5 * -2.0 == Approx(s * -1.0));
  CHECK(t.gradient(1) == Approx(s * 4.0));  // biases have no decay
  CHECK(t.gradient(2) == 100.0f);
}

TEST_CASE("a norm that is not finite is an error naming the step, the gradient left as it was") {
  ThreeVariables t;
  t.gradients[size_t(t.layout.views()[0].offset)] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_WITH(t.clip(1.0f),
                    "step 7: the gradient's global norm is inf; lower the learning "
                    "rate or check the data");
  CHECK_THROWS_AS(t.clip(1.0f), Diverged);  // exit 3: running it again would not help
  CHECK(std::isinf(t.gradient(0)));
  CHECK(t.gradient(1) == 4.0f);
}

TEST_CASE("a large variable is summed and scaled alike on several threads") {
  VariableSpec kernel = variable("big/kernel", {1000, 300});
  kernel.is_kernel = true;
  const VariableLayout layout({kernel});
  std::vector<float> gradients(size_t(layout.totalSize()), 0.01f);
  const std::vector<float> parameters(gradients.size(), 0.0f);
  // 300000 values of 0.01: a norm of 0.01 * sqrt(300000).
  const double norm = clipByGlobalNorm(gradients.data(), parameters.data(), layout, 1.0f, 0.0f, 1);
  CHECK(norm == Approx(0.01 * std::sqrt(300000.0)));
  for (float g : gradients) REQUIRE(g == Approx(0.01 / norm));
}
