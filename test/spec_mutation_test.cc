// Random mutations of the example model and cluster specs: each is loaded
// or refused with an InputError that names the file and carries no raw
// control byte; no other exception, crash or hang. The mutations are what
// an editor's slip or a broken generator makes: a byte changed, a line lost,
// doubled or moved, a value replaced by an extreme or by YAML of another
// kind, the file cut short, huge or deeply nested values.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/cluster_spec.h"
#include "core/error.h"
#include "core/layer_graph.h"
#include "core/model_spec.h"
#include "core/stage_plan.h"
#include "test/temp_dir.h"

namespace fs = std::filesystem;
using namespace traind;

namespace {

// What a value may be replaced with: numbers at and past the limits of
// their types, YAML of other kinds, broken syntax, control and non-UTF-8 bytes.
// clang-format off
const std::vector<std::string> kValues = {
    "-1", "0", "1.5", "1e308", "-1e308", "1e-50", "99999999999999999999", "2147483648",
    "9223372036854775808", "-9223372036854775809", "0x10", ".nan", ".inf", "-.inf",
    "[]", "{}", "~", "null", "true", "[1, [2, [3]]]", "{a: 1}", "- - - 1", "? x",
    "*anchor", "&a 5", "!!binary aGVsbG8=", "'", "\"", "|", ">",
    "\"\\x1b\"", "\xc3\xb1", "\t", "\x01\xff"};
// clang-format on

std::vector<std::string> linesOf(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  if (lines.empty()) lines.emplace_back();
  return lines;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& line : lines) out += line + "\n";
  return out;
}

// A flow list of `n` ones.
std::string longList(size_t n) {
  std::string out = "[1";
  for (size_t i = 1; i < n; ++i) out += ", 1";
  return out + "]";
}

// One random change to `text`.
std::string mutated(const std::string& text, std::mt19937& rng) {
  auto below = [&rng](size_t n) {
    return size_t(std::uniform_int_distribution<size_t>(0, n - 1)(rng));
  };
  std::vector<std::string> lines = linesOf(text);
  std::string& line = lines[below(lines.size())];
  switch (below(8)) {
    case 0: {  // a byte changed
      std::string out = text;
      if (!out.empty()) out[below(out.size())] = char(below(256));
      return out;
    }
    case 1:  // a line lost
      lines.erase(lines.begin() + std::ptrdiff_t(&line - lines.data()));
      break;
    case 2:  // a line doubled
      lines.insert(lines.begin() + std::ptrdiff_t(&line - lines.data()), std::string(line));
      break;
    case 3:  // a value replaced
      if (const size_t colon = line.find(':'); colon != std::string::npos)
        line = line.substr(0, colon + 1) + " " + kValues[below(kValues.size())];
      break;
    case 4:  // cut short
      return text.substr(0, below(text.size() + 1));
    case 5:  // indented otherwise
      line = std::vector<std::string>{"", " ", "    ", "\t"}[below(4)] +
             line.substr(std::min(line.find_first_not_of(" \t"), line.size()));
      break;
    case 6:  // two lines swapped
      std::swap(line, lines[below(lines.size())]);
      break;
    default:  // a huge or deeply nested value
      if (const size_t colon = line.find(':'); colon != std::string::npos) {
        const size_t kind = below(3);
        const std::string huge = kind == 0   ? std::string(5000, '[') + std::string(5000, ']')
                                 : kind == 1 ? longList(20000)
                                             : std::string(200000, 'x');
        line = line.substr(0, colon + 1) + " " + huge;
      }
  }
  return joined(lines);
}

std::vector<fs::path> examples(const std::string& folder) {
  std::vector<fs::path> files;
  for (const auto& entry :
       fs::directory_iterator(std::string(TRAIND_SOURCE_DIR) + "/configs/" + folder))
    if (entry.path().extension() == ".yaml") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  REQUIRE(!files.empty());
  return files;
}

std::string contentsOf(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// `rounds` times over every example spec in configs/`folder`: writes a
// mutation of it (one to three changes) under the same name and runs
// `load` on it, which must load it or throw an InputError that names the
// file and holds no raw control byte. Checks that both outcomes came up.
template <typename Load>
void mutateEach(const std::string& folder, uint32_t seed, int rounds, Load load) {
  TempDir dir;
  std::mt19937 rng(seed);
  const std::vector<fs::path> files = examples(folder);
  int cases = 0, refused = 0;
  for (int round = 0; round < rounds; ++round) {
    for (const fs::path& file : files) {
      std::string text = contentsOf(file);
      for (int changes = 1 + int(rng() % 3); changes > 0; --changes) text = mutated(text, rng);
      const std::string path = (dir / file.filename().string()).string();
      std::ofstream(path, std::ios::binary) << text;
      ++cases;
      try {
        load(path);
      } catch (const InputError& e) {
        ++refused;
        const std::string what = e.what();
        INFO("the mutated file:\n" << text.substr(0, 2000) << "\nthe error: " << what);
        CHECK(what.find(path) != std::string::npos);
        CHECK(std::none_of(what.begin(), what.end(),
                           [](char c) { return (c >= 0 && c < 0x20 && c != '\n') || c == 0x7f; }));
      } catch (const std::exception& e) {
        FAIL("not an InputError: " << e.what() << "\nthe mutated file:\n" << text.substr(0, 2000));
      }
    }
  }
  // Both outcomes, or the mutations test little.
  CHECK(refused > cases / 4);
  CHECK(refused < cases);
}

}  // namespace

TEST_CASE("mutated model specs load or are refused naming the file", "[spec_mutation]") {
  mutateEach("models", 20261123, 60, [](const std::string& path) {
    const ModelSpec spec = loadModelSpec(path);
    const LayerGraph graph = buildLayerGraph(spec);
    planStages(spec, graph, spec.training.devices);
  });
}

TEST_CASE("mutated cluster specs load or are refused naming the file", "[spec_mutation]") {
  mutateEach("clusters", 20261124, 100, [](const std::string& path) { loadClusterSpec(path); });
}
