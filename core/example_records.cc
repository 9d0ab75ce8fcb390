#include "core/example_records.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/compressed_file.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/example.pb.h"
#include "core/image_resize.h"
#include "core/jpeg_image.h"
#include "core/open_file_limit.h"
#include "core/pixel_inputs.h"
#include "core/png_image.h"
#include "core/printable.h"
#include "core/read_at.h"
#include "core/tfrecord.h"

namespace traind {
namespace {

using tensorflow::Feature;

// A record is one example: its image and a few small features (a label,
// the shape, a file name, perhaps the image encoded as well). Past this
// beside twice the image's floats, a length is refused before it is read:
// a record is held whole, and parsed, before its features are judged.
constexpr uint64_t kRecordSlackBytes = uint64_t(16) << 20;
// The largest class: one more is num_classes, an int.
constexpr int64_t kMaxClass = INT32_MAX - 1;
// What `trainctl inspect` reads of a record, with no model to bound it.
constexpr uint64_t kInspectedRecordBytes = uint64_t(256) << 20;
// Examples are gathered in blocks of about this many bytes, then joined.
constexpr int64_t kBlockBytes = int64_t(4) << 20;
// An image to be resized is decoded whole first, into a buffer of at most
// this many bytes (a photograph of 8000 x 5000 pixels in colour takes 120 MB).
constexpr uint64_t kMaxDecodedImageBytes = uint64_t(256) << 20;
// Examples left in their files are judged against the memory in steps of
// this many: what they keep is their labels and where they are.
constexpr int64_t kPlacesBlock = 65536;

std::string_view kindOf(const Feature& feature) {
  switch (feature.kind_case()) {
    case Feature::kBytesList:
      return "bytes";
    case Feature::kFloatList:
      return "floats";
    case Feature::kInt64List:
      return "int64s";
    case Feature::KIND_NOT_SET:
      break;
  }
  return "no value";
}

int valueCount(const Feature& feature) {
  switch (feature.kind_case()) {
    case Feature::kBytesList:
      return feature.bytes_list().value_size();
    case Feature::kFloatList:
      return feature.float_list().value_size();
    case Feature::kInt64List:
      return feature.int64_list().value_size();
    case Feature::KIND_NOT_SET:
      break;
  }
  return 0;
}

// "int64s (2 values)", "bytes"
std::string described(const Feature& feature) {
  const int count = valueCount(feature);
  return count != 1 && feature.kind_case() != Feature::KIND_NOT_SET
             ? fmt::format("{} ({} values)", kindOf(feature), count)
             : std::string(kindOf(feature));
}

// The encodings of images traind decodes.
enum class ImageFormat { Png, Jpeg };

std::optional<ImageFormat> imageFormatOf(const std::string& bytes) {
  if (isPng(bytes)) return ImageFormat::Png;
  if (isJpeg(bytes)) return ImageFormat::Jpeg;
  return std::nullopt;
}

const char* nameOf(ImageFormat format) { return format == ImageFormat::Png ? "PNG" : "JPEG"; }

ImageHeader readHeader(ImageFormat format, const std::string& bytes) {
  return format == ImageFormat::Png ? readPngHeader(bytes) : readJpegHeader(bytes);
}

// What a record's image bytes are when they are not raw pixels.
std::string_view encodingOf(const std::string& bytes) {
  if (isPng(bytes)) return ", a PNG image";
  if (isJpeg(bytes)) return ", a JPEG image";
  if (bytes.starts_with("GIF87a") || bytes.starts_with("GIF89a")) return ", a GIF image";
  if (bytes.size() >= 12 && bytes.starts_with("RIFF") && bytes.substr(8, 4) == "WEBP")
    return ", a WebP image";
  return "";
}

// How a TFRecord file was written, from its first bytes; nullopt for
// bytes that begin none of the three. A raw file's first record can begin
// with a gzip or zlib header's two bytes (a length of 35615, or 376); its
// header's CRC tells it apart.
std::optional<CompressedFile::Format> recordFileFormatOf(const std::string& path) {
  char head[kTfRecordHeaderSize] = {};
  std::ifstream file(path, std::ios::binary);
  file.read(head, sizeof head);
  const auto got = size_t(file.gcount());
  const auto* first = reinterpret_cast<const unsigned char*>(head);
  if (got == sizeof head && isTfRecordHeader(head)) return CompressedFile::Format::Raw;
  if (got >= 2 && CompressedFile::isGzipHeader(first)) return CompressedFile::Format::Gzip;
  if (got >= 2 && CompressedFile::isZlibHeader(first)) return CompressedFile::Format::Zlib;
  return std::nullopt;
}

// As recordFileFormatOf, raw for bytes of no format: an empty file holds no
// records, and the reader names what is wrong with others.
CompressedFile::Format recordFileFormat(const std::string& path) {
  return recordFileFormatOf(path).value_or(CompressedFile::Format::Raw);
}

std::string notAnExample(const std::string& record) {
  return "expected a tf.train.Example message, got " + std::to_string(record.size()) +
         " bytes that are none";
}

// Parses `record` into `example`: false unless it is one. Bytes without
// the features field are another message whose fields the parser skipped
// as unknown (a TensorBoard event file's Event, say), not an example.
bool parseExample(const std::string& record, tensorflow::Example& example) {
  return example.ParseFromString(record) && (record.empty() || example.has_features());
}

// How a data set's records hold their images. Pixels: raw bytes of the
// example's shape; Encoded: PNG or JPEG images of that shape, kept decoded
// as bytes; Floats: a float_list; Resized: encoded images of any size,
// kept as floats once resized (DataFiles::resize).
enum class ImageKind { Pixels, Encoded, Floats, Resized };

// An encoded image as its header says, and its shape decoded here:
// [height, width, the channels it decodes to].
struct EncodedImage {
  ImageFormat format;
  ImageHeader header;
  Shape decoded;
};

// A PNG image's samples are taken as they are; a JPEG image decodes to
// the example's channels where it has one or three, as
// tf.io.decode_jpeg(image, channels) does, else to its own.
EncodedImage encodedImage(ImageFormat format, ImageHeader header, const Shape& example) {
  const bool to_example_channels =
      format == ImageFormat::Jpeg && example.size() == 3 && (example[2] == 1 || example[2] == 3);
  const int64_t channels = to_example_channels ? example[2] : int64_t(header.channels);
  return {format, header, {header.height, header.width, channels}};
}

// Decodes `bytes`, whose header is image.header, into `out`; what went
// wrong, or empty.
std::string decodeImage(const std::string& bytes, const EncodedImage& image, uint8_t* out) {
  return image.format == ImageFormat::Png
             ? decodePng(bytes, image.header, out)
             : decodeJpeg(bytes, image.header, int(image.decoded[2]), out);
}

// The first of `example`'s features named `name`, or nullptr.
const Feature* featureNamed(const tensorflow::Example& example, std::string_view name) {
  for (const tensorflow::FeatureEntry& entry : example.features().feature())
    if (entry.key() == name) return &entry.value();
  return nullptr;
}

// A TFRecord file's records, read through its compression. Compressed data
// cut short or corrupt is named at once, between two records too, where it
// would pass for a shorter file.
class RecordFile {
 public:
  RecordFile(const std::string& path, uint64_t max_record_bytes)
      : path_(path),
        format_(recordFileFormat(path)),
        file_(path, format_, "a TFRecord file"),
        // Offsets in a compressed file are of its decompressed bytes.
        name_(format_ == CompressedFile::Format::Raw ? path : path + " (decompressed)"),
        reader_([this](char* dst, size_t bytes) { return read(dst, bytes); }, name_,
                max_record_bytes) {}

  bool next(std::string& record) { return reader_.next(record); }
  uint32_t lastDataCrc() const { return reader_.lastDataCrc(); }
  int64_t recordsRead() const { return reader_.recordsRead(); }
  uint64_t bytesRead() const { return reader_.bytesRead(); }
  CompressedFile::Format format() const { return format_; }
  // The path, and "(decompressed)" after it where offsets are of decompressed bytes.
  const std::string& name() const { return name_; }

 private:
  size_t read(char* dst, size_t bytes) {
    const size_t got = file_.read(dst, bytes);
    if (got == bytes || file_.error().empty()) return got;
    if (format_ == CompressedFile::Format::Raw)
      throw InputError(path_ + ": cannot read: " + file_.error());
    // A raw file whose first record's header is damaged, and whose first
    // bytes look like a compressed file's.
    if (file_.produced() == 0)
      throw InputError(fmt::format(
          "{}: neither a TFRecord file (its first record's header has a CRC that does not "
          "match) nor one compressed with gzip or zlib ({})",
          path_, file_.error()));
    throw InputError(fmt::format(
        "{}: corrupt compressed data at record {} (byte {} of the decompressed data): {}", path_,
        reader_.recordsRead(), reader_.bytesRead(), file_.error()));
  }

  std::string path_;
  CompressedFile::Format format_;
  CompressedFile file_;
  std::string name_;
  TfRecordReader reader_;
};

// Values appended in blocks, joined once at the end: while a data set
// loads it holds its values and one block beyond them, and while they are
// joined, the join and one block.
template <class T>
class BlockStore {
 public:
  // Room for `values` more values in a new block.
  void addBlock(size_t values) {
    blocks_.emplace_back();
    blocks_.back().reserve(values);
    room_ = values;
  }
  size_t room() const { return room_; }  // in the last block
  // Room for `values` more values at the end of the last block, to be written there.
  T* extend(size_t values) {
    room_ -= values;
    std::vector<T>& block = blocks_.back();
    block.resize(block.size() + values);
    return block.data() + block.size() - values;
  }
  template <class It>
  void append(It begin, It end) {
    room_ -= size_t(end - begin);
    blocks_.back().insert(blocks_.back().end(), begin, end);
  }
  std::vector<T> join() {
    size_t total = 0;
    for (const auto& block : blocks_) total += block.size();
    std::vector<T> joined;
    joined.reserve(total);
    for (auto& block : blocks_) {
      joined.insert(joined.end(), block.begin(), block.end());
      std::vector<T>().swap(block);
      // Blocks come from the heap, which traind keeps rather than hand back
      // (M_TRIM_THRESHOLD, traind_main.cc): without this, the blocks stay
      // resident beside their join, twice the data set at the end (a set of
      // 60000 resized images: 372 MiB at peak instead of 196).
      malloc_trim(0);
    }
    blocks_.clear();
    return joined;
  }

 private:
  std::vector<std::vector<T>> blocks_;
  size_t room_ = 0;
};

// Where a record left in its file is: the file's index among the data
// set's, the offset of its framing (header, data, footer), and its data's
// size and CRC-32C, by which a record read again is known to be the one
// checked at load.
struct RecordPlace {
  uint64_t offset;
  uint32_t bytes;
  uint32_t crc;
  int32_t file;
};
static_assert(sizeof(RecordPlace) == kRecordPlaceBytes);

// A data set's files, open to be read at offsets (pread), closed with it.
class OpenFiles {
 public:
  OpenFiles() = default;
  OpenFiles(OpenFiles&& other) noexcept : fds_(std::move(other.fds_)) { other.fds_.clear(); }
  OpenFiles& operator=(OpenFiles&&) = delete;
  ~OpenFiles() {
    for (int fd : fds_) ::close(fd);
  }

  // Opens `path`, the next file; InputError if it cannot be.
  void open(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    // A set of more files than a shell's soft limit (1024 in many) takes
    // the hard one, which a process may raise itself to.
    if (fd < 0 && errno == EMFILE && raiseOpenFileLimit())
      fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    const int error = errno;
    if (fd < 0)
      throw InputError(fmt::format(
          "{}: cannot open: {}{}", path, std::strerror(error),
          error == EMFILE ? fmt::format(" (in_memory: false keeps every file of the set open: {})",
                                        kRaiseOpenFileLimit)
                          : ""));
    fds_.push_back(fd);
  }
  int operator[](size_t file) const { return fds_[file]; }

  // Tells the system that the files will be read in no order: it then
  // reads no more of a file than each read asks for. Advice only: a
  // system that does not take it reads as before.
  void adviseRandomOrder() const {
    for (int fd : fds_) ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
  }

 private:
  std::vector<int> fds_;
};

// The centres a resize method's pixels are reckoned with.
PixelCentres centresOf(DataFiles::Resize resize) {
  return resize == DataFiles::Resize::LegacyBilinear ? PixelCentres::Legacy : PixelCentres::Half;
}

// Decoded pixels of `decoded` shape resized to `input` as floats / 255, as
// a set held in memory keeps them and one left in its files reads them,
// with source.resize's method: with a shorter side
// (DataFiles::resize_shorter_side), resized to it in proportion, each side
// rounded as source.resize_rounding says, and the input's centre window of
// that; with a central fraction (DataFiles::resize_central_fraction), that
// much of each side about the centre, resized to the input.
void resizeToInput(const uint8_t* decoded, const Shape& decoded_shape, const Shape& input,
                   const DataFiles& source, float* out) {
  const PixelCentres centres = centresOf(source.resize);
  if (const double central_fraction = source.resize_central_fraction; central_fraction > 0.0) {
    const int64_t top = centralCropStart(decoded_shape[0], central_fraction);
    const int64_t left = centralCropStart(decoded_shape[1], central_fraction);
    const int64_t channels = decoded_shape[2], row = decoded_shape[1] * channels;
    resizeBilinear(decoded + top * row + left * channels, row, decoded_shape[0] - 2 * top,
                   decoded_shape[1] - 2 * left, int(channels), input[0], input[1], centres, out);
  } else {
    auto [height, width] = std::pair{input[0], input[1]};
    if (source.resize_shorter_side > 0)
      std::tie(height, width) = sizeWithShorterSide(
          decoded_shape[0], decoded_shape[1], source.resize_shorter_side, source.resize_rounding);
    // tf.image.resize_with_crop_or_pad's corner, as evaluation's window (centreWindow).
    resizeBilinearPart(decoded, decoded_shape[0], decoded_shape[1], int(decoded_shape[2]), height,
                       width, (height - input[0]) / 2, (width - input[1]) / 2, input[0], input[1],
                       centres, out);
  }
  scalePixelsToInputs(out, size_t(numElements(input)));
}

// The examples of a data set left in their uncompressed TFRecord files,
// each read at its offset and decoded as ExampleLoader would have kept it:
// the same floats, bit for bit.
class RecordExampleFiles final : public ExampleFiles {
 public:
  RecordExampleFiles(std::vector<std::string> paths, OpenFiles files,
                     std::vector<RecordPlace> places, ImageKind kind, Shape shape,
                     const DataFiles& source)
      : paths_(std::move(paths)),
        files_(std::move(files)),
        places_(std::move(places)),
        kind_(kind),
        shape_(std::move(shape)),
        elements_(size_t(numElements(shape_))),
        source_(source) {}

  void adviseRandomOrder() const override { files_.adviseRandomOrder(); }

  void read(int64_t index, float* out) const override {
    if (source_.own_sizes)
      throw std::logic_error(
          "ExampleFiles::read: images of their own sizes are gathered by decode(), for the crop "
          "drawn on each");
    const RecordPlace& place = places_.at(size_t(index));
    const Feature& image = imageFeature(place);
    if (kind_ == ImageKind::Floats) {
      if (image.kind_case() != Feature::kFloatList ||
          size_t(image.float_list().value_size()) != elements_)
        changed(place, "no longer holds the floats of an image of " + shapeToString(shape_));
      std::copy(image.float_list().value().begin(), image.float_list().value().end(), out);
      return;
    }
    const std::string& bytes = imageBytes(place, image);
    if (kind_ == ImageKind::Pixels) {
      if (bytes.size() != elements_)
        changed(place, "no longer holds the raw pixels of an image of " + shapeToString(shape_));
      pixelsToInputs(reinterpret_cast<const uint8_t*>(bytes.data()), elements_, out);
      return;
    }
    // A buffer of this thread, reused from example to example: at most
    // kMaxDecodedImageBytes, to be resized, or a record's size.
    thread_local std::vector<uint8_t> decoded;
    const Shape decoded_shape = decodeRecordImage(place, bytes, decoded);
    if (kind_ == ImageKind::Resized) {
      resizeToInput(decoded.data(), decoded_shape, shape_, source_, out);
      return;
    }
    pixelsToInputs(decoded.data(), elements_, out);
  }

  Shape decode(int64_t index, std::vector<uint8_t>& pixels) const override {
    if (kind_ != ImageKind::Encoded && kind_ != ImageKind::Resized)
      throw std::logic_error("ExampleFiles::decode: the records hold no PNG or JPEG images");
    const RecordPlace& place = places_.at(size_t(index));
    return decodeRecordImage(place, imageBytes(place, imageFeature(place)), pixels);
  }

 private:
  [[noreturn]] void changed(const RecordPlace& place, std::string_view what) const {
    throw InputError(
        fmt::format("{}: the record at byte {} {}; it held an example when the "
                    "data set was loaded: was the file changed?",
                    paths_[size_t(place.file)], place.offset, what));
  }

  // The image feature of the record at `place`, read again and parsed
  // into a message of this thread's, valid until its next call.
  const Feature& imageFeature(const RecordPlace& place) const {
    // Buffers of this thread, reused from example to example.
    thread_local std::string framed;
    thread_local tensorflow::Example example;
    framed.resize(kTfRecordHeaderSize + place.bytes + kTfRecordFooterSize);
    try {
      readExactlyAt(files_[size_t(place.file)], place.offset,
                    reinterpret_cast<std::byte*>(framed.data()), framed.size(),
                    paths_[size_t(place.file)]);
    } catch (const InputError& e) {
      changed(place, fmt::format("cannot be read whole ({})", e.what()));
    }
    const std::optional<std::string_view> data = recordData(framed, place.crc);
    if (!data) changed(place, "is not the record it was (its length or a CRC differs)");
    if (!example.ParseFromArray(data->data(), int(data->size())))
      changed(place, "is no longer a tf.train.Example");
    // The bytes checked at load: what follows cannot fail but for a CRC
    // that matched other bytes, and is checked only so far as memory needs.
    const Feature* image = featureNamed(example, source_.image_feature);
    if (!image)
      changed(place, fmt::format("has no feature '{}'", printable(source_.image_feature)));
    return *image;
  }

  const std::string& imageBytes(const RecordPlace& place, const Feature& image) const {
    if (image.kind_case() != Feature::kBytesList || image.bytes_list().value_size() != 1)
      changed(place, "no longer holds an image's bytes");
    return image.bytes_list().value(0);
  }

  // The PNG or JPEG image of `bytes`, the record at `place`'s, decoded
  // into `decoded` (resized to hold it); its shape.
  Shape decodeRecordImage(const RecordPlace& place, const std::string& bytes,
                          std::vector<uint8_t>& decoded) const {
    const std::optional<ImageFormat> format = imageFormatOf(bytes);
    const ImageHeader header = format ? readHeader(*format, bytes) : ImageHeader{};
    if (!format || !header.error.empty()) changed(place, "no longer holds a PNG or JPEG image");
    const EncodedImage encoded = encodedImage(*format, header, shape_);
    const double decoded_bytes = double(numElements(encoded.decoded));
    const bool fits =
        kind_ == ImageKind::Resized
            ? encoded.decoded[2] == shape_[2] && decoded_bytes <= double(kMaxDecodedImageBytes)
            : decoded_bytes == double(elements_);
    if (!fits) changed(place, "holds an image of " + shapeToString(encoded.decoded));
    decoded.resize(size_t(decoded_bytes));
    if (const std::string error = decodeImage(bytes, encoded, decoded.data()); !error.empty())
      changed(place, "holds " + error);
    return encoded.decoded;
  }

  const std::vector<std::string> paths_;
  const OpenFiles files_;  // paths_'s
  const std::vector<RecordPlace> places_;
  const ImageKind kind_;
  const Shape shape_;
  const size_t elements_;
  const DataFiles source_;  // what the images' feature is, and how they are resized
};

class ExampleLoader {
 public:
  ExampleLoader(const DataFiles& source, const Shape& model_input, const DataLoadCheck& check,
                DataShare share, RecordShape record_shape)
      : source_(source),
        record_shape_(record_shape),
        model_input_(model_input),
        shape_(model_input),
        max_record_bytes_(kRecordSlackBytes +
                          2 * sizeof(float) * uint64_t(numElements(model_input))),
        check_(check),
        share_(share),
        image_kind_(source.resize == DataFiles::Resize::None ? ImageKind::Pixels
                                                             : ImageKind::Resized),
        in_files_(!source.in_memory) {
    if (image_kind_ == ImageKind::Resized &&
        (model_input.size() != 3 || (model_input[2] != 1 && model_input[2] != 3)))
      throw std::invalid_argument("images resized to an input of " + shapeToString(model_input) +
                                  ", not [height, width, 1 or 3]");
    // The window of a shorter side's resize must lie inside every image,
    // a side cut down a pixel short too. The input's sides are read only
    // once it is known to be resized: [height, width, C], checked above.
    if (source.resize_shorter_side > 0 &&
        (image_kind_ != ImageKind::Resized || source.resize_height > 0 ||
         source.resize_shorter_side < std::max(model_input[0], model_input[1]) +
                                          (source.resize_rounding == SideRounding::Down ? 1 : 0)))
      throw std::invalid_argument(
          fmt::format("a shorter side of {} for an input of {}, with a resize's size of [{}, {}]",
                      source.resize_shorter_side, shapeToString(model_input), source.resize_height,
                      source.resize_width));
    // A centre kept is resized to the input.
    const double fraction = source.resize_central_fraction;
    if (fraction != 0.0 && (image_kind_ != ImageKind::Resized || source.resize_height > 0 ||
                            source.resize_shorter_side > 0 || !(fraction > 0.0 && fraction <= 1.0)))
      throw std::invalid_argument(fmt::format(
          "a central fraction of {} with a resize's size of [{}, {}] or a shorter side of {}",
          source.resize_central_fraction, source.resize_height, source.resize_width,
          source.resize_shorter_side));
    // Images of their own sizes are decoded again from their files.
    if (source.own_sizes &&
        (image_kind_ != ImageKind::Resized || source.resize_height > 0 || source.in_memory))
      throw std::invalid_argument(
          "images of their own sizes kept in memory, not resized or with a resize's size");
  }

  // Reads `path` to its end, or up to the limit; false once the limit is reached.
  bool readFile(const std::string& path) {
    RecordFile file(path, max_record_bytes_);
    file_ = file.name();
    if (in_files_) files_.open(path);
    paths_.push_back(path);
    std::string record;
    tensorflow::Example example;
    const int64_t examples_before = examples_;
    while (!full()) {
      offset_ = file.bytesRead();
      index_ = file.recordsRead();
      if (!file.next(record)) break;
      record_crc_ = file.lastDataCrc();
      content_crc_ = crc32cOfWord(record_crc_, content_crc_);
      if (!share_.keeps(records_++)) continue;  // another reader's, its CRCs checked
      if (!parseExample(record, example)) fail(notAnExample(record));
      take(example, record);
    }
    file_examples_.push_back(examples_ - examples_before);
    // How the records fall into files decides the order data.interleave
    // reads them in: the same records split otherwise are another set.
    content_crc_ = crc32cOfWord(uint32_t(file.recordsRead()), content_crc_);
    return !full();
  }

  Dataset finish() {
    if (examples_ == 0) {
      const std::string files = source_.records.size() == 1
                                    ? source_.records.front() + ": holds"
                                    : fmt::format("the {} files from {} on hold",
                                                  source_.records.size(), source_.records.front());
      if (records_ == 0) throw InputError(files + " no records");
      throw InputError(fmt::format(
          "{} {} records{}, none for share {} of {} (data.shard_by_worker){}", files, records_,
          full() ? " within limit" : "", share_.index, share_.count, kEmptyShareHint));
    }
    Dataset data;
    data.size = examples_;
    data.pixel_scale = image_kind_ != ImageKind::Floats;
    data.share = share_;
    if (share_.count > 1) data.whole_size = records_;
    data.file_examples = std::move(file_examples_);
    data.example_shape = shape_;
    data.own_sizes = source_.own_sizes;
    data.resize_centres = centresOf(source_.resize);
    data.content_crc = content_crc_;
    if (in_files_) {
      places_.shrink_to_fit();
      data.files = std::make_shared<RecordExampleFiles>(
          std::move(paths_), std::move(files_), std::move(places_), image_kind_, shape_, source_);
    }
    data.pixels = pixels_.join();
    data.floats = floats_.join();
    if (label_kind_ == LabelKind::Class) {
      classes_.shrink_to_fit();  // grown by doubling
      data.labels = std::move(classes_);
      data.num_classes = 1 + *std::max_element(data.labels.begin(), data.labels.end());
    } else {
      data.targets = std::move(targets_);
    }
    return data;
  }

 private:
  enum class LabelKind { Class, Target };

  // The features of one record that the data set takes.
  struct Found {
    const Feature* image = nullptr;
    const Feature* label = nullptr;
    const Feature* height = nullptr;
    const Feature* width = nullptr;
    const Feature* depth = nullptr;
  };

  bool full() const { return source_.limit > 0 && records_ >= source_.limit; }

  [[noreturn]] void fail(std::string_view what) const {
    throw InputError(fmt::format("{}: record {} at byte {}: {}", file_, index_, offset_, what));
  }

  [[noreturn]] void failFeature(std::string_view name, std::string_view what) const {
    fail(fmt::format("feature '{}' {}", printable(name), what));
  }

  // Finds the features the data set takes; the others are not looked at
  // beyond their keys.
  Found find(const tensorflow::Example& example) const {
    Found found;
    const std::pair<std::string_view, const Feature * Found::*> wanted[] = {
        {source_.image_feature, &Found::image},
        {source_.label_feature, &Found::label},
        {"height", &Found::height},
        {"width", &Found::width},
        {"depth", &Found::depth}};
    for (const tensorflow::FeatureEntry& entry : example.features().feature()) {
      for (const auto& [name, slot] : wanted) {
        if (entry.key() != name) continue;
        // TensorFlow keeps the last and reports data loss: of the image or
        // the label, which one the writer meant is not known.
        if (found.*slot && (slot == &Found::image || slot == &Found::label))
          failFeature(name, "is given twice");
        found.*slot = &entry.value();
      }
    }
    const auto missing = [&](std::string_view name, std::string_view field) {
      const auto& entries = example.features().feature();
      std::string listed;
      for (int i = 0; i < entries.size() && i < 10; ++i)
        listed += (i ? ", " : "") + printable(entries[i].key());
      if (entries.size() > 10) listed += fmt::format(" and {} more", entries.size() - 10);
      fail(fmt::format("has no feature '{}' (its features: {}); set {} to the one that holds {}",
                       printable(name), entries.empty() ? "none" : listed, field,
                       field == "image_feature" ? "the image" : "the label"));
    };
    if (!found.image) missing(source_.image_feature, "image_feature");
    if (!found.label) missing(source_.label_feature, "label_feature");
    return found;
  }

  // `record`: the data of the record that holds `example`.
  void take(const tensorflow::Example& example, const std::string& record) {
    const Found found = find(example);
    // Resized images come in sizes of their own, whatever their records
    // say of them: the example takes the model's input.
    if (image_kind_ != ImageKind::Resized) takeShape(found);
    if (examples_ == 0) {  // the first record chooses what every record's features hold
      if (image_kind_ == ImageKind::Pixels) image_kind_ = firstImageKind(*found.image);
      if (found.label->kind_case() == Feature::kFloatList) label_kind_ = LabelKind::Target;
      if (record_shape_ == RecordShape::FirstImage && shape_source_ == kShapeFromModel &&
          image_kind_ != ImageKind::Resized)
        takeFirstImageShape(*found.image);
    }
    // Both features are judged before any memory is taken for them.
    const std::optional<EncodedImage> encoded = checkImage(*found.image);
    checkLabel(*found.label);
    if (in_files_)
      placeInFile(*found.image, encoded, record);
    else
      keepImage(*found.image, encoded);
    if (label_kind_ == LabelKind::Class)
      classes_.push_back(int32_t(found.label->int64_list().value(0)));
    else
      targets_.push_back(found.label->float_list().value(0));
    ++examples_;
  }

  // Keeps the image, checked by checkImage (`encoded`), in memory.
  void keepImage(const Feature& image, const std::optional<EncodedImage>& encoded) {
    const size_t elements = size_t(numElements(shape_));  // the image's, as checked
    if ((keptAsBytes() ? pixels_.room() : floats_.room()) < elements) addBlock();
    if (image_kind_ == ImageKind::Floats) {
      const auto& values = image.float_list().value();
      floats_.append(values.begin(), values.end());
    } else {
      const std::string& bytes = image.bytes_list().value(0);
      if (image_kind_ == ImageKind::Resized) {
        decode(bytes, *encoded, decoded_);
        resizeToInput(decoded_.data(), encoded->decoded, shape_, source_, floats_.extend(elements));
      } else if (image_kind_ == ImageKind::Encoded) {
        decode(bytes, *encoded, pixels_.extend(elements));
      } else {
        pixels_.append(bytes.begin(), bytes.end());
      }
    }
  }

  // Leaves the image, checked by checkImage (`encoded`), in its file, where
  // `record`, which holds it, is; an encoded image is decoded once, to be
  // judged whole now rather than when it trains.
  void placeInFile(const Feature& image, const std::optional<EncodedImage>& encoded,
                   const std::string& record) {
    if (examples_ % kPlacesBlock == 0 && check_)
      check_(shape_, examples_ + blockWithinLimit(kPlacesBlock), /*value_bytes=*/0);
    if (record.size() > UINT32_MAX) fail("a record of more than 4 GiB cannot stay in its file");
    if (encoded) decode(image.bytes_list().value(0), *encoded, decoded_);
    places_.push_back({offset_, uint32_t(record.size()), record_crc_, int32_t(paths_.size() - 1)});
  }

  // A dimension: one int64 from 1 on; nullopt for a feature of that name
  // that holds something else, which is not the image's shape.
  std::optional<int64_t> dimension(const Feature* feature, std::string_view name) const {
    if (!feature || feature->kind_case() != Feature::kInt64List ||
        feature->int64_list().value_size() != 1)
      return std::nullopt;
    const int64_t value = feature->int64_list().value(0);
    if (value < 1 || value > INT32_MAX)
      failFeature(name, fmt::format("is {}; expected an image's size in it, from 1 to {}", value,
                                    INT32_MAX));
    return value;
  }

  // The first record's image gives the example's shape, its channels as
  // encodedImage decodes them: an image the model takes a window of has a
  // size of its own, which only an encoded image's header can give.
  void takeFirstImageShape(const Feature& image) {
    if (image_kind_ != ImageKind::Encoded)
      fail(fmt::format(
          "feature '{}' holds {}, of no size of their own: the model takes a window of each "
          "image (data.augment.random_crop.size), so the images' height and width must come "
          "from the records (expected 'height' and 'width' int64 features) or from PNG or JPEG "
          "images",
          printable(source_.image_feature),
          image_kind_ == ImageKind::Floats ? "floats" : "raw pixels"));
    const std::string& bytes = image.bytes_list().value(0);
    const ImageFormat format = *imageFormatOf(bytes);
    shape_ = encodedImage(format, readHeader(format, bytes), model_input_).decoded;
    shape_source_ = kShapeFromFirstImage;
  }

  // height, width and depth, when the record has the first two, give the
  // example's shape.
  void takeShape(const Found& found) {
    const std::optional<int64_t> height = dimension(found.height, "height");
    const std::optional<int64_t> width = dimension(found.width, "width");
    if (!height || !width) return;
    const Shape shape{*height, *width, dimension(found.depth, "depth").value_or(1)};
    // No record holds more values than bytes, nor decodes to more than an
    // image to be resized may: sizes past that lie (and overflowed int64).
    const uint64_t most = std::max<uint64_t>(max_record_bytes_, kMaxDecodedImageBytes);
    if (uint64_t(numElementsSaturated(shape)) > most)
      fail(
          fmt::format("height, width and depth give an image of {}, more values than a record "
                      "holds ({} at most): the size features are wrong",
                      shapeToString(shape), most));
    if (examples_ == 0 && shape_source_ == kShapeFromModel) {
      shape_ = shape;
      shape_source_ = kShapeFromRecords;
    } else if (shape != shape_) {
      fail(fmt::format(
          "height, width and depth give an image of {}; expected {}, as {}", shapeToString(shape),
          shapeToString(shape_),
          shape_source_ == kShapeFromModel ? "the model's input" : "the records before it"));
    }
  }

  // What the first record's image makes the data set's: a float_list
  // floats; bytes that begin as a PNG or JPEG image does an encoded image if
  // its header reads, or if they are not of the raw pixels' size either
  // (raw pixels may begin as a JPEG does: 255 216 255); other bytes raw
  // pixels.
  ImageKind firstImageKind(const Feature& image) const {
    if (image.kind_case() == Feature::kFloatList) return ImageKind::Floats;
    if (image.kind_case() != Feature::kBytesList || image.bytes_list().value_size() != 1)
      return ImageKind::Pixels;  // refused by checkImage
    const std::string& bytes = image.bytes_list().value(0);
    const std::optional<ImageFormat> format = imageFormatOf(bytes);
    if (!format) return ImageKind::Pixels;
    return readHeader(*format, bytes).channels > 0 ||
                   double(bytes.size()) != double(numElementsSaturated(shape_))
               ? ImageKind::Encoded
               : ImageKind::Pixels;
  }

  // Pixels and encoded images are kept as bytes, the others as floats.
  bool keptAsBytes() const {
    return image_kind_ == ImageKind::Pixels || image_kind_ == ImageKind::Encoded;
  }

  // An encoded image's header: an image of the example's shape (its
  // values, for a flat shape) or, to be resized, of its channels; no larger
  // decoded than a record of raw pixels could be, or than
  // kMaxDecodedImageBytes to be resized. Its channels as encodedImage
  // decodes them.
  EncodedImage checkEncoded(ImageFormat format, const std::string& bytes) const {
    const std::string& name = source_.image_feature;
    const ImageHeader header = readHeader(format, bytes);
    if (!header.error.empty()) failFeature(name, "holds " + header.error);
    const EncodedImage image = encodedImage(format, header, shape_);
    const Shape& decoded = image.decoded;
    const double decoded_bytes = double(decoded[0]) * double(decoded[1]) * double(decoded[2]);
    const bool resized = image_kind_ == ImageKind::Resized;
    const uint64_t most = resized ? kMaxDecodedImageBytes : max_record_bytes_;
    if (decoded_bytes > double(most))
      failFeature(name, fmt::format("holds a {} image of {}, more than the {} bytes {}",
                                    nameOf(format), shapeToString(decoded), most,
                                    resized ? "an image to be resized may decode to"
                                            : "a record may hold here"));
    if (resized) {
      if (decoded[2] != shape_[2])
        failFeature(name, fmt::format("holds a {} image of {}; expected {} channel{} (the "
                                      "model's input's) to resize to {}",
                                      nameOf(format), shapeToString(decoded), shape_[2],
                                      shape_[2] == 1 ? "" : "s", shapeToString(shape_)));
      return image;
    }
    const bool fits =
        shape_.size() == 3 ? decoded == shape_ : decoded_bytes == double(numElements(shape_));
    // Resizing takes images of other sizes to an input of [h, w, 1 or 3],
    // its channels theirs.
    const bool resizing_would_take = model_input_.size() == 3 &&
                                     (model_input_[2] == 1 || model_input_[2] == 3) &&
                                     decoded[2] == model_input_[2];
    if (!fits)
      failFeature(name,
                  fmt::format("holds a {} image of {}; expected one of {}, as {}{}", nameOf(format),
                              shapeToString(decoded), shapeToString(shape_), shape_source_,
                              resizing_would_take && record_shape_ == RecordShape::ModelInput
                                  ? " (resize: bilinear takes images of any size)"
                                  : ""));
    return image;
  }

  // Decodes `bytes`, checked by checkEncoded as `image`, into `out`.
  void decode(const std::string& bytes, const EncodedImage& image, uint8_t* out) const {
    const std::string error = decodeImage(bytes, image, out);
    if (!error.empty()) failFeature(source_.image_feature, "holds " + error);
  }
  void decode(const std::string& bytes, const EncodedImage& image,
              std::vector<uint8_t>& out) const {
    out.resize(size_t(numElements(image.decoded)));
    decode(bytes, image, out.data());
  }

  // What checkImage expected of an image of `elements` values, for its
  // messages only: formatted when a record fails, not for every record.
  std::string expectedImage(double elements) const {
    switch (image_kind_) {
      case ImageKind::Resized:
        return fmt::format("a PNG or JPEG image to resize to {}", shapeToString(shape_));
      case ImageKind::Encoded:
        return fmt::format("a PNG or JPEG image of {}", shapeToString(shape_));
      case ImageKind::Pixels:
        return fmt::format("the {} raw pixels (bytes) of an image of {}", elements,
                           shapeToString(shape_));
      case ImageKind::Floats:
        break;
    }
    return fmt::format("the {} floats of an image of {}", elements, shapeToString(shape_));
  }

  // The image's values as the first record's were, as many as the shape
  // has; validated before memory is taken for them. An encoded image's
  // header, to decode it by.
  std::optional<EncodedImage> checkImage(const Feature& image) const {
    const std::string& name = source_.image_feature;
    // As a double: the dimensions of a record's shape can multiply past int64.
    double elements = 1.0;
    for (int64_t d : shape_) elements *= double(d);
    if (image_kind_ != ImageKind::Floats && image.kind_case() == Feature::kBytesList &&
        image.bytes_list().value_size() == 1) {
      const std::string& bytes = image.bytes_list().value(0);
      if (image_kind_ == ImageKind::Encoded || image_kind_ == ImageKind::Resized) {
        if (const std::optional<ImageFormat> format = imageFormatOf(bytes))
          return checkEncoded(*format, bytes);
        failFeature(name, fmt::format("holds {} bytes{}; expected {}{}", bytes.size(),
                                      encodingOf(bytes), expectedImage(elements),
                                      examples_ > 0 ? ", as the records before it" : ""));
      }
      // Raw pixels; a PNG or JPEG image of their size among them is taken as
      // pixels, as the first record's image was.
      if (double(bytes.size()) != elements)
        failFeature(name, fmt::format("holds {} bytes{}; expected {}{}", bytes.size(),
                                      encodingOf(bytes), expectedImage(elements),
                                      encodingOf(bytes).empty() ? ""
                                      : imageFormatOf(bytes)
                                          ? ", as the first record's image was"
                                          : " (decode the images as the records are written)"));
      return std::nullopt;
    }
    if (image_kind_ == ImageKind::Floats && image.kind_case() == Feature::kFloatList) {
      const auto& values = image.float_list().value();
      if (double(values.size()) != elements)
        failFeature(name, fmt::format("holds {} floats; expected {}", values.size(),
                                      expectedImage(elements)));
      for (int i = 0; i < values.size(); ++i)
        if (!std::isfinite(values[i]))
          failFeature(name,
                      fmt::format("holds {} at value {}; expected finite floats", values[i], i));
      return std::nullopt;
    }
    failFeature(name,
                fmt::format("holds {}; expected {}{}", described(image), expectedImage(elements),
                            examples_ > 0 ? ", as the records before it" : ""));
  }

  void checkLabel(const Feature& label) const {
    const std::string& name = source_.label_feature;
    if (label_kind_ == LabelKind::Class && label.kind_case() == Feature::kInt64List &&
        label.int64_list().value_size() == 1) {
      const int64_t value = label.int64_list().value(0);
      if (value < 0 || value > kMaxClass)
        failFeature(name, fmt::format("is {}; expected a class from 0 to {}", value, kMaxClass));
      return;
    }
    if (label_kind_ == LabelKind::Target && label.kind_case() == Feature::kFloatList &&
        label.float_list().value_size() == 1) {
      const float value = label.float_list().value(0);
      if (!std::isfinite(value))
        failFeature(name, fmt::format("is {}; expected a finite target", value));
      return;
    }
    failFeature(name,
                fmt::format("holds {}; expected {}{}", described(label),
                            label_kind_ == LabelKind::Class ? "one int64, the class"
                                                            : "one float, the regression target",
                            examples_ > 0 ? ", as the records before it" : ""));
  }

  // `block` examples, or fewer: this reader's share of the records left
  // within the limit, the one being taken (counted already) among them.
  int64_t blockWithinLimit(int64_t block) const {
    if (source_.limit <= 0) return block;
    return std::min(block, (source_.limit - records_ + share_.count) / share_.count);
  }

  // A new block of examples, once the check has seen the data set with it.
  void addBlock() {
    const int value_bytes = keptAsBytes() ? 1 : int(sizeof(float));
    const int64_t example_bytes = numElements(shape_) * value_bytes;
    const int64_t block = blockWithinLimit(std::max<int64_t>(1, kBlockBytes / example_bytes));
    if (check_) check_(shape_, examples_ + block, value_bytes);
    if (keptAsBytes())
      pixels_.addBlock(size_t(block * example_bytes));
    else
      floats_.addBlock(size_t(block * numElements(shape_)));
  }

  const DataFiles& source_;
  const RecordShape record_shape_;
  const Shape model_input_;
  // the example's: the model's input, the records' height, width and
  // depth, or the first image's (shape_source_)
  Shape shape_;
  // Where shape_ came from, as messages say it.
  static constexpr const char* kShapeFromModel = "the model's input";
  static constexpr const char* kShapeFromRecords = "the records' height, width and depth give";
  static constexpr const char* kShapeFromFirstImage = "the first record's image is";
  const char* shape_source_ = kShapeFromModel;
  const uint64_t max_record_bytes_;
  const DataLoadCheck& check_;
  const DataShare share_;
  ImageKind image_kind_;
  LabelKind label_kind_ = LabelKind::Class;
  int64_t records_ = 0;   // of the whole set, this share's and the others'
  int64_t examples_ = 0;  // taken: this share's records
  uint32_t record_crc_ = 0;             // of the record being read's data
  uint32_t content_crc_ = 0;            // of the whole set's records' CRCs (Dataset::content_crc)
  std::vector<int64_t> file_examples_;  // taken from each file read (Dataset::file_examples)
  BlockStore<uint8_t> pixels_;
  BlockStore<float> floats_;
  std::vector<uint8_t> decoded_;  // an image to be resized, or judged, decoded
  // Examples left in their files (DataFiles::in_memory false): the files
  // read so far, and where each example's record is.
  const bool in_files_;
  std::vector<std::string> paths_;
  OpenFiles files_;  // paths_'s, opened as each is read
  std::vector<RecordPlace> places_;
  std::vector<int32_t> classes_;
  std::vector<float> targets_;
  // Where the record being read is, for messages.
  std::string file_;
  int64_t index_ = 0;
  uint64_t offset_ = 0;
};

// "81 bytes, a PNG image of [4, 3, 3]", with why it would not be taken.
std::string describedImage(size_t bytes, ImageFormat format, const ImageHeader& header) {
  if (header.channels == 0) return fmt::format("{} bytes, {}", bytes, header.error);
  return fmt::format("{} bytes, a {} image of {}{}", bytes, nameOf(format),
                     shapeToString({header.height, header.width, header.channels}),
                     header.error.empty() ? "" : " (not taken: " + header.error + ")");
}

std::string featureValue(const Feature& feature) {
  switch (feature.kind_case()) {
    case Feature::kBytesList: {
      const std::string& bytes = feature.bytes_list().value(0);
      if (const std::optional<ImageFormat> format = imageFormatOf(bytes))
        return describedImage(bytes.size(), *format, readHeader(*format, bytes));
      return fmt::format("{} bytes{}", bytes.size(), encodingOf(bytes));
    }
    case Feature::kFloatList:
      return fmt::format("{}", feature.float_list().value(0));
    case Feature::kInt64List:
      return fmt::format("{}", feature.int64_list().value(0));
    case Feature::KIND_NOT_SET:
      break;
  }
  return "";
}

}  // namespace

bool isRecordFile(const std::string& path) {
  std::error_code error;
  return std::filesystem::is_regular_file(path, error) && recordFileFormatOf(path).has_value();
}

RecordFileSummary summarizeRecordFile(const std::string& path) {
  RecordFile file(path, kInspectedRecordBytes);
  RecordFileSummary summary;
  switch (file.format()) {
    case CompressedFile::Format::Raw:
      summary.compression = "raw";
      break;
    case CompressedFile::Format::Gzip:
      summary.compression = "gzip";
      break;
    case CompressedFile::Format::Zlib:
      summary.compression = "zlib";
      break;
  }
  std::string record;
  if (file.next(record)) {
    tensorflow::Example example;
    if (!parseExample(record, example))
      throw InputError(
          fmt::format("{}: record 0 at byte 0: {}", file.name(), notAnExample(record)));
    for (const tensorflow::FeatureEntry& entry : example.features().feature()) {
      const Feature& feature = entry.value();
      summary.first_features.push_back({entry.key(), std::string(kindOf(feature)),
                                        valueCount(feature),
                                        valueCount(feature) > 0 ? featureValue(feature) : ""});
    }
    while (file.next(record)) continue;  // each checked, counted
  }
  summary.records = file.recordsRead();
  summary.bytes = file.bytesRead();
  return summary;
}

Dataset loadExampleRecords(const DataFiles& source, const Shape& model_input,
                           const DataLoadCheck& check, DataShare share, RecordShape record_shape) {
  share.check();
  if (source.records.empty()) throw InputError("no TFRecord files given");
  if (model_input.empty() ||
      std::any_of(model_input.begin(), model_input.end(), [](int64_t d) { return d < 1; }))
    throw std::invalid_argument("loadExampleRecords: a model input without values, " +
                                shapeToString(model_input));
  // Left in their files, records are read at their offsets, which no
  // compressed file gives: every file's first bytes tell, before any is read.
  if (!source.in_memory)
    for (const std::string& path : source.records)
      if (const CompressedFile::Format format = recordFileFormat(path);
          format != CompressedFile::Format::Raw)
        throw InputError(fmt::format(
            "{}: compressed with {}; with in_memory: false each record is read at its offset, "
            "which a compressed file cannot give: expected uncompressed TFRecord files ({})",
            path, format == CompressedFile::Format::Gzip ? "gzip" : "zlib",
            source.own_sizes ? "the training images keep their own sizes, left in their files: "
                               "decompress them, or give the resize a size, {size: [H, W]}, "
                               "where the crop is a box"
                             : "or in_memory: true"));
  // A size of its own resizes images the model takes a window of.
  const bool resized_to_size = source.resize != DataFiles::Resize::None &&
                               source.resize_height > 0 && model_input.size() == 3;
  ExampleLoader loader(source,
                       resized_to_size
                           ? Shape{source.resize_height, source.resize_width, model_input[2]}
                           : model_input,
                       check, share, record_shape);
  for (const std::string& path : source.records)
    if (!loader.readFile(path)) break;
  return loader.finish();
}

}  // namespace traind
