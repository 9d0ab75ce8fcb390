#include "daemon/standard_output.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace traind {

namespace {
bool output_was_closed = false;  // openClosedStandardStreams found it so
}  // namespace

int exitAfterOutput(int code, const char* program) {
  if (output_was_closed) {
    std::fprintf(stderr, "%s: write error on standard output: it was closed\n", program);
    return code == 0 ? 1 : code;
  }
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  if (flushed && std::ferror(stdout) == 0) return code;
  // An earlier write may have failed and left the buffer empty: no errno
  // of its own then.
  const int error = errno;
  std::fprintf(stderr, "%s: write error on standard output: %s\n", program,
               !flushed && error != 0 ? std::strerror(error) : "an earlier write failed");
  return code == 0 ? 1 : code;
}

void openClosedStandardStreams() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    if (fd == 1) output_was_closed = true;
    // open takes the lowest free descriptor: this one. Without /dev/null
    // (a bare chroot) there is nothing better to point it at.
    const int opened = open("/dev/null", O_RDWR);
    if (opened >= 0 && opened != fd) close(opened);
  }
}

}  // namespace traind
