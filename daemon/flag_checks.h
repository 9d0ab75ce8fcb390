// CLI11 checks for flags that say what they expected.
//
//   app.add_option("--threads", threads)->transform(traind::integerFlag(0, traind::kMaxThreads));
//   $ traind --threads abc  ->  --threads: expected an integer from 0 to 1024, got 'abc'
//
// CLI11 2.1's own range checks print their bounds as doubles ("Value 0 not in
// range 0.000000 to 1797693134862315708...") and call a word out of range.
// A flag that stands in for a spec field takes the field's bounds, so that no
// flag lets through what the spec would refuse. What was given is quoted
// as printable text: an environment variable (TRAIND_TASK) may hold anything.
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdint>
#include <limits>
#include <string>

#include "core/printable.h"

namespace traind {

// An integer in [min, max].
inline CLI::Validator integerFlag(int64_t min, int64_t max = std::numeric_limits<int64_t>::max()) {
  const std::string range = max == std::numeric_limits<int64_t>::max()
                                ? std::to_string(min) + " or more"
                                : "from " + std::to_string(min) + " to " + std::to_string(max);
  return CLI::Validator(
      [min, max, range](std::string& text) -> std::string {
        int64_t value = 0;
        const char* end = text.data() + text.size();
        const auto [stop, error] = std::from_chars(text.data(), end, value);
        if (error == std::errc::result_out_of_range ||
            (error == std::errc() && stop == end && value > max))
          return "expected an integer from " + std::to_string(min) + " to " + std::to_string(max) +
                 ", got " + quotedPrintable(text);
        if (text.empty() || error != std::errc() || stop != end || value < min)
          return "expected an integer " + range + ", got " + quotedPrintable(text);
        // CLI11 converts the text after its validators, and reads "010" as
        // octal 8 (and refuses "08"): it gets the decimal value read here,
        // which is why the flags take this as a transform, not a check.
        text = std::to_string(value);
        return {};
      },
      "INT " + range);
}

// A number of seconds above 0 and at most `max` (bounded, so that converting
// it to milliseconds cannot overflow).
inline CLI::Validator secondsFlag(int64_t max) {
  const std::string range = "above 0 and at most " + std::to_string(max);
  return CLI::Validator(
      [max, range](std::string& text) -> std::string {
        double value = 0;
        const char* end = text.data() + text.size();
        const auto [stop, error] = std::from_chars(text.data(), end, value);
        if (text.empty() || error != std::errc() || stop != end ||
            !(value > 0 && value <= double(max)))
          return "expected seconds " + range + ", got " + quotedPrintable(text);
        return {};
      },
      "SECONDS " + range);
}

// A directory's path, not empty: an empty one would be taken for no flag.
inline CLI::Validator directoryFlag() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        return text.empty() ? "expected a directory, got ''" : std::string();
      },
      "DIR");
}

// A file's path, not empty: an empty one would be taken for no flag
// (`--cluster "$CLUSTER"` with the variable unset would check no cluster).
inline CLI::Validator fileFlag() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        return text.empty() ? "expected a file, got ''" : std::string();
      },
      "FILE");
}

}  // namespace traind
