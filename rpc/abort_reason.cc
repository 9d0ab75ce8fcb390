#include "rpc/abort_reason.h"

#include <capnp/rpc.capnp.h>
#include <capnp/serialize.h>

#include <cstring>
#include <string_view>

#include "rpc/failure_text.h"

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

ConnectionEnd connectionEnd(const std::optional<std::string>& reason) {
  if (!reason) return {};
  // A peer's Abort comes back out as this side's reason, with Cap'n Proto's
  // prefix for a remote exception.
  constexpr std::string_view kRemote = "remote exception: ";
  const bool peers = std::string_view(*reason).starts_with(kRemote);
  const std::string text = failureText(*reason);
  // Cap'n Proto 0.9.2's words for a peer that closed its socket, whose
  // RpcSystem went with its process, and the system's for a process killed
  // with bytes unread.
  if (text == "Peer disconnected." || text == "RpcSystem was destroyed." ||
      text == "Connection reset by peer")
    return {};
  return {peers ? ConnectionEnd::Kind::PeersWords : ConnectionEnd::Kind::Dropped, text};
}

}  // namespace traind
