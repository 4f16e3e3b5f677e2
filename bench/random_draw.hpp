// The CLI's random inputs, element by element: a tensor's n elements take their values from a
// 65536-entry table of encoded values, indexed by 16-bit pieces of splitmix64 draws. Elements come
// in chunks of kChunk, each chunk its own stream (the seed and the chunk index), four elements a
// draw, so that host threads fill chunks in parallel and a device thread computes any four
// elements directly (tensor.cpp, device_fill.cu): both sides produce the same bytes.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define HOPATTN_CLI_HOST_DEVICE __host__ __device__
#else
#define HOPATTN_CLI_HOST_DEVICE
#endif

namespace hopattn::cli::random_draw {

inline constexpr int kEntries = 1 << 16;
inline constexpr int64_t kChunk = int64_t{1} << 22;  // elements; a multiple of 4
inline constexpr int64_t kGroupsPerChunk = kChunk / 4;

// The draw of elements 4 * group .. 4 * group + 3; element 4 * group + j takes table entry
// (draw >> 16 j) & 0xffff.
HOPATTN_CLI_HOST_DEVICE inline uint64_t draw(uint64_t seed, int64_t group) {
  constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;
  const uint64_t chunk = static_cast<uint64_t>(group / kGroupsPerChunk);
  const uint64_t in_chunk = static_cast<uint64_t>(group % kGroupsPerChunk);
  uint64_t z = (seed + 0x632be59bd9b4e019ull * (chunk + 1)) * kGolden + (in_chunk + 1) * kGolden;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace hopattn::cli::random_draw
