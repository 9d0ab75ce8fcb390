// Data files read through zlib. Data sets come compressed or raw
// (train-images-idx3-ubyte.gz; TFRecord files written with
// TFRecordOptions' GZIP, ZLIB or no compression), told apart by their first
// bytes, not by their names.
#pragma once

#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace traind {

// A file read raw, or decompressed from one or more gzip members (RFC
// 1952) or from one zlib stream (RFC 1950): the three ways TensorFlow's
// TFRecordOptions writes a TFRecord file (compression_type "", "GZIP",
// "ZLIB"), and an IDX file raw or gzipped. The caller chooses, as a
// TFRecord file's first bytes can look like a gzip or zlib header; bytes
// after the compressed data are an error (a file damaged in transfer).
class CompressedFile {
 public:
  enum class Format { Raw, Gzip, Zlib };

  // InputError naming `path` if it is a directory or cannot be opened.
  // `what` names the file's kind in that message ("a TFRecord file").
  CompressedFile(std::string path, Format format, const std::string& what);
  ~CompressedFile();
  CompressedFile(const CompressedFile&) = delete;
  CompressedFile& operator=(const CompressedFile&) = delete;

  // Up to `bytes` bytes; fewer only at the end of the data or on an error,
  // which error() then reports.
  size_t read(void* dst, size_t bytes);

  // What went wrong, "" for nothing: a read error, the compressed data cut
  // short, corrupt, or followed by other bytes.
  const std::string& error() const { return error_; }
  // Whether the error is the compressed data cut short: what came before
  // the cut was read, and counts.
  bool cutShort() const { return cut_short_; }
  Format format() const { return format_; }
  // The bytes read() has given.
  uint64_t produced() const { return produced_; }

  // Whether the file's first two bytes can start a gzip member, or a zlib
  // stream (deflate, a window of at most 32 KiB, no preset dictionary, the
  // header's check bits).
  static bool isGzipHeader(const unsigned char first[2]);
  static bool isZlibHeader(const unsigned char first[2]);

 private:
  // Refills the input buffer from the file; false at its end or on an error.
  bool readInput();
  // Decompresses into `dst`; false once no more will come.
  bool inflateSome(unsigned char* dst, size_t bytes, size_t& total);

  std::string path_;
  Format format_;
  int fd_ = -1;
  z_stream stream_{};
  std::vector<unsigned char> input_;
  bool ended_ = false;  // a gzip member or the zlib stream ended, nothing after it yet
  bool in_next_member_ = false;  // past a gzip member, nothing of the next one given yet
  bool cut_short_ = false;
  uint64_t produced_ = 0;
  std::string error_;
};

}  // namespace traind
