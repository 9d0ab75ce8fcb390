// Counter-based random numbers: a value is a pure function of (seed, stream,
// index), so initialisers, shuffles and dropout masks are reproducible in any
// order, on any thread, and after a restart from a checkpoint.
#pragma once

#include <cstdint>
#include <string_view>

namespace traind {

// SplitMix64's finaliser: a bijective 64-bit mix.
constexpr uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

constexpr uint64_t hashCombine(uint64_t a, uint64_t b) { return mix64(a ^ mix64(b)); }

// FNV-1a, to turn a variable or layer name into a stream id.
constexpr uint64_t hashString(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) h = (h ^ uint8_t(c)) * 0x100000001b3ull;
  return h;
}

// Uniform in [0, 1) with 24 random bits, as float.
inline float uniformFloat(uint64_t stream, uint64_t index) {
  return float(hashCombine(stream, index) >> 40) * (1.0f / 16777216.0f);
}

// Sequential generator for the places that want one (shuffles, data synthesis).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() { return mix64(state_++); }
  // Uniform in [0, n), n > 0 (Lemire's multiply-shift; bias < 2^-32 for our n).
  uint64_t below(uint64_t n) { return uint64_t((unsigned __int128)(next()) * n >> 64); }
  double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }
  double normal();  // standard normal, Box-Muller

 private:
  uint64_t state_;
};

}  // namespace traind
