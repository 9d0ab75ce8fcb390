#include "daemon/gradient_stream.h"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace traind {
namespace {

kj::Exception stepFailure(const std::string& why) {
  return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__, kj::heapString(why));
}

}  // namespace

void GradientStream::begin() {
  std::vector<Waiter> dropped;
  {
    std::lock_guard lock(mutex_);
    final_from_ = SIZE_MAX;
    failure_.reset();
    dropped.swap(waiters_);
  }
}

void GradientStream::finalFrom(size_t first_variable) {
  std::vector<Waiter> woken;
  {
    std::lock_guard lock(mutex_);
    final_from_ = std::min(final_from_, first_variable);  // final stays final
    for (size_t i = 0; i < waiters_.size();) {
      if (waiters_[i].variable >= first_variable) {
        woken.push_back(std::move(waiters_[i]));
        waiters_[i] = std::move(waiters_.back());
        waiters_.pop_back();
      } else {
        ++i;
      }
    }
  }
  // Outside the lock: fulfilling takes the loop's own.
  for (Waiter& w : woken) w.fulfiller->fulfill();
}

void GradientStream::fail(const std::string& why) {
  std::vector<Waiter> failed;
  {
    std::lock_guard lock(mutex_);
    failure_ = why;
    failed.swap(waiters_);
  }
  for (Waiter& w : failed) w.fulfiller->reject(stepFailure(why));
}

kj::Promise<void> GradientStream::ready(size_t variable) {
  std::lock_guard lock(mutex_);
  if (failure_) return stepFailure(*failure_);
  if (variable >= final_from_) return kj::READY_NOW;
  auto [promise, fulfiller] = kj::newPromiseAndCrossThreadFulfiller<void>();
  waiters_.push_back({variable, kj::mv(fulfiller)});
  return kj::mv(promise);
}

}  // namespace traind
