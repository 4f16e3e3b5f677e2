// PerDeviceCache (kernels/common/device_cache.hpp), the SM-count cache of the launch code: every
// device number gets its own value, devices past the table included (they are queried each
// time), and a cached device is queried once.
#include "kernels/common/device_cache.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace hopattn::kernels {
namespace {

TEST(PerDeviceCache, EveryDeviceGetsItsOwnValue) {
  PerDeviceCache<> cache;
  constexpr int kProbed = PerDeviceCache<>::kDevices + 70;
  std::vector<int> queries(kProbed, 0);
  for (int round = 0; round < 3; ++round) {
    for (int device = 0; device < kProbed; ++device) {
      const int got = cache.get(device, [&] {
        ++queries[device];
        return 1000 + device;
      });
      ASSERT_EQ(got, 1000 + device) << "device " << device << ", round " << round;
    }
  }
  for (int device = 0; device < kProbed; ++device) {
    EXPECT_EQ(queries[device], device < PerDeviceCache<>::kDevices ? 1 : 3) << "device " << device;
  }
}

TEST(PerDeviceCache, NegativeDevicesAreNeverCached) {
  PerDeviceCache<> cache;
  int queries = 0;
  for (int i = 0; i < 2; ++i) EXPECT_EQ(cache.get(-1, [&] { return ++queries; }), i + 1);
  EXPECT_EQ(cache.get(0, [] { return 7; }), 7);
}

}  // namespace
}  // namespace hopattn::kernels
