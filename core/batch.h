// One batch of examples as the input pipeline hands it to a device.
#pragma once

#include <cstdint>

namespace traind {

struct Batch {
  int64_t size = 0;                 // examples
  const float* inputs = nullptr;    // [size, input...] row-major (NHWC for images)
  const int32_t* labels = nullptr;  // [size] class indices (classification), else nullptr
  const float* targets = nullptr;   // [size, outputs] (regression), else nullptr
};

}  // namespace traind
