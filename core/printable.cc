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

std::string printable(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const uint8_t c = uint8_t(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += char(c);
      ++i;
    } else if (const size_t length =
                   c >= 0x80 && !isC1Control(text, i) ? utf8SequenceLength(text, i) : 0) {
      out.append(text.substr(i, length));
      i += length;
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
      ++i;
    }
  }
  return out;
}

std::string printablePrefix(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return printable(text);
  return printable(text.substr(0, max_bytes)) + "... (" + std::to_string(text.size() - max_bytes) +
         " bytes more)";
}

std::string quotedPrintable(std::string_view text) {
  std::string out = "'";  // not "'" + ...: GCC 12 warns falsely of an overlap (-Wrestrict)
  out += printable(text);
  out += "'";
  return out;
}

}  // namespace traind
