// device.hpp's fill_device_random: the CLI's random inputs written on the device, the same bytes
// as the host fill (random_draw.hpp), so that a model-sized cache needs no host copy, host fill
// and upload when nothing on the host reads it (tensor.cpp, Tensor::to_device).
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda_check.hpp"
#include "device.hpp"
#include "hopattn/error.hpp"
#include "random_draw.hpp"

namespace hopattn::cli {
namespace {

// One thread a draw (four elements), grid-stride.
template <class Word>
__global__ void fill_from_table(Word* out, const Word* table, int64_t n, uint64_t seed) {
  const int64_t groups = (n + 3) / 4;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += stride) {
    uint64_t z = random_draw::draw(seed, g);
    for (int j = 0; j < 4; ++j, z >>= 16) {
      const int64_t i = 4 * g + j;
      if (i < n) out[i] = table[z & 0xffff];
    }
  }
}

template <class Word>
void launch(void* dst, const void* table, int64_t n, uint64_t seed) {
  constexpr int kThreads = 256;
  const int64_t groups = (n + 3) / 4;
  const int blocks = static_cast<int>(std::min<int64_t>((groups + kThreads - 1) / kThreads, 65536));
  fill_from_table<Word>
      <<<blocks, kThreads>>>(static_cast<Word*>(dst), static_cast<const Word*>(table), n, seed);
  check_cuda(cudaGetLastError(), "fill_from_table launch");
}

}  // namespace

void fill_device_random(void* dst, const void* host_table, int elt_bytes, int64_t n,
                        uint64_t seed) {
  if (n == 0) return;
  const size_t table_bytes = static_cast<size_t>(random_draw::kEntries) * elt_bytes;
  const DeviceMemory table(table_bytes);
  copy_to_device(table.data(), host_table, table_bytes);
  switch (elt_bytes) {
    case 1:
      launch<uint8_t>(dst, table.data(), n, seed);
      break;
    case 2:
      launch<uint16_t>(dst, table.data(), n, seed);
      break;
    case 4:
      launch<uint32_t>(dst, table.data(), n, seed);
      break;
    default:
      throw Error(ErrorKind::kValue, detail::concat("fill_device_random: elements of 1, 2 or 4 "
                                                    "bytes, got ",
                                                    elt_bytes));
  }
  // Before the table is freed; a fault shows up here, named.
  check_cuda(cudaDeviceSynchronize(), "fill_from_table");
}

}  // namespace hopattn::cli
