#include "core/event_file.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <iterator>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/made_directories.h"
#include "core/summary.pb.h"
#include "core/tfrecord.h"
#include "daemon/step_log.h"
#include "daemon/training_summaries.h"
#include "test/temp_dir.h"

namespace traind {
namespace {

namespace fs = std::filesystem;

std::string readFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<tensorboard::Event> readEvents(const fs::path& path) {
  const std::string bytes = readFile(path);
  std::vector<tensorboard::Event> events;
  for (std::string_view record : splitTfRecords(bytes, path.string())) {
    tensorboard::Event event;
    REQUIRE(event.ParseFromArray(record.data(), int(record.size())));
    events.push_back(event);
  }
  return events;
}

uint32_t littleEndian32(std::string_view bytes) {
  uint32_t value = 0;
  for (size_t i = 0; i < 4; ++i) value |= uint32_t(uint8_t(bytes[i])) << (8 * i);
  return value;
}

}  // namespace

// RFC 3720 (iSCSI) B.4 and the usual check value.
TEST_CASE("crc32c matches the standard test vectors", "[crc32c]") {
  CHECK(crc32c("") == 0u);
  CHECK(crc32c("123456789") == 0xe3069283u);
  CHECK(crc32c(std::string(32, '\0')) == 0x8a9136aau);
  CHECK(crc32c(std::string(32, '\xff')) == 0x62a8ab43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(char(i));
    descending.push_back(char(31 - i));
  }
  CHECK(crc32c(ascending) == 0x46dd794eu);
  CHECK(crc32c(descending) == 0x113fdb5cu);
}

// Every length up to three words past a word's edge, from every alignment:
// the instruction's path (on a CPU that takes it) against the table's.
TEST_CASE("crc32c agrees with the table at every length and alignment", "[crc32c]") {
  std::string bytes(64 + 8, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = char((i * 167 + 13) & 0xff);
  for (size_t offset = 0; offset < 8; ++offset)
    for (size_t length = 0; length <= 64; ++length) {
      const std::string_view data = std::string_view(bytes).substr(offset, length);
      INFO("offset " << offset << ", length " << length);
      CHECK(crc32c(data) == crc32cPortable(data));
      CHECK(crc32c(data, 0x12345678u) == crc32cPortable(data, 0x12345678u));
    }
  CHECK(crc32cPortable("123456789") == 0xe3069283u);
}

TEST_CASE("crc32c continues from the CRC of the bytes before", "[crc32c]") {
  CHECK(crc32c("56789", crc32c("1234")) == crc32c("123456789"));
}

TEST_CASE("masked CRCs are TFRecord's and unmask back", "[crc32c]") {
  // ((crc >> 15) | (crc << 17)) + 0xa282ead8, by hand for one value.
  CHECK(maskCrc32c(0u) == 0xa282ead8u);
  CHECK(maskCrc32c(0x00008000u) == 0xa282ead9u);
  for (uint32_t crc : {0u, 1u, 0xe3069283u, 0xffffffffu, 0x80000000u}) {
    CHECK(unmaskCrc32c(maskCrc32c(crc)) == crc);
    CHECK(maskCrc32c(maskCrc32c(crc)) != crc);
  }
}

TEST_CASE("a TFRecord is framed as length, its CRC, data, its CRC", "[tfrecord]") {
  std::string file;
  appendTfRecord("hello", file);
  appendTfRecord("", file);
  REQUIRE(file.size() == 2 * (kTfRecordHeaderSize + kTfRecordFooterSize) + 5);
  CHECK(std::string_view(file).substr(0, 8) == std::string_view("\x05\0\0\0\0\0\0\0", 8));
  CHECK(littleEndian32(file.substr(8)) == maskCrc32c(crc32c(file.substr(0, 8))));
  CHECK(file.substr(12, 5) == "hello");
  CHECK(littleEndian32(file.substr(17)) == maskCrc32c(crc32c("hello")));

  const std::vector<std::string> records = splitTfRecords(file, "f");
  REQUIRE(records.size() == 2);
  CHECK(records[0] == "hello");
  CHECK(records[1].empty());
}

TEST_CASE("a damaged TFRecord file is rejected, naming file, record and fault", "[tfrecord]") {
  std::string file;
  appendTfRecord("first", file);
  const size_t second = file.size();
  appendTfRecord("second record", file);

  SECTION("cut short in the header") {
    CHECK_THROWS_WITH(splitTfRecords(std::string_view(file).substr(0, second + 7), "ev"),
                      Catch::Contains("ev: record 1 at byte 21") &&
                          Catch::Contains("12-byte record header, found 7 bytes"));
  }
  SECTION("cut short in the data") {
    CHECK_THROWS_WITH(
        splitTfRecords(std::string_view(file).substr(0, file.size() - 1), "ev"),
        Catch::Contains("record 1") &&
            Catch::Contains("declares 13 bytes of data and a 4-byte CRC, but only 16 bytes"));
  }
  SECTION("a length that lies, with a valid CRC: nothing is read past the end") {
    std::string lying(8, '\xff');
    const uint32_t crc = maskCrc32c(crc32c(lying));
    for (int i = 0; i < 4; ++i) lying.push_back(char(uint8_t(crc >> (8 * i))));
    CHECK_THROWS_WITH(splitTfRecords(lying + "data", "ev"),
                      Catch::Contains("declares 18446744073709551615 bytes"));
  }
  SECTION("a flipped bit in a length") {
    file[second] ^= 0x01;
    CHECK_THROWS_WITH(splitTfRecords(file, "ev"),
                      Catch::Contains("record 1") && Catch::Contains("CRC of the length"));
  }
  SECTION("a flipped bit in the data") {
    file[second + kTfRecordHeaderSize + 3] ^= 0x10;
    CHECK_THROWS_AS(splitTfRecords(file, "ev"), InputError);
    CHECK_THROWS_WITH(splitTfRecords(file, "ev"), Catch::Contains("CRC of the data"));
  }
}

TEST_CASE("event files are named as TensorFlow names them", "[event_file]") {
  CHECK(eventFileName(1700000000, "node-3") == "events.out.tfevents.1700000000.node-3");
}

TEST_CASE("an event file holds the version, then the events written", "[event_file]") {
  TempDir tmp;
  const fs::path dir = tmp / "run/summaries";
  fs::path path;
  {
    EventFileWriter writer(dir);
    path = writer.path();
    CHECK(path.parent_path() == dir);
    CHECK(path.filename().string().starts_with("events.out.tfevents."));
    writer.writeSessionStart(100);
    writer.writeScalars(150, {{"loss", 0.25}, {"test/accuracy", 0.875}});
    // Flushed: readable while the writer is still open.
    CHECK(readEvents(path).size() == 3);
  }
  const std::vector<tensorboard::Event> events = readEvents(path);
  REQUIRE(events.size() == 3);
  CHECK(events[0].file_version() == "brain.Event:2");
  CHECK(events[0].wall_time() > 1.6e9);
  CHECK(events[1].step() == 100);
  CHECK(events[1].session_log().status() == tensorboard::SessionLog::START);
  CHECK(events[2].step() == 150);
  CHECK(events[2].wall_time() >= events[0].wall_time());
  const tensorboard::Summary& summary = events[2].summary();
  REQUIRE(summary.value_size() == 2);
  CHECK(summary.value(0).tag() == "loss");
  CHECK(summary.value(0).simple_value() == 0.25f);
  CHECK(summary.value(1).tag() == "test/accuracy");
  CHECK(summary.value(1).simple_value() == 0.875f);
}

TEST_CASE("a resumed run writes no evaluation at the step it resumed from", "[event_file]") {
  TempDir tmp;
  ModelSpec spec;
  spec.loss = LossKind::MeanSquaredError;
  fs::path path;
  {
    // A rerun of a finished run at step 40 evaluates the checkpoint again.
    TrainingSummaries summaries(spec, tmp.path(), 40, {});
    summaries.logEvaluation(40, EvalResult{0.5, 0.0, 10});
    summaries.logEvaluation(41, EvalResult{0.25, 0.0, 10});
  }
  for (const fs::directory_entry& entry : fs::directory_iterator(tmp.path())) path = entry.path();
  const std::vector<tensorboard::Event> events = readEvents(path);
  REQUIRE(events.size() == 3);  // the version, START at 41, the evaluation at 41
  CHECK(events[1].session_log().status() == tensorboard::SessionLog::START);
  CHECK(events[2].step() == 41);
  CHECK(events[2].summary().value(0).tag() == "test/loss");
}

TEST_CASE("a run that wrote nothing past its start leaves no summaries in a directory made for it",
          "[event_file]") {
  TempDir tmp;
  ModelSpec spec;
  spec.loss = LossKind::MeanSquaredError;
  const fs::path made = tmp.path() / "ckpt" / "summaries";
  {
    // Stopped before its first step: its evaluation at the start is none.
    std::error_code error;
    fs::create_directories(tmp.path() / "ckpt");  // the checkpoint lock's
    TrainingSummaries summaries(spec, made, 40, makeDirectories(made, error));
    summaries.logEvaluation(40, EvalResult{0.5, 0.0, 10});
    CHECK(fs::exists(made));
  }
  CHECK_FALSE(fs::exists(made));
  CHECK(fs::exists(tmp.path() / "ckpt"));  // not made for the summaries
  {
    // Elsewhere (--summary-dir), with parents made for it: all go.
    std::error_code error;
    const fs::path deep = tmp.path() / "s" / "x" / "y";
    TrainingSummaries summaries(spec, deep, 0, makeDirectories(deep, error));
  }
  CHECK_FALSE(fs::exists(tmp.path() / "s"));
  // In a directory that was there, the file stays (a START among others'
  // files hides a crashed run's orphans); one step's window keeps it too.
  { TrainingSummaries summaries(spec, tmp.path(), 40, {}); }
  size_t files = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(tmp.path()))
    files += entry.is_regular_file();
  CHECK(files == 1);
  {
    std::error_code error;
    TrainingSummaries summaries(spec, made, 0, makeDirectories(made, error));
    summaries.logWindow(10, {0.5, std::nullopt, 0.1, 1000, 10, std::nullopt});
  }
  CHECK_FALSE(fs::is_empty(made));
}

TEST_CASE("summaries whose directory is deleted under the run go on in a new file there",
          "[event_file]") {
  TempDir tmp;
  ModelSpec spec;
  spec.loss = LossKind::MeanSquaredError;
  const fs::path dir = tmp.path() / "ckpt" / "summaries";
  TrainingSummaries summaries(spec, dir, 0, {dir});
  summaries.logWindow(10, {0.5, std::nullopt, 0.1, 1000, 10, std::nullopt});
  fs::remove_all(tmp.path() / "ckpt");  // a /tmp cleaner
  summaries.logWindow(20, {0.25, std::nullopt, 0.1, 1000, 10, std::nullopt});
  summaries.logWindow(30, {0.125, std::nullopt, 0.1, 1000, 10, std::nullopt});
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir))
    files.push_back(entry.path());
  REQUIRE(files.size() == 1);
  const std::vector<tensorboard::Event> events = readEvents(files[0]);
  REQUIRE(events.size() == 4);  // the version, START at 1, the windows at 20 and 30
  CHECK(events[1].session_log().status() == tensorboard::SessionLog::START);
  CHECK(events[2].step() == 20);
  CHECK(events[3].step() == 30);
}

TEST_CASE("an event file writer knows when its file is gone", "[event_file]") {
  TempDir tmp;
  EventFileWriter writer(tmp.path());
  CHECK(!writer.isGone());
  SECTION("deleted") { fs::remove(writer.path()); }
  SECTION("moved") { fs::rename(writer.path(), tmp.path() / "elsewhere"); }
  SECTION("replaced by another file of its name") {
    fs::rename(writer.path(), tmp.path() / "elsewhere");
    std::ofstream(writer.path()) << "x";
  }
  CHECK(writer.isGone());
}

TEST_CASE("a second writer in the same directory gets its own file", "[event_file]") {
  TempDir tmp;
  EventFileWriter first(tmp.path());
  EventFileWriter second(tmp.path());
  CHECK(first.path() != second.path());
  CHECK(readEvents(second.path()).size() == 1);
}

TEST_CASE("summaries whose first write fails (a full disk) end, not the run", "[event_file]") {
  TempDir tmp;
  ModelSpec spec;
  spec.training.summary_dir = (tmp.path() / "summaries").string();
  // In a child: no file may grow past 0 bytes (RLIMIT_FSIZE), as on a full
  // disk; the write then fails with EFBIG instead of a SIGXFSZ.
  const auto openInChild = [&] {
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      signal(SIGXFSZ, SIG_IGN);
      const rlimit none{0, 0};
      setrlimit(RLIMIT_FSIZE, &none);
      int code = 3;
      try {
        code = openTrainingSummaries(spec, 0) == nullptr ? 0 : 1;
      } catch (...) {
        code = 2;
      }
      _exit(code);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);  // no summaries, no exception
  };
  // Nor an empty event file, which TensorBoard would list with nothing in
  // it; the directory made for it goes too, one that was there stays.
  openInChild();
  CHECK(!fs::exists(tmp.path() / "summaries"));
  fs::create_directory(tmp.path() / "summaries");
  openInChild();
  CHECK(fs::is_empty(tmp.path() / "summaries"));
}

TEST_CASE("a summary directory is one run's: a second one writing there is refused",
          "[event_file]") {
  TempDir tmp;
  ModelSpec spec;
  spec.training.summary_dir = (tmp.path() / "summaries").string();
  const std::unique_ptr<TrainingSummaries> first = openTrainingSummaries(spec, 0);
  REQUIRE(first);
  CHECK_THROWS_WITH(openTrainingSummaries(spec, 0),
                    Catch::Contains("summary directory " + spec.training.summary_dir +
                                    " is in use by another run: TensorBoard would drop one run's "
                                    "points at the other's start; give each run a directory of "
                                    "its own"));
  // The run leaves no file of its own among TensorBoard's.
  for (const auto& entry : fs::directory_iterator(spec.training.summary_dir))
    CHECK_THAT(entry.path().filename().string(), Catch::StartsWith("events.out.tfevents."));
}

TEST_CASE("an event file that cannot be created names the directory", "[event_file]") {
  TempDir tmp;
  const std::string file = tmp.write("not-a-dir", "x");
  CHECK_THROWS_AS(EventFileWriter(fs::path(file) / "summaries"), InputError);
  CHECK_THROWS_WITH(EventFileWriter(fs::path(file) / "summaries"),
                    Catch::Contains("summary directory " + file + "/summaries"));
}

TEST_CASE("a run's last steps after its last log line get a line and a point", "[event_file]") {
  TempDir tmp;
  ModelSpec spec;
  spec.loss = LossKind::MeanSquaredError;
  spec.data.batch_size = 10;
  spec.training.log_every = 100;
  std::vector<int64_t> expected;
  SECTION("the summaries follow the log lines") { expected = {100, 200, 250}; }
  SECTION("summary_every of their own") {
    spec.training.summary_every = 120;
    expected = {120, 240, 250};
  }
  SECTION("a run that ends at a window's end") {
    spec.training.summary_every = 125;
    expected = {125, 250};
  }
  {
    StepLog log(spec, 0, 250,
                std::make_unique<TrainingSummaries>(spec, tmp.path(), 0, std::vector<fs::path>{}));
    for (int64_t step = 1; step <= 250; ++step) log.record(StepResult{double(step)}, step);
    log.closeWindows();
    log.closeWindows();  // nothing since
  }
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(tmp.path()))
    files.push_back(entry.path());
  REQUIRE(files.size() == 1);
  std::vector<int64_t> loss_steps;
  double last_loss = 0.0;
  for (const tensorboard::Event& event : readEvents(files[0]))
    for (const auto& value : event.summary().value())
      if (value.tag() == "loss") {
        loss_steps.push_back(event.step());
        last_loss = value.simple_value();
      }
  CHECK(loss_steps == expected);
  // The last point is the mean of its own steps' losses only.
  const int64_t first = expected[expected.size() - 2] + 1;
  CHECK(last_loss == Approx(double(first + 250) / 2.0));
}

TEST_CASE("a loss that is not finite, or past float32's range, is a divergence", "[step_log]") {
  checkLossFinite(StepResult{2.5}, 7);
  checkLossFinite(StepResult{3.0e38}, 7);
  CHECK_THROWS_MATCHES(checkLossFinite(StepResult{std::nan("")}, 7), Diverged,
                       Catch::Message("step 7: the loss is nan; lower the learning rate or check "
                                      "the data"));
  // Summed in double: finite, where a float32 loss (TensorFlow's) would be inf.
  CHECK_THROWS_MATCHES(checkLossFinite(StepResult{2.8e76}, 52), Diverged,
                       Catch::Message("step 52: the loss is 2.8e+76, past float32's range; lower "
                                      "the learning rate or check the data"));
}

}  // namespace traind
