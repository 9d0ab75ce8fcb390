// Tensors through shared memory between a worker and a ps on the same host.
//
// Over loopback TCP every byte of a gradient and of the parameters sent back
// is copied into the kernel and out again, and the TCP stack runs for it:
// with a ps and two workers on one machine that took half its CPU time
// (docs/distributed.md, "Shared memory on one host"). So a worker offers
// each ps, at hello, a region of its own memory: a sealed memfd holding one
// copy of the shard's flat buffer. A ps on the same host (same boot, same pid namespace,
// allowed to open the worker's file descriptor) maps it; then a push names
// its chunk instead of carrying it: the worker writes the chunk's gradient
// there, the ps applies it from there, writes the chunk's parameters over
// it and answers without data, and the worker reads them. The Cap'n Proto
// calls still order everything: a chunk's floats belong to the ps from the
// worker's request until its reply, and a worker has one call per chunk at
// a time. The floats serve both ways (the ps has used the gradient before it
// writes the parameters), so a region costs the worker's host one copy of
// the shard.
//
// The region is allocated in full and sealed against shrinking before it is
// offered, so a peer cannot make the other's mapping fault (SIGBUS) by
// truncating it. A ps pins what /proc/<pid>/fd/<fd> names without opening
// it, opens it only if that is a memfd on tmpfs, and checks the seal, the
// size, the allocation and a random token before it trusts it. (A peer
// that punches holes into its own region afterwards makes the ps's next
// writes allocate pages again; no seal short of read-only prevents that.)
#pragma once

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace traind {

// Why a ps did not take a region: another host, no access, a mismatch. The
// pair falls back to TCP; the reason goes to both logs.
class SharedRegionUnavailable : public std::runtime_error {
 public:
  explicit SharedRegionUnavailable(const std::string& why) : std::runtime_error(why) {}
};

class SharedRegion {
 public:
  // What hello carries from the worker to the ps.
  struct Offer {
    std::string host;  // hostIdentity() of the worker
    uint32_t pid = 0;
    uint32_t fd = 0;
    uint64_t bytes = 0;
    std::array<uint8_t, 16> token{};
  };

  // Worker: a new region for a shard of `floats` floats. Throws
  // SharedRegionUnavailable when the kernel does not give one.
  static SharedRegion create(int64_t floats);
  // ps: maps the region `offer` names for a shard of `floats` floats, or
  // throws SharedRegionUnavailable saying why not.
  static SharedRegion attach(const Offer& offer, int64_t floats);

  SharedRegion(SharedRegion&& other) noexcept;
  SharedRegion& operator=(SharedRegion&& other) noexcept;
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;
  ~SharedRegion();

  // Only for the region's creator, while it keeps its descriptor open.
  const Offer& offer() const { return offer_; }

  // The shard's floats at its flat offsets: a chunk's gradient, then its
  // parameters.
  float* tensors() const { return tensors_; }
  int64_t floats() const { return floats_; }

  // The size of a region for `floats` floats: a page of header (the token)
  // and the floats, rounded up to whole pages.
  static uint64_t bytesFor(int64_t floats);

 private:
  SharedRegion(void* base, uint64_t bytes, int64_t floats, int fd, Offer offer);
  void release() noexcept;

  void* base_ = nullptr;
  uint64_t bytes_ = 0;
  int64_t floats_ = 0;
  float* tensors_ = nullptr;
  int fd_ = -1;  // the creator's: open while a ps may still attach
  Offer offer_;
};

// This host as a process sees it: the kernel's boot id and the pid
// namespace. Two processes with the same identity can reach each other's
// /proc/<pid>/fd (given the permissions).
std::string hostIdentity();

}  // namespace traind
