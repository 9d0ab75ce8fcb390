// Accepts worker connections on the ps's address and serves each its own
// ParameterShard capability (a session), with Cap'n Proto's two-party protocol.
// A peer that sends garbage or an oversized message loses its connection
// (logged); the others are served on.
#pragma once

#include <capnp/capability.h>
#include <kj/async-io.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "rpc/pinning_stream.h"

namespace traind {

class ShardServer {
 public:
  // A new session for one connection; `connection` is its socket, which the
  // session's replies may pin buffers on (rpc/pinning_stream.h).
  using NewSession = std::function<capnp::Capability::Client(kj::Own<PinningStream> connection)>;

  // Binds `address` ("host:port") now. Throws InputError when the address
  // does not resolve or the port is in use. With `most_connections` open, a
  // new connection ends the oldest whose peer has not said who it is
  // (PinningStream::identified), telling it why: connections that idle
  // without a hello cannot lock the workers out. With none such, or with
  // twice as many open (ended ones close once their reason is written,
  // which a peer that reads nothing holds up), the new one is closed at
  // once: a peer that opens and idles them would otherwise run the process
  // out of file descriptors. A failed accept (out of them all the same) is
  // retried.
  ShardServer(kj::AsyncIoContext& io, const std::string& address, size_t most_connections,
              NewSession new_session);
  ~ShardServer();

  // The address it listens on, as resolved ("127.0.1.1:2221" for "ps0:2221").
  const std::string& boundAddress() const { return bound_address_; }

  // Serves until the returned promise is dropped.
  kj::Promise<void> serve();
  int connections() const;
  // How many connections have closed since the server started.
  uint64_t connectionsClosed() const;
  // Ends every open connection, telling its peer `reason` first (an Abort;
  // rpc/pinning_stream.h): the peer reads it even if it was paused while
  // the ps went. The connections close as the event loop runs.
  void endConnections(const std::string& reason);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string bound_address_;
};

// How the reason a ps gives for ending the connections of a finished job
// starts: a worker that reads it has seen the job end (sharded_client.h's
// JobEnded).
constexpr std::string_view kJobOverReason = "the job is over";
// A chief whose run diverged stops the job with its words (the stop call),
// which a ps relays to the other workers (its status, the Abort of a
// connection it ends) as "the chief's run diverged: <words>": they stop as
// diverged too (core/error.h). The words are at most kMostDivergenceBytes,
// cut where the chief sends them and where a ps takes them.
constexpr size_t kMostDivergenceBytes = 2000;
std::string chiefDivergedText(std::string_view words);
// Whether a failure's text (a status call's, an Abort's) relays a chief's
// divergence.
bool relaysChiefDivergence(std::string_view text);

// What a ps's refusal of a hello for a worker task it holds a connection of
// says (OVERLOADED): a worker restarted at once reads it as its own old
// connection not yet seen closed.
constexpr std::string_view kConnectedAlready = "is connected already";

// What a ps's refusal of a worker whose training set is not the job's says
// (at its hello, or at a push once the chief said another): the worker ends
// as for bad input, exit 2, whichever call it was.
constexpr std::string_view kDifferentTrainingData =
    "the nodes read different training data (data.train's files must hold the same examples "
    "on every node)";

// The most connections a ps of a cluster of `workers` takes at once: a
// worker holds one to each ps, and a restarted one a second until the first
// is noticed gone; the rest is room for tools and probes.
inline size_t mostConnectionsFor(size_t workers) { return 4 * workers + 16; }

// Cap'n Proto reads at most this many 8-byte words per message: a 1 MiB
// chunk plus its envelope fits with room to spare, and a forged size field
// cannot make a node reserve more.
constexpr uint64_t kTraversalLimitWords = 4 * 1024 * 1024 / 8;

// What hello says of how the shards are cut into chunks: a ps and a worker
// that cut them differently would refuse each other's chunks mid-run.
// 1 (implicit, sent as 0): chunks cut by size; 2: never across gradient
// groups (core/placement.h); 3: shared memory regions hold a worker's
// buffers in layout order (rpc/shared_region.h); 4: a push+pull through
// shared memory may cover several chunks (rpc/traind.capnp); 5: hello
// carries the update rule; 6: the chief reports its checkpoints (saved);
// 7: a shard of one chunk goes in two halves (transferChunks); 8: the
// chief holds sync shards at one step while it reads them (holdAt); 9: a
// shard's status names the workers connected to it, whom a stopped chief
// waits for before its final checkpoint; 10: the chief tells the shards
// the job's last step; 11: hello carries the forward rule (and a TFRecord
// training set's CRC covers its files' record counts); 12: a chief whose
// run diverged says so in its stop, and the shard's status passes it on;
// 13: small variables go to the shards in runs (placeVariables), and hello
// carries the shard's chunks' fingerprint.
constexpr uint32_t kWireVersion = 13;

}  // namespace traind
