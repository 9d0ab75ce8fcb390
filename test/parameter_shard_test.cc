// The ps shard's rules without the network: sync aggregation, stale drops,
// protocol checks, bounded-staleness clocks, copy-on-write chunks, and what
// a sync ps says of a step that stands still.
#include "core/parameter_shard.h"

#include <fmt/format.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>

#include "daemon/step_stall_report.h"

using namespace traind;

namespace {

// A model of one dense layer 2 -> 1 (kernel [2, 1], bias [1]); SGD 0.5.
struct OneShard {
  ModelSpec spec;
  LayerGraph graph;
  ClusterSpec cluster;

  explicit OneShard(TrainingMode mode, int workers, int aggregate, int64_t max_staleness = 0) {
    spec.path = "m.yaml";
    spec.input = {2};
    spec.loss = LossKind::MeanSquaredError;
    spec.optimizer.kind = OptimizerSpec::Kind::Sgd;
    spec.learning_rate.initial = 0.5f;
    LayerSpec dense;
    dense.name = "d";
    dense.units = 1;
    spec.layers = {dense};
    graph = buildLayerGraph(spec);
    cluster.ps = {HostPort{"127.0.0.1", 1, {}}};
    for (int i = 0; i < workers; ++i)
      cluster.worker.push_back(HostPort{"127.0.0.1", uint16_t(2 + i), {}});
    cluster.mode = mode;
    cluster.replicas_to_aggregate = aggregate;
    cluster.total_num_replicas = workers;
    cluster.max_staleness = max_staleness;
  }
};

// Chunks of at most 2 floats: the kernel and the bias are chunks of their own.
constexpr int64_t kSmallChunks = 2;

std::vector<float> read(const ParameterShard& shard, int64_t offset, size_t n) {
  std::vector<float> out(n);
  shard.read(0, offset, out);
  return out;
}

}  // namespace

TEST_CASE("sync: the workers a step still lacks a gradient from, chunk by chunk") {
  OneShard s(TrainingMode::Sync, 3, 2);
  ParameterShard shard(s.spec, s.graph, s.cluster, 0, kSmallChunks);
  REQUIRE(shard.chunks().size() == 2);  // kernel, bias
  const ShardChunk kernel = shard.chunks()[0], bias = shard.chunks()[1];
  // The chief's step is bounded, so that no step count nears int64 overflow.
  CHECK_THROWS_WITH(shard.markReady(-1), Catch::Contains("global step -1 is outside [0, 2^53]"));
  CHECK_THROWS_WITH(shard.markReady(kMaxGlobalStep + 1), Catch::Contains("is outside [0, 2^53]"));
  CHECK(!shard.ready());
  shard.markReady(0);
  const std::vector<float> two{1.0f, 1.0f}, one{1.0f};
  using Workers = std::vector<uint32_t>;
  CHECK(shard.workersStepWaitsFor() == Workers{0, 1, 2});
  shard.push(1, 0, kernel.shard_offset, two);  // worker 1: the kernel only
  CHECK(shard.workersStepWaitsFor() == Workers{0, 1, 2});  // 1 still owes the bias
  shard.push(1, 0, bias.shard_offset, one);
  CHECK(shard.workersStepWaitsFor() == Workers{0, 2});
  shard.push(2, 0, kernel.shard_offset, two);  // the kernel has its 2 gradients
  CHECK(shard.workersStepWaitsFor() == Workers{0, 2});  // the bias lacks one, from 0 or 2
  shard.push(0, 0, bias.shard_offset, one);  // step 1: nobody has pushed for it
  CHECK(shard.globalStep() == 1);
  CHECK(shard.workersStepWaitsFor() == Workers{0, 1, 2});

  OneShard a(TrainingMode::Async, 2, 1);
  CHECK(ParameterShard(a.spec, a.graph, a.cluster, 0).workersStepWaitsFor().empty());
}

TEST_CASE("sync: a standing step names many workers as ranges") {
  OneShard s(TrainingMode::Sync, 300, 300);
  ParameterShard shard(s.spec, s.graph, s.cluster, 0, kSmallChunks);
  StepStallReport report(shard, s.cluster);
  shard.markReady(0);
  for (uint32_t w : {0u, 1u, 5u}) shard.workerJoined(w);
  for (const ShardChunk& chunk : shard.chunks())
    shard.push(0, 0, chunk.shard_offset, std::vector<float>(size_t(chunk.size), 1.0f));
  CHECK_FALSE(report.check(1.0));
  const auto line = report.check(16.0);
  REQUIRE(line);
  CHECK_THAT(line->text, Catch::Contains("from workers 1 and 5 (connected: ") &&
                             Catch::Contains("and workers 2..4 and 6..299 (not connected)"));
}

TEST_CASE("a shard the chief has not initialised is reported after a minute, then every 10") {
  OneShard s(TrainingMode::Sync, 3, 3);
  ParameterShard shard(s.spec, s.graph, s.cluster, 0, kSmallChunks);
  StepStallReport report(shard, s.cluster);
  CHECK_FALSE(report.check(5.0));
  CHECK_FALSE(report.check(64.0));
  auto line = report.check(65.0);
  REQUIRE(line);
  CHECK_FALSE(line->suspects);
  CHECK(line->text ==
        "this ps has waited 60 s for the chief (worker 0) to initialise its shard: no worker is "
        "connected (not started yet, or they stopped: a worker that cannot run the spec or flags "
        "it was given exits at once, and its log says why)");
  shard.workerJoined(1);
  shard.workerJoined(2);
  CHECK_FALSE(report.check(664.0));
  line = report.check(665.0);
  REQUIRE(line);
  CHECK_THAT(line->text, Catch::EndsWith("waited 660 s for the chief (worker 0) to initialise its "
                                         "shard: workers 1 and 2 connected, the chief not (not "
                                         "started yet, or it stopped: its log says why)"));
  shard.workerJoined(0);
  line = report.check(1265.0);
  REQUIRE(line);
  CHECK_THAT(line->text, Catch::EndsWith(": it is connected, and restoring a checkpoint, "
                                         "initialising the parameters or waiting for another ps"));
  // Initialised: steps are reported as before; not again until it waits anew.
  shard.markReady(0);
  CHECK_FALSE(report.check(1266.0));
  CHECK(report.check(1281.0));  // global step 0 has stood 15 s
}

TEST_CASE("sync: a standing step is reported after 15 s, naming whom it waits for") {
  OneShard s(TrainingMode::Sync, 3, 2);  // a backup worker: any of the missing would do
  ParameterShard shard(s.spec, s.graph, s.cluster, 0, kSmallChunks);
  const ShardChunk kernel = shard.chunks()[0], bias = shard.chunks()[1];
  const std::vector<float> two{1.0f, 1.0f}, one{1.0f};
  StepStallReport report(shard, s.cluster);
  CHECK_FALSE(report.check(0.0));  // not initialised yet: nothing to say for a minute
  shard.markReady(0);
  shard.workerJoined(0);
  shard.workerJoined(1);
  CHECK_FALSE(report.check(1.0));  // step 0 begins to stand
  // Nobody has pushed step 0 yet: no suspects.
  auto line = report.check(16.0);
  REQUIRE(line);
  CHECK_FALSE(line->suspects);
  CHECK_THAT(line->text, Catch::Contains("global step 0 has waited 15 s: no worker has pushed"));
  CHECK_FALSE(report.check(17.0));  // the next report comes 15 s later
  CHECK(report.standingSeconds() == 16.0);
  shard.push(1, 0, kernel.shard_offset, two);
  shard.push(1, 0, bias.shard_offset, one);
  line = report.check(31.0);
  REQUIRE(line);
  CHECK(line->suspects);
  CHECK(line->text ==
        "global step 0 has waited 30 s for gradients from any of worker 0 (connected: stopped, "
        "hung or slow; worker 0 evaluating or checkpointing?) and worker 2 (not connected); each "
        "chunk aggregates 2 of the 3 workers' gradients");
  // Over two ps tasks, worker 0 may wait for the other one.
  ClusterSpec two_ps = s.cluster;
  two_ps.ps.push_back(two_ps.ps.front());
  StepStallReport report_of_two(shard, two_ps);
  REQUIRE_FALSE(report_of_two.check(31.0));
  line = report_of_two.check(46.0);
  REQUIRE(line);
  CHECK_THAT(line->text, Catch::Contains("any of worker 0 (connected: stopped, hung or slow, or "
                                         "waiting for another ps; worker 0 evaluating or "
                                         "checkpointing?) and worker 2 (not connected)"));
  // Held by the chief's checkpoint read with a sum complete, the step
  // waits for nobody else.
  shard.holdAt(0);
  shard.push(2, 0, kernel.shard_offset, two);
  line = report.check(46.0);
  REQUIRE(line);
  CHECK_FALSE(line->suspects);
  CHECK_THAT(line->text, Catch::Contains("global step 0 has waited 45 s: the chief holds the "
                                         "shard at it while it reads the shards"));
  shard.releaseHold();
  // The step completes 2 s later: the clock starts again, and a step that
  // took 40 s makes the next report wait 10 times as long.
  shard.push(2, 0, bias.shard_offset, one);
  REQUIRE(shard.globalStep() == 1);
  CHECK_FALSE(report.check(48.0));
  CHECK(report.standingSeconds() == 0.0);  // a new step
  CHECK_FALSE(report.check(48.0 + 469.0));
  CHECK(report.check(48.0 + 470.0));

  OneShard a(TrainingMode::Async, 2, 1);
  ParameterShard async_shard(a.spec, a.graph, a.cluster, 0);
  async_shard.markReady(0);
  StepStallReport async_report(async_shard, a.cluster);
  CHECK_FALSE(async_report.check(0.0));
  // Async steps wait for nobody without max_staleness: a standing step
  // means that nobody pushes, and names no one.
  const auto async_line = async_report.check(1000.0);
  REQUIRE(async_line);
  CHECK_FALSE(async_line->suspects);
  CHECK_THAT(async_line->text, Catch::Contains("no worker is connected to this ps"));
  CHECK(async_report.standingSeconds() == 1000.0);
  async_shard.workerJoined(1);  // connected, pushing nothing
  const auto waiting = async_report.check(2000.0);
  REQUIRE(waiting);
  CHECK_THAT(waiting->text, Catch::Contains("no worker has pushed"));
}

TEST_CASE("the longest recent step: the longest a step was seen standing, over a minute") {
  OneShard s(TrainingMode::Sync, 1, 1);
  ParameterShard shard(s.spec, s.graph, s.cluster, 0, kSmallChunks);
  const ShardChunk kernel = shard.chunks()[0], bias = shard.chunks()[1];
  const std::vector<float> two{1.0f, 1.0f}, one{1.0f};
  auto step = [&] {
    shard.push(0, shard.globalStep(), kernel.shard_offset, two);
    shard.push(0, shard.globalStep(), bias.shard_offset, one);
  };
  StepStallReport report(shard, s.cluster);
  shard.markReady(0);
  shard.workerJoined(0);
  CHECK_FALSE(report.check(0.0));
  for (int i = 0; i < 100; ++i) step();
  CHECK_FALSE(report.check(1.0));  // steps of milliseconds: none seen standing
  CHECK(report.longestRecentStepSeconds() == 0.0);
  for (double t = 2.0; t <= 8.0; t += 1.0) CHECK_FALSE(report.check(t));  // one stands 7 s
  CHECK(report.longestRecentStepSeconds() == 0.0);  // still standing: not one of them yet
  step();
  step();
  CHECK_FALSE(report.check(9.0));
  CHECK(report.longestRecentStepSeconds() == 7.0);
  CHECK_FALSE(report.check(10.0));
  step();
  CHECK_FALSE(report.check(11.0));  // one of 2 s or less, seen standing 1 s
  CHECK(report.longestRecentStepSeconds() == 7.0);
  step();
  CHECK_FALSE(report.check(69.5));  // the 7 s step was applied over a minute ago
  CHECK(report.longestRecentStepSeconds() == 1.0);
}

TEST_CASE("sync: the first replicas_to_aggregate gradients of a step are averaged once") {
  OneShard s(TrainingMode::Sync, 3, 2);
  ParameterShard shard(s.spec, s.graph, s.cluster, 0, kSmallChunks);
  REQUIRE(shard.chunks().size() == 2);  // kernel, bias
  const ShardChunk kernel = shard.chunks()[0];
  REQUIRE(kernel.size == 2);
  shard.initialize(0, kernel.shard_offset, std::vector<float>{1.0f, 2.0f});
  shard.markReady(0);

  const std::vector<float> g0{1.0f, 0.0f}, g1{3.0f, 2.0f}, g2{100.0f, 100.0f};
  CHECK(shard.push(0, 0, kernel.shard_offset, g0));
  CHECK(read(shard, kernel.shard_offset, 2) == std::vector<float>{1.0f, 2.0f});
  CHECK(shard.push(1, 0, kernel.shard_offset, g1));
  // mean (2, 1), lr 0.5
  CHECK(read(shard, kernel.shard_offset, 2) == std::vector<float>{0.0f, 1.5f});
  CHECK_FALSE(shard.push(2, 0, kernel.shard_offset, g2));  // a third gradient of step 0: stale
  CHECK(shard.staleDropped() == 1);
  CHECK(shard.globalStep() == 0);  // the bias chunk is still open
  // The applied kernel holds its step-1 values (a reply may send them now).
  CHECK(shard.chunkStep(0) == 1);
  CHECK(shard.chunkStep(1) == 0);
  const std::vector<float> b{1.0f};
  CHECK(shard.push(0, 0, shard.chunks()[1].shard_offset, b));
  CHECK(shard.push(2, 0, shard.chunks()[1].shard_offset, b));
  CHECK(shard.globalStep() == 1);
  CHECK(shard.chunkStep(0) == 1);
  CHECK(shard.chunkStep(1) == 1);
  CHECK_FALSE(shard.push(1, 0, kernel.shard_offset, g1));  // an old step: stale
  // The next step sums afresh in a reused buffer: mean (2, 2.5), lr 0.5.
  const std::vector<float> g3{1.0f, 3.0f};
  CHECK(shard.push(2, 1, kernel.shard_offset, g1));
  CHECK(shard.push(0, 1, kernel.shard_offset, g3));
  CHECK(read(shard, kernel.shard_offset, 2) == std::vector<float>{-1.0f, 0.25f});
  CHECK(shard.chunkStep(0) == 2);
  CHECK(shard.globalStep() == 1);
}

TEST_CASE(
    "sync: a hold keeps every chunk at its step, a later step or lifting it applies the rest") {
  OneShard s(TrainingMode::Sync, 3, 2);
  ParameterShard shard(s.spec, s.graph, s.cluster, 0, kSmallChunks);
  REQUIRE(shard.chunks().size() == 2);  // kernel, bias
  const ShardChunk kernel = shard.chunks()[0], bias = shard.chunks()[1];
  CHECK_THROWS_WITH(shard.holdAt(0), Catch::Contains("not initialised"));
  shard.initialize(0, kernel.shard_offset, std::vector<float>{1.0f, 2.0f});
  shard.markReady(0);
  const std::vector<float> g0{1.0f, 0.0f}, g1{3.0f, 2.0f}, b{1.0f};

  // Step 0's kernel is applied: the highest step a chunk holds is 1.
  shard.push(0, 0, kernel.shard_offset, g0);
  shard.push(1, 0, kernel.shard_offset, g1);
  CHECK(shard.highestChunkStep() == 1);
  CHECK_THROWS_WITH(shard.holdAt(0), Catch::Contains("a chunk holds step 1 already"));
  // Held at 1, the bias may still come to step 1; nothing goes past it.
  CHECK_FALSE(shard.holdAt(1));
  CHECK(shard.heldAt() == 1);
  shard.push(0, 0, bias.shard_offset, b);
  shard.push(2, 0, bias.shard_offset, b);
  CHECK(shard.globalStep() == 1);
  shard.push(2, 1, kernel.shard_offset, g1);
  shard.push(0, 1, kernel.shard_offset, g0);  // complete: kept, not applied
  CHECK(shard.chunkStep(0) == 1);
  CHECK(read(shard, kernel.shard_offset, 2) == std::vector<float>{0.0f, 1.5f});
  CHECK(shard.workersStepWaitsFor() == std::vector<uint32_t>{0, 1, 2});  // the bias lacks all
  CHECK_FALSE(shard.push(1, 1, kernel.shard_offset, g1));  // a third gradient: stale, as ever
  // Lifted, the kept sum is applied as it would have been: mean (2, 1), lr 0.5.
  CHECK(shard.releaseHold());
  CHECK_FALSE(shard.heldAt());
  CHECK(read(shard, kernel.shard_offset, 2) == std::vector<float>{-1.0f, 1.0f});
  CHECK(shard.chunkStep(0) == 2);
  CHECK_FALSE(shard.releaseHold());  // nothing held: no error

  // A hold raised a step applies what the lower one kept; the last chunk
  // applied advances the global step.
  CHECK_FALSE(shard.holdAt(2));
  shard.push(0, 1, bias.shard_offset, b);
  shard.push(1, 1, bias.shard_offset, b);
  CHECK(shard.globalStep() == 2);
  shard.push(0, 2, kernel.shard_offset, g0);
  shard.push(1, 2, kernel.shard_offset, g1);
  shard.push(0, 2, bias.shard_offset, b);
  shard.push(1, 2, bias.shard_offset, b);
  CHECK(shard.globalStep() == 2);
  CHECK(shard.highestChunkStep() == 2);
  CHECK(shard.holdAt(3));
  CHECK(shard.globalStep() == 3);
  CHECK(read(shard, kernel.shard_offset, 2) == std::vector<float>{-2.0f, 0.5f});

  // A restore starts afresh: no hold.
  shard.markReady(5);
  CHECK_FALSE(shard.heldAt());

  OneShard a(TrainingMode::Async, 2, 1);
  ParameterShard async(a.spec, a.graph, a.cluster, 0);
  async.markReady(0);
  CHECK_THROWS_WITH(async.holdAt(0), Catch::Contains("async training"));
}

TEST_CASE("a push that applies its chunk also writes the new values out, versions count changes") {
  std::vector<float> out{-9.0f, -9.0f};
  SECTION("sync: the step's last gradient applies, and only it writes") {
    OneShard s(TrainingMode::Sync, 2, 2);
    ParameterShard shard(s.spec, s.graph, s.cluster, 0, kSmallChunks);
    const ShardChunk& kernel = shard.chunks()[0];
    shard.initialize(0, kernel.shard_offset, std::vector<float>{1.0f, 2.0f});
    CHECK(shard.chunkChanges(0) == 1);
    shard.markReady(0);
    CHECK(shard.push(0, 0, kernel.shard_offset, std::vector<float>{1.0f, 0.0f}, out.data()));
    CHECK(out == std::vector<float>{-9.0f, -9.0f});  // summed, not applied
    CHECK(shard.chunkChanges(0) == 1);
    CHECK(shard.push(1, 0, kernel.shard_offset, std::vector<float>{3.0f, 2.0f}, out.data()));
    CHECK(shard.chunkChanges(0) == 2);
    CHECK(out == read(shard, kernel.shard_offset, 2));
    CHECK(out == std::vector<float>{0.0f, 1.5f});
    CHECK(shard.chunkChanges(1) == 0);  // the bias chunk: untouched
    // A stale push (a third gradient of the applied step) writes nothing.
    std::vector<float> untouched{-9.0f, -9.0f};
    CHECK_FALSE(shard.push(0, 0, kernel.shard_offset, std::vector<float>{5.0f, 5.0f},
                           untouched.data()));
    CHECK(untouched == std::vector<float>{-9.0f, -9.0f});
    CHECK(shard.chunkChanges(0) == 2);
  }
  SECTION("async: every push applies and writes") {
    OneShard s(TrainingMode::Async, 2, 2);
    ParameterShard shard(s.spec, s.graph, s.cluster, 0, kSmallChunks);
    const ShardChunk& kernel = shard.chunks()[0];
    shard.markReady(0);
    const std::shared_ptr<const float> pinned = shard.pinChunk(0);  // a TCP reply in flight
    CHECK(shard.push(0, 0, kernel.shard_offset, std::vector<float>{2.0f, 4.0f}, out.data()));
    CHECK(out == std::vector<float>{-1.0f, -2.0f});
    CHECK(shard.push(1, 0, kernel.shard_offset, std::vector<float>{2.0f, 2.0f}));
    CHECK(shard.chunkChanges(0) == 2);
    CHECK(read(shard, kernel.shard_offset, 2) == std::vector<float>{-2.0f, -3.0f});
    CHECK(out == std::vector<float>{-1.0f, -2.0f});  // written by its own push only
    CHECK(pinned.get()[0] == 0.0f);
  }
}

TEST_CASE("a shard of 4 MiB or more writes its values out around the caches: the same values") {
  OneShard small(TrainingMode::Async, 1, 1);
  CHECK_FALSE(ParameterShard(small.spec, small.graph, small.cluster, 0).copiesAroundCaches());
  OneShard s(TrainingMode::Async, 1, 1);
  s.spec.input = {1024};
  s.spec.layers[0].units = 1024;
  s.graph = buildLayerGraph(s.spec);  // a 4 MiB kernel and a bias
  ParameterShard shard(s.spec, s.graph, s.cluster, 0);
  REQUIRE(shard.copiesAroundCaches());
  REQUIRE(shard.chunks().size() > 1);
  shard.markReady(0);
  for (size_t chunk : {size_t(0), shard.chunks().size() - 1}) {
    const ShardChunk& c = shard.chunks()[chunk];
    std::vector<float> gradient(size_t(c.size)), pushed(size_t(c.size)), copied(size_t(c.size));
    for (size_t i = 0; i < gradient.size(); ++i) gradient[i] = float(i % 13) - 6.0f;
    REQUIRE(shard.push(0, 0, c.shard_offset, gradient, pushed.data()));
    shard.copyChunkOut(chunk, copied.data());
    const std::vector<float> values = read(shard, c.shard_offset, size_t(c.size));
    CHECK(pushed == values);
    CHECK(copied == values);
    CHECK(values[7] == -0.5f);  // 0 - 0.5 * (7 % 13 - 6): the update happened
  }
}

namespace {

// Lowers this process's address space to what it uses now and a little
// more, so that the next big allocation fails; restored as it goes.
class AddressSpaceLimit {
 public:
  AddressSpaceLimit() {
    getrlimit(RLIMIT_AS, &old_);
    malloc_trim(0);  // no free heap to take the next allocation from
    long pages = 0;
    if (FILE* statm = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(statm, "%ld", &pages) != 1) pages = 0;
      std::fclose(statm);
    }
    const rlimit lowered{rlim_t(pages) * rlim_t(sysconf(_SC_PAGESIZE)) + (1 << 20), old_.rlim_max};
    setrlimit(RLIMIT_AS, &lowered);
  }
  ~AddressSpaceLimit() { setrlimit(RLIMIT_AS, &old_); }

 private:
  rlimit old_{};
};

// In a child process (its address space is lowered): what a sync push that
// runs out of memory leaves. 0 when the push changed nothing and counts
// when pushed again; else which check failed.
int outOfMemoryPushes(ParameterShard& shard, const ShardChunk& half, const std::vector<float>& g,
                      float expected_first) {
  // The chunk's first gradient of the step takes a sum buffer of 8 MiB.
  try {
    AddressSpaceLimit limit;
    shard.push(0, 0, half.shard_offset, g);
    return 10;  // the limit did not bite: no test
  } catch (const std::bad_alloc&) {
  }
  // Counted without its gradient in the sum, it would be refused as a
  // repeat within the connection (a ProtocolError: exit 20) or dropped.
  if (!shard.push(0, 0, half.shard_offset, g)) return 11;
  // The gradient that completes the sum, while a reply holds the chunk: its
  // update needs a copy of 8 MiB.
  std::shared_ptr<const float> held = shard.pinChunk(0);
  try {
    AddressSpaceLimit limit;
    shard.push(1, 0, half.shard_offset, g);
    return 12;
  } catch (const std::bad_alloc&) {
  }
  if (shard.chunkStep(0) != 0) return 13;  // applied, or so it said
  if (!shard.push(1, 0, half.shard_offset, g)) return 14;
  if (shard.chunkStep(0) != 1) return 15;
  std::vector<float> first(1);
  shard.read(0, half.shard_offset, first);
  // The mean of two equal gradients, once: its sum was not scaled twice.
  if (first[0] != expected_first) return 16;
  if (held.get()[0] != 1.0f) return 17;  // the reply's values stayed
  return 0;
}

}  // namespace

// No sanitizer build: they reserve address space, which the limit is of.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
TEST_CASE("sync: a push that runs out of memory changes nothing, and counts when pushed again") {
  OneShard s(TrainingMode::Sync, 2, 2);
  s.spec.input = {4096};
  s.spec.layers[0].units = 1024;  // a kernel of 16 MiB: two chunks of 8 MiB
  s.graph = buildLayerGraph(s.spec);
  ParameterShard shard(s.spec, s.graph, s.cluster, 0, 2048 * 1024);
  const ShardChunk half = shard.chunks()[0];
  REQUIRE(half.size == 2048 * 1024);
  shard.initialize(0, half.shard_offset, std::vector<float>(size_t(half.size), 1.0f));
  shard.markReady(0);
  const std::vector<float> g(size_t(half.size), 2.0f);

  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    int code = 20;  // a refusal: the shard took the failed push for one made
    try {
      code = outOfMemoryPushes(shard, half, g, 1.0f - 0.5f * 2.0f);
    } catch (...) {
    }
    _exit(code);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
#endif

TEST_CASE("a run of chunks: consecutive from its offset, their floats in all, checkPush changes nothing") {
  OneShard s(TrainingMode::Sync, 2, 2);
  ParameterShard shard(s.spec, s.graph, s.cluster, 0, kSmallChunks);
  REQUIRE(shard.chunks().size() == 2);  // kernel (2 floats), bias (1)
  const int64_t kernel = shard.chunks()[0].shard_offset, bias = shard.chunks()[1].shard_offset;
  const ChunkRun both = shard.chunkRun(kernel, 3, 2);
  CHECK(both.first == 0);
  CHECK(both.count == 2);
  CHECK(shard.chunkRun(bias, 1, 1).first == 1);
  CHECK_THROWS_WITH(shard.chunkRun(kernel, 2, 2), Catch::Contains("the 2 chunks from offset"));
  CHECK_THROWS_WITH(shard.chunkRun(kernel, 3, 3), Catch::Contains("the shard has 2 from there"));
  CHECK_THROWS_WITH(shard.chunkRun(bias, 2, 2), Catch::Contains("the shard has 1 from there"));
  CHECK_THROWS_WITH(shard.chunkRun(kernel, 0, 0), Catch::Contains("0 chunks"));
  CHECK_THROWS_WITH(shard.chunkRun(kernel + 1, 1, 1), Catch::Contains("no chunk starts"));

  shard.markReady(0);
  const std::vector<float> k{1.0f, 1.0f}, b{1.0f};
  CHECK_NOTHROW(shard.checkPush(0, 0, 0, k));
  CHECK(shard.push(0, 0, kernel, k));
  // A second gradient of the step from the same worker: refused, and the
  // check leaves the partial sum as it was.
  CHECK_THROWS_WITH(shard.checkPush(0, 0, 0, k), Catch::Contains("twice"));
  CHECK_NOTHROW(shard.checkPush(0, 0, 1, b));
  CHECK_THROWS_WITH(shard.checkPush(0, 1, 1, b), Catch::Contains("only 0"));
  CHECK_THROWS_WITH(shard.checkPush(5, 0, 1, b), Catch::Contains("no worker 5"));
  CHECK_THROWS_WITH(shard.checkPush(0, 0, 1, k), Catch::Contains("a gradient of 2 floats"));
  CHECK(shard.push(1, 0, kernel, std::vector<float>{3.0f, 3.0f}));
  CHECK(read(shard, kernel, 2) == std::vector<float>{-1.0f, -1.0f});  // mean 2, lr 0.5
  // Once the chunk has its gradients, a late one is stale (dropped), not refused.
  CHECK_NOTHROW(shard.checkPush(0, 0, 0, k));
}

TEST_CASE("a gradient that is not finite is refused, naming the variable, and changes nothing") {
  for (TrainingMode mode : {TrainingMode::Async, TrainingMode::Sync}) {
    CAPTURE(mode == TrainingMode::Sync);
    OneShard s(mode, 2, 2);
    s.spec.input = {3000};
    s.spec.layers[0].units = 3;
    s.graph = buildLayerGraph(s.spec);  // a kernel of 9000 floats and a bias of 3: 3 chunks
    ParameterShard shard(s.spec, s.graph, s.cluster, 0, 4000);
    shard.markReady(0);
    REQUIRE(shard.chunks().size() == 3);
    const ShardChunk& second = shard.chunks()[1];  // the kernel's floats 4000-7999
    const std::vector<float> before = read(shard, second.shard_offset, size_t(second.size));
    for (float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
          -std::numeric_limits<float>::infinity()}) {
      std::vector<float> gradient(size_t(second.size), 1.0f);
      gradient[49] = bad;
      CHECK_THROWS_WITH(
          shard.push(1, 0, second.shard_offset, gradient),
          Catch::Contains("worker 1 pushed a gradient of step 0 that is not finite: ") &&
              Catch::Contains(std::string(std::isnan(bad) ? "NaN" : "infinite") +
                              " at element 4049 of 'd/kernel'"));
    }
    CHECK(read(shard, second.shard_offset, size_t(second.size)) == before);
    // What the worker that pushed it reads as its model's divergence (exit 3).
    try {
      std::vector<float> gradient(size_t(second.size), 1.0f);
      gradient[0] = std::numeric_limits<float>::quiet_NaN();
      shard.push(1, 0, second.shard_offset, gradient);
      FAIL("a NaN was taken");
    } catch (const ProtocolError& e) {
      CHECK(isGradientNotFinite("remote exception: " + std::string(e.what())));
    }
    CHECK_FALSE(isGradientNotFinite("ps 0: worker 1 pushed a gradient of step 3 for no chunk"));
    CHECK(shard.globalStep() == 0);
    CHECK(shard.chunkChanges(1) == 0);
    // The worker's next, finite gradient of the step counts (no "twice").
    CHECK(shard.push(1, 0, second.shard_offset, std::vector<float>(size_t(second.size), 1.0f)));
    // The last chunk: the kernel's last 1000 floats, then the bias after a gap.
    const ShardChunk& last = shard.chunks()[2];
    REQUIRE(last.pieces == 2);
    std::vector<float> gradient(size_t(last.size), 1.0f);
    const int64_t bias_at = shard.plan().pieces[1].shard_offset - last.shard_offset;
    for (int64_t gap = 1000; gap < bias_at; ++gap)
      gradient[size_t(gap)] = std::numeric_limits<float>::quiet_NaN();  // nothing's: not read
    gradient[size_t(bias_at + 2)] = std::numeric_limits<float>::infinity();
    CHECK_THROWS_WITH(shard.push(0, 0, last.shard_offset, gradient),
                      Catch::Contains("infinite at element 2 of 'd/bias'"));
    // Floats at the largest finite magnitude are finite.
    std::vector<float> largest(size_t(last.size), std::numeric_limits<float>::max());
    CHECK_NOTHROW(shard.checkPush(0, shard.globalStep(), 2, largest));
  }
}

TEST_CASE("a float that is not finite in a gradient's last block leaves the chunk as it was") {
  OneShard s(TrainingMode::Async, 2, 2);
  s.spec.input = {3000};
  s.spec.layers[0].units = 3;
  s.graph = buildLayerGraph(s.spec);
  ParameterShard shard(s.spec, s.graph, s.cluster, 0);
  shard.markReady(0);
  const ShardChunk& c = shard.chunks()[0];  // the kernel's 9000 floats and the bias
  const std::vector<float> before = read(shard, c.shard_offset, size_t(c.size));
  std::vector<float> gradient(size_t(c.size), 2.0f);
  gradient[8999] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH(shard.push(1, 0, c.shard_offset, gradient),
                    Catch::Contains("NaN at element 8999 of 'd/kernel'"));
  CHECK(read(shard, c.shard_offset, size_t(c.size)) == before);
  CHECK(shard.chunkChanges(0) == 0);
  CHECK(shard.globalStep() == 0);
}

TEST_CASE("the shard refuses what breaks the protocol and changes nothing") {
  OneShard s(TrainingMode::Sync, 2, 2);
  ParameterShard shard(s.spec, s.graph, s.cluster, 0, kSmallChunks);
  const ShardChunk kernel = shard.chunks()[0];
  const std::vector<float> g{1.0f, 1.0f};
  CHECK_THROWS_AS(shard.push(0, 0, kernel.shard_offset, g), ProtocolError);  // not ready
  shard.markReady(5);
  CHECK_THROWS_WITH(shard.push(0, 6, kernel.shard_offset, g), Catch::Contains("only 5"));
  CHECK_THROWS_WITH(shard.push(7, 5, kernel.shard_offset, g), Catch::Contains("no worker 7"));
  CHECK_THROWS_WITH(shard.push(0, 5, kernel.shard_offset + 1, g), Catch::Contains("no chunk"));
  CHECK_THROWS_WITH(shard.push(0, 5, kernel.shard_offset, std::vector<float>{1.0f}),
                    Catch::Contains("holds 2 floats, got 1"));
  CHECK(shard.push(0, 5, kernel.shard_offset, g));
  CHECK_THROWS_WITH(shard.push(0, 5, kernel.shard_offset, g), Catch::Contains("twice"));
  std::vector<float> too_many(size_t(shard.size()) + 1);
  CHECK_THROWS_AS(shard.read(0, 0, too_many), ProtocolError);
  CHECK_THROWS_AS(shard.read(1, 0, std::span<float>(too_many.data(), 1)),
                  ProtocolError);  // sgd: no slots
}

// One whole push of `worker` to a shard of kSmallChunks (the kernel's chunk
// and the bias's) at the shard's step: it advances the worker's clock.
void pushWhole(ParameterShard& shard, uint32_t worker, const std::vector<float>& kernel,
               const std::vector<float>& bias) {
  CHECK(shard.push(worker, shard.globalStep(), shard.chunks()[0].shard_offset, kernel));
  CHECK(shard.push(worker, shard.globalStep(), shard.chunks()[1].shard_offset, bias));
}

TEST_CASE("async: every chunk applies at once, complete pushes advance the step and the clock") {
  OneShard s(TrainingMode::Async, 2, 2, /*max_staleness=*/1);
  ParameterShard shard(s.spec, s.graph, s.cluster, 0, kSmallChunks);
  shard.markReady(0);
  shard.workerJoined(0);
  shard.workerJoined(1);
  const std::vector<float> g{2.0f, 2.0f}, b{0.0f};
  auto pushAll = [&](uint32_t worker) { pushWhole(shard, worker, g, b); };
  pushAll(0);
  CHECK(shard.globalStep() == 1);
  CHECK(read(shard, shard.chunks()[0].shard_offset, 2) == std::vector<float>{-1.0f, -1.0f});
  CHECK(shard.withinStaleness(0));  // one ahead of worker 1: allowed
  pushAll(0);
  CHECK_FALSE(shard.withinStaleness(0));  // two ahead: waits
  CHECK(shard.withinStaleness(1));
  pushAll(1);
  CHECK(shard.withinStaleness(0));
  pushAll(0);
  CHECK_FALSE(shard.withinStaleness(0));
  shard.workerLeft(1);  // the slow one went away: nobody to wait for
  CHECK(shard.withinStaleness(0));
  shard.workerJoined(1);  // and comes back at the slowest clock, not behind it
  CHECK(shard.withinStaleness(0));
}

TEST_CASE("async: a push's staleness is the steps taken since the pull it was computed from") {
  OneShard s(TrainingMode::Async, 2, 2);
  ParameterShard shard(s.spec, s.graph, s.cluster, 0, kSmallChunks);
  shard.markReady(10);
  shard.workerJoined(0);
  shard.workerJoined(1);
  const std::vector<float> g{1.0f, 1.0f}, b{1.0f};
  auto push = [&](uint32_t worker, int64_t step) {
    CHECK(shard.push(worker, step, shard.chunks()[0].shard_offset, g));
    CHECK(shard.push(worker, step, shard.chunks()[1].shard_offset, b));
  };
  push(0, 10);  // nothing came between: 0
  push(0, 11);
  push(1, 10);  // computed at 10, applied as step 12: 2
  CHECK(shard.globalStep() == 13);
  CHECK(shard.staleness().pushes == 3);
  CHECK(shard.staleness().steps == 2.0);
  CHECK(shard.staleness().most == 2);
  CHECK(shard.staleness().mean() == Approx(2.0 / 3.0));
  // A step below 0 is no pull's: refused, not counted as 13 stale.
  CHECK_THROWS_WITH(shard.push(1, -1, shard.chunks()[0].shard_offset, g),
                    Catch::Contains("a gradient of step -1 from worker 1"));
  CHECK(shard.staleness().pushes == 3);
}

TEST_CASE("async: a worker left behind, rejoining first, does not hold back those after it") {
  OneShard s(TrainingMode::Async, 2, 2, /*max_staleness=*/1);
  ParameterShard shard(s.spec, s.graph, s.cluster, 0, kSmallChunks);
  shard.markReady(0);
  shard.workerJoined(0);
  shard.workerJoined(1);
  shard.workerLeft(1);  // dies at clock 0
  for (int i = 0; i < 5; ++i) pushWhole(shard, 0, {0.0f, 0.0f}, {0.0f});
  shard.workerLeft(0);    // every connection lost (a link cut, both restarted)
  shard.workerJoined(1);  // the one left behind comes back first
  shard.workerJoined(0);
  CHECK(shard.withinStaleness(0));
  CHECK(shard.withinStaleness(1));
}

TEST_CASE(
    "sync: a worker restarted within a step it pushed has its new gradient dropped as stale") {
  OneShard s(TrainingMode::Sync, 3, 2);
  ParameterShard shard(s.spec, s.graph, s.cluster, 0, kSmallChunks);
  const ShardChunk kernel = shard.chunks()[0];
  shard.initialize(0, kernel.shard_offset, std::vector<float>{1.0f, 2.0f});
  shard.markReady(0);
  const std::vector<float> g1{2.0f, 2.0f}, again{100.0f, 100.0f}, g2{0.0f, 2.0f};
  shard.workerJoined(1);
  CHECK(shard.push(1, 0, kernel.shard_offset, g1));
  // The same connection twice: a broken peer.
  CHECK_THROWS_WITH(shard.push(1, 0, kernel.shard_offset, g1), Catch::Contains("twice for step 0"));
  // Killed and started again before the step closed: its first gradient is
  // in the sum for good, and the one it computes again is a surplus.
  shard.workerLeft(1);
  shard.workerJoined(1);
  CHECK_FALSE(shard.push(1, 0, kernel.shard_offset, again));
  CHECK(shard.staleDropped() == 1);
  CHECK(shard.workersStepWaitsFor() == std::vector<uint32_t>{0, 1, 2});  // the bias chunk
  CHECK(shard.push(2, 0, kernel.shard_offset, g2));
  // mean (1, 2), lr 0.5: the gradient before the restart and worker 2's.
  CHECK(read(shard, kernel.shard_offset, 2) == std::vector<float>{0.5f, 1.0f});
  // In its new connection it is one worker as before: a repeat is refused.
  const std::vector<float> b{1.0f};
  CHECK(shard.push(1, 0, shard.chunks()[1].shard_offset, b));
  CHECK_THROWS_WITH(shard.push(1, 0, shard.chunks()[1].shard_offset, b),
                    Catch::Contains("twice for step 0"));
}

TEST_CASE("async: a push a worker left unfinished is no step, and its next push counts afresh") {
  OneShard s(TrainingMode::Async, 2, 2);
  ParameterShard shard(s.spec, s.graph, s.cluster, 0, kSmallChunks);
  shard.markReady(0);
  shard.workerJoined(1);
  const std::vector<float> g{2.0f, 2.0f}, b{0.0f};
  CHECK(shard.push(1, 0, shard.chunks()[0].shard_offset, g));  // one chunk of two, then killed
  shard.workerLeft(1);
  shard.workerJoined(1);
  CHECK(shard.push(1, 0, shard.chunks()[0].shard_offset, g));
  CHECK(shard.globalStep() == 0);
  CHECK(shard.push(1, 0, shard.chunks()[1].shard_offset, b));
  CHECK(shard.globalStep() == 1);
  // A second connection of the same worker closing leaves its push as it is.
  shard.workerJoined(1);
  CHECK(shard.push(1, 1, shard.chunks()[0].shard_offset, g));
  shard.workerLeft(1);
  CHECK(shard.push(1, 1, shard.chunks()[1].shard_offset, b));
  CHECK(shard.globalStep() == 2);
}

TEST_CASE("a shard the chief initialises again is not ready until it is marked so") {
  OneShard s(TrainingMode::Async, 1, 1);
  ParameterShard shard(s.spec, s.graph, s.cluster, 0, kSmallChunks);
  const ShardChunk kernel = shard.chunks()[0];
  shard.markReady(100);
  REQUIRE(shard.ready());
  // A refused write changes nothing, readiness included.
  CHECK_THROWS_WITH(shard.initialize(1, kernel.shard_offset, std::vector<float>{3.0f, 4.0f}),
                    Catch::Contains("no slot 1"));
  CHECK(shard.ready());
  // A restore over a shard that ran (another ps restarted): a worker that
  // asks now must wait for the whole restore.
  shard.initialize(0, kernel.shard_offset, std::vector<float>{3.0f, 4.0f});
  CHECK_FALSE(shard.ready());
  CHECK_THROWS_WITH(shard.push(0, 100, kernel.shard_offset, std::vector<float>{1.0f, 1.0f}),
                    Catch::Contains("not initialised yet"));
  shard.markReady(40);
  CHECK(shard.ready());
  CHECK(shard.globalStep() == 40);
  CHECK(read(shard, kernel.shard_offset, 2) == std::vector<float>{3.0f, 4.0f});
}

TEST_CASE("async with max_staleness: a standing step names the worker the others wait for") {
  OneShard s(TrainingMode::Async, 3, 2, /*max_staleness=*/1);
  ParameterShard shard(s.spec, s.graph, s.cluster, 0, kSmallChunks);
  shard.markReady(0);
  for (uint32_t w : {0u, 1u, 2u}) shard.workerJoined(w);
  const std::vector<float> g{2.0f, 2.0f}, b{0.0f};
  auto pushAll = [&](uint32_t worker) {
    CHECK(shard.push(worker, shard.globalStep(), shard.chunks()[0].shard_offset, g));
    CHECK(shard.push(worker, shard.globalStep(), shard.chunks()[1].shard_offset, b));
  };
  StepStallReport report(shard, s.cluster);
  CHECK_FALSE(report.check(0.0));
  // Workers 0 and 2 run two pushes ahead of worker 1, which stopped.
  for (uint32_t w : {0u, 2u, 0u, 2u}) pushAll(w);
  CHECK(shard.stalenessHold().held == std::vector<uint32_t>{0, 2});
  CHECK(shard.stalenessHold().slowest == std::vector<uint32_t>{1});
  CHECK_FALSE(report.check(1.0));  // the step moved
  CHECK_FALSE(report.check(10.0));
  const auto line = report.check(1.0 + StepStallReport::kMinSeconds);
  REQUIRE(line);
  CHECK(line->suspects);
  CHECK(line->text ==
        "global step 4 has waited 15 s: workers 0 and 2 are more than max_staleness (1) pushes "
        "ahead of "
        "worker 1 (connected: stopped, hung or slow?) and wait for its gradients");
  CHECK(report.standingSeconds() == Approx(15.0));
  // Gone, worker 1 holds nobody: the standing step then means nobody pushes.
  shard.workerLeft(1);
  CHECK(shard.stalenessHold().held.empty());
  const auto after = report.check(1.0 + 2 * StepStallReport::kMinSeconds);
  REQUIRE(after);
  CHECK_FALSE(after->suspects);
  CHECK_THAT(after->text, Catch::Contains("no worker has pushed"));
}

// An async shard of two workers whose kernel chunk holds {1, 2}; g is a
// gradient of that chunk (SGD, learning rate 0.5: each push takes 1 off).
struct PinnedKernel {
  OneShard s{TrainingMode::Async, 2, 2};
  ParameterShard shard{s.spec, s.graph, s.cluster, 0, kSmallChunks};
  ShardChunk kernel = shard.chunks()[0];
  size_t chunk = shard.chunkAt(kernel.shard_offset, kernel.size);
  std::vector<float> g{2.0f, 2.0f};

  PinnedKernel() {
    shard.initialize(0, kernel.shard_offset, std::vector<float>{1.0f, 2.0f});
    shard.markReady(0);
  }
};

TEST_CASE("a pinned chunk stays as it was through updates, the chunk comes home when free") {
  PinnedKernel k;
  ParameterShard& shard = k.shard;
  const ShardChunk& kernel = k.kernel;
  const size_t chunk = k.chunk;
  const std::vector<float>& g = k.g;
  auto values = [](const std::shared_ptr<const float>& p) {
    return std::vector<float>{p.get()[0], p.get()[1]};
  };

  std::shared_ptr<const float> home = shard.pinChunk(chunk);
  const float* home_address = home.get();
  CHECK(reinterpret_cast<uintptr_t>(home_address) % 8 == 0);
  CHECK(shard.push(0, 0, kernel.shard_offset, g));  // written elsewhere: home is pinned
  CHECK(values(home) == std::vector<float>{1.0f, 2.0f});
  CHECK(read(shard, kernel.shard_offset, 2) == std::vector<float>{0.0f, 1.0f});

  std::shared_ptr<const float> away = shard.pinChunk(chunk);
  CHECK(away.get() != home_address);
  CHECK(values(away) == std::vector<float>{0.0f, 1.0f});
  CHECK(shard.push(1, 0, kernel.shard_offset, g));  // both pinned: a third buffer
  CHECK(values(home) == std::vector<float>{1.0f, 2.0f});
  CHECK(values(away) == std::vector<float>{0.0f, 1.0f});
  CHECK(read(shard, kernel.shard_offset, 2) == std::vector<float>{-1.0f, 0.0f});

  home.reset();
  away.reset();
  CHECK(shard.push(0, 0, kernel.shard_offset, g));  // home is free again: back there
  CHECK(read(shard, kernel.shard_offset, 2) == std::vector<float>{-2.0f, -1.0f});
  std::shared_ptr<const float> again = shard.pinChunk(chunk);
  CHECK(again.get() == home_address);
  CHECK(values(again) == std::vector<float>{-2.0f, -1.0f});
  again.reset();
  CHECK(shard.push(1, 0, kernel.shard_offset, g));  // nobody holds it: in place
  CHECK(shard.pinChunk(chunk).get() == home_address);
  CHECK(read(shard, kernel.shard_offset, 2) == std::vector<float>{-3.0f, -2.0f});
}

TEST_CASE(
    "a chunk an update moved away from home goes back once the pins go, not at its next update") {
  PinnedKernel k;
  ParameterShard& shard = k.shard;
  const ShardChunk& kernel = k.kernel;
  const size_t chunk = k.chunk;
  const std::vector<float>& g = k.g;

  std::shared_ptr<const float> home = shard.pinChunk(chunk);
  const float* home_address = home.get();
  CHECK(shard.push(0, 0, kernel.shard_offset, g));
  CHECK(shard.chunksAwayFromHome() == 1);
  std::shared_ptr<const float> away = shard.pinChunk(chunk);
  home.reset();  // the current values are pinned: they stay where they are
  CHECK(shard.chunksAwayFromHome() == 1);
  CHECK(read(shard, kernel.shard_offset, 2) == std::vector<float>{0.0f, 1.0f});
  std::shared_ptr<const float> copy = away;
  away.reset();  // one handle of that version is still out
  CHECK(shard.chunksAwayFromHome() == 1);
  copy.reset();
  CHECK(shard.chunksAwayFromHome() == 0);
  CHECK(shard.pinChunk(chunk).get() == home_address);
  CHECK(read(shard, kernel.shard_offset, 2) == std::vector<float>{0.0f, 1.0f});

  // A handle dropped after its shard is gone moves nothing (its values went
  // with the shard: the ps's connections go before its shard).
  std::shared_ptr<const float> late;
  {
    ParameterShard gone(k.s.spec, k.s.graph, k.s.cluster, 0, kSmallChunks);
    gone.markReady(0);
    late = gone.pinChunk(chunk);
    CHECK(gone.push(0, 0, kernel.shard_offset, g));
    CHECK(gone.chunksAwayFromHome() == 1);
  }
  late.reset();
}

TEST_CASE("small pieces share a chunk, big ones are cut, gaps in the worker's layout split") {
  ShardPlan plan;
  // piece: variable, rows, layout offset, size, shard offset, index in the layout
  plan.pieces = {{0, 0, 2, 0, 2, 0, 0},      // a kernel of 2
                 {1, 0, 1, 16, 1, 16, 1},    // its bias, 16-aligned: shares its chunk
                 {2, 0, 4, 32, 40, 32, 2},   // bigger than a chunk: cut
                 {3, 0, 1, 80, 1, 80, 3},    // fits into the cut piece's last chunk
                 {4, 0, 1, 88, 8, 88, 4},    // does not fit: a chunk of its own
                 {5, 0, 1, 200, 1, 96, 6}};  // another shard's piece 5 lies between: apart
  const std::vector<ShardChunk> chunks = chunkShard(plan, 30);
  struct Expected {
    int first_piece, pieces;
    int64_t shard_offset, layout_offset, size;
  };
  const std::vector<Expected> expected = {{0, 2, 0, 0, 17},  {2, 1, 32, 32, 30}, {2, 2, 62, 62, 19},
                                          {4, 1, 88, 88, 8}, {5, 1, 96, 200, 1}};
  REQUIRE(chunks.size() == expected.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    INFO("chunk " << i);
    CHECK(chunks[i].first_piece == expected[i].first_piece);
    CHECK(chunks[i].pieces == expected[i].pieces);
    CHECK(chunks[i].shard_offset == expected[i].shard_offset);
    CHECK(chunks[i].layout_offset == expected[i].layout_offset);
    CHECK(chunks[i].size == expected[i].size);
  }
}

TEST_CASE("gradient groups: from the last layer, each closed at 64 Ki floats, chunks keep to one") {
  const auto graphOf = [](const std::string& model) {
    return buildLayerGraph(loadModelSpec(TRAIND_SOURCE_DIR "/configs/models/" + model + ".yaml"));
  };
  // fashion_cnn: conv1 (320 floats), conv2 (18,496), hidden (200,768),
  // logits (650). hidden and logits are final long before the convolutions.
  const LayerGraph cnn = graphOf("fashion_cnn");
  const std::vector<int> groups = gradientGroups(cnn);
  CHECK(groups == std::vector<int>{1, 1, 1, 1, 0, 0, 0, 0});
  const Placement placement = placeVariables(VariableLayout(cnn.variables), 1);
  CHECK(chunkShard(placement.shards[0], ParameterShard::kChunkFloats).size() == 1);
  const std::vector<ShardChunk> chunks =
      chunkShard(placement.shards[0], ParameterShard::kChunkFloats, groups);
  REQUIRE(chunks.size() == 2);
  CHECK(chunks[0].first_piece == 0);
  CHECK(chunks[0].pieces == 4);
  CHECK(chunks[1].first_piece == 4);
  CHECK(chunks[1].pieces == 4);

  // fashion_mlp: the last two layers (31,110 floats) are too few to be sent
  // apart: one group, and the chunks the size limit alone makes.
  const std::vector<int> mlp = gradientGroups(graphOf("fashion_mlp"));
  CHECK(std::all_of(mlp.begin(), mlp.end(), [](int g) { return g == 0; }));
}

TEST_CASE("a shard of one chunk of more than 3/4 of the limit goes in two halves") {
  const auto chunksOf = [](const ModelSpec& spec, int shards) {
    const LayerGraph graph = buildLayerGraph(spec);
    const Placement placement = placeVariables(VariableLayout(graph.variables), shards);
    std::vector<std::vector<int64_t>> sizes;
    for (const ShardPlan& shard : placement.shards) {
      sizes.emplace_back();
      for (const ShardChunk& c : transferChunks(graph, shard, ParameterShard::kChunkFloats))
        sizes.back().push_back(c.size);
    }
    return sizes;
  };
  const auto dense = [](int64_t inputs) {
    ModelSpec spec;
    spec.input = {inputs};
    LayerSpec layer;
    layer.kind = LayerKind::Dense;
    layer.name = "dense";
    layer.units = 1024;
    layer.use_bias = false;
    spec.layers.push_back(layer);
    return spec;
  };
  using Sizes = std::vector<std::vector<int64_t>>;
  CHECK(chunksOf(dense(256), 1) == Sizes{{128 * 1024, 128 * 1024}});  // 1 MiB
  CHECK(chunksOf(dense(193), 1) == Sizes{{98816, 98816}});            // just past 3/4
  CHECK(chunksOf(dense(192), 1) == Sizes{{192 * 1024}});              // 3/4: one call
  CHECK(chunksOf(dense(257), 1) == Sizes{{256 * 1024, 1024}});        // two chunks already
  CHECK(chunksOf(dense(512), 2) == Sizes{{128 * 1024, 128 * 1024}, {128 * 1024, 128 * 1024}});
  const auto spec = [](const std::string& model) {
    return loadModelSpec(TRAIND_SOURCE_DIR "/configs/models/" + model + ".yaml");
  };
  // Two chunks each already (fashion_cnn's by its gradient groups): as they were.
  CHECK(chunksOf(spec("fashion_mlp"), 1) == Sizes{{235500, 31130}});
  CHECK(chunksOf(spec("fashion_cnn"), 1).front().size() == 2);
}

TEST_CASE("a chunk covers, in a worker's buffer, only its own shard's pieces and padding") {
  // Row slices of one variable go to different shards; a slice of another
  // shard may sit in the padding before the next variable.
  for (int inputs = 2; inputs <= 40; ++inputs) {
    OneShard s(TrainingMode::Async, 1, 1);
    s.spec.input = {inputs};
    const LayerGraph graph = buildLayerGraph(s.spec);
    const VariableLayout layout(graph.variables);
    for (int shards = 1; shards <= 4; ++shards) {
      const Placement placement = placeVariables(layout, shards);
      for (size_t i = 0; i < placement.shards.size(); ++i) {
        for (const ShardChunk& c : chunkShard(placement.shards[i], ParameterShard::kChunkFloats)) {
          for (size_t j = 0; j < placement.shards.size(); ++j) {
            if (j == i) continue;
            for (const VariablePiece& p : placement.shards[j].pieces) {
              INFO(inputs << " inputs, " << shards << " shards: a chunk of shard " << i
                          << " at " << c.layout_offset << " (" << c.size
                          << " floats) and a piece of shard " << j << " at " << p.layout_offset);
              CHECK((p.layout_offset + p.size <= c.layout_offset ||
                     c.layout_offset + c.size <= p.layout_offset));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("small variables go to the shards in runs: a deep model is a few calls per shard") {
  // 2000 dense layers of 10 units: 4002 variables of at most 110 floats.
  ModelSpec spec;
  spec.input = {10};
  for (int i = 0; i < 2000; ++i) {
    LayerSpec dense;
    dense.kind = LayerKind::Dense;
    dense.name = fmt::format("d{}", i);
    dense.units = 10;
    spec.layers.push_back(dense);
  }
  const LayerGraph graph = buildLayerGraph(spec);
  const VariableLayout layout(graph.variables);
  for (int shards = 1; shards <= 4; ++shards) {
    INFO(shards << " shards");
    const Placement placement = placeVariables(layout, shards);
    int64_t most = 0, least = std::numeric_limits<int64_t>::max();
    for (const ShardPlan& shard : placement.shards) {
      most = std::max(most, shard.size);
      least = std::min(least, shard.size);
      // 250 Ki floats of gradient groups of 64 Ki floats: a run of a
      // shard crosses few of them.
      CHECK(transferChunks(graph, shard, ParameterShard::kChunkFloats).size() <= 6);
    }
    CHECK(most - least <= 2 * 112);  // within a piece, aligned
  }
  // A big variable first (100,000 floats, less than an even share): the
  // greedy pass puts it on ps 0, and the small ones fill ps 1 up to the
  // level before the rest go to ps 0.
  spec.input = {100};
  LayerSpec wide;
  wide.kind = LayerKind::Dense;
  wide.name = "wide";
  wide.units = 1000;
  wide.use_bias = false;
  spec.layers.insert(spec.layers.begin(), wide);
  const LayerGraph deep_wide = buildLayerGraph(spec);
  const Placement two = placeVariables(VariableLayout(deep_wide.variables), 2);
  CHECK(two.shards[0].pieces.front().variable == 0);
  CHECK(two.shards[1].pieces.front().variable == 1);
  CHECK(std::abs(two.shards[0].size - two.shards[1].size) <= 10016);  // d0's kernel, aligned
  for (const ShardPlan& shard : two.shards)
    CHECK(transferChunks(deep_wide, shard, ParameterShard::kChunkFloats).size() <= 6);

  // Pieces under 64 KiB but a large part of a share are placed as big
  // ones: of two kernels of 16,383 floats on 4 ps, the first (one row)
  // takes ps 0 (which keeps the job's global step), the second's row
  // slices the others.
  ModelSpec two_kernels;
  two_kernels.input = {1};
  two_kernels.loss = LossKind::MeanSquaredError;
  for (const int64_t units : {16383, 1}) {
    LayerSpec dense;
    dense.kind = LayerKind::Dense;
    dense.name = "k" + std::to_string(units);
    dense.units = units;
    dense.use_bias = false;
    two_kernels.layers.push_back(dense);
  }
  const Placement four = placeVariables(VariableLayout(buildLayerGraph(two_kernels).variables), 4);
  REQUIRE(four.shards[0].pieces.size() == 1);
  CHECK(four.shards[0].pieces[0].variable == 0);
  for (const ShardPlan& shard : four.shards) CHECK(!shard.pieces.empty());
}

TEST_CASE("a chunk of several pieces updates each of them and leaves the gap between") {
  OneShard s(TrainingMode::Sync, 2, 2);
  ParameterShard shard(s.spec, s.graph, s.cluster, 0);
  REQUIRE(shard.chunks().size() == 1);  // kernel [0, 2), gap, bias at 16
  const ShardChunk chunk = shard.chunks()[0];
  REQUIRE(chunk.size == 17);
  std::vector<float> initial(17, 0.0f);
  initial[0] = 1.0f;
  initial[16] = 3.0f;
  shard.initialize(0, chunk.shard_offset, initial);
  shard.markReady(0);
  // What a worker's gradient buffer holds in the gap is not a gradient.
  std::vector<float> g0(17, 7.0f), g1(17, -7.0f);
  g0[0] = 2.0f, g0[1] = 2.0f, g0[16] = 4.0f;
  g1[0] = 0.0f, g1[1] = 2.0f, g1[16] = 0.0f;
  // The last gradient's push writes each piece's new values out as well,
  // and leaves the gap there as it was.
  std::vector<float> out(17, -9.0f);
  CHECK(shard.push(0, 0, chunk.shard_offset, g0, out.data()));
  CHECK(out == std::vector<float>(17, -9.0f));
  CHECK(shard.push(1, 0, chunk.shard_offset, g1, out.data()));
  CHECK(shard.globalStep() == 1);
  // means (1, 2) and 2, lr 0.5
  std::vector<float> expected(17, 0.0f);
  expected[0] = 0.5f, expected[1] = -1.0f, expected[16] = 2.0f;
  CHECK(read(shard, chunk.shard_offset, 17) == expected);
  std::vector<float> expected_out(17, -9.0f);
  expected_out[0] = 0.5f, expected_out[1] = -1.0f, expected_out[16] = 2.0f;
  CHECK(out == expected_out);
}
