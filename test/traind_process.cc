#include "test/traind_process.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "core/checkpoint.h"
#include "core/dataset.h"
#include "core/example.pb.h"
#include "core/safetensors.h"
#include "core/tfrecord.h"

namespace traind::testing {

ProcessResult runTraind(const std::string& args) { return runDaemonBinary("traind", args); }

ProcessResult runDaemonBinary(const std::string& binary, const std::string& args) {
  const std::filesystem::path out = freshTempDir(binary) / "output.txt";
  const std::string command = std::string("cd '") + TRAIND_SOURCE_DIR + "' && '" +
                              TRAIND_BINARY_DIR + "/daemon/" + binary + "' " + args + " > '" +
                              out.string() + "' 2>&1";
  const int status = std::system(command.c_str());
  ProcessResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.output = readFile(out);
  return result;
}

std::filesystem::path freshTempDir(const std::string& name) {
  static int counter = 0;
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("traind-test-" + std::to_string(getpid()) + "-" + name + "-" +
                                     std::to_string(counter++));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string readFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void writeFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string replaceAll(std::string from, const std::string& what, const std::string& with) {
  for (size_t at = from.find(what); at != std::string::npos; at = from.find(what, at + with.size()))
    from.replace(at, what.size(), with);
  return from;
}

double summaryValue(const std::string& output, const std::string& key) {
  const size_t done = output.rfind("done: ");
  if (done == std::string::npos) throw std::runtime_error("no 'done:' line in the output");
  const std::string line = output.substr(done, output.find('\n', done) - done);
  std::smatch m;
  if (!std::regex_search(line, m, std::regex(key + " = ([0-9.eE+-]+)")))
    throw std::runtime_error("no '" + key + " = ' in: " + line);
  return std::stod(m[1]);
}

std::vector<float> readCheckpointTensor(const std::filesystem::path& checkpoint_dir,
                                        const std::string& name) {
  const std::filesystem::path checkpoint = resolveCheckpoint(checkpoint_dir);
  SafetensorsReader reader(checkpoint / readManifest(checkpoint).tensors_file);
  std::vector<float> values(size_t(numElements(reader.shape(name))));
  reader.read(name, reader.shape(name), values);
  return values;
}

std::string fashionMnistRecords(const std::string& set, int64_t count) {
  const std::string fashion = "/usr/share/datasets/fashion-mnist/";
  DataFiles idx;
  idx.images = fashion + set + "-images-idx3-ubyte.gz";
  idx.labels = fashion + set + "-labels-idx1-ubyte.gz";
  idx.limit = count;
  const Dataset data = loadIdxDataset(idx);
  std::string file;
  for (int64_t i = 0; i < data.size; ++i) {
    tensorflow::Example example;
    auto* features = example.mutable_features();
    const auto add = [&](const std::string& key) {
      tensorflow::FeatureEntry* entry = features->add_feature();
      entry->set_key(key);
      return entry->mutable_value();
    };
    add("height")->mutable_int64_list()->add_value(28);
    add("width")->mutable_int64_list()->add_value(28);
    add("depth")->mutable_int64_list()->add_value(1);
    add("label")->mutable_int64_list()->add_value(data.labels[size_t(i)]);
    add("image_raw")
        ->mutable_bytes_list()
        ->add_value(
            std::string(data.pixels.begin() + i * 784, data.pixels.begin() + (i + 1) * 784));
    appendTfRecord(example.SerializeAsString(), file);
  }
  return file;
}

std::string regressionRecords(const std::vector<std::pair<float, float>>& points) {
  std::string file;
  for (const auto& [x, y] : points) {
    tensorflow::Example example;
    for (const auto& [key, value] : {std::pair{"x", x}, std::pair{"y", y}}) {
      tensorflow::FeatureEntry* entry = example.mutable_features()->add_feature();
      entry->set_key(key);
      entry->mutable_value()->mutable_float_list()->add_value(value);
    }
    appendTfRecord(example.SerializeAsString(), file);
  }
  return file;
}

}  // namespace traind::testing

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <chrono>
#include <random>
#include <thread>

namespace traind::testing {

BackgroundTraind::BackgroundTraind(const std::string& args, const std::filesystem::path& log)
    : log_(log) {
  const std::string command = std::string("cd '") + TRAIND_SOURCE_DIR + "' && exec '" +
                              TRAIND_BINARY_DIR + "/daemon/traind' " + args + " > '" +
                              log.string() + "' 2>&1";
  pid_ = fork();
  if (pid_ == 0) {
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
}

BackgroundTraind::~BackgroundTraind() {
  if (exit_code_ < 0 && pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

int BackgroundTraind::wait(double timeout_seconds) {
  if (exit_code_ >= 0) return exit_code_;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(int64_t(timeout_seconds * 1000));
  for (;;) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_code_;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return -1;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
        deadline - now, std::chrono::milliseconds(20)));
  }
}

bool BackgroundTraind::waitForOutput(const std::string& text, double timeout_seconds,
                                     size_t from) const {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(int64_t(timeout_seconds * 1000));
  while (output().find(text, from) == std::string::npos) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

void BackgroundTraind::signal(int signal_number) {
  if (exit_code_ < 0) kill(pid_, signal_number);
}

sockaddr_in loopbackAddress(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

int listenOnLoopback(int port, int backlog) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0) return -1;
  const int on = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  const sockaddr_in addr = loopbackAddress(port);
  if (bind(listener, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(listener, backlog) != 0) {
    close(listener);
    return -1;
  }
  return listener;
}

namespace {

bool portFree(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = loopbackAddress(port);
  const bool free = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return free;
}

}  // namespace

int freePortRange(int count) {
  std::mt19937 rng(unsigned(getpid()) ^ unsigned(std::random_device{}()));
  for (;;) {
    const int base = 20000 + int(rng() % 30000);
    bool all = true;
    for (int p = base; p < base + count && all; ++p) all = portFree(p);
    if (all) return base;
  }
}

std::string localAddresses(int first_port, int count) {
  std::string s = "[";
  for (int i = 0; i < count; ++i)
    s += (i ? ", " : "") + std::string("127.0.0.1:") + std::to_string(first_port + i);
  return s + "]";
}

}  // namespace traind::testing
