// The process's limit on open files. A shell's soft limit is often 1024,
// and what traind keeps open grows with the job: a data set left in its
// files keeps each one open, a worker holds a connection to each ps.
#pragma once

namespace traind {

// Raises this process's soft limit on open files to its hard limit, which
// a process may do itself; false if it was there already or cannot be
// raised.
bool raiseOpenFileLimit();

// The advice an error of too many open files gives: how to raise the hard
// limit, which the process cannot.
inline constexpr const char* kRaiseOpenFileLimit = "raise the limit, ulimit -Hn or LimitNOFILE=";

}  // namespace traind
