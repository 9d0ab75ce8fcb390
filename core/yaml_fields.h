// Reading the fields of a YAML spec file with error messages a user can act
// on. The model spec and the cluster spec are both read with these helpers,
// so every spec error has the same form (core/error.h):
//
//   file:line:column: field.path: what was expected, got what was found
//
// A reader walks the document as Fields (a node, its dotted path and its
// position), takes mappings apart with Mapping (which refuses unknown and
// repeated keys) and reads scalars with the read* functions, each of which
// throws InputError naming the field when the value does not fit:
//
//   const YamlFile file = loadYamlFile(path, "cluster spec");
//   Mapping top(rootField(file, path));
//   top.allowOnly({"cluster", "training"}, "a cluster spec");
//   Mapping cluster(top.get("cluster"));              // required
//   if (auto f = top.find("training")) {              // optional
//     Mapping training(*f);
//     training.allowOnly({"mode", "max_staleness"}, "the training section");
//     if (auto g = training.find("max_staleness")) staleness = readInt(*g, 0);
//   }
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/model_spec.h"

namespace traind::yaml_fields {

// ---------------------------------------------------------------------------
// Files and fields.

// A YAML node with the field path ("layers[1].kernel") and the position that
// name it in error messages. A value reached through an alias (`*size`) is
// named where the alias is used; yaml-cpp gives it its anchor's position,
// which messages add (`written_at`).
struct Field {
  YAML::Node node;
  std::string path;
  SourceLocation where;
  std::optional<SourceLocation> written_at = std::nullopt;
  // The file's text, which places what yaml-cpp gives no position of its
  // own (an empty list item); shared by every field of the file.
  std::shared_ptr<const std::string> text = nullptr;
};

// A spec file, parsed, and its text.
struct YamlFile {
  YAML::Node root;
  std::shared_ptr<const std::string> text;
};

// Parses a spec file. `kind` names it in messages ("model spec"). A
// directory, an unreadable file, a file over 1 MiB (refused before it is
// read: a spec is a page of text) and a YAML syntax error (with its
// line:column) are InputErrors.
YamlFile loadYamlFile(const std::string& path, std::string_view kind);

// The document's root as a Field with an empty path.
Field rootField(const YamlFile& file, const std::string& path);

// The 1-based position of `node`, or `fallback` where the node has none of
// its own (an empty value's mark points at whatever token follows it, so it
// takes its key's position instead).
SourceLocation locate(const YAML::Node& node, const SourceLocation& fallback);

// The field of `node`, a value of `parent` named at `use_site` (its key, or
// the list or the item before it). A node whose own position comes before
// that one, or is that one where it must come after it (an item after the
// one before), was reached through an alias (nothing is written before its
// key), and so was everything within it: each is named at the use site.
Field childField(const Field& parent, const YAML::Node& node, std::string path,
                 const SourceLocation& use_site, bool after_use_site = false);

// ---------------------------------------------------------------------------
// Errors.

// Throws InputError("file:line:col: path: what").
[[noreturn]] void fail(const Field& field, std::string_view what);

// Throws "... expected <expected>, got <what the node holds>".
[[noreturn]] void failExpected(const Field& field, std::string_view expected);

// What a node holds, for the "got ..." part of a message: numbers as
// written, text quoted, containers by kind ("a list", "an empty value").
std::string describe(const YAML::Node& node);

// Text from the file as it appears inside a message: quoted, printable
// (core/printable.h), and cut short
// so that a runaway value cannot flood the log.
std::string quoted(std::string text);

// "a, b, c".
std::string joined(const std::vector<std::string_view>& words);

// A quoted scalar is a string even when it reads as a number or a boolean.
bool isQuoted(const YAML::Node& node);

// A scalar that reads as text: written plain, quoted, or tagged !!str.
// `!!null mse`, `!!int mse` or `!custom mse` is not the text 'mse'.
bool isText(const YAML::Node& node);

// A scalar written plain, or tagged as the type it is read as (`!!int 3`
// for "int"): `!!null 3` or `!custom 3` is not read as 3.
bool isPlainOr(const YAML::Node& node, std::string_view type);

// A list or mapping written plain or tagged as what it is (`!!seq`,
// `!!map`): a list tagged `!!bool` or `!!python/tuple` is not read.
bool isPlainCollection(const YAML::Node& node, std::string_view type);

// An integer as a spec writes one (digits, an optional sign); false for
// anything else, or one beyond int64.
bool parseInt(std::string_view text, int64_t& value);

// ---------------------------------------------------------------------------
// Mappings and lists.

// A mapping whose keys are plain text, each given once.
class Mapping {
 public:
  // Throws unless `field` is a mapping with plain text keys, each once
  // (a repeated key names the line of its first occurrence).
  explicit Mapping(Field field);

  // Throws on the first key not in `known`, suggesting the closest known one
  // ("did you mean 'units'?") or listing them all. `owner` says whose fields
  // they are ("a dense layer").
  void allowOnly(const std::vector<std::string_view>& known, std::string_view owner) const;

  const Field& field() const { return field_; }

  // An optional field.
  std::optional<Field> find(std::string_view key) const;

  // A required field; `why` says when it is required, if not always.
  Field get(std::string_view key, std::string_view why = {}) const;

 private:
  struct Entry {
    std::string key;
    Field key_field;  // the key's place, and where it is written when aliased
    Field value;
  };
  Field field_;
  std::vector<Entry> entries_;
};

// The items of a list, each with its path ("layers[2]"); throws
// "expected <expected>" unless `field` is a list.
std::vector<Field> listItems(const Field& field, std::string_view expected);

// ---------------------------------------------------------------------------
// Scalars. Quoted values are strings: `units: "3"` is not an integer.

// An integer in [min, max]; the message says "positive" or "non-negative"
// for the usual lower bounds, and the upper bound only when it was exceeded.
int64_t readInt(const Field& field, int64_t min, int64_t max = std::numeric_limits<int64_t>::max());

// Range checks for readNumber and readFloat.
bool isPositive(double x);
bool isNonNegative(double x);
bool isFraction(double x);  // [0, 1)
bool isAnyNumber(double x);

// A finite number for which `ok` holds; `expected` says what that means.
double readNumber(const Field& field, std::string_view expected, bool (*ok)(double));

// As readNumber, for a value stored as float: also refused when float cannot
// hold it.
float readFloat(const Field& field, std::string_view expected, bool (*ok)(double));

// true or false (also True, TRUE, False, FALSE); not yes/no/on/off.
bool readBool(const Field& field);

// One word of a fixed list, as its value: readChoice<Padding>(field,
// {{"valid", Padding::Valid}, {"same", Padding::Same}}). The message lists
// the words.
template <class T>
using Choices = std::initializer_list<std::pair<std::string_view, T>>;

template <class T>
T readChoice(const Field& field, Choices<T> choices) {
  if (isText(field.node)) {
    for (const auto& [word, value] : choices)
      if (field.node.Scalar() == word) return value;
  }
  std::vector<std::string_view> words;
  for (const auto& choice : choices) words.push_back(choice.first);
  failExpected(field, "one of " + joined(words));
}

// The word of `value` in `choices`, as a spec writes it; "unknown" for none.
template <class T>
std::string_view choiceWord(Choices<T> choices, T value) {
  for (const auto& [word, choice] : choices)
    if (choice == value) return word;
  return "unknown";
}

// A name of letters, digits, '_', '-' and '.', at most 255 bytes: names
// become parts of variable names, file names and metric labels.
std::string readName(const Field& field);
// `text` made a name that readName would take: every byte it refuses
// becomes '_' ("my model" -> "my_model"), cut to its 255 bytes; "model"
// for empty text, '.' and '..' (the stems of "..yaml" and "...yaml").
std::string nameFrom(std::string_view text);

// Any non-empty text.
std::string readText(const Field& field, std::string_view expected);

// A path; a relative one is taken from `spec_dir`, the spec file's
// directory, so a spec means the same files whatever the working directory.
// A path that starts with '~' or holds `$NAME` or `${...}` is refused: a
// shell would expand it, and traind does not.
std::string resolvePath(const Field& field, const std::filesystem::path& spec_dir);

// As resolvePath, and the file must exist, be readable and not a directory.
std::string readExistingFile(const Field& field, const std::filesystem::path& spec_dir);

// As readExistingFile, or, for a glob pattern (a path with '*', '?' or
// '[' that is not itself a file), every file it matches, sorted; at least
// one, each readable.
std::vector<std::string> readExistingFiles(const Field& field,
                                           const std::filesystem::path& spec_dir);

// ---------------------------------------------------------------------------
// Sections both specs have.

// {dir, every_steps, every_seconds, keep}: docs/model-spec.md#checkpoints.
CheckpointSpec readCheckpoint(const Field& field, const std::filesystem::path& spec_dir);

}  // namespace traind::yaml_fields
