#include "core/event_file.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include "core/error.h"
#include "core/summary.pb.h"
#include "core/tfrecord.h"

namespace traind {
namespace {

namespace fs = std::filesystem;

double secondsSinceEpoch() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string hostName() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

tensorboard::Event eventAt(int64_t step) {
  tensorboard::Event event;
  event.set_wall_time(secondsSinceEpoch());
  event.set_step(step);
  return event;
}

}  // namespace

std::string eventFileName(int64_t unix_seconds, const std::string& hostname) {
  return fmt::format("events.out.tfevents.{}.{}", unix_seconds, hostname);
}

EventFileWriter::EventFileWriter(const fs::path& dir) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error)
    throw InputError(
        fmt::format("summary directory {}: cannot create it: {}", dir.string(), error.message()));
  const std::string base = eventFileName(int64_t(secondsSinceEpoch()), hostName());
  // "x": never append to or truncate another writer's file.
  for (int n = 0; !file_ && n < 100; ++n) {
    path_ = dir / (n == 0 ? base : fmt::format("{}.{}", base, n));
    file_ = std::fopen(path_.c_str(), "wbx");
    if (!file_ && errno != EEXIST)
      throw InputError(fmt::format("summary directory {}: cannot create {}: {}", dir.string(),
                                   path_.filename().string(), std::strerror(errno)));
  }
  if (!file_)
    throw InputError(
        fmt::format("summary directory {}: {} and 99 numbered variants exist", dir.string(), base));
  tensorboard::Event event = eventAt(0);
  event.set_file_version("brain.Event:2");
  try {
    writeEvent(event.SerializeAsString());
  } catch (...) {
    // A run goes on without summaries (a full disk): the file is closed,
    // as the destructor of a writer never made would not, and removed, as
    // it holds no event that TensorBoard could read.
    std::fclose(file_);
    std::error_code ignored;
    fs::remove(path_, ignored);
    throw;
  }
}

EventFileWriter::~EventFileWriter() { std::fclose(file_); }

bool EventFileWriter::isGone() const {
  struct stat named = {};
  struct stat open = {};
  if (::stat(path_.c_str(), &named) != 0 || ::fstat(fileno(file_), &open) != 0) return true;
  return named.st_ino != open.st_ino || named.st_dev != open.st_dev;
}

void EventFileWriter::writeScalars(int64_t step, const std::vector<Scalar>& scalars) {
  tensorboard::Event event = eventAt(step);
  for (const Scalar& scalar : scalars) {
    tensorboard::Summary::Value* value = event.mutable_summary()->add_value();
    value->set_tag(scalar.tag);
    value->set_simple_value(float(scalar.value));
  }
  writeEvent(event.SerializeAsString());
}

void EventFileWriter::writeHistograms(
    int64_t step, const std::vector<std::pair<std::string, Histogram>>& histograms) {
  tensorboard::Event event = eventAt(step);
  for (const auto& [tag, h] : histograms) {
    tensorboard::Summary::Value* value = event.mutable_summary()->add_value();
    value->set_tag(tag);
    tensorboard::HistogramProto* histo = value->mutable_histo();
    histo->set_min(h.min);
    histo->set_max(h.max);
    histo->set_num(h.num);
    histo->set_sum(h.sum);
    histo->set_sum_squares(h.sum_squares);
    for (const double edge : h.bucket_limit) histo->add_bucket_limit(edge);
    for (const double count : h.bucket) histo->add_bucket(count);
  }
  writeEvent(event.SerializeAsString());
}

void EventFileWriter::writeSessionStart(int64_t step) {
  tensorboard::Event event = eventAt(step);
  event.mutable_session_log()->set_status(tensorboard::SessionLog::START);
  writeEvent(event.SerializeAsString());
}

void EventFileWriter::writeEvent(const std::string& serialized_event) {
  record_.clear();
  appendTfRecord(serialized_event, record_);
  if (std::fwrite(record_.data(), 1, record_.size(), file_) != record_.size() ||
      std::fflush(file_) != 0)
    throw std::runtime_error(
        fmt::format("{}: cannot write a summary: {}", path_.string(), std::strerror(errno)));
}

}  // namespace traind
