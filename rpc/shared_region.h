// Tensors through shared memory between a worker and a ps on the same host.
//
// Over loopback TCP every byte of a gradient and of the parameters sent back
// is copied into the kernel and out again, and the TCP stack runs for it:
// with a ps and two workers on one machine that took half its CPU time
// (docs/distributed.md, "Shared memory on one host"). So a worker offers
// every ps, at hello, a region of its own memory: a sealed memfd holding
// its gradient buffer and its parameter buffer, each laid out as the
// model's flat buffer (VariableLayout), which the worker computes in. A ps
// on the same host (same boot, same pid namespace, allowed to open the
// worker's file descriptor) maps it; then a push names its chunk instead of
// carrying it: the ps applies the chunk's gradient from the gradient
// buffer, writes the chunk's parameters into the parameter buffer and
// answers without data. Nothing is copied on the worker's side. The Cap'n
// Proto calls still order everything: a worker sends a chunk once its
// gradient is final and its step no longer reads its parameters, and has
// one call per chunk at a time; the ps reads and writes the chunk only
// between that request and its reply.
//
// The region is allocated in full and sealed against shrinking before it is
// offered, so a peer cannot make the other's mapping fault (SIGBUS) by
// truncating it. A ps pins what /proc/<pid>/fd/<fd> names without opening
// it, opens it only if that is a memfd on tmpfs, and checks the seal, the
// size, the allocation and a random token before it trusts it. (A peer
// that punches holes into its own region afterwards makes the ps's next
// writes allocate pages again; no seal short of read-only prevents that.)
#pragma once

#include <kj/io.h>

#include <array>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "rpc/traind.capnp.h"

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

  // Worker: a new region for a model of `floats` floats (the size of its
  // flat buffers). Throws SharedRegionUnavailable when the kernel does not
  // give one.
  static SharedRegion create(int64_t floats);
  // ps: maps the region `offer` names for a model of `floats` floats, or
  // throws SharedRegionUnavailable saying why not.
  static SharedRegion attach(const Offer& offer, int64_t floats);

  // Only for the region's creator, while it keeps its descriptor open.
  const Offer& offer() const { return offer_; }

  // The worker's two flat buffers, `floats()` floats each (64-byte aligned,
  // as FlatBuffer's).
  float* gradients() const;
  float* parameters() const;
  int64_t floats() const { return floats_; }

  // The size of a region for `floats` floats: a page of header (the token)
  // and the two buffers, each rounded up to whole pages.
  static uint64_t bytesFor(int64_t floats);

 private:
  struct Unmap {
    uint64_t bytes;
    void operator()(void* base) const;
  };
  using Mapping = std::unique_ptr<void, Unmap>;
  SharedRegion(Mapping mapping, int64_t floats, kj::AutoCloseFd fd, Offer offer);

  Mapping mapping_;
  int64_t floats_ = 0;
  kj::AutoCloseFd fd_;  // the creator's: open while a ps may still attach
  Offer offer_;
};

// An offer as hello carries it, and back; reading throws
// SharedRegionUnavailable for a token of the wrong length.
void writeOffer(const SharedRegion::Offer& offer, wire::SharedRegionOffer::Builder out);
SharedRegion::Offer readOffer(wire::SharedRegionOffer::Reader in);

// This host as a process sees it: the kernel's boot id and the pid
// namespace. Two processes with the same identity can reach each other's
// /proc/<pid>/fd (given the permissions).
std::string hostIdentity();

}  // namespace traind
