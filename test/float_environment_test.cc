// Denormal floats flushed to zero in traind's threads (core/float_environment.h).
#include "core/float_environment.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <thread>
#include <vector>

#include "core/optimizer.h"

using namespace traind;

TEST_CASE("a first moment of Adam that decays into the denormals is zero where they are flushed") {
  // One trainable variable of two elements: m = 0.05 after an update with
  // g = 0.5, then 0.9^850 of that under zero gradients (a dead ReLU unit's
  // weight): about 7e-41, a denormal float.
  auto decayedMoment = [] {
    VariableSpec kernel;
    kernel.name = "d/kernel";
    kernel.shape = {1, 2};
    kernel.is_kernel = true;
    const VariableLayout layout({kernel});
    FlatBuffer parameters(layout.totalSize());
    OptimizerSpec spec;
    spec.kind = OptimizerSpec::Kind::Adam;
    Optimizer adam(spec, layout);
    std::vector<float> gradient(2, 0.5f);
    adam.applyRange(parameters.data(), 0, 0, 2, gradient.data(), 0.01f, 1);
    std::fill(gradient.begin(), gradient.end(), 0.0f);
    for (int64_t update = 2; update <= 851; ++update)
      adam.applyRange(parameters.data(), 0, 0, 2, gradient.data(), 0.01f, update);
    return adam.slot(0).data()[0];
  };
  REQUIRE_FALSE(flushesDenormalsToZero());  // a test binary keeps them
  CHECK(std::fpclassify(decayedMoment()) == FP_SUBNORMAL);
  // traind's main flushes them before it starts a thread: its threads, and
  // the threads they start, inherit that.
  float flushed = -1.0f;
  bool inherited = false;
  std::thread main_thread([&] {
    flushDenormalsToZero();
    std::thread([&] {
      inherited = flushesDenormalsToZero();
      flushed = decayedMoment();
    }).join();
  });
  main_thread.join();
  CHECK(inherited);
  CHECK(flushed == 0.0f);
  CHECK_FALSE(flushesDenormalsToZero());  // nor did this thread change
}
