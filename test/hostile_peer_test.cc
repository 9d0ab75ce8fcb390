// Peers that speak the protocol and lie in it.
//
// A worker that fills every field at random, from values on and around the
// limits the ps checks: a chunk's start and one off it, a chunk's size and
// one off it, the shard's end, steps ahead of the global step, workers
// outside the cluster, the ranges' extremes. Thousands of such calls go to a
// real ps process over three connections (the chief, a worker that maps a
// shared memory region, and a stranger that may never say hello). The ps
// must refuse what is wrong before it touches its state, apply exactly what
// is right, answer with what it holds, stay within its memory, and keep
// serving.
//
// A ps whose replies lie to a real worker process: the worker must stop
// with an error that names the ps and the lie, not act on it. And the same
// fake ps honest but behind a slow link: the worker must not take it for a
// stopped one.
#include <capnp/rpc-twoparty.h>
#include <capnp/rpc.capnp.h>
#include <capnp/schema.h>
#include <capnp/serialize.h>
#include <kj/async-io.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "core/cluster_spec.h"
#include "core/layer_graph.h"
#include "core/model_spec.h"
#include "core/model_state.h"
#include "core/parameter_shard.h"
#include "core/placement.h"
#include "core/printable.h"
#include "rpc/forwarding_stream.h"
#include "rpc/shard_server.h"
#include "rpc/shared_region.h"
#include "rpc/traind.capnp.h"
#include "test/cluster_fixture.h"
#include "test/traind_process.h"

using namespace traind;
using namespace traind::testing;

namespace {

// Every gradient float the peer sends: a power of two, so that lr * g is
// exact and the SGD update the ps applies, p - lr * g, is one rounding
// whether or not the ps fuses the multiply-add. The oracle still allows a
// rounding's slack; one update more or less (lr * g = 9.8e-5) is far beyond it.
constexpr float kGradient = 1.0f / 1024;

// The step after `step`, or `step` at the end of the range.
int64_t stepAfter(int64_t step) {
  return step == std::numeric_limits<int64_t>::max() ? step : step + 1;
}

// The index of the chunk that starts at shard offset `offset`, if one does.
std::optional<size_t> chunkStartingAt(const std::vector<ShardChunk>& chunks, uint64_t offset) {
  for (size_t i = 0; i < chunks.size(); ++i)
    if (uint64_t(chunks[i].shard_offset) == offset) return i;
  return std::nullopt;
}

// Draws field values, mostly ones a check can be off by one on.
class FieldDice {
 public:
  FieldDice(uint64_t seed, const std::vector<ShardChunk>& chunks, int64_t shard_floats)
      : rng_(seed), chunks_(chunks), shard_floats_(shard_floats) {}

  bool coin(double p) { return std::bernoulli_distribution(p)(rng_); }
  size_t below(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  const ShardChunk& chunk() { return chunks_[below(chunks_.size())]; }

  // A shard offset in floats: mostly a chunk's start.
  uint64_t offset() {
    const ShardChunk& c = chunk();
    if (coin(0.7)) return uint64_t(c.shard_offset);
    switch (below(6)) {
      case 0:
        return uint64_t(c.shard_offset) + 1;
      case 1:
        return uint64_t(c.shard_offset) - 1;  // wraps below the first chunk
      case 2:
        return uint64_t(shard_floats_);
      case 3:
        return pick({uint64_t(1) << 31, uint64_t(1) << 32, uint64_t(1) << 62, uint64_t(1) << 63,
                     std::numeric_limits<uint64_t>::max()});
      case 4:
        return below(size_t(shard_floats_));
      default:
        return uint64_t(c.shard_offset) + 16;  // the next aligned start
    }
  }

  // A number of floats: mostly a chunk's or a run's, or off them.
  uint64_t floats(uint64_t offset) {
    const uint64_t exact = runFloats(offset, 1 + below(3));
    if (coin(0.7)) return exact;
    switch (below(6)) {
      case 0:
        return exact + 1;
      case 1:
        return exact - 1;
      case 2:
        return 0;
      case 3:
        return uint64_t(chunk().size);
      case 4:
        return pick({uint64_t(1) << 32, uint64_t(1) << 61, std::numeric_limits<uint64_t>::max()});
      default:
        return exact + 16;
    }
  }

  // The floats of `count` chunks from the one at `offset` (0 if none starts there).
  uint64_t runFloats(uint64_t offset, size_t count) const {
    const std::optional<size_t> first = chunkStartingAt(chunks_, offset);
    if (!first) return 0;
    uint64_t floats = 0;
    for (size_t i = *first; i < std::min(chunks_.size(), *first + count); ++i)
      floats += chunks_[i].size;
    return floats;
  }

  // A step tag or a step to wait for: mostly the global step `now`.
  int64_t step(int64_t now) {
    if (coin(0.6)) return now;
    switch (below(5)) {
      case 0:
        return stepAfter(now);
      case 1:
        return now == std::numeric_limits<int64_t>::min() ? now : now - 1;
      case 2:
        return 0;
      default:
        return pick({int64_t(-1), std::numeric_limits<int64_t>::min(),
                     std::numeric_limits<int64_t>::max(), int64_t(1) << 40});
    }
  }

  uint32_t worker(uint32_t own) {
    if (coin(0.85)) return own;
    return pick({0u, 1u, 2u, 3u, 1u << 31, std::numeric_limits<uint32_t>::max()});
  }

  uint32_t count() {
    return pick({0u, 1u, 1u, 1u, 2u, 3u, uint32_t(chunks_.size()), uint32_t(chunks_.size()) + 1,
                 std::numeric_limits<uint32_t>::max()});
  }

  template <typename T>
  T pick(std::initializer_list<T> values) {
    return *(values.begin() + below(values.size()));
  }

 private:
  std::mt19937_64 rng_;
  const std::vector<ShardChunk>& chunks_;
  int64_t shard_floats_;
};

// What the ps's parameters should be: each chunk's initial values, less
// lr * kGradient for every push the ps says it applied (async: each on
// arrival). The gaps between a chunk's variables (each starts aligned) hold
// nothing, and no update touches them.
class ShardOracle {
 public:
  ShardOracle(const std::vector<ShardChunk>& chunks, const ShardPlan& plan,
              const FlatBuffer& initial, float lr)
      : chunks_(chunks), lr_(lr) {
    for (const ShardChunk& c : chunks) {
      values_.emplace_back(initial.data() + c.layout_offset,
                           initial.data() + c.layout_offset + c.size);
      std::vector<bool>& held = held_.emplace_back(size_t(c.size), false);
      for (const VariablePiece& p : plan.pieces)
        for (int64_t at = std::max(p.shard_offset, c.shard_offset);
             at < std::min(p.shard_offset + p.size, c.shard_offset + c.size); ++at)
          held[size_t(at - c.shard_offset)] = true;
    }
  }

  std::optional<size_t> chunkAt(uint64_t offset) const { return chunkStartingAt(chunks_, offset); }
  const std::vector<float>& chunk(size_t i) const { return values_[i]; }

  void applied(size_t first, size_t count) {
    for (size_t i = first; i < first + count; ++i)
      for (size_t k = 0; k < values_[i].size(); ++k)
        if (held_[i][k]) values_[i][k] = values_[i][k] - lr_ * kGradient;
  }

  // Whether `floats` are chunk i's values (within a rounding's slack).
  bool holds(size_t i, const float* floats) const {
    for (size_t k = 0; k < values_[i].size(); ++k)
      if (std::fabs(floats[k] - values_[i][k]) > 1e-6f) return false;
    return true;
  }

  // The value at shard offset `at`; none after the last chunk (the shard's
  // buffer ends aligned).
  std::optional<float> at(int64_t at) const {
    for (size_t i = 0; i < chunks_.size(); ++i)
      if (at >= chunks_[i].shard_offset && at < chunks_[i].shard_offset + chunks_[i].size)
        return values_[i][size_t(at - chunks_[i].shard_offset)];
    return std::nullopt;
  }

 private:
  const std::vector<ShardChunk>& chunks_;
  float lr_;
  std::vector<std::vector<float>> values_;
  std::vector<std::vector<bool>> held_;  // per chunk: which floats are a variable's
};

int64_t peakRssKib(int pid) {
  const std::string status = readFile("/proc/" + std::to_string(pid) + "/status");
  const size_t at = status.find("VmHWM:");
  return at == std::string::npos ? -1 : std::stoll(status.substr(at + 6));
}

struct Connection : PsPeer {
  uint32_t worker;  // what its hellos say, mostly

  Connection(kj::AsyncIoContext& io, const std::string& address, uint32_t worker_task)
      : PsPeer(io, address), worker(worker_task) {}
};

}  // namespace

TEST_CASE(
    "a ps refuses calls with random field values before they touch its state, and serves on") {
  const std::string mode = GENERATE(as<std::string>{}, "async", "sync");
  // Each sync push that counts waits for the other worker's gradient, which
  // a random peer seldom sends: those calls end at the wait's timeout.
  const int calls = mode == "async" ? 4000 : 800;
  const uint64_t seed = Catch::rngSeed() + (mode == "async" ? 1 : 2);
  INFO(mode << " mode, seed " << seed << " (run with --rng-seed N for another)");

  MlpPsTask task(freshTempDir("hostile-" + mode), mode);
  auto& [cluster, address, ps, spec, graph, plan, chunks] = task;
  const VariableLayout layout(graph.variables);
  const std::string training_rule = trainingRule(loadClusterSpec(cluster.string()));
  const int64_t shard_floats = plan.size;
  ModelState state(spec, graph);
  state.initialize();
  ShardOracle oracle(chunks, plan, state.parameters(), spec.learning_rate.initial);
  FieldDice dice(seed, chunks, shard_floats);

  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::Timer& timer = io.provider->getTimer();
  Connection chief(io, address, 0), worker(io, address, 1), stranger(io, address, 2);
  auto hello = [&](Connection& c, uint32_t worker_task) {
    return task.hello(c.shard, worker_task);
  };
  hello(chief, 0).send().wait(io.waitScope);
  // The worker computes in a region the ps maps: its gradients are kGradient.
  const SharedRegion region = SharedRegion::create(layout.totalSize());
  std::fill(region.gradients(), region.gradients() + layout.totalSize(), kGradient);
  {
    auto request = hello(worker, 1);
    writeOffer(region.offer(), request.initSharedRegion());
    REQUIRE(request.send().wait(io.waitScope).getSharedRegionMapped());
  }
  for (size_t i = 0; i < chunks.size(); ++i) {
    auto request = chief.shard.initializeRequest();
    request.setOffset(uint64_t(chunks[i].shard_offset));
    const std::vector<float>& values = oracle.chunk(i);
    request.setData(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(values.data()),
                                        values.size() * sizeof(float)));
    request.send().wait(io.waitScope);
  }
  chief.shard.markReadyRequest().send().wait(io.waitScope);

  int answered = 0, refused = 0, waited = 0, pushes_applied = 0, not_finite_refused = 0;
  std::string last_refusal;
  // Sends a call and checks its reply; true if the ps answered, false if it
  // refused it. A call that may wait (for the next step) is given up after
  // a while.
  auto outcome = [&](auto&& request, auto&& check_reply, bool may_wait = false) {
    auto sent = request.send();
    std::optional<decltype(sent.wait(io.waitScope))> reply;
    kj::Maybe<kj::Exception> failure = kj::runCatchingExceptions([&] {
      if (may_wait)
        reply = timer.timeoutAfter(100 * kj::MILLISECONDS, kj::mv(sent)).wait(io.waitScope);
      else
        reply = sent.wait(io.waitScope);
    });
    KJ_IF_MAYBE (e, failure) {
      if (e->getType() == kj::Exception::Type::OVERLOADED &&
          std::string(e->getDescription().cStr()).find("timed out") != std::string::npos) {
        ++waited;
        return false;
      }
      REQUIRE(e->getType() != kj::Exception::Type::DISCONNECTED);  // the ps is gone
      ++refused;
      last_refusal = e->getDescription().cStr();
      not_finite_refused += last_refusal.find("that is not finite") != std::string::npos;
      CHECK(printable(last_refusal) == last_refusal);  // no raw byte of a lie comes back
      return false;
    }
    ++answered;
    check_reply(*reply);
    return true;
  };
  auto globalStep = [&] {
    return chief.shard.statusRequest().send().wait(io.waitScope).getStatus().getGlobalStep();
  };
  auto markReady = [&](int64_t step) {
    auto request = chief.shard.markReadyRequest();
    request.setGlobalStep(step);
    request.send().wait(io.waitScope);
  };

  // A pushAndPull with fields from the dice, and what the oracle needs of it.
  struct Push {
    capnp::Request<wire::ParameterShard::PushAndPullParams,
                   wire::ParameterShard::PushAndPullResults>
        request;
    bool shared, ragged;
    uint64_t offset, floats;
    size_t count;             // chunks, if the ps takes it
    bool not_finite = false;  // its first chunk's first float is NaN or infinite
  };
  auto drawPush = [&](Connection& c, int64_t now) {
    Push p{c.shard.pushAndPullRequest(), dice.coin(0.4), false, dice.offset(), 0, 1};
    auto& request = p.request;
    request.setWorkerTask(dice.worker(c.worker));
    request.setStep(dice.step(now));
    request.setOffset(p.offset);
    int64_t min_step = dice.step(now);
    // A push that waits for the next step is applied all the same: only a
    // refusal says it was not, so the oracle keeps to pushes answered at once.
    if (mode == "async" && min_step == stepAfter(now)) min_step = now;
    request.setMinStep(min_step);
    p.floats = dice.floats(p.offset);
    const uint32_t run = dice.coin(0.7) ? uint32_t(1 + dice.below(3)) : dice.count();
    p.ragged = !p.shared && dice.coin(0.05);  // 2 bytes past the last float
    if (p.shared) {
      request.setSharedFloats(p.floats);
      request.setSharedChunks(run);
      p.count = std::max<size_t>(run, 1);  // unset (0) is one chunk, as over TCP
    } else {
      p.floats = std::min<uint64_t>(p.floats, uint64_t(ParameterShard::kChunkFloats) + 1);
      std::vector<float> gradient(size_t(p.floats), kGradient);
      // A chunk's first float is a variable's, never a gap between two.
      p.not_finite = !gradient.empty() && dice.coin(0.05);
      if (p.not_finite)
        gradient[0] = dice.pick({std::numeric_limits<float>::quiet_NaN(),
                                 std::numeric_limits<float>::infinity(),
                                 -std::numeric_limits<float>::infinity()});
      auto bytes = request.initData(gradient.size() * sizeof(float) + (p.ragged ? 2 : 0));
      if (!gradient.empty())  // an empty vector's data() may be null: no memcpy from it
        std::memcpy(bytes.begin(), gradient.data(), gradient.size() * sizeof(float));
      if (dice.coin(0.1)) request.setSharedChunks(run);
    }
    return p;
  };
  // A push the ps answered: whole and in place, and (async) applied at once.
  auto pushAnswered = [&](const Push& p, bool accepted) {
    const std::optional<size_t> first = oracle.chunkAt(p.offset);
    REQUIRE(first);
    REQUIRE(dice.runFloats(p.offset, p.count) == p.floats);
    REQUIRE(!p.ragged);
    REQUIRE(!p.not_finite);
    if (mode != "async") return;
    CHECK(accepted);  // async drops nothing
    oracle.applied(*first, p.count);
    ++pushes_applied;
  };

  for (int call = 0; call < calls; ++call) {
    Connection& c = *dice.pick({&chief, &chief, &worker, &worker, &stranger});
    INFO("call " << call << " on the connection of worker " << c.worker
                 << "; the last refusal: " << last_refusal);
    const int64_t now = globalStep();
    const size_t kind = dice.below(23);
    if (kind < 8) {  // pushAndPull
      Push p = drawPush(c, now);
      // A gradient in the region that is not finite, at its first chunk's
      // first float; the region is the worker's again after the call.
      float* spoiled = nullptr;
      if (p.shared && oracle.chunkAt(p.offset) && dice.coin(0.1)) {
        spoiled = region.gradients() + chunks[*oracle.chunkAt(p.offset)].layout_offset;
        *spoiled = std::numeric_limits<float>::quiet_NaN();
        p.not_finite = true;
      }
      bool accepted = false;
      if (outcome(
              p.request,
              [&](auto& reply) {
                accepted = reply.getAccepted();
                // A reply over TCP carries the chunk's values; through the region, none.
                CHECK(reply.getData().size() == (p.shared ? 0 : size_t(p.floats) * sizeof(float)));
              },
              mode == "sync"))
        pushAnswered(p, accepted);
      if (spoiled) *spoiled = kGradient;
    } else if (kind < 12) {  // pull
      auto request = c.shard.pullRequest();
      request.setMinStep(dice.step(now));
      const uint64_t offset = dice.offset();
      request.setOffset(offset);
      const uint64_t floats = dice.floats(offset);
      request.setLength(floats);
      const bool shared = dice.coin(0.3);
      request.setIntoSharedRegion(shared);
      outcome(
          request,
          [&](auto& reply) {
            const std::optional<size_t> chunk = oracle.chunkAt(offset);
            REQUIRE(chunk);
            REQUIRE(oracle.chunk(*chunk).size() == floats);
            const float* values = shared ? region.parameters() + chunks[*chunk].layout_offset
                                         : reinterpret_cast<const float*>(reply.getData().begin());
            REQUIRE((shared || reply.getData().size() == floats * sizeof(float)));
            if (mode == "async") CHECK(oracle.holds(*chunk, values));
          },
          true);
    } else if (kind < 14) {  // readState
      auto request = c.shard.readStateRequest();
      const uint32_t slot = dice.pick({0u, 0u, 0u, 1u, 2u, std::numeric_limits<uint32_t>::max()});
      request.setSlot(slot);
      const uint64_t offset = dice.coin(0.5) ? dice.offset() : dice.below(size_t(shard_floats));
      request.setOffset(offset);
      const uint64_t length = dice.coin(0.5) ? dice.floats(offset) : dice.below(4096);
      request.setLength(length);
      outcome(request, [&](auto& reply) {
        const std::optional<size_t> chunk = oracle.chunkAt(int64_t(offset));
        REQUIRE(chunk);  // a whole chunk, as the chief reads them
        REQUIRE(oracle.chunk(*chunk).size() == length);
        REQUIRE(reply.getData().size() == length * sizeof(float));
        REQUIRE(slot == 0);  // SGD keeps no slots
        const float* values = reinterpret_cast<const float*>(reply.getData().begin());
        if (mode == "async")
          for (uint64_t k = 0; k < length; ++k)
            if (const std::optional<float> held = oracle.at(int64_t(offset + k)))
              REQUIRE(std::fabs(values[k] - *held) <= 1e-6f);
      });
    } else if (kind < 16) {  // initialize, with the values the shard should hold
      auto request = c.shard.initializeRequest();
      request.setSlot(dice.pick({0u, 0u, 0u, 1u, std::numeric_limits<uint32_t>::max()}));
      const uint64_t offset = dice.offset();
      request.setOffset(offset);
      const uint64_t floats =
          std::min<uint64_t>(dice.floats(offset), uint64_t(ParameterShard::kChunkFloats) + 1);
      std::vector<float> values(size_t(floats), 0.0f);
      if (const std::optional<size_t> chunk = oracle.chunkAt(offset))
        std::copy_n(oracle.chunk(*chunk).begin(),
                    std::min(values.size(), oracle.chunk(*chunk).size()), values.begin());
      request.setData(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(values.data()),
                                          values.size() * sizeof(float)));
      const bool initialised = outcome(request, [&](auto&) {
        const std::optional<size_t> chunk = oracle.chunkAt(offset);
        REQUIRE(chunk);
        REQUIRE(oracle.chunk(*chunk).size() == floats);
      });
      // The shard is not ready from a chief's initialisation to its
      // markReady (refusing pushes and pulls): mostly marked at once, as
      // the chief does once it has written every chunk.
      if (initialised && dice.coin(0.9)) markReady(now);
    } else if (kind < 18) {  // hello: the stranger's may make it a worker
      auto request = c.shard.helloRequest();
      request.setArchitectureHash(dice.coin(0.8) ? architectureHash(spec)
                                                 : dice.pick({"0123abcd", "\x1b[2J\xff"}));
      request.setShardIndex(dice.pick({0u, 0u, 0u, 1u, std::numeric_limits<uint32_t>::max()}));
      const uint32_t worker_task = dice.worker(c.worker);
      // A stranger that became the chief could stop the job: not this test's.
      request.setWorkerTask(&c == &stranger && worker_task == 0 ? 1 : worker_task);
      request.setWireVersion(dice.coin(0.8) ? kWireVersion : dice.pick({0u, kWireVersion + 1}));
      const bool same_chunks = dice.coin(0.9);
      request.setChunks(chunksFingerprint(chunks) + (same_chunks ? 0 : 1));
      request.setForwardRule(dice.coin(0.9) ? forwardRule(spec) : "hidden1 \x1b[2J\xff");
      request.setUpdateRule(dice.coin(0.8) ? updateRule(spec) : dice.pick({"adam", "\x1b[2J\xff"}));
      request.setDataRule(dice.coin(0.9) ? dataRule(spec) : "\x1b[2J\xff");
      request.setTrainingRule(dice.coin(0.9) ? training_rule : "sync\xff");
      outcome(request, [&](auto& reply) {
        REQUIRE(same_chunks);
        CHECK(!reply.getSharedRegionMapped());
      });
    } else if (kind < 19) {  // markReady: the chief may restart the step count
      auto request = c.shard.markReadyRequest();
      const int64_t step = dice.step(now);
      const int64_t last_step = dice.coin(0.8) ? 0 : dice.step(now);  // workers read it back
      request.setGlobalStep(step);
      request.setLastStep(last_step);
      outcome(request, [&](auto&) {
        REQUIRE(&c == &chief);
        REQUIRE(step >= 0);
        REQUIRE(step <= kMaxGlobalStep);
        REQUIRE(last_step >= 0);
        REQUIRE(last_step <= kMaxGlobalStep);
      });
    } else if (kind < 20) {  // saved: the chief's word that a checkpoint holds the shard
      auto request = c.shard.savedRequest();
      const int64_t step = dice.step(now);
      request.setGlobalStep(step);
      const std::string path = dice.pick({std::string("/ckpt/ckpt-1"), std::string(),
                                          std::string(5000, 'p'), std::string("\x1b[2J\xff")});
      request.setCheckpoint(path);
      outcome(request, [&](auto&) {
        REQUIRE(&c == &chief);
        REQUIRE(step >= 0);
        REQUIRE(!path.empty());
        REQUIRE(path.size() <= 4096);
      });
    } else if (kind < 21) {  // holdAt: the chief's, in sync training
      auto request = c.shard.holdAtRequest();
      const int64_t step = dice.coin(0.3) ? -1 : dice.step(now);
      request.setGlobalStep(step);
      outcome(
          request,
          [&](auto& reply) {
            REQUIRE(&c == &chief);
            REQUIRE(mode == "sync");
            REQUIRE(step >= -1);  // a step past the next holds at the next
            REQUIRE(reply.getGlobalStep() >= now);
          },
          true);
    } else if (kind < 22) {  // releaseHold
      outcome(c.shard.releaseHoldRequest(), [&](auto&) { REQUIRE(&c == &chief); });
    } else if (&c != &chief) {  // stop, from a connection that must not stop the job
      outcome(c.shard.stopRequest(), [&](auto&) { FAIL("a stop from worker " << c.worker); });
    }
  }

  markReady(globalStep());  // after an initialisation the dice left unmarked

  // Then bursts (async): pushes and pulls on all three connections at once,
  // each answered in its own time, so that the ps's pinned replies, copies
  // on write and waiting pulls interleave. Whatever the order, each push
  // the ps answers subtracts the same lr * g: the final read checks the sum.
  int burst_pushes = 0;
  for (int burst = 0; mode == "async" && burst < 40; ++burst) {
    INFO("burst " << burst);
    const int64_t now = globalStep();
    kj::Vector<kj::Promise<void>> in_flight;
    for (int k = 0; k < 24; ++k) {
      Connection& c = *dice.pick({&chief, &worker, &worker, &stranger});
      if (dice.coin(0.6)) {
        auto p = kj::heap<Push>(drawPush(c, now));
        auto sent = p->request.send();
        in_flight.add(sent.then(
                              [&, p = p.get()](auto reply) {
                                pushAnswered(*p, reply.getAccepted());
                                ++burst_pushes;
                              },
                              [&](kj::Exception&& e) {
                                REQUIRE(e.getType() != kj::Exception::Type::DISCONNECTED);
                                ++refused;
                              })
                          .attach(kj::mv(p)));
      } else {
        const ShardChunk& chunk = dice.chunk();
        auto request = c.shard.pullRequest();
        request.setMinStep(dice.coin(0.8) ? now : stepAfter(now));  // may wait: given up
        request.setOffset(uint64_t(chunk.shard_offset));
        request.setLength(uint64_t(chunk.size));
        request.setIntoSharedRegion(&c == &worker && dice.coin(0.5));
        in_flight.add(timer.timeoutAfter(100 * kj::MILLISECONDS, request.send())
                          .then([](auto) {}, [](kj::Exception&&) {}));
      }
    }
    kj::joinPromises(in_flight.releaseAsArray()).wait(io.waitScope);
  }
  if (mode == "async") CHECK(burst_pushes > 40);
  INFO(answered << " calls answered, " << refused << " refused, " << waited
                << " given up while they waited; " << pushes_applied << " pushes applied");
  // The dice hit both sides of the checks, not only one.
  CHECK(answered > calls / 20);
  CHECK(refused > calls / 5);
  if (mode == "async") CHECK(pushes_applied > calls / 50);
  if (mode == "async") CHECK(not_finite_refused > 0);

  // Still serving: a new connection is answered (worker 1 is connected
  // already, which the ps says as it refuses a second process for a task);
  // every chunk holds what the applied pushes made of it.
  Connection fresh(io, address, 1);
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] { hello(fresh, 1).send().wait(io.waitScope); })) {
    CHECK(e->getType() == kj::Exception::Type::OVERLOADED);
    CHECK_THAT(e->getDescription().cStr(), Catch::Contains("worker 1 is connected already"));
  } else {
    FAIL("a second connection said hello as worker 1 and was taken");
  }
  for (size_t i = 0; i < chunks.size(); ++i) {
    auto request = worker.shard.pullRequest();
    request.setOffset(uint64_t(chunks[i].shard_offset));
    request.setLength(uint64_t(chunks[i].size));
    auto reply = request.send().wait(io.waitScope);
    REQUIRE(reply.getData().size() == size_t(chunks[i].size) * sizeof(float));
    if (mode == "async")
      CHECK(oracle.holds(i, reinterpret_cast<const float*>(reply.getData().begin())));
  }
  // fashion_mlp's 1 MiB of parameters (18-20 MiB of peak RSS in all): the
  // ps held none of the lies' sizes, and no refused call left memory behind.
  const int64_t peak_kib = peakRssKib(ps.pid());
  INFO("ps peak RSS " << peak_kib << " KiB");
  CHECK(peak_kib > 0);
  CHECK(peak_kib < 64 * 1024);

  ps.signal(SIGTERM);
  INFO(ps.output());
  CHECK(ps.wait(30) == 0);
}

namespace {

// Runs the event loop, which serves the test's fake ps, for up to
// `seconds`, until `worker` exits (its exit code) or `done()` holds (-1
// while it runs).
int serveUntil(
    kj::AsyncIoContext& io, BackgroundTraind& worker, int seconds,
    const std::function<bool()>& done = [] { return false; }) {
  int code = -1;
  for (int i = 0; i < seconds * 10 && code < 0 && !done(); ++i) {
    io.provider->getTimer().afterDelay(100 * kj::MILLISECONDS).wait(io.waitScope);
    code = worker.wait(0);
  }
  return code;
}

enum class Lie {
  None,  // the honest answers alone
  ShortChunk,
  StepPast2To53,
  NegativeStatusStep,
  WorkerOutsideCluster,
  SyncStepNeverMoves
};

// A ps that answers like an honest one, ready at global step 0, but for one
// lie: a pull reply a float short, a global step no ps reports, a worker
// connected that the cluster has not, or a sync push answered at once with
// the step it was pushed at (an honest ps answers once the step is applied,
// or says it is stopping).
class LyingShard : public wire::ParameterShard::Server {
 public:
  explicit LyingShard(Lie lie) : lie_(lie) {}

 protected:
  kj::Promise<void> hello(HelloContext context) override {
    auto results = context.getResults();
    fillStatus(results.initStatus());
    results.setSharedRefusal("this ps lies");
    return kj::READY_NOW;
  }
  kj::Promise<void> status(StatusContext context) override {
    fillStatus(context.getResults().initStatus());
    return kj::READY_NOW;
  }
  kj::Promise<void> pull(PullContext context) override {
    const uint64_t floats = context.getParams().getLength();
    auto results = context.getResults();
    results.setGlobalStep(lie_ == Lie::StepPast2To53 ? kMaxGlobalStep + 1 : 0);
    results.initData((floats - (lie_ == Lie::ShortChunk ? 1 : 0)) * sizeof(float));
    return kj::READY_NOW;
  }
  kj::Promise<void> pushAndPull(PushAndPullContext context) override {
    const size_t bytes = context.getParams().getData().size();
    auto results = context.getResults();
    results.setAccepted(true);
    results.setGlobalStep(context.getParams().getStep());
    results.initData(bytes);
    return kj::READY_NOW;
  }

 private:
  void fillStatus(wire::ShardStatus::Builder status) const {
    status.setReady(true);
    status.setGlobalStep(lie_ == Lie::NegativeStatusStep ? -1 : 0);
    if (lie_ == Lie::WorkerOutsideCluster) status.initWorkers(1).set(0, 7);
  }

  Lie lie_;
};

}  // namespace

TEST_CASE("a worker stops with an error naming the ps when the ps lies") {
  const auto [lie, said] = GENERATE(table<Lie, std::string>(
      {{Lie::ShortChunk, "answered a pull of 235500 floats with 941996 bytes"},
       {Lie::StepPast2To53, "reported global step 9007199254740993, outside [0, 2^53]"},
       {Lie::NegativeStatusStep, "reported global step -1, outside [0, 2^53]"},
       {Lie::WorkerOutsideCluster, "reported worker 7 connected, in a cluster of 2"},
       {Lie::SyncStepNeverMoves,
        "answered global step 0 to a call that waits for step 1, without saying it is "
        "stopping"}}));
  INFO("the lie: " << said);
  const auto dir = freshTempDir("lying-ps");
  const auto cluster = writeCluster(
      dir, 1, 2, lie == Lie::SyncStepNeverMoves ? "  mode: sync\n" : "  mode: async\n");
  const std::string address = loadClusterSpec(cluster.string()).ps[0].toString();

  kj::AsyncIoContext io = kj::setupAsyncIo();
  capnp::TwoPartyServer server(kj::heap<LyingShard>(lie));
  kj::Own<kj::ConnectionReceiver> listener =
      io.provider->getNetwork().parseAddress(address).wait(io.waitScope)->listen();
  kj::Promise<void> serving = server.listen(*listener).eagerlyEvaluate(nullptr);

  // Worker 1: it waits for no chief, only for its ps to be ready.
  BackgroundTraind worker("--cluster " + cluster.string() + " --model " +
                              modelPath("fashion_mlp.yaml") +
                              " --job worker --task 1 --max-steps 10 --checkpoint-dir ''",
                          dir / "worker.log");
  const int code = serveUntil(io, worker, 60);
  const std::string output = worker.output();
  INFO(output);
  CHECK(code == 1);
  CHECK_THAT(output, Catch::Contains("ps 0 at " + address + ": " + said));
}

namespace {

// A ps's end of a slow link: every write goes out 4 KiB at a time, one
// piece every 100 ms (40 KiB/s), and the next write waits for it, as replies
// queue behind each other over a WAN link that many workers share.
class SlowWrites final : public ForwardingStream {
 public:
  SlowWrites(kj::Own<kj::AsyncIoStream> inner, kj::Timer& timer)
      : ForwardingStream(kj::mv(inner)), timer_(timer) {}

  kj::Promise<void> write(const void* buffer, size_t size) override {
    auto copy = kj::heapArray(static_cast<const kj::byte*>(buffer), size);
    auto sent = trickle(copy.asPtr());
    return sent.attach(kj::mv(copy));
  }
  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override {
    size_t size = 0;
    for (auto piece : pieces) size += piece.size();
    auto copy = kj::heapArray<kj::byte>(size);
    size_t at = 0;
    for (auto piece : pieces) {
      std::memcpy(copy.begin() + at, piece.begin(), piece.size());
      at += piece.size();
    }
    auto sent = trickle(copy.asPtr());
    return sent.attach(kj::mv(copy));
  }

 private:
  kj::Promise<void> trickle(kj::ArrayPtr<const kj::byte> bytes) {
    const size_t n = std::min(bytes.size(), size_t(4096));
    return inner_->write(bytes.begin(), n).then([this, bytes, n]() -> kj::Promise<void> {
      if (n == bytes.size()) return kj::READY_NOW;
      return timer_.afterDelay(100 * kj::MILLISECONDS).then([this, bytes, n] {
        return trickle(bytes.slice(n, bytes.size()));
      });
    });
  }

  kj::Timer& timer_;
};

}  // namespace

TEST_CASE("a worker takes a ps whose answers queue behind data on a slow link for a live one") {
  // fashion_mlp's 1 MiB pull takes 26 s at 40 KiB/s, and the status calls
  // that watch the ps are answered after it: unanswered for more than 20 s
  // (kPeerSilenceSeconds), while the pull's bytes keep coming.
  const auto dir = freshTempDir("slow-link-ps");
  const auto cluster = writeCluster(dir, 1, 2, "  mode: async\n");
  const std::string address = loadClusterSpec(cluster.string()).ps[0].toString();

  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::Timer& timer = io.provider->getTimer();
  kj::Own<kj::ConnectionReceiver> listener =
      io.provider->getNetwork().parseAddress(address).wait(io.waitScope)->listen();
  struct Served {
    kj::Own<kj::AsyncIoStream> stream;
    capnp::TwoPartyVatNetwork network;
    capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
    explicit Served(kj::Own<kj::AsyncIoStream> socket)
        : stream(kj::mv(socket)),
          network(*stream, capnp::rpc::twoparty::Side::SERVER),
          rpc(capnp::makeRpcServer(network, kj::heap<LyingShard>(Lie::None))) {}
  };
  std::vector<kj::Own<Served>> served;
  std::function<kj::Promise<void>()> acceptNext = [&]() {
    return listener->accept().then([&](kj::Own<kj::AsyncIoStream> socket) {
      served.push_back(kj::heap<Served>(kj::heap<SlowWrites>(kj::mv(socket), timer)));
      return acceptNext();
    });
  };
  kj::Promise<void> serving = acceptNext().eagerlyEvaluate(nullptr);

  BackgroundTraind worker("--cluster " + cluster.string() + " --model " +
                              modelPath("fashion_mlp.yaml") +
                              " --job worker --task 1 --max-steps 10 --checkpoint-dir ''",
                          dir / "worker.log");
  auto trained = [&] {
    return worker.output().find("worker 1 training fashion_mlp") != std::string::npos;
  };
  int code = serveUntil(io, worker, 60, trained);
  worker.signal(SIGTERM);
  if (code < 0) code = serveUntil(io, worker, 30);
  const std::string output = worker.output();
  INFO(output);
  CHECK(trained());  // its first pull came whole
  CHECK_THAT(output, !Catch::Contains("no answer to a status call"));
}

namespace {

// An honest ps behind a long round trip: each push+pull answered 500 ms
// after it came. It notes a call for a chunk that comes while another for
// the same chunk waits: two push+pulls of one worker in flight at once.
class DistantShard final : public LyingShard {
 public:
  explicit DistantShard(kj::Timer& timer) : LyingShard(Lie::None), timer_(timer) {}

  bool overlapped() const { return overlapped_; }

 protected:
  kj::Promise<void> pushAndPull(PushAndPullContext context) override {
    const uint64_t offset = context.getParams().getOffset();
    if (waiting_[offset]++ > 0) overlapped_ = true;
    return timer_.afterDelay(500 * kj::MILLISECONDS).then([this, context, offset]() mutable {
      --waiting_[offset];
      return LyingShard::pushAndPull(context);
    });
  }

 private:
  kj::Timer& timer_;
  std::map<uint64_t, int> waiting_;  // calls per chunk offset not answered yet
  bool overlapped_ = false;
};

}  // namespace

TEST_CASE(
    "an async worker with 2 steps in flight overlaps their push+pulls over a long round trip") {
  const auto dir = freshTempDir("distant-ps");
  const auto cluster = writeCluster(dir, 1, 2, "  mode: async\n");
  const std::string address = loadClusterSpec(cluster.string()).ps[0].toString();
  writeFile(dir / "mlp.yaml",
            replaceAll(readFile(modelPath("fashion_mlp.yaml")), "  log_every: 100\n",
                       "  log_every: 100\n  concurrent_steps: 2\n"));

  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::Timer& timer = io.provider->getTimer();
  auto shard = kj::heap<DistantShard>(timer);
  const DistantShard& distant = *shard;
  capnp::TwoPartyServer server(kj::mv(shard));
  kj::Own<kj::ConnectionReceiver> listener =
      io.provider->getNetwork().parseAddress(address).wait(io.waitScope)->listen();
  kj::Promise<void> serving = server.listen(*listener).eagerlyEvaluate(nullptr);

  // Worker 1: it waits for no chief. The fake ps's step stays 0: stopped below.
  BackgroundTraind worker("--cluster " + cluster.string() + " --model " +
                              (dir / "mlp.yaml").string() +
                              " --job worker --task 1 --max-steps 100 --threads 2 "
                              "--checkpoint-dir ''",
                          dir / "worker.log");
  int code = serveUntil(io, worker, 30, [&] { return distant.overlapped(); });
  const bool overlapped = distant.overlapped();
  // Stopped, it waits for the push+pulls in flight to end, then exits 0.
  worker.signal(SIGTERM);
  if (code < 0) code = serveUntil(io, worker, 30);
  const std::string output = worker.output();
  INFO(output);
  CHECK_THAT(output, Catch::Contains("2 steps in flight"));
  CHECK(overlapped);
  CHECK(code == 0);
  // The push+pulls in flight at the stop ended with their replies.
  CHECK_THAT(output, !Catch::Contains("gave up waiting for the ps shards' replies"));
}

namespace {

// Bootstrap, then `calls` pipelined status calls on it, each released
// (Finish) at once, as one run of bytes: a peer that keeps no answer open
// (rpc/open_answers_stream.h ends one that keeps more than 512), only
// never reads its replies.
std::string pipelinedStatusCalls(uint32_t calls) {
  std::string bytes;
  auto append = [&](capnp::MessageBuilder& message) {
    const kj::Array<capnp::word> flat = capnp::messageToFlatArray(message);
    bytes.append(reinterpret_cast<const char*>(flat.begin()), flat.size() * sizeof(capnp::word));
  };
  const uint16_t status_method = capnp::Schema::from<wire::ParameterShard>()
                                     .asInterface()
                                     .getMethodByName("status")
                                     .getIndex();
  capnp::MallocMessageBuilder bootstrap;
  bootstrap.initRoot<capnp::rpc::Message>().initBootstrap().setQuestionId(0);
  append(bootstrap);
  for (uint32_t question = 1; question <= calls; ++question) {
    capnp::MallocMessageBuilder message(64);
    auto call = message.initRoot<capnp::rpc::Message>().initCall();
    call.setQuestionId(question);
    call.initTarget().initPromisedAnswer().setQuestionId(0);
    call.setInterfaceId(capnp::typeId<wire::ParameterShard>());
    call.setMethodId(status_method);
    call.initParams().getContent().initAs<wire::ParameterShard::StatusParams>();
    append(message);
    capnp::MallocMessageBuilder finish(16);
    finish.initRoot<capnp::rpc::Message>().initFinish().setQuestionId(question);
    append(finish);
  }
  return bytes;
}

}  // namespace

TEST_CASE(
    "a peer that never reads its replies or idles on many connections leaves the ps "
    "its memory and its other peers") {
  MlpPsTask task(freshTempDir("unread"), "async");
  const std::string& address = task.address;
  const int port = loadClusterSpec(task.cluster.string()).ps[0].port;
  kj::AsyncIoContext io = kj::setupAsyncIo();
  auto answersStatus = [&] {
    io.waitScope.poll();  // the timer's clock moves on only when the loop looks at the OS
    Connection good(io, address, 1);
    return io.provider->getTimer()
        .timeoutAfter(10 * kj::SECONDS, good.shard.statusRequest().send())
        .wait(io.waitScope)
        .hasStatus();
  };
  REQUIRE(answersStatus());

  // 200k calls whose replies (each in a message of its own) took the ps to
  // 1.5 GB before it stopped reading from a peer with a backlog of them.
  const std::string calls = pipelinedStatusCalls(200000);
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  const int small = 4096;  // it never reads: let its window close early
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  sockaddr_in addr = loopbackAddress(port);
  pollfd writable{fd, POLLOUT, 0};
  REQUIRE(
      (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 || errno == EINPROGRESS));
  REQUIRE(poll(&writable, 1, 10000) == 1);
  size_t sent = 0;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  while (sent < calls.size() && std::chrono::steady_clock::now() < give_up) {
    const ssize_t n = send(fd, calls.data() + sent, calls.size() - sent, MSG_NOSIGNAL);
    if (n > 0)
      sent += size_t(n);
    else if (n < 0 && errno == EAGAIN)
      poll(&writable, 1, 10);
    else
      break;
  }
  INFO("the peer got " << sent << " of " << calls.size() << " bytes of calls through");
  CHECK(sent < calls.size());  // the ps stopped reading it
  CHECK(answersStatus());
  const int64_t peak_kib = peakRssKib(task.ps.pid());
  INFO("ps peak RSS " << peak_kib << " KiB");
  CHECK(peak_kib < 128 * 1024);
  close(fd);

  // Connections that idle without a hello cannot lock the workers out: with
  // the ps full, each new connection ends the oldest of them, telling it why.
  const size_t most = mostConnectionsFor(2);
  std::vector<int> idle;
  auto openIdle = [&](size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const int s = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in to = loopbackAddress(port);
      REQUIRE(connect(s, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0);
      idle.push_back(s);
    }
  };
  // Idle connections the ps has ended: it wrote its reason (an Abort) and closed.
  auto endedByPs = [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    size_t ended = 0;
    for (int s : idle) {
      pollfd p{s, POLLIN, 0};
      if (poll(&p, 1, 0) == 1) ++ended;
    }
    return ended;
  };
  openIdle(most + 8);
  const size_t ended = endedByPs();
  CHECK(ended >= 8);
  // The unread peer's connection and the last good one may not have been
  // counted out yet.
  CHECK(ended <= 8 + 2);
  // A worker gets in, says hello, and stays while more idle ones come.
  Connection worker(io, address, 1);
  REQUIRE(io.provider->getTimer()
              .timeoutAfter(10 * kj::SECONDS, task.hello(worker.shard, 1).send())
              .wait(io.waitScope)
              .hasStatus());
  openIdle(most);
  CHECK(endedByPs() >= ended + most);
  io.waitScope.poll();
  CHECK(io.provider->getTimer()
            .timeoutAfter(10 * kj::SECONDS, worker.shard.statusRequest().send())
            .wait(io.waitScope)
            .hasStatus());
  CHECK(answersStatus());
  for (int s : idle) close(s);

  task.ps.signal(SIGTERM);
  INFO(task.ps.output());
  CHECK(task.ps.wait(30) == 0);
  CHECK_THAT(task.ps.output(), Catch::Contains("which never said hello, for one from"));
}
