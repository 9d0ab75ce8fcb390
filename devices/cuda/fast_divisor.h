// Division by a divisor fixed for a whole launch as a multiply and a shift
// (Granlund and Montgomery, "Division by invariant integers using
// multiplication", 1994, theorem 4.2). The CUDA kernels that split flat
// indices into coordinates spend more on 32-bit divisions, about twenty
// instructions each on the GPU, than on their memory traffic.
//
//   const FastDivisor channels(c);         // on the host, once per launch
//   const int pixel = channels.divide(i);  // in the kernel: i / c
//
// Exact for numerators 0 <= n < 2^31 and divisors 1 <= d < 2^31: with
// l = ceil(log2 d) and m = ceil(2^(31 + l) / d), n / d = (n * m) >> (31 + l),
// m fits 32 bits and n * m 63. Header only, and plain C++ without nvcc, so
// that the CPU tests check it.
#pragma once

#include <cstdint>
#include <stdexcept>

#ifdef __CUDACC__
#define TRAIND_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TRAIND_HOST_DEVICE inline
#endif

namespace traind {

class FastDivisor {
 public:
  FastDivisor() = default;
  explicit FastDivisor(int divisor) : divisor_(divisor) {
    if (divisor < 1) throw std::invalid_argument("FastDivisor: a divisor under 1");
    while ((uint64_t(1) << shift_) < uint64_t(divisor)) ++shift_;
    multiplier_ = uint32_t(((uint64_t(1) << (31 + shift_)) + uint64_t(divisor) - 1) /
                           uint64_t(divisor));
  }

  TRAIND_HOST_DEVICE int divisor() const { return divisor_; }
  // n / divisor for 0 <= n < 2^31.
  TRAIND_HOST_DEVICE int divide(int n) const {
    return int((uint64_t(uint32_t(n)) * multiplier_) >> (31 + shift_));
  }

 private:
  int divisor_ = 1;
  uint32_t multiplier_ = uint32_t(1) << 31;
  uint32_t shift_ = 0;
};

}  // namespace traind

#undef TRAIND_HOST_DEVICE
