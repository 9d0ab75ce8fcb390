#include "core/safetensors.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <stdexcept>
#include <system_error>

#include "core/error.h"
#include "core/json.h"
#include "core/printable.h"
#include "core/read_at.h"

namespace traind {

// The data section is copied to and from float arrays as raw bytes.
static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

namespace sf = safetensors_format;

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what) {
  throw InputError(path.string() + ": " + what);
}

void writeAll(std::FILE* file, const void* data, size_t bytes, const std::filesystem::path& path) {
  if (bytes != 0 && std::fwrite(data, 1, bytes, file) != bytes)
    throw std::system_error(errno, std::generic_category(), "cannot write " + path.string());
}

std::string offsetsToString(uint64_t begin, uint64_t end) {
  std::string text = "[";
  text += std::to_string(begin);
  text += ", ";
  text += std::to_string(end);
  return text + "]";
}

}  // namespace

std::string safetensorsHeader(const std::vector<TensorRef>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  std::string header = "{";
  if (!metadata.empty()) {
    header += jsonQuote(sf::kMetadataKey) + ":{";
    for (auto it = metadata.begin(); it != metadata.end(); ++it) {
      if (it != metadata.begin()) header += ',';
      header += jsonQuote(it->first) + ":" + jsonQuote(it->second);
    }
    header += "}";
  }
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const TensorRef& t : tensors) {
    if (t.name == sf::kMetadataKey || !names.insert(t.name).second)
      throw std::invalid_argument("writeSafetensors: duplicate or reserved tensor name '" + t.name +
                                  "'");
    if (t.name.size() > sf::kMaxNameBytes || t.shape.size() > sf::kMaxRank)
      throw std::invalid_argument(fmt::format(
          "tensor '{}': a name of {} bytes and {} dimensions, where a checkpoint's reader takes "
          "at most {} and {}",
          t.name.substr(0, 100), t.name.size(), t.shape.size(), sf::kMaxNameBytes, sf::kMaxRank));
    std::string shape;
    for (int64_t d : t.shape) {
      if (d < 0)
        throw std::invalid_argument("writeSafetensors: tensor '" + t.name + "' has shape " +
                                    shapeToString(t.shape));
      if (!shape.empty()) shape += ',';
      shape += std::to_string(d);
    }
    const uint64_t bytes = uint64_t(numElements(t.shape)) * sizeof(float);
    if (header.size() > 1) header += ',';
    header += jsonQuote(t.name) + ":{\"dtype\":" + jsonQuote(sf::kFloat32) + ",\"shape\":[" +
              shape + "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += "}";
  // Readers may map the data section and use it in place; keep it aligned.
  while ((sf::kHeaderSizeBytes + header.size()) % sf::kDataAlignment != 0) header += ' ';
  if (header.size() > sf::kMaxHeaderBytes)
    throw std::invalid_argument(fmt::format(
        "{} tensors make a safetensors header of {} bytes, where a checkpoint's reader takes at "
        "most {} ({} MiB)",
        tensors.size(), header.size(), sf::kMaxHeaderBytes, sf::kMaxHeaderBytes >> 20));
  return header;
}

void writeSafetensors(const std::filesystem::path& path, const std::vector<TensorRef>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const std::string header = safetensorsHeader(tensors, metadata);
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "wb"));
  if (!file)
    throw std::system_error(errno, std::generic_category(), "cannot create " + path.string());
  const uint64_t header_size = header.size();
  writeAll(file.get(), &header_size, sizeof header_size, path);
  writeAll(file.get(), header.data(), header.size(), path);
  for (const TensorRef& t : tensors)
    writeAll(file.get(), t.data, size_t(numElements(t.shape)) * sizeof(float), path);
  if (std::fclose(file.release()) != 0)
    throw std::system_error(errno, std::generic_category(), "cannot write " + path.string());
}

SafetensorsReader::SafetensorsReader(const std::filesystem::path& path) : path_(path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    if (std::filesystem::exists(path, ec)) fail(path, "not a regular file");
    fail(path, "cannot open: no such file");
  }
  file_.reset(std::fopen(path.c_str(), "rbe"));
  struct stat status {};
  if (!file_ || ::fstat(fileno(file_.get()), &status) != 0)
    fail(path, std::string("cannot open: ") + std::strerror(errno));
  if (!S_ISREG(status.st_mode)) fail(path, "not a regular file");  // replaced since the look above
  const uint64_t file_size = uint64_t(status.st_size);

  if (file_size < sf::kHeaderSizeBytes)
    fail(path, "file is " + std::to_string(file_size) +
                   " bytes, too short for a safetensors header (8-byte size, then JSON)");
  uint64_t header_size = 0;
  readAt(0, reinterpret_cast<std::byte*>(&header_size), sizeof header_size);
  const uint64_t after_size = file_size - sf::kHeaderSizeBytes;
  if (header_size > sf::kMaxHeaderBytes)
    fail(path, "header size " + std::to_string(header_size) + " exceeds the limit of " +
                   std::to_string(sf::kMaxHeaderBytes) + " bytes");
  if (header_size > after_size)
    fail(path, "header size " + std::to_string(header_size) + " exceeds the " +
                   std::to_string(after_size) + " bytes that follow it");
  std::string header(header_size, '\0');
  data_begin_ = sf::kHeaderSizeBytes + header_size;
  const uint64_t data_size = after_size - header_size;
  readAt(sf::kHeaderSizeBytes, reinterpret_cast<std::byte*>(header.data()), header_size);

  // A value takes about 90 bytes once parsed; a header's take 6 bytes of
  // text or more each ({"dtype":"F32","shape":[784,300],...}), so one
  // value per 4 bytes bounds the memory at about 22 times the header.
  const JsonValue root = parseJson(
      header, path.string() + " (JSON header)",
      {.most_array_items = sf::kMaxRank,
       .items_why = "a shape has at most 32 dimensions",
       .most_values = std::max<size_t>(header.size() / 4, 64),
       .values_why = "a safetensors header holds at most one value per 4 bytes of its text"});
  if (root.type != JsonValue::Type::Object)
    fail(path, "header: expected a JSON object, got " + std::string(jsonTypeName(root.type)));

  struct Span {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Span> spans;
  for (const auto& [name, value] : root.members) {
    if (name == sf::kMetadataKey) {
      if (value.type != JsonValue::Type::Object)
        fail(path,
             "__metadata__: expected an object, got " + std::string(jsonTypeName(value.type)));
      for (const auto& [key, text] : value.members) {
        if (text.type != JsonValue::Type::String)
          fail(path, "__metadata__." + printable(key) + ": expected a string, got " +
                         std::string(jsonTypeName(text.type)));
        metadata_[key] = text.text;
      }
      continue;
    }
    if (name.size() > sf::kMaxNameBytes)
      fail(path, "a tensor name of " + std::to_string(name.size()) + " bytes: expected at most " +
                     std::to_string(sf::kMaxNameBytes) + " (" +
                     quotedPrintable(name.substr(0, 40)) + "...)");
    const std::string where = "tensor " + quotedPrintable(name) + ": ";
    if (value.type != JsonValue::Type::Object)
      fail(path, where + "expected an object, got " + std::string(jsonTypeName(value.type)));
    const JsonValue* dtype = value.find("dtype");
    const JsonValue* shape = value.find("shape");
    const JsonValue* offsets = value.find("data_offsets");
    if (!dtype || !shape || !offsets)
      fail(path, where + "expected the fields dtype, shape and data_offsets");
    if (dtype->type != JsonValue::Type::String)
      fail(path, where + "dtype: expected a string, got " + std::string(jsonTypeName(dtype->type)));
    if (dtype->text != sf::kFloat32)
      fail(path,
           where + "dtype " + printable(dtype->text) + " is not supported (traind reads F32 only)");

    Entry entry;
    auto nonNegative = [](const JsonValue& v) {
      const std::optional<int64_t> n = v.asInt64();
      return n && *n >= 0 ? n : std::nullopt;
    };
    if (shape->type != JsonValue::Type::Array)
      fail(path, where + "shape: expected an array of non-negative integers, got " +
                     std::string(jsonTypeName(shape->type)));
    for (const JsonValue& d : shape->items) {
      const std::optional<int64_t> n = nonNegative(d);
      if (!n)
        fail(path,
             where + "shape: expected non-negative integers, got " + printablePrefix(d.text, 200));
      entry.shape.push_back(*n);
    }
    if (offsets->type != JsonValue::Type::Array || offsets->items.size() != 2 ||
        !nonNegative(offsets->items[0]) || !nonNegative(offsets->items[1]))
      fail(path, where + "data_offsets: expected [begin, end], two non-negative integers");
    entry.begin = uint64_t(*offsets->items[0].asInt64());
    entry.end = uint64_t(*offsets->items[1].asInt64());
    const std::string offsets_text = offsetsToString(entry.begin, entry.end);
    if (entry.begin > entry.end)
      fail(path, where + "data_offsets " + offsets_text + " end before they begin");
    if (entry.end > data_size)
      fail(path, where + "data_offsets " + offsets_text + " reach beyond the " +
                     std::to_string(data_size) + "-byte data section");

    // In 128 bits, saturated: a lying shape must not wrap around to the right size.
    unsigned __int128 bytes = sizeof(float);
    const unsigned __int128 saturated = (unsigned __int128)(1) << 64;
    for (int64_t d : entry.shape) bytes = std::min(bytes * uint64_t(d), saturated);
    if (bytes != entry.end - entry.begin)
      fail(path, where + "shape " + shapeToString(entry.shape) + " needs " +
                     (bytes == saturated ? std::string("more than 2^64")
                                         : std::to_string(uint64_t(bytes))) +
                     " bytes of F32 but data_offsets " + offsets_text + " span " +
                     std::to_string(entry.end - entry.begin));
    // Its count of values an int64 holds, as every caller counts them: a
    // dimension of 0 lets the others claim anything in the bytes above.
    unsigned __int128 values = 1;
    for (int64_t d : entry.shape)
      if (d > 0) values = std::min(values * uint64_t(d), saturated);
    if (values > uint64_t(INT64_MAX))
      fail(path,
           where + "shape " + shapeToString(entry.shape) + ": its dimensions multiply past 2^63");
    const auto it = tensors_.emplace(name, std::move(entry)).first;
    if (it->second.end > it->second.begin)
      spans.push_back({it->second.begin, it->second.end, &it->first});
  }

  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return std::pair(a.begin, a.end) < std::pair(b.begin, b.end);
  });
  if (!spans.empty() && spans.front().begin != 0)
    fail(path, "the data section has " + std::to_string(spans.front().begin) +
                   " bytes before its first tensor " + quotedPrintable(*spans.front().name) +
                   " (data_offsets " + offsetsToString(spans.front().begin, spans.front().end) +
                   "): expected the tensors packed from its first byte");
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].begin < spans[i - 1].end)
      fail(path, "tensors " + quotedPrintable(*spans[i - 1].name) + " and " +
                     quotedPrintable(*spans[i].name) + " overlap (data_offsets " +
                     offsetsToString(spans[i - 1].begin, spans[i - 1].end) + " and " +
                     offsetsToString(spans[i].begin, spans[i].end) + ")");
    if (spans[i].begin > spans[i - 1].end)
      fail(path, "a gap of " + std::to_string(spans[i].begin - spans[i - 1].end) +
                     " bytes between tensors " + quotedPrintable(*spans[i - 1].name) + " and " +
                     quotedPrintable(*spans[i].name) + " (data_offsets " +
                     offsetsToString(spans[i - 1].begin, spans[i - 1].end) + " and " +
                     offsetsToString(spans[i].begin, spans[i].end) +
                     "): expected them packed, as the safetensors library requires");
  }
  const uint64_t tensors_end = spans.empty() ? 0 : spans.back().end;
  if (tensors_end != data_size && spans.empty())
    fail(path, "the data section has " + std::to_string(data_size) +
                   " bytes but the header lists no tensor data");
  if (tensors_end != data_size)
    fail(path, "the data section has " + std::to_string(data_size - tensors_end) +
                   " bytes after its last tensor (" + std::to_string(data_size) +
                   " bytes, the tensors end at " + std::to_string(tensors_end) + ")");
}

void SafetensorsReader::readAt(uint64_t offset, std::byte* dst, uint64_t size) const {
  readExactlyAt(fileno(file_.get()), offset, dst, size, path_);
}

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> names;
  for (const auto& [name, entry] : tensors_) names.push_back(name);
  return names;
}

bool SafetensorsReader::contains(const std::string& name) const {
  return tensors_.count(name) != 0;
}

const SafetensorsReader::Entry& SafetensorsReader::entry(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) fail(path_, "no tensor " + quotedPrintable(name));
  return it->second;
}

const Shape& SafetensorsReader::shape(const std::string& name) const { return entry(name).shape; }

void SafetensorsReader::read(const std::string& name, const Shape& expected,
                             std::span<float> dst) const {
  const Entry& e = entry(name);
  if (e.shape != expected)
    fail(path_, "tensor " + quotedPrintable(name) + ": expected shape " + shapeToString(expected) +
                    ", found " + shapeToString(e.shape));
  if (dst.size() != size_t(numElements(expected)))
    throw std::invalid_argument("SafetensorsReader::read: destination of " +
                                std::to_string(dst.size()) + " floats for tensor '" + name +
                                "' of shape " + shapeToString(expected));
  readAt(data_begin_ + e.begin, reinterpret_cast<std::byte*>(dst.data()), e.end - e.begin);
  // traind never writes such a value (ModelState::save refuses them): a
  // bit flipped on disk, or another writer's diverged run. Either would
  // train or evaluate on quietly (a NaN that ReLU turns into 0).
  const auto bad = std::find_if(dst.begin(), dst.end(), [](float x) { return !std::isfinite(x); });
  if (bad != dst.end())
    fail(path_, "tensor " + quotedPrintable(name) + ": element " +
                    std::to_string(bad - dst.begin()) + " is " +
                    (std::isnan(*bad) ? "NaN" : "infinite") +
                    ": expected finite values (the file is corrupt, or its writer's run diverged)");
}

}  // namespace traind
