// Logging of what a peer can repeat as fast as it likes (connections made
// and refused, accepts failing): at most `burst` lines per interval, each
// saying how many occurrences it stands for. Occurrences past the burst are
// counted into the next line that is written.
//
//   RateLimitedLog refusals{std::chrono::seconds(10)};
//   refusals.log([&](size_t times) {
//     spdlog::warn("refused a connection{}", RateLimitedLog::since(times));
//   });
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace traind {

class RateLimitedLog {
 public:
  using Clock = std::chrono::steady_clock;

  explicit RateLimitedLog(Clock::duration interval, int burst = 1)
      : interval_(interval), burst_(burst) {}

  // What a line adds when it stands for more than one occurrence:
  // " (12 such since the last line)", or nothing.
  static std::string since(size_t times) {
    return times > 1 ? " (" + std::to_string(times) + " such since the last line)" : "";
  }

  // Counts one occurrence; calls write(occurrences since the last line)
  // when a line is due.
  template <typename Write>
  void log(Write&& write) {
    ++unlogged_;
    const Clock::time_point now = Clock::now();
    if (lines_ == 0 || now - window_start_ >= interval_) {
      window_start_ = now;
      lines_ = 0;
    }
    if (lines_ >= burst_) return;
    write(unlogged_);
    unlogged_ = 0;
    ++lines_;
  }

 private:
  Clock::duration interval_;
  int burst_;
  Clock::time_point window_start_;
  int lines_ = 0;  // written since window_start_
  size_t unlogged_ = 0;
};

}  // namespace traind
