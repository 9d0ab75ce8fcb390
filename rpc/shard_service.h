// The ParameterShard interface of rpc/traind.capnp, served from a
// ParameterShard. Runs on the ps's event-loop thread; every call is checked
// by ParameterShard before it touches state and fails with the reason.
#pragma once

#include <kj/async.h>

#include <string>
#include <vector>

#include "core/parameter_shard.h"
#include "rpc/traind.capnp.h"

namespace traind {

class ShardService final : public wire::ParameterShard::Server {
 public:
  ShardService(ParameterShard& shard, std::string architecture_hash);

  // Resolves when a stop() call arrives.
  kj::Promise<void> onStop();
  bool stopping() const { return stopping_; }

 protected:
  kj::Promise<void> hello(HelloContext context) override;
  kj::Promise<void> status(StatusContext context) override;
  kj::Promise<void> initialize(InitializeContext context) override;
  kj::Promise<void> markReady(MarkReadyContext context) override;
  kj::Promise<void> push(PushContext context) override;
  kj::Promise<void> pull(PullContext context) override;
  kj::Promise<void> readState(ReadStateContext context) override;
  kj::Promise<void> stop(StopContext context) override;

 private:
  struct PullWaiter {
    int64_t min_step;
    kj::Own<kj::PromiseFulfiller<void>> fulfiller;
  };

  void fillStatus(wire::ShardStatus::Builder status) const;
  // Wakes the pulls waiting for a step the shard has reached (or all, when stopping).
  void releasePulls();

  ParameterShard& shard_;
  std::string architecture_hash_;
  std::vector<PullWaiter> waiting_pulls_;
  bool stopping_ = false;
  kj::ForkedPromise<void> stop_promise_;
  kj::Own<kj::PromiseFulfiller<void>> stop_fulfiller_;
};

}  // namespace traind
