// Shapes of tensors. Per-example shapes leave the batch dimension out;
// images are HWC (NHWC with the batch), as in TensorFlow.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace traind {

using Shape = std::vector<int64_t>;

int64_t numElements(const Shape& shape);
// numElements of a shape nothing has bounded yet: INT64_MAX when the product
// does not fit in int64 (or a dimension is negative), instead of wrapping.
int64_t numElementsSaturated(const Shape& shape);

// "[28, 28, 1]"
std::string shapeToString(const Shape& shape);

}  // namespace traind
