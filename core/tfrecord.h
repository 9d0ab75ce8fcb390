// TFRecord framing: the container of TensorBoard event files (and of
// TensorFlow's TFRecordDataset). A file is a sequence of records, each
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
#include <string>
#include <string_view>
#include <vector>

namespace traind {

inline constexpr size_t kTfRecordHeaderSize = 12;  // length and its CRC
inline constexpr size_t kTfRecordFooterSize = 4;   // CRC of the data

// Appends `data` to `out` as one framed record.
void appendTfRecord(std::string_view data, std::string& out);

// The data of every record in `bytes` (a whole file), in order, as views into
// `bytes`. Throws InputError naming `file`, the record's index and byte
// offset and what is wrong: a record cut short, a length that runs past the
// end, a CRC that does not match. Nothing is allocated on a declared length
// before it is checked against the bytes there are.
std::vector<std::string_view> splitTfRecords(std::string_view bytes, std::string_view file);

}  // namespace traind
