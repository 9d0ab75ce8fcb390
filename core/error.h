// Errors: one policy for the whole project.
//
// InputError is anything the user can fix by editing a file or a flag: a bad
// spec field, a missing or corrupt data or checkpoint file, a shape chain that
// cannot work. Its message says where (file:line:column when there is one),
// which field or layer, what was expected and what was found. traind exits
// with code 2 on it. Diverged is a run whose numbers are no longer finite
// (exit 3). Every other exception is a runtime failure (exit 1).
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace traind {

// A place in a text file; line and column are 1-based, 0 when unknown.
struct SourceLocation {
  std::string file;
  int line = 0;
  int column = 0;

  // "file:line:column", "file" when the position is unknown; the file's
  // name made printable (core/printable.h).
  std::string toString() const;
};

class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& message) : std::runtime_error(message) {}
};

// The run diverged: its loss, a gradient's norm or its parameters are no
// longer finite. Running it again does not help (a resume starts from the
// latest checkpoint with the same learning rate, and diverges again), so it
// has an exit code of its own, 3, which the systemd unit does not restart.
class Diverged : public std::runtime_error {
 public:
  explicit Diverged(const std::string& message) : std::runtime_error(message) {}
};

// Throws InputError("file:line:col: field: what").
[[noreturn]] void throwInputError(const SourceLocation& where, std::string_view field,
                                  std::string_view what);

}  // namespace traind
