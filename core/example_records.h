// Data sets from TFRecord files of tf.train.Example messages, the input of
// most TensorFlow 1 jobs (tf.data.TFRecordDataset or tf.TFRecordReader, then
// tf.parse_single_example): one example per record, its image in one
// feature and its label in another. The files are read whole into a Dataset
// (core/dataset.h), as IDX files are, or left where they are for a set
// larger than memory (in_memory: false).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dataset.h"
#include "core/model_spec.h"
#include "core/shape.h"

namespace traind {

// Reads source.records in order, each raw or compressed as
// TFRecordOptions' GZIP or ZLIB write it (told apart by its first bytes),
// and keeps the first source.limit examples (all of them for 0). In each
// record:
//
// - source.image_feature: a bytes_list of one value, raw pixels of the
//   example's shape (height, width, channels; uint8, as numpy's tobytes()
//   gives them), a PNG image of that shape (grey or RGB, 8-bit, as
//   tensorflow_datasets writes them; core/png_image.h) or a JPEG image
//   (core/jpeg_image.h: decoded to the example's channels as
//   tf.io.decode_jpeg does), each pixel becoming pixel / 255 as IDX pixels
//   do; or a float_list of as many values, taken as they are. The first
//   record decides which of raw, encoded or floats every record holds (raw
//   pixels that begin as a JPEG does stay raw).
//   With source.resize, a PNG or JPEG image of any size, of the input's
//   channels, resized to `model_input` (core/image_resize.h), or to
//   source.resize_height and resize_width where they are set, or in
//   proportion to source.resize_shorter_side (at least the input's height
//   and width, and no size then) and then the centre window of
//   `model_input` taken of it, or the centre source.resize_central_fraction
//   of each side of it resized to `model_input` (no size or shorter side
//   then), and / 255, kept as floats; `model_input`
//   must then be [height, width, 1 or 3] (std::invalid_argument).
// - source.label_feature: an int64_list of one class, 0 or more; or a
//   float_list of one regression target.
// - height, width and depth (each one int64, depth 1 when absent), if the
//   record has height and width and no source.resize: the example's shape,
//   as TensorFlow's convert_to_records.py writes them; otherwise it is
//   `model_input`, or the first image's (RecordShape below).
//
// Other features are not read. Every record's features must agree with the
// first record's in kind and shape. InputError naming the file, the
// record's index and byte offset (of the decompressed bytes in a
// compressed file), the feature and what was expected; nothing is kept of a
// data set that fails. `model_input` is a layer graph's, every dimension
// 1 or more. A record is bounded by `model_input`'s size: twice
// its values as floats and 16 MiB beside them. Examples are gathered in
// blocks of about 4 MiB, and `check` sees each block (the examples read
// and the block's) before it is taken: memory is taken only for examples
// already read whole. The blocks are joined at the end, and each is handed
// back to the system as it is (malloc_trim: a process that keeps freed
// memory, as traind does, would otherwise hold the data set twice). An
// image to be resized is decoded whole first, at most 256 MiB of it.
// With `share`, only its records are parsed and kept; the others' framing
// and CRCs are still checked, and they count towards `limit`.
// With source.in_memory false, every record is read and checked as above
// (an encoded image decoded, then dropped), but only its label is kept and
// where its record is: the data set's examples stay in their files
// (Dataset::files), which must be uncompressed (InputError), and are read
// again as batches gather them, the same values as kept ones. With
// source.own_sizes too (and a resize without a size), a batch decodes each
// image again (Dataset::own_sizes, ExampleFiles::decode) for the random
// crop it draws; std::invalid_argument for own_sizes in memory, without a
// resize or with a resize's size.
// What an example left in its files (in_memory: false) keeps beside its
// label: where its record is, and its CRC.
inline constexpr int64_t kRecordPlaceBytes = 24;

// Where an example's shape comes from when its records have no height and
// width: the model's input; or, for a model that takes a window of each
// image (data.augment.random_crop's size), the first record's image, which
// must then be a PNG or JPEG image (its channels, for a JPEG image,
// model_input's).
enum class RecordShape { ModelInput, FirstImage };

Dataset loadExampleRecords(const DataFiles& source, const Shape& model_input,
                           const DataLoadCheck& check = nullptr, DataShare share = {},
                           RecordShape record_shape = RecordShape::ModelInput);

// What a TFRecord file holds, as `trainctl inspect` shows it: what a
// spec's tfrecords, image_feature and label_feature are chosen from.
struct RecordFileSummary {
  struct Feature {
    std::string name;
    std::string kind;   // "bytes", "floats", "int64s", "no value"
    int values = 0;     // in its list
    // its first value: "28", "0.5", "784 bytes", "3120 bytes, a JPEG image of [28, 28, 3]"
    std::string first;
  };
  std::string compression;  // "raw", "gzip", "zlib"
  int64_t records = 0;
  uint64_t bytes = 0;                   // of the records, decompressed
  std::vector<Feature> first_features;  // the first record's, in its order
};

// Reads `path` through, every record's framing and CRCs checked, and its
// first record's features; InputError as loadExampleRecords throws.
RecordFileSummary summarizeRecordFile(const std::string& path);

// Whether `path` is a regular file that begins as a TFRecord file does: a
// record's header, or gzip or zlib compressed data.
bool isRecordFile(const std::string& path);

}  // namespace traind
