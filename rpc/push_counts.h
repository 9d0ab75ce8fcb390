// What a ps's pushAndPull calls carried, by transport: over TCP one
// gradient chunk per call, through shared memory up to a run of chunks per
// call (rpc/traind.capnp). Counted once a call's chunks have passed their
// checks; for the ps's last log line and its metrics (docs/operations.md).
#pragma once

#include <cstdint>

namespace traind {

struct PushCounts {
  int64_t tcp_calls = 0;  // each one chunk
  int64_t shared_calls = 0;
  int64_t shared_chunks = 0;
};

}  // namespace traind
