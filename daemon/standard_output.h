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

// Opens /dev/null onto each of standard input, output and error that is
// closed (`traind ... 2>&-`, a supervisor that closes them): the next file
// opened would take that descriptor, and the log's lines would go into it
// (a checkpoint directory's .lock, whose pid they overwrote). First thing in
// main, before any file is opened. A command's output written to a closed
// standard output is lost all the same: exitAfterOutput says so, exit 1.
void openClosedStandardStreams();

}  // namespace traind
