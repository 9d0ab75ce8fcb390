// Shapes of tensors. Per-example shapes leave the batch dimension out;
// images are HWC (NHWC with the batch), as in TensorFlow.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace traind {

using Shape = std::vector<int64_t>;

int64_t numElements(const Shape& shape);

// "[28, 28, 1]"
std::string shapeToString(const Shape& shape);

}  // namespace traind
