// Reading a span of an open file at an offset, whole: the one loop the
// checkpoint readers (safetensors, TensorFlow's) read tensors with, so that
// they read at offsets without a file position and stay const.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>

namespace traind {

// Reads exactly `size` bytes at `offset` of the open file `fd` into `dst`,
// however many preads that takes. InputError naming `path` when the file
// cannot be read, or ends before them (it is being written, or was cut).
void readExactlyAt(int fd, uint64_t offset, std::byte* dst, uint64_t size,
                   const std::filesystem::path& path);

}  // namespace traind
