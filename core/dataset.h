// Data sets, held whole in memory: MNIST-format IDX files (Fashion-MNIST,
// MNIST), TFRecord files of tf.train.Example (core/example_records.h) and
// the synthetic regression problem. Images keep the files' pixel bytes, a
// quarter of what floats take, and become floats only as a batch is
// gathered (copyInputs): a worker of a cluster holds the whole training set
// (or its share, data.shard_by_worker), since every epoch deals all of it
// out again. A TFRecord set too large for memory stays in its files, only
// its labels held (ExampleFiles).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/batch.h"
#include "core/image_resize.h"
#include "core/model_spec.h"
#include "core/shape.h"

namespace traind {

// The IDX format (yann.lecun.com/exdb/mnist): a big-endian u32 magic
// 0x0000TTRR (TT the element type, RR the number of dimensions), RR big-endian
// u32 dimensions, then the elements row-major. traind reads unsigned bytes.
namespace idx_format {
inline constexpr uint32_t kImagesMagic = 0x00000803;  // u8, dims [n, height, width]
// u8, dims [n, height, width, channels]: colour images, HWC (scripts/cifar10-to-idx)
inline constexpr uint32_t kChannelImagesMagic = 0x00000804;
inline constexpr uint32_t kLabelsMagic = 0x00000801;  // u8, dims [n]
}  // namespace idx_format

// Which examples of a data set a reader keeps (data.shard_by_worker: each
// worker of a cluster its own): those with index k % count == index, k
// counted in the files' order within `limit`. {0, 1} keeps them all.
struct DataShare {
  int index = 0;
  int count = 1;

  bool keeps(int64_t k) const { return k % count == index; }
  // Where the share's k-th example stands in the whole set: keeps()'s inverse.
  int64_t wholeIndex(int64_t k) const { return k * count + index; }
  // std::invalid_argument unless 0 <= index < count.
  void check() const;
};

// Said after a loader's error that a share holds no example: the check
// of data.batch_size, which would say it better, comes after the load.
inline constexpr const char* kEmptyShareHint =
    ": every worker's share must hold a batch (data.batch_size) at least";

// The examples of a data set left in their files (a TFRecord set's
// in_memory: false), read and decoded one by one as batches gather them.
class ExampleFiles {
 public:
  virtual ~ExampleFiles() = default;
  // Example `index`'s inputs, numElements(Dataset::example_shape) floats,
  // into `out`, as the data set would hold them in memory. Safe to call
  // from several threads at once. InputError naming the file and the
  // record when it no longer holds what was found there at load;
  // std::logic_error for images of their own sizes (Dataset::own_sizes),
  // which only a crop drawn on each (decode) makes inputs of.
  virtual void read(int64_t index, float* out) const = 0;
  // Example `index`'s PNG or JPEG image as decoded, at its own size, into
  // `pixels` (resized to hold it); its [height, width, channels]. For a
  // training set whose images keep their own sizes (Dataset::own_sizes),
  // a random crop drawn on each as it is gathered. InputError as
  // read() throws; std::logic_error for files of other images.
  virtual Shape decode(int64_t index, std::vector<uint8_t>& pixels) const = 0;
  // The examples will be read in no order (a shuffled training set): the
  // system need not read ahead of each read, which, where the files do not
  // stay in the page cache, read 1.7 times as many bytes from the disk.
  virtual void adviseRandomOrder() const = 0;
};

struct Dataset {
  // [28, 28, 1] for IDX images (HWC; rank-3 files get channel 1, rank-4 files
  // give theirs), a TFRecord set's records' or the model's input, [1] for
  // synthetic
  Shape example_shape;
  int64_t size = 0;  // examples
  // The inputs, size * numElements(example_shape) values, example after
  // example, in one of three forms (the others empty): image pixels as
  // read, each input pixel / 255.0f; floats (synthetic data, a TFRecord
  // set's float images as given, its resized images / 255); or left in
  // their files, read as they are gathered.
  std::vector<uint8_t> pixels;
  std::vector<float> floats;
  std::shared_ptr<const ExampleFiles> files;
  // The examples each of the set's files gave, in the files' order (this
  // share's, where the set is one), summing to size: what a shuffle
  // buffer's order of the files (ShuffleBuffer) is drawn over. Empty for
  // IDX sets and synthetic data.
  std::vector<int64_t> file_examples;
  // The inputs are pixels / 255, whichever form holds them; false for
  // floats as given, whose scale standardizeExample cannot know.
  bool pixel_scale = true;
  std::vector<int32_t> labels;  // classification, else empty
  std::vector<float> targets;   // regression [size, 1], else empty
  int num_classes = 0;          // max label + 1 (classification), 0 for regression
  // The window of each image a batch takes, [height, width, channels]
  // (data.augment.random_crop's size), or empty for the whole example: a
  // training batch crops it at random offsets (InputPipeline, with the
  // Augmentation), evaluation from each image's centre (sliceBatch).
  Shape window;
  // The training images keep their own sizes (DataFiles::own_sizes): a
  // batch decodes each again (ExampleFiles::decode) and resizes what its
  // random crop draws of it with `resize_centres`, the set's method's.
  bool own_sizes = false;
  PixelCentres resize_centres = PixelCentres::Half;
  // Each example standardized as it is gathered, after any augmentation
  // (standardizeExample; data.standardize: per_image).
  bool per_image_standardization = false;
  // The CRC-32C of the whole set as read (within its limit, every share's:
  // a reader of a share reads past the others'): of an IDX set's images'
  // and labels' bytes, a TFRecord set's records' CRCs in order and its
  // files' record counts, synthetic data's values. Readers of the same
  // files get the same (contentText).
  uint32_t content_crc = 0;
  // The share of a larger set these examples are, and that set's size
  // (whole_size, only with share.count > 1): another worker holds the rest.
  DataShare share;
  int64_t whole_size = 0;

  // An example's shape as a batch holds it and the model takes it: the
  // window, or the example's own.
  const Shape& inputShape() const { return window.empty() ? example_shape : window; }
  bool isShare() const { return share.count > 1; }
  // The examples of the whole set, this share's and the others'.
  int64_t wholeSize() const { return isShare() ? whole_size : size; }
};

// What a data set holds, as every worker of a job must hold it: "60000
// examples, CRC-32C 0x1a2b3c4d" (the whole set's, of which a share is part).
std::string contentText(const Dataset& data);

// Called by a data set's reader before it takes memory for `examples`
// examples of `example_shape`, each value taking `value_bytes` (1 for
// pixels, 4 for floats, 0 for examples left in their files, which keep
// their labels and where their records are, kRecordPlaceBytes). It throws to refuse examples that
// cannot fit the model, or the memory, before they are read: an IDX reader calls it once, from its
// images file's header, before a byte of its pixels is decompressed (a gzip file of 8 MB can hold 8
// GB of pixels); a TFRecord reader before each block of examples (core/example_records.h).
using DataLoadCheck =
    std::function<void(const Shape& example_shape, int64_t examples, int value_bytes)>;

// Reads an images file and a labels file, each gzip-compressed (recognised by
// its magic bytes 1f 8b, not by its name) or raw; `check` sees the shape of
// one example ([height, width, channels], 1 channel for a rank-3 file) and
// how many are to be kept. Checks magic, dimensions,
// that each file holds exactly the bytes its header declares, and that the
// counts match; `limit` > 0 keeps only the first `limit` examples (all of
// them when the files hold fewer). InputError naming the file and what is
// wrong. Memory grows with what the files really hold, never with what a
// header claims, and a file is read no further than about 2 MiB past what
// its header declares.
// With `share`, only its examples are kept (`check` sees their count), the
// others read past.
Dataset loadIdxDataset(const DataFiles& source, const DataLoadCheck& check = nullptr,
                       DataShare share = {});

// spec.points examples: x uniform in [x_min, x_max], y = x^2 + N(0, sd^2).
// Deterministic in `seed`; callers pass different seeds for train and test.
Dataset makeSyntheticRegression(const SyntheticRegressionSpec& spec, uint64_t seed);

// Writes the inputs of examples [begin, begin + count) to `out`, as floats,
// count * numElements(example_shape) of them. The caller keeps the range
// inside the data set. InputError from examples left in files
// (ExampleFiles::read).
void copyInputs(const Dataset& data, int64_t begin, int64_t count, float* out);

// tf.image.per_image_standardization of one example of `count` values:
// (x - mean) / max(stddev, 1 / sqrt(count)), mean and (population) stddev
// over all its values. TensorFlow 1's image jobs applied it to their
// pixels cast to float (0 to 255), which traind holds divided by 255: with
// `pixel_scale` the lower bound is taken on that scale, 1 / (255
// sqrt(count)), and the result is theirs; without it (floats as given) it
// is 1 / sqrt(count), as TensorFlow bounds any values.
void standardizeExample(float* values, int64_t count, bool pixel_scale);

// Examples [begin, begin + count) as a Batch: their inputs written to
// `inputs`, count * numElements(inputShape()) values (copyInputs; then
// each image's centre window where the data set has a window, and
// standardizeExample where it asks for it), labels or targets pointing
// into the data set.
// std::out_of_range if the range is not inside the data set;
// std::invalid_argument for a window that is not one of the images.
Batch sliceBatch(const Dataset& data, int64_t begin, int64_t count, float* inputs);

}  // namespace traind
