// traind as a systemd Type=notify service: the real binary, with
// NOTIFY_SOCKET pointing at a datagram socket this test binds, says READY=1
// once it trains, STATUS= lines as it goes and STOPPING=1 on SIGTERM; and the
// unit scripts/install.sh installs passes `systemd-analyze verify`.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

#include "test/traind_process.h"

using namespace traind::testing;

namespace {

// A unix datagram socket standing in for systemd's notification socket.
class NotifySocket {
 public:
  explicit NotifySocket(const std::filesystem::path& path) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    REQUIRE(path.string().size() < sizeof(address.sun_path));
    std::strcpy(address.sun_path, path.c_str());
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  }
  ~NotifySocket() { close(fd_); }
  NotifySocket(const NotifySocket&) = delete;
  NotifySocket& operator=(const NotifySocket&) = delete;

  // Every message until one holds `line` (a whole line of it), or until
  // `timeout_seconds` pass; `found` says which.
  std::string readUntil(const std::string& line, double timeout_seconds, bool& found) {
    std::string seen;
    found = false;
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
    while (!found) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd ready{fd_, POLLIN, 0};
      if (poll(&ready, 1, int(left.count())) <= 0) continue;
      char buffer[4096];
      const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) continue;
      const std::string message(buffer, size_t(n));
      seen += message + "\n---\n";
      found = ("\n" + message + "\n").find("\n" + line) != std::string::npos;
    }
    return seen;
  }

 private:
  int fd_ = -1;
};

// `command` through the shell, in the source tree, stdout and stderr together.
ProcessResult runShell(const std::string& command) {
  ProcessResult result;
  FILE* pipe = popen(("cd '" TRAIND_SOURCE_DIR "' && { " + command + "; } 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace

TEST_CASE("a standalone run tells systemd READY, STATUS and STOPPING") {
  const auto dir = freshTempDir("systemd_notify");
  NotifySocket notify(dir / "notify");
  REQUIRE(setenv("NOTIFY_SOCKET", (dir / "notify").c_str(), 1) == 0);
  // Trains until told to stop; a log window (and so a STATUS line) every 20 steps.
  BackgroundTraind traind(
      "--model configs/models/regression.yaml --max-steps 100000000 "
      "--log-every 20 --threads 1 --checkpoint-dir " +
          (dir / "ckpt").string(),
      dir / "traind.log");
  unsetenv("NOTIFY_SOCKET");

  bool found = false;
  std::string seen = notify.readUntil("READY=1", 20, found);
  INFO(seen << traind.output());
  REQUIRE(found);
  CHECK(seen.find("STATUS=training") != std::string::npos);
  seen += notify.readUntil("STATUS=step ", 20, found);
  REQUIRE(found);
  CHECK(seen.find(", loss = ") != std::string::npos);

  traind.signal(SIGTERM);
  seen += notify.readUntil("STOPPING=1", 20, found);
  REQUIRE(found);
  CHECK(traind.wait(20) == 0);
}

// systemd takes a Type=notify service that exits 0 without READY=1 as failed
// ("protocol"), and Restart=on-failure would start it again and again.
TEST_CASE("a task that ends without having served tells systemd READY before it stops") {
  const auto dir = freshTempDir("systemd_never_ready");
  const int port = freePortRange(2);
  const auto cluster = dir / "cluster.yaml";
  {
    std::ofstream out(cluster);
    out << "cluster:\n  ps: [127.0.0.1:" << port << "]\n  worker: [127.0.0.1:" << port + 1
        << "]\ntraining:\n  mode: async\n";
  }
  NotifySocket notify(dir / "notify");
  REQUIRE(setenv("NOTIFY_SOCKET", (dir / "notify").c_str(), 1) == 0);
  // A ps whose chief never comes: it waits, uninitialised, until stopped.
  BackgroundTraind ps("--cluster " + cluster.string() +
                          " --model configs/models/fashion_mlp.yaml --job ps --task 0",
                      dir / "ps.log");
  unsetenv("NOTIFY_SOCKET");

  bool found = false;
  std::string seen = notify.readUntil("STATUS=waiting", 20, found);
  INFO(seen << ps.output());
  REQUIRE(found);
  CHECK(seen.find("READY=1") == std::string::npos);
  ps.signal(SIGTERM);
  seen += notify.readUntil("STOPPING=1", 20, found);
  REQUIRE(found);
  const size_t ready = seen.find("READY=1");
  CHECK(ready != std::string::npos);
  CHECK(ready < seen.find("STOPPING=1"));
  CHECK(ps.wait(20) == 0);
}

TEST_CASE("a notification socket nobody reads does not hold the run") {
  // 10 datagrams fill an unread socket's queue by default: libsystemd's
  // sd_notify then waited, and training with it, for as long as nobody read
  // (bounded here: a held run would hang the suite, not fail it).
  const auto dir = freshTempDir("systemd_deaf");
  NotifySocket notify(dir / "notify");
  const ProcessResult r = runShell("NOTIFY_SOCKET='" + (dir / "notify").string() +
                                   "' timeout 60 '" + TRAIND_BINARY_DIR +
                                   "/daemon/traind' --model configs/models/regression.yaml "
                                   "--max-steps 200 --log-every 1 --threads 1 --checkpoint-dir ''");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("done: global step 200"));
}

TEST_CASE("a run started with its standard streams closed keeps its log out of its files") {
  // The checkpoint directory's .lock took descriptor 2, and the log's lines
  // went into it over the pid.
  const auto dir = freshTempDir("closed_streams");
  const ProcessResult r =
      runShell("'" + std::string(TRAIND_BINARY_DIR) +
               "/daemon/traind' --model configs/models/regression.yaml --max-steps 20 "
               "--threads 1 --checkpoint-dir '" +
               (dir / "ckpt").string() + "' <&- >&- 2>&-; echo \"exit $?\"");
  CHECK_THAT(r.output, Catch::Contains("exit 0"));
  std::ifstream lock(dir / "ckpt" / ".lock");
  std::string pid((std::istreambuf_iterator<char>(lock)), std::istreambuf_iterator<char>());
  INFO(pid);
  CHECK(!pid.empty());
  CHECK(pid.find_first_not_of("0123456789\n") == std::string::npos);
}

TEST_CASE("without NOTIFY_SOCKET the notifications are no-ops") {
  REQUIRE(std::getenv("NOTIFY_SOCKET") == nullptr);
  const ProcessResult r =
      runTraind("--model configs/models/regression.yaml --max-steps 40 --log-every 20 --threads 1");
  INFO(r.output);
  CHECK(r.exit_code == 0);
}

TEST_CASE("the installed traind@.service passes systemd-analyze verify") {
  const auto dir = freshTempDir("systemd_install");
  const ProcessResult installed =
      runShell("scripts/install.sh --prefix /usr/local --build '" + std::string(TRAIND_BINARY_DIR) +
               "' --destdir '" + dir.string() + "'");
  INFO(installed.output);
  REQUIRE(installed.exit_code == 0);
  const auto unit = dir / "usr/local/lib/systemd/system/traind@.service";
  REQUIRE(std::filesystem::exists(unit));
  CHECK(std::filesystem::exists(dir / "usr/local/bin/traind"));
  CHECK(std::filesystem::exists(dir / "usr/local/bin/trainctl"));
  CHECK(std::filesystem::exists(dir / "usr/local/share/traind/models/fashion_mlp.yaml"));
  CHECK(std::filesystem::exists(dir / "etc/traind/cluster.yaml"));
  CHECK(std::filesystem::exists(dir / "etc/traind/model.yaml"));
  // The first files the units read are valid specs.
  const ProcessResult checked =
      runTraind("check --cluster '" + (dir / "etc/traind/cluster.yaml").string() + "' --model '" +
                (dir / "etc/traind/model.yaml").string() + "'");
  INFO(checked.output);
  CHECK(checked.exit_code == 0);

  if (runShell("command -v systemd-analyze").exit_code != 0) {
    WARN("systemd-analyze not installed: the unit's syntax is not verified");
    return;
  }
  // verify reports unknown keys and bad values as warnings with exit code 0:
  // the unit passes when it says nothing at all. An instance name, since a
  // template alone is not a unit systemd can load.
  std::filesystem::copy_file(unit, dir / "traind@worker-0.service");
  const ProcessResult verified =
      runShell("systemd-analyze verify '" + (dir / "traind@worker-0.service").string() + "'");
  INFO(verified.output);
  CHECK(verified.exit_code == 0);
  CHECK(verified.output.empty());
}
