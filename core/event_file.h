// TensorBoard event files: what `tensorboard --logdir DIR` reads. A file is
// TFRecord framing (core/tfrecord.h) around serialized Event messages
// (core/summary.proto); its first event carries file_version "brain.Event:2".
//
//   EventFileWriter events("/var/lib/traind/fashion/summaries");
//   events.writeSessionStart(0);
//   events.writeScalars(100, {{"loss", 0.52}, {"learning_rate", 0.01}});
//   events.writeHistograms(100, {{"hidden1/kernel", summarizeHistogram(values)}});
//
// This header stays free of protobuf's: the daemon's step loop includes it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/histogram.h"

namespace traind {

// One value of a scalar chart. A '/' in the tag groups charts in
// TensorBoard ("test/loss" sits in the "test" section).
struct Scalar {
  std::string tag;
  double value = 0.0;  // stored as float32, as TensorFlow's simple_value
};

// TensorFlow's name for event files, which TensorBoard looks for:
// "events.out.tfevents.<unix seconds>.<hostname>".
std::string eventFileName(int64_t unix_seconds, const std::string& hostname);

class EventFileWriter {
 public:
  // Creates `dir` (and its parents) and a new event file in it, named by
  // eventFileName with this host's name; ".1", ".2", ... is appended when a
  // file of that name exists (a restart within the same second). Writes the
  // file_version event. Throws InputError naming the directory or the file
  // when either cannot be created.
  explicit EventFileWriter(const std::filesystem::path& dir);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  const std::filesystem::path& path() const { return path_; }

  // Whether path() no longer names the file this writer writes: it, or a
  // directory above it, was deleted or moved (a /tmp cleaner), and what it
  // writes reaches no reader.
  bool isGone() const;

  // One event with `scalars` at global step `step`. Every write is handed to
  // the kernel (fflush) before returning, so TensorBoard sees it at once,
  // but never fsync'ed: a slow disk does not hold training up. Throws
  // std::runtime_error naming the file when the write fails (a full disk).
  void writeScalars(int64_t step, const std::vector<Scalar>& scalars);

  // One event with a histogram per tag at global step `step`; written as
  // writeScalars' are.
  void writeHistograms(int64_t step,
                       const std::vector<std::pair<std::string, Histogram>>& histograms);

  // A SessionLog START at `step`: the job (re)starts at this step.
  // TensorBoard then drops the events of an earlier run in the same
  // directory at steps >= `step` (written after the checkpoint this run
  // resumes from), so no chart shows a step twice.
  void writeSessionStart(int64_t step);

 private:
  void writeEvent(const std::string& serialized_event);

  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
  std::string record_;  // the framing buffer, reused
};

}  // namespace traind
