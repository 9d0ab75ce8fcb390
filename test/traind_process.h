// Runs the real traind binary for integration tests and captures what it said.
#pragma once

#include <netinet/in.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace traind::testing {

struct ProcessResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `build/daemon/traind <args>` through the shell, in the source tree.
ProcessResult runTraind(const std::string& args);

// The same for another binary of build/daemon ("trainctl").
ProcessResult runDaemonBinary(const std::string& binary, const std::string& args);

// A fresh empty directory under the system temp dir, unique to this test.
std::filesystem::path freshTempDir(const std::string& name);

// The whole file; empty when there is none (yet: a log polled as it grows).
std::string readFile(const std::filesystem::path& path);
void writeFile(const std::filesystem::path& path, const std::string& text);

// The text of `from` with every occurrence of `what` replaced by `with`.
std::string replaceAll(std::string from, const std::string& what, const std::string& with);

// The value after "<key> = " in traind's final "done: ..." line
// (runtime_error when there is none).
double summaryValue(const std::string& output, const std::string& key);

// A tensor of the latest checkpoint in `checkpoint_dir`.
std::vector<float> readCheckpointTensor(const std::filesystem::path& checkpoint_dir,
                                        const std::string& name);

// The first `count` examples of Fashion-MNIST's `set` ("train", "t10k") as
// the bytes of an uncompressed TFRecord file, each as convert_to_records.py
// writes one (height, width, depth, label, image_raw): the same examples,
// in the same order, as the IDX files give.
std::string fashionMnistRecords(const std::string& set, int64_t count);

// Points (x, y) of a regression of one input as the bytes of an
// uncompressed TFRecord file: each a tf.train.Example whose float features
// "x" and "y" hold one value each.
std::string regressionRecords(const std::vector<std::pair<float, float>>& points);

}  // namespace traind::testing

namespace traind::testing {

// A traind process running in the background, its output going to a file.
// The destructor kills it (SIGKILL) if it still runs.
class BackgroundTraind {
 public:
  BackgroundTraind(const std::string& args, const std::filesystem::path& log);
  ~BackgroundTraind();
  BackgroundTraind(const BackgroundTraind&) = delete;
  BackgroundTraind& operator=(const BackgroundTraind&) = delete;

  // The exit code once it exits within `timeout_seconds` (0: has it exited?);
  // -1 on timeout (it keeps running), 128 + n when killed by signal n.
  int wait(double timeout_seconds);
  void signal(int signal_number);
  std::string output() const { return readFile(log_); }
  int pid() const { return pid_; }
  // Whether `text` appears in the output, past its first `from` bytes,
  // within `timeout_seconds`.
  bool waitForOutput(const std::string& text, double timeout_seconds = 30.0, size_t from = 0) const;

 private:
  int pid_ = -1;
  int exit_code_ = -1;
  std::filesystem::path log_;
};

// 127.0.0.1:port, for the tests' raw sockets.
sockaddr_in loopbackAddress(int port);

// A socket listening on 127.0.0.1:port (SO_REUSEADDR), for a test's fake
// server; -1 when it cannot be made.
int listenOnLoopback(int port, int backlog);

// A base port such that base .. base + count - 1 on 127.0.0.1 are free now.
int freePortRange(int count);

// The address list of a local cluster spec: "[127.0.0.1:p, 127.0.0.1:p+1]".
std::string localAddresses(int first_port, int count);

}  // namespace traind::testing
