// safetensors (huggingface/safetensors), the tensor file of a checkpoint:
// the format's constants and its reader and writer in one place, so what one
// writes is what the other accepts, and PyTorch, NumPy and the safetensors
// library read our checkpoints.
//
// Layout:
//   u64 little-endian N | N bytes of JSON header | data
// The header is an object: an optional "__metadata__" object of string
// values, and per tensor {"dtype":"F32","shape":[...],"data_offsets":[b,e]},
// byte offsets into the data section, which follows the header (padded with
// spaces so that the data starts 8-byte aligned) and holds the tensors
// row-major and little-endian.
//
// traind stores float32 only; the reader rejects other dtypes by name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/shape.h"

namespace traind {

namespace safetensors_format {
inline constexpr size_t kHeaderSizeBytes = 8;           // the u64 before the JSON header
inline constexpr size_t kDataAlignment = 8;             // the data section starts on it
// The library's own limit is 100 MB; read as JSON values, a header takes up
// to 22 times its size in memory. traind's headers take about 80 bytes a
// tensor: 16 MiB holds 200,000 of them.
inline constexpr uint64_t kMaxHeaderBytes = uint64_t(16) << 20;
inline constexpr size_t kMaxRank = 32;         // a shape's dimensions
inline constexpr size_t kMaxNameBytes = 4096;  // a tensor's name
inline constexpr std::string_view kMetadataKey = "__metadata__";
inline constexpr std::string_view kFloat32 = "F32";
}  // namespace safetensors_format

// Closes a FILE held by a unique_ptr (the reader's and the writer's).
struct FileCloser {
  void operator()(std::FILE* file) const { std::fclose(file); }
};

struct TensorRef {
  std::string name;
  Shape shape;
  const float* data;  // numElements(shape) floats
};

// The JSON header writeSafetensors writes for `tensors` (their data is not
// read), padded so that the data starts aligned. std::invalid_argument on
// duplicate or reserved names, a negative dimension, and what the reader
// refuses: a header over kMaxHeaderBytes, a name over kMaxNameBytes, a
// shape over kMaxRank dimensions (what is written must read back).
std::string safetensorsHeader(const std::vector<TensorRef>& tensors,
                              const std::map<std::string, std::string>& metadata);

// Writes `tensors` in the given order, with `metadata` as "__metadata__"
// (left out when empty). A plain write: callers that need the file complete
// or absent write it under a temporary name, fsync and rename it.
// std::invalid_argument as safetensorsHeader; std::system_error when the
// file cannot be written.
void writeSafetensors(const std::filesystem::path& path, const std::vector<TensorRef>& tensors,
                      const std::map<std::string, std::string>& metadata);

// Reads a safetensors file's header and validates it on open, so a corrupt
// file fails before anything uses it: header size against the file size (a
// lying header cannot cause a large allocation, nor can one of many
// dimensions or a name of megabytes), JSON syntax, F32 only,
// shapes, offsets within the data section and not overlapping, each
// tensor's byte length equal to its shape's, and the tensors packed from
// the data section's first byte to its last, no gap between two (as the
// safetensors library requires). A tensor's data is read
// only when it is asked for, into the caller's buffer, once its shape has
// been found to be the one expected: a header that claims huge tensors (in
// a sparse file, say) costs nothing until a caller sized for them reads
// one, and tensors nobody asks for are never read. The file stays open, so
// reads see the file opened even when its checkpoint is pruned meanwhile.
class SafetensorsReader {
 public:
  // InputError naming the file and what is wrong when it is missing or corrupt.
  explicit SafetensorsReader(const std::filesystem::path& path);

  // Tensor names, sorted.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;
  // InputError if absent.
  const Shape& shape(const std::string& name) const;
  // Reads the tensor into dst (numElements(expected) floats). InputError
  // naming the file and the tensor if it is absent, its shape is not
  // `expected`, a value is not finite, or the file ends before it.
  void read(const std::string& name, const Shape& expected, std::span<float> dst) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  struct Entry {
    Shape shape;
    uint64_t begin = 0;  // byte offsets into the data section
    uint64_t end = 0;
  };
  const Entry& entry(const std::string& name) const;
  // `size` bytes at `offset` of the file into dst; InputError naming the
  // file when it cannot be read or ends before them.
  void readAt(uint64_t offset, std::byte* dst, uint64_t size) const;

  std::filesystem::path path_;
  std::unique_ptr<std::FILE, FileCloser> file_;  // read with pread, at offsets: reads are const
  std::map<std::string, Entry> tensors_;
  std::map<std::string, std::string> metadata_;
  uint64_t data_begin_ = 0;  // the data section's offset in the file
};

}  // namespace traind
