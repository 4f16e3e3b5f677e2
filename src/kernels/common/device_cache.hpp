// A per-device cache of one value (the SM count; the address of the device status word), in
// plain C++ so that the CPU tests check it: each device number has a slot of its own, and a
// device past the table is never served another device's slot.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>

namespace hopattn::kernels {

template <class T = int>
class PerDeviceCache {
 public:
  // More devices than one process sees today; a device numbered past them is queried every time.
  static constexpr int kDevices = 256;

  // The value of `device`: query() on its first call (and on every call past the table). T{} (0,
  // null) means "not cached yet", so a query that returns it is asked again next time. Concurrent
  // first calls may each query; they store the same value.
  template <class Query>
  T get(int device, Query&& query) {
    if (device < 0 || device >= kDevices) return query();
    std::atomic<T>& slot = slots_[static_cast<size_t>(device)];
    T value = slot.load(std::memory_order_relaxed);
    if (value == T{}) {
      value = query();
      slot.store(value, std::memory_order_relaxed);
    }
    return value;
  }

 private:
  std::array<std::atomic<T>, kDevices> slots_{};
};

}  // namespace hopattn::kernels
