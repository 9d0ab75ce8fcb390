#include "bench/machine_load.h"

#include <unistd.h>

#include <cstdio>

namespace traind {

double busyCpuSeconds() {
  std::FILE* f = std::fopen("/proc/stat", "r");
  if (!f) return 0.0;
  unsigned long long v[8] = {};
  const int got = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                              &v[3], &v[4], &v[5], &v[6], &v[7]);
  std::fclose(f);
  if (got != 8) return 0.0;
  const unsigned long long idle = v[3] + v[4];  // idle + iowait
  unsigned long long total = 0;
  for (unsigned long long x : v) total += x;
  return double(total - idle) / double(sysconf(_SC_CLK_TCK));
}

}  // namespace traind
