#include "core/device_name.h"

#include <algorithm>

namespace traind {

std::optional<DeviceName> parseDeviceName(std::string_view text) {
  DeviceName name;
  name.text = std::string(text);
  if (text == "cpu") return name;
  std::string_view digits = text;
  if (digits.starts_with("cpu:")) {
    digits.remove_prefix(4);
  } else if (digits.starts_with("cuda:")) {
    digits.remove_prefix(5);
    name.kind = DeviceName::Kind::Cuda;
  } else {
    return std::nullopt;
  }
  // At most four digits, the first not a zero unless alone: one name a device.
  if (digits.empty() || digits.size() > 4 || (digits.size() > 1 && digits.front() == '0') ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  int index = 0;
  for (char c : digits) index = index * 10 + (c - '0');
  if (index > kMaxDeviceIndex) return std::nullopt;
  name.index = index;
  return name;
}

std::optional<std::string> deviceListConflict(const std::vector<DeviceName>& earlier,
                                              const DeviceName& name) {
  if (name.kind != DeviceName::Kind::Cpu) return std::nullopt;
  for (const DeviceName& other : earlier) {
    if (other.kind != DeviceName::Kind::Cpu) continue;
    if (other.text == name.text) return "device " + name.text + " is listed twice";
    if (!name.index || !other.index)
      return "devices " + other.text + " and " + name.text +
             ": cpu is the whole CPU as one device; name several CPU devices cpu:0, cpu:1, ...";
  }
  return std::nullopt;
}

std::string deviceNameForms() {
  return "cpu, cpu:N or cuda:N (N from 0 to " + std::to_string(kMaxDeviceIndex) +
         ", no leading zeros)";
}

}  // namespace traind
