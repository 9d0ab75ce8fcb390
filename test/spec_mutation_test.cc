// Random mutations of the example model and cluster specs: each is loaded
// or refused with an InputError that names the file and carries no raw
// control byte; no other exception, crash or hang. The mutations are what
// an editor's slip or a broken generator makes: a byte changed, a line lost,
// doubled, moved or indented otherwise, a value replaced by an extreme or by
// YAML of another kind, the file cut short, huge or deeply nested values.
// The example models' data files are replaced by empty files beside the
// mutated spec (a spec only needs them to exist), so that the test checks
// as much on a machine without the data set.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
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
#include "test/traind_process.h"

namespace fs = std::filesystem;
using namespace traind;
using traind::testing::readFile;
using traind::testing::writeFile;

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

// One random change to `text`. (std::mt19937 is the same everywhere; the
// standard distributions are not, hence plain remainders.)
std::string mutated(const std::string& text, std::mt19937& rng) {
  auto below = [&rng](size_t n) { return size_t(rng() % n); };
  std::vector<std::string> lines = linesOf(text);
  const size_t at = below(lines.size());
  std::string& line = lines[at];
  switch (below(8)) {
    case 0: {  // a byte changed
      std::string out = text;
      if (!out.empty()) out[below(out.size())] = char(below(256));
      return out;
    }
    case 1:  // a line lost
      lines.erase(lines.begin() + std::ptrdiff_t(at));
      break;
    case 2:  // a line doubled
      lines.insert(lines.begin() + std::ptrdiff_t(at), lines[at]);
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

// Where the example models read Fashion-MNIST from.
constexpr const char* kDataDir = "/usr/share/datasets/fashion-mnist/";

// An example spec as the test mutates it: its data files are empty files in
// `dir` (created here), named relative to the spec.
std::string withLocalData(std::string text, const fs::path& dir) {
  fs::create_directories(dir / "data");
  for (size_t at; (at = text.find(kDataDir)) != std::string::npos;) {
    const size_t end = text.find_first_of(" \n,}]", at);
    const std::string name =
        text.substr(at + std::strlen(kDataDir), end - at - std::strlen(kDataDir));
    std::ofstream(dir / "data" / name);
    text.replace(at, std::strlen(kDataDir), "data/");
  }
  return text;
}

// Control bytes other than the newline; bytes of 0x80 and above are UTF-8
// or escaped.
bool holdsControlByte(const std::string& text) {
  return std::any_of(text.begin(), text.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return (byte < 0x20 && byte != '\n') || byte == 0x7f;
  });
}

// `rounds` times over every example spec in configs/`folder`: writes a
// mutation of it (one or two changes) under the same name and runs `load`
// on it, which must load it or throw an InputError that names the file and
// holds no raw control byte. Checks that both outcomes come up often.
template <typename Load>
void mutateEach(const std::string& folder, uint32_t seed, int rounds, Load load) {
  TempDir dir;
  std::mt19937 rng(seed);
  const std::vector<fs::path> files = examples(folder);
  std::vector<std::string> originals;
  for (const fs::path& file : files) originals.push_back(withLocalData(readFile(file), dir.path()));
  int cases = 0, refused = 0, changed_and_loaded = 0;
  for (int round = 0; round < rounds; ++round) {
    for (size_t f = 0; f < files.size(); ++f) {
      std::string text = originals[f];
      for (int changes = 1 + int(rng() % 2); changes > 0; --changes) text = mutated(text, rng);
      const std::string path = (dir / files[f].filename().string()).string();
      writeFile(path, text);
      ++cases;
      try {
        load(path);
        changed_and_loaded += text != originals[f];
      } catch (const InputError& e) {
        ++refused;
        const std::string what = e.what();
        INFO("the mutated file:\n" << text.substr(0, 4000) << "\nthe error: " << what);
        CHECK(what.find(path) != std::string::npos);
        CHECK_FALSE(holdsControlByte(what));
      } catch (const std::exception& e) {
        FAIL("not an InputError: " << e.what() << "\nthe mutated file:\n" << text.substr(0, 4000));
      }
    }
  }
  // Both outcomes, often, or the mutations test little: a loaded mutation
  // went through every check the spec's fields have.
  INFO(cases << " mutations, " << refused << " refused, " << changed_and_loaded
             << " changed and loaded");
  CHECK(refused > cases / 4);
  CHECK(changed_and_loaded > cases / 20);
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
