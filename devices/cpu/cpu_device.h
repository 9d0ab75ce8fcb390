// The CPU back end: every layer through oneDNN 2.6 primitives.
#pragma once

#include <memory>
#include <string>

#include "devices/device.h"

namespace traind {

// threads: compute threads for oneDNN and the elementwise loops; 0 keeps
// OpenMP's default (one per core). name: what name() returns ("cpu", "cpu:1").
std::unique_ptr<Device> createCpuDevice(int threads, std::string name = "cpu");

}  // namespace traind
