#include "daemon/stop_request.h"

#include <spdlog/spdlog.h>

namespace traind {

void StopRequest::request(const std::string& by) {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    // A node already stopping has said why; a storm of signals adds nothing.
    if (!by_.empty()) return;
    by_ = by;
  }
  requested_.store(true);
  spdlog::info("stop requested by {}", by);
}

std::string StopRequest::by() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return by_;
}

}  // namespace traind
