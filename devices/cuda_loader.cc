#include "devices/cuda_loader.h"

#include <dlfcn.h>

#include <filesystem>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace traind {
namespace {

constexpr const char* kLibrary = "libtraind_cuda.so";

// Where the back end may be; the one a user named, if any, alone.
std::vector<std::string> candidates() {
  std::vector<std::string> paths;
  if (const char* path = std::getenv("TRAIND_CUDA_LIBRARY"); path && *path) return {path};
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    paths.push_back((exe.parent_path() / kLibrary).string());
    paths.push_back((exe.parent_path().parent_path() / "lib" / "traind" / kLibrary).string());
  }
  paths.push_back(TRAIND_CUDA_BUILD_LIBRARY);
  return paths;
}

// The back end, or why it could not be loaded.
struct Loaded {
  const CudaBackEnd* back_end = nullptr;
  std::string failure;
};

Loaded load() {
  Loaded loaded;
  for (const std::string& path : candidates()) {
    std::error_code error;
    if (!std::filesystem::exists(path, error)) {
      loaded.failure += "; " + path + ": no such file";
      continue;
    }
    // Never closed: devices made by it live as long as the process.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      loaded.failure += std::string("; ") + dlerror();
      continue;
    }
    using Entry = const CudaBackEnd* (*)();
    const auto entry = reinterpret_cast<Entry>(dlsym(handle, kCudaBackEndEntry));
    if (!entry) {
      loaded.failure += "; " + path + ": no " + kCudaBackEndEntry +
                        " (the back end of another traind version)";
      continue;
    }
    loaded.back_end = entry();
    return loaded;
  }
  return loaded;
}

}  // namespace

const CudaBackEnd& loadCudaBackEnd(const std::string& device) {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] { loaded = load(); });
  if (!loaded.back_end)
    throw InputError(device + ": cannot load the CUDA back end " + std::string(kLibrary) + " (" +
                     loaded.failure.substr(2) + ")");
  return *loaded.back_end;
}

}  // namespace traind
