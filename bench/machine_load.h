// How busy the machine is, for benchmarks that report the CPU the rest of
// the machine used during a measurement ("others", in cores):
//
//   const double busy = busyCpuSeconds();
//   ... measure ...
//   const double others = (busyCpuSeconds() - busy - own CPU seconds) / wall seconds;
#pragma once

namespace traind {

// CPU seconds the whole machine has spent busy since boot (/proc/stat); 0
// where it cannot be read.
double busyCpuSeconds();

}  // namespace traind
