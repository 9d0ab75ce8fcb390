#include "daemon/logging.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>

namespace traind {
namespace {

constexpr const char* kTimeAndLevel = "%Y-%m-%d %H:%M:%S.%e %l ";

// Writes log lines to stderr; when a progress line is showing, erases it
// first and draws it again below the new line.
class TerminalSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  void setProgress(const std::string& text) {
    std::lock_guard<std::mutex> lock(mutex_);
    progress_ = text;
    std::fprintf(stderr, "\r\033[K%s", progress_.c_str());
    std::fflush(stderr);
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    if (!progress_.empty()) std::fputs("\r\033[K", stderr);
    std::fwrite(formatted.data(), 1, formatted.size(), stderr);
    if (!progress_.empty()) std::fputs(progress_.c_str(), stderr);
    std::fflush(stderr);
  }
  void flush_() override { std::fflush(stderr); }

 private:
  std::string progress_;
};

std::shared_ptr<TerminalSink>& terminalSink() {
  static std::shared_ptr<TerminalSink> sink;
  return sink;
}

std::atomic<bool> g_progress_enabled{true};

}  // namespace

void enableProgress(bool enabled) { g_progress_enabled.store(enabled); }

bool progressEnabled() { return g_progress_enabled.load() && isatty(STDERR_FILENO) == 1; }

void setupLogging() {
  auto sink = std::make_shared<TerminalSink>();
  terminalSink() = sink;
  auto logger = std::make_shared<spdlog::logger>("traind", sink);
  logger->set_pattern(std::string(kTimeAndLevel) + "%v");
  spdlog::set_default_logger(logger);
}

void setLogPrefix(const std::string& prefix) {
  spdlog::default_logger()->set_pattern(std::string(kTimeAndLevel) + "[" + prefix + "] %v");
}

void showProgress(const std::string& text) {
  if (progressEnabled() && terminalSink()) terminalSink()->setProgress(text);
}

void clearProgress() { showProgress(""); }

}  // namespace traind
