#include "devices/cuda/fast_divisor.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <vector>

namespace traind {
namespace {

// The numerators where a multiply-and-shift division goes wrong first: the
// ends of the range and each side of multiples of the divisor.
std::vector<int> edgeNumerators(int d) {
  std::vector<int> n = {0, 1, 2, INT32_MAX, INT32_MAX - 1};
  for (int64_t q : {int64_t(1), int64_t(2), int64_t(3), int64_t(INT32_MAX) / d - 1,
                    int64_t(INT32_MAX) / d})
    for (int64_t delta : {-1, 0, 1}) {
      const int64_t v = q * d + delta;
      if (v >= 0 && v <= INT32_MAX) n.push_back(int(v));
    }
  return n;
}

void checkDivisor(int d, std::mt19937& rng) {
  const FastDivisor divisor(d);
  std::uniform_int_distribution<int> any(0, INT32_MAX);
  std::vector<int> numerators = edgeNumerators(d);
  for (int k = 0; k < 200; ++k) numerators.push_back(any(rng));
  for (int n : numerators) {
    const int q = divisor.divide(n);
    if (q != n / d) {
      INFO("n = " << n << ", d = " << d << ": got " << q);
      FAIL("wrong quotient");
    }
  }
}

TEST_CASE("FastDivisor divides exactly over every 31-bit numerator tried") {
  std::mt19937 rng(11);
  for (int d = 1; d <= 4096; ++d) checkDivisor(d, rng);
  std::uniform_int_distribution<int> large(4097, INT32_MAX);
  for (int k = 0; k < 2000; ++k) checkDivisor(large(rng), rng);
  for (int p = 12; p <= 30; ++p)
    for (int delta : {-1, 0, 1}) checkDivisor((1 << p) + delta, rng);
  checkDivisor(INT32_MAX, rng);
}

TEST_CASE("FastDivisor refuses a divisor under 1") {
  CHECK_THROWS_AS(FastDivisor(0), std::invalid_argument);
  CHECK_THROWS_AS(FastDivisor(-3), std::invalid_argument);
}

}  // namespace
}  // namespace traind
