// A step's gradient on its way from the thread that computes it to the
// worker's event-loop thread that sends it to the ps (docs/distributed.md,
// "Gradients sent during backward"): the step says which variables are
// final as its backward pass goes, and pushAndPull sends each chunk as soon
// as its variables are.
//
//   GradientStream stream;           // used by two threads
//   stream.begin();                  // loop thread, before the step starts
//   // step thread:
//   replica.trainStepWithProgress(batch, params, grads, step, stream);  // or, if it throws:
//   stream.fail("...");
//   // loop thread, meanwhile:
//   ps.pushAndPull(grads, min_step, params, &stream);
#pragma once

#include <kj/async.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "devices/device.h"
#include "rpc/sharded_client.h"

namespace traind {

class GradientStream : public GradientProgress, public GradientGate {
 public:
  // Loop thread, before a step: no gradient is final. Waits left over from
  // an abandoned push are dropped.
  void begin();

  // Step thread.
  void finalFrom(size_t first_variable) override;
  // Step thread, when the step failed: every wait, and every later one
  // until begin(), ends with `why`.
  void fail(const std::string& why);

  // Loop thread: resolves once `variable` is final.
  kj::Promise<void> ready(size_t variable) override;

 private:
  struct Waiter {
    size_t variable;
    kj::Own<kj::CrossThreadPromiseFulfiller<void>> fulfiller;
  };

  std::mutex mutex_;
  size_t final_from_ = SIZE_MAX;  // variables from this index on are final; under mutex_
  std::optional<std::string> failure_;  // under mutex_
  std::vector<Waiter> waiters_;         // under mutex_
};

}  // namespace traind
