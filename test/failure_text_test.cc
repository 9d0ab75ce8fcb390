// failureText: kj's descriptions of failed system calls, lookups and
// calls, as a log line should give them (the texts are Cap'n Proto 0.9.2's).
#include "rpc/failure_text.h"

#include <catch2/catch.hpp>

namespace traind {
namespace {

TEST_CASE("a failed system call reads as the system's words", "[failure_text]") {
  CHECK(failureText("::bind(sockfd, &addr.generic, addrlen): Address already in use; toString() = "
                    "127.0.0.1:2221") == "Address already in use");
  CHECK(failureText("connect(): Connection refused") == "Connection refused");
  CHECK(failureText("DNS lookup failed.; params.host = h.invalid; params.service = ; "
                    "gai_strerror(status) = Name or service not known") ==
        "DNS lookup failed: Name or service not known");
}

TEST_CASE("a peer's words lose kj's prefixes and stay printable", "[failure_text]") {
  CHECK(failureText("remote exception: ps 0 serves architecture 1, the peer trains 2") ==
        "ps 0 serves architecture 1, the peer trains 2");
  CHECK(failureText("std::exception: answered a pull of 4 floats with 3 bytes") ==
        "answered a pull of 4 floats with 3 bytes");
  CHECK(failureText("remote exception: \x1b[2J") == "\\x1b[2J");
  CHECK(failureText("a (parenthesis): in words") == "a (parenthesis): in words");
  CHECK(failureText("f(x) is bad; see (a): b") == "f(x) is bad; see (a): b");
  CHECK(failureText("remote exception: std::exception: no slot 1") == "no slot 1");
  CHECK(failureText(kj::Exception(kj::Exception::Type::DISCONNECTED, "f.c++", 1,
                                  kj::heapString("connect(): Connection refused"))) ==
        "Connection refused");
}

TEST_CASE("a failed requirement reads as its words without the condition", "[failure_text]") {
  CHECK(failureText("expected segmentCount() < 512 [2955319054 < 512]; Message has too many "
                    "segments.") == "Message has too many segments.");
  CHECK(failureText("expected to see a list") == "expected to see a list");
  // Cap'n Proto's advice to a programmer is no operator's to follow.
  CHECK(failureText("expected totalSize <= options.traversalLimitInWords [6 <= 4]; Message is too "
                    "large.  To increase the limit on the receiving end, see "
                    "capnp::ReaderOptions.") == "Message is too large.");
}

}  // namespace
}  // namespace traind
