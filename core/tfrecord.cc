#include "core/tfrecord.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/crc32c.h"
#include "core/error.h"

namespace traind {
namespace {

template <typename T>
void appendLittleEndian(T value, std::string& out) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(char(uint8_t(value >> (8 * i))));
}

template <typename T>
T readLittleEndian(const char* bytes) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) value |= T(uint8_t(bytes[i])) << (8 * i);
  return value;
}

// A record's data is read in pieces of at most this much, its buffer grown
// as they arrive: a length that lies costs no memory.
constexpr size_t kReadPiece = size_t(1) << 20;

}  // namespace

void appendTfRecord(std::string_view data, std::string& out) {
  const size_t start = out.size();
  appendLittleEndian<uint64_t>(data.size(), out);
  appendLittleEndian<uint32_t>(maskCrc32c(crc32c(std::string_view(out).substr(start, 8))), out);
  out.append(data);
  appendLittleEndian<uint32_t>(maskCrc32c(crc32c(data)), out);
}

bool isTfRecordHeader(const char* header) {
  return readLittleEndian<uint32_t>(header + sizeof(uint64_t)) ==
         maskCrc32c(crc32c(std::string_view(header, sizeof(uint64_t))));
}

TfRecordReader::TfRecordReader(Source source, std::string file, uint64_t max_length)
    : source_(std::move(source)), file_(std::move(file)), max_length_(max_length) {}

void TfRecordReader::fail(std::string_view what) const {
  throw InputError(fmt::format("{}: record {} at byte {}: {}", file_, records_, offset_, what));
}

bool TfRecordReader::next(std::string& data) {
  data.clear();
  char header[kTfRecordHeaderSize];
  const size_t got = source_(header, sizeof header);
  if (got == 0) return false;
  if (got < sizeof header)
    fail(fmt::format("expected a {}-byte record header, found {} bytes before the end",
                     kTfRecordHeaderSize, got));
  const uint64_t length = readLittleEndian<uint64_t>(header);
  if (!isTfRecordHeader(header))
    fail("the CRC of the length does not match (a damaged file, or not a TFRecord file)");
  if (length > max_length_)
    fail(
        fmt::format("the record declares {} bytes of data, more than the {} a record may hold here",
                    length, max_length_));

  // The data and its CRC, read as they arrive.
  const uint64_t wanted = length + kTfRecordFooterSize;
  uint64_t have = 0;
  while (have < wanted) {
    data.resize(size_t(std::min<uint64_t>(wanted, have + kReadPiece)));
    const size_t piece = source_(data.data() + have, data.size() - have);
    have += piece;
    if (piece == 0) break;
  }
  if (have < wanted)
    fail(
        fmt::format("the record declares {} bytes of data and a {}-byte CRC, but only {} bytes "
                    "follow its header",
                    length, kTfRecordFooterSize, have));
  const uint32_t data_crc = readLittleEndian<uint32_t>(data.data() + length);
  data.resize(size_t(length));
  last_data_crc_ = crc32c(data);
  if (data_crc != maskCrc32c(last_data_crc_)) fail("the CRC of the data does not match");
  ++records_;
  offset_ += kTfRecordHeaderSize + length + kTfRecordFooterSize;
  return true;
}

std::optional<std::string_view> recordData(std::string_view framed, uint32_t data_crc) {
  constexpr size_t kFraming = kTfRecordHeaderSize + kTfRecordFooterSize;
  if (framed.size() < kFraming || !isTfRecordHeader(framed.data()) ||
      readLittleEndian<uint64_t>(framed.data()) != framed.size() - kFraming)
    return std::nullopt;
  const std::string_view data = framed.substr(kTfRecordHeaderSize, framed.size() - kFraming);
  const uint32_t crc = crc32c(data);
  if (crc != data_crc || readLittleEndian<uint32_t>(framed.data() + framed.size() -
                                                    kTfRecordFooterSize) != maskCrc32c(crc))
    return std::nullopt;
  return data;
}

std::vector<std::string> splitTfRecords(std::string_view bytes, std::string_view file) {
  size_t position = 0;
  TfRecordReader reader(
      [&](char* dst, size_t wanted) {
        const size_t n = std::min(wanted, bytes.size() - position);
        std::memcpy(dst, bytes.data() + position, n);
        position += n;
        return n;
      },
      std::string(file), bytes.size());
  std::vector<std::string> records;
  std::string data;
  while (reader.next(data)) records.push_back(data);
  return records;
}

}  // namespace traind
