#include "core/gzip_file.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace traind {

void GzipFile::Closer::operator()(gzFile_s* file) const { gzclose(file); }

GzipFile::GzipFile(std::string path, const std::string& what) : path_(std::move(path)) {
  std::error_code ec;
  if (std::filesystem::is_directory(path_, ec))
    throw InputError(path_ + ": is a directory, not " + what);
  errno = 0;
  file_.reset(gzopen(path_.c_str(), "rb"));
  if (!file_) throw InputError(path_ + ": cannot open: " + std::strerror(errno ? errno : ENOMEM));
  gzbuffer(file_.get(), 1 << 18);
}

GzipFile::~GzipFile() = default;

size_t GzipFile::read(void* dst, size_t bytes) {
  size_t total = 0;
  while (total < bytes) {
    const unsigned chunk = unsigned(std::min<size_t>(bytes - total, INT_MAX));
    const int got = gzread(file_.get(), static_cast<char*>(dst) + total, chunk);
    if (got <= 0) break;
    total += size_t(got);
  }
  return total;
}

int GzipFile::status() const {
  int status = Z_OK;
  gzerror(file_.get(), &status);
  return status;
}

std::string GzipFile::error() const {
  int status = Z_OK;
  std::string message = gzerror(file_.get(), &status);
  if (status == Z_OK) return "";
  if (status == Z_ERRNO) return std::strerror(errno);
  // zlib puts the path in front; the caller does too.
  if (message.starts_with(path_ + ": ")) message.erase(0, path_.size() + 2);
  return message;
}

}  // namespace traind
