#include "core/error.h"

#include "core/printable.h"

namespace traind {

std::string SourceLocation::toString() const {
  // A file's name may hold a terminal's escape sequences or a line break,
  // which would forge the rest of the line or another one.
  if (line <= 0) return printable(file);
  return printable(file) + ":" + std::to_string(line) + ":" + std::to_string(column);
}

void throwInputError(const SourceLocation& where, std::string_view field, std::string_view what) {
  std::string message = where.toString();
  if (!message.empty()) message += ": ";
  if (!field.empty()) {
    message += field;
    message += ": ";
  }
  message += what;
  throw InputError(message);
}

}  // namespace traind
