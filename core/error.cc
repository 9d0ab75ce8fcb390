#include "core/error.h"

namespace traind {

std::string SourceLocation::toString() const {
  if (line <= 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
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
