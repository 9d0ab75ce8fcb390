#include "core/yaml_fields.h"

#include <dirent.h>
#include <fmt/format.h>
#include <glob.h>
#include <sys/stat.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "core/printable.h"

namespace traind::yaml_fields {
namespace {

namespace fs = std::filesystem;

// A spec is a page of YAML; a file far larger than that is not one, and is
// refused before it is read into memory.
constexpr std::uintmax_t kMaxSpecBytes = 1 << 20;

std::string childPath(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : parent + "." + std::string(key);
}

bool parseNumber(std::string_view text, double& value) {
  if (text.size() > 1 && text[0] == '+' && text[1] != '-') text.remove_prefix(1);
  const char* end = text.data() + text.size();
  auto [stop, error] = std::from_chars(text.data(), end, value);
  if (!text.empty() && error == std::errc::result_out_of_range && stop == end) {
    // A denormal double (1e-310) is out of from_chars' range: it is a
    // number all the same, which readFloat refuses as below float32's.
    const std::string copy(text);
    const double tiny = std::strtod(copy.c_str(), nullptr);
    if (tiny != 0 && std::fabs(tiny) < 1) {
      value = tiny;
      return true;
    }
  }
  return !text.empty() && error == std::errc() && stop == end;
}

// Edits (insert, delete, substitute, swap two neighbours) from a to b,
// ignoring case: the optimal-string-alignment distance.
size_t editDistance(std::string_view a, std::string_view b) {
  auto same = [](char x, char y) { return std::tolower(uint8_t(x)) == std::tolower(uint8_t(y)); };
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (same(a[i - 1], b[j - 1]) ? 0 : 1)});
      if (i > 1 && j > 1 && same(a[i - 1], b[j - 2]) && same(a[i - 2], b[j - 1]))
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

// Whether `word` is `candidate` with letters left out, from the same first
// letter ("every_secs" of "every_seconds").
bool abbreviates(std::string_view word, std::string_view candidate) {
  if (word.empty() || word.size() >= candidate.size() || word[0] != candidate[0]) return false;
  size_t matched = 0;
  for (char c : candidate)
    if (matched < word.size() && word[matched] == c) ++matched;
  return matched == word.size();
}

// A known word within a few edits of `word`: one that `word` abbreviates
// if any ("every_secs": every_seconds, though every_steps is an edit
// nearer), else the nearest.
std::optional<std::string_view> closestWord(std::string_view word,
                                            const std::vector<std::string_view>& known) {
  if (word.size() > 64) return std::nullopt;  // no field name is that long
  const size_t allowed = std::clamp<size_t>(word.size() / 3, 1, 3);
  std::optional<std::string_view> best;
  std::pair<bool, size_t> best_rank;  // (not an abbreviation, edits): lower is better
  for (std::string_view candidate : known) {
    const std::pair rank{!abbreviates(word, candidate), editDistance(word, candidate)};
    if (rank.second <= allowed && (!best || rank < best_rank)) {
      best = candidate;
      best_rank = rank;
    }
  }
  return best;
}

bool isNameCharacter(char c) {
  return std::isalnum(uint8_t(c)) || c == '_' || c == '-' || c == '.';
}

}  // namespace

bool parseInt(std::string_view text, int64_t& value) {
  if (text.size() > 1 && text[0] == '+' && std::isdigit(uint8_t(text[1]))) text.remove_prefix(1);
  const char* end = text.data() + text.size();
  auto [stop, error] = std::from_chars(text.data(), end, value);
  return !text.empty() && error == std::errc() && stop == end;
}

// ---------------------------------------------------------------------------
// Files and fields.

namespace {

// Whether `text` holds an IPv6 address with a port, [host]:port, outside
// quotes: YAML reads it as a list (a flow sequence), which cannot be
// followed by `:port` inside a block list, so the parser fails with words
// of its own.
bool hasUnquotedBracketAddress(std::string_view text) {
  // One pass, each `]:digit` looked at with the `[` last before it: a text
  // of many brackets costs no more than its length.
  constexpr size_t kLongestAddress = 64;  // an IPv6 address is at most 45 characters
  size_t open = std::string_view::npos;
  for (size_t i = 0; i + 2 < text.size(); ++i) {
    // A comment's address is no part of what failed.
    if (text[i] == '#' &&
        (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\t' || text[i - 1] == '\n')) {
      i = std::min(text.find('\n', i), text.size());
      open = std::string_view::npos;
      continue;
    }
    if (text[i] == '[') open = i;
    if (text[i] != ']' || open == std::string_view::npos || i - open > kLongestAddress) continue;
    const size_t close = i;
    const std::string_view inside = text.substr(open + 1, close - open - 1);
    const size_t before =
        open == 0 ? std::string_view::npos : text.find_last_not_of(" \t", open - 1);
    const bool quoted =
        before != std::string_view::npos && (text[before] == '"' || text[before] == '\'');
    if (!quoted && inside.find(':') != std::string_view::npos &&
        inside.find_first_of(",\n") == std::string_view::npos && text[close + 1] == ':' &&
        text[close + 2] >= '0' && text[close + 2] <= '9')
      return true;
  }
  return false;
}

// The 1-based number of line `line` (0-based) of `text`, or of the line
// before it, when a tab is in its indentation: YAML indents with spaces
// only, and yaml-cpp's words for a tab there ("illegal map value") do not
// say so. 0 when neither is.
int tabIndentedLine(std::string_view text, int line) {
  int number = 0;
  for (size_t start = 0; start < text.size() && number <= line;) {
    const size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view content = text.substr(start, end - start);
    const size_t indent = std::min(content.find_first_not_of(" \t"), content.size());
    if (number >= line - 1 && content.substr(0, indent).find('\t') != std::string_view::npos)
      return number + 1;
    ++number;
    start = end + 1;
  }
  return 0;
}

// Whether line `line` (0-based) of `text`, where the parser failed, gives
// `tfrecords:` a glob pattern outside quotes, or is such an item of a block
// list under it: YAML reads a leading `*` as an alias, and `?` and `[` in a
// flow mapping as its own, and fails with words of its own.
bool hasUnquotedGlobPattern(std::string_view text, int line) {
  constexpr std::string_view kKey = "tfrecords:";
  std::vector<std::string_view> lines;
  for (size_t start = 0; start <= text.size() && int(lines.size()) <= line;) {
    const size_t end = std::min(text.find('\n', start), text.size());
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  if (line < 0 || line >= int(lines.size())) return false;
  auto trimmed = [](std::string_view s) {
    s.remove_prefix(std::min(s.size(), s.find_first_not_of(" \t")));
    return s;
  };
  // One scalar, up to what ends it in a flow collection or a comment.
  auto unquotedPattern = [&](std::string_view value) {
    value = trimmed(value);
    value = value.substr(0, value.find_first_of(",}]#"));
    return !value.empty() && value[0] != '"' && value[0] != '\'' &&
           value.find_first_of("*?[") != std::string_view::npos;
  };
  auto listItem = [&](std::string_view s) { return trimmed(s).starts_with('-'); };
  if (const size_t key = lines[size_t(line)].find(kKey); key != std::string_view::npos) {
    const std::string_view value = trimmed(lines[size_t(line)].substr(key + kKey.size()));
    if (!value.starts_with('[')) return unquotedPattern(value);
    // A flow list: each of its items on this line.
    for (size_t at = 1; at < value.size() && value[at - 1] != ']';) {
      const size_t item_end = std::min(value.find_first_of(",]", at), value.size());
      if (unquotedPattern(value.substr(at, item_end - at))) return true;
      at = item_end + 1;
    }
    return false;
  }
  if (!listItem(lines[size_t(line)])) return false;
  int owner = line - 1;
  while (owner >= 0 && listItem(lines[size_t(owner)])) --owner;
  if (owner < 0) return false;
  const std::string_view owner_line = trimmed(lines[size_t(owner)]);
  return owner_line.starts_with(kKey) && trimmed(owner_line.substr(kKey.size())).empty() &&
         unquotedPattern(trimmed(lines[size_t(line)]).substr(1));
}

// Where each YAML document of a text starts, and whether it holds anything.
// yaml-cpp 0.7 reads a stray ',' at the top level as an endless run of empty
// documents at one place (YAML::LoadAll then never returns): that place is
// kept as `stalled`, and the scan ends there.
class DocumentScan final : public YAML::EventHandler {
 public:
  struct Document {
    YAML::Mark start;
    std::optional<YAML::Mark> content;  // where its first node is, if any
  };

  explicit DocumentScan(const std::string& text) {
    std::istringstream in(text);
    YAML::Parser parser(in);
    // Two documents with content settle it: a spec holds one.
    while (parser.HandleNextDocument(*this)) {
      const Document& last = documents_.back();
      if (documents_.size() > 1 && last.start.pos == documents_[documents_.size() - 2].start.pos) {
        stalled_ = last.start;
        documents_.pop_back();
        return;
      }
      if (with_content_ > 1) return;
    }
  }

  const std::vector<Document>& documents() const { return documents_; }
  const std::optional<YAML::Mark>& stalled() const { return stalled_; }

  void OnDocumentStart(const YAML::Mark& mark) override { documents_.push_back({mark, {}}); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { holds(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string&) override {
    holds(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    holds(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    holds(mark);
  }
  void OnMapEnd() override {}

 private:
  void holds(const YAML::Mark& mark) {
    if (documents_.back().content) return;
    documents_.back().content = mark;
    ++with_content_;
  }

  std::vector<Document> documents_;
  int with_content_ = 0;  // of documents_ (a count kept, not taken: a file may hold 250k)
  std::optional<YAML::Mark> stalled_;
};

// A spec is UTF-8 text, with no control characters but tab and line
// breaks, as YAML requires. yaml-cpp reads some others as it likes (a NUL
// ends a scalar there and then), so a file damaged in transit would load as
// another spec than the one written.
void checkText(const std::string& text, const std::string& path) {
  size_t line = 1, line_start = 0;
  for (size_t pos = 0; pos < text.size();) {
    const unsigned char byte = static_cast<unsigned char>(text[pos]);
    size_t length = 1;
    std::string_view fault;
    if (byte == '\n') {
      ++line;
      line_start = pos + 1;
    } else if (byte >= 0x80) {
      length = utf8SequenceLength(text, pos);
      if (length == 0) fault = "a byte that is not UTF-8";
      // C1 controls, but for NEL (a line break to YAML).
      else if (isC1Control(text, pos) && uint8_t(text[pos + 1]) != 0x85)
        fault = "a control character";
    } else if (byte == '\r' && (pos + 1 == text.size() || text[pos + 1] != '\n')) {
      // yaml-cpp reads a lone CR (old Mac line endings) as no break at all.
      throwInputError(SourceLocation{path, int(line), int(pos - line_start + 1)}, "",
                      "invalid YAML: a carriage return ('\\r') with no line feed after it: "
                      "expected line endings of LF or CRLF");
    } else if ((byte < 0x20 && byte != '\t' && byte != '\r') || byte == 0x7f) {
      fault = "a control character";
    }
    if (!fault.empty())
      throwInputError(
          SourceLocation{path, int(line), int(pos - line_start + 1)}, "",
          fmt::format("invalid YAML: {} {}: expected UTF-8 text with no control "
                      "characters but tab and line breaks",
                      fault, quotedPrintable(text.substr(pos, std::max<size_t>(length, 1)))));
    pos += std::max<size_t>(length, 1);
  }
}

// Where each item of a block list starts: the `-` of each, found in the
// file's text, since yaml-cpp gives an empty item (a bare `-`) the position
// of whatever token follows it. The list's lines run from its first `-`
// (where its mark is, or the first line after an anchor or a tag) until a
// line starts left of that column, or in it with anything but a `-` and a
// blank; lines that start further right are within an item. Empty where
// the count is not the list's (a quoted scalar's continuation line that
// starts with "- "): no place is better than a wrong one.
std::vector<SourceLocation> blockItemDashes(const Field& list) {
  const std::string& text = *list.text;
  const YAML::Mark mark = list.node.Mark();
  if (mark.is_null() || mark.pos < 0 || size_t(mark.pos) >= text.size()) return {};
  std::vector<SourceLocation> dashes;
  std::optional<size_t> column;  // 0-based, of the list's dashes
  // The first dash may follow another on its line (`- - a`): the lines
  // read start after it.
  if (text[size_t(mark.pos)] == '-') {
    column = size_t(mark.column);
    dashes.push_back(SourceLocation{list.where.file, mark.line + 1, mark.column + 1});
  }  // else `&anchor` or `!!seq` before the list: its items start on the lines after
  size_t line_start = text.find('\n', size_t(mark.pos));
  if (line_start == std::string::npos) line_start = text.size();
  ++line_start;
  for (int line = mark.line + 2; line_start < text.size(); ++line) {
    const size_t end = std::min(text.find('\n', line_start), text.size());
    const std::string_view content(text.data() + line_start, end - line_start);
    line_start = end + 1;
    const size_t first = content.find_first_not_of(' ');
    if (first == std::string_view::npos || content[first] == '#' || content[first] == '\r')
      continue;
    if (!column) column = first;  // after an anchor or a tag
    if (first > *column) continue;
    const bool dash = first == *column && content[first] == '-' &&
                      (first + 1 == content.size() || content[first + 1] == ' ' ||
                       content[first + 1] == '\t' || content[first + 1] == '\r');
    if (!dash) break;
    dashes.push_back(SourceLocation{list.where.file, line, int(first) + 1});
  }
  if (dashes.size() != list.node.size()) return {};
  return dashes;
}

}  // namespace

YamlFile loadYamlFile(const std::string& path, std::string_view kind) {
  const SourceLocation file{path, 0, 0};
  const std::string cannot_read = "cannot read the " + std::string(kind) + ": ";
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (fs::is_directory(status)) throwInputError(file, "", cannot_read + "it is a directory");
  // A FIFO would block the open, a device would never end.
  if (fs::exists(status) && !fs::is_regular_file(status))
    throwInputError(file, "", cannot_read + "expected a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throwInputError(file, "", cannot_read + std::strerror(errno));
  // Read one byte past the limit: a file that grew since its size was taken
  // is refused too.
  std::string text(kMaxSpecBytes + 1, '\0');
  errno = 0;
  in.read(text.data(), std::streamsize(text.size()));
  // A read that failed is no empty spec (/proc/self/mem: EIO).
  if (in.bad()) throwInputError(file, "", cannot_read + std::strerror(errno ? errno : EIO));
  text.resize(size_t(in.gcount()));
  if (text.size() > kMaxSpecBytes) {
    const std::uintmax_t size = fs::file_size(path, error);
    throwInputError(file, "",
                    "expected a " + std::string(kind) + " of at most " +
                        std::to_string(kMaxSpecBytes) + " bytes, got " +
                        (error ? "more" : std::to_string(size)) + " bytes");
  }
  checkText(text, path);
  try {
    const DocumentScan scan(text);
    auto at = [&](const YAML::Mark& mark) {
      return SourceLocation{path, mark.line + 1, mark.column + 1};
    };
    if (const std::optional<YAML::Mark>& stalled = scan.stalled()) {
      const size_t pos = size_t(std::max(0, stalled->pos));
      const std::string next = pos < text.size() ? quotedPrintable(text.substr(pos, 1)) : "the end";
      throwInputError(at(*stalled), "", "invalid YAML: cannot read on from " + next);
    }
    // A `---` that ends the file (generated files have them) starts no
    // document; two with content are one too many.
    std::vector<DocumentScan::Document> documents = scan.documents();
    while (documents.size() > 1 && !documents.back().content) documents.pop_back();
    if (documents.size() > 1)
      throwInputError(at(documents[1].content.value_or(documents[1].start)), "",
                      "expected one YAML document: another starts here");
    YAML::Node root = YAML::Load(text);
    return {std::move(root), std::make_shared<const std::string>(std::move(text))};
  } catch (const YAML::DeepRecursion& e) {
    // yaml-cpp says only "bad file" here.
    throwInputError(
        SourceLocation{path, e.mark.line + 1, e.mark.column + 1}, "",
        "invalid YAML: nested more than " + std::to_string(e.depth() - 1) + " levels deep");
  } catch (const YAML::ParserException& e) {
    const SourceLocation where =
        e.mark.is_null() ? file : SourceLocation{path, e.mark.line + 1, e.mark.column + 1};
    const int tab_line = e.mark.is_null() ? 0 : tabIndentedLine(text, e.mark.line);
    const std::string hint =
        hasUnquotedBracketAddress(text) ? " (an IPv6 address must be quoted: \"[::1]:2222\")"
        : hasUnquotedGlobPattern(text, e.mark.is_null() ? -1 : e.mark.line)
            ? " (a tfrecords pattern must be quoted, as \"/data/train-*.tfrecord\": YAML reads "
              "a leading *, and ? and [, as its own)"
        : tab_line > 0
            ? fmt::format(" (a tab indents line {}: YAML indents with spaces only)", tab_line)
            : "";
    throwInputError(where, "", "invalid YAML: " + e.msg + hint);
  } catch (const YAML::Exception& e) {
    throwInputError(file, "", std::string("invalid YAML: ") + e.what());
  }
}

Field rootField(const YamlFile& file, const std::string& path) {
  return Field{file.root, "", locate(file.root, SourceLocation{path, 0, 0}), std::nullopt,
               file.text};
}

SourceLocation locate(const YAML::Node& node, const SourceLocation& fallback) {
  const YAML::Mark mark = node.Mark();
  if (node.IsNull() || mark.is_null() || mark.line < 0) return fallback;
  return {fallback.file, mark.line + 1, mark.column + 1};
}

Field childField(const Field& parent, const YAML::Node& node, std::string path,
                 const SourceLocation& use_site, bool after_use_site) {
  if (parent.written_at)
    return {node, std::move(path), parent.where, locate(node, *parent.written_at), parent.text};
  const SourceLocation own = locate(node, use_site);
  const auto place = [](const SourceLocation& l) { return std::pair{l.line, l.column}; };
  const bool aliased = place(own) < place(use_site) ||
                       (after_use_site && place(own) == place(use_site) && !node.IsNull());
  if (aliased) return {node, std::move(path), use_site, own, parent.text};
  return {node, std::move(path), own, std::nullopt, parent.text};
}

// ---------------------------------------------------------------------------
// Errors.

namespace {

// fail(), `written` naming what an alias reached ("the value", "the field").
[[noreturn]] void failAliased(const Field& field, std::string_view what, std::string_view written) {
  if (field.written_at)
    throwInputError(field.where, field.path,
                    fmt::format("{} (through an alias: {} is written at line {}, column {})", what,
                                written, field.written_at->line, field.written_at->column));
  throwInputError(field.where, field.path, what);
}

}  // namespace

void fail(const Field& field, std::string_view what) { failAliased(field, what, "the value"); }

void failExpected(const Field& field, std::string_view expected) {
  fail(field, "expected " + std::string(expected) + ", got " + describe(field.node));
}

namespace {

// A node's tag as it was written: !!int for YAML's core tags.
std::string shownTag(const YAML::Node& node) {
  constexpr std::string_view kCore = "tag:yaml.org,2002:";
  const std::string& tag = node.Tag();
  return quotedPrintable(tag.starts_with(kCore) ? "!!" + tag.substr(kCore.size()) : tag);
}

// No tag of its own, or YAML's core tag for `type`.
bool untaggedOr(const std::string& tag, std::string_view type) {
  return tag == "?" || tag.empty() || tag == "tag:yaml.org,2002:" + std::string(type);
}

}  // namespace

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "an empty value";
    case YAML::NodeType::Sequence:
      if (!isPlainCollection(node, "seq")) return "a list tagged " + shownTag(node);
      if (node.size() == 0) return "an empty list";
      return node.size() == 1 ? "a list of 1 item"
                              : "a list of " + std::to_string(node.size()) + " items";
    case YAML::NodeType::Map:
      return isPlainCollection(node, "map") ? "a mapping" : "a mapping tagged " + shownTag(node);
    default:
      break;
  }
  const std::string& text = node.Scalar();
  if (isQuoted(node))
    return (node.Tag() == "!" ? "the quoted string " : "the string ") + quoted(text);
  if (const std::string& tag = node.Tag(); tag != "?" && !tag.empty())
    return quoted(text) + " tagged " + shownTag(node);
  double number;
  if (parseNumber(text, number)) return text;  // a number is short
  return quoted(text);
}

std::string quoted(std::string text) {
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return quotedPrintable(text);
}

std::string joined(const std::vector<std::string_view>& words) {
  std::string s;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i) s += ", ";
    s += words[i];
  }
  return s;
}

bool isQuoted(const YAML::Node& node) {
  // yaml-cpp tags a quoted scalar "!"; `!!str 3` is a string as surely.
  return node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str";
}

bool isText(const YAML::Node& node) { return isPlainOr(node, "str") || isQuoted(node); }

bool isPlainCollection(const YAML::Node& node, std::string_view type) {
  return node.Tag() == "!" || untaggedOr(node.Tag(), type);
}

bool isPlainOr(const YAML::Node& node, std::string_view type) {
  return node.IsScalar() && untaggedOr(node.Tag(), type);
}

// ---------------------------------------------------------------------------
// Mappings and lists.

Mapping::Mapping(Field field) : field_(std::move(field)) {
  if (!field_.node.IsMap() || !isPlainCollection(field_.node, "map"))
    failExpected(field_, "a mapping of fields");
  std::unordered_map<std::string, size_t> first_given;  // key -> its entry
  for (const auto& entry : field_.node) {
    const YAML::Node& key = entry.first;
    // An empty key (`~: 1`) has no place of its own: its value's is on its line.
    const Field key_field = childField(
        field_, key, field_.path, key.IsNull() ? locate(entry.second, field_.where) : field_.where);
    if (!key.IsScalar()) failExpected(key_field, "a field name");
    const std::string name = key.Scalar();
    // Hashed: a mapping of 100,000 keys took half a minute compared pairwise.
    if (const auto [seen, added] = first_given.try_emplace(name, entries_.size()); !added) {
      const Field& first = entries_[seen->second].key_field;
      failAliased(key_field,
                  "duplicate field " + quoted(name) + " (first given at line " +
                      std::to_string(first.written_at.value_or(first.where).line) + ")",
                  "the field");
    }
    entries_.push_back(
        {name, key_field,
         childField(field_, entry.second, childPath(field_.path, name), key_field.where)});
  }
}

void Mapping::allowOnly(const std::vector<std::string_view>& known, std::string_view owner) const {
  for (const Entry& entry : entries_) {
    if (std::find(known.begin(), known.end(), entry.key) != known.end()) continue;
    std::string what = "unknown field " + quoted(entry.key);
    if (auto suggestion = closestWord(entry.key, known)) {
      what += " (did you mean '" + std::string(*suggestion) + "'?)";
    } else {
      what += " (the fields of " + std::string(owner) + " are " + joined(known) + ")";
    }
    if (entry.key == "<<") what += "; YAML merge keys are not read: write the fields out";
    failAliased(entry.key_field, what, "the field");
  }
}

std::optional<Field> Mapping::find(std::string_view key) const {
  for (const Entry& entry : entries_)
    if (entry.key == key) return entry.value;
  return std::nullopt;
}

Field Mapping::get(std::string_view key, std::string_view why) const {
  if (auto value = find(key)) return *value;
  std::string what = "missing field '" + std::string(key) + "'";
  if (!why.empty()) what += " (" + std::string(why) + ")";
  fail(field_, what);
}

std::vector<Field> listItems(const Field& field, std::string_view expected) {
  if (!field.node.IsSequence() || !isPlainCollection(field.node, "seq"))
    failExpected(field, expected);
  std::vector<Field> items;
  // An item written in place comes after every item before it: one that
  // does not was reached through an alias (of an earlier item, say).
  SourceLocation latest = field.where;
  std::optional<std::vector<SourceLocation>> dashes;  // read at the first that needs them
  for (size_t i = 0; i < field.node.size(); ++i) {
    const YAML::Node item = field.node[i];
    items.push_back(
        childField(field, item, field.path + "[" + std::to_string(i) + "]", latest, i > 0));
    // yaml-cpp places neither a bare `-` nor an alias (it gives the item
    // the place of what it reached): the item's own `-` says where it is
    // written, instead of the item before it.
    const bool in_block =
        field.text && !field.written_at && field.node.Style() == YAML::EmitterStyle::Block;
    if (in_block && (item.IsNull() || items.back().written_at)) {
      if (!dashes) dashes = blockItemDashes(field);
      if (!dashes->empty()) items.back().where = (*dashes)[i];
    }
    if (!items.back().written_at) latest = items.back().where;
  }
  return items;
}

// ---------------------------------------------------------------------------
// Scalars.

int64_t readInt(const Field& field, int64_t min, int64_t max) {
  const bool bounded = max != std::numeric_limits<int64_t>::max();
  std::string expected =
      min == 1   ? "a positive integer"
      : min == 0 ? "a non-negative integer"
      : bounded  ? "an integer from " + std::to_string(min) + " to " + std::to_string(max)
                 : "an integer of at least " + std::to_string(min);
  const std::string at_most = min == 0 || min == 1 ? expected + " of at most " + std::to_string(max)
                                                   : "an integer from " + std::to_string(min) +
                                                         " to " + std::to_string(max);
  int64_t value = 0;
  if (!isPlainOr(field.node, "int")) failExpected(field, expected);
  const std::string& text = field.node.Scalar();
  if (!parseInt(text, value)) {
    // Digits past what 64 bits hold are an integer too large, not a word.
    const bool digits =
        text.size() > 1 && (text[0] == '+' || std::isdigit(uint8_t(text[0]))) &&
        std::all_of(text.begin() + 1, text.end(), [](char c) { return std::isdigit(uint8_t(c)); });
    failExpected(field, digits ? at_most : expected);
  }
  if (value < min) failExpected(field, expected);
  if (value > max) failExpected(field, at_most);
  return value;
}

bool isPositive(double x) { return x > 0; }
bool isNonNegative(double x) { return x >= 0; }
bool isFraction(double x) { return x >= 0 && x < 1; }
bool isAnyNumber(double) { return true; }

double readNumber(const Field& field, std::string_view expected, bool (*ok)(double)) {
  double value = 0;
  int64_t integer = 0;
  const bool tagged_int = field.node.Tag() == "tag:yaml.org,2002:int";
  if (!(isPlainOr(field.node, "float") || isPlainOr(field.node, "int")) ||
      !parseNumber(field.node.Scalar(), value) || !std::isfinite(value) || !ok(value) ||
      (tagged_int && !parseInt(field.node.Scalar(), integer))) {  // `!!int 0.1` is no integer
    failExpected(field, expected);
  }
  return value;
}

float readFloat(const Field& field, std::string_view expected, bool (*ok)(double)) {
  const double value = readNumber(field, expected, isAnyNumber);
  const float narrowed = float(value);
  if (!std::isfinite(narrowed))  // finite as a double: beyond float32's range
    failExpected(field, "a number of magnitude at most 3.4e38 (float32's range)");
  // Below float32's smallest normal number a value is 0 to traind, which
  // flushes denormal floats to zero (so does the conversion above, under
  // its flags): an epsilon of 1e-40 would divide by 0. Its bits tell a
  // value from 0: under those flags a denormal double compares as 0 too
  // (1e-310 passed as 0, and ok() says nothing true of it).
  const uint64_t bits = std::bit_cast<uint64_t>(value) << 1;  // without the sign
  const bool denormal_double = bits != 0 && (bits >> 53) == 0;
  if (bits != 0 && std::fabs(narrowed) < std::numeric_limits<float>::min() &&
      (denormal_double || ok(value)))
    failExpected(field,
                 "a number of magnitude at least 1.17549435e-38 (float32's smallest normal "
                 "number; traind takes smaller ones as 0)");
  if (!ok(narrowed)) {
    if (!ok(value)) failExpected(field, expected);
    // In range as written, out of it once rounded: `rate: 0.99999999` is 1.
    fail(field, "expected " + std::string(expected) + ", got " + describe(field.node) +
                    ", which is " + fmt::format("{}", narrowed) + " as a 32-bit float");
  }
  return narrowed;
}

bool readBool(const Field& field) {
  if (isPlainOr(field.node, "bool")) {
    const std::string& s = field.node.Scalar();
    if (s == "true" || s == "True" || s == "TRUE") return true;
    if (s == "false" || s == "False" || s == "FALSE") return false;
  }
  failExpected(field, "true or false");
}

namespace {
// A file name's most: a name may become one (the model's), and the
// variable names made of it must fit a checkpoint's (safetensors.h).
constexpr size_t kLongestName = 255;
}  // namespace

std::string readName(const Field& field) {
  if (isText(field.node)) {
    const std::string& s = field.node.Scalar();
    if (!s.empty() && std::all_of(s.begin(), s.end(), isNameCharacter)) {
      if (s == "." || s == "..")
        fail(field,
             "expected a name other than '.' and '..', which name directories, got " + quoted(s));
      if (s.size() <= kLongestName) return s;
      fail(field, "expected a name of at most " + std::to_string(kLongestName) + " bytes, got " +
                      std::to_string(s.size()));
    }
  }
  failExpected(field, "a name of letters, digits, '_', '-' and '.'");
}

std::string nameFrom(std::string_view text) {
  if (text.empty() || text == "." || text == "..") return "model";
  std::string name(text.substr(0, kLongestName));
  std::replace_if(
      name.begin(), name.end(), [](char c) { return !isNameCharacter(c); }, '_');
  return name;
}

std::string readText(const Field& field, std::string_view expected) {
  if (!isText(field.node) || field.node.Scalar().empty()) failExpected(field, expected);
  return field.node.Scalar();
}

std::string resolvePath(const Field& field, const fs::path& spec_dir) {
  const std::string text = readText(field, "a path");
  // A quoted "\0" would end the path where the system reads it: the file
  // opened or the directory made would be another than the one named.
  if (text.find('\0') != std::string::npos) failExpected(field, "a path without a NUL character");
  const fs::path path = text;
  const std::string resolved =
      path.is_absolute() ? path.string() : (spec_dir / path).lexically_normal().string();
  // A shell's words, which traind does not expand: `~/ckpt` made a
  // directory named '~' beside the spec. A path that exists is what it names.
  std::error_code error;
  if (fs::exists(resolved, error)) return resolved;
  if (text.starts_with('~'))
    failExpected(field,
                 "a path with the home directory written out (traind does not expand '~', "
                 "as a shell does)");
  for (size_t dollar = text.find('$'); dollar != std::string::npos;
       dollar = text.find('$', dollar + 1)) {
    const char next = dollar + 1 < text.size() ? text[dollar + 1] : '\0';
    if (next == '{' || next == '_' || std::isalpha(uint8_t(next)))
      failExpected(field,
                   "a path without environment variables (traind does not expand "
                   "'$NAME', as a shell does)");
  }
  return resolved;
}

namespace {

// Refuses, naming `field`, a `path` that is not a readable regular file.
void checkReadableFile(const Field& field, const std::string& path) {
  const std::string expected = "an existing file, got '" + printable(path) + "'";
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (status.type() == fs::file_type::not_found)
    fail(field, "expected " + expected + " (no such file)");
  if (error) fail(field, "expected " + expected + " (cannot be read: " + error.message() + ")");
  if (fs::is_directory(status)) fail(field, "expected " + expected + " (a directory)");
  // A FIFO would block the probe below, a device would never end.
  if (!fs::is_regular_file(status)) fail(field, "expected " + expected + " (not a regular file)");
  std::ifstream probe(path, std::ios::binary);
  if (!probe)
    fail(field, "expected " + expected + " (cannot be read: " + std::strerror(errno) + ")");
}

// glob's directory reads, counted: a pattern such as /*/*/*/*/*/*/*/*
// walks /proc and /sys without end, and glob keeps every match. glob's
// callbacks take no context of their own: one count per thread.
constexpr size_t kMostGlobEntries = 100000;
thread_local size_t glob_entries_read = 0;
thread_local bool glob_listing_cut = false;

// Counts the entries it returns, '.' and '..' aside.
struct dirent* countedReaddir(void* dir) {
  struct dirent* entry = readdir(static_cast<DIR*>(dir));
  if (!entry || std::strcmp(entry->d_name, ".") == 0 || std::strcmp(entry->d_name, "..") == 0)
    return entry;
  if (glob_entries_read == kMostGlobEntries) {
    glob_listing_cut = true;
    return nullptr;  // the listing ends here
  }
  ++glob_entries_read;
  return entry;
}

}  // namespace

std::string readExistingFile(const Field& field, const fs::path& spec_dir) {
  const std::string path = resolvePath(field, spec_dir);
  checkReadableFile(field, path);
  return path;
}

std::vector<std::string> readExistingFiles(const Field& field, const fs::path& spec_dir) {
  const std::string pattern = resolvePath(field, spec_dir);
  // A file named with '[' or '*' is that file, if it exists.
  std::error_code error;
  if (pattern.find_first_of("*?[") == std::string::npos || fs::exists(pattern, error))
    return {readExistingFile(field, spec_dir)};
  glob_t matches{};
  matches.gl_opendir = [](const char* path) -> void* { return opendir(path); };
  matches.gl_readdir = countedReaddir;
  matches.gl_closedir = [](void* dir) { closedir(static_cast<DIR*>(dir)); };
  matches.gl_stat = [](const char* path, struct stat* out) { return stat(path, out); };
  matches.gl_lstat = [](const char* path, struct stat* out) { return lstat(path, out); };
  glob_entries_read = 0;
  glob_listing_cut = false;
  const int status = glob(pattern.c_str(), GLOB_ALTDIRFUNC, nullptr, &matches);
  std::vector<std::string> files(matches.gl_pathv, matches.gl_pathv + matches.gl_pathc);
  globfree(&matches);
  if (glob_listing_cut)
    fail(field, "the pattern '" + printable(pattern) + "' lists more than " +
                    std::to_string(kMostGlobEntries) +
                    " directory entries as it is matched: narrow it (each '*' of a directory "
                    "lists every one it matches; /proc and /sys hold loops)");
  if (status == GLOB_NOMATCH)
    fail(field, "expected a pattern that matches files, got '" + printable(pattern) +
                    "' (no file matches it)");
  if (status != 0)
    fail(field, "cannot list the files of '" + printable(pattern) + "': out of memory");
  for (const std::string& file : files) checkReadableFile(field, file);  // sorted by glob
  return files;
}

// ---------------------------------------------------------------------------
// Sections both specs have.

CheckpointSpec readCheckpoint(const Field& field, const fs::path& spec_dir) {
  Mapping fields(field);
  fields.allowOnly({"dir", "every_steps", "every_seconds", "keep"}, "the checkpoint section");
  CheckpointSpec checkpoint;
  const Field dir = fields.get("dir");
  checkpoint.dir = resolvePath(dir, spec_dir);
  checkpoint.dir_location = dir.where;
  if (auto f = fields.find("every_steps")) {
    checkpoint.every_steps = readInt(*f, 0);
    checkpoint.every_seconds = 0.0;  // by steps only, as TensorFlow 1 takes save_checkpoint_steps
  }
  if (auto f = fields.find("every_seconds"))
    checkpoint.every_seconds = readNumber(*f, "a non-negative number", isNonNegative);
  if (auto f = fields.find("keep")) checkpoint.keep = int(readInt(*f, 1, INT_MAX));
  return checkpoint;
}

}  // namespace traind::yaml_fields
