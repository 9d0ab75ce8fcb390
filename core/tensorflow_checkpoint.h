// TensorFlow's checkpoints (the "tensor bundle" that tf.compat.v1.train.Saver,
// tf.train.Checkpoint and Keras' save_weights write): the format's reader
// and writer in one place, so that what one writes the other accepts. Read
// so that a model trained in TensorFlow can start a traind run (init_from),
// be taken over (trainctl import) and be looked at (trainctl inspect);
// written so that a model trained in traind goes to TensorFlow (trainctl
// export).
//
// A checkpoint is a prefix P ("/ckpt/model.ckpt-1200"):
//   P.index                        a LevelDB-style table: string keys, sorted
//                                  and prefix-compressed, in blocks each with
//                                  a CRC32C; the empty key holds the bundle's
//                                  header (its number of data files), every
//                                  other a tensor's name and where its bytes
//                                  are (dtype, shape, data file, offset, size,
//                                  CRC32C)
//   P.data-00000-of-00002, ...     the tensors' bytes, row-major, little-endian
// and a directory names its newest in a text file `checkpoint`
// (model_checkpoint_path: "model.ckpt-1200"), as tf.train.latest_checkpoint
// reads it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/shape.h"

namespace traind {

namespace tensorflow_checkpoint_format {
inline constexpr std::string_view kIndexSuffix = ".index";
inline constexpr std::string_view kStateFile = "checkpoint";  // a directory's pointer to its newest
// A TensorFlow 1 job's step count (tf.compat.v1.train.get_or_create_global_step).
inline constexpr std::string_view kGlobalStep = "global_step";
inline constexpr uint64_t kTableMagic = 0xdb4775248b80fb57ull;
inline constexpr size_t kFooterBytes = 48;       // two block handles (padded) and the magic
inline constexpr size_t kBlockTrailerBytes = 5;  // the compression type, the masked CRC32C
inline constexpr int kDataTypeFloat = 1;
inline constexpr int kDataTypeInt32 = 3;
inline constexpr int kDataTypeInt64 = 9;
inline constexpr int kDataTypeString = 7;
inline constexpr int kBundleVersion = 1;  // the format version this reader reads
// Bounds on what a checkpoint of a model traind trains holds, so that an
// index that lies costs bounded memory and time: the index is read whole,
// and every tensor's name is kept.
inline constexpr uint64_t kMaxIndexBytes = uint64_t(256) << 20;
inline constexpr uint64_t kMaxKeyBytes = 64 << 10;  // a tensor's name
inline constexpr uint64_t kMaxKeyBytesTotal = uint64_t(64) << 20;
inline constexpr size_t kMaxTensors = 1000000;
inline constexpr int kMaxRank = 254;  // TensorFlow's TensorShape::MaxDimensions()
// An object-based checkpoint's object graph (TensorflowCheckpointReader::
// objectKey): its bytes, objects, and their children and slot variables
// together (kMaxObjectChildren), counted on the wire before it is parsed (an empty object is 2
// bytes there, far more parsed), and the paths objectPaths walks: at most so many, of so many bytes
// in all, from a walk that ends after so many steps.
inline constexpr uint64_t kMaxObjectGraphBytes = uint64_t(16) << 20;
inline constexpr size_t kMaxObjects = size_t(1) << 18;
inline constexpr size_t kMaxObjectChildren = size_t(1) << 20;
inline constexpr size_t kMaxObjectPaths = 100000;
inline constexpr uint64_t kMaxObjectPathBytes = uint64_t(16) << 20;
inline constexpr size_t kMaxObjectWalkSteps = 10 * kMaxObjectPaths;
inline constexpr uint64_t kMaxStateFileBytes = 1 << 20;
}  // namespace tensorflow_checkpoint_format

// A tensor to write: float32 values, an int64 scalar (a global step), or a
// string scalar (an object graph).
struct TensorflowTensor {
  std::string name;
  Shape shape;
  std::vector<float> values;       // numElements(shape) floats, or none for a scalar below
  std::optional<int64_t> integer;  // an int64 scalar's value
  std::optional<std::string> string_value = std::nullopt;  // a string scalar's
};

// Writes a checkpoint at `prefix` as TensorFlow's Saver does (one data file,
// P.data-00000-of-00001, then P.index), and the directory's `checkpoint`
// file naming it, so that tf.train.latest_checkpoint finds it. Each file is
// complete or absent (replaceFileDurably), and so is the whole: a failure
// removes the files and directories it made. The directory's other listed
// checkpoints stay listed; writers of one directory take turns (a flock on
// it, waited for up to 30 s; none where the filesystem cannot lock a
// directory, as NFS). `stop_point`, when given, is called while it waits and
// before each file, where it may throw to end the write: what was written
// is removed and its exception goes on (trainctl export's held signals).
// InputError when P.index is there already (a checkpoint is not written
// over), P's file name cannot be quoted in the state file, the state file
// is no text file or too big, the directory cannot be made, or its lock is
// not had; std::system_error when the disk refuses; std::invalid_argument
// for what the reader would refuse (empty, reserved, repeated or too long
// names, values not finite) or values that do not fit their shapes, before
// anything is written.
void writeTensorflowCheckpoint(const std::filesystem::path& prefix,
                               std::vector<TensorflowTensor> tensors,
                               const std::function<void()>& stop_point = {});

// The checkpoint prefix `path` names: `path` itself when `path`.index is
// there, P for one of its files (P.index, P.data-00000-of-00001) when
// P.index is there, else, for a directory holding TensorFlow's `checkpoint` file, the
// checkpoint that file names (relative to the directory unless absolute).
// nullopt when `path` is neither (a traind checkpoint, or nothing).
// InputError naming the state file when it is unreadable or names a
// checkpoint that is not there, and naming the directory when it holds
// traind's `latest` file too (which of the two is meant?).
std::optional<std::filesystem::path> findTensorflowCheckpoint(const std::filesystem::path& path);

// Reads and checks the index of a checkpoint as it opens, so a corrupt one
// fails before anything uses it: the table's footer, every block's CRC32C
// and structure, each data block read once, the keys in order across them,
// each entry's message, shape, data file and byte range (against that
// file's size; a lying entry cannot cause a large allocation), within the
// bounds above. A tensor's bytes are read only when it is asked for,
// into the caller's buffer, once its dtype and shape have been found to be
// the ones expected, and checked against its CRC32C. The data files stay
// open, so reads see the files opened.
class TensorflowCheckpointReader {
 public:
  // InputError naming the file and what is wrong when a file is missing or corrupt.
  explicit TensorflowCheckpointReader(const std::filesystem::path& prefix);

  const std::filesystem::path& prefix() const { return prefix_; }
  // Tensor names, sorted.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;
  // InputError if absent. A tensor of a fixed-size dtype has as many
  // bytes as its shape says, a partitioned one as many elements in its
  // parts; a string one's shape is bounded only by its count fitting an
  // int64.
  const Shape& shape(const std::string& name) const;
  // "float32", "int64", "string", ...: TensorFlow's names for its dtypes.
  std::string dtypeName(const std::string& name) const;
  // How many parts a partitioned variable was saved in (tf.compat.v1's
  // partitioners); 0 for a whole tensor.
  int partCount(const std::string& name) const;

  // Reads a float32 tensor into dst (numElements(expected) floats); a
  // partitioned one is put together from its parts. InputError naming the
  // file and the tensor if it is absent, of another dtype, of a shape other
  // than `expected`, not what its CRC32C says, holding a value that is not
  // finite, or partitioned into parts that overlap.
  void read(const std::string& name, const Shape& expected, std::span<float> dst) const;
  // Whether the tensor is an int64 or int32 scalar, as TensorFlow's
  // global_step is (int64 from get_or_create_global_step, int32 from a
  // tf.Variable(0) of older jobs).
  bool isIntegerScalar(const std::string& name) const;
  // Such a scalar's value; InputError as read's.
  int64_t readInteger(const std::string& name) const;

  // The key of the tensor holding the value of the variable at `path` in an
  // object-based checkpoint (tf.train.Checkpoint, Keras' TensorFlow-format
  // checkpoints): the names of the objects from the root, joined by '/'
  // ("model/layer_with_weights-0/kernel"; Keras 3's
  // "model/_functional/_operations/1/_kernel"). Such a checkpoint keys each
  // tensor by the first path that reaches it, so a model saved with its
  // optimizer has its kernels keyed "optimizer/_trainable_variables/0/..."
  // and only the object graph (the tensor _CHECKPOINTABLE_OBJECT_GRAPH,
  // read and checked as the checkpoint opens: a checkpoint whose graph is
  // corrupt or past tensorflow_checkpoint_format's bounds is refused, for
  // any use) says which is which. nullopt without a graph, or where the
  // path leads to no variable's value.
  std::optional<std::string> objectKey(std::string_view path) const;
  // The name the variable at `path` was given (Keras 3 names its Adam's
  // step count "adam/iteration"), empty where it has none; nullopt as
  // objectKey's.
  std::optional<std::string> objectValueName(std::string_view path) const;
  // The names of the children of the object at `path`, in the graph's
  // order; none where there is no such object.
  std::vector<std::string> objectChildren(std::string_view path) const;
  // The key of the value of slot `slot_name` ("m") that the optimizer at
  // `optimizer_path` keeps for the variable whose value is under
  // `variable_key`: the graph's slot variables, as Keras 2's optimizers
  // (tf.keras before Keras 3, tf_keras.optimizers.legacy) and tf.compat.v1's
  // saved by tf.train.Checkpoint keep their slots. nullopt where it keeps
  // no such slot for the variable.
  std::optional<std::string> objectSlotKey(std::string_view optimizer_path,
                                           std::string_view variable_key,
                                           std::string_view slot_name) const;
  // The names of the slots the optimizer at `optimizer_path` keeps, each
  // once, in the graph's order; valid while the reader lives.
  const std::vector<std::string>& objectSlotNames(std::string_view optimizer_path) const;
  // Whether the object at `path`, or one under it, holds a variable's value.
  bool objectHoldsValues(std::string_view path) const;
  // Every path to a variable's value in the object graph, with the value's
  // key, in the graph's order (none without a graph): what objectKey takes.
  // A path goes through no object twice. `complete` is false where the walk
  // stopped at one of tensorflow_checkpoint_format's bounds (kMaxObjectPaths
  // and the others after it) or left out a path longer than a key may be.
  struct ObjectPaths {
    std::vector<std::pair<std::string, std::string>> paths;
    bool complete = true;
  };
  ObjectPaths objectPaths() const;

 private:
  // A part of a partitioned variable: where it lies in the whole, per
  // dimension, and the key its bytes' entry is under.
  struct Slice {
    std::vector<int64_t> start;
    Shape lengths;
    std::string key;
  };
  struct Entry {
    int dtype = 0;
    Shape shape;
    int shard = 0;
    uint64_t offset = 0;
    uint64_t size = 0;
    uint32_t masked_crc = 0;
    std::vector<Slice> slices;  // a partitioned variable's; its own bytes are none
  };
  struct FileCloser {
    void operator()(std::FILE* file) const { std::fclose(file); }
  };
  using File = std::unique_ptr<std::FILE, FileCloser>;

  const Entry& entry(const std::string& name) const;
  // The entry's bytes into dst, checked against its CRC32C.
  void readBytes(const std::string& name, const Entry& e, std::byte* dst) const;
  // A partitioned float32 variable's parts into their places in dst.
  void readParts(const std::string& name, const Entry& e, std::span<float> dst) const;
  std::filesystem::path dataFile(int shard) const;
  // The object graph from its tensor, when the checkpoint has one.
  void readObjectGraph();

  std::filesystem::path prefix_;
  int shards_ = 0;
  std::map<std::string, Entry> tensors_;
  std::map<std::string, Entry> slice_data_;  // the parts' entries, by their keys
  std::map<int, File> data_;  // the data files entries refer to, by shard
  // An object-based checkpoint's objects, the root first (empty for
  // others): each child's name and node, and the key of the object's own
  // value where it is a variable.
  struct ObjectNode {
    std::vector<std::pair<std::string, size_t>> children;
    std::vector<uint32_t> children_by_name;  // places in `children`, by name, stably
    std::string value_key;
    std::string value_name;  // the variable's full_name
    // An optimizer's slots: the node of each (slot name, variable's node),
    // and the names, each once, in the graph's order.
    std::map<std::pair<std::string, size_t>, size_t> slots;
    std::vector<std::string> slot_names;
    bool reaches_value = false;  // it, or an object under it, holds a value
  };
  // The object at `path` from the root, if any.
  std::optional<size_t> objectAt(std::string_view path) const;
  std::vector<ObjectNode> objects_;
  std::map<std::string, size_t> object_of_key_;  // the object holding each value
};

// The key of variable `variable` ("kernel") of the layer whose variables
// are under `source` in a checkpoint `reader` reads (a TensorFlow
// checkpoint's, or a traind or safetensors one's): "<source>/kernel" as
// traind and TensorFlow 1 name it; a TensorFlow 2 object-based checkpoint
// (tf.train.Checkpoint) names its value
// "<source>/kernel/.ATTRIBUTES/VARIABLE_VALUE", and Keras 3 keeps a kernel
// as "_kernel"; where the checkpoint reaches the variable through another
// object first (a model saved with its optimizer), its object graph names
// the key (TensorflowCheckpointReader::objectKey). The first the checkpoint
// holds, else "<source>/kernel".
template <typename Reader>
std::string checkpointVariableKey(const Reader& reader, const std::string& source,
                                  std::string_view variable) {
  const std::string plain = source + "/" + std::string(variable);
  const std::string underscored = source + "/_" + std::string(variable);
  const std::string value = "/.ATTRIBUTES/VARIABLE_VALUE";
  for (const std::string& key : {plain, plain + value, underscored + value})
    if (reader.contains(key)) return key;
  if constexpr (requires { reader.objectKey(plain); })
    for (const std::string& path : {plain, underscored})
      if (std::optional<std::string> key = reader.objectKey(path)) return *key;
  return plain;
}

}  // namespace traind
