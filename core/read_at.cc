#include "core/read_at.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/error.h"

namespace traind {

void readExactlyAt(int fd, uint64_t offset, std::byte* dst, uint64_t size,
                   const std::filesystem::path& path) {
  while (size > 0) {
    const ssize_t got = ::pread(fd, dst, size, off_t(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw InputError(path.string() + ": cannot read: " + std::strerror(errno));
    if (got == 0)
      throw InputError(path.string() +
                       ": file ended early while reading it (is it being written?)");
    dst += got;
    offset += uint64_t(got);
    size -= uint64_t(got);
  }
}

}  // namespace traind
