// A data file read through zlib, gzip-compressed or raw alike: data sets
// come either way (train-images-idx3-ubyte.gz, a TFRecord file written
// with GZIP compression or without), told apart by their magic bytes, not
// by their names.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

struct gzFile_s;

namespace traind {

class GzipFile {
 public:
  // InputError naming `path` if it is a directory or cannot be opened.
  // `what` names the file's kind in that message ("an IDX file").
  GzipFile(std::string path, const std::string& what);
  ~GzipFile();
  GzipFile(const GzipFile&) = delete;
  GzipFile& operator=(const GzipFile&) = delete;

  // Up to `bytes` bytes; fewer only at the end of the file or on a gzip
  // error, which status() and error() then report.
  size_t read(void* dst, size_t bytes);

  // zlib's status of the stream: Z_OK, Z_BUF_ERROR for a gzip stream cut
  // short (what it held was read), another error for a corrupt one.
  int status() const;
  // zlib's message for that status, "" for Z_OK.
  std::string error() const;

  const std::string& path() const { return path_; }

 private:
  struct Closer {
    void operator()(gzFile_s* file) const;
  };
  std::string path_;
  std::unique_ptr<gzFile_s, Closer> file_;
};

}  // namespace traind
