#include "core/printable.h"

#include <cstdint>

namespace traind {

size_t utf8SequenceLength(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) -> uint8_t {
    return pos + i < text.size() ? uint8_t(text[pos + i]) : 0;
  };
  const uint8_t lead = byte(0);
  size_t length = 0;
  uint8_t low = 0x80, high = 0xbf;  // the range of the second byte
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) low = 0xa0;   // overlong
    if (lead == 0xed) high = 0x9f;  // surrogates
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) low = 0x90;   // overlong
    if (lead == 0xf4) high = 0x8f;  // past U+10FFFF
  } else {
    return 0;
  }
  if (byte(1) < low || byte(1) > high) return 0;
  for (size_t i = 2; i < length; ++i)
    if (byte(i) < 0x80 || byte(i) > 0xbf) return 0;
  return length;
}

bool isC1Control(std::string_view text, size_t pos) {
  return uint8_t(text[pos]) == 0xc2 && pos + 1 < text.size() && uint8_t(text[pos + 1]) < 0xa0;
}

namespace {

constexpr char kHex[] = "0123456789abcdef";

// The code point of the well-formed UTF-8 sequence of `length` bytes at `pos`.
uint32_t codePoint(std::string_view text, size_t pos, size_t length) {
  uint32_t cp = uint8_t(text[pos]) & (0xff >> (length + 1));
  for (size_t i = 1; i < length; ++i) cp = (cp << 6) | (uint8_t(text[pos + i]) & 0x3f);
  return cp;
}

// Spaces other than ' ', and characters that show nothing: between quotes
// they read as a space or as nothing at all ('mse' followed by U+00A0
// looks like 'mse ').
bool isInvisible(uint32_t cp) {
  return cp == 0xa0 || cp == 0xad || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200f) ||
         (cp >= 0x2028 && cp <= 0x202f) || (cp >= 0x205f && cp <= 0x2064) || cp == 0x3000 ||
         cp == 0xfeff;
}

// Controls of the direction text shows in (embeddings, overrides,
// isolates, marks): they reorder the rest of a line on a terminal, so that
// a log line or a message could show other text than it holds.
bool isBidiControl(uint32_t cp) {
  return cp == 0x061c || cp == 0x200e || cp == 0x200f || (cp >= 0x202a && cp <= 0x202e) ||
         (cp >= 0x2066 && cp <= 0x2069);
}

// printable(text) appended to `out`; with `invisible`, the characters
// isInvisible names as \uXXXX too (quotedPrintable).
void appendPrintable(std::string_view text, bool invisible, std::string& out) {
  for (size_t i = 0; i < text.size();) {
    const uint8_t c = uint8_t(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += char(c);
      ++i;
    } else if (const size_t length =
                   c >= 0x80 && !isC1Control(text, i) ? utf8SequenceLength(text, i) : 0) {
      // Decoded only when asked, or when it may be a bidi control (U+061C,
      // U+2xxx): printable() runs on every logged peer's text.
      const bool decode = invisible || (length == 2 && c == 0xd8) || (length == 3 && c == 0xe2);
      if (const uint32_t cp = decode ? codePoint(text, i, length) : 0;
          isBidiControl(cp) || (invisible && isInvisible(cp))) {
        out += "\\u";
        for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(cp >> shift) & 15];
      } else {
        out.append(text.substr(i, length));
      }
      i += length;
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
      ++i;
    }
  }
}

}  // namespace

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  appendPrintable(text, false, out);
  return out;
}

std::string printablePrefix(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return printable(text);
  return printable(text.substr(0, max_bytes)) + "... (" + std::to_string(text.size() - max_bytes) +
         " bytes more)";
}

std::string quotedPrintable(std::string_view text) {
  std::string out = "'";  // not "'" + ...: GCC 12 warns falsely of an overlap (-Wrestrict)
  appendPrintable(text, true, out);
  out += "'";
  return out;
}

std::string listedInProse(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i)
    out += (i == 0 ? "" : i + 1 == items.size() ? " and " : ", ") + items[i];
  return out;
}

}  // namespace traind
