#include "rpc/failure_text.h"

#include <cctype>

#include "core/printable.h"

namespace traind {
namespace {

// The text after `key` up to the next "; " (kj's separator of its fields).
std::string_view fieldAfter(std::string_view text, size_t key_end) {
  const std::string_view rest = text.substr(key_end);
  return rest.substr(0, rest.find("; "));
}

// Where the words after a system call start, when `text` starts with one
// as kj writes it: a name (with optional "::"), its arguments in
// parentheses, then ": ".
size_t systemCallEnd(std::string_view text) {
  size_t i = text.starts_with("::") ? 2 : 0;
  const size_t name = i;
  while (i < text.size() && (std::isalnum(static_cast<unsigned char>(text[i])) || text[i] == '_'))
    ++i;
  if (i == name || i >= text.size() || text[i] != '(') return std::string_view::npos;
  for (int depth = 0; i < text.size(); ++i) {
    if (text[i] == '(') ++depth;
    if (text[i] == ')' && --depth == 0)
      return text.substr(i + 1).starts_with(": ") ? i + 3 : std::string_view::npos;
  }
  return std::string_view::npos;
}

}  // namespace

std::string failureText(std::string_view description) {
  // Cap'n Proto's prefix comes first: "remote exception: std::exception: ...".
  for (std::string_view prefix : {"remote exception: ", "std::exception: "})
    if (description.starts_with(prefix)) description.remove_prefix(prefix.size());
  // A failed KJ_REQUIRE: "expected CONDITION [VALUES]; words". The
  // condition is the library's code; the words are for a reader.
  if (description.starts_with("expected "))
    if (const size_t words = description.find("; "); words != std::string_view::npos)
      description.remove_prefix(words + 2);
  // Cap'n Proto's advice to a programmer after "Message is too large.":
  // the limit is traind's on purpose, and no operator can change it.
  if (const size_t advice = description.find("  To increase the limit");
      advice != std::string_view::npos)
    description = description.substr(0, advice);
  constexpr std::string_view kLookup = "gai_strerror(status) = ";
  if (description.starts_with("DNS lookup failed"))
    if (const size_t at = description.find(kLookup); at != std::string_view::npos)
      return "DNS lookup failed: " + printable(fieldAfter(description, at + kLookup.size()));
  if (const size_t end = systemCallEnd(description); end != std::string_view::npos)
    return printable(fieldAfter(description, end));
  return printable(description);
}

std::string failureText(const kj::Exception& e) { return failureText(e.getDescription().cStr()); }

bool isForeignFraming(std::string_view failure_text) {
  return failure_text.starts_with("Message has too many segments.") ||
         failure_text.starts_with("Message is too large.");
}

}  // namespace traind
