#include "rpc/sharded_client.h"

#include <capnp/orphan.h>
#include <capnp/rpc-twoparty.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <set>
#include <string_view>

#include "core/cluster_spec.h"
#include "core/error.h"
#include "core/open_file_limit.h"
#include "core/parameter_shard.h"
#include "core/printable.h"
#include "rpc/deadline.h"
#include "rpc/failure_text.h"
#include "rpc/peer_silence.h"
#include "rpc/reason_first_stream.h"
#include "rpc/shard_server.h"
#include "rpc/shared_region.h"
#include "rpc/traind.capnp.h"

namespace traind {
namespace {

using Clock = std::chrono::steady_clock;

// One ps shard as the worker sees it.
struct ShardLink {
  int index = 0;
  std::string address;
  std::vector<ShardChunk> chunks;
  std::vector<size_t> first_variables;  // per chunk: the first variable it holds
  bool shared = false;  // the ps mapped the worker's region: tensors go through it
  kj::Own<kj::AsyncIoStream> stream;
  kj::Own<capnp::TwoPartyVatNetwork> network;
  kj::Own<capnp::RpcSystem<capnp::rpc::twoparty::VatId>> rpc;
  kj::Maybe<wire::ParameterShard::Client> client;

  wire::ParameterShard::Client& shard() {
    KJ_IF_MAYBE(c, client) return *c;
    throw std::logic_error("ps " + std::to_string(index) + " used before connect()");
  }
};

// What to add to a ps's refusal or a foreign answer when its name resolves
// to several addresses here: a worker tries each in turn, and the one that
// answered may be another task's (the ps listens on the first only). Empty
// otherwise.
std::string severalAddressesNote(const HostPort& address) {
  const std::vector<HostPort> resolved = resolvedAddresses(address);
  if (resolved.size() < 2) return {};
  std::vector<std::string> listed;
  for (const HostPort& each : resolved) listed.push_back(each.toString());
  return fmt::format(
      " ({} resolves to {} here, tried in turn: the answer may be another task's, on another "
      "address than the ps listens on; give each task a name of one address)",
      address.host, listedInProse(listed));
}

// A global step from a ps's reply. An honest ps starts at most at
// kMaxGlobalStep (ParameterShard::markReady, a checkpoint's manifest) and
// runs to at most max_steps (kMaxSteps, half as far) and a few steps past,
// and the worker adds to it: a larger or a negative step is a lie it must
// not act on.
int64_t reportedStep(int64_t step) {
  if (step < 0 || step > kMaxGlobalStep)
    throw std::runtime_error(fmt::format("reported global step {}, outside [0, 2^53]", step));
  return step;
}

// The step of a reply to a call that waited for `min_step`: an honest ps
// answers once the chunks reached it, or as it stops, which it says. A
// lower step unsaid is a lie, not the job's end.
int64_t answeredStep(int64_t step, int64_t min_step, bool stopping) {
  reportedStep(step);
  if (step < min_step && !stopping)
    throw std::runtime_error(fmt::format(
        "answered global step {} to a call that waits for step {}, without saying it is "
        "stopping",
        step, min_step));
  return step;
}

// The lowest of each shard's step at a pull; nullopt when no shard answered
// with one (a shard that holds nothing answers nothing and keeps INT64_MAX).
std::optional<int64_t> lowestStep(const std::vector<int64_t>& shard_steps) {
  int64_t lowest = INT64_MAX;
  for (int64_t s : shard_steps) lowest = std::min(lowest, s);
  if (lowest == INT64_MAX) return std::nullopt;
  return lowest;
}

// `workers`: the cluster's; a worker task outside it is a lie.
ShardStatusView toView(wire::ShardStatus::Reader s, size_t workers) {
  ShardStatusView view{s.getReady(),
                       reportedStep(s.getGlobalStep()),
                       s.getStopping(),
                       {},
                       reportedStep(s.getLastStep()),
                       // A ps cut the words to kMostDivergenceBytes, and says how
                       // much it left out: room for that.
                       printablePrefix(s.getDiverged().cStr(), 2 * kMostDivergenceBytes)};
  for (uint32_t task : s.getWorkers()) {
    if (task >= workers)
      throw std::runtime_error(
          fmt::format("reported worker {} connected, in a cluster of {}", task, workers));
    view.workers.push_back(task);
  }
  return view;
}

// Data that a request points at instead of copying; Cap'n Proto needs
// 8-byte aligned external data, so other slices are copied.
template <typename ParamsBuilder>
void attachFloats(ParamsBuilder request, const float* data, int64_t count) {
  const size_t bytes = size_t(count) * sizeof(float);
  if (reinterpret_cast<uintptr_t>(data) % 8 == 0) {
    auto orphanage = capnp::Orphanage::getForMessageContaining(request);
    request.adoptData(orphanage.referenceExternalData(
        capnp::Data::Reader(reinterpret_cast<const kj::byte*>(data), bytes)));
  } else {
    std::memcpy(request.initData(bytes).begin(), data, bytes);
  }
}

// "not all at global step 12 (ps 0 at 12, ps 1 at 11 to 12)" when the
// shards' chunks, read from `lowest` to `highest` step each (INT64_MAX: a
// shard read nothing), are not all at `expected` (-1: at the first
// shard's lowest); nullopt when they are.
std::optional<std::string> stepsApart(const std::vector<int64_t>& lowest,
                                      const std::vector<int64_t>& highest, int64_t expected) {
  std::string steps;
  bool apart = false;
  for (size_t i = 0; i < lowest.size(); ++i) {
    if (lowest[i] == INT64_MAX) continue;
    if (expected < 0) expected = lowest[i];
    apart |= lowest[i] != expected || highest[i] != expected;
    steps += fmt::format("{}ps {} at {}", steps.empty() ? "" : ", ", i, lowest[i]);
    if (highest[i] != lowest[i]) steps += fmt::format(" to {}", highest[i]);
  }
  if (!apart) return std::nullopt;
  return fmt::format("not all at global step {} ({})", expected, steps);
}

// After a failed call the chief gives the shards this long to lift their
// holds: one that does not answer lifts it as its connection closes.
constexpr double kReleaseAfterFailureSeconds = 1.0;

// How often a checkpoint reads the shards when a hold was lifted under its
// reads: once more, as a pause seldom comes twice in one checkpoint.
constexpr int kStateReadAttempts = 2;

// How often a waiting call looks at the stop flag.
constexpr kj::Duration kStopTick = 50 * kj::MILLISECONDS;

// Why a wait for calls was given up.
enum class GivenUp {
  Stop,       // *stop held for ShardedClient::kStopGraceSeconds
  JobEnding,  // ShardedClient::kStoppingGraceSeconds after *stopping named a shard
};

// Resolves once the wait is to be given up, one poll for both reasons:
// `stop` and `stopping` may each be null (not watched). `answers`, when
// given, counts the calls answered so far: the stop's grace counts only
// while it stands still, so that calls merely slow (a big model's pull,
// a reply every tick) finish.
kj::Promise<GivenUp> givenUp(kj::Timer& timer, const std::atomic<bool>* stop,
                             const std::optional<int>* stopping, const size_t* answers = nullptr,
                             size_t answers_seen = 0, kj::Duration held = 0 * kj::SECONDS) {
  return timer.afterDelay(kStopTick).then(
      [&timer, stop, stopping, answers, answers_seen, held]() -> kj::Promise<GivenUp> {
        if (stopping && *stopping)
          return timer.afterDelay(ShardedClient::kStoppingGraceSeconds * kj::SECONDS).then([] {
            return GivenUp::JobEnding;
          });
        const size_t answered = answers ? *answers : 0;
        const bool waiting = stop && stop->load() && answered == answers_seen;
        const kj::Duration now_held = waiting ? held + kStopTick : 0 * kj::SECONDS;
        if (now_held >= int64_t(ShardedClient::kStopGraceSeconds * 1000) * kj::MILLISECONDS)
          return GivenUp::Stop;
        return givenUp(timer, stop, stopping, answers, answered, now_held);
      });
}

// Said of a pull or push+pull abandoned for a stop: the step it waited for
// (sync), or only the replies (async, `min_step` 0: any step will do).
void logGivenUpOnStop(int64_t min_step) {
  if (min_step > 0)
    spdlog::info("stop requested: gave up waiting for the ps shards' step {}", min_step);
  else
    spdlog::info("stop requested: gave up waiting for the ps shards' replies");
}

// Throws JobDiverged when `why`, a failed call's to `link`, is a ps's
// Abort at the job's end that relays the chief's divergence.
void throwIfJobDivergedAbort(const ShardLink& link, const std::string& why) {
  if (why.starts_with(kJobOverReason) && relaysChiefDivergence(why))
    throw JobDiverged(
        fmt::format("ps {} at {} closed the connection: {}", link.index, link.address, why));
}

// Throws for a failed call to `link`: the shard named, and why.
[[noreturn]] void throwShardFailure(const ShardLink& link, const kj::Exception& e) {
  const std::string why = failureText(e);
  // First: the chief's words it relays may be a refusal of a gradient.
  throwIfJobDivergedAbort(link, why);
  if (isGradientNotFinite(why))
    throw Diverged(fmt::format("ps {} at {}: {}", link.index, link.address, why));
  if (why.find(kDifferentTrainingData) != std::string::npos)
    throw InputError(
        fmt::format("ps {} at {} refused this worker: {}", link.index, link.address, why));
  if (why.starts_with(kJobOverReason))
    throw JobEnded(
        fmt::format("ps {} at {} closed the connection: {}", link.index, link.address, why));
  if (e.getType() == kj::Exception::Type::DISCONNECTED)
    throw std::runtime_error(
        fmt::format("lost the connection to ps {} at {} (it stopped, or its "
                    "host cannot be reached): {}",
                    link.index, link.address, why));
  throw std::runtime_error(fmt::format("ps {} at {}: {}", link.index, link.address, why));
}

// Calls per shard in flight during a pull or a push+pull (and a read or an
// initialisation of the whole state: everyChunkAndSlot). A few keep the
// link busy both ways (a chunk's reply streams back while the next chunks
// go out); more only queue up in socket buffers. Measured on loopback: 2, 4
// and 8 alike, every chunk at once slower (docs/benchmarks.md, Distributed).
constexpr size_t kCallsInFlight = 4;
// In sync training a chunk's reply also waits for the other workers'
// gradients of that chunk, longer than a round trip, so more calls keep the
// link busy (fashion_mlp, 6 chunks: 4 in flight about 10% slower than all). Each
// costs the ps a partial sum of at most 1 MiB while it waits: with 8 per
// worker and shard a ps of P = 65 MiB and 2 workers peaks at 3.37 P
// (bench/distributed_compare.py rss; 3.32 P with 4, 4.3 P with all at once).
// Calls of several chunks (through shared memory) count as their chunks:
// see CallRound. Every call not yet released counts against the ps's
// most open answers per connection (rpc/open_answers_stream.h, 512).
constexpr size_t kSyncCallsInFlight = 8;

// The first of several joined calls to fail, in time, and its shard:
// joinPromises reports a failure only after every promise it joins has
// ended, and not whose it was.
class FirstFailure {
 public:
  // A catch_ handler for a call to `link`: notes the failure, passes it on.
  auto of(ShardLink& link) {
    return [this, &link](kj::Exception&& e) {
      if (first_ == nullptr) first_ = Failure{&link, kj::cp(e)};
      if (refusal_ == nullptr && isRefusal(e)) refusal_ = Failure{&link, kj::cp(e)};
      return kj::Promise<void>(kj::mv(e));
    };
  }
  // Waits for `all`, the calls joined; on failure runs `cleanup`, then
  // throws as throwShardFailure() for the first shard whose call failed.
  void wait(kj::Promise<void> all, kj::WaitScope& scope,
            const std::function<void()>& cleanup = {}) {
    KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] { all.wait(scope); })) fail(*e, cleanup);
  }
  // The calls joined failed with `e`: as wait() after it.
  [[noreturn]] void fail(const kj::Exception& e, const std::function<void()>& cleanup = {}) {
    if (cleanup) cleanup();
    KJ_IF_MAYBE (first, first_) throwShardFailure(*first->link, first->exception);
    // This side's code threw in a callback: said in words, as every
    // failure of a call is, not as kj's own exception.
    throw std::runtime_error(failureText(e));
  }
  // After a wait that ended otherwise (given up on a stop, or at the job's
  // end): throws as wait() does for a call that failed meanwhile, unless
  // its shard's connection was lost or closed at the job's end without a
  // divergence, which a stopping ps may do first.
  void throwIfRefused() const {
    KJ_IF_MAYBE (refusal, refusal_) throwShardFailure(*refusal->link, refusal->exception);
  }

 private:
  struct Failure {
    const ShardLink* link;
    kj::Exception exception;
  };
  // Not a connection lost, nor closed at the job's end without a divergence.
  static bool isRefusal(const kj::Exception& e) {
    const std::string why = failureText(e);
    return why.starts_with(kJobOverReason) ? relaysChiefDivergence(why)
                                           : e.getType() != kj::Exception::Type::DISCONNECTED;
  }
  kj::Maybe<Failure> first_;
  kj::Maybe<Failure> refusal_;  // the first failure that isRefusal
};

// A call for one chunk of a shard and one slot of the state (0: the
// parameters, s: the optimizer's slot s - 1).
using ChunkSlotCall = std::function<kj::Promise<void>(ShardLink&, const ShardChunk&, size_t slot)>;

// `call` for every chunk and every one of `slots` + 1 slots of every shard,
// kCallsInFlight per shard at a time (lane j takes items j, j +
// kCallsInFlight, ...): the lanes joined, for FirstFailure::wait. A lane
// stops at its first failure. The whole state goes this way, never all at
// once: each call whose answer the ps has not seen released counts against
// the most it keeps open per connection (rpc/open_answers_stream.h), and
// each reply is a message of up to 1 MiB the ps builds at once.
kj::Promise<void> everyChunkAndSlot(std::vector<ShardLink>& shards, size_t slots,
                                    ChunkSlotCall call, FirstFailure& failure) {
  struct Lanes {
    size_t slots;
    ChunkSlotCall call;
    std::function<kj::Promise<void>(ShardLink&, size_t)> lane;
  };
  auto lanes = kj::heap<Lanes>(Lanes{slots, std::move(call), {}});
  lanes->lane = [state = lanes.get(), &failure](ShardLink& link, size_t item) {
    const size_t per_chunk = state->slots + 1;
    if (item >= link.chunks.size() * per_chunk) return kj::Promise<void>(kj::READY_NOW);
    return state->call(link, link.chunks[item / per_chunk], item % per_chunk)
        .catch_(failure.of(link))
        .then([state, &link, item] { return state->lane(link, item + kCallsInFlight); });
  };
  kj::Vector<kj::Promise<void>> started;
  for (ShardLink& link : shards)
    for (size_t j = 0; j < kCallsInFlight; ++j) started.add(lanes->lane(link, j));
  return kj::joinPromises(started.releaseAsArray()).attach(kj::mv(lanes));
}

// `calls`, failed as a lost connection once a shard leaves a status call
// unanswered for kPeerSilenceSeconds; a shard whose status says it is
// stopping goes into `*stopping`, when given. Defined with heartbeat() below.
kj::Promise<void> watched(kj::Promise<void> calls, std::vector<ShardLink>& shards, kj::Timer& timer,
                          FirstFailure& failure, std::optional<int>* stopping = nullptr);

// Makes `call` to every shard and waits for the replies, `seconds` at most:
// for what the chief tells shards on its way out of a failure or a job
// (a shard that fails or does not answer is left as it is).
void callEveryShardWithin(kj::AsyncIoContext& io, std::vector<ShardLink>& shards, double seconds,
                          const std::function<kj::Promise<void>(ShardLink&)>& call) {
  kj::Vector<kj::Promise<void>> calls;
  for (ShardLink& link : shards) calls.add(call(link).catch_([](kj::Exception&&) {}));
  io.provider->getTimer()
      .timeoutAt(deadlineIn(int64_t(seconds * 1000) * kj::MILLISECONDS),
                 kj::joinPromises(calls.releaseAsArray()))
      .catch_([](kj::Exception&&) {})
      .wait(io.waitScope);
}

// Every shard's status, asked of all at once, by `deadline`: `statuses` in
// the shards' order once all answered; otherwise whether the deadline came
// first, or the failure of a call (a shard gone, or a status that lies).
struct StatusRound {
  std::vector<ShardStatusView> statuses;
  bool timed_out = false;
  std::string failure;
};
StatusRound statusesBefore(kj::AsyncIoContext& io, std::vector<ShardLink>& shards,
                           size_t workers, kj::TimePoint deadline) {
  StatusRound round;
  round.statuses.resize(shards.size());
  kj::Vector<kj::Promise<void>> calls;
  for (ShardLink& link : shards)
    calls.add(link.shard().statusRequest().send().then(
        [&round, &link, workers](auto&& reply) {
          round.statuses[size_t(link.index)] = toView(reply.getStatus(), workers);
        }));
  // The loser of the join is cancelled at once: no reply lands after this.
  kj::joinPromises(calls.releaseAsArray())
      .exclusiveJoin(io.provider->getTimer().atTime(deadline).then([&round] {
        round.timed_out = true;
      }))
      .catch_([&round](kj::Exception&& e) { round.failure = e.getDescription().cStr(); })
      .wait(io.waitScope);
  if (round.timed_out || !round.failure.empty()) round.statuses.clear();
  return round;
}

// What a worker's long wait for a ps's answer means, by the cluster's mode.
std::string whatALongWaitMeans(const ClusterSpec& cluster) {
  if (cluster.mode == TrainingMode::Sync)
    return fmt::format(
        "sync training answers a step once the ps has {} of the {} workers' "
        "gradients of it (the ps's log names those it waits for: stopped, hung, "
        "slow or gone), or the chief's first initialisation",
        cluster.replicas_to_aggregate, cluster.worker.size());
  if (cluster.max_staleness > 0)
    return fmt::format(
        "with max_staleness {}, a worker that far ahead of the slowest waits for "
        "it (the ps's log names it), or the chief's first initialisation",
        cluster.max_staleness);
  return "it answers status calls, so it is busy (a checkpoint read, many workers), or waits "
         "for the chief's first initialisation";
}

// The notices of calls that wait long: what such a wait means, and when a
// notice last said so. Push+pulls in flight together wait for the same ps
// tasks: one notice speaks for them all.
struct LongWaitNotices {
  std::string meaning;  // whatALongWaitMeans(cluster)
  Clock::time_point last{};
};

// What a ps that leaves a status call unanswered, while no data moves
// either way, for kPeerSilenceSeconds fails with: its process is stopped or
// hung (its kernel still takes what is sent, so the connection itself
// never fails).
constexpr const char* kSilentStatusCall = "no answer to a status call for ";
kj::Exception silentStatusCall() {
  return kj::Exception(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__,
                       kj::str(kSilentStatusCall, kPeerSilenceSeconds,
                               " s, and no data moved on its connection: is its process stopped "
                               "or hung?"));
}

}  // namespace

struct ShardedClient::Impl {
  kj::AsyncIoContext& io;
  ClusterSpec cluster;
  SpecIdentity identity;
  uint32_t worker_task;
  int64_t model_floats;  // of the worker's flat buffers
  // The worker's gradient and parameter buffers, offered to every ps at
  // hello; kept while a ps maps it. Outlives the connections.
  std::optional<SharedRegion> region;
  std::vector<ShardLink> shards;
  LongWaitNotices long_waits;

  // A shard's status, asked now. A failed call throws its kj::Exception, and
  // so does a ps silent for `silence_seconds` (silentStatusCall); nullopt
  // once `stop` (when given) has been held for kStopGraceSeconds.
  std::optional<ShardStatusView> status(ShardLink& link, const std::atomic<bool>* stop,
                                        int silence_seconds = kPeerSilenceSeconds) {
    kj::Timer& timer = io.provider->getTimer();
    std::optional<ShardStatusView> view;
    kj::Promise<void> call =
        link.shard()
            .statusRequest()
            .send()
            .then([this, &view](auto&& reply) {
              view = toView(reply.getStatus(), cluster.worker.size());
            })
            .exclusiveJoin(timer.atTime(deadlineIn(silence_seconds * kj::SECONDS))
                               .then([]() -> kj::Promise<void> { return silentStatusCall(); }));
    if (stop) call = call.exclusiveJoin(givenUp(timer, stop, nullptr).ignoreResult());
    call.wait(io.waitScope);
    return view;
  }

  kj::Promise<void> connectOnce(ShardLink& link) {
    return io.provider->getNetwork()
        .parseAddress(link.address)
        .then([](kj::Own<kj::NetworkAddress> addr) { return addr->connect(); })
        .catch_([](kj::Exception&& e) -> kj::Promise<kj::Own<kj::AsyncIoStream>> {
          // Not the ps's answer: it may not be up, or its name not in DNS,
          // yet (kj says FAILED for a name that does not resolve). Retried.
          return kj::Exception(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__,
                               kj::str(e.getDescription()));
        })
        .then([this, &link](kj::Own<kj::AsyncIoStream> stream) {
          if (auto refused = limitPeerSilence(*stream))
            spdlog::warn("ps {} at {}: a vanished host will not be noticed: {}", link.index,
                         link.address, *refused);
          capnp::ReaderOptions options;
          options.traversalLimitInWords = kTraversalLimitWords;
          // A retry: the last attempt's RPC system goes before the stream it reads.
          link.client = nullptr;
          link.rpc = nullptr;
          link.network = nullptr;
          link.stream = kj::heap<ReasonFirstStream>(kj::mv(stream), io.provider->getTimer());
          link.network = kj::heap<capnp::TwoPartyVatNetwork>(
              *link.stream, capnp::rpc::twoparty::Side::CLIENT, options);
          link.rpc = kj::heap(capnp::makeRpcClient(*link.network));
          capnp::MallocMessageBuilder vat_id;
          auto id = vat_id.initRoot<capnp::rpc::twoparty::VatId>();
          id.setSide(capnp::rpc::twoparty::Side::SERVER);
          link.client = link.rpc->bootstrap(id).castAs<wire::ParameterShard>();
          auto hello = link.shard().helloRequest();
          hello.setArchitectureHash(identity.architecture_hash);
          hello.setForwardRule(identity.forward_rule);
          hello.setUpdateRule(identity.update_rule);
          hello.setShardIndex(uint32_t(link.index));
          hello.setWorkerTask(worker_task);
          hello.setWireVersion(kWireVersion);
          hello.setChunks(chunksFingerprint(link.chunks));
          hello.setDataRule(identity.data_rule);
          hello.setTrainingSet(identity.training_set);
          hello.setTrainingRule(trainingRule(cluster));
          if (worker_task == 0) hello.setCheckpointDir(identity.checkpoint_dir);
          if (region) writeOffer(region->offer(), hello.initSharedRegion());
          return hello.send().then([this, &link](auto reply) {
            link.shared = region && reply.getSharedRegionMapped();
            if (link.shared) {
              spdlog::info("ps {} at {}: tensors through shared memory (same host)", link.index,
                           link.address);
            } else if (region) {
              spdlog::info("ps {} at {}: tensors over TCP, not shared memory: {}", link.index,
                           link.address, printable(reply.getSharedRefusal().cStr()));
            }
          });
        });
  }

  // Where the ps writes chunk `c`'s parameters in the region; null when
  // `link` moves its tensors over TCP.
  float* sharedParameters(const ShardLink& link, const ShardChunk& c) const {
    return link.shared ? region->parameters() + c.layout_offset : nullptr;
  }

  // A worker that computes in the region (sharedBuffers) must not call again
  // once a call was given up: the ps may still answer the abandoned call
  // into the region, over what the worker computes there now.
  void refuseRegionAfterGivingUp(const FlatBuffer& parameters) const {
    if (!region || parameters.data() != region->parameters()) return;
    for (const ShardLink& link : shards)
      if (!link.shared)
        throw std::logic_error("a call into the shared memory region after one was given up");
  }

  // The region this worker offers every ps, unless the cluster spec turns
  // shared memory off or the kernel gives none (then TCP, logged).
  void createRegion() {
    if (region) return;  // connect() again: the region the buffers may view stays
    if (!cluster.shared_memory) {
      spdlog::info("tensors over TCP: transport.shared_memory is off");
      return;
    }
    try {
      region = SharedRegion::create(model_floats);
    } catch (const SharedRegionUnavailable& e) {
      spdlog::info("tensors over TCP: no shared memory region: {}", e.what());
    }
  }
};

ShardedClient::Outcome ShardedClient::connect(double timeout_seconds,
                                              const JobOverCheck& job_over) {
  impl_->createRegion();
  const Clock::time_point start = Clock::now();
  for (size_t shard = 0; shard < impl_->shards.size(); ++shard)
    if (const Outcome outcome = connectShard(shard, start, timeout_seconds, job_over);
        outcome != Outcome::Connected)
      return outcome;
  if (shardsThroughSharedMemory() == 0) impl_->region.reset();
  return Outcome::Connected;
}

ShardedClient::Outcome ShardedClient::connectShard(size_t shard, Clock::time_point start,
                                                   double timeout_seconds,
                                                   const JobOverCheck& job_over) {
  kj::Timer& timer = impl_->io.provider->getTimer();
  ShardLink& link = impl_->shards[shard];
  double delay = 0.05;
  Clock::time_point last_log{};
  // Since the ps has said that the task is connected already; {} otherwise.
  Clock::time_point busy_since{};
  int foreign_answers = 0;  // hellos answered in a row by bytes not Cap'n Proto's
  for (;;) {
    if (stop_ && stop_->load()) {
      spdlog::info("stop requested while waiting for ps {} at {}", link.index, link.address);
      return Outcome::Stopped;
    }
    bool stopped = false;
    // No attempt, nor the pause after it, outlasts the wait: a second at
    // least, for a hello to be answered at all; tenths of a second up, to
    // end past the wait rather than a moment short of it.
    const double left =
        timeout_seconds - std::chrono::duration<double>(Clock::now() - start).count();
    const double hello_seconds = std::ceil(std::clamp(left, 1.0, double(kHelloSeconds)) * 10) / 10;
    kj::Maybe<kj::Exception> failure = kj::runCatchingExceptions([&]() {
      // A ps process that is stopped or hung, or a port another program
      // holds, takes the connection and never answers the hello.
      kj::Promise<void> attempt = impl_->connectOnce(link).exclusiveJoin(
          timer.atTime(deadlineIn(int64_t(hello_seconds * 1000) * kj::MILLISECONDS))
              .then([hello_seconds]() -> kj::Promise<void> {
                return kj::Exception(
                    kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__,
                    kj::str(fmt::format("no answer within {:g} s (its host or process is down, "
                                        "stopped or hung, the port is another program's, or "
                                        "the link's round trip takes seconds)",
                                        hello_seconds)
                                .c_str()));
              }));
      if (stop_)  // a connect to a host that does not answer can take minutes
        attempt = attempt.exclusiveJoin(
            givenUp(impl_->io.provider->getTimer(), stop_, nullptr).then([&stopped](GivenUp) {
              stopped = true;
            }));
      attempt.wait(impl_->io.waitScope);
    });
    if (stopped) continue;  // said above
    KJ_IF_MAYBE(e, failure) {
      const std::string reason = failureText(*e) + missingZoneNote(link.address);
      // This process's limit, not a ps that is late: raised once to the
      // hard limit, then no wait would help. (The system's table full,
      // ENFILE, whose words start the same, may empty: waited for.)
      if (reason.find(std::strerror(EMFILE)) != std::string::npos &&
          reason.find(std::strerror(ENFILE)) == std::string::npos) {
        if (raiseOpenFileLimit()) continue;
        throw InputError(fmt::format(
            "cannot connect to ps {} at {}: {} (a worker holds a connection to each of the "
            "cluster's {} ps tasks, beside its data files: {})",
            link.index, link.address, std::strerror(EMFILE), impl_->cluster.ps.size(),
            kRaiseOpenFileLimit));
      }
      // The ps says this task is connected already: another process runs
      // as this task, unless this one was restarted and the ps has not yet
      // seen its old connection close.
      // Counted while the ps says so without a break: not from a ps that
      // said it once, then restarted.
      const bool busy = e->getType() == kj::Exception::Type::OVERLOADED;
      if (!busy)
        busy_since = {};
      else if (busy_since == Clock::time_point{})
        busy_since = Clock::now();
      if (e->getType() == kj::Exception::Type::FAILED ||
          (busy && Clock::now() - busy_since > std::chrono::seconds(kBusySeconds)))
        throw InputError("ps " + std::to_string(link.index) + " at " + link.address +
                         " refused this worker: " + reason +
                         severalAddressesNote(impl_->cluster.ps[size_t(link.index)]));
      // Not a ps that is late or gone: another program answers there, and
      // would for as long as the worker waited.
      foreign_answers = isForeignFraming(reason) ? foreign_answers + 1 : 0;
      if (foreign_answers == kForeignAnswers)
        throwInputError(impl_->cluster.ps[size_t(link.index)].location,
                        "cluster.ps[" + std::to_string(link.index) + "]",
                        link.address + " is not a traind ps: " + std::to_string(kForeignAnswers) +
                            " answers in a row were not Cap'n Proto RPC (" + reason +
                            "): another program listens on that port, or this is the wrong one" +
                            severalAddressesNote(impl_->cluster.ps[size_t(link.index)]));
      const double waited = std::chrono::duration<double>(Clock::now() - start).count();
      // Asked before giving up too: a peer_wait_seconds shorter than the
      // job-over delay must not turn a job that is over into a failure.
      const bool giving_up = waited > timeout_seconds;
      if (job_over.reason && e->getType() != kj::Exception::Type::OVERLOADED &&
          (giving_up || waited >= job_over.after_seconds))
        if (const std::optional<std::string> over = job_over.reason()) {
          spdlog::info("ps {} at {} does not answer ({}), and {}: the job is over", link.index,
                       link.address, reason.substr(0, reason.find('\n')), *over);
          return Outcome::JobOver;
        }
      if (giving_up)
        throw std::runtime_error("gave up waiting for ps " + std::to_string(link.index) + " at " +
                                 link.address + " after " + std::to_string(int(waited)) +
                                 " s (the cluster spec's "
                                 "training.peer_wait_seconds): " +
                                 reason);
      if (Clock::now() - last_log > std::chrono::seconds(5)) {
        // Usually this task's old connection, not a second process.
        if (e->getType() == kj::Exception::Type::OVERLOADED &&
            reason.find(kConnectedAlready) != std::string::npos)
          spdlog::info(
              "waiting for ps {} at {} to see this task's earlier connection close "
              "(it answers: {})",
              link.index, link.address, reason.substr(0, reason.find('\n')));
        else
          spdlog::info("waiting for ps {} at {} ({})", link.index, link.address,
                       reason.substr(0, reason.find('\n')));
        last_log = Clock::now();
      }
      const double pause = std::min(delay, std::max(timeout_seconds - waited, 0.05));
      impl_->io.provider->getTimer()
          .afterDelay(int64_t(pause * 1000) * kj::MILLISECONDS)
          .wait(impl_->io.waitScope);
      delay = std::min(delay * 2, 2.0);
      continue;
    }
    break;
  }
  spdlog::info("connected to ps {} at {}", link.index, link.address);
  return Outcome::Connected;
}

ShardedClient::SharedBuffers ShardedClient::sharedBuffers() const {
  if (!impl_->region || shardsThroughSharedMemory() != int(impl_->shards.size())) return {};
  return {impl_->region->gradients(), impl_->region->parameters()};
}

std::optional<std::vector<ShardStatusView>> ShardedClient::statuses() {
  std::vector<ShardStatusView> out;
  for (ShardLink& link : impl_->shards) {
    std::optional<ShardStatusView> status;
    KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] { status = impl_->status(link, stop_); })) {
      throwShardFailure(link, *e);
    }
    if (!status) {
      spdlog::info("stop requested while asking ps {} at {} for its status", link.index,
                   link.address);
      return std::nullopt;
    }
    out.push_back(*status);
  }
  return out;
}

bool ShardedClient::waitUntilReady(double timeout_seconds) {
  const Clock::time_point start = Clock::now();
  Clock::time_point last_log{};
  for (;;) {
    std::vector<int> waiting;
    for (ShardLink& link : impl_->shards) {
      std::optional<ShardStatusView> status;
      KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] { status = impl_->status(link, stop_); })) {
        // A ps gone before the chief initialised it held nothing of the
        // job: when it comes back (restarted), this worker waits on.
        if (e->getType() != kj::Exception::Type::DISCONNECTED ||
            failureText(*e).starts_with(kJobOverReason))  // a ps stopped: the job is over
          throwShardFailure(link, *e);
        // Silent (stopped or hung), it may hold the job already: it is
        // asked again once connected, as any restarted ps is.
        const std::string why = failureText(*e);
        if (why.starts_with(kSilentStatusCall))
          spdlog::info("ps {} at {} does not answer ({}): connecting again", link.index,
                       link.address, why);
        else
          spdlog::info(
              "ps {} at {} went away before the chief initialised it ({}): connecting "
              "again",
              link.index, link.address, why);
        const double waited = std::chrono::duration<double>(Clock::now() - start).count();
        if (connectShard(size_t(link.index), Clock::now(), timeout_seconds - waited, {}) ==
            Outcome::Stopped)
          return false;
        waiting.push_back(link.index);
        continue;
      }
      if (!status) {
        spdlog::info("stop requested while waiting for the chief to initialise ps {}", link.index);
        return false;
      }
      // A stopping shard is not waited for: the job ended before the chief
      // initialised it, and the pull that follows says so.
      if (!status->ready && !status->stopping) waiting.push_back(link.index);
    }
    if (waiting.empty()) return true;
    if (stop_ && stop_->load()) {
      spdlog::info("stop requested while waiting for the chief to initialise ps {}",
                   fmt::join(waiting, ", "));
      return false;
    }
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (waited > timeout_seconds)
      throw std::runtime_error(
          "gave up waiting for the chief (worker 0) to initialise the ps "
          "shards after " +
          std::to_string(int(waited)) + " s (the cluster spec's training.peer_wait_seconds)");
    if (Clock::now() - last_log > std::chrono::seconds(5)) {
      spdlog::info("waiting for the chief (worker 0) to initialise ps {}",
                   fmt::join(waiting, ", "));
      last_log = Clock::now();
    }
    impl_->io.provider->getTimer().afterDelay(200 * kj::MILLISECONDS).wait(impl_->io.waitScope);
  }
}

void ShardedClient::initialize(const ModelState& state) {
  FirstFailure failure;
  const size_t slots = state.optimizer().slotNames().size();
  // One call per chunk and slot: a model of hundreds of chunks with Adam
  // sent all at once would pass the ps's most open answers.
  auto initializeOne = [&state](ShardLink& link, const ShardChunk& c, size_t slot) {
    const FlatBuffer& source = slot == 0 ? state.parameters() : state.optimizer().slot(slot - 1);
    auto request = link.shard().initializeRequest();
    request.setSlot(uint32_t(slot));
    request.setOffset(uint64_t(c.shard_offset));
    attachFloats<wire::ParameterShard::InitializeParams::Builder>(
        request, source.data() + c.layout_offset, c.size);
    return request.send().ignoreResult();
  };
  kj::Timer& timer = impl_->io.provider->getTimer();
  failure.wait(watched(everyChunkAndSlot(impl_->shards, slots, initializeOne, failure),
                       impl_->shards, timer, failure),
               impl_->io.waitScope);
  for (ShardLink& link : impl_->shards) {
    auto request = link.shard().markReadyRequest();
    request.setGlobalStep(state.globalStep());
    request.setLastStep(last_step_.value_or(0));
    FirstFailure ready;
    ready.wait(
        watched(request.send().ignoreResult().catch_(ready.of(link)), impl_->shards, timer, ready),
        impl_->io.waitScope);
  }
  state_steps_.assign(impl_->shards.size(), state.globalStep());
}

namespace {

// The bytes and the time of one kind of call (push or pull) of a step: the
// time runs from the first request until the last of them is answered.
struct TransferTally {
  Clock::time_point start;
  int pending = 0;
  int64_t bytes = 0;
  double seconds = 0.0;

  void sent(int64_t request_bytes) {
    if (start == Clock::time_point{}) start = Clock::now();
    ++pending;
    bytes += request_bytes;
  }
  void answered(int64_t reply_bytes) {
    bytes += reply_bytes;
    if (--pending == 0) seconds = std::chrono::duration<double>(Clock::now() - start).count();
  }
};

// A chunk's parameters from a reply into the worker's flat buffer, as the
// reply arrives (the other chunks are still on their way): from its data,
// or from the region's parameter buffer (`shared`, the chunk's place in it)
// where the ps wrote them.
void copyChunk(capnp::Data::Reader data, const float* shared, float* out, int64_t size) {
  const size_t bytes = size_t(size) * sizeof(float);
  if (data.size() != (shared ? 0 : bytes))
    throw std::runtime_error("answered a pull of " + std::to_string(size) + " floats with " +
                             std::to_string(data.size()) + " bytes");
  if (out != shared)  // else the ps wrote them in place (sharedBuffers)
    std::memcpy(out, shared ? reinterpret_cast<const kj::byte*>(shared) : data.begin(), bytes);
}

// One chunk's pull: its parameters into `out` (through `shared`, its place
// in the region, when the ps maps it), the step its shard answered with
// lowering *step (and raising *highest, when given), and a shard that says
// it is stopping named.
kj::Promise<void> pullChunk(ShardLink& link, const ShardChunk& c, int64_t min_step,
                            const float* shared, float* out, int64_t* step,
                            std::optional<int>& stopping_shard, TransferTally& pulls,
                            int64_t* highest = nullptr) {
  auto request = link.shard().pullRequest();
  request.setMinStep(min_step);
  request.setOffset(uint64_t(c.shard_offset));
  request.setLength(uint64_t(c.size));
  request.setIntoSharedRegion(shared != nullptr);
  const int64_t size = c.size;
  pulls.sent(0);
  return request.send().then(
      [&link, step, shared, out, size, min_step, &stopping_shard, &pulls, highest](auto reply) {
        if (reply.getStopping()) stopping_shard = link.index;
        copyChunk(reply.getData(), shared, out, size);
        const int64_t answered = answeredStep(reply.getGlobalStep(), min_step, reply.getStopping());
        *step = std::min(*step, answered);
        if (highest) *highest = std::max(*highest, answered);
        pulls.answered(size * int64_t(sizeof(float)));
      });
}

// The most chunks one call through shared memory takes. In sync training
// it bounds, with the count in flight, the chunks a sync ps holds partial
// sums of for a worker. In async training nothing waits at the ps, and each
// reply wakes the worker, which goes back to sleep until the last one
// (waking, it also preempts the ps that is applying its next run): one call
// for the wide MLP's 6 chunks made its async job 7-11% faster than calls of
// 4 and 2 (docs/distributed.md). There the bound is only on how long one call
// holds the ps's event loop, as other workers' calls wait behind its
// updates: 16 chunks, a few milliseconds of SGD.
constexpr size_t kMaxSyncRunChunks = 4;
constexpr size_t kMaxAsyncRunChunks = 16;
// A worker waiting this long for a ps's answer says so, then again after
// twice as long, up to every kMaxLongWaitNoticeSeconds. A sync step waits
// seconds for the chief's evaluations and checkpoints.
constexpr int kLongWaitNoticeSeconds = 30;
constexpr int kMaxLongWaitNoticeSeconds = 300;

// CallRound lets two calls of the longest run be in flight: within the
// sync bound.
static_assert(2 * kMaxSyncRunChunks <= kSyncCallsInFlight);

// Rejects (OVERLOADED, as a timeout) once kPeerSilenceSeconds have passed
// since `since` and no data has moved on `link`'s connection for as long;
// never resolves otherwise. Checked every kHeartbeatSeconds.
kj::Promise<void> silence(kj::Timer& timer, ShardLink& link, kj::TimePoint since) {
  return timer.afterDelay(ShardedClient::kHeartbeatSeconds * kj::SECONDS)
      .then([&timer, &link, since]() -> kj::Promise<void> {
        constexpr kj::Duration kSilence = kPeerSilenceSeconds * kj::SECONDS;
        const std::optional<double> moved = secondsSinceDataMoved(*link.stream);
        if (timer.now() - since < kSilence || (moved && *moved < kPeerSilenceSeconds))
          return silence(timer, link, since);
        return KJ_EXCEPTION(OVERLOADED, "no data moved on the connection");
      });
}

// Rejects once `link` leaves a status call unanswered for kPeerSilenceSeconds
// while no data moves on its connection; never resolves otherwise. The
// answer may queue behind chunks on a slow link (1 MiB at 1 Mbit/s is 8 s):
// data still moving says the ps is there. One status call at a time (per
// waiting round of calls), every kHeartbeatSeconds. A status that says the shard is stopping names
// it in
// `*stopping`, when given: a worker waiting on other shards learns that the
// job is over from it, though it has no call of its own there to answer.
kj::Promise<void> heartbeat(kj::Timer& timer, ShardLink& link, std::optional<int>* stopping) {
  return timer.afterDelay(ShardedClient::kHeartbeatSeconds * kj::SECONDS)
      .then([&timer, &link, stopping] {
        return link.shard()
            .statusRequest()
            .send()
            .then([&link, stopping](auto reply) {
              if (stopping && reply.getStatus().getStopping() && !*stopping) *stopping = link.index;
            })
            .exclusiveJoin(silence(timer, link, timer.now()));
      })
      .then([&timer, &link, stopping] { return heartbeat(timer, link, stopping); },
            [](kj::Exception&& e) -> kj::Promise<void> {
              if (e.getType() != kj::Exception::Type::OVERLOADED) return kj::mv(e);
              return silentStatusCall();  // timeoutAfter's
            });
}

// A call to a ps stopped or hung would wait forever.
kj::Promise<void> watched(kj::Promise<void> calls, std::vector<ShardLink>& shards, kj::Timer& timer,
                          FirstFailure& failure, std::optional<int>* stopping) {
  for (ShardLink& link : shards)
    calls = calls.exclusiveJoin(heartbeat(timer, link, stopping).catch_(failure.of(link)));
  return calls;
}

// The chunks of `link`, one call each, first to last.
std::vector<ChunkRun> eachChunk(const ShardLink& link) {
  std::vector<ChunkRun> runs;
  for (size_t i = 0; i < link.chunks.size(); ++i) runs.push_back({i, 1});
  return runs;
}

// The calls of a push+pull to `link`, last chunks first (the order a
// backward pass finishes them in). Over TCP one per chunk, so that the ps
// applies and answers one while the next arrive. Through shared memory
// nothing crosses the socket but the call, which costs both sides more than
// a chunk's floats, so a call takes up to `max_run` consecutive chunks:
// any, or with a `gated` gradient (sent as the backward pass finishes it)
// only chunks of one variable, which are final together, so that no chunk
// waits for an earlier layer's.
std::vector<ChunkRun> pushCalls(const ShardLink& link, bool gated, size_t max_run) {
  std::vector<ChunkRun> runs;
  for (size_t i = link.chunks.size(); i-- > 0;) {
    if (link.shared && !runs.empty() && runs.back().count < max_run &&
        (!gated || link.first_variables[i] == link.first_variables[i + 1])) {
      runs.back() = {i, runs.back().count + 1};
      continue;
    }
    runs.push_back({i, 1});
  }
  return runs;
}

// The calls of one pull or push+pull: `call` for each run of chunks
// `runs_of` gives for every shard, in the order given. A shard's calls share
// a budget of chunks in flight, max(in_flight, twice its longest run), so
// that two calls of any run fit (a reply comes back while the next call
// goes out): the next run goes out as soon as its chunks fit beside those
// not yet answered. In sync training the budget is in_flight
// (kSyncCallsInFlight), the partial sums its ps holds for this worker.
// While calls wait long, the worker logs which ps tasks have not answered
// and what such a wait means (`long_waits`): its log should not go silent
// while a step waits for another worker. With `gradient_final` (a gradient
// sent as its backward pass finishes it), the wait counts from when it is
// set, once the whole gradient is final: the pass itself is no ps's wait.
// Once `stopping_shard` names a shard that said the job is over (in a
// reply, or in its status while the calls wait: set here), the calls left
// are given up kStoppingGraceSeconds later (cancelled, logged). *stop held
// gives them up too (see ShardedClient::abandonWaitsOnStop).
//
// Several rounds may wait on one event loop at once (overlapping
// push+pulls): each watches the shards and the time for itself, and they
// share `long_waits`, whose notice speaks for them all.
class CallRound {
 public:
  using Call = std::function<kj::Promise<void>(ShardLink&, ChunkRun)>;

  CallRound(kj::AsyncIoContext& io, const std::atomic<bool>* stop,
            std::optional<int>& stopping_shard, std::vector<ShardLink>& shards, size_t in_flight,
            LongWaitNotices& long_waits, const std::optional<Clock::time_point>* gradient_final,
            const std::function<std::vector<ChunkRun>(const ShardLink&)>& runs_of, Call call)
      : timer_(io.provider->getTimer()),
        stop_(stop),
        stopping_shard_(stopping_shard),
        shards_(shards),
        long_waits_(long_waits),
        gradient_final_(gradient_final),
        call_(std::move(call)) {
    calls_.reserve(shards.size());  // whole before the first call: they hold references into it
    for (ShardLink& link : shards) {
      std::vector<ChunkRun> runs = runs_of(link);
      size_t longest = 1;
      for (const ChunkRun& run : runs) longest = std::max(longest, run.count);
      calls_.push_back({link, std::move(runs), std::max(in_flight, 2 * longest)});
    }
  }
  CallRound(const CallRound&) = delete;
  CallRound& operator=(const CallRound&) = delete;

  // Makes the calls: resolves once all have been answered or the wait was
  // given up, rejects when one failed (see end()). This round must outlive
  // the promise.
  kj::Promise<void> run() {
    start_ = Clock::now();
    kj::Vector<kj::Promise<void>> every_shard;
    for (ShardCalls& s : calls_) every_shard.add(callWhileTheyFit(s));
    kj::Promise<void> all = kj::joinPromises(every_shard.releaseAsArray());
    all = watched(kj::mv(all), shards_, timer_, failure_, &stopping_shard_);
    all = all.exclusiveJoin(tick(start_ + std::chrono::seconds(1)));
    all = all.exclusiveJoin(
        noticeLongWait(kLongWaitNoticeSeconds, kLongWaitNoticeSeconds, kLongWaitNoticeSeconds));
    // A stop held, or a ps's word that the job is over: the others' calls
    // are not waited for long.
    return all.exclusiveJoin(
        givenUp(timer_, stop_, &stopping_shard_, &answered_).then([this](GivenUp why) {
          given_up_ = why;
          if (why == GivenUp::JobEnding)
            spdlog::info(
                "{} did not answer within {} s of ps {}'s word that the "
                "job is over: not waited for",
                unanswered(), ShardedClient::kStoppingGraceSeconds, *stopping_shard_);
        }));
  }

  // Once run()'s promise has ended, `failed` when it rejected: throws as
  // throwShardFailure() for the first shard whose call failed. Returns
  // false when the calls were given up because *stop was held (the calls
  // are cancelled), true otherwise: every call answered, or given up at the
  // job's end.
  bool end(kj::Maybe<kj::Exception> failed) {
    KJ_IF_MAYBE (e, failed) failure_.fail(*e, [this] { stopSharing(); });
    if (given_up_) {
      stopSharing();
      // The calls joined report a failure only once all have ended: one that
      // failed while the others waited is reported all the same (a ps's
      // refusal of this worker's gradient is its divergence, not a stop), but
      // for a connection lost or closed at the job's end.
      failure_.throwIfRefused();
    }
    return given_up_ != GivenUp::Stop;
  }

  // Waits for the calls on the loop: end()'s result.
  bool wait(kj::WaitScope& scope) {
    kj::Promise<void> calls = run();
    return end(kj::runCatchingExceptions([&] { calls.wait(scope); }));
  }

  // A call given up may still be answered by the ps, which then writes its
  // chunk's parameters into the shared region: later calls go over TCP, and
  // a worker that computes in the region may make none (sharedBuffers).
  void stopSharing() {
    for (ShardLink& link : shards_) link.shared = false;
  }

 private:
  struct ShardCalls {
    ShardLink& link;
    std::vector<ChunkRun> runs;
    size_t budget;         // chunks
    size_t next = 0;       // the first run not called yet
    size_t in_flight = 0;  // chunks of the calls not answered yet
  };

  // Calls the shard's next runs while they fit its budget; resolves once
  // they and the calls their replies make room for have ended.
  kj::Promise<void> callWhileTheyFit(ShardCalls& s) {
    kj::Vector<kj::Promise<void>> started;
    while (s.next < s.runs.size() &&
           (s.in_flight == 0 || s.in_flight + s.runs[s.next].count <= s.budget)) {
      const ChunkRun run = s.runs[s.next++];
      s.in_flight += run.count;
      started.add(call_(s.link, run).catch_(failure_.of(s.link)).then([this, &s, run] {
        s.in_flight -= run.count;
        ++answered_;
        return callWhileTheyFit(s);
      }));
    }
    return kj::joinPromises(started.releaseAsArray());
  }

  // "ps 0 at HOST:PORT, ps 1 at ...": the shards whose calls have not all been answered.
  std::string unanswered() const {
    std::string shards;
    for (const ShardCalls& s : calls_)
      if (s.in_flight > 0 || s.next < s.runs.size())
        shards +=
            fmt::format("{}ps {} at {}", shards.empty() ? "" : ", ", s.link.index, s.link.address);
    return shards;
  }

  // Time this process itself lost meanwhile (stopped with SIGSTOP, or
  // starved), which is no ps's doing: a tick every second while the calls
  // wait, each tick late by more than a second adding its delay.
  kj::Promise<void> tick(Clock::time_point due) {
    return timer_.afterDelay(1 * kj::SECONDS).then([this, due] {
      const Clock::time_point now = Clock::now();
      const double late = std::chrono::duration<double>(now - due).count();
      if (late > 1.0) own_pause_ += late;
      return tick(now + std::chrono::seconds(1));
    });
  }

  // A notice is due once the calls have waited `target` seconds; `gap`
  // doubles after each, up to kMaxLongWaitNoticeSeconds. Once due, the
  // event loop first takes what has arrived: after this process was
  // stopped, the answers may be waiting in its sockets.
  kj::Promise<void> noticeLongWait(long delay, long target, long gap) {
    return timer_.afterDelay(delay * kj::SECONDS)
        .then([this] { return timer_.afterDelay(200 * kj::MILLISECONDS); })
        .then([this, target, gap] {
          const Clock::time_point now = Clock::now();
          const auto secondsSince = [now](Clock::time_point then) {
            return std::lround(std::chrono::duration<double>(now - then).count());
          };
          const bool computing = gradient_final_ && !gradient_final_->has_value();
          const long waited = !gradient_final_ ? secondsSince(start_)
                              : computing      ? 0
                                               : secondsSince(std::max(start_, **gradient_final_));
          if (waited < target)
            return noticeLongWait(computing ? target : target - waited, target, gap);
          const long paused = std::lround(own_pause_);
          // A round in flight beside this one said it lately (a round's
          // first notice comes kLongWaitNoticeSeconds after it began, later
          // than any notice of the rounds before it).
          if (now - long_waits_.last >= std::chrono::seconds(kLongWaitNoticeSeconds)) {
            long_waits_.last = now;
            spdlog::info("waited {} s for {} to answer{}: {}", waited, unanswered(),
                         paused > 5 ? fmt::format(" (this process itself was stopped or starved "
                                                  "for about {} s of it)",
                                                  paused)
                                    : "",
                         long_waits_.meaning);
          }
          const long next_gap = std::min<long>(2 * gap, kMaxLongWaitNoticeSeconds);
          return noticeLongWait(next_gap, waited + next_gap, next_gap);
        });
  }

  kj::Timer& timer_;
  const std::atomic<bool>* stop_;
  std::optional<int>& stopping_shard_;
  std::vector<ShardLink>& shards_;
  LongWaitNotices& long_waits_;
  const std::optional<Clock::time_point>* gradient_final_;
  Call call_;
  FirstFailure failure_;
  std::vector<ShardCalls> calls_;
  size_t answered_ = 0;  // calls, for givenUp
  Clock::time_point start_;
  double own_pause_ = 0;
  std::optional<GivenUp> given_up_;
};

// The calls of a round, waited for: CallRound::wait's result.
bool callEveryRun(kj::AsyncIoContext& io, const std::atomic<bool>* stop,
                  std::optional<int>& stopping_shard, std::vector<ShardLink>& shards,
                  size_t in_flight, LongWaitNotices& long_waits,
                  const std::function<std::vector<ChunkRun>(const ShardLink&)>& runs_of,
                  CallRound::Call call) {
  CallRound round(io, stop, stopping_shard, shards, in_flight, long_waits, nullptr, runs_of,
                  std::move(call));
  return round.wait(io.waitScope);
}

}  // namespace

int ShardedClient::shardsThroughSharedMemory() const {
  int count = 0;
  for (const ShardLink& link : impl_->shards) count += link.shared ? 1 : 0;
  return count;
}

void ShardedClient::throwIfChiefDiverged(int index) {
  ShardLink& link = impl_->shards.at(size_t(index));
  std::optional<ShardStatusView> status;
  KJ_IF_MAYBE (e, kj::runCatchingExceptions(
                      [&] { status = impl_->status(link, stop_, kJobEndStatusSeconds); })) {
    // Past the ps's wait for its workers (this one paused, or slow): the
    // Abort of the connection it ended carries the chief's words.
    throwIfJobDivergedAbort(link, failureText(*e));
    return;
  }
  if (status && !status->diverged.empty())
    throw JobDiverged(fmt::format("ps {} at {} stopped the job: {}", link.index, link.address,
                                  chiefDivergedText(status->diverged)));
}

int64_t ShardedClient::jobStep() {
  if (stopping_shard_) {
    if (!stop_logged_) {
      stop_logged_ = true;
      throwIfChiefDiverged(*stopping_shard_);
      spdlog::info("ps {} is stopping: the job is over", *stopping_shard_);
    }
    return -1;
  }
  // Every reply reached the step its call waited for (answeredStep); no
  // step from any shard (each holds nothing) does not hold the job back.
  return lastPulledStep().value_or(INT64_MAX);
}

std::optional<int64_t> ShardedClient::lastPulledStep() const { return lowestStep(shard_steps_); }

std::optional<int64_t> ShardedClient::lastPulledJobStep() const {
  if (!shard_steps_.empty() && shard_steps_[0] != INT64_MAX) return shard_steps_[0];
  return lastPulledStep();
}

int64_t ShardedClient::pull(int64_t min_step, FlatBuffer& parameters) {
  impl_->refuseRegionAfterGivingUp(parameters);
  shard_steps_.assign(impl_->shards.size(), INT64_MAX);
  std::vector<int64_t> highest(impl_->shards.size(), -1);
  TransferTally pulls;
  const bool done = callEveryRun(
      impl_->io, stop_, stopping_shard_, impl_->shards, kCallsInFlight, impl_->long_waits,
      eachChunk, [&](ShardLink& link, ChunkRun run) {
        const ShardChunk& c = link.chunks[run.first];
        return pullChunk(link, c, min_step, impl_->sharedParameters(link, c),
                         parameters.data() + c.layout_offset, &shard_steps_[size_t(link.index)],
                         stopping_shard_, pulls, &highest[size_t(link.index)]);
      });
  last_transfer_ = {0, pulls.bytes, 0.0, pulls.seconds};
  // Async chunks are all at the shard's step, which moves with every push
  // between the replies: no step is half applied there.
  half_applied_.reset();
  const bool sync = impl_->cluster.mode == TrainingMode::Sync;
  for (size_t i = 0; sync && i < highest.size() && !half_applied_; ++i)
    if (shard_steps_[i] != INT64_MAX && highest[i] > shard_steps_[i])
      half_applied_ = HalfAppliedStep{int(i), shard_steps_[i]};
  if (!done) {
    logGivenUpOnStop(min_step);
    return -1;
  }
  return jobStep();
}

// One push+pull's calls and what their replies bring (pushAndPull,
// startPushAndPull).
struct ShardedClient::PushAndPull {
  PushAndPull(const FlatBuffer& gradients, FlatBuffer& parameters, int64_t min_step,
              std::vector<int64_t> tags)
      : gradients(gradients),
        parameters(parameters),
        min_step(min_step),
        tags(std::move(tags)),
        steps(this->tags.size(), INT64_MAX) {}

  const FlatBuffer& gradients;
  FlatBuffer& parameters;
  const int64_t min_step;
  // Each shard's step of the pull the gradient was computed from: its
  // part is tagged with it, as shards may be a step apart, and each
  // judges staleness by its own clock.
  const std::vector<int64_t> tags;
  // The steps answered. Sync: each chunk answers once it has been applied,
  // in any order, with the step of its values, and one chunk may be a step
  // ahead of another: the shard's step is the lowest, the step every
  // chunk's values have reached (the shard's global step by then). Async:
  // a chunk is applied as it arrives and the global step only grows, so
  // the highest step answered is the one after every chunk of this push
  // was applied. A shard that holds nothing answers nothing and keeps
  // INT64_MAX, which jobStep skips.
  std::vector<int64_t> steps;
  TransferTally pushes, pulls;
  int64_t dropped = 0;  // chunks dropped as stale
  // A gate that fails (the step computing the gradient failed) ends the
  // push with its own error: no ps is to blame.
  kj::Maybe<kj::Exception> gate_failure;
  // When the whole gradient is final (its first variable is the last), for
  // the long-wait notices: the backward pass is no ps's wait.
  std::optional<Clock::time_point> gradient_final;
  kj::Promise<void> watching_gradient = kj::READY_NOW;
  std::optional<CallRound> round;
  // Overlapping (startPushAndPull): the slot's id, and the round running
  // until `ended`, with its failure. Last: what it runs uses the above.
  size_t id = 0;
  bool ended = false;
  kj::Maybe<kj::Exception> failure;
  kj::Promise<void> running = nullptr;
};

// Here, where PushAndPull is complete: destroying the client (and a
// constructor that fails) destroys the push+pulls it holds.
ShardedClient::ShardedClient(kj::AsyncIoContext& io, const ClusterSpec& cluster,
                             const LayerGraph& graph, const VariableLayout& layout,
                             SpecIdentity identity, uint32_t worker_task)
    : impl_(std::make_unique<Impl>(Impl{io,
                                        cluster,
                                        std::move(identity),
                                        worker_task,
                                        layout.totalSize(),
                                        std::nullopt,
                                        {},
                                        {whatALongWaitMeans(cluster)}})) {
  const Placement placement = placeVariables(layout, int(cluster.ps.size()));
  for (size_t i = 0; i < cluster.ps.size(); ++i) {
    ShardLink link;
    link.index = int(i);
    link.address = cluster.ps[i].toString();
    link.chunks = transferChunks(graph, placement.shards[i], ParameterShard::kChunkFloats);
    for (const ShardChunk& c : link.chunks)
      link.first_variables.push_back(
          size_t(placement.shards[i].pieces[size_t(c.first_piece)].variable));
    impl_->shards.push_back(std::move(link));
  }
}

ShardedClient::~ShardedClient() = default;

std::unique_ptr<ShardedClient::PushAndPull> ShardedClient::preparePushAndPull(
    const FlatBuffer& gradients, int64_t min_step, std::vector<int64_t> tags,
    FlatBuffer& parameters, GradientGate* gate, Clock::time_point& last_start) {
  impl_->refuseRegionAfterGivingUp(parameters);
  const Clock::time_point start = Clock::now();
  if (last_start != Clock::time_point{})
    step_seconds_ =
        std::max(0.0, std::chrono::duration<double>(start - last_start).count() - read_seconds_);
  last_start = start;
  read_seconds_ = 0.0;
  auto p = std::make_unique<PushAndPull>(gradients, parameters, min_step, std::move(tags));
  const bool sync = impl_->cluster.mode == TrainingMode::Sync;
  const std::optional<int64_t> lowest_pulled = lowestStep(p->tags);
  // A failed gate fails the calls themselves.
  if (gate)
    p->watching_gradient =
        gate->ready(0)
            .then([p = p.get()] { p->gradient_final = Clock::now(); }, [](kj::Exception&&) {})
            .eagerlyEvaluate(nullptr);
  auto call = [this, p = p.get(), gate, sync, lowest_pulled](ShardLink& link, ChunkRun run) {
    // Sync: a shard ahead of the others takes no gradient; its
    // parameters are pulled, and it waits at its step until the others
    // get there. With backup workers a pull may find shards a step
    // apart (each takes the gradients tagged with its own step); were
    // it pushed, what a pause or a lost gradient drove apart would
    // stay apart, and each checkpoint's hold would wait in vain for a
    // shard to reach the others' step. So no shard applies a step
    // another has not reached: they stay within a step. A shard at
    // the job's last step likewise: it would go past it while another
    // ends there.
    const int64_t shard_step = p->tags[size_t(link.index)];
    const bool pull_instead = sync && ((last_step_ && shard_step >= *last_step_) ||
                                       (lowest_pulled && shard_step > *lowest_pulled));
    auto send = [this, p, &link, run, sync, pull_instead]() -> kj::Promise<void> {
      int64_t* step = &p->steps[size_t(link.index)];
      if (pull_instead) {
        kj::Vector<kj::Promise<void>> chunks;
        for (size_t i = run.first; i < run.first + run.count; ++i) {
          const ShardChunk& c = link.chunks[i];
          chunks.add(pullChunk(link, c, p->min_step, impl_->sharedParameters(link, c),
                               p->parameters.data() + c.layout_offset, step, stopping_shard_,
                               p->pulls));
        }
        return kj::joinPromises(chunks.releaseAsArray());
      }
      const ShardChunk& first = link.chunks[run.first];
      auto request = link.shard().pushAndPullRequest();
      request.setWorkerTask(impl_->worker_task);
      request.setStep(p->tags[size_t(link.index)]);
      request.setOffset(uint64_t(first.shard_offset));
      request.setMinStep(p->min_step);
      const bool shared = impl_->sharedParameters(link, first) != nullptr;
      int64_t floats = 0;
      for (size_t i = run.first; i < run.first + run.count; ++i) {
        const ShardChunk& c = link.chunks[i];
        floats += c.size;
        // The chunk is the ps's from this request to its reply. No copy
        // when the worker computes in the region (sharedBuffers).
        float* in_region = shared ? impl_->region->gradients() + c.layout_offset : nullptr;
        if (shared && p->gradients.data() + c.layout_offset != in_region)
          std::memcpy(in_region, p->gradients.data() + c.layout_offset,
                      size_t(c.size) * sizeof(float));
      }
      if (shared) {
        request.setSharedFloats(uint64_t(floats));
        request.setSharedChunks(uint32_t(run.count));
      } else if (run.count == 1) {
        attachFloats<wire::ParameterShard::PushAndPullParams::Builder>(
            request, p->gradients.data() + first.layout_offset, first.size);
      } else {
        throw std::logic_error("a push of several chunks over TCP");
      }
      p->pushes.sent(floats * int64_t(sizeof(float)));
      p->pulls.sent(0);
      return request.send().then([this, p, &link, run, step, sync, shared, floats](auto reply) {
        // A stopping ps applies no more gradients: not a stale one.
        if (!reply.getAccepted() && !reply.getStopping()) ++p->dropped;
        if (reply.getStopping()) stopping_shard_ = link.index;
        for (size_t i = run.first; i < run.first + run.count; ++i) {
          const ShardChunk& c = link.chunks[i];
          copyChunk(reply.getData(),
                    shared ? impl_->region->parameters() + c.layout_offset : nullptr,
                    p->parameters.data() + c.layout_offset, c.size);
        }
        const int64_t answered =
            answeredStep(reply.getGlobalStep(), p->min_step, reply.getStopping());
        if (sync || *step == INT64_MAX)
          *step = std::min(*step, answered);
        else
          *step = std::max(*step, answered);
        p->pushes.answered(0);
        p->pulls.answered(floats * int64_t(sizeof(float)));
      });
    };
    if (!gate) return send();
    // Every chunk's gradient final (a gated run keeps to one variable's
    // chunks): the backward pass is done with its parameters, which
    // the reply overwrites, also where no gradient is sent.
    kj::Vector<kj::Promise<void>> ready;
    for (size_t i = run.first; i < run.first + run.count; ++i)
      ready.add(gate->ready(link.first_variables[i]));
    return kj::joinPromises(ready.releaseAsArray())
        .then(kj::mv(send), [p](kj::Exception&& e) -> kj::Promise<void> {
          if (p->gate_failure == nullptr) p->gate_failure = kj::cp(e);
          return kj::mv(e);
        });
  };
  p->round.emplace(
      impl_->io, stop_, stopping_shard_, impl_->shards, sync ? kSyncCallsInFlight : kCallsInFlight,
      impl_->long_waits, gate ? &p->gradient_final : nullptr,
      [gated = gate != nullptr, max_run = sync ? kMaxSyncRunChunks : kMaxAsyncRunChunks](
          const ShardLink& link) { return pushCalls(link, gated, max_run); },
      std::move(call));
  return p;
}

int64_t ShardedClient::endPushAndPull(PushAndPull& p, bool done) {
  last_transfer_ = {p.pushes.bytes, p.pulls.bytes, p.pushes.seconds, p.pulls.seconds};
  if (!done) {
    logGivenUpOnStop(p.min_step);
    return -1;
  }
  shard_steps_ = std::move(p.steps);
  if (p.dropped > 0) ++dropped_;
  return jobStep();
}

int64_t ShardedClient::pushAndPull(const FlatBuffer& gradients, int64_t min_step,
                                   FlatBuffer& parameters, GradientGate* gate) {
  const std::unique_ptr<PushAndPull> p =
      preparePushAndPull(gradients, min_step, shard_steps_, parameters, gate, last_push_start_);
  bool done = false;
  try {
    done = p->round->wait(impl_->io.waitScope);
  } catch (...) {
    KJ_IF_MAYBE (e, p->gate_failure) throw std::runtime_error(e->getDescription().cStr());
    throw;
  }
  return endPushAndPull(*p, done);
}

void ShardedClient::startPushAndPull(size_t id, const FlatBuffer& gradients,
                                     std::vector<int64_t> shard_steps, FlatBuffer& parameters) {
  if (impl_->cluster.mode == TrainingMode::Sync || shardsThroughSharedMemory() > 0)
    throw std::logic_error("overlapping push+pulls in sync training or through shared memory");
  // A step of this slot runs from its last push+pull to this one, as a
  // worker's with one step in flight: the others' starts come between.
  if (slot_push_starts_.size() <= id) slot_push_starts_.resize(id + 1);
  std::unique_ptr<PushAndPull> p = preparePushAndPull(gradients, 0, std::move(shard_steps),
                                                      parameters, nullptr, slot_push_starts_[id]);
  p->id = id;
  p->running = p->round->run()
                   .then([this, p = p.get()] { ended(*p, nullptr); },
                         [this, p = p.get()](kj::Exception&& e) { ended(*p, kj::mv(e)); })
                   .eagerlyEvaluate(nullptr);
  overlapping_.push_back(std::move(p));
}

void ShardedClient::ended(PushAndPull& p, kj::Maybe<kj::Exception> failure) {
  p.ended = true;
  p.failure = kj::mv(failure);
  if (one_ended_) {
    one_ended_->fulfill();
    one_ended_ = nullptr;
  }
}

std::optional<ShardedClient::PushAndPullEnd> ShardedClient::nextPushAndPull(
    kj::Promise<void> wake) {
  auto firstEnded = [this] {
    return std::find_if(overlapping_.begin(), overlapping_.end(),
                        [](const std::unique_ptr<PushAndPull>& p) { return p->ended; });
  };
  if (firstEnded() == overlapping_.end()) {
    auto [one, fulfiller] = kj::newPromiseAndFulfiller<void>();
    one_ended_ = kj::mv(fulfiller);
    // A wake that fails (its fulfiller gone) wakes all the same.
    one.exclusiveJoin(wake.catch_([](kj::Exception&&) {})).wait(impl_->io.waitScope);
    one_ended_ = nullptr;
  }
  const auto it = firstEnded();
  if (it == overlapping_.end()) return std::nullopt;  // woken
  const std::unique_ptr<PushAndPull> p = std::move(*it);
  overlapping_.erase(it);
  kj::Maybe<kj::Exception> failure = kj::mv(p->failure);
  // A failure ends the others: the caller leaves with it.
  if (failure != nullptr) abandonPushAndPulls();
  const int64_t step = endPushAndPull(*p, p->round->end(kj::mv(failure)));
  return PushAndPullEnd{p->id, step};
}

void ShardedClient::abandonPushAndPulls() {
  if (overlapping_.empty()) return;
  // A call given up may still be answered into the shared region (none is
  // in flight there now; later calls go over TCP all the same).
  for (const std::unique_ptr<PushAndPull>& p : overlapping_) p->round->stopSharing();
  overlapping_.clear();
}

double ShardedClient::holdWaitSeconds() const {
  return std::clamp(3.0 * step_seconds_, kHoldWaitMinSeconds, kHoldWaitMaxSeconds);
}

void ShardedClient::waitForOtherWorkersToLeave() {
  // Sync training where every step needs this worker's gradient applies
  // nothing more once it stopped pushing: what the reads find is final.
  const bool steps_need_this_worker =
      impl_->cluster.mode == TrainingMode::Sync &&
      impl_->cluster.replicas_to_aggregate >= int(impl_->cluster.worker.size());
  if (stopping_shard_ || steps_need_this_worker) return;
  const double most = holdWaitSeconds();
  const kj::TimePoint deadline = deadlineIn(int64_t(most * 1000) * kj::MILLISECONDS);
  const Clock::time_point start = Clock::now();
  auto waited = [start] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  // "worker 1" or "workers 1, 2", and "its" or "their", for the log.
  auto named = [](const std::set<uint32_t>& w) {
    return fmt::format("{} {}", w.size() > 1 ? "workers" : "worker", fmt::join(w, ", "));
  };
  auto their = [](const std::set<uint32_t>& w) { return w.size() > 1 ? "their" : "its"; };
  // Each shard's step at the first answers, and how many other workers were
  // connected then: stopping, each adds at most the step it computes.
  std::vector<int64_t> first_steps;
  size_t first_others = 0;
  std::set<uint32_t> others;  // whom the last answers named
  for (;;) {
    const StatusRound round =
        statusesBefore(impl_->io, impl_->shards, impl_->cluster.worker.size(), deadline);
    // A shard gone is the checkpoint's reads' to report, as failures are.
    if (!round.failure.empty()) {
      spdlog::warn("final checkpoint: not waiting for the other workers: a status call failed: {}",
                   round.failure);
      return;
    }
    if (round.timed_out) {
      if (others.empty())
        spdlog::info("final checkpoint: a ps did not answer its status within {:.1f} s", most);
      break;
    }
    std::set<uint32_t> connected;
    for (const ShardStatusView& status : round.statuses) {
      if (status.stopping) return;
      connected.insert(status.workers.begin(), status.workers.end());
    }
    connected.erase(impl_->worker_task);
    if (connected.empty()) return;
    others = connected;
    if (first_steps.empty()) {
      first_others = others.size();
      for (const ShardStatusView& status : round.statuses) first_steps.push_back(status.global_step);
      spdlog::info("final checkpoint: waiting up to {:.1f} s for {} to end {} step and leave",
                   most, named(others), their(others));
    }
    for (size_t i = 0; i < round.statuses.size(); ++i) {
      const int64_t moved = round.statuses[i].global_step - first_steps[i];
      if (moved > int64_t(first_others) && waited() >= kStopSkewSeconds) {
        spdlog::info("final checkpoint: {} {} on (ps {} took {} steps in {:.1f} s): {} later "
                     "steps are in no checkpoint of this chief's",
                     named(others), others.size() > 1 ? "train" : "trains", i, moved, waited(),
                     their(others));
        return;
      }
    }
    if (waited() >= most) break;
    impl_->io.provider->getTimer().afterDelay(20 * kj::MILLISECONDS).wait(impl_->io.waitScope);
  }
  if (!others.empty())
    spdlog::info("final checkpoint: {} still connected after {:.1f} s: {} later steps, if any, "
                 "are in no checkpoint of this chief's",
                 named(others), waited(), their(others));
}

int64_t ShardedClient::holdAtOneStep(bool& waited_out) {
  kj::Timer& timer = impl_->io.provider->getTimer();
  // Holds every shard that has chunks at `at`; returns the highest step
  // one answered with (-1: none). At -1 each holds at the highest step a
  // chunk of it holds (its global step, or the next once a chunk has been
  // applied for it).
  auto holdAll = [&](int64_t at) {
    int64_t highest = -1;
    kj::Vector<kj::Promise<void>> calls;
    FirstFailure failure;
    // joinPromises reports a failure only once every call has ended: the
    // first one ends the wait at once, not the timer after it.
    auto failed = kj::newPromiseAndFulfiller<void>();
    for (ShardLink& link : impl_->shards) {
      if (link.chunks.empty()) continue;  // never steps: nothing to hold
      auto request = link.shard().holdAtRequest();
      request.setGlobalStep(at);
      calls.add(request.send()
                    .then([&highest](auto reply) {
                      highest = std::max(highest, reportedStep(reply.getGlobalStep()));
                    })
                    .catch_(failure.of(link))
                    .catch_([&failed](kj::Exception&& e) -> kj::Promise<void> {
                      if (failed.fulfiller->isWaiting()) failed.fulfiller->reject(kj::cp(e));
                      return kj::mv(e);
                    }));
    }
    kj::Promise<void> all =
        kj::joinPromises(calls.releaseAsArray()).exclusiveJoin(kj::mv(failed.promise));
    // A shard a step behind waits for gradients still to come; one whose
    // step needs the chief's own (a worker lost mid-push) would wait for good.
    if (at >= 0)
      all = all.exclusiveJoin(
          timer.atTime(deadlineIn(int64_t(holdWaitSeconds() * 1000) * kj::MILLISECONDS))
              .then([&waited_out] { waited_out = true; }));
    failure.wait(watched(kj::mv(all), impl_->shards, timer, failure), impl_->io.waitScope,
                 [this] { releaseHolds(kReleaseAfterFailureSeconds); });
    return highest;
  };
  const int64_t step = holdAll(-1);
  if (step >= 0) holdAll(step);
  return step;
}

void ShardedClient::releaseHolds(double seconds) {
  callEveryShardWithin(impl_->io, impl_->shards, seconds, [](ShardLink& link) {
    if (link.chunks.empty()) return kj::Promise<void>(kj::READY_NOW);  // held nothing
    return link.shard().releaseHoldRequest().send().ignoreResult();
  });
}

void ShardedClient::readState(ModelState& state) {
  const Clock::time_point start = Clock::now();
  const bool sync = impl_->cluster.mode == TrainingMode::Sync;
  // The lowest and the highest step of each shard's chunks as read (the
  // step of the values each reply sent); a shard that holds no variable is
  // read nothing and keeps INT64_MAX and -1.
  std::vector<int64_t> lowest, highest;
  bool hold = false, waited_out = false;
  int64_t held = -1;
  for (int attempt = 1;; ++attempt) {
    // A ps that said it is stopping applies nothing more, and closes its
    // connections soon: the chief reads at once what every shard holds.
    hold = sync && !stopping_shard_;
    waited_out = false;
    held = hold ? holdAtOneStep(waited_out) : -1;
    readChunks(state, hold, lowest, highest);
    if (hold) releaseHolds(kPeerSilenceSeconds);
    // A chunk past the step held: a ps lifted the hold under the reads, as
    // it does when this process made no call for a few seconds (stopped or
    // starved) or the hold stood ParameterShard::kMaxHoldSeconds. What was
    // read mixes steps as far apart as the pause let the others train:
    // read it all again.
    const int64_t read_up_to = *std::max_element(highest.begin(), highest.end());
    if (!hold || read_up_to <= held || attempt == kStateReadAttempts) break;
    spdlog::warn(
        "a ps lifted the hold at global step {} under the checkpoint's reads (a chunk read was at "
        "step {}): this process was stopped or starved? Reading every shard again",
        held, read_up_to);
  }
  state_steps_.resize(lowest.size(), state.globalStep());
  for (size_t i = 0; i < lowest.size(); ++i)
    if (lowest[i] != INT64_MAX) state_steps_[i] = lowest[i];
  // The job's global step is ps 0's, as TensorFlow's global_step variable
  // lives on ps 0. Async shards count their own steps and differ as a
  // rule. Sync shards read under the hold are at one step, unless one was
  // stopping (it applies nothing more) or did not reach the others' step in
  // time: then the checkpoint holds its variables a step apart.
  if (sync)
    if (const std::optional<std::string> apart = stepsApart(lowest, highest, hold ? held : -1))
      spdlog::warn(
          "the ps shards read for a checkpoint are {}: {}; the checkpoint, at ps 0's step, holds "
          "some variables a step apart from the others",
          *apart,
          waited_out ? fmt::format("a shard did not reach it within {:.0f} s of the hold (its "
                                   "step lacked a gradient of a worker stopped, slow or lost "
                                   "mid-push)",
                                   holdWaitSeconds())
                     : "a ps stopped while the step was applied to some chunks only (the others "
                       "waited for a worker stopped, slow or lost mid-push), or the hold was "
                       "lifted under the reads twice (the chief stopped or starved?)");
  state.setGlobalStep(state_steps_[0]);
  read_seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
}

void ShardedClient::readChunks(ModelState& state, bool holding, std::vector<int64_t>& lowest,
                               std::vector<int64_t>& highest) {
  const size_t slots = state.optimizer().slotNames().size();
  lowest.assign(impl_->shards.size(), INT64_MAX);
  highest.assign(impl_->shards.size(), -1);
  // One call per chunk and slot, kCallsInFlight per shard at a time
  // (everyChunkAndSlot):
  // asking for everything at once cost a ps its whole state again (seen: a
  // ps of P with Adam peaking at 4.2 P during the chief's checkpoint instead
  // of 3.3 P).
  auto read = [&](ShardLink& link, const ShardChunk& c, size_t slot) {
    FlatBuffer& target = slot == 0 ? state.parameters() : state.optimizer().slot(slot - 1);
    auto request = link.shard().readStateRequest();
    request.setSlot(uint32_t(slot));
    request.setOffset(uint64_t(c.shard_offset));
    request.setLength(uint64_t(c.size));
    float* out = target.data() + c.layout_offset;
    const int64_t size = c.size;
    const size_t shard = size_t(link.index);
    return request.send().then([out, size, shard, &lowest, &highest](auto reply) {
      capnp::Data::Reader data = reply.getData();
      if (data.size() != size_t(size) * sizeof(float))
        throw std::runtime_error(
            fmt::format("answered a state read of {} floats with {} bytes", size, data.size()));
      std::memcpy(out, data.begin(), data.size());
      const int64_t step = reportedStep(reply.getGlobalStep());
      lowest[shard] = std::min(lowest[shard], step);
      highest[shard] = std::max(highest[shard], step);
    });
  };
  FirstFailure failure;
  failure.wait(watched(everyChunkAndSlot(impl_->shards, slots, read, failure), impl_->shards,
                       impl_->io.provider->getTimer(), failure),
               impl_->io.waitScope, [&] {
                 if (holding) releaseHolds(kReleaseAfterFailureSeconds);
               });
}

void ShardedClient::reportSaved(const std::string& checkpoint) {
  FirstFailure failure;
  kj::Vector<kj::Promise<void>> calls;
  for (ShardLink& link : impl_->shards) {
    auto request = link.shard().savedRequest();
    request.setGlobalStep(state_steps_.at(size_t(link.index)));
    request.setCheckpoint(checkpoint);
    calls.add(request.send().ignoreResult().catch_(failure.of(link)));
  }
  failure.wait(watched(kj::joinPromises(calls.releaseAsArray()), impl_->shards,
                       impl_->io.provider->getTimer(), failure),
               impl_->io.waitScope);
}

void ShardedClient::stopRemaining(const std::string& diverged) {
  const std::string words = printablePrefix(diverged, kMostDivergenceBytes);
  // A shard whose call neither answered nor failed (its ps paused, or its
  // host cut off) may never hear that the job is over: said, for someone
  // to stop it.
  std::vector<bool> ended(impl_->shards.size(), false);
  callEveryShardWithin(
      impl_->io, impl_->shards, kStopRemainingSeconds, [&words, &ended](ShardLink& link) {
        auto request = link.shard().stopRequest();
        request.setDiverged(words);
        return request.send().ignoreResult().then(
            [&ended, &link] { ended[size_t(link.index)] = true; },
            [&ended, &link](kj::Exception&&) { ended[size_t(link.index)] = true; });
      });
  std::vector<std::string> silent;
  for (const ShardLink& link : impl_->shards)
    // The shard that said it is stopping ends by itself (its call may hang
    // on the connection it closed).
    if (!ended[size_t(link.index)] && stopping_shard_ != link.index)
      silent.push_back(fmt::format("ps {} at {}", link.index, link.address));
  if (!silent.empty())
    spdlog::warn(
        "{} did not answer the word that the job is over within {:g} s (paused, or its host cut "
        "off): it may serve on, waiting for workers that are gone; stop it (trainctl stop "
        "--force, or its service)",
        listedInProse(silent), kStopRemainingSeconds);
}

void ShardedClient::stopAll() {
  FirstFailure failure;
  kj::Vector<kj::Promise<void>> calls;
  for (ShardLink& link : impl_->shards)
    calls.add(link.shard().stopRequest().send().ignoreResult().catch_(failure.of(link)));
  failure.wait(watched(kj::joinPromises(calls.releaseAsArray()), impl_->shards,
                       impl_->io.provider->getTimer(), failure),
               impl_->io.waitScope);
}

}  // namespace traind
