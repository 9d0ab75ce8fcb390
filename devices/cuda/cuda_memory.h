// Owning handles of device and pinned host memory for the CUDA back end:
// allocated (and zeroed) once when a replica is built, freed with it.
//
//   DeviceArray<float> activations(batch * features);  // cudaMalloc + memset 0
//   PinnedArray<float> staging(batch * features);      // cudaMallocHost
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <new>
#include <utility>

#include "devices/cuda/cuda_check.h"

namespace traind {

template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(size_t count) : count_(count) {
    if (count == 0) return;
    checkCuda(cudaMalloc(reinterpret_cast<void**>(&data_), count * sizeof(T)), "cudaMalloc");
    checkCuda(cudaMemset(data_, 0, count * sizeof(T)), "cudaMemset");
  }
  DeviceArray(DeviceArray&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceArray& operator=(DeviceArray&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
    return *this;
  }
  ~DeviceArray() {
    if (data_) cudaFree(data_);  // no check: a destructor must not throw
  }

  T* data() const { return data_; }
  size_t size() const { return count_; }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
};

template <typename T>
class PinnedArray {
 public:
  PinnedArray() = default;
  explicit PinnedArray(size_t count) : count_(count) {
    if (count == 0) return;
    checkCuda(cudaMallocHost(reinterpret_cast<void**>(&data_), count * sizeof(T)),
              "cudaMallocHost");
    for (size_t i = 0; i < count; ++i) new (&data_[i]) T();
  }
  PinnedArray(PinnedArray&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  PinnedArray& operator=(PinnedArray&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
    return *this;
  }
  ~PinnedArray() {
    if (data_) cudaFreeHost(data_);
  }

  T* data() const { return data_; }
  size_t size() const { return count_; }
  T& operator[](size_t i) const { return data_[i]; }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
};

}  // namespace traind
