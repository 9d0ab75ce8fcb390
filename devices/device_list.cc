#include "devices/device_list.h"

#include <omp.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "core/device_name.h"
#include "core/error.h"
#include "core/printable.h"
#include "devices/cpu/cpu_device.h"
#ifdef TRAIND_HAVE_CUDA
#include "devices/cuda_loader.h"
#endif

namespace traind {
namespace {

using DeviceKind = DeviceName::Kind;

DeviceName parseName(const std::string& text) {
  if (std::optional<DeviceName> name = parseDeviceName(text)) return *name;
  throw InputError("device " + quotedPrintable(text) + ": expected " + deviceNameForms());
}

// The one table from device names to back ends.
std::unique_ptr<Device> createDevice(const DeviceName& name, int cpu_threads) {
  switch (name.kind) {
    case DeviceKind::Cpu:
      return createCpuDevice(cpu_threads, name.text);
    case DeviceKind::Cuda: {
#ifdef TRAIND_HAVE_CUDA
      const CudaBackEnd& cuda = loadCudaBackEnd(name.text);
      const int gpus = cuda.device_count();
      if (gpus == 0) throw InputError(name.text + ": " + cuda.unavailable_reason());
      if (*name.index >= gpus) {
        const std::string range =
            gpus == 1 ? "cuda:0" : "cuda:0 to cuda:" + std::to_string(gpus - 1);
        throw InputError(name.text + ": no such GPU; this machine has " + std::to_string(gpus) +
                         " (" + range + ")");
      }
      return cuda.create_device(*name.index, name.text);
#else
      throw InputError(name.text + ": this traind was built without CUDA");
#endif
    }
  }
  throw std::logic_error("createDevice: unknown device kind of " + name.text);
}

// The names taken apart and checked against each other.
std::vector<DeviceName> parseDeviceList(const std::vector<std::string>& names) {
  if (names.empty()) throw InputError("devices: expected at least one device, got none");
  std::vector<DeviceName> parsed;
  for (const std::string& text : names) {
    DeviceName name = parseName(text);
    if (const auto conflict = deviceListConflict(parsed, name)) throw InputError(*conflict);
    parsed.push_back(std::move(name));
  }
  return parsed;
}

// The devices of a checked list, CPU threads shared among the CPU devices.
std::vector<std::unique_ptr<Device>> createEachDevice(const std::vector<std::string>& names,
                                                      int total_threads) {
  const std::vector<DeviceName> parsed = parseDeviceList(names);
  const int cpu_devices =
      int(std::count_if(parsed.begin(), parsed.end(),
                        [](const DeviceName& name) { return name.kind == DeviceKind::Cpu; }));

  // total_threads 0 is OpenMP's default, as a number: a device given 0
  // would take whatever its calling thread was last set to, and another
  // replica built on that thread (a step slot's, the evaluation's) sets it.
  // Several CPU devices split the threads.
  int cpu_threads = total_threads > 0 ? total_threads : defaultCpuThreads();
  if (cpu_devices > 1) cpu_threads = std::max(1, cpu_threads / cpu_devices);
  std::vector<std::unique_ptr<Device>> devices;
  for (const DeviceName& name : parsed) devices.push_back(createDevice(name, cpu_threads));
  return devices;
}

}  // namespace

int defaultCpuThreads() {
  static const int threads = omp_get_max_threads();
  return threads;
}

bool runsPipelineStages(const std::string& name) {
  switch (parseName(name).kind) {
    case DeviceKind::Cpu:
      return true;
    case DeviceKind::Cuda:
      return false;
  }
  throw std::logic_error("runsPipelineStages: unknown device kind of " + name);
}

void checkDeviceList(const std::vector<std::string>& names) { parseDeviceList(names); }

std::vector<std::unique_ptr<Device>> createDevices(const std::vector<std::string>& names,
                                                   int total_threads, const SourceLocation& where) {
  try {
    return createEachDevice(names, total_threads);
  } catch (const InputError& e) {
    if (where.file.empty()) throw;
    throwInputError(where, where.line > 0 ? "training.devices" : "", e.what());
  }
}

bool everyDeviceIsGpu(const std::vector<std::string>& names) {
  const std::vector<DeviceName> parsed = parseDeviceList(names);
  return std::all_of(parsed.begin(), parsed.end(),
                     [](const DeviceName& name) { return name.kind == DeviceKind::Cuda; });
}

std::unique_ptr<ResidentTrainer> createResidentTrainer(const std::vector<std::string>& names,
                                                       const LayerGraph& graph,
                                                       const VariableLayout& layout,
                                                       const OptimizerSpec& optimizer,
                                                       int64_t batch_size, uint64_t seed) {
  std::vector<int> gpus;
  for (const DeviceName& name : parseDeviceList(names)) {
    if (name.kind != DeviceKind::Cuda)
      throw std::logic_error("createResidentTrainer: " + name.text + " is not a GPU");
    gpus.push_back(*name.index);
  }
#ifdef TRAIND_HAVE_CUDA
  return loadCudaBackEnd(names.front())
      .create_trainer(std::move(gpus), graph, layout, optimizer, batch_size, seed);
#else
  (void)graph, (void)layout, (void)optimizer, (void)batch_size, (void)seed;
  throw std::logic_error("createResidentTrainer: this traind was built without CUDA");
#endif
}

std::vector<Device*> devicePointers(const std::vector<std::unique_ptr<Device>>& devices) {
  std::vector<Device*> pointers;
  for (const std::unique_ptr<Device>& device : devices) pointers.push_back(device.get());
  return pointers;
}

std::string deviceNames(const std::vector<std::unique_ptr<Device>>& devices) {
  std::string names;
  for (const std::unique_ptr<Device>& device : devices)
    names += (names.empty() ? "" : ", ") + device->name();
  return names;
}

std::vector<std::string> splitDeviceList(const std::string& text) {
  std::vector<std::string> names;
  size_t begin = 0;
  for (;;) {
    const size_t comma = text.find(',', begin);
    names.push_back(text.substr(begin, comma - begin));
    if (comma == std::string::npos) return names;
    begin = comma + 1;
  }
}

}  // namespace traind
