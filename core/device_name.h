// Device names, as model specs and traind's --devices write them:
//
//   cpu       the whole CPU as one device
//   cpu:N     CPU device N (a share of the compute threads)
//   cuda:N    NVIDIA GPU N
//
// N is from 0 to kMaxDeviceIndex, written without leading zeros, so that a
// device has one name (cpu:0 and cpu:00 would be two towers on one device).
// Which devices a build and a machine have is devices/device_list.h's to say:
// a spec means the same on every build.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace traind {

constexpr int kMaxDeviceIndex = 1023;

struct DeviceName {
  enum class Kind { Cpu, Cuda };
  std::string text;
  Kind kind = Kind::Cpu;
  std::optional<int> index;  // none for `cpu`
};

// The name taken apart; nullopt for anything that is not one.
std::optional<DeviceName> parseDeviceName(std::string_view text);

// Why `name` cannot join `earlier` in one list of devices, or nullopt: a
// CPU device named twice (it is a share of the threads already), or `cpu`
// (the whole CPU) beside `cpu:N`. A GPU named twice is two towers on it.
std::optional<std::string> deviceListConflict(const std::vector<DeviceName>& earlier,
                                              const DeviceName& name);

// "cpu, cpu:N or cuda:N (N from 0 to 1023, no leading zeros)", for errors.
std::string deviceNameForms();

}  // namespace traind
