// What spdlog's default logger writes while a CapturedLog lives, as text:
// for tests of what a role says, in process.
//
//   CapturedLog log;
//   runStandalone(...);
//   CHECK_THAT(log.text(), Catch::Contains("saved checkpoint"));
#pragma once

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <sstream>
#include <string>

namespace traind::testing {

class CapturedLog {
 public:
  CapturedLog() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(text_)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~CapturedLog() { spdlog::default_logger()->sinks().pop_back(); }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;

  std::string text() const { return text_.str(); }

 private:
  std::ostringstream text_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

}  // namespace traind::testing
