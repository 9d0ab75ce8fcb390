// Copies for another core or process to read: stores that go around this
// core's caches.
//
// A parameter server writes each chunk's new values into a worker's shared
// memory region and never reads them back; the worker reads them on its own
// core at its next step. Ordinary stores would first fetch every line of the
// destination into the ps's cache, from the worker's core, and push the ps's
// own parameters out of it. Non-temporal stores do neither (docs/distributed.md,
// "Shared memory on one host", has the measured gain).
//
//   streamingCopy(region_values, values, n);
//   streamingStoreFence();   // before the reply that lets the worker read them
#pragma once

#include <cstdint>

namespace traind {

// dst[0, n) = src[0, n), with non-temporal stores where the CPU has them
// (x86-64: SSE's, which every x86-64 CPU has), plain ones elsewhere. The
// buffers must not overlap.
void streamingCopy(float* dst, const float* src, int64_t n);

// Non-temporal stores are weakly ordered: this makes every one before it
// visible before any store after it (x86-64's sfence; nothing elsewhere).
// Call it before telling another thread or process that dst is ready.
void streamingStoreFence();

}  // namespace traind
