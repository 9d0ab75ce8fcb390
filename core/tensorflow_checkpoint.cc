#include "core/tensorflow_checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <numeric>
#include <set>
#include <sstream>
#include <thread>
#include <variant>

#include "core/checkpoint.h"
#include "core/crc32c.h"
#include "core/directory_lock.h"
#include "core/error.h"
#include "core/printable.h"
#include "core/read_at.h"
#include "core/tensor_bundle.pb.h"
#include "core/trackable_object_graph.pb.h"

namespace traind {

// Tensor bytes are copied into float and int64 arrays as they are.
static_assert(std::endian::native == std::endian::little, "checkpoint data is little-endian");

namespace {

namespace tc = tensorflow_checkpoint_format;

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what) {
  throw InputError(path.string() + ": " + what);
}

// ".data-00001-of-00003": a data file's name after the checkpoint's prefix.
std::string dataFileSuffix(int shard, int shards) {
  return fmt::format(".data-{:05d}-of-{:05d}", shard, shards);
}

// TensorFlow's DataType numbers, their names (for messages and trainctl
// inspect) and the bytes of one element; 0 for strings, variants and
// resources, whose entries' sizes are then taken as they are.
struct DataType {
  int number;
  std::string_view name;
  uint64_t element_bytes;
};
constexpr DataType kDataTypes[] = {
    {tc::kDataTypeFloat, "float32", 4},
    {2, "float64", 8},
    {tc::kDataTypeInt32, "int32", 4},
    {4, "uint8", 1},
    {5, "int16", 2},
    {6, "int8", 1},
    {tc::kDataTypeString, "string", 0},
    {tc::kDataTypeInt64, "int64", 8},
    {10, "bool", 1},
    {14, "bfloat16", 2},
    {19, "float16", 2},
    {20, "resource", 0},
    {21, "variant", 0},
};

const DataType* findDataType(int dtype) {
  for (const DataType& type : kDataTypes)
    if (type.number == dtype) return &type;
  return nullptr;
}

std::string dataTypeName(int dtype) {
  const DataType* type = findDataType(dtype);
  return type ? std::string(type->name) : fmt::format("dtype {}", dtype);
}

uint64_t elementBytes(int dtype) {
  const DataType* type = findDataType(dtype);
  return type ? type->element_bytes : 0;
}

// A cursor over bytes of the index that fails, naming the file and the
// place, instead of reading past them.
class Bytes {
 public:
  Bytes(std::string_view data, const std::filesystem::path& file, std::string where)
      : data_(data), file_(file), where_(std::move(where)) {}

  bool empty() const { return data_.empty(); }
  size_t size() const { return data_.size(); }

  uint64_t varint(int max_bits) {
    uint64_t value = 0;
    for (int shift = 0; shift < max_bits; shift += 7) {
      if (data_.empty()) corrupt("a number runs past its block");
      const auto byte = uint8_t(data_.front());
      data_.remove_prefix(1);
      value |= uint64_t(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) {
        if (max_bits < 64 && (value >> max_bits) != 0) corrupt("a number is out of range");
        return value;
      }
    }
    corrupt("a number is longer than its encoding allows");
  }

  std::string_view take(uint64_t size) {
    if (size > data_.size()) corrupt("an entry runs past its block");
    const std::string_view taken = data_.substr(0, size);
    data_.remove_prefix(size);
    return taken;
  }

  [[noreturn]] void corrupt(const std::string& what) const {
    fail(file_, where_ + ": " + what + " (the file is corrupt)");
  }

  // Past one of the bounds on what a checkpoint of a model traind trains
  // holds (tensorflow_checkpoint_format): not corrupt, perhaps, but not read.
  [[noreturn]] void pastBound(const std::string& what) const {
    fail(file_, where_ + ": " + what + ", past what a checkpoint of a model traind trains holds");
  }

 private:
  std::string_view data_;
  const std::filesystem::path& file_;
  std::string where_;
};

uint32_t fixed32(std::string_view bytes) {
  uint32_t value = 0;
  std::memcpy(&value, bytes.data(), sizeof value);
  return value;
}

// The CRC32C TensorFlow takes of a string's length (tensor_bundle.cc,
// WriteStringTensor): over it as a little-endian uint32, or uint64 from
// 2^32 on, not over its varint.
uint32_t stringLengthCrc32c(uint64_t length) {
  const auto length32 = uint32_t(length);
  return length <= UINT32_MAX
             ? crc32c(std::string_view(reinterpret_cast<const char*>(&length32), sizeof length32))
             : crc32c(std::string_view(reinterpret_cast<const char*>(&length), sizeof length));
}

// The string of a string scalar's `bytes` (encodeStringScalar's), checked
// against both CRC32Cs (the entry's `masked_crc`); fails naming `file` and
// `where`.
std::string_view decodeStringScalar(std::string_view bytes, uint32_t masked_crc,
                                    const std::filesystem::path& file, const std::string& where) {
  Bytes scalar(bytes, file, where);
  const uint64_t length = scalar.varint(64);
  uint32_t crc = stringLengthCrc32c(length);
  const std::string_view length_crc = scalar.take(4);
  if (fixed32(length_crc) != maskCrc32c(crc))
    scalar.corrupt("its length does not match its CRC32C");
  if (length != scalar.size())
    scalar.corrupt(fmt::format("a string of {} bytes in {} bytes", length, scalar.size()));
  const std::string_view value = scalar.take(length);
  crc = crc32c(value, crc32c(length_crc, crc));
  if (crc != unmaskCrc32c(masked_crc))
    fail(file, where +
                   ": its bytes do not match the index's CRC32C (the file is corrupt, or not "
                   "this index's)");
  return value;
}

// The field a protocol buffer's `message` holds next, after its tag: a
// length-delimited field's contents, the others' bytes skipped (empty).
std::pair<uint64_t, std::string_view> nextField(Bytes& message) {
  const uint64_t tag = message.varint(32);
  switch (tag & 7) {
    case 0:
      message.varint(64);
      return {tag >> 3, {}};
    case 1:
      message.take(8);
      return {tag >> 3, {}};
    case 2:
      return {tag >> 3, message.take(message.varint(32))};
    case 5:
      message.take(4);
      return {tag >> 3, {}};
    default:
      message.corrupt(fmt::format("a field of wire type {}", tag & 7));
  }
}

// Counts a TrackableObjectGraph's objects, and their children and slot
// variables, on the wire, before it is parsed, against
// tensorflow_checkpoint_format's bounds.
void checkObjectGraphCounts(std::string_view wire, const std::filesystem::path& file,
                            const std::string& where) {
  Bytes graph(wire, file, where);
  size_t objects = 0, references = 0;
  while (!graph.empty()) {
    const auto [field, object] = nextField(graph);
    if (field != 1) continue;  // TrackableObjectGraph.nodes
    if (++objects > tc::kMaxObjects)
      graph.pastBound(fmt::format("more than {} objects", tc::kMaxObjects));
    Bytes fields(object, file, where);
    while (!fields.empty()) {
      const uint64_t field_number = nextField(fields).first;
      if ((field_number == 1 || field_number == 3) &&  // children, slot_variables
          ++references > tc::kMaxObjectChildren)
        graph.pastBound(fmt::format("more than {} children and slot variables of objects",
                                    tc::kMaxObjectChildren));
    }
  }
}

struct BlockHandle {
  uint64_t offset = 0;
  uint64_t size = 0;
};

BlockHandle readHandle(Bytes& bytes) {
  BlockHandle handle;
  handle.offset = bytes.varint(64);
  handle.size = bytes.varint(64);
  return handle;
}

// The contents of the block at `handle` of the index file `index`, checked
// against the CRC32C of its trailer.
std::string_view blockAt(std::string_view index, const BlockHandle& handle,
                         const std::filesystem::path& path) {
  const std::string where = fmt::format("block at offset {}", handle.offset);
  if (handle.offset > index.size() || handle.size > index.size() - handle.offset ||
      index.size() - handle.offset - handle.size < tc::kBlockTrailerBytes)
    fail(path, fmt::format("{} of {} bytes: it runs past the file's end at {} (the file is "
                           "truncated or corrupt)",
                           where, handle.size, index.size()));
  const std::string_view contents = index.substr(handle.offset, handle.size);
  const std::string_view trailer =
      index.substr(handle.offset + handle.size, tc::kBlockTrailerBytes);
  const uint32_t actual = crc32c(trailer.substr(0, 1), crc32c(contents));
  if (unmaskCrc32c(fixed32(trailer.substr(1))) != actual)
    fail(path, where + ": its CRC32C does not match its bytes (the file is corrupt)");
  if (trailer[0] != 0)
    fail(path, fmt::format("{} is compressed (type {}): traind reads uncompressed tables, as "
                           "TensorFlow writes its checkpoints' indexes",
                           where, int(uint8_t(trailer[0]))));
  return contents;
}

// The key/value entries of a block in order: each key is stored as the
// number of bytes it shares with the one before in the block, then the
// rest. `previous` is the key before the block's first (the keys of a table
// increase across its blocks), and becomes its last.
void forEachEntry(
    std::string_view block, const std::filesystem::path& path, const std::string& where,
    std::optional<std::string>& previous,
    const std::function<void(const std::string& key, std::string_view value)>& visit) {
  Bytes bytes(block, path, where);
  if (block.size() < sizeof(uint32_t)) bytes.corrupt("shorter than its restart count");
  const uint64_t restarts = fixed32(block.substr(block.size() - sizeof(uint32_t)));
  if (restarts == 0) bytes.corrupt("no restart points, where a block has one at least");
  if (restarts > (block.size() - sizeof(uint32_t)) / sizeof(uint32_t))
    bytes.corrupt(
        fmt::format("{} restart points do not fit in its {} bytes", restarts, block.size()));
  const size_t entries_end = block.size() - sizeof(uint32_t) * (restarts + 1);
  Bytes entries(block.substr(0, entries_end), path, where);
  std::string key;
  while (!entries.empty()) {
    const uint64_t shared = entries.varint(32);
    const uint64_t unshared = entries.varint(32);
    const uint64_t value_size = entries.varint(32);
    if (shared > key.size()) entries.corrupt("a key shares more bytes than the key before has");
    if (shared + unshared > tc::kMaxKeyBytes)
      entries.pastBound(fmt::format("a key of {} bytes (a tensor's name takes at most {})",
                                    shared + unshared, tc::kMaxKeyBytes));
    key.resize(shared);
    key += entries.take(unshared);
    if (previous && key <= *previous) entries.corrupt("its keys are out of order");
    previous = key;
    visit(key, entries.take(value_size));
  }
}

std::string readWholeFile(const std::filesystem::path& path, uint64_t max_bytes,
                          std::string_view what) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    if (std::filesystem::exists(path, ec)) fail(path, "not a regular file");
    fail(path, "cannot open: no such file");
  }
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) fail(path, "cannot read its size: " + ec.message());
  if (size > max_bytes)
    fail(path,
         fmt::format("{} bytes, past the {} {} traind reads may take", size, max_bytes, what));
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) fail(path, std::string("cannot open: ") + std::strerror(errno));
  std::string bytes(size, '\0');
  if (!in.read(bytes.data(), std::streamsize(size)) || in.gcount() != std::streamsize(size))
    fail(path, "cannot read it whole (is it being written?)");
  return bytes;
}

// A shape whose element count fits in an int64 (the bytes of a tensor of a
// fixed-size dtype are checked against it as well; a partitioned or a string
// tensor's shape is bounded by this only).
Shape readShape(const tensorflow::TensorShapeProto& proto, Bytes& where) {
  if (proto.unknown_rank()) where.corrupt("its shape is of unknown rank");
  if (proto.dim_size() > tc::kMaxRank)
    where.corrupt(
        fmt::format("a shape of rank {}, past TensorFlow's {}", proto.dim_size(), tc::kMaxRank));
  Shape shape;
  for (const auto& dim : proto.dim()) {
    if (dim.size() < 0) where.corrupt(fmt::format("a dimension of {}", dim.size()));
    shape.push_back(dim.size());
  }
  if (numElementsSaturated(shape) == INT64_MAX)
    where.corrupt("a shape of more elements than an int64 counts: " + shapeToString(shape));
  return shape;
}

// The key a part of a partitioned variable is saved under: TensorFlow's
// EncodeTensorNameSlice, in its OrderedCode (byte strings that sort as the
// values do): the number 0, the variable's name, the rank, then each
// dimension's start and length (-1: all of it).
void appendNumberIncreasing(std::string& key, uint64_t value) {
  std::string bytes;  // big-endian, without leading zeros, after their count
  for (; value != 0; value >>= 8) bytes.insert(bytes.begin(), char(value & 0xff));
  key += char(bytes.size());
  key += bytes;
}

void appendStringIncreasing(std::string& key, std::string_view text) {
  for (const char c : text) {
    if (c == '\0')
      key += std::string_view("\0\xff", 2);
    else if (c == '\xff')
      key += std::string_view("\xff\0", 2);
    else
      key += c;
  }
  key += std::string_view("\0\x01", 2);
}

void appendSignedNumberIncreasing(std::string& key, int64_t value) {
  const uint64_t magnitude = value < 0 ? ~uint64_t(value) : uint64_t(value);
  if (magnitude < 64) {  // one byte: a header bit, then the value's 7
    key += char(uint8_t(0x80 ^ uint64_t(value)));
    return;
  }
  // The value big-endian and sign-extended to 10 bytes, of which the last
  // `length` are kept, their first bits (as many as length) marking it.
  const int bits = 64 - std::countl_zero(magnitude);
  const int length = bits / 7 + 1;
  uint8_t bytes[10];
  bytes[0] = bytes[1] = value < 0 ? 0xff : 0;
  for (int i = 0; i < 8; ++i) bytes[2 + i] = uint8_t(uint64_t(value) >> (56 - 8 * i));
  static constexpr uint8_t kHeader[11][2] = {{0, 0},    {0x80, 0},    {0xc0, 0},   {0xe0, 0},
                                             {0xf0, 0}, {0xf8, 0},    {0xfc, 0},   {0xfe, 0},
                                             {0xff, 0}, {0xff, 0x80}, {0xff, 0xc0}};
  uint8_t* begin = bytes + 10 - length;
  begin[0] ^= kHeader[length][0];
  begin[1] ^= kHeader[length][1];
  key.append(reinterpret_cast<const char*>(begin), size_t(length));
}

std::string sliceKey(std::string_view name, const std::vector<int64_t>& start,
                     const std::vector<int64_t>& length) {
  std::string key;
  appendNumberIncreasing(key, 0);
  appendStringIncreasing(key, name);
  appendNumberIncreasing(key, start.size());
  for (size_t d = 0; d < start.size(); ++d) {
    appendSignedNumberIncreasing(key, start[d]);
    appendSignedNumberIncreasing(key, length[d]);
  }
  return key;
}

void appendVarint(std::string& bytes, uint64_t value) {
  for (; value >= 0x80; value >>= 7) bytes += char(uint8_t(value) | 0x80);
  bytes += char(uint8_t(value));
}

void appendFixed32(std::string& bytes, uint32_t value) {
  bytes.append(reinterpret_cast<const char*>(&value), sizeof value);
}

// A string scalar's bytes as TensorFlow writes them (tensor_bundle.cc,
// WriteStringTensor): the string's length as a varint, the masked CRC32C of
// that length (stringLengthCrc32c), then the string. The entry's CRC32C
// goes on over the length's masked CRC32C and the string; `crc` gets it
// (unmasked).
std::string encodeStringScalar(std::string_view value, uint32_t& crc) {
  std::string bytes;
  appendVarint(bytes, value.size());
  crc = stringLengthCrc32c(value.size());
  const size_t length_crc_at = bytes.size();
  appendFixed32(bytes, maskCrc32c(crc));
  crc = crc32c(value, crc32c(std::string_view(bytes).substr(length_crc_at), crc));
  bytes += value;
  return bytes;
}

// A table block of `entries` (sorted), every entry a restart point (no key
// shares bytes with the one before: simpler, and as valid), then its
// trailer: appended to `file`; returns its handle.
BlockHandle appendBlock(std::string& file,
                        const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string block;
  std::vector<uint32_t> restarts;
  for (const auto& [key, value] : entries) {
    restarts.push_back(uint32_t(block.size()));
    appendVarint(block, 0);
    appendVarint(block, key.size());
    appendVarint(block, value.size());
    block += key;
    block += value;
  }
  if (restarts.empty()) restarts.push_back(0);  // an empty block has one, at 0
  for (const uint32_t restart : restarts) appendFixed32(block, restart);
  appendFixed32(block, uint32_t(restarts.size()));
  const BlockHandle handle{file.size(), block.size()};
  const char uncompressed = 0;
  file += block;
  file += uncompressed;
  appendFixed32(file, maskCrc32c(crc32c(std::string_view(&uncompressed, 1), crc32c(block))));
  return handle;
}

void appendHandle(std::string& bytes, const BlockHandle& handle) {
  appendVarint(bytes, handle.offset);
  appendVarint(bytes, handle.size);
}

// How long an export waits for another writer of its directory: an export
// takes seconds. A traind run writing its TensorBoard summaries there holds
// the same lock for as long as it runs.
constexpr auto kExportLockWait = std::chrono::seconds(30);

// Makes `dir` and its missing parents; the topmost one made, if any, for a
// failed export to take back. InputError when they cannot be made.
std::optional<std::filesystem::path> createDirectoriesOf(const std::filesystem::path& dir) {
  std::error_code ec;
  std::optional<std::filesystem::path> top;
  for (std::filesystem::path d = dir; !d.empty() && !std::filesystem::exists(d, ec);
       d = d.parent_path()) {
    top = d;
    if (d == d.parent_path()) break;
  }
  std::filesystem::create_directories(dir, ec);
  if (ec) throw InputError(dir.string() + ": cannot create the directory: " + ec.message());
  return top;
}

// Makes `dir` (createDirectoriesOf; the topmost directory made goes into
// `made`) and takes the flock on it, as traind's summary writer does (no
// file of traind's in a directory TensorFlow reads), waiting up to
// kExportLockWait. Again when the directory locked is no longer the one
// `dir` names: another export that made it failed and took it back while
// this one waited. Holds no lock (-1) where the filesystem cannot lock a
// directory (NFS takes only a file open for writing).
DirectoryLock lockExportDirectory(const std::filesystem::path& dir,
                                  std::optional<std::filesystem::path>& made,
                                  const std::function<void()>& stop_point) {
  const auto give_up = std::chrono::steady_clock::now() + kExportLockWait;
  for (;;) {
    if (const auto top = createDirectoriesOf(dir);
        top && (!made || top->native().size() < made->native().size()))
      made = top;
    auto locked = lockDirectoryItself(dir);
    if (auto* lock = std::get_if<DirectoryLock>(&locked)) {
      if (isFileAt(lock->fd(), dir)) return std::move(*lock);
    } else if (!std::get<DirectoryLockRefusal>(locked).in_use) {
      return DirectoryLock(-1);
    }
    if (std::chrono::steady_clock::now() > give_up)
      throw InputError(fmt::format(
          "{} is in use by another writer after {} s of waiting (another trainctl export, or a "
          "traind run writing its TensorBoard summaries there): export into another directory",
          dir.string(), kExportLockWait.count()));
    if (stop_point) stop_point();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

void writeTensorflowCheckpoint(const std::filesystem::path& prefix,
                               std::vector<TensorflowTensor> tensors,
                               const std::function<void()>& stop_point) {
  std::filesystem::path index_path = prefix;
  index_path += tc::kIndexSuffix;
  const std::string name = prefix.filename().string();
  // The state file quotes it, and TensorFlow's text format would escape these.
  if (name.empty() || name.find_first_of("\"\\\n") != std::string::npos)
    throw InputError(prefix.string() +
                     ": expected a checkpoint prefix ending in a file name "
                     "without quotes, backslashes or line breaks, such as "
                     "/models/exported/model.ckpt-1200");
  // A directory's name as the prefix wrote the files beside it, and its
  // name then read as the new checkpoint, not as the directory.
  if (std::error_code error; std::filesystem::is_directory(prefix, error))
    throw InputError(prefix.string() +
                     ": a directory; expected a checkpoint prefix inside it, such as " +
                     (prefix / "model.ckpt").string());
  std::sort(tensors.begin(), tensors.end(),
            [](const TensorflowTensor& a, const TensorflowTensor& b) { return a.name < b.name; });
  std::string data;
  std::vector<std::pair<std::string, std::string>> entries;
  tensorflow::BundleHeaderProto header;
  header.set_num_shards(1);
  header.mutable_version()->set_producer(tc::kBundleVersion);
  entries.emplace_back("", header.SerializeAsString());
  for (const TensorflowTensor& t : tensors) {
    // What the reader refuses is not written.
    if (t.name.empty() || t.name.front() == '\0' || t.name == entries.back().first ||
        t.name.size() > tc::kMaxKeyBytes)
      throw std::invalid_argument(
          "writeTensorflowCheckpoint: an empty, reserved, repeated or too long tensor name '" +
          printablePrefix(t.name, 200) + "'");
    if (std::any_of(t.values.begin(), t.values.end(), [](float x) { return !std::isfinite(x); }))
      throw std::invalid_argument("writeTensorflowCheckpoint: tensor " + quotedPrintable(t.name) +
                                  " holds a value that is not finite");
    tensorflow::BundleEntryProto entry;
    std::string_view bytes;
    std::string string_bytes;  // a string scalar's, encoded
    uint32_t crc = 0;
    if (t.string_value) {
      if (!t.shape.empty() || !t.values.empty() || t.integer)
        throw std::invalid_argument("writeTensorflowCheckpoint: string tensor '" + t.name +
                                    "' is not a scalar");
      entry.set_dtype(tc::kDataTypeString);
      string_bytes = encodeStringScalar(*t.string_value, crc);
      bytes = string_bytes;
    } else if (t.integer) {
      if (!t.shape.empty() || !t.values.empty())
        throw std::invalid_argument("writeTensorflowCheckpoint: integer tensor '" + t.name +
                                    "' is not a scalar");
      entry.set_dtype(tc::kDataTypeInt64);
      bytes = std::string_view(reinterpret_cast<const char*>(&*t.integer), sizeof(int64_t));
    } else {
      if (t.values.size() != size_t(numElements(t.shape)))
        throw std::invalid_argument("writeTensorflowCheckpoint: tensor '" + t.name + "' of shape " +
                                    shapeToString(t.shape) + " has " +
                                    std::to_string(t.values.size()) + " values");
      entry.set_dtype(tc::kDataTypeFloat);
      bytes = std::string_view(reinterpret_cast<const char*>(t.values.data()),
                               t.values.size() * sizeof(float));
    }
    for (const int64_t d : t.shape) entry.mutable_shape()->add_dim()->set_size(d);
    entry.set_offset(int64_t(data.size()));
    entry.set_size(int64_t(bytes.size()));
    entry.set_crc32c(maskCrc32c(t.string_value ? crc : crc32c(bytes)));
    data += bytes;
    entries.emplace_back(t.name, entry.SerializeAsString());
  }

  // The table: one data block, the meta-index (empty), the index (one
  // entry: a key at least the data block's last, and its handle), footer.
  std::string index;
  const BlockHandle data_block = appendBlock(index, entries);
  const BlockHandle meta_block = appendBlock(index, {});
  std::string data_handle;
  appendHandle(data_handle, data_block);
  const BlockHandle index_block = appendBlock(index, {{entries.back().first, data_handle}});
  std::string footer;
  appendHandle(footer, meta_block);
  appendHandle(footer, index_block);
  footer.resize(tc::kFooterBytes - sizeof(uint64_t), '\0');
  const uint64_t magic = tc::kTableMagic;
  footer.append(reinterpret_cast<const char*>(&magic), sizeof magic);
  index += footer;

  std::filesystem::path data_path = prefix;
  data_path += dataFileSuffix(0, 1);
  const std::filesystem::path dir =
      prefix.parent_path().empty() ? std::filesystem::path(".") : prefix.parent_path();
  // Two writers of one directory would each list only their own checkpoint
  // in its state file, or pair one's index with the other's data. Held until
  // a failure has taken back what it wrote: another writer waiting for the
  // directory must not find it half gone.
  std::optional<std::filesystem::path> made;
  std::optional<DirectoryLock> lock;
  std::vector<std::filesystem::path> written;
  try {
    lock.emplace(lockExportDirectory(dir, made, stop_point));
    std::error_code ec;
    const bool exists = std::filesystem::exists(index_path, ec);
    if (ec)
      throw InputError(index_path.string() + ": cannot tell whether it is there: " + ec.message());
    if (exists)
      throw InputError(index_path.string() +
                       " is there already: a checkpoint is not written over; "
                       "give another prefix");
    // The directory's pointer names this one newest, and keeps the others it
    // listed (a TensorFlow job's in the same directory), as a Saver does:
    // read, and refused, before anything is written.
    const std::filesystem::path state = dir / tc::kStateFile;
    std::string kept;
    if (std::filesystem::exists(std::filesystem::symlink_status(state, ec))) {
      if (!std::filesystem::is_regular_file(state, ec))
        throw InputError(
            state.string() +
            ": expected TensorFlow's checkpoint state file (text) or nothing "
            "there, got " +
            (std::filesystem::is_directory(state, ec) ? "a directory" : "no regular file"));
      std::istringstream lines(
          readWholeFile(state, tc::kMaxStateFileBytes, "a checkpoint state file"));
      const std::string listed_self = "all_model_checkpoint_paths: \"" + name + "\"";
      for (std::string line; std::getline(lines, line);)
        if (line.rfind("all_model_checkpoint_paths:", 0) == 0 && line != listed_self)
          kept += line + "\n";
    }
    // The data before the index that points into it, and the directory's
    // pointer last: a crash leaves no index without its data. A failure
    // takes back what was written, so that the same export can be run again.
    for (const auto& [path, bytes] :
         {std::pair<const std::filesystem::path&, std::string_view>{data_path, data},
          {index_path, index}}) {
      if (stop_point) stop_point();
      written.push_back(path);
      replaceFileDurably(path, bytes);
    }
    if (stop_point) stop_point();
    replaceFileDurably(state, "model_checkpoint_path: \"" + name + "\"\n" + kept +
                                  "all_model_checkpoint_paths: \"" + name + "\"\n");
  } catch (...) {
    std::error_code ignored;
    for (const std::filesystem::path& path : written) std::filesystem::remove(path, ignored);
    if (made)  // the directories made for it, each if empty
      for (std::filesystem::path d = dir; !d.empty(); d = d.parent_path()) {
        std::filesystem::remove(d, ignored);
        if (d == *made) break;
      }
    throw;
  }
}

namespace {

// P for P.index or P.data-00000-of-00001, when P.index is a file there:
// the checkpoint a user named by one of its files.
std::optional<std::filesystem::path> prefixOfCheckpointFile(const std::filesystem::path& path) {
  std::string name = path.filename().string();
  if (name.ends_with(tc::kIndexSuffix)) {
    name.resize(name.size() - tc::kIndexSuffix.size());
  } else {
    // ".data-" NNNNN "-of-" NNNNN, dataSuffix's form.
    constexpr std::string_view data = ".data-", of = "-of-";
    constexpr size_t digits = 5, suffix = data.size() + digits + of.size() + digits;
    if (name.size() <= suffix) return std::nullopt;
    const std::string_view tail = std::string_view(name).substr(name.size() - suffix);
    auto digitsAt = [&](size_t at) {
      return std::all_of(tail.begin() + long(at), tail.begin() + long(at + digits),
                         [](char c) { return c >= '0' && c <= '9'; });
    };
    if (!tail.starts_with(data) || tail.substr(data.size() + digits, of.size()) != of ||
        !digitsAt(data.size()) || !digitsAt(suffix - digits))
      return std::nullopt;
    name.resize(name.size() - suffix);
  }
  if (name.empty()) return std::nullopt;
  const std::filesystem::path prefix = path.parent_path() / name;
  std::filesystem::path index = prefix;
  index += tc::kIndexSuffix;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(index, ec)) return std::nullopt;
  return prefix;
}

}  // namespace

std::optional<std::filesystem::path> findTensorflowCheckpoint(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::path with_index = path;
  with_index += tc::kIndexSuffix;
  if (std::filesystem::exists(with_index, ec)) return path;
  if (const auto prefix = prefixOfCheckpointFile(path)) return prefix;
  const std::filesystem::path state = path / tc::kStateFile;
  if (!std::filesystem::is_directory(path, ec) || !std::filesystem::is_regular_file(state, ec))
    return std::nullopt;
  // A run's checkpoint directory with a TensorFlow export in it: which one
  // is meant, only its user knows (a resume and trainctl eval read traind's).
  if (std::filesystem::exists(path / checkpoint_format::kLatestFile, ec))
    throw InputError(path.string() + " holds both TensorFlow's " + std::string(tc::kStateFile) +
                     " file and traind's " + std::string(checkpoint_format::kLatestFile) +
                     ": name the checkpoint to read, one of traind's " +
                     std::string(checkpoint_format::kDirPrefix) +
                     "N directories or the TensorFlow checkpoint's prefix");
  // A text-format CheckpointState: `model_checkpoint_path: "..."` on a line
  // of its own, then the ones kept (all_model_checkpoint_paths).
  std::istringstream in(readWholeFile(state, tc::kMaxStateFileBytes, "a checkpoint state file"));
  std::string line;
  int line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    constexpr std::string_view field = "model_checkpoint_path:";
    if (line.rfind(field, 0) != 0) continue;
    const size_t open = line.find('"', field.size());
    const size_t close = line.rfind('"');
    const std::string where = fmt::format("{}:{}", state.string(), line_number);
    if (open == std::string::npos || close <= open)
      throw InputError(where + ": model_checkpoint_path: expected a quoted path, got " +
                       quotedPrintable(line));
    const std::string named = line.substr(open + 1, close - open - 1);
    if (named.find('\\') != std::string::npos)
      throw InputError(where + ": model_checkpoint_path: a path with escapes (" +
                       quotedPrintable(named) + "): give the checkpoint's prefix instead");
    std::filesystem::path prefix = named;
    if (prefix.is_relative()) prefix = path / prefix;
    std::filesystem::path index = prefix;
    index += tc::kIndexSuffix;
    if (!std::filesystem::exists(index, ec))
      throw InputError(where + ": model_checkpoint_path names " + prefix.string() + ", but " +
                       index.string() + " is not there");
    return prefix;
  }
  throw InputError(state.string() + ": no model_checkpoint_path line: expected TensorFlow's " +
                   "checkpoint state naming the newest checkpoint");
}

TensorflowCheckpointReader::TensorflowCheckpointReader(const std::filesystem::path& prefix)
    : prefix_(prefix) {
  std::filesystem::path index_path = prefix;
  index_path += tc::kIndexSuffix;
  const std::string index = readWholeFile(index_path, tc::kMaxIndexBytes, "a checkpoint's index");
  if (index.size() < tc::kFooterBytes)
    fail(index_path, fmt::format("{} bytes, too short for a table's {}-byte footer (the file is "
                                 "truncated, or not a TensorFlow checkpoint's index)",
                                 index.size(), tc::kFooterBytes));
  const std::string_view footer = std::string_view(index).substr(index.size() - tc::kFooterBytes);
  uint64_t magic = 0;
  std::memcpy(&magic, footer.data() + tc::kFooterBytes - sizeof magic, sizeof magic);
  if (magic != tc::kTableMagic)
    fail(index_path,
         "its last 8 bytes are not a table's magic number (the file is truncated, or "
         "not a TensorFlow checkpoint's index)");
  Bytes handles(footer, index_path, "footer");
  readHandle(handles);  // the meta-index: TensorFlow writes it empty
  const BlockHandle index_block = readHandle(handles);

  bool has_header = false;
  uint64_t key_bytes = 0;
  std::optional<std::string> previous_separator, previous_key;
  // The data blocks follow one another, each once, before the index block,
  // as a table is written: so that no block is parsed twice.
  uint64_t blocks_end = 0;
  forEachEntry(
      blockAt(index, index_block, index_path), index_path, "index block", previous_separator,
      [&](const std::string& separator, std::string_view value) {
        Bytes handle_bytes(value, index_path, "index block");
        // The index's keys (each at least its block's last) count with the
        // tensors' names: every one is copied as the next is read.
        key_bytes += separator.size();
        if (key_bytes > tc::kMaxKeyBytesTotal)
          handle_bytes.pastBound(fmt::format("more than {} bytes of keys", tc::kMaxKeyBytesTotal));
        const BlockHandle data_block = readHandle(handle_bytes);
        if (!handle_bytes.empty()) handle_bytes.corrupt("bytes follow a block's handle");
        if (data_block.offset < blocks_end || data_block.offset > index_block.offset ||
            index_block.offset - data_block.offset < tc::kBlockTrailerBytes ||
            data_block.size > index_block.offset - data_block.offset - tc::kBlockTrailerBytes)
          handle_bytes.corrupt(fmt::format(
              "a data block at offset {} of {} bytes, where the next was to start at {} or "
              "after and end before the index block at {}",
              data_block.offset, data_block.size, blocks_end, index_block.offset));
        blocks_end = data_block.offset + data_block.size + tc::kBlockTrailerBytes;
        const std::string where = fmt::format("block at offset {}", data_block.offset);
        forEachEntry(
            blockAt(index, data_block, index_path), index_path, where, previous_key,
            [&](const std::string& key, std::string_view message) {
              Bytes entry_where(message, index_path,
                                where + ", entry '" + printablePrefix(key, 200) + "'");
              key_bytes += key.size();
              if (key_bytes > tc::kMaxKeyBytesTotal ||
                  tensors_.size() + slice_data_.size() >= tc::kMaxTensors)
                entry_where.pastBound(fmt::format("more than {} tensors or {} bytes of keys",
                                                  tc::kMaxTensors, tc::kMaxKeyBytesTotal));
              if (key.empty()) {
                tensorflow::BundleHeaderProto header;
                if (!header.ParseFromArray(message.data(), int(message.size())))
                  entry_where.corrupt("the header is not a BundleHeaderProto");
                if (header.num_shards() < 1)
                  entry_where.corrupt(fmt::format("{} data files", header.num_shards()));
                if (header.endianness() != 0)
                  fail(index_path,
                       "the checkpoint was written big-endian; traind reads little-endian ones");
                const auto& bad = header.version().bad_consumers();
                if (header.version().min_consumer() > tc::kBundleVersion ||
                    std::find(bad.begin(), bad.end(), tc::kBundleVersion) != bad.end())
                  fail(index_path,
                       fmt::format("the checkpoint's format (version {}, for readers of version "
                                   "{} on) is not for traind's reader of version {} "
                                   "(TensorFlow 1.x and 2.x write version 1)",
                                   header.version().producer(), header.version().min_consumer(),
                                   tc::kBundleVersion));
                shards_ = header.num_shards();
                has_header = true;
                return;
              }
              tensorflow::BundleEntryProto proto;
              if (!proto.ParseFromArray(message.data(), int(message.size())))
                entry_where.corrupt("not a BundleEntryProto");
              Entry e;
              e.dtype = proto.dtype();
              e.shape = readShape(proto.shape(), entry_where);
              e.shard = proto.shard_id();
              if (proto.offset() < 0 || proto.size() < 0)
                entry_where.corrupt(
                    fmt::format("offset {}, size {}", proto.offset(), proto.size()));
              e.offset = uint64_t(proto.offset());
              e.size = uint64_t(proto.size());
              e.masked_crc = proto.crc32c();
              // A part of a partitioned variable is under a key of its own,
              // which starts with a 0 byte; its variable's entry lists it.
              const bool part = key.front() == '\0';
              if (part && proto.slices_size() != 0)
                entry_where.corrupt("a part of a partitioned variable is itself partitioned");
              int64_t parts_elements = 0;
              std::set<std::string> listed;
              for (const auto& slice : proto.slices()) {
                if (slice.extent_size() != int(e.shape.size()))
                  entry_where.corrupt(fmt::format("a part of {} dimensions of a tensor of {}",
                                                  slice.extent_size(), e.shape.size()));
                Slice s;
                std::vector<int64_t> encoded_lengths;
                for (size_t d = 0; d < e.shape.size(); ++d) {
                  const auto& extent = slice.extent(int(d));
                  const bool whole = !extent.has_length();
                  const int64_t start = extent.start();
                  const int64_t length = whole ? e.shape[d] : extent.length();
                  if (start < 0 || length < 0 || start > e.shape[d] ||
                      length > e.shape[d] - start || (whole && start != 0))
                    entry_where.corrupt(fmt::format(
                        "a part of dimension {} from {} of length {} in a tensor of shape {}", d,
                        start, whole ? "all" : std::to_string(length), shapeToString(e.shape)));
                  s.start.push_back(start);
                  s.lengths.push_back(length);
                  encoded_lengths.push_back(whole ? -1 : length);
                }
                s.key = sliceKey(key, s.start, encoded_lengths);
                // The parts' own entries sort before every whole's (their keys
                // start with a 0 byte): each is there already, once, of the
                // whole's dtype and of its own extent. So an entry lists no
                // more parts than the index holds, and their keys count with
                // the names.
                const auto data = slice_data_.find(s.key);
                if (data == slice_data_.end())
                  entry_where.corrupt(fmt::format("no entry for its part at {} of shape {}",
                                                  shapeToString(s.start),
                                                  shapeToString(s.lengths)));
                if (data->second.dtype != e.dtype || data->second.shape != s.lengths)
                  entry_where.corrupt(fmt::format(
                      "its part at {} holds {} of shape {}, where {} of shape {} was expected",
                      shapeToString(s.start), dataTypeName(data->second.dtype),
                      shapeToString(data->second.shape), dataTypeName(e.dtype),
                      shapeToString(s.lengths)));
                if (!listed.insert(s.key).second)
                  entry_where.corrupt(
                      fmt::format("it lists its part at {} twice", shapeToString(s.start)));
                key_bytes += s.key.size();
                if (key_bytes > tc::kMaxKeyBytesTotal)
                  entry_where.pastBound(
                      fmt::format("more than {} bytes of keys", tc::kMaxKeyBytesTotal));
                const int64_t elements = numElements(s.lengths);  // each at most the whole's
                if (elements > numElements(e.shape) - parts_elements)
                  entry_where.corrupt("its parts hold more elements than it has");
                parts_elements += elements;
                e.slices.push_back(std::move(s));
              }
              if (!e.slices.empty() && parts_elements != numElements(e.shape))
                entry_where.corrupt(fmt::format("its parts hold {} of its {} elements",
                                                parts_elements, numElements(e.shape)));
              const uint64_t element = elementBytes(e.dtype);
              const uint64_t elements = uint64_t(numElements(e.shape));
              if (e.slices.empty() && element != 0 &&
                  (elements > UINT64_MAX / element || elements * element != e.size))
                entry_where.corrupt(fmt::format("{} bytes for a {} tensor of shape {}", e.size,
                                                dataTypeName(e.dtype), shapeToString(e.shape)));
              (part ? slice_data_ : tensors_).emplace(key, std::move(e));
            });
      });
  if (!has_header)
    fail(index_path, "no header entry (the empty key): not a TensorFlow checkpoint's index");

  // Every data file an entry names, opened and its size checked against
  // the entries' byte ranges now, so that a truncated file fails here.
  std::map<int, uint64_t> data_sizes;
  std::vector<std::pair<const std::string*, const Entry*>> with_bytes;
  for (const auto* entries : {&tensors_, &slice_data_})
    for (const auto& [name, e] : *entries)
      if (e.slices.empty()) with_bytes.emplace_back(&name, &e);  // a whole's bytes are its parts'
  for (const auto& [name_pointer, entry_pointer] : with_bytes) {
    const std::string& name = *name_pointer;
    const Entry& e = *entry_pointer;
    if (e.shard < 0 || e.shard >= shards_)
      fail(index_path, fmt::format("tensor {}: data file {} of {} (the file is corrupt)",
                                   quotedPrintable(name), e.shard, shards_));
    if (!data_.count(e.shard)) {
      const std::filesystem::path path = dataFile(e.shard);
      // Opened without blocking, so that a named pipe in its place is
      // refused rather than waited on.
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
      if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
      File file(::fdopen(fd, "rb"));
      if (!file) {
        ::close(fd);
        fail(path, std::string("cannot open: ") + std::strerror(errno));
      }
      struct stat status {};
      if (::fstat(fd, &status) != 0 || !S_ISREG(status.st_mode)) fail(path, "not a regular file");
      data_sizes[e.shard] = uint64_t(status.st_size);
      data_.emplace(e.shard, std::move(file));
    }
    const uint64_t file_size = data_sizes[e.shard];
    if (e.offset > file_size || e.size > file_size - e.offset)
      fail(dataFile(e.shard),
           fmt::format("tensor {}: its bytes {}..{} run past the file's end at {} (the file is "
                       "truncated, or not this index's)",
                       quotedPrintable(name), e.offset, e.offset + e.size, file_size));
  }
  readObjectGraph();
}

void TensorflowCheckpointReader::readObjectGraph() {
  // TensorFlow's name for the tensor (trackable/constants.py, OBJECT_GRAPH_PROTO_KEY).
  const std::string name = "_CHECKPOINTABLE_OBJECT_GRAPH";
  const auto found = tensors_.find(name);
  if (found == tensors_.end()) return;
  const Entry& e = found->second;
  const std::string where = "tensor " + quotedPrintable(name);
  if (e.dtype != tc::kDataTypeString || !e.shape.empty() || !e.slices.empty())
    fail(prefix_,
         fmt::format("{}: expected a string scalar (an object graph), found {} of shape {}", where,
                     dataTypeName(e.dtype), shapeToString(e.shape)));
  const std::filesystem::path path = dataFile(e.shard);
  if (e.size > tc::kMaxObjectGraphBytes)
    fail(path, fmt::format("{}: {} bytes, more than the {} of an object graph traind reads", where,
                           e.size, tc::kMaxObjectGraphBytes));
  std::string bytes(e.size, '\0');
  readExactlyAt(fileno(data_.at(e.shard).get()), e.offset,
                reinterpret_cast<std::byte*>(bytes.data()), e.size, path);
  const std::string_view wire = decodeStringScalar(bytes, e.masked_crc, path, where);
  checkObjectGraphCounts(wire, path, where);
  tensorflow::TrackableObjectGraph graph;
  if (!graph.ParseFromArray(wire.data(), int(wire.size())))
    fail(path, where + ": not a TensorFlow object graph (the file is corrupt)");
  objects_.resize(size_t(graph.nodes_size()));
  for (int i = 0; i < graph.nodes_size(); ++i) {
    const auto& node = graph.nodes(i);
    ObjectNode& object = objects_[size_t(i)];
    for (const auto& child : node.children()) {
      if (child.node_id() < 0 || child.node_id() >= graph.nodes_size())
        fail(path, fmt::format("{}: object {} names object {} of {} as its child {} (the file is "
                               "corrupt)",
                               where, i, child.node_id(), graph.nodes_size(),
                               quotedPrintable(child.local_name())));
      object.children.emplace_back(child.local_name(), size_t(child.node_id()));
    }
    for (const auto& attribute : node.attributes())
      if (attribute.name() == "VARIABLE_VALUE") {
        object.value_key = attribute.checkpoint_key();
        object.value_name = attribute.full_name();
      }
    std::set<std::string_view> names;  // the slot names so far, of the node's protobuf
    std::set<size_t> values;           // the slots' own variables so far
    for (const auto& slot : node.slot_variables()) {
      const auto corrupt = [&] {  // made only for an error
        return fmt::format("{}: object {}'s slot {} ", where, i, quotedPrintable(slot.slot_name()));
      };
      const int32_t variable = slot.original_variable_node_id();
      const int32_t value = slot.slot_variable_node_id();
      for (const int32_t id : {variable, value})
        if (id < 0 || id >= graph.nodes_size())
          fail(path, fmt::format("{}names object {} of {} (the file is corrupt)", corrupt(), id,
                                 graph.nodes_size()));
      if (variable == value)
        fail(path, fmt::format("{}of object {} is that object itself (the file is corrupt)",
                               corrupt(), variable));
      if (!object.slots.emplace(std::pair{slot.slot_name(), size_t(variable)}, size_t(value))
               .second)
        fail(path, fmt::format("{}of object {} is given twice (the file is corrupt)", corrupt(),
                               variable));
      if (!values.insert(size_t(value)).second)
        fail(path, fmt::format("{}is object {}, another slot's too (the file is corrupt)",
                               corrupt(), value));
      if (names.insert(slot.slot_name()).second) object.slot_names.push_back(slot.slot_name());
    }
  }
  // Each object's children by name (a list's thousands of "0", "1", ...
  // looked up one by one).
  for (ObjectNode& object : objects_) {
    object.children_by_name.resize(object.children.size());
    std::iota(object.children_by_name.begin(), object.children_by_name.end(), uint32_t(0));
    std::stable_sort(object.children_by_name.begin(), object.children_by_name.end(),
                     [&](uint32_t a, uint32_t b) {
                       return object.children[a].first < object.children[b].first;
                     });
  }
  // Which objects reach a value: back from each value along the children,
  // every object once.
  std::vector<std::vector<size_t>> parents(objects_.size());
  std::vector<size_t> reached;
  for (size_t i = 0; i < objects_.size(); ++i) {
    for (const auto& [name, child] : objects_[i].children) parents[child].push_back(i);
    if (!objects_[i].value_key.empty()) {
      object_of_key_.emplace(objects_[i].value_key, i);
      objects_[i].reaches_value = true;
      reached.push_back(i);
    }
  }
  while (!reached.empty()) {
    const size_t node = reached.back();
    reached.pop_back();
    for (const size_t parent : parents[node])
      if (!objects_[parent].reaches_value) {
        objects_[parent].reaches_value = true;
        reached.push_back(parent);
      }
  }
}

TensorflowCheckpointReader::ObjectPaths TensorflowCheckpointReader::objectPaths() const {
  ObjectPaths found;
  if (objects_.empty()) return found;
  // Depth first, on a stack of our own (a lying graph may be a chain of a
  // million objects), with one path string that each step down appends to
  // and each step up cuts back.
  struct Step {
    size_t node;
    size_t next_child = 0;
    size_t path_before = 0;  // the path's length before this object's name
  };
  std::vector<Step> stack;
  std::vector<bool> on_path(objects_.size());
  std::string path;
  uint64_t path_bytes = 0;
  size_t steps = 0;
  const auto enter = [&](size_t node, size_t path_before) {
    stack.push_back({node, 0, path_before});
    on_path[node] = true;
    const std::string& key = objects_[node].value_key;
    if (!key.empty() && contains(key)) {
      found.paths.emplace_back(path, key);
      path_bytes += path.size();
    }
  };
  enter(0, 0);
  while (!stack.empty()) {
    if (found.paths.size() >= tc::kMaxObjectPaths || path_bytes >= tc::kMaxObjectPathBytes ||
        steps >= tc::kMaxObjectWalkSteps) {
      found.complete = false;
      break;
    }
    Step& top = stack.back();
    const auto& children = objects_[top.node].children;
    if (top.next_child == children.size()) {
      on_path[top.node] = false;
      path.resize(top.path_before);
      stack.pop_back();
      continue;
    }
    const auto& [name, child] = children[top.next_child++];
    ++steps;
    if (on_path[child]) continue;  // a cycle
    const size_t before = path.size();
    if (before + 1 + name.size() > tc::kMaxKeyBytes) {
      found.complete = false;
      continue;
    }
    if (before > 0) path += '/';
    path += name;
    enter(child, before);
  }
  return found;
}

std::optional<size_t> TensorflowCheckpointReader::objectAt(std::string_view path) const {
  if (objects_.empty() || path.empty()) return std::nullopt;
  size_t node = 0;  // the root
  while (!path.empty()) {
    const std::string_view name = path.substr(0, path.find('/'));
    path.remove_prefix(std::min(path.size(), name.size() + 1));
    // The first child of that name: the first in the name-sorted index.
    const ObjectNode& object = objects_[node];
    const auto at = std::lower_bound(object.children_by_name.begin(), object.children_by_name.end(),
                                     name, [&](uint32_t child, std::string_view wanted) {
                                       return object.children[child].first < wanted;
                                     });
    if (at == object.children_by_name.end() || object.children[*at].first != name)
      return std::nullopt;
    node = object.children[*at].second;
  }
  return node;
}

std::optional<std::string> TensorflowCheckpointReader::objectKey(std::string_view path) const {
  const std::optional<size_t> node = objectAt(path);
  if (!node) return std::nullopt;
  const std::string& key = objects_[*node].value_key;
  if (key.empty() || !contains(key)) return std::nullopt;
  return key;
}

std::optional<std::string> TensorflowCheckpointReader::objectValueName(
    std::string_view path) const {
  if (!objectKey(path)) return std::nullopt;
  return objects_[*objectAt(path)].value_name;
}

std::vector<std::string> TensorflowCheckpointReader::objectChildren(std::string_view path) const {
  std::vector<std::string> names;
  if (const std::optional<size_t> node = objectAt(path))
    for (const auto& [name, child] : objects_[*node].children) names.push_back(name);
  return names;
}

std::optional<std::string> TensorflowCheckpointReader::objectSlotKey(
    std::string_view optimizer_path, std::string_view variable_key,
    std::string_view slot_name) const {
  const std::optional<size_t> optimizer = objectAt(optimizer_path);
  const auto variable = object_of_key_.find(std::string(variable_key));
  if (!optimizer || variable == object_of_key_.end()) return std::nullopt;
  const auto& slots = objects_[*optimizer].slots;
  const auto slot = slots.find({std::string(slot_name), variable->second});
  if (slot == slots.end()) return std::nullopt;
  const std::string& key = objects_[slot->second].value_key;
  if (key.empty() || !contains(key)) return std::nullopt;
  return key;
}

const std::vector<std::string>& TensorflowCheckpointReader::objectSlotNames(
    std::string_view optimizer_path) const {
  static const std::vector<std::string> kNone;
  const std::optional<size_t> optimizer = objectAt(optimizer_path);
  if (!optimizer) return kNone;
  return objects_[*optimizer].slot_names;
}

bool TensorflowCheckpointReader::objectHoldsValues(std::string_view path) const {
  const std::optional<size_t> node = objectAt(path);
  return node && objects_[*node].reaches_value;
}

std::filesystem::path TensorflowCheckpointReader::dataFile(int shard) const {
  std::filesystem::path path = prefix_;
  path += dataFileSuffix(shard, shards_);
  return path;
}

std::vector<std::string> TensorflowCheckpointReader::names() const {
  std::vector<std::string> names;
  for (const auto& [name, e] : tensors_) names.push_back(name);
  return names;
}

bool TensorflowCheckpointReader::contains(const std::string& name) const {
  return tensors_.count(name) != 0;
}

const TensorflowCheckpointReader::Entry& TensorflowCheckpointReader::entry(
    const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) fail(prefix_, "no tensor " + quotedPrintable(name));
  return it->second;
}

const Shape& TensorflowCheckpointReader::shape(const std::string& name) const {
  return entry(name).shape;
}

std::string TensorflowCheckpointReader::dtypeName(const std::string& name) const {
  return dataTypeName(entry(name).dtype);
}

int TensorflowCheckpointReader::partCount(const std::string& name) const {
  return int(entry(name).slices.size());
}

void TensorflowCheckpointReader::readBytes(const std::string& name, const Entry& e,
                                           std::byte* dst) const {
  const std::filesystem::path path = dataFile(e.shard);
  readExactlyAt(fileno(data_.at(e.shard).get()), e.offset, dst, e.size, path);
  const std::string_view bytes(reinterpret_cast<const char*>(dst), e.size);
  if (crc32c(bytes) != unmaskCrc32c(e.masked_crc))
    fail(path, "tensor " + quotedPrintable(name) +
                   ": its bytes do not match the index's CRC32C (the file is corrupt, or not "
                   "this index's)");
}

void TensorflowCheckpointReader::read(const std::string& name, const Shape& expected,
                                      std::span<float> dst) const {
  const Entry& e = entry(name);
  if (e.dtype != tc::kDataTypeFloat)
    fail(prefix_, "tensor " + quotedPrintable(name) + ": expected float32, found " +
                      dataTypeName(e.dtype) + " (traind's variables are float32)");
  if (e.shape != expected)
    fail(prefix_, "tensor " + quotedPrintable(name) + ": expected shape " +
                      shapeToString(expected) + ", found " + shapeToString(e.shape));
  if (dst.size() != size_t(numElements(expected)))
    throw std::invalid_argument("TensorflowCheckpointReader::read: destination of " +
                                std::to_string(dst.size()) + " floats for tensor '" + name +
                                "' of shape " + shapeToString(expected));
  if (e.slices.empty())
    readBytes(name, e, reinterpret_cast<std::byte*>(dst.data()));
  else
    readParts(name, e, dst);
  const auto bad = std::find_if(dst.begin(), dst.end(), [](float x) { return !std::isfinite(x); });
  if (bad != dst.end())
    fail(prefix_, "tensor " + quotedPrintable(name) + ": element " +
                      std::to_string(bad - dst.begin()) + " is " +
                      (std::isnan(*bad) ? "NaN" : "infinite") +
                      ": expected finite values (its run diverged)");
}

void TensorflowCheckpointReader::readParts(const std::string& name, const Entry& e,
                                           std::span<float> dst) const {
  // Row-major strides of the whole, and which of its elements a part has
  // written: parts that overlap leave others unwritten (the index said
  // they add up to the whole).
  const size_t rank = e.shape.size();
  std::vector<int64_t> strides(rank, 1);
  for (size_t d = rank; d-- > 1;) strides[d - 1] = strides[d] * e.shape[d];
  std::vector<bool> written(dst.size(), false);
  std::vector<float> part;
  for (const Slice& s : e.slices) {
    part.resize(size_t(numElements(s.lengths)));
    readBytes(name, slice_data_.at(s.key), reinterpret_cast<std::byte*>(part.data()));
    std::vector<int64_t> at(rank, 0);  // the part's element being copied
    for (const float value : part) {
      int64_t index = 0;
      for (size_t d = 0; d < rank; ++d) index += (s.start[d] + at[d]) * strides[d];
      if (written[size_t(index)])
        fail(prefix_, fmt::format("tensor {}: its parts overlap at element {} (the file is "
                                  "corrupt)",
                                  quotedPrintable(name), index));
      written[size_t(index)] = true;
      dst[size_t(index)] = value;
      for (size_t d = rank; d-- > 0;) {  // the next element of the part, row-major
        if (++at[d] < s.lengths[d]) break;
        at[d] = 0;
      }
    }
  }
}

bool TensorflowCheckpointReader::isIntegerScalar(const std::string& name) const {
  const Entry& e = entry(name);
  return (e.dtype == tc::kDataTypeInt64 || e.dtype == tc::kDataTypeInt32) && e.shape.empty() &&
         e.slices.empty();
}

int64_t TensorflowCheckpointReader::readInteger(const std::string& name) const {
  const Entry& e = entry(name);
  if (!isIntegerScalar(name))
    fail(prefix_, "tensor " + quotedPrintable(name) +
                      ": expected an integer scalar (int64 or int32), found " +
                      dataTypeName(e.dtype) + " of shape " + shapeToString(e.shape));
  if (e.dtype == tc::kDataTypeInt32) {
    int32_t value = 0;
    readBytes(name, e, reinterpret_cast<std::byte*>(&value));
    return value;
  }
  int64_t value = 0;
  readBytes(name, e, reinterpret_cast<std::byte*>(&value));
  return value;
}

}  // namespace traind
