#include "core/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace traind {
namespace {

// Byte-at-a-time table of the reflected polynomial 0x82f63b78.
constexpr std::array<uint32_t, 256> makeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? 0x82f63b78u : 0u);
    table[i] = crc;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = makeTable();

// Works on the inverted CRC, as both implementations do between the
// inversions at either end.
uint32_t tableUpdate(uint32_t crc, const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) crc = kTable[(crc ^ p[i]) & 0xffu] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
// SSE4.2's crc32 instruction computes this very polynomial, eight bytes a
// step: about 20 times the table's rate, which is most of a TFRecord set's
// checking (every record's bytes) and of a TensorFlow checkpoint's import.
// One dependent chain of instructions reaches several GB/s, more than
// decompression or decoding deliver, so the three-way interleaving of
// Intel's white paper would not show.
__attribute__((target("sse4.2"))) uint32_t instructionUpdate(uint32_t crc, const unsigned char* p,
                                                             size_t n) {
  uint64_t wide = crc;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, sizeof word);  // unaligned; little-endian as the CRC reads bytes
    wide = _mm_crc32_u64(wide, word);
  }
  crc = uint32_t(wide);
  for (; n > 0; ++p, --n) crc = _mm_crc32_u8(crc, *p);
  return crc;
}

// Asked once: every x86-64 CPU since 2008 (Nehalem, Bulldozer) has it, but
// the baseline x86-64 the package is built for does not promise it. A
// function's static, so that a CRC taken by another static initialiser
// still finds the CPU's features read (__builtin_cpu_init).
bool hasCrcInstruction() {
  static const bool has = (__builtin_cpu_init(), __builtin_cpu_supports("sse4.2"));
  return has;
}
#endif

}  // namespace

uint32_t crc32c(std::string_view data, uint32_t crc) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(data.data());
#if defined(__x86_64__)
  if (hasCrcInstruction()) return ~instructionUpdate(~crc, bytes, data.size());
#endif
  return ~tableUpdate(~crc, bytes, data.size());
}

uint32_t crc32cPortable(std::string_view data, uint32_t crc) {
  return ~tableUpdate(~crc, reinterpret_cast<const unsigned char*>(data.data()), data.size());
}

}  // namespace traind
