#include "rpc/open_answers_stream.h"

#include <capnp/rpc.capnp.h>
#include <kj/debug.h>

#include <string>

namespace traind {

kj::Promise<kj::Maybe<capnp::MessageReaderAndFds>> OpenAnswersStream::tryReadMessage(
    kj::ArrayPtr<kj::AutoCloseFd> fd_space, capnp::ReaderOptions options,
    kj::ArrayPtr<capnp::word> scratch_space) {
  return inner_.tryReadMessage(fd_space, options, scratch_space)
      .then([this](kj::Maybe<capnp::MessageReaderAndFds>&& message) {
        KJ_IF_MAYBE (read, message) count(*read->reader);
        return kj::mv(message);
      });
}

kj::Promise<void> OpenAnswersStream::writeMessage(
    kj::ArrayPtr<const int> fds, kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments) {
  return inner_.writeMessage(fds, segments);
}

kj::Promise<void> OpenAnswersStream::writeMessages(
    kj::ArrayPtr<kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>>> messages) {
  return inner_.writeMessages(messages);
}

void OpenAnswersStream::count(capnp::MessageReader& message) {
  capnp::rpc::Message::Which which = capnp::rpc::Message::UNIMPLEMENTED;
  // A message that is no RPC message is the RPC system's to refuse, with
  // its own words.
  if (kj::runCatchingExceptions([&] { which = message.getRoot<capnp::rpc::Message>().which(); }) !=
      nullptr)
    return;
  if (which == capnp::rpc::Message::CALL || which == capnp::rpc::Message::BOOTSTRAP)
    ++open_;
  else if (which == capnp::rpc::Message::FINISH && open_ > 0)
    --open_;
  if (open_ > most_open_)
    kj::throwFatalException(kj::Exception(
        kj::Exception::Type::FAILED, __FILE__, __LINE__,
        kj::heapString("this connection holds more than " + std::to_string(most_open_) +
                       " calls whose answers the peer has not released (no Finish for them): a "
                       "worker releases each as soon as it has read it")));
}

}  // namespace traind
