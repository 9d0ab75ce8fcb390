// Rate-limited logging: a burst of lines per interval, then counts.
#include "core/rate_limited_log.h"

#include <catch2/catch.hpp>
#include <thread>
#include <vector>

using namespace traind;

TEST_CASE("a burst of lines per interval, then the count of what was held back") {
  RateLimitedLog log(std::chrono::seconds(1), 2);
  std::vector<size_t> lines;
  auto occur = [&] { log.log([&](size_t times) { lines.push_back(times); }); };
  for (int i = 0; i < 5; ++i) occur();
  CHECK(lines == std::vector<size_t>{1, 1});  // three held back
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  occur();
  CHECK(lines == std::vector<size_t>{1, 1, 4});  // the three and this one
  occur();
  occur();
  CHECK(lines == std::vector<size_t>{1, 1, 4, 1});
}
