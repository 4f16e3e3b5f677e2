// TMA primitives on one CTA: where a 128B-swizzled box lands in shared memory (the layout every
// wgmma descriptor in hopattn assumes), load/store round trips, out-of-bounds zero fill on load
// and clipping on store, and the 4-D [B, S, H, D] boxes the fwd kernel uses.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "hopper_test_util.hpp"
#include "ptx/mbarrier.cuh"
#include "ptx/tensor_map.hpp"
#include "ptx/tma.cuh"

namespace hopattn::testing {
namespace {

using namespace hopattn::testing::hopper;  // NOLINT: test helpers

constexpr int kMaxBoxBytes = 16384;

struct BoxCopyOp {
  int rank;             // 2 or 4
  int load_coords[4];   // innermost first
  int store_coords[4];  // used when `store`
  uint32_t box_bytes;   // bytes one box delivers (out-of-bounds elements included)
  bool store;
};

__global__ void tma_box_kernel(const __grid_constant__ CUtensorMap tm_in,
                               const __grid_constant__ CUtensorMap tm_out, BoxCopyOp op,
                               uint16_t* raw_smem_out, int* status) {
  __shared__ alignas(1024) uint8_t smem[kMaxBoxBytes];
  __shared__ uint64_t bar;
  if (threadIdx.x == 0) {
    ptx::prefetch_tensor_map(&tm_in);
    ptx::mbarrier_init(&bar, 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    ptx::mbarrier_arrive_expect_tx(&bar, op.box_bytes);
    const int* c = op.load_coords;
    if (op.rank == 2) {
      ptx::tma_load_2d(smem, &tm_in, &bar, c[0], c[1]);
    } else {
      ptx::tma_load_4d(smem, &tm_in, &bar, c[0], c[1], c[2], c[3]);
    }
  }
  if (!ptx::mbarrier_wait_parity_for(&bar, 0, 2'000'000'000ull)) {
    if (threadIdx.x == 0) *status = 1;  // the load never completed: wrong box_bytes?
    return;
  }
  for (uint32_t i = threadIdx.x; i < op.box_bytes / 2; i += blockDim.x) {
    raw_smem_out[i] = reinterpret_cast<const uint16_t*>(smem)[i];
  }
  if (op.store && threadIdx.x == 0) {
    const int* c = op.store_coords;
    if (op.rank == 2) {
      ptx::tma_store_2d(&tm_out, smem, c[0], c[1]);
    } else {
      ptx::tma_store_4d(&tm_out, smem, c[0], c[1], c[2], c[3]);
    }
    ptx::tma_store_commit();
    ptx::tma_store_wait_all<0>();
  }
}

ptx::TensorMapSpec u16_map(void* base, int rank, std::vector<uint64_t> dims,
                           std::vector<uint64_t> byte_strides, std::vector<uint32_t> box) {
  ptx::TensorMapSpec s;
  s.base = base;
  s.dtype = CU_TENSOR_MAP_DATA_TYPE_UINT16;  // raw 16-bit payloads: bf16/fp16 move the same way
  s.element_bytes = 2;
  s.rank = rank;
  for (int i = 0; i < rank; ++i) {
    s.dims[i] = dims[i];
    s.box[i] = box[i];
    if (i > 0) s.strides[i] = byte_strides[i - 1];
  }
  return s;
}

struct BoxResult {
  std::vector<uint16_t> raw;  // shared memory bytes of the box, as 16-bit words
  int status = 0;
};

BoxResult run_box_copy(const CUtensorMap& in, const CUtensorMap& out, const BoxCopyOp& op) {
  DeviceBuffer<uint16_t> raw(kMaxBoxBytes / 2);
  raw.fill_bytes(0xEE);
  DeviceBuffer<int> status(1);
  status.fill_bytes(0);
  tma_box_kernel<<<1, 128>>>(in, out, op, raw.get(), status.get());
  cuda_check(cudaGetLastError(), "tma_box_kernel launch");
  sync_or_die(nullptr, "tma_box_kernel");
  BoxResult r;
  r.raw = raw.download();
  r.status = status.download()[0];
  return r;
}

// Checks that a [rows][64] box of 16-bit values sits in shared memory as the 128B swizzle says:
// element (r, c) at byte swizzle_128b_offset(r, 2c). `expected(r, c)` gives the value.
template <class Expected>
void expect_swizzled_box(const std::vector<uint16_t>& raw, int rows, Expected expected,
                         const char* what) {
  int bad = 0;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < 64; ++c) {
      const uint32_t slot = ptx::swizzle_128b_offset(r, 2 * c) / 2;
      const uint16_t want = expected(r, c);
      if (raw[slot] != want && ++bad <= 8) {
        ADD_FAILURE() << what << ": box element (row " << r << ", col " << c << ") expected 0x"
                      << std::hex << want << " at smem word " << std::dec << slot << ", found 0x"
                      << std::hex << raw[slot] << std::dec;
      }
    }
  }
  if (bad > 0) {
    // The first 8 rows' first 16-B chunk as found: shows which swizzle (if any) was applied.
    std::printf("%s: %d misplaced elements; smem words 0..7 of rows 0..7:\n", what, bad);
    for (int r = 0; r < 8; ++r) {
      std::printf("  row %d:", r);
      for (int w = 0; w < 8; ++w) std::printf(" %04x", raw[r * 64 + w]);
      std::printf("\n");
    }
  }
}

TEST(PtxTma, Load2dSwizzle128BLayoutAndRoundTrip) {
  if (auto why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  constexpr int kRows = 64, kCols = 64;
  std::vector<uint16_t> host(kRows * kCols);
  for (int i = 0; i < kRows * kCols; ++i) host[i] = static_cast<uint16_t>(i);
  auto in = to_device(host);
  DeviceBuffer<uint16_t> out(kRows * kCols);
  out.fill_bytes(0xFF);
  const CUtensorMap tm_in =
      ptx::encode_tensor_map(u16_map(in.get(), 2, {kCols, kRows}, {kCols * 2}, {64, 64}));
  const CUtensorMap tm_out =
      ptx::encode_tensor_map(u16_map(out.get(), 2, {kCols, kRows}, {kCols * 2}, {64, 64}));
  const BoxCopyOp op{2, {0, 0}, {0, 0}, kRows * kCols * 2, true};
  const BoxResult r = run_box_copy(tm_in, tm_out, op);
  ASSERT_EQ(r.status, 0) << "TMA load never completed its mbarrier";
  expect_swizzled_box(
      r.raw, kRows, [](int row, int c) { return static_cast<uint16_t>(row * 64 + c); },
      "2-D 64x64 box");
  EXPECT_EQ(out.download(), host) << "TMA store of the loaded box did not reproduce the input";
}

TEST(PtxTma, OutOfBoundsLoadZeroFillsAndStoreClips) {
  if (auto why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  constexpr int kRows = 50, kCols = 40;  // the 64x64 box sticks out on both sides
  constexpr int kGuard = 256;            // words after the tensor that must stay untouched
  std::vector<uint16_t> host(kRows * kCols);
  for (int i = 0; i < kRows * kCols; ++i) host[i] = static_cast<uint16_t>(i + 1);
  auto in = to_device(host);
  DeviceBuffer<uint16_t> out(kRows * kCols + kGuard);
  out.fill_bytes(0xFF);
  const CUtensorMap tm_in =
      ptx::encode_tensor_map(u16_map(in.get(), 2, {kCols, kRows}, {kCols * 2}, {64, 64}));
  const CUtensorMap tm_out =
      ptx::encode_tensor_map(u16_map(out.get(), 2, {kCols, kRows}, {kCols * 2}, {64, 64}));
  const BoxCopyOp op{2, {0, 0}, {0, 0}, 64 * 64 * 2, true};
  const BoxResult r = run_box_copy(tm_in, tm_out, op);
  ASSERT_EQ(r.status, 0) << "TMA load never completed: are out-of-bounds bytes not counted in "
                            "the transaction count?";
  expect_swizzled_box(
      r.raw, 64,
      [&](int row, int c) {
        return row < kRows && c < kCols ? host[row * kCols + c] : static_cast<uint16_t>(0);
      },
      "2-D box partly out of bounds");
  const std::vector<uint16_t> got = out.download();
  for (int i = 0; i < kRows * kCols; ++i) {
    ASSERT_EQ(got[i], host[i]) << "store: element " << i << " (row " << i / kCols << ")";
  }
  for (int i = kRows * kCols; i < kRows * kCols + kGuard; ++i) {
    ASSERT_EQ(got[i], 0xFFFF) << "store wrote past the tensor at word " << i;
  }
}

// The fwd kernel's view: q/k/v/o as [B, S, H, D] with a box of 64 d x 1 head x 64 rows x 1 batch.
TEST(PtxTma, FourDimensionalHeadBoxLoadAndStore) {
  if (auto why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  constexpr int kB = 2, kS = 37, kH = 3, kD = 128;
  const auto index = [](int b, int s, int h, int d) { return ((b * kS + s) * kH + h) * kD + d; };
  std::vector<uint16_t> host(kB * kS * kH * kD);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint16_t>(i * 7 + 1);
  auto in = to_device(host);
  DeviceBuffer<uint16_t> out(host.size());
  out.fill_bytes(0xFF);
  const std::vector<uint64_t> dims{kD, kH, kS, kB};
  const std::vector<uint64_t> strides{kD * 2, kH * kD * 2, uint64_t{kS} * kH * kD * 2};
  const CUtensorMap tm_in =
      ptx::encode_tensor_map(u16_map(in.get(), 4, dims, strides, {64, 1, 64, 1}));
  const CUtensorMap tm_out =
      ptx::encode_tensor_map(u16_map(out.get(), 4, dims, strides, {64, 1, 64, 1}));
  // Load rows 32..95 of head 2, batch 1, d 64..127 (rows >= 37 are out of bounds), store the box
  // at rows 0..63 of head 1, batch 0, d 0..63 (rows >= 37 clipped).
  const BoxCopyOp op{4, {64, 2, 32, 1}, {0, 1, 0, 0}, 64 * 64 * 2, true};
  const BoxResult r = run_box_copy(tm_in, tm_out, op);
  ASSERT_EQ(r.status, 0) << "4-D TMA load never completed";
  const auto loaded = [&](int row, int c) {
    const int s = 32 + row;
    return s < kS ? host[index(1, s, 2, 64 + c)] : static_cast<uint16_t>(0);
  };
  expect_swizzled_box(r.raw, 64, loaded, "4-D head box");
  const std::vector<uint16_t> got = out.download();
  int bad = 0;
  for (int b = 0; b < kB; ++b) {
    for (int s = 0; s < kS; ++s) {
      for (int h = 0; h < kH; ++h) {
        for (int d = 0; d < kD; ++d) {
          const bool stored = b == 0 && h == 1 && d < 64;
          const uint16_t want = stored ? loaded(s, d) : static_cast<uint16_t>(0xFFFF);
          if (got[index(b, s, h, d)] != want && ++bad <= 8) {
            ADD_FAILURE() << "4-D store: (b " << b << ", s " << s << ", h " << h << ", d " << d
                          << ") expected 0x" << std::hex << want << ", got 0x"
                          << got[index(b, s, h, d)];
          }
        }
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace hopattn::testing
