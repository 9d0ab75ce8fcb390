#include "rpc/shard_service.h"

#include <capnp/orphan.h>
#include <kj/debug.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <new>
#include <span>
#include <string_view>
#include <utility>

#include "core/printable.h"
#include "core/rate_limited_log.h"
#include "rpc/peer_silence.h"
#include "rpc/shard_server.h"

namespace traind {
namespace {

// Tensors are little-endian float32 on the wire; the received bytes are
// word-aligned inside the message, so they are read in place.
std::span<const float> floatsOf(capnp::Data::Reader data) {
  if (data.size() % sizeof(float) != 0)
    throw ProtocolError("a tensor chunk of " + std::to_string(data.size()) +
                        " bytes is not a whole number of float32 values");
  return {reinterpret_cast<const float*>(data.begin()), data.size() / sizeof(float)};
}

// The most of a peer's text a message quotes: a rule, a hash or a path it
// sent may be megabytes, and each refusal is logged and sent back.
constexpr size_t kMostPeerTextQuoted = 2000;

std::string peerText(std::string_view text) { return printablePrefix(text, kMostPeerTextQuoted); }

// The first layers where two forward rules (forwardRule of core/model_spec.h:
// "hidden1 relu, hidden2 tanh") differ, ours and theirs; "no more layers"
// for the side whose rule ends first. A rule holds every layer, so the
// whole of two would be long for a deep model. Rules that differ only in
// their separators are quoted whole, cut short.
std::pair<std::string, std::string> firstDifference(std::string_view ours,
                                                    std::string_view theirs) {
  constexpr std::string_view kSeparator = ", ";
  const auto nextItem = [&](std::string_view& rule) {
    const size_t end = rule.find(kSeparator);
    const std::string_view item = rule.substr(0, end);
    rule.remove_prefix(end == std::string_view::npos ? rule.size() : end + kSeparator.size());
    return item;
  };
  const std::string_view whole_ours = ours, whole_theirs = theirs;
  while (!ours.empty() || !theirs.empty()) {
    const bool ours_left = !ours.empty(), theirs_left = !theirs.empty();
    const std::string_view a = nextItem(ours), b = nextItem(theirs);
    if (a != b || ours_left != theirs_left)
      return {ours_left ? std::string(a) : "no more layers", !theirs_left ? "no more layers"
                                                             : b.empty()  ? "an empty item"
                                                                          : peerText(b)};
  }
  return {printablePrefix(whole_ours, 200), printablePrefix(whole_theirs, 200)};
}

// "in /a/ckpt", or "nowhere" for a chief without a checkpoint dir.
std::string describeDir(const std::string& dir) { return dir.empty() ? "nowhere" : "in " + dir; }

// A peer can repeat a refused call as fast as it likes: at most 32 lines
// of them each 10 s, on the ps's one event-loop thread.
void logRejection(std::string_view why) {
  static RateLimitedLog rejections{std::chrono::seconds(10), 32};
  rejections.log([&](size_t times) {
    spdlog::warn("rejected a call: {}{}", why, RateLimitedLog::since(times));
  });
}

// ProtocolError and InputError become a failed call with their message; the
// connection and the shard live on.
template <typename F>
kj::Promise<void> checked(F&& body) {
  try {
    return body();
  } catch (const kj::Exception& e) {  // a capnp check on a message: its words, not its stack
    logRejection(e.getDescription().cStr());
    return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                         kj::heapString(e.getDescription()));
  } catch (const std::exception& e) {
    logRejection(e.what());
    // The message alone (KJ_EXCEPTION would prefix "e.what() = "): the peer logs it.
    return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__, kj::heapString(e.what()));
  }
}

}  // namespace

ServedShard::ServedShard(ParameterShard& shard, SpecIdentity identity, bool shared_memory)
    : shard_(shard),
      identity_(std::move(identity)),
      training_rule_(trainingRule(shard.cluster())),
      shared_memory_(shared_memory),
      stop_promise_(nullptr) {
  auto paf = kj::newPromiseAndFulfiller<void>();
  stop_promise_ = paf.promise.fork();
  stop_fulfiller_ = kj::mv(paf.fulfiller);
}

wire::ParameterShard::Client ServedShard::newSession(kj::Own<PinningStream> connection) {
  return kj::heap<ShardService>(*this, kj::mv(connection));
}

bool ServedShard::pullMayProceed(int64_t min_step, std::optional<uint32_t> worker,
                                 std::optional<ChunkRun> chunks) const {
  if (stopping_) return true;
  if (worker && !shard_.withinStaleness(*worker)) return false;
  if (!chunks) return min_step <= shard_.globalStep();
  for (size_t i = chunks->first; i < chunks->first + chunks->count; ++i)
    if (shard_.chunkStep(i) < min_step) return false;
  return true;
}

void ServedShard::releasePulls() {
  for (auto it = waiting_pulls_.begin(); it != waiting_pulls_.end();) {
    if (pullMayProceed(it->min_step, it->worker, it->chunks)) {
      it->fulfiller->fulfill();
      it = waiting_pulls_.erase(it);
    } else {
      ++it;
    }
  }
}

void ServedShard::applied() {
  if (stop_after_step_ && shard_.globalStep() >= *stop_after_step_)
    beginStopping(stop_after_by_);  // its replies say so
  releasePulls();
}

void ServedShard::liftHold() {
  hold_owner_ = nullptr;
  // A stopping shard applies nothing more: what the hold kept stays unapplied.
  if (!stopping_ && shard_.releaseHold()) applied();
}

void ServedShard::expireHold() {
  if (!hold_owner_) return;
  const auto now = std::chrono::steady_clock::now();
  const double held = std::chrono::duration<double>(now - hold_since_).count();
  const double silent = hold_owner_->secondsSilent();
  if (held >= ParameterShard::kMaxHoldSeconds)
    spdlog::warn(
        "lifted the chief's hold at global step {} after {:.0f} s: the chief read the "
        "shards for a checkpoint and said nothing since (stopped or hung?); that "
        "checkpoint may hold this shard a step apart from the others",
        shard_.heldAt().value_or(-1), held);
  else if (silent >= kHoldSilenceSeconds)
    spdlog::warn(
        "lifted the chief's hold at global step {}: the chief has made no call, and no data "
        "moved on its connection, for {:.0f} s while it held the shard for a checkpoint "
        "(stopped or hung?); it reads again when it goes on",
        shard_.heldAt().value_or(-1), silent);
  else
    return;
  liftHold();
}

void ServedShard::dropCancelledWaits() {
  std::erase_if(waiting_pulls_, [](PullWaiter& w) { return !w.fulfiller->isWaiting(); });
}

void ServedShard::beginStopping(const std::string& by, const std::string& diverged) {
  // The chief's divergence counts also when the ps was stopping already (a
  // signal, POST /stop): the job failed, and its workers are to hear it.
  // A shard the chief has not initialised (or initialises again) is at no
  // step yet.
  const std::string at = shard_.ready() ? fmt::format("at global step {}", shard_.globalStep())
                                        : std::string("while the shard waits for the chief");
  if (!diverged.empty() && diverged_.empty()) {
    diverged_ = diverged;
    spdlog::warn("stopping {}: {}", at, chiefDivergedText(diverged));
  }
  if (stopping_) return;
  stopping_ = true;
  hold_owner_ = nullptr;  // no expiry to come: the hold's sums are never applied
  if (diverged.empty()) spdlog::info("stopping {}: stop requested by {}", at, by);
  releasePulls();
  stop_fulfiller_->fulfill();
}

void ServedShard::stopAfterStep(int64_t step, const std::string& by) {
  if (stopping_) return;
  stop_after_step_ = step;
  stop_after_by_ = by;
}

ShardService::~ShardService() {
  // A chief gone while it read the shards (killed, or its link lost). The
  // sums held back are applied, which may take memory: a failure is said,
  // not let out of a destructor.
  if (served_.hold_owner_ == this) {
    try {
      served_.liftHold();
    } catch (const std::exception& e) {
      spdlog::error("ps {}: lifting the hold of a chief that left: {}", shard().shardIndex(),
                    e.what());
    }
  }
  if (worker_) {
    shard().workerLeft(*worker_);
    // The slowest worker may have gone: the others need not wait for it.
    served_.releasePulls();
  }
}

void ShardService::fillStatus(wire::ShardStatus::Builder status) const {
  status.setReady(served_.shard_.ready());
  status.setGlobalStep(served_.shard_.globalStep());
  status.setStopping(served_.stopping_);
  status.setDiverged(served_.diverged_);
  status.setLastStep(served_.job_last_step_);
  const std::vector<uint32_t> workers = served_.shard_.connectedWorkers();
  auto list = status.initWorkers(uint32_t(workers.size()));
  for (size_t i = 0; i < workers.size(); ++i) list.set(uint32_t(i), workers[i]);
}

kj::Promise<void> ShardService::hello(HelloContext context) {
  return checked([&]() -> kj::Promise<void> {
    auto params = context.getParams();
    // First: another release may compute the rest otherwise.
    if (params.getWireVersion() != kWireVersion)
      throw ProtocolError(
          fmt::format("ps {} speaks wire version {}, the peer {}: run the same "
                      "traind release on every node",
                      shard().shardIndex(), kWireVersion, params.getWireVersion()));
    const std::string hash = params.getArchitectureHash();
    if (hash != served_.identity_.architecture_hash)
      throw ProtocolError("ps " + std::to_string(shard().shardIndex()) + " serves architecture " +
                          served_.identity_.architecture_hash + ", the peer trains " +
                          peerText(hash) + ": the nodes read different model specs");
    const std::string forward = params.getForwardRule();
    if (forward != served_.identity_.forward_rule) {
      const auto [ours, theirs] = firstDifference(served_.identity_.forward_rule, forward);
      throw ProtocolError(fmt::format(
          "ps {} trains workers that compute {}; the peer's spec says {} (the first layer of "
          "their forward rules that differs): the nodes read different model specs (each "
          "layer's activation and dropout rate must be the same on every node)",
          shard().shardIndex(), ours, theirs));
    }
    const std::string rule = params.getUpdateRule();
    if (rule != served_.identity_.update_rule)
      throw ProtocolError(fmt::format(
          "ps {} applies {}; the peer's spec says {}: the nodes read different model specs "
          "(optimizer, learning_rate, moving_average, the frozen layers and "
          "loss.label_smoothing must be the same on every node)",
          shard().shardIndex(), served_.identity_.update_rule, peerText(rule)));
    const std::string data = params.getDataRule();
    if (data != served_.identity_.data_rule)
      throw ProtocolError(fmt::format(
          "ps {} trains on batches of {}; the peer's spec says {}: the nodes read different "
          "model specs (data.batch_size, seed, data.shuffle, data.shuffle_buffer, "
          "data.interleave, data.shuffle_files, data.shard_by_worker, data.train.limit, "
          "data.train's features and resize, data.augment and data.standardize must be the same "
          "on every node: they decide what each worker reads and how)",
          shard().shardIndex(), served_.identity_.data_rule, peerText(data)));
    const std::string training = params.getTrainingRule();
    if (training != served_.training_rule_)
      throw ProtocolError(fmt::format(
          "ps {} trains {}; the peer's cluster spec says {}: every node must read the same "
          "cluster spec",
          shard().shardIndex(), served_.training_rule_, peerText(training)));
    if (params.getShardIndex() != uint32_t(shard().shardIndex()))
      throw ProtocolError("this is ps " + std::to_string(shard().shardIndex()) +
                          ", the peer thinks it is ps " + std::to_string(params.getShardIndex()) +
                          ": the nodes read different cluster specs");
    // Last of what the specs decide: other specs (another ps count) place
    // the variables otherwise too, and are better said as such above.
    if (const uint32_t ours = chunksFingerprint(shard().chunks()); params.getChunks() != ours)
      throw ProtocolError(fmt::format(
          "ps {} cuts its shard into other chunks than the peer does (fingerprint {:#010x}, the "
          "peer's {:#010x}): the nodes place the variables differently; run the same traind "
          "release on every node",
          shard().shardIndex(), ours, params.getChunks()));
    const uint32_t task = params.getWorkerTask();
    const std::string dir = params.getCheckpointDir();
    if (!worker_ && task == 0) {
      if (served_.initialised_ && served_.initialised_->checkpoint_dir != dir)
        throw ProtocolError(fmt::format(
            "ps {} holds the state of a job whose chief checkpoints {}; this chief checkpoints "
            "{}: is it another job's, on the same ps ports? (stop the running job first, or "
            "give this one other ports)",
            shard().shardIndex(), describeDir(peerText(served_.initialised_->checkpoint_dir)),
            describeDir(peerText(dir))));
    }
    // What the rule cannot say: the examples the spec's files hold on the
    // peer's host. The set of the chief that initialised the shard is the
    // job's (markReady): a worker that says hello before that is held to it
    // at its pushes (checkTrainingSet), which wait for the initialisation
    // anyway, so that a misconfigured worker that came first locks out
    // neither the chief nor the other workers.
    const std::string set = params.getTrainingSet();
    if (!set.empty() && served_.chief_training_set_ && *served_.chief_training_set_ != set)
      throw ProtocolError(fmt::format(
          "ps {} trains workers whose training set holds {} (the chief's); this worker's "
          "holds {}: {}",
          shard().shardIndex(), peerText(*served_.chief_training_set_), peerText(set),
          kDifferentTrainingData));
    if (!worker_ && shard().workerConnected(task))
      // Retried by the peer: a restarted worker may come before the ps has
      // seen its old connection close.
      return kj::Promise<void>(kj::Exception(
          kj::Exception::Type::OVERLOADED, __FILE__, __LINE__,
          kj::heapString(fmt::format("ps {}: worker {} {} (is a second process running as "
                                     "worker {}?)",
                                     shard().shardIndex(), task, kConnectedAlready, task))));
    // Followed before the worker joins: a malformed offer fails the call
    // with nothing changed.
    std::optional<wire::SharedRegionOffer::Reader> offer;
    if (params.hasSharedRegion()) offer = params.getSharedRegion();
    const bool joins = !worker_;
    if (joins) {
      shard().workerJoined(task);  // throws for a task the cluster lacks
      worker_ = task;
    } else if (task != *worker_) {
      throw ProtocolError(
          fmt::format("a hello as worker {} on the connection of worker {}", task, *worker_));
    }
    const bool had_region = region_.has_value();
    try {
      auto results = context.getResults();
      if (offer) attachRegion(*offer, results);
      fillStatus(results.initStatus());
    } catch (...) {
      if (joins) {
        shard().workerLeft(task);  // the clock it raised to the slowest's stays: harmless
        worker_.reset();
      }
      if (!had_region) region_.reset();
      throw;
    }
    if (joins && task == 0) checkpoint_dir_ = dir;
    connection_->markIdentified();
    // This connection's set, held to the job's at each push; the chief's
    // becomes the job's as it initialises the shard (markReady).
    training_set_ = set;
    return kj::READY_NOW;
  });
}

kj::Promise<void> ShardService::status(StatusContext context) {
  last_call_ = std::chrono::steady_clock::now();
  fillStatus(context.getResults().initStatus());
  return kj::READY_NOW;
}

uint32_t ShardService::connectedWorker(const char* call) const {
  if (!worker_) throw ProtocolError(fmt::format("{} before hello", call));
  return *worker_;
}

void ShardService::checkTrainingSet() const {
  if (!training_set_.empty() && served_.chief_training_set_ &&
      *served_.chief_training_set_ != training_set_)
    throw ProtocolError(fmt::format(
        "ps {} now trains the chief's training set, which holds {}; this worker's holds {}: {}",
        served_.shard_.shardIndex(), peerText(*served_.chief_training_set_),
        peerText(training_set_), kDifferentTrainingData));
}

void ShardService::checkChief(const char* call) const {
  if (const uint32_t w = connectedWorker(call); w != 0)
    throw ProtocolError(fmt::format(
        "{} from worker {}: only the chief (worker 0) initialises, reads and stops the shards",
        call, w));
}

kj::Promise<void> ShardService::initialize(InitializeContext context) {
  return checked([&]() -> kj::Promise<void> {
    checkChief("initialize");
    auto params = context.getParams();
    shard().initialize(params.getSlot(), int64_t(params.getOffset()), floatsOf(params.getData()));
    return kj::READY_NOW;
  });
}

kj::Promise<void> ShardService::markReady(MarkReadyContext context) {
  return checked([&]() -> kj::Promise<void> {
    checkChief("markReady");
    // Every worker reads it in this shard's status: checked before anything changes.
    const int64_t last_step = context.getParams().getLastStep();
    if (last_step < 0 || last_step > kMaxGlobalStep)
      throw ProtocolError(fmt::format("ps {}: a job that ends at global step {}, outside [0, 2^53]",
                                      shard().shardIndex(), last_step));
    shard().markReady(context.getParams().getGlobalStep());
    served_.hold_owner_ = nullptr;  // a restore starts afresh, unheld
    served_.initialised_ = ServedShard::Initialised{shard().globalStep(), checkpoint_dir_};
    // The set of the chief that initialised the shard, as its checkpoint
    // directory: one that said hello and went was no job's.
    if (!training_set_.empty()) served_.chief_training_set_ = training_set_;
    served_.job_last_step_ = last_step;
    spdlog::info("initialised by the chief at global step {}", shard().globalStep());
    served_.releasePulls();
    return kj::READY_NOW;
  });
}

void ShardService::attachRegion(wire::SharedRegionOffer::Reader offer,
                                wire::ParameterShard::HelloResults::Builder results) {
  const uint32_t worker = worker_.value_or(0);
  if (!served_.shared_memory_) {
    results.setSharedRefusal(fmt::format("ps {} has transport.shared_memory: off",
                                         shard().shardIndex()));
    return;
  }
  // A connection keeps the region it mapped: calls in flight read and write
  // it, and a reply counts on what its push wrote there.
  if (region_) {
    results.setSharedRefusal("this connection has mapped a shared region already");
    return;
  }
  try {
    region_ = SharedRegion::attach(readOffer(offer), shard().modelSize());
    results.setSharedRegionMapped(true);
    spdlog::info("worker {}: tensors through shared memory", worker);
  } catch (const SharedRegionUnavailable& e) {
    results.setSharedRefusal(e.what());
    spdlog::info("worker {}: tensors over TCP, not shared memory: {}", worker, e.what());
  }
}

SharedRegion& ShardService::region() {
  if (!region_)
    throw ProtocolError("a call through shared memory on a connection without a shared region");
  return *region_;
}

void ShardService::writeToRegion(ChunkRun chunks,
                                 const std::vector<std::optional<uint64_t>>& region_holds) {
  for (size_t i = 0; i < chunks.count; ++i) {
    const size_t chunk = chunks.first + i;
    if (i < region_holds.size() && region_holds[i] == shard().chunkChanges(chunk))
      continue;  // written by the push
    shard().copyChunkOut(chunk, region().parameters() + shard().chunks()[chunk].layout_offset);
  }
}

template <typename Results>
void ShardService::attachChunk(Results results, size_t chunk) {
  // The reply references the chunk's values as they are now; the pin keeps
  // them unchanged (later updates go elsewhere) until the reply's bytes are
  // written. No zero-fill, no copy.
  std::shared_ptr<const float> values = shard().pinChunk(chunk);
  const capnp::Data::Reader bytes(reinterpret_cast<const kj::byte*>(values.get()),
                                  size_t(shard().chunks()[chunk].size) * sizeof(float));
  auto orphanage = capnp::Orphanage::getForMessageContaining(results);
  results.adoptData(orphanage.referenceExternalData(bytes));
  connection_->holdUntilWritten(bytes.begin(), std::move(values));
}

double ShardService::secondsSilent() const {
  const double since_call =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - last_call_).count();
  const std::optional<double> since_data = secondsSinceDataMoved(*connection_);
  return since_data ? std::min(since_call, *since_data) : since_call;
}

kj::Promise<void> ShardService::whenPullMayProceed(int64_t min_step,
                                                   std::optional<ChunkRun> chunks,
                                                   kj::Function<void()> reply) {
  if (!shard().ready() && !served_.stopping_)
    throw ProtocolError("ps " + std::to_string(shard().shardIndex()) + " is not initialised yet");
  return replyWhenPullMayProceed(min_step, chunks, kj::mv(reply));
}

kj::Promise<void> ShardService::replyWhenPullMayProceed(int64_t min_step,
                                                        std::optional<ChunkRun> chunks,
                                                        kj::Function<void()> reply) {
  if (served_.pullMayProceed(min_step, worker_, chunks)) {
    reply();
    return kj::READY_NOW;
  }
  auto paf = kj::newPromiseAndFulfiller<void>();
  served_.dropCancelledWaits();
  served_.waiting_pulls_.push_back({min_step, worker_, chunks, kj::mv(paf.fulfiller)});
  ++waiting_calls_;
  // Released, the call is answered on a later turn of the event loop: a
  // chief's restore over running shards (markReady) may have taken the
  // step back below min_step meanwhile, and the answer would be one no
  // honest ps gives. It waits again then.
  return paf.promise
      .then([this, min_step, chunks, reply = kj::mv(reply)]() mutable {
        return checked([&]() -> kj::Promise<void> {
          return replyWhenPullMayProceed(min_step, chunks, kj::mv(reply));
        });
      })
      .attach(kj::defer([this] { --waiting_calls_; }));
}

void ShardService::checkWait(int64_t min_step) const {
  // A worker waits at most for the step after the one its last reply
  // reported, which no shard is more than one step behind.
  const int64_t step = served_.shard_.globalStep();
  if (min_step > step + 1)
    throw ProtocolError(fmt::format(
        "{} waits for global step {}, but ps {} is at step {}: a worker waits for the next step "
        "at most (was the worker paused while the chief restored the shards from a checkpoint? "
        "It starts again from that checkpoint once it reconnects)",
        worker_ ? fmt::format("worker {}'s call", *worker_) : std::string("a call"), min_step,
        served_.shard_.shardIndex(), step));
  if (waiting_calls_ >= kMaxWaitingCalls)
    throw ProtocolError(std::to_string(waiting_calls_) +
                        " calls of this connection wait already; a worker has a few");
}

kj::Promise<void> ShardService::pushAndPull(PushAndPullContext context) {
  return checked([&]() -> kj::Promise<void> {
    auto params = context.getParams();
    if (params.getWorkerTask() != connectedWorker("pushAndPull"))
      throw ProtocolError(fmt::format("a push as worker {} on the connection of worker {}",
                                      params.getWorkerTask(), *worker_));
    checkTrainingSet();
    checkWait(params.getMinStep());
    const int64_t offset = int64_t(params.getOffset());
    const bool shared = params.getSharedFloats() > 0;
    if (shared && params.hasData())
      throw ProtocolError("a push through shared memory that also carries data");
    if (!shared && params.getSharedChunks() > 1)
      throw ProtocolError("a push of several chunks carrying its data: one chunk per call");
    const std::span<const float> sent =
        shared ? std::span<const float>() : floatsOf(params.getData());
    // Every chunk is checked before any is applied, and a shared gradient's
    // chunks before their floats are touched.
    const ChunkRun run =
        shared ? shard().chunkRun(offset,
                                  int64_t(std::min<uint64_t>(params.getSharedFloats(), INT64_MAX)),
                                  std::max<uint32_t>(params.getSharedChunks(), 1))
               : ChunkRun{shard().chunkAt(offset, int64_t(sent.size())), 1};
    const uint32_t worker = params.getWorkerTask();
    const int64_t step = params.getStep();
    if (shared) region();  // refused without a region, before anything changes
    const auto gradientOf = [&](size_t chunk) {
      const ShardChunk& c = shard().chunks()[chunk];
      return shared ? std::span<const float>(region().gradients() + c.layout_offset, size_t(c.size))
                    : sent;
    };
    for (size_t i = run.first; i < run.first + run.count; ++i)
      shard().checkPush(worker, step, i, gradientOf(i));
    PushCounts& counts = served_.push_counts_;
    if (shared) {
      ++counts.shared_calls;
      counts.shared_chunks += int64_t(run.count);
    } else {
      ++counts.tcp_calls;
    }

    const int64_t before = shard().globalStep();
    // A stopping ps applies nothing more: the chief's final checkpoint, read
    // after the stop began, holds the job's last state. One finishing a step
    // before it stops (stopAfterStep) applies that step's gradients only (a
    // guard: checkPush refuses a later step's, and the push that completes
    // the step begins the stop).
    const bool applies =
        !served_.stopping_ && (!served_.stop_after_step_ || step < *served_.stop_after_step_);
    bool accepted = applies, chunk_steps_moved = false;
    std::vector<std::optional<uint64_t>> region_holds(shared ? run.count : 0);
    for (size_t i = 0; applies && i < run.count; ++i) {
      const size_t chunk = run.first + i;
      const ShardChunk& c = shard().chunks()[chunk];
      const int64_t chunk_before = shard().chunkStep(chunk);
      const uint64_t changes_before = shard().chunkChanges(chunk);
      // A push that applies the chunk writes its new values into the
      // region as it computes them; the reply copies them only if they
      // change again.
      accepted &= shard().pushChecked(worker, step, chunk, gradientOf(chunk),
                                      shared ? region().parameters() + c.layout_offset : nullptr);
      if (shared && shard().chunkChanges(chunk) != changes_before)
        region_holds[i] = shard().chunkChanges(chunk);
      chunk_steps_moved |= shard().chunkStep(chunk) != chunk_before;
    }
    // Sync: the reply waits until the chunks have been applied for the step
    // pushed, whatever the worker's job-wide step asks: with backup workers
    // one shard may run a step ahead of another, and the worker's step is
    // the lowest; answered before, it would push the same step again.
    const int64_t min_step = shard().cluster().mode == TrainingMode::Sync
                                 ? std::max(params.getMinStep(), step + 1)
                                 : params.getMinStep();
    // The gradient is applied: its 1 MiB need not wait with a sync pull.
    context.releaseParams();
    // What is left is the wait and the reply: a worker that gives up its
    // wait (a stop, a lost connection) takes them along.
    context.allowCancellation();
    if (shard().globalStep() != before || chunk_steps_moved) served_.applied();
    // The reply waits for these chunks' steps only (sync: until each has
    // been applied), not for the rest of the shard.
    return whenPullMayProceed(min_step, run, [this, context, run, accepted, shared,
                                              region_holds = kj::mv(region_holds)]() mutable {
      auto results = context.getResults();
      results.setAccepted(accepted);
      results.setStopping(served_.stopping_);
      int64_t step = INT64_MAX;  // of the values sent: the lowest of the chunks'
      for (size_t i = run.first; i < run.first + run.count; ++i)
        step = std::min(step, shard().chunkStep(i));
      results.setGlobalStep(step);
      if (shared)
        writeToRegion(run, region_holds);
      else
        attachChunk(results, run.first);
    });
  });
}

kj::Promise<void> ShardService::pull(PullContext context) {
  return checked([&]() -> kj::Promise<void> {
    connectedWorker("pull");  // refused before hello
    auto params = context.getParams();
    checkWait(params.getMinStep());
    const size_t chunk = shard().chunkAt(int64_t(params.getOffset()), int64_t(params.getLength()));
    const bool shared = params.getIntoSharedRegion();
    // Without a region the call is refused now (region() throws), not after a wait.
    if (shared) region();
    context.allowCancellation();
    return whenPullMayProceed(params.getMinStep(), std::nullopt,
                              [this, context, chunk, shared]() mutable {
      auto results = context.getResults();
      results.setGlobalStep(shard().chunkStep(chunk));  // its values', which may be a step ahead
      results.setStopping(served_.stopping_);
      if (shared)
        writeToRegion({chunk, 1}, {});
      else
        attachChunk(results, chunk);
    });
  });
}

kj::Promise<void> ShardService::readState(ReadStateContext context) {
  last_call_ = std::chrono::steady_clock::now();
  return checked([&]() -> kj::Promise<void> {
    checkChief("readState");
    auto params = context.getParams();
    const int64_t length = int64_t(params.getLength());
    if (length < 0 || length > ParameterShard::kChunkFloats)
      throw ProtocolError("a read of " + std::to_string(length) + " floats; at most " +
                          std::to_string(ParameterShard::kChunkFloats) + " per call");
    const size_t chunk = shard().chunkAt(int64_t(params.getOffset()), length);
    auto results = context.getResults();
    results.setGlobalStep(shard().chunkStep(chunk));
    capnp::Data::Builder data = results.initData(size_t(length) * sizeof(float));
    shard().read(params.getSlot(), int64_t(params.getOffset()),
                {reinterpret_cast<float*>(data.begin()), size_t(length)});
    return kj::READY_NOW;
  });
}


kj::Promise<void> ShardService::stop(StopContext context) {
  return checked([&]() -> kj::Promise<void> {
    checkChief("stop");
    served_.beginStopping("the chief", printablePrefix(context.getParams().getDiverged().cStr(),
                                                       kMostDivergenceBytes));
    return kj::READY_NOW;
  });
}

kj::Promise<void> ShardService::saved(SavedContext context) {
  return checked([&]() -> kj::Promise<void> {
    checkChief("saved");
    const auto params = context.getParams();
    const int64_t step = params.getGlobalStep();
    const capnp::Text::Reader path = params.getCheckpoint();
    if (!shard().ready())
      throw ProtocolError("saved: the shard has not been initialised: it holds no state to save");
    // The state a checkpoint was written from was read from this shard.
    if (step < 0 || step > shard().globalStep())
      throw ProtocolError(
          fmt::format("saved: global step {} is not one the shard has held (it "
                      "is at {})",
                      step, shard().globalStep()));
    if (path.size() == 0 || path.size() > kMaxCheckpointPathBytes)
      throw ProtocolError(fmt::format("saved: a checkpoint path of {} bytes: expected 1 to {}",
                                      path.size(), kMaxCheckpointPathBytes));
    const uint64_t count = served_.last_saved_ ? served_.last_saved_->count + 1 : 1;
    served_.last_saved_ = ServedShard::SavedCheckpoint{printable(path.cStr()), step, count};
    return kj::READY_NOW;
  });
}

kj::Promise<void> ShardService::holdAt(HoldAtContext context) {
  last_call_ = std::chrono::steady_clock::now();
  return checked([&]() -> kj::Promise<void> {
    checkChief("holdAt");
    const int64_t asked = context.getParams().getGlobalStep();
    if (asked < -1)
      throw ProtocolError(fmt::format("a hold at global step {}: expected -1 or a step", asked));
    // A hold waits for the next step at most, as a pull does, and holds no
    // chunk below its step: the chief's workers keep the shards within a
    // step, but a chief whose view is off (another build, a lie) must not
    // make the shard wait for steps that never come.
    const int64_t step =
        asked == -1 ? shard().highestChunkStep()
                    : std::clamp(asked, shard().highestChunkStep(), shard().globalStep() + 1);
    if (asked >= 0) checkWait(step);  // counted with the pulls that wait
    // A stopping shard applies nothing more: it needs no hold.
    if (!served_.stopping_) {
      auto own = [this] {
        // The bound runs from the hold's start: raising it does not renew it.
        if (served_.hold_owner_ != this) served_.hold_since_ = std::chrono::steady_clock::now();
        served_.hold_owner_ = this;
      };
      bool applied = false;
      try {
        applied = shard().holdAt(step);
      } catch (const std::bad_alloc&) {
        // Out of memory partway through the kept sums it applies (a chunk
        // that a reply pins takes a copy): the hold stands, some chunks
        // moved on. It keeps its owner, whose silence, the bound or its
        // connection's end lifts it, and the pulls those chunks allow go on.
        if (shard().heldAt()) {
          own();
          served_.applied();
        }
        throw;
      }
      own();
      if (applied) served_.applied();
    }
    if (asked == -1) {
      context.getResults().setGlobalStep(step);
      return kj::READY_NOW;
    }
    context.allowCancellation();
    // Once every chunk is there the global step is too (a stopping shard
    // answers at once, at the step it stopped at).
    return whenPullMayProceed(
        step, ChunkRun{0, shard().chunks().size()},
        [this, context]() mutable { context.getResults().setGlobalStep(shard().globalStep()); });
  });
}

kj::Promise<void> ShardService::releaseHold(ReleaseHoldContext context) {
  last_call_ = std::chrono::steady_clock::now();
  return checked([&]() -> kj::Promise<void> {
    checkChief("releaseHold");
    served_.liftHold();
    return kj::READY_NOW;
  });
}

}  // namespace traind
