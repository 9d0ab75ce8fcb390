#include "daemon/standard_output.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace traind {

int exitAfterOutput(int code, const char* program) {
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

}  // namespace traind
