#include "rpc/abort_reason.h"

#include <capnp/rpc.capnp.h>
#include <capnp/serialize.h>

#include <cstring>

namespace traind {

std::optional<std::string> abortReason(kj::ArrayPtr<const kj::byte> message) {
  if (message.size() == 0 || message.size() % sizeof(capnp::word) != 0) return std::nullopt;
  // The reader wants aligned words; the copy is one short message.
  auto words = kj::heapArray<capnp::word>(message.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), message.begin(), message.size());
  std::optional<std::string> reason;
  // A message this side wrote parses; anything else is not an Abort.
  kj::runCatchingExceptions([&] {
    capnp::FlatArrayMessageReader reader(words);
    const auto root = reader.getRoot<capnp::rpc::Message>();
    if (root.which() == capnp::rpc::Message::ABORT)
      reason = std::string(root.getAbort().getReason().cStr());
  });
  return reason;
}

bool isDeparture(const std::string& reason) {
  // Cap'n Proto 0.9.2's words: the peer closed its socket, or its RpcSystem
  // was destroyed (and told this side so).
  return reason == "Peer disconnected." || reason == "RpcSystem was destroyed.";
}

}  // namespace traind
