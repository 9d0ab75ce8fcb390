#include "core/compressed_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace traind {

bool CompressedFile::isGzipHeader(const unsigned char first[2]) {
  return first[0] == 0x1f && first[1] == 0x8b;
}

bool CompressedFile::isZlibHeader(const unsigned char first[2]) {
  const unsigned method = first[0] & 0x0f, window = first[0] >> 4;
  // A preset dictionary (FDICT, 0x20) is no TFRecord writer's: refused as a header.
  return method == Z_DEFLATED && window <= 7 && (first[1] & 0x20) == 0 &&
         ((unsigned(first[0]) << 8) | first[1]) % 31 == 0;
}

CompressedFile::CompressedFile(std::string path, Format format, const std::string& what)
    : path_(std::move(path)), format_(format) {
  std::error_code ec;
  if (std::filesystem::is_directory(path_, ec))
    throw InputError(path_ + ": is a directory, not " + what);
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw InputError(path_ + ": cannot open: " + std::strerror(errno));
  // 15: zlib's header and window; + 16: a gzip member's header instead.
  if (format_ != Format::Raw &&
      inflateInit2(&stream_, format_ == Format::Gzip ? 15 + 16 : 15) != Z_OK) {
    ::close(fd_);
    throw InputError(path_ + ": cannot open: no memory for zlib");
  }
  input_.resize(size_t(1) << 18);
}

CompressedFile::~CompressedFile() {
  if (format_ != Format::Raw) inflateEnd(&stream_);
  ::close(fd_);
}

size_t CompressedFile::read(void* dst, size_t bytes) {
  auto* out = static_cast<unsigned char*>(dst);
  size_t total = 0;
  while (total < bytes && error_.empty()) {
    if (format_ == Format::Raw) {
      const ssize_t got = ::read(fd_, out + total, std::min<size_t>(bytes - total, SSIZE_MAX));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) error_ = std::strerror(errno);
      if (got <= 0) break;
      total += size_t(got);
      produced_ += uint64_t(got);
    } else if (!inflateSome(out, bytes, total)) {
      break;
    }
  }
  return total;
}

bool CompressedFile::inflateSome(unsigned char* dst, size_t bytes, size_t& total) {
  if (stream_.avail_in == 0 && !readInput()) {
    if (!ended_ && error_.empty()) {
      error_ = "unexpected end of file";
      cut_short_ = true;
    }
    return false;
  }
  if (ended_) {
    // Only the file's end, or with gzip another member, may follow.
    if (format_ == Format::Zlib) {
      error_ = "bytes after the end of the zlib stream";
      return false;
    }
    inflateReset(&stream_);
    ended_ = false;
    in_next_member_ = true;
  }
  stream_.next_out = dst + total;
  const uInt room = uInt(std::min<size_t>(bytes - total, UINT_MAX));
  stream_.avail_out = room;
  const int status = inflate(&stream_, Z_NO_FLUSH);
  total += room - stream_.avail_out;
  produced_ += room - stream_.avail_out;
  if (room != stream_.avail_out) in_next_member_ = false;
  if (status == Z_STREAM_END) ended_ = true;
  if (status != Z_OK && status != Z_STREAM_END && status != Z_BUF_ERROR) {
    // What follows a gzip member and is not one is other bytes, not a
    // corrupt member.
    if (in_next_member_ && status == Z_DATA_ERROR)
      error_ = "bytes after the end of the gzip data";
    else if (status == Z_NEED_DICT)
      error_ = "a zlib stream that needs a preset dictionary";
    else
      error_ = stream_.msg ? stream_.msg : "corrupt compressed data";
    return false;
  }
  return true;
}

bool CompressedFile::readInput() {
  for (;;) {
    const ssize_t got = ::read(fd_, input_.data(), input_.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) error_ = std::strerror(errno);
    if (got <= 0) return false;
    stream_.next_in = input_.data();
    stream_.avail_in = uInt(got);
    return true;
  }
}

}  // namespace traind
