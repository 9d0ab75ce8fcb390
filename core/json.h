// A strict reader for JSON text (RFC 8259) and the quoting its writers need.
// Checkpoints hold two small JSON texts, the safetensors header and
// manifest.json; both come from files a user may hand us, so the reader
// rejects anything that is not JSON and bounds its nesting depth instead of
// trusting the input.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/printable.h"

namespace traind {

struct JsonValue {
  enum class Type { Null, Bool, Number, String, Array, Object };

  Type type = Type::Null;
  bool boolean = false;
  std::string text;  // String: the decoded UTF-8; Number: as written (valid JSON number syntax)
  std::vector<JsonValue> items;                            // Array
  std::vector<std::pair<std::string, JsonValue>> members;  // Object, in file order, keys unique

  // The member named `key` of an Object, nullptr when absent.
  const JsonValue* find(std::string_view key) const {
    for (const auto& [name, value] : members)
      if (name == key) return &value;
    return nullptr;
  }

  // The value of a Number written as an integer (no fraction, no exponent)
  // that fits in int64; nullopt for anything else.
  std::optional<int64_t> asInt64() const {
    if (type != Type::Number || text.find_first_of(".eE") != std::string::npos) return std::nullopt;
    int64_t value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
    return value;
  }
};

// "a string", "an object", ...: for messages such as "expected a string, got an array".
inline std::string_view jsonTypeName(JsonValue::Type type) {
  switch (type) {
    case JsonValue::Type::Null:
      return "null";
    case JsonValue::Type::Bool:
      return "a boolean";
    case JsonValue::Type::Number:
      return "a number";
    case JsonValue::Type::String:
      return "a string";
    case JsonValue::Type::Array:
      return "an array";
    case JsonValue::Type::Object:
      return "an object";
  }
  return "?";
}

// `s` as a JSON string literal, quotes included. JSON text is UTF-8: a
// byte that is not (a path's, say) is written as the text \xNN, as
// printable() shows it, where a reader would refuse the whole text.
inline std::string jsonQuote(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (uint8_t(c) >= 0x80) {
      if (const size_t n = utf8SequenceLength(s, i); n > 0) {
        out += s.substr(i, n);
        i += n - 1;
      } else {
        out += "\\\\x";
        out += kHex[uint8_t(c) >> 4];
        out += kHex[uint8_t(c) & 15];
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (uint8_t(c) < 0x20) {
          out += "\\u00";
          out += kHex[uint8_t(c) >> 4];
          out += kHex[uint8_t(c) & 15];
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// What a caller lets a text hold beyond the syntax, so that a file that
// lies costs no more memory than its use needs: a value takes about 90
// bytes here, so an array of 50 million one-digit numbers in a 100 MB text
// would take 4.5 GB.
struct JsonLimits {
  size_t most_array_items = SIZE_MAX;  // in any one array
  std::string_view items_why;          // for the message: "a shape has at most 32 dimensions"
  size_t most_values = SIZE_MAX;       // in the whole text, containers included
  std::string_view values_why;
};

namespace json_detail {

class Parser {
 public:
  // Deep enough for any header or manifest, shallow enough that a hostile
  // file cannot exhaust the stack.
  static constexpr int kMaxDepth = 64;

  Parser(std::string_view text, const std::string& source, JsonLimits limits)
      : text_(text), source_(source), limits_(limits) {}

  JsonValue parseDocument() {
    JsonValue value = parseValue(0);
    skipWhitespace();
    if (pos_ != text_.size()) fail("unexpected " + describeNext() + " after the JSON value");
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    int line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throwInputError(SourceLocation{source_, line, column}, "", "invalid JSON: " + what);
  }

  std::string describeNext() const {
    if (pos_ >= text_.size()) return "end of text";
    const char c = text_[pos_];
    if (uint8_t(c) < 0x20 || uint8_t(c) >= 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      return std::string("byte 0x") + kHex[uint8_t(c) >> 4] + kHex[uint8_t(c) & 15];
    }
    return std::string("'") + c + "'";
  }

  void skipWhitespace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  void expect(char c, std::string_view context) {
    skipWhitespace();
    if (pos_ >= text_.size() || text_[pos_] != c)
      fail("expected '" + std::string(1, c) + "' " + std::string(context) + ", got " +
           describeNext());
    ++pos_;
  }

  JsonValue parseValue(int depth) {
    if (depth > kMaxDepth) fail("nested deeper than " + std::to_string(kMaxDepth) + " levels");
    if (++values_ > limits_.most_values)
      fail("more than " + std::to_string(limits_.most_values) + " values (" +
           std::string(limits_.values_why) + ")");
    skipWhitespace();
    if (pos_ >= text_.size()) fail("expected a value, got end of text");
    JsonValue value;
    const char c = text_[pos_];
    if (c == '{') {
      value.type = JsonValue::Type::Object;
      parseObject(value, depth);
    } else if (c == '[') {
      value.type = JsonValue::Type::Array;
      parseArray(value, depth);
    } else if (c == '"') {
      value.type = JsonValue::Type::String;
      value.text = parseString();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      value.type = JsonValue::Type::Number;
      value.text = parseNumber();
    } else if (text_.substr(pos_, 4) == "true") {
      value.type = JsonValue::Type::Bool;
      value.boolean = true;
      pos_ += 4;
    } else if (text_.substr(pos_, 5) == "false") {
      value.type = JsonValue::Type::Bool;
      pos_ += 5;
    } else if (text_.substr(pos_, 4) == "null") {
      pos_ += 4;
    } else {
      fail("expected a value, got " + describeNext());
    }
    return value;
  }

  void parseObject(JsonValue& object, int depth) {
    ++pos_;  // '{'
    skipWhitespace();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      return;
    }
    // The keys so far, hashed: a header may hold hundreds of thousands, and
    // a scan of the members for each would take hours at the size limit.
    std::unordered_set<std::string> keys;
    while (true) {
      skipWhitespace();
      if (pos_ >= text_.size() || text_[pos_] != '"')
        fail("expected a string key, got " + describeNext());
      const size_t key_pos = pos_;
      std::string key = parseString();
      if (!keys.insert(key).second) {
        pos_ = key_pos;
        fail("duplicate key " + jsonQuote(key));
      }
      expect(':', "after an object key");
      object.members.emplace_back(std::move(key), parseValue(depth + 1));
      skipWhitespace();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      expect('}', "or ',' in an object");
      return;
    }
  }

  void parseArray(JsonValue& array, int depth) {
    ++pos_;  // '['
    skipWhitespace();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      return;
    }
    while (true) {
      if (array.items.size() == limits_.most_array_items)
        fail("an array of more than " + std::to_string(limits_.most_array_items) + " items (" +
             std::string(limits_.items_why) + ")");
      array.items.push_back(parseValue(depth + 1));
      skipWhitespace();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      expect(']', "or ',' in an array");
      return;
    }
  }

  bool digitAt(size_t i) const { return i < text_.size() && text_[i] >= '0' && text_[i] <= '9'; }

  std::string parseNumber() {
    const size_t begin = pos_;
    if (text_[pos_] == '-') ++pos_;
    if (!digitAt(pos_)) fail("expected a digit, got " + describeNext());
    if (text_[pos_] == '0') {
      ++pos_;
      if (digitAt(pos_)) fail("numbers may not have leading zeros");
    } else {
      while (digitAt(pos_)) ++pos_;
    }
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      if (!digitAt(pos_)) fail("expected a digit after '.', got " + describeNext());
      while (digitAt(pos_)) ++pos_;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (!digitAt(pos_)) fail("expected a digit in the exponent, got " + describeNext());
      while (digitAt(pos_)) ++pos_;
    }
    return std::string(text_.substr(begin, pos_ - begin));
  }

  uint32_t parseHex4() {
    uint32_t code = 0;
    for (int i = 0; i < 4; ++i, ++pos_) {
      if (pos_ >= text_.size()) fail("expected 4 hex digits after \\u, got end of text");
      const char c = text_[pos_];
      code <<= 4;
      if (c >= '0' && c <= '9')
        code |= uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f')
        code |= uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        code |= uint32_t(c - 'A' + 10);
      else
        fail("expected 4 hex digits after \\u, got " + describeNext());
    }
    return code;
  }

  static void appendUtf8(std::string& out, uint32_t code) {
    if (code < 0x80) {
      out += char(code);
    } else if (code < 0x800) {
      out += char(0xc0 | (code >> 6));
      out += char(0x80 | (code & 0x3f));
    } else if (code < 0x10000) {
      out += char(0xe0 | (code >> 12));
      out += char(0x80 | ((code >> 6) & 0x3f));
      out += char(0x80 | (code & 0x3f));
    } else {
      out += char(0xf0 | (code >> 18));
      out += char(0x80 | ((code >> 12) & 0x3f));
      out += char(0x80 | ((code >> 6) & 0x3f));
      out += char(0x80 | (code & 0x3f));
    }
  }

  std::string parseString() {
    ++pos_;  // opening quote
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) fail("unterminated string");
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (uint8_t(c) < 0x20) fail("control character " + describeNext() + " inside a string");
      if (uint8_t(c) >= 0x80) {
        // JSON text is UTF-8 (RFC 8259): a name read from a corrupt file
        // must not reach a message or a log as raw bytes.
        const size_t length = utf8SequenceLength(text_, pos_);
        if (length == 0) fail("invalid UTF-8 at " + describeNext() + " inside a string");
        out.append(text_.substr(pos_, length));
        pos_ += length;
        continue;
      }
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      ++pos_;
      if (pos_ >= text_.size()) fail("unterminated string");
      const char escape = text_[pos_++];
      switch (escape) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          uint32_t code = parseHex4();
          if (code >= 0xdc00 && code <= 0xdfff) fail("unpaired UTF-16 low surrogate in \\u escape");
          if (code >= 0xd800 && code <= 0xdbff) {
            if (text_.substr(pos_, 2) != "\\u")
              fail("unpaired UTF-16 high surrogate in \\u escape");
            pos_ += 2;
            const uint32_t low = parseHex4();
            if (low < 0xdc00 || low > 0xdfff) fail("unpaired UTF-16 high surrogate in \\u escape");
            code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
          }
          appendUtf8(out, code);
          break;
        }
        default:
          --pos_;
          fail("invalid escape '\\" + std::string(1, escape) + "' in a string");
      }
    }
  }

  std::string_view text_;
  const std::string& source_;
  JsonLimits limits_;
  size_t values_ = 0;
  size_t pos_ = 0;
};

}  // namespace json_detail

// Parses a whole JSON text. Throws InputError
// "<source>:<line>:<column>: invalid JSON: <what>" at the first error, or
// at the first value past `limits`.
inline JsonValue parseJson(std::string_view text, const std::string& source,
                           JsonLimits limits = {}) {
  return json_detail::Parser(text, source, limits).parseDocument();
}

}  // namespace traind
