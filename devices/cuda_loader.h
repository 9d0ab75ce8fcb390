// Opens libtraind_cuda.so (devices/cuda/cuda_back_end.h) once, on first use.
// It is looked for, in order, at $TRAIND_CUDA_LIBRARY, beside the running
// executable, in <executable>/../lib/traind/ (scripts/install.sh), and where
// this build put it.
#pragma once

#include <string>

#include "devices/cuda/cuda_back_end.h"

namespace traind {

// Throws InputError naming `device` ("cuda:0") and every place tried when the
// library cannot be loaded.
const CudaBackEnd& loadCudaBackEnd(const std::string& device);

}  // namespace traind
