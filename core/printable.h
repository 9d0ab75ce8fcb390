// Text read from a file or a peer, as it may appear in a message or a log
// line. Well-formed UTF-8 passes as it is; control characters (C0, DEL, C1)
// and bytes that are not UTF-8 become \xNN, and the controls of text
// direction (U+202E and its kin, which reorder what a terminal shows)
// \uXXXX, so that a corrupt file cannot write raw bytes (or a terminal's
// escape sequences) to a user's screen, nor make a line show other text
// than it holds.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace traind {

// The length of the well-formed UTF-8 sequence of two to four bytes that
// starts at text[pos], or 0 when none does: overlong forms, surrogates and
// code points past U+10FFFF are not well formed.
size_t utf8SequenceLength(std::string_view text, size_t pos);

// Whether text[pos] starts U+0080..U+009F, which a terminal may take as
// control codes (CSI is U+009B).
bool isC1Control(std::string_view text, size_t pos);

std::string printable(std::string_view text);

// printable(text) of at most its first `max_bytes` bytes, then "... (N bytes
// more)": for text that may be long, such as a whole file or a peer's answer.
std::string printablePrefix(std::string_view text, size_t max_bytes);

// printable(text) in single quotes, as a message quotes a name or a value;
// spaces other than ' ' and characters that show nothing (U+00A0, U+2028,
// a byte order mark, zero-width ones) as \uXXXX, since between quotes they
// would pass for a space or for nothing.
std::string quotedPrintable(std::string_view text);

// Items as a message lists them: "a", "a and b", "a, b and c" (taken as
// they are: printable already).
std::string listedInProse(const std::vector<std::string>& items);

}  // namespace traind
