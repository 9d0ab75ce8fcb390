// What a run whose training file was cut short under it must leave, for
// the tests of standalone runs and of a cluster's chief.
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <string>

#include "core/checkpoint.h"

namespace traind {

// Its log says the input failed and the steps before it were saved, naming
// the file `cut`; `checkpoints` holds a checkpoint of global step
// `min_step` or later.
inline void checkSavedBeforeInputFailure(const std::string& output,
                                         const std::filesystem::path& cut,
                                         const std::filesystem::path& checkpoints,
                                         int64_t min_step) {
  CHECK_THAT(output, Catch::Contains("the input failed after global step ") &&
                         Catch::Contains(": saving the steps trained before it") &&
                         Catch::Contains(cut.string() + ": the record at byte "));
  const auto latest = findLatestCheckpoint(checkpoints);
  REQUIRE(latest.has_value());
  CHECK(readManifest(*latest).global_step >= min_step);
}

}  // namespace traind
