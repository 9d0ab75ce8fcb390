// Why a network operation or a call failed, in words for a log line.
//
// kj describes a failed system call with the call and its arguments
// ("::bind(sockfd, &addr.generic, addrlen): Address already in use;
// toString() = 127.0.0.1:2221"), a failed name lookup with its parameters,
// a std::exception thrown on this side as "std::exception: ...", a failed
// requirement with its condition first ("expected segmentCount() < 512
// [600 < 512]; Message has too many segments."), and Cap'n Proto a peer's
// exception as "remote exception: ...". A user needs the system's words,
// or the peer's.
#pragma once

#include <kj/exception.h>

#include <string>
#include <string_view>

namespace traind {

// "Address already in use", "Connection refused", "DNS lookup failed: Name
// or service not known", or the description without kj's prefixes. Made
// printable: the rest may be a peer's words.
std::string failureText(const kj::Exception& e);
std::string failureText(std::string_view description);

// Whether a failure's text (failureText's) is Cap'n Proto refusing the
// framing of what a peer sent: a segment count or size no Cap'n Proto peer
// writes, as the first bytes of an HTTP answer or other bytes read as a
// message's header. A traind peer never sends them.
bool isForeignFraming(std::string_view failure_text);

}  // namespace traind
