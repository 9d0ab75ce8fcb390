#include "core/streaming_store.h"

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace traind {

void streamingCopy(float* dst, const float* src, int64_t n) {
#if defined(__x86_64__)
  int64_t i = 0;
  // _mm_stream_ps needs a 16-byte aligned destination: plain stores up to it.
  for (; i < n && reinterpret_cast<uintptr_t>(dst + i) % 16 != 0; ++i) dst[i] = src[i];
  for (; i + 4 <= n; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
  for (; i < n; ++i) dst[i] = src[i];
#else
  std::copy_n(src, n, dst);
#endif
}

void streamingStoreFence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

}  // namespace traind
