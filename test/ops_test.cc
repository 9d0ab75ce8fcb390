// The ops server in-process on a port the system picks: health follows the
// node's state, metrics are Prometheus text, POSTs set the flags the
// training loop polls, and bad requests cost only their connection.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <random>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

#include "core/checkpoint.h"
#include "core/json.h"
#include "core/printable.h"
#include "daemon/ops_client.h"
#include "daemon/ops_server.h"
#include "test/traind_process.h"

using namespace traind;

namespace {

constexpr double kTimeout = 5.0;

// A node's metrics and flags with its ops server on 127.0.0.1.
struct OpsNode {
  OpsNode(const std::string& job, int task, bool checkpoints)
      : metrics(job, task, 2),
        server(HostPort{"127.0.0.1", 0, {}}, metrics,
               OpsControls{&stop, checkpoints ? &checkpoint : nullptr}) {}

  HostPort address() const { return HostPort{"127.0.0.1", server.port(), {}}; }
  OpsReply get(const std::string& path) { return requestOps(address(), "GET", path, kTimeout); }
  OpsReply post(const std::string& path) { return requestOps(address(), "POST", path, kTimeout); }
  std::string raw(const std::string& request) { return exchangeRaw(address(), request, kTimeout); }

  StopRequest stop;
  std::atomic<bool> checkpoint{false};
  NodeMetrics metrics;
  OpsServer server;
};

// The value of the sample `name{labels}` in a Prometheus text page.
std::optional<double> sample(const std::string& page, const std::string& series) {
  std::istringstream lines(page);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  return std::nullopt;
}

// Sends `request` on a connection of its own, closes the sending side, and
// reads until the server closes: its answer, "" if none. Fails the test when
// the server neither answers nor closes within 5 s.
std::string sendAndHangUp(uint16_t port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  const sockaddr_in address = testing::loopbackAddress(port);
  REQUIRE(connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server answered and closed before reading it all
    sent += size_t(n);
  }
  shutdown(fd, SHUT_WR);
  std::string reply;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      close(fd);
      FAIL("the server neither answered nor closed within 5 s");
    }
    pollfd readable{fd, POLLIN, 0};
    if (poll(&readable, 1, int(left.count())) <= 0) continue;
    char buffer[4096];
    const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;  // closed, or reset after its answer
    reply.append(buffer, size_t(n));
  }
  close(fd);
  return reply;
}

}  // namespace

TEST_CASE("healthz follows the node's state") {
  OpsNode node("worker", 1, false);
  OpsReply r = node.get("/healthz");
  CHECK(r.status == 503);
  CHECK(r.body == "starting\n");
  node.metrics.setState(NodeState::Waiting, "waiting for the chief (worker 0)");
  r = node.get("/healthz");
  CHECK(r.status == 503);
  CHECK(r.body == "waiting: waiting for the chief (worker 0)\n");
  node.metrics.setState(NodeState::Training);
  r = node.get("/healthz");
  CHECK(r.status == 200);
  CHECK(r.body == "ok\n");
  node.metrics.setState(NodeState::Stopping);
  CHECK(node.get("/healthz").status == 503);
}

TEST_CASE("healthz says 503 while the global step stands past the stall limit") {
  OpsNode worker("worker", 1, false), ps("ps", 0, false);
  worker.metrics.setStallLimit(std::chrono::seconds(2));
  worker.metrics.setState(NodeState::Training);
  worker.metrics.recordStep(7, 0.5, 100);
  ps.metrics.setStallLimit(std::chrono::seconds(2));
  ps.metrics.setState(NodeState::Serving);
  CHECK(worker.get("/healthz").status == 200);
  CHECK(ps.get("/healthz").status == 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  OpsReply r = worker.get("/healthz");
  CHECK(r.status == 503);
  CHECK_THAT(r.body, Catch::StartsWith("training: the global step has stood at 7 for "));
  CHECK_THAT(r.body, Catch::EndsWith(" s (http.stall_seconds: 2)\n"));
  // /status says so too (trainctl status shows it and exits 1).
  const JsonValue status = parseJson(worker.get("/status").body, "status");
  CHECK(status.find("stalled")->text + "\n" == r.body);
  ps.metrics.setGlobalStep(0);  // refreshed, unchanged: a ps's step moves when its shard's does
  CHECK(ps.get("/healthz").status == 503);
  ps.metrics.setStallLimit(std::chrono::seconds(0));  // 0 turns the check off
  CHECK(ps.get("/healthz").status == 200);
  worker.metrics.recordStep(8, 0.5, 100);  // it moves again
  CHECK(worker.get("/healthz").status == 200);
}

TEST_CASE("metrics are Prometheus text with job and task labels") {
  OpsNode chief("worker", 0, true);
  chief.metrics.setWritesCheckpoints(true);
  chief.metrics.setState(NodeState::Training);
  for (int step = 1; step <= 4; ++step) {
    chief.metrics.recordStep(step, 1.0 + step, 100);  // windows of 2: {2, 3}, {4, 5}
    chief.metrics.recordPush(4096, 0.003);
    chief.metrics.recordPull(4096, 0.2);
  }
  chief.metrics.setSharedMemoryShards(2);
  chief.metrics.recordCheckpoint(4, "/tmp/ckpt/ckpt-0000000004");

  const std::string response = chief.raw("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK_THAT(response, Catch::StartsWith("HTTP/1.1 200 OK\r\n"));
  CHECK_THAT(response, Catch::Contains("Content-Type: text/plain; version=0.0.4"));
  const std::string page = chief.get("/metrics").body;
  INFO(page);
  const std::string labels = "{job=\"worker\",task=\"0\"";
  CHECK(sample(page, "traind_global_step" + labels + "}") == 4);
  CHECK(sample(page, "traind_loss" + labels + "}") == 4.5);
  CHECK(sample(page, "traind_examples_per_second" + labels + "}") > 0);
  CHECK(sample(page, "traind_push_bytes_total" + labels + "}") == 4 * 4096);
  CHECK(sample(page, "traind_pull_bytes_total" + labels + "}") == 4 * 4096);
  CHECK(sample(page, "traind_push_seconds_bucket" + labels + ",le=\"0.0025\"}") == 0);
  CHECK(sample(page, "traind_push_seconds_bucket" + labels + ",le=\"0.005\"}") == 4);
  CHECK(sample(page, "traind_pull_seconds_bucket" + labels + ",le=\"0.1\"}") == 0);
  CHECK(sample(page, "traind_pull_seconds_bucket" + labels + ",le=\"+Inf\"}") == 4);
  CHECK(sample(page, "traind_pull_seconds_count" + labels + "}") == 4);
  CHECK(sample(page, "traind_pull_seconds_sum" + labels + "}") == Approx(0.8));
  CHECK(sample(page, "traind_shared_memory_ps_tasks" + labels + "}") == 2);
  const std::optional<double> age = sample(page, "traind_checkpoint_age_seconds" + labels + "}");
  REQUIRE(age);
  CHECK(*age >= 0);
  CHECK(*age < 60);
  CHECK_THAT(page, Catch::Contains("# TYPE traind_push_seconds histogram\n"));
  CHECK_THAT(page, Catch::Contains("# TYPE traind_push_bytes_total counter\n"));
  CHECK_THAT(page, !Catch::Contains("traind_stale_gradients_total"));

  // Every line is a comment or `name{labels} value` (text format 0.0.4).
  const std::regex line_format(
      "# (HELP|TYPE) [a-z_]+ .+|[a-z_]+\\{[a-z_]+=\"[^\"]*\"(,[a-z_]+=\"[^\"]*\")*\\} "
      "([-+0-9.e]+|\\+Inf|NaN)");
  std::istringstream lines(page);
  for (std::string line; std::getline(lines, line);) {
    INFO(line);
    CHECK(std::regex_match(line, line_format));
  }

  OpsNode ps("ps", 1, false);
  ps.metrics.setShardCounters(7, 3, PushCounts{40, 12, 30}, nullptr);
  ps.metrics.setStepStanding(16.5);
  ps.metrics.setGlobalStep(120);
  const std::string ps_page = ps.get("/metrics").body;
  INFO(ps_page);
  CHECK(sample(ps_page, "traind_stale_gradients_total{job=\"ps\",task=\"1\"}") == 7);
  CHECK(sample(ps_page, "traind_connected_workers{job=\"ps\",task=\"1\"}") == 3);
  CHECK(sample(ps_page, "traind_push_calls_total{job=\"ps\",task=\"1\",transport=\"tcp\"}") ==
        40);
  CHECK(sample(ps_page,
               "traind_push_calls_total{job=\"ps\",task=\"1\",transport=\"shared_memory\"}") ==
        12);
  CHECK(sample(ps_page, "traind_pushed_chunks_total{job=\"ps\",task=\"1\",transport=\"tcp\"}") ==
        40);
  CHECK(sample(ps_page,
               "traind_pushed_chunks_total{job=\"ps\",task=\"1\",transport=\"shared_memory\"}") ==
        30);
  CHECK(sample(ps_page, "traind_step_standing_seconds{job=\"ps\",task=\"1\"}") == 16.5);
  CHECK(sample(ps_page, "traind_global_step{job=\"ps\",task=\"1\"}") == 120);
  CHECK_THAT(ps_page, !Catch::Contains("traind_loss"));
  CHECK_THAT(ps_page, !Catch::Contains("traind_checkpoint_age_seconds"));
  CHECK_THAT(ps_page, !Catch::Contains("traind_gradient_staleness"));  // sync applies none

  OpsNode async_ps("ps", 2, false);
  GradientStaleness staleness;
  staleness.record(1);
  staleness.record(4);
  async_ps.metrics.setShardCounters(0, 2, PushCounts{}, &staleness);
  const std::string async_page = async_ps.get("/metrics").body;
  INFO(async_page);
  CHECK_THAT(async_page, Catch::Contains("# TYPE traind_gradient_staleness_steps summary\n"));
  CHECK(sample(async_page, "traind_gradient_staleness_steps_sum{job=\"ps\",task=\"2\"}") == 5);
  CHECK(sample(async_page, "traind_gradient_staleness_steps_count{job=\"ps\",task=\"2\"}") == 2);
}

TEST_CASE("the loss metric is the log line's: its windows end at multiples of the global step") {
  OpsNode worker("worker", 1, false);  // log_every 2
  worker.metrics.setState(NodeState::Training);
  const std::string series = "traind_loss{job=\"worker\",task=\"1\"}";
  auto loss = [&] { return sample(worker.get("/metrics").body, series); };
  worker.metrics.recordStep(1, 1.0, 100);
  CHECK(loss() == 1.0);                    // before a window ends: the mean so far
  worker.metrics.recordStep(3, 3.0, 100);  // async: the global step jumps over 2
  CHECK(loss() == 2.0);
  worker.metrics.recordStep(4, 10.0, 100);  // another worker's steps in between
  CHECK(loss() == 10.0);
  worker.metrics.recordStep(5, 20.0, 100);  // a window running: the last one stands
  CHECK(loss() == 10.0);
}

TEST_CASE("status is one line of JSON") {
  OpsNode node("standalone", 0, true);
  node.metrics.setState(NodeState::Training);
  node.metrics.recordStep(10, 0.5, 100);
  node.metrics.recordCheckpoint(10, "/tmp/a \"quoted\" dir/ckpt-0000000010");
  const OpsReply r = node.get("/status");
  REQUIRE(r.status == 200);
  CHECK(r.body.find('\n') == r.body.size() - 1);
  const JsonValue status = parseJson(r.body, "status");
  CHECK(status.find("role")->text == "standalone");
  CHECK(status.find("task")->asInt64() == 0);
  CHECK(status.find("state")->text == "training");
  CHECK(status.find("global_step")->asInt64() == 10);
  CHECK(status.find("examples_per_sec")->type == JsonValue::Type::Number);
  CHECK(status.find("last_checkpoint")->text == "/tmp/a \"quoted\" dir/ckpt-0000000010");
  CHECK(status.find("last_checkpoint_step")->asInt64() == 10);
  CHECK(status.find("stalled")->type == JsonValue::Type::Null);
}

TEST_CASE("a checkpoint's age counts on the steady clock from its manifest's time") {
  const std::filesystem::path dir = testing::freshTempDir("checkpoint-age");
  CheckpointManifest manifest;
  manifest.global_step = 12;
  manifest.model_name = "m";
  manifest.architecture_hash = "0123abcd";
  manifest.created = "2026-12-01T00:00:00Z";
  const std::filesystem::path checkpoint = saveCheckpoint(dir, manifest, {}, 1).path;
  const auto ageOf = [&](std::chrono::system_clock::duration ago) {
    std::filesystem::last_write_time(
        checkpoint / "manifest.json",
        std::chrono::file_clock::now() -
            std::chrono::duration_cast<std::chrono::file_clock::duration>(ago));
    OpsNode chief("standalone", 0, true);
    chief.metrics.setWritesCheckpoints(true);
    chief.metrics.recordExistingCheckpoint(checkpoint);
    return sample(chief.get("/metrics").body,
                  "traind_checkpoint_age_seconds{job=\"standalone\",task=\"0\"}");
  };
  const std::optional<double> hour = ageOf(std::chrono::hours(1));
  REQUIRE(hour);
  CHECK(*hour >= 3600);
  CHECK(*hour < 3660);
  // Written in the future (a clock set back since): no age yet, counted from now.
  const std::optional<double> ahead = ageOf(-std::chrono::hours(24));
  REQUIRE(ahead);
  CHECK(*ahead >= 0);
  CHECK(*ahead < 60);
}

TEST_CASE("a node that knows no global step yet says none, not 0") {
  // A worker started again mid-job, before its first pull.
  OpsNode worker("worker", 2, false);
  worker.metrics.setState(NodeState::Waiting, "connecting to the ps tasks");
  CHECK(parseJson(worker.get("/status").body, "status").find("global_step")->type ==
        JsonValue::Type::Null);
  CHECK(worker.get("/metrics").body.find("traind_global_step{") == std::string::npos);
  worker.metrics.setGlobalStep(13000);
  CHECK(parseJson(worker.get("/status").body, "status").find("global_step")->asInt64() == 13000);
  CHECK(worker.get("/metrics").body.find("traind_global_step{job=\"worker\",task=\"2\"} 13000") !=
        std::string::npos);
}

TEST_CASE("POST /stop and /checkpoint set the flags the training loop polls") {
  OpsNode chief("worker", 0, true);
  CHECK(chief.post("/checkpoint").status == 409);  // no checkpoint dir
  CHECK_FALSE(chief.checkpoint.load());
  chief.metrics.setWritesCheckpoints(true);
  CHECK(chief.post("/checkpoint").status == 202);
  CHECK(chief.checkpoint.load());
  CHECK_FALSE(chief.stop.requested());
  CHECK(chief.post("/stop").status == 202);
  CHECK(chief.stop.requested());
  CHECK_THAT(chief.stop.by(), Catch::StartsWith("POST /stop from 127.0.0.1:"));

  OpsNode worker("worker", 1, false);
  const OpsReply r = worker.post("/checkpoint");
  CHECK(r.status == 404);
  CHECK_THAT(r.body, Catch::Contains("the chief (worker 0)"));
}

TEST_CASE("an answer cut short of its Content-Length is no answer") {
  // A node that dies mid-answer: its status would be JSON cut short, which
  // trainctl would take for another program's.
  const int port = testing::freePortRange(1);
  const int listener = testing::listenOnLoopback(port, 1);
  REQUIRE(listener >= 0);
  std::thread server([listener] {
    pollfd incoming{listener, POLLIN, 0};
    if (poll(&incoming, 1, 10000) != 1) return;
    const int peer = accept(listener, nullptr, nullptr);
    if (peer < 0) return;
    char request[4096];
    (void)!read(peer, request, sizeof request);
    const std::string cut = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"role\":";
    (void)!write(peer, cut.data(), cut.size());
    close(peer);
  });
  const HostPort address{"127.0.0.1", uint16_t(port), {}};
  CHECK_THROWS_MATCHES(requestOps(address, "GET", "/status", 5.0), OpsUnreachable,
                       Catch::Message("127.0.0.1:" + std::to_string(port) +
                                      ": the answer was cut short (8 of its 100 bytes)"));
  server.join();
  close(listener);
}

TEST_CASE("a web page's POST, which carries an Origin, is refused") {
  OpsNode chief("worker", 0, true);
  chief.metrics.setWritesCheckpoints(true);
  for (const std::string path : {"/stop", "/checkpoint"}) {
    // As a browser sends a page's form or fetch(), with no preflight.
    const std::string answer = chief.raw("POST " + path +
                                         " HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: "
                                         "http://example.com\r\nContent-Type: text/plain\r\n"
                                         "Content-Length: 0\r\n\r\n");
    CHECK_THAT(answer, Catch::StartsWith("HTTP/1.1 403 Forbidden") &&
                           Catch::Contains("from a web page (the request has an Origin) is "
                                           "refused: use trainctl or curl"));
  }
  CHECK_FALSE(chief.stop.requested());
  CHECK_FALSE(chief.checkpoint.load());
}

TEST_CASE("unknown paths are 404, other methods 405, HEAD has no body") {
  OpsNode node("ps", 0, false);
  OpsReply r = node.get("/nope");
  CHECK(r.status == 404);
  CHECK_THAT(r.body, Catch::Contains("/healthz"));
  CHECK(node.get("/").status == 404);
  CHECK(node.get("/healthz/extra").status == 404);
  CHECK(node.get("/stop").status == 405);
  CHECK_FALSE(node.stop.requested());
  CHECK(node.post("/metrics").status == 405);
  CHECK(node.get("/healthz?verbose=1").status == 503);  // the query is not part of the path
  // A target in absolute form, as through a proxy: its path.
  CHECK_THAT(node.raw("GET http://127.0.0.1:1/status HTTP/1.1\r\n\r\n"),
             Catch::StartsWith("HTTP/1.1 200 OK\r\n"));
  CHECK_THAT(node.raw("GET HTTP://h/healthz?x=1 HTTP/1.1\r\n\r\n"),
             Catch::StartsWith("HTTP/1.1 503 "));
  CHECK_THAT(node.raw("GET http://h?x HTTP/1.1\r\n\r\n"), Catch::StartsWith("HTTP/1.1 404 "));
  for (const char* target : {"ftp://h/status", "https://h/status", "http://", "http:///status",
                             "http://user@h/status", "http://h#/status", "http://h\xc3\xa9/status"})
    CHECK_THAT(node.raw(std::string("GET ") + target + " HTTP/1.1\r\n\r\n"),
               Catch::StartsWith("HTTP/1.1 400 "));
  const std::string head = node.raw("HEAD /status HTTP/1.1\r\n\r\n");
  CHECK_THAT(head, Catch::StartsWith("HTTP/1.1 200 OK\r\n"));
  CHECK_THAT(head, Catch::EndsWith("\r\n\r\n"));
  // Nor do its errors: 404, 405, a 400 for headers too long to parse.
  const std::pair<std::string, std::string> errors[] = {
      {"HEAD /nope HTTP/1.1\r\n\r\n", "HTTP/1.1 404 "},
      {"HEAD /stop HTTP/1.1\r\n\r\n", "HTTP/1.1 405 "},
      {"HEAD / HTTP/2.0\r\n\r\n", "HTTP/1.1 400 "},
      {"HEAD * HTTP/1.1\r\n\r\n", "HTTP/1.1 400 "},
      {"HEAD /healthz HTTP/1.1\r\nX-Big: " + std::string(9000, 'a') + "\r\n\r\n", "HTTP/1.1 400 "}};
  for (const auto& [request, answer] : errors) {
    const std::string reply = node.raw(request);
    CHECK_THAT(reply, Catch::StartsWith(answer) && Catch::EndsWith("\r\n\r\n") &&
                          !Catch::Contains("Content-Length: 0\r\n"));
  }
  CHECK_FALSE(node.stop.requested());
}

TEST_CASE("request lines may end in a bare LF, as printf into nc sends them") {
  OpsNode node("worker", 1, false);
  node.metrics.setState(NodeState::Training);
  CHECK_THAT(node.raw("GET /healthz HTTP/1.1\nHost: x\n\n"), Catch::StartsWith("HTTP/1.1 200 OK"));
  CHECK_THAT(node.raw("GET /healthz HTTP/1.1\r\nHost: x\n\r\n"),
             Catch::StartsWith("HTTP/1.1 200 OK"));
  CHECK_THAT(node.raw("GET /healthz HTTP/1.1\n\n"), Catch::StartsWith("HTTP/1.1 200 OK"));
  CHECK_THAT(node.raw("POST /stop HTTP/1.1\nContent-Length: 2\n\nab"),
             Catch::StartsWith("HTTP/1.1 202"));
  CHECK(node.stop.requested());
  CHECK_THAT(node.raw("GET /healthz HTTP/1.1\nno colon here\n\n"),
             Catch::StartsWith("HTTP/1.1 400 Bad Request\r\n"));
}

TEST_CASE("malformed requests get 400 and the server lives on") {
  OpsNode node("worker", 2, false);
  node.metrics.setState(NodeState::Training);
  const std::vector<std::string> bad = {
      "garbage\r\n\r\n",
      "GET /healthz\r\n\r\n",
      "GET  /healthz HTTP/1.1\r\n\r\n",
      "GET healthz HTTP/1.1\r\n\r\n",
      "GET /healthz HTTP/2.0\r\n\r\n",
      "G\x01T /healthz HTTP/1.1\r\n\r\n",
      "GET /health\x7fz HTTP/1.1\r\n\r\n",
      "GET /healthz HTTP/1.1\r\nno colon here\r\n\r\n",
      "GET /healthz HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
      "GET /healthz HTTP/1.1\r\nX: a\x01b\r\n\r\n",
      std::string("GET /healthz HTTP/1.1\r\nX: a") + '\0' + "b\r\n\r\n",
      "GET /healthz HTTP/1.1\r\n: empty name\r\n\r\n",
      "POST /stop HTTP/1.1\r\nContent-Length: ten\r\n\r\n",
      "POST /stop HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
      "POST /stop HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
      "POST /stop HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
      "POST /stop HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
  };
  for (const std::string& request : bad) {
    INFO(request);
    CHECK_THAT(node.raw(request), Catch::StartsWith("HTTP/1.1 400 Bad Request\r\n"));
  }
  CHECK_FALSE(node.stop.requested());
  // A binary protocol's bytes, no line end in them (a worker's Cap'n Proto
  // hello, this port given as a ps address): answered at once, not at the
  // 5 s request deadline, so that the worker sees a port that is no ps's.
  const std::string hello("\0\0\0\0\x03\0\0\0\0\0\0\0\x01\0\x01\0", 16);
  CHECK_THAT(exchangeRaw(node.address(), hello, 2.0),
             Catch::StartsWith("HTTP/1.1 400 Bad Request\r\n") &&
                 Catch::Contains("the request holds a control character: not HTTP"));
  // A request with a small body is fine; the body is read and ignored.
  CHECK_THAT(node.raw("POST /stop HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"),
             Catch::StartsWith("HTTP/1.1 202"));
  CHECK(node.get("/healthz").status == 200);
}

TEST_CASE("oversized requests get 400") {
  OpsNode node("worker", 0, false);
  const std::string huge_header =
      "GET /healthz HTTP/1.1\r\nX-Big: " + std::string(9000, 'a') + "\r\n\r\n";
  std::string response = node.raw(huge_header);
  CHECK_THAT(response, Catch::StartsWith("HTTP/1.1 400 Bad Request\r\n"));
  CHECK_THAT(response, Catch::Contains("over 8 KiB"));
  // Headers that never end are cut off at the limit too.
  CHECK_THAT(node.raw("GET /healthz HTTP/1.1\r\n" + std::string(100000, 'x')),
             Catch::StartsWith("HTTP/1.1 400"));
  const std::string big_body =
      "POST /stop HTTP/1.1\r\nContent-Length: 9000\r\n\r\n" + std::string(9000, 'b');
  CHECK_THAT(node.raw(big_body), Catch::StartsWith("HTTP/1.1 400"));
  CHECK_FALSE(node.stop.requested());
  CHECK(node.get("/healthz").status == 503);
}

TEST_CASE("a slow client neither blocks others nor stays forever") {
  OpsNode node("worker", 0, false);
  // Half a request, never finished: the server drops it after its 5 s.
  const HostPort address = node.address();
  auto slow = std::async(std::launch::async, [address] {
    return exchangeRaw(address, "GET /healthz HTTP/1.1\r\n", 10.0);
  });
  for (int i = 0; i < 20; ++i) CHECK(node.get("/status").status == 200);
  CHECK(slow.get().empty());
}

TEST_CASE("slow clients in every slot do not keep a probe out") {
  OpsNode node("worker", 0, false);
  node.metrics.setState(NodeState::Training);
  // 80 clients that have sent half a request, more than the 64 slots: half
  // of them stop in the headers, half in the body.
  std::vector<int> slow;
  for (int i = 0; i < 80; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    const sockaddr_in to = testing::loopbackAddress(node.server.port());
    REQUIRE(connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) == 0);
    const std::string half = i % 2 ? "GET /healthz HTTP/1.1\r\nX-a: "
                                   : "POST /stop HTTP/1.1\r\nContent-Length: 100\r\n\r\nx";
    REQUIRE(send(fd, half.data(), half.size(), MSG_NOSIGNAL) == ssize_t(half.size()));
    slow.push_back(fd);
  }
  // Each probe takes the slot of the oldest of them.
  for (int i = 0; i < 10; ++i) CHECK(node.get("/healthz").status == 200);
  for (int fd : slow) close(fd);
  CHECK_FALSE(node.stop.requested());
}

TEST_CASE("an address in use is an InputError naming it") {
  OpsNode node("worker", 0, false);
  NodeMetrics other("worker", 1, 1);
  StopRequest stop;
  try {
    OpsServer clash(node.address(), other, OpsControls{&stop, nullptr});
    FAIL("a second server bound the same port");
  } catch (const InputError& e) {
    CHECK_THAT(e.what(), Catch::Contains("127.0.0.1:" + std::to_string(node.server.port())));
    CHECK_THAT(e.what(), Catch::Contains("cannot be bound (is the port in use?): "));
  }
  CHECK_THROWS_AS(OpsServer(HostPort{"no-such-host.invalid", 8080, {}}, other, OpsControls{&stop}),
                  InputError);
}

TEST_CASE("random mutations of requests get an answer or a closed connection in time") {
  OpsNode node("worker", 1, true);
  node.metrics.setState(NodeState::Training);
  const std::vector<std::string> valid = {
      "GET /healthz HTTP/1.1\r\nHost: node\r\n\r\n",
      "GET /metrics HTTP/1.1\r\n\r\n",
      "GET /status HTTP/1.1\r\nAccept: */*\r\n\r\n",
      "HEAD /healthz HTTP/1.1\r\n\r\n",
      "POST /checkpoint HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
  };
  std::mt19937_64 rng(Catch::rngSeed());
  auto below = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  int answered = 0;
  for (int i = 0; i < 300; ++i) {
    std::string request = valid[below(valid.size())];
    for (size_t m = 1 + below(3); m > 0; --m) {
      const size_t at = below(request.size() + 1);
      switch (below(5)) {
        case 0:  // a byte changed
          if (!request.empty()) request[below(request.size())] = char(below(256));
          break;
        case 1:  // bytes inserted
          request.insert(at, std::string(1 + below(8), char(below(256))));
          break;
        case 2:  // bytes cut, or the rest (a request that ends early)
          request.erase(at, below(2) ? below(16) : std::string::npos);
          break;
        case 3:  // a line break
          request.insert(at, "\r\n");
          break;
        default:  // a length that lies, or a flood
          request.insert(at, below(2) ? "Content-Length: " + std::to_string(below(20000)) + "\r\n"
                                      : std::string(below(20000), 'x'));
      }
    }
    INFO("case " << i << " (seed " << Catch::rngSeed() << "): " << printable(request.substr(0, 300)));
    const std::string reply = sendAndHangUp(node.server.port(), request);
    if (reply.empty()) continue;
    ++answered;
    CHECK_THAT(reply, Catch::Matches("HTTP/1\\.1 [1-5][0-9][0-9] [^\\r\\n]*\\r\\n[\\s\\S]*"));
  }
  CHECK(answered > 150);
  CHECK(node.get("/healthz").status == 200);
}
