// TFRecord framing: the container of TensorBoard event files and of
// TensorFlow's TFRecordDataset (training examples as tf.train.Example).
// A file is a sequence of records, each
//
//   uint64  length                 little-endian
//   uint32  masked crc32c(length)  over the 8 length bytes, little-endian
//   byte    data[length]
//   uint32  masked crc32c(data)    little-endian
//
// with the masking of core/crc32c.h. The writer and the reader below share
// these constants.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace traind {

inline constexpr size_t kTfRecordHeaderSize = 12;  // length and its CRC
inline constexpr size_t kTfRecordFooterSize = 4;   // CRC of the data

// Appends `data` to `out` as one framed record.
void appendTfRecord(std::string_view data, std::string& out);

// True if `header` (kTfRecordHeaderSize bytes) is a record's header: a
// length and its CRC.
bool isTfRecordHeader(const char* header);

// Reads the records of one stream of bytes (a file, raw or decompressed as
// it is read), one after another, checking each record's framing and both
// CRCs. Errors are InputError naming `file`, the record's index and byte
// offset and what is wrong: a record cut short, a length past
// `max_length`, a CRC that does not match. Memory grows with the bytes a
// record really holds, never with the length it declares.
class TfRecordReader {
 public:
  // Fills `dst` with up to `bytes` bytes, fewer only at the end of the
  // stream; throws InputError on a read error.
  using Source = std::function<size_t(char* dst, size_t bytes)>;

  TfRecordReader(Source source, std::string file, uint64_t max_length);

  // The next record's data into `data` (its capacity reused); false, with
  // `data` left empty, at the end of the stream after a whole record.
  bool next(std::string& data);

  int64_t recordsRead() const { return records_; }
  uint64_t bytesRead() const { return offset_; }  // of the stream, whole records
  // The CRC-32C (unmasked) of the last record's data, checked.
  uint32_t lastDataCrc() const { return last_data_crc_; }

 private:
  [[noreturn]] void fail(std::string_view what) const;

  Source source_;
  std::string file_;
  uint64_t max_length_;
  int64_t records_ = 0;
  uint64_t offset_ = 0;  // where the next record starts
  uint32_t last_data_crc_ = 0;
};

// The data of the one record `framed` holds (header, data, footer, and
// nothing else), its length and both CRCs checked, the data's CRC-32C
// (unmasked) also against `data_crc`, known from an earlier read; nullopt
// where any does not match.
std::optional<std::string_view> recordData(std::string_view framed, uint32_t data_crc);

// The data of every record in `bytes` (a whole file), in order, as
// TfRecordReader reads them.
std::vector<std::string> splitTfRecords(std::string_view bytes, std::string_view file);

}  // namespace traind
