// Logging set-up for traind and trainctl: spdlog to stderr, and in a
// terminal one live progress line that log lines scroll above.
#pragma once

#include <string>

namespace traind {

void setupLogging();

// Puts "[prefix] " before every line ("[worker 1] ..."), so the logs of a
// cluster's nodes can be told apart when they share a terminal.
void setLogPrefix(const std::string& prefix);

// Progress lines are shown when enabled (the default) and stderr is a terminal.
void enableProgress(bool enabled);
bool progressEnabled();

// Replaces the live progress line; a no-op when stderr is not a terminal.
void showProgress(const std::string& text);

// Removes the live progress line (before the final summary).
void clearProgress();

}  // namespace traind
