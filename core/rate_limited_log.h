// Logging of what a peer can repeat as fast as it likes (connections
// refused, accepts failing): at most one line per interval, which says how
// many occurrences it stands for. The first occurrence is logged at once;
// those after the last line stay uncounted until the next one is due.
//
//   RateLimitedLog refusals{std::chrono::seconds(10)};
//   refusals.log([&](size_t times) { spdlog::warn("refused {} connections", times); });
#pragma once

#include <chrono>
#include <cstddef>

namespace traind {

class RateLimitedLog {
 public:
  using Clock = std::chrono::steady_clock;

  explicit RateLimitedLog(Clock::duration interval) : interval_(interval) {}

  // Counts one occurrence; calls write(occurrences since the last line)
  // when a line is due.
  template <typename Write>
  void log(Write&& write) {
    ++unlogged_;
    const Clock::time_point now = Clock::now();
    if (logged_ && now - last_line_ < interval_) return;
    write(unlogged_);
    unlogged_ = 0;
    last_line_ = now;
    logged_ = true;
  }

 private:
  Clock::duration interval_;
  Clock::time_point last_line_;
  bool logged_ = false;
  size_t unlogged_ = 0;
};

}  // namespace traind
