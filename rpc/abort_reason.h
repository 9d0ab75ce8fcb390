// Why the ps ended a connection, read back from what it last wrote.
//
// When Cap'n Proto 0.9.2 ends a connection for a reason (a peer's bytes
// that are not the protocol, a message over the size limit, a socket
// error), it writes the reason to the peer as an Abort message and then
// closes; the server's own code only sees the connection go, with no
// reason. PinningStream keeps a copy of the last short message it wrote,
// and this reads an Abort's reason out of it.
#pragma once

#include <kj/common.h>

#include <optional>
#include <string>

namespace traind {

// The reason of `message` (one serialized Cap'n Proto message, as written
// to the socket) when it is an RPC Abort; nothing for any other message or
// bytes that do not parse.
std::optional<std::string> abortReason(kj::ArrayPtr<const kj::byte> message);

// Why a connection ended, from the Abort this side wrote, in words for a
// log line (failure_text.h).
struct ConnectionEnd {
  enum class Kind {
    Departure,   // the peer left: it closed, its process ended or was killed
    PeersWords,  // the peer ended it with an Abort of its own: `text` is its reason
    Dropped,     // this side ended it: `text` is why (garbage, a message too large)
  };
  Kind kind = Kind::Departure;
  std::string text;
};
// `reason`: abortReason's, or nothing when no Abort was written.
ConnectionEnd connectionEnd(const std::optional<std::string>& reason);

}  // namespace traind
