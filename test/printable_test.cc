#include "core/printable.h"

#include <catch2/catch.hpp>
#include <string>

using namespace traind;

TEST_CASE("printable keeps text and well-formed UTF-8, and escapes everything else") {
  CHECK(printable("hidden_1/kernel:rows=0..392") == "hidden_1/kernel:rows=0..392");
  CHECK(printable("") == "");
  // Two, three and four bytes, up to U+10FFFF.
  CHECK(printable("h\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf") ==
        "h\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf");
  // Control characters: C0 (a terminal's escape), DEL, C1 (CSI is U+009B).
  CHECK(printable("a\x1b[2Jb") == "a\\x1b[2Jb");
  CHECK(printable(std::string("a\0b", 3)) == "a\\x00b");
  CHECK(printable("\t\n\x7f") == "\\x09\\x0a\\x7f");
  CHECK(printable("\xc2\x9b"  // split: a hex escape would run on into the "2"
                  "2J") == "\\xc2\\x9b2J");
  CHECK(printable("\xc2\xa0") == "\xc2\xa0");  // U+00A0, the first after C1
  // Not UTF-8: a stray continuation byte, an overlong form, a surrogate, a
  // code point past U+10FFFF, a sequence cut short (at the end or not).
  CHECK(printable("a\x91z") == "a\\x91z");
  CHECK(printable("\xc0\xaf") == "\\xc0\\xaf");
  CHECK(printable("\xe0\x80\xaf") == "\\xe0\\x80\\xaf");
  CHECK(printable("\xed\xa0\x80") == "\\xed\\xa0\\x80");
  CHECK(printable("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");
  CHECK(printable("\xe2\x82") == "\\xe2\\x82");
  CHECK(printable("\xe2\x82z") == "\\xe2\\x82z");
  CHECK(printable("\xff\xfe") == "\\xff\\xfe");
  // Direction controls, which would reorder the rest of the line on a
  // terminal ("Trojan Source"): an override, an isolate, a mark.
  CHECK(printable("ckpt\xe2\x80\xae"
                  "txt.exe") == "ckpt\\u202etxt.exe");
  CHECK(printable("a\xe2\x81\xa6"
                  "b\xe2\x81\xa9") == "a\\u2066b\\u2069");
  CHECK(printable("\xd8\x9c\xe2\x80\x8f") == "\\u061c\\u200f");
  CHECK(printable("\xd8\xa7\xe2\x80\x94") == "\xd8\xa7\xe2\x80\x94");  // Alef, an em dash: shown
}

TEST_CASE("utf8SequenceLength measures one well-formed sequence") {
  CHECK(utf8SequenceLength("\xc3\xa9", 0) == 2);
  CHECK(utf8SequenceLength("x\xe2\x82\xac", 1) == 3);
  CHECK(utf8SequenceLength("\xf0\x90\x80\x80", 0) == 4);
  CHECK(utf8SequenceLength("\xf0\x8f\xbf\xbf", 0) == 0);  // overlong U+FFFF
  CHECK(utf8SequenceLength("\xe2\x82", 0) == 0);          // cut short at the end
  CHECK(utf8SequenceLength("\x80", 0) == 0);
  CHECK(utf8SequenceLength("a", 0) == 0);  // one byte is not a sequence
}

TEST_CASE("printablePrefix cuts long text and says how much it left out") {
  CHECK(printablePrefix("short", 10) == "short");
  CHECK(printablePrefix("exactly10!", 10) == "exactly10!");
  CHECK(printablePrefix(std::string(5000, 'x') + "\x1b", 3) == "xxx... (4998 bytes more)");
  CHECK(printablePrefix("\x1b[2Jabc", 4) == "\\x1b[2J... (3 bytes more)");
}

TEST_CASE("a quoted value shows spaces other than ' ' and invisible characters", "[printable]") {
  CHECK(quotedPrintable("mse\xc2\xa0") == "'mse\\u00a0'");          // no-break space
  CHECK(quotedPrintable("\xef\xbb\xbfloss") == "'\\ufeffloss'");    // a byte order mark
  CHECK(quotedPrintable("a\xe2\x80\xa8" "b") == "'a\\u2028b'");     // line separator
  CHECK(quotedPrintable("caf\xc3\xa9 \xe2\x9c\x93") == "'caf\xc3\xa9 \xe2\x9c\x93'");  // shown
  CHECK(quotedPrintable("\x1b[31m") == "'\\x1b[31m'");
}
