#include "core/tfrecord.h"

#include <fmt/format.h>

#include <cstdint>

#include "core/crc32c.h"
#include "core/error.h"

namespace traind {
namespace {

template <typename T>
void appendLittleEndian(T value, std::string& out) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(char(uint8_t(value >> (8 * i))));
}

template <typename T>
T readLittleEndian(std::string_view bytes) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) value |= T(uint8_t(bytes[i])) << (8 * i);
  return value;
}

}  // namespace

void appendTfRecord(std::string_view data, std::string& out) {
  const size_t start = out.size();
  appendLittleEndian<uint64_t>(data.size(), out);
  appendLittleEndian<uint32_t>(maskCrc32c(crc32c(std::string_view(out).substr(start, 8))), out);
  out.append(data);
  appendLittleEndian<uint32_t>(maskCrc32c(crc32c(data)), out);
}

std::vector<std::string_view> splitTfRecords(std::string_view bytes, std::string_view file) {
  std::vector<std::string_view> records;
  size_t offset = 0;
  while (offset < bytes.size()) {
    const auto fail = [&](std::string_view what) {
      throw InputError(
          fmt::format("{}: record {} at byte {}: {}", file, records.size(), offset, what));
    };
    const std::string_view rest = bytes.substr(offset);
    if (rest.size() < kTfRecordHeaderSize)
      fail(fmt::format("expected a {}-byte record header, found {} bytes before the end",
                       kTfRecordHeaderSize, rest.size()));
    const uint64_t length = readLittleEndian<uint64_t>(rest);
    const uint32_t length_crc = readLittleEndian<uint32_t>(rest.substr(8));
    if (length_crc != maskCrc32c(crc32c(rest.substr(0, 8))))
      fail("the CRC of the length does not match (a damaged file, or not a TFRecord file)");
    const size_t available = rest.size() - kTfRecordHeaderSize;
    if (available < kTfRecordFooterSize || length > available - kTfRecordFooterSize)
      fail(
          fmt::format("the record declares {} bytes of data and a {}-byte CRC, but only {} bytes "
                      "follow its header",
                      length, kTfRecordFooterSize, available));
    const std::string_view data = rest.substr(kTfRecordHeaderSize, size_t(length));
    const uint32_t data_crc = readLittleEndian<uint32_t>(rest.substr(kTfRecordHeaderSize + length));
    if (data_crc != maskCrc32c(crc32c(data))) fail("the CRC of the data does not match");
    records.push_back(data);
    offset += kTfRecordHeaderSize + size_t(length) + kTfRecordFooterSize;
  }
  return records;
}

}  // namespace traind
