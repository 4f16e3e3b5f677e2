// e4m3 -> 16-bit widening on the GPU (ptx/dequant.cuh, the MLA fp8 cache path): every one of the
// 256 codes, in each of the four byte positions of a word, against the CPU decoding
// (common/numeric.hpp). Exact: the 16-bit value equals the code's value (NaN codes give NaN),
// subnormal codes included.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/numeric.hpp"
#include "device_buffer.hpp"
#include "gpu_test_support.hpp"
#include "ptx/dequant.cuh"

namespace hopattn::testing {
namespace {

// Word w of the input holds code w in byte w % 4 and neighbours elsewhere; out[4 w + k] is the
// widened byte k.
template <class Elt>
__global__ void widen_kernel(const uint32_t* words, uint16_t* out, int n) {
  const int w = blockIdx.x * blockDim.x + threadIdx.x;
  if (w >= n) return;
  const uint2 r = ptx::e4m3x4_to_16bit<Elt>(words[w]);
  const uint32_t halves[2] = {r.x, r.y};
  for (int k = 0; k < 4; ++k)
    out[4 * w + k] = static_cast<uint16_t>(halves[k / 2] >> (16 * (k % 2)));
}

template <class Elt>
void check_all_codes(bool bf16) {
  const std::string why = cuda_device_problem();
  if (!why.empty()) GTEST_SKIP() << why;
  constexpr int kWords = 256 * 4;
  std::vector<uint32_t> words(kWords);
  for (int w = 0; w < kWords; ++w) {
    const uint32_t code = w / 4, pos = w % 4;
    uint32_t v = 0;
    for (uint32_t k = 0; k < 4; ++k)
      v |= (k == pos ? code : (code * 37 + k * 91) & 0xff) << (8 * k);
    words[w] = v;
  }
  DeviceAllocation in(kWords * 4), out(kWords * 4 * 2);
  check_cuda(cudaMemcpy(in.data(), words.data(), kWords * 4, cudaMemcpyHostToDevice), "upload");
  widen_kernel<Elt><<<(kWords + 127) / 128, 128>>>(static_cast<const uint32_t*>(in.data()),
                                                   static_cast<uint16_t*>(out.data()), kWords);
  check_cuda(cudaGetLastError(), "widen_kernel launch");
  std::vector<uint16_t> got(kWords * 4);
  check_cuda(cudaMemcpy(got.data(), out.data(), got.size() * 2, cudaMemcpyDeviceToHost),
             "download");
  int failures = 0;
  for (int w = 0; w < kWords; ++w) {
    for (int k = 0; k < 4; ++k) {
      const uint8_t code = static_cast<uint8_t>(words[w] >> (8 * k));
      const float want = numeric::e4m3_to_float(code);
      const uint16_t h = got[4 * w + k];
      const float value = bf16 ? numeric::bf16_to_float(h) : numeric::fp16_to_float(h);
      const bool ok = std::isnan(want) ? std::isnan(value) : value == want;
      if (!ok && failures++ < 5) {
        ADD_FAILURE() << "code 0x" << std::hex << int(code) << " at byte " << k << ": got " << value
                      << ", want " << want;
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(PtxDequant, E4m3ToBf16AllCodes) { check_all_codes<__nv_bfloat16>(true); }
TEST(PtxDequant, E4m3ToFp16AllCodes) { check_all_codes<__half>(false); }

}  // namespace
}  // namespace hopattn::testing
