// The C++ side of safetensors_interop.py: writes a checkpoint with traind's
// writer, or reads a file the Python safetensors library wrote, both holding
// the tensors sampleTensor() describes (the script computes the same values).
//
//   safetensors_interop_helper write <checkpoints dir>   prints the checkpoint's path
//   safetensors_interop_helper read <file.safetensors>   exit 0 if it holds the samples
// Errors go to stderr with exit status 1.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "core/checkpoint.h"
#include "core/safetensors.h"

namespace traind {
namespace {

struct SampleTensor {
  std::string name;
  Shape shape;
  std::vector<float> values;
};

// Values that float32 and the script's float arithmetic agree on exactly.
std::vector<SampleTensor> sampleTensors() {
  std::vector<SampleTensor> samples = {{"dense/kernel", {3, 4}, {}},
                                       {"dense/bias", {4}, {}},
                                       {"conv1/kernel", {2, 2, 1, 3}, {}},
                                       {"step_scale", {}, {}}};
  for (size_t t = 0; t < samples.size(); ++t) {
    const int64_t n = numElements(samples[t].shape);
    for (int64_t i = 0; i < n; ++i) samples[t].values.push_back(float(i - 5) / 8.0f + float(t));
  }
  return samples;
}

int write(const std::string& dir) {
  const std::vector<SampleTensor> samples = sampleTensors();
  std::vector<TensorRef> refs;
  for (const SampleTensor& s : samples) refs.push_back({s.name, s.shape, s.values.data()});
  CheckpointManifest manifest;
  manifest.global_step = 42;
  manifest.model_name = "interop";
  manifest.architecture_hash = "feedc0de";
  manifest.created = "2024-05-01T12:00:00Z";
  std::printf("%s\n", saveCheckpoint(dir, manifest, refs, 3).path.c_str());
  return 0;
}

int read(const std::string& file) {
  const SafetensorsReader reader(file);
  const std::vector<SampleTensor> samples = sampleTensors();
  if (reader.names().size() != samples.size()) {
    std::fprintf(stderr, "%s: %zu tensors, expected %zu\n", file.c_str(), reader.names().size(),
                 samples.size());
    return 1;
  }
  for (const SampleTensor& s : samples) {
    std::vector<float> values(s.values.size());
    reader.read(s.name, s.shape, values);
    if (values != s.values) {
      std::fprintf(stderr, "%s: tensor '%s' holds other values\n", file.c_str(), s.name.c_str());
      return 1;
    }
  }
  const auto writer = reader.metadata().find("writer");
  if (writer == reader.metadata().end() || writer->second != "python safetensors") {
    std::fprintf(stderr, "%s: metadata lacks writer: python safetensors\n", file.c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace traind

int main(int argc, char** argv) {
  const std::string command = argc == 3 ? argv[1] : "";
  try {
    if (command == "write") return traind::write(argv[2]);
    if (command == "read") return traind::read(argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: %s write <checkpoints dir> | read <file.safetensors>\n", argv[0]);
  return 2;
}
