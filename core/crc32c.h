// CRC32C (Castagnoli), the checksum of TFRecord files (TensorBoard event
// files). zlib's crc32 uses another polynomial and cannot stand in for it.
#pragma once

#include <cstdint>
#include <string_view>

namespace traind {

// The CRC32C of `data`, continuing from `crc` (the CRC of the bytes before
// it; 0 to start): crc32c("123456789") == 0xe3069283. With SSE4.2's crc32
// instruction where the CPU has it (asked at run time), else by table.
uint32_t crc32c(std::string_view data, uint32_t crc = 0);

// The CRC32C of `value`'s four bytes, little-endian, continuing from `crc`:
// a CRC of CRCs, each of a part (a record) of something larger.
inline uint32_t crc32cOfWord(uint32_t value, uint32_t crc) {
  const char bytes[4] = {char(value), char(value >> 8), char(value >> 16), char(value >> 24)};
  return crc32c(std::string_view(bytes, sizeof bytes), crc);
}

// The same CRC by table, whatever the CPU: what crc32c is tested against on
// a CPU where it takes the instruction.
uint32_t crc32cPortable(std::string_view data, uint32_t crc = 0);

// TFRecord (and LevelDB) store CRCs masked, since a CRC computed over bytes
// that themselves contain CRCs is weak: rotate right by 15 bits, add a constant.
inline constexpr uint32_t maskCrc32c(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

inline constexpr uint32_t unmaskCrc32c(uint32_t masked) {
  const uint32_t rotated = masked - 0xa282ead8u;
  return (rotated >> 17) | (rotated << 15);
}

}  // namespace traind
