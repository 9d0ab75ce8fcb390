// What a command printed on standard output, once it is out.
#pragma once

namespace traind {

// A command's exit status once its output is flushed: `code`, or 1 when
// standard output did not take it all (`> report.txt` on a full disk,
// /dev/full), said on standard error as cat says it: a script that reads
// the output must not take an empty or cut file for the answer. For
// commands (trainctl's, traind check, --version, --help); a run's log is
// no command's output, and a log written nowhere does not stop a run.
int exitAfterOutput(int code, const char* program);

}  // namespace traind
