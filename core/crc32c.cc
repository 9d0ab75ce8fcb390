#include "core/crc32c.h"

#include <array>

namespace traind {
namespace {

// Byte-at-a-time table of the reflected polynomial 0x82f63b78. Summaries are
// a few hundred bytes per log line, far too little for slicing-by-8 or the
// SSE4.2 instruction to matter.
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

}  // namespace

uint32_t crc32c(std::string_view data, uint32_t crc) {
  crc = ~crc;
  for (const char c : data) crc = kTable[(crc ^ uint8_t(c)) & 0xffu] ^ (crc >> 8);
  return ~crc;
}

}  // namespace traind
