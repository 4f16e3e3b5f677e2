// wgmma on one warpgroup, operands loaded by TMA with 128B swizzle: one 64 x N x 64 tile GEMM for
// each operand arrangement the fwd kernel relies on, compared exactly with a host GEMM (inputs are
// small integers, so every sum is exact in fp32 and every 16-bit rounding matches the host's).
//   SS, B K-major  (S = Q K^T: K stored [keys][d])
//   SS, B MN-major (B stored [k][n] like V, imm-trans-b = 1, two 64-wide panels via LBO)
//   RS, B MN-major (A fragments in registers, the layout P uses in O = P V)
//   chain: S = Q K^T (SS), P = 16-bit(S) in registers, O = P V (RS): the attention dataflow.
// On a mismatch the test reruns the same arrangement with probe inputs (identity A, B holding its
// own row or column index) and prints which B element landed where, which names the broken
// field: descriptor LBO/SBO/advance, swizzle, or the accumulator/fragment register layout.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "common/numeric.hpp"
#include "hopper_test_util.hpp"
#include "ptx/mbarrier.cuh"
#include "ptx/pack.cuh"
#include "ptx/tensor_map.hpp"
#include "ptx/tma.cuh"
#include "ptx/wgmma.cuh"
#include "support/host_tensor.hpp"

namespace hopattn::testing {
namespace {

using namespace hopattn::testing::hopper;  // NOLINT: test helpers

constexpr int kM = 64;
constexpr int kK = 64;  // four k16 steps; A is one [64][64] 128B-swizzled panel

enum class BMajor { kK, kMN };  // kK: B stored [N][K]; kMN: B stored [K][N]
enum class ASource { kShared, kRegisters };

// Accumulator register i of thread t holds D[row][col] (HOPPER_NOTES.md section 3).
__host__ __device__ inline int acc_row(int t, int i) {
  return 16 * (t / 32) + (t % 32) / 4 + 8 * ((i >> 1) & 1);
}
__host__ __device__ inline int acc_col(int t, int i) {
  return 8 * (i >> 2) + 2 * (t % 4) + (i & 1);
}

__device__ inline uint32_t pack_bits(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

// A fragment of k-step j from a row-major [64][64] matrix of 16-bit values: reg0 (row g, k 2q..),
// reg1 row + 8, reg2 k + 8, reg3 row + 8 and k + 8; low half = lower k.
__device__ inline void load_a_fragment(const uint16_t* a, int t, int j, uint32_t (&frag)[4]) {
  const int row = 16 * (t / 32) + (t % 32) / 4;
  const int k = 16 * j + 2 * (t % 4);
  frag[0] = pack_bits(a[row * kK + k], a[row * kK + k + 1]);
  frag[1] = pack_bits(a[(row + 8) * kK + k], a[(row + 8) * kK + k + 1]);
  frag[2] = pack_bits(a[row * kK + k + 8], a[row * kK + k + 9]);
  frag[3] = pack_bits(a[(row + 8) * kK + k + 8], a[(row + 8) * kK + k + 9]);
}

// Descriptor of B for k-step j.
template <BMajor kB, int N>
__device__ inline uint64_t b_desc(const uint8_t* smem_b, int j) {
  if constexpr (kB == BMajor::kK) {
    return ptx::desc_advance(ptx::make_kmajor_desc(smem_b), 32 * j);
  } else {
    return ptx::desc_advance(ptx::make_mnmajor_desc(smem_b, kK * 128), 2048 * j);
  }
}

template <class Elt, int N, BMajor kB, ASource kA>
__global__ void __launch_bounds__(128)
    gemm_tile_kernel(const __grid_constant__ CUtensorMap tm_a,
                     const __grid_constant__ CUtensorMap tm_b, const uint16_t* a_global,
                     float* d_out, int* status) {
  __shared__ alignas(1024) uint8_t smem_a[kM * kK * 2];
  __shared__ alignas(1024) uint8_t smem_b[N * kK * 2];
  __shared__ uint64_t bar;
  const int t = threadIdx.x;
  if (t == 0) {
    ptx::mbarrier_init(&bar, 1);
  }
  __syncthreads();
  if (t == 0) {
    ptx::mbarrier_arrive_expect_tx(&bar, sizeof(smem_a) + sizeof(smem_b));
    ptx::tma_load_2d(smem_a, &tm_a, &bar, 0, 0);
    if constexpr (kB == BMajor::kK) {
      ptx::tma_load_2d(smem_b, &tm_b, &bar, 0, 0);  // one box: N rows of 64 k
    } else {
      for (int p = 0; p < N / 64; ++p) {  // panel p: 64 k-rows of n in [64p, 64p + 64)
        ptx::tma_load_2d(smem_b + p * kK * 128, &tm_b, &bar, 64 * p, 0);
      }
    }
  }
  if (!ptx::mbarrier_wait_parity_for(&bar, 0, 2'000'000'000ull)) {
    if (t == 0) *status = 1;
    return;
  }
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = 1.0e9f;  // scale-d = 0 on the first step must drop this
  uint32_t frags[kK / 16][4];
  if constexpr (kA == ASource::kRegisters) {
#pragma unroll
    for (int j = 0; j < kK / 16; ++j) load_a_fragment(a_global, t, j, frags[j]);
  }
  ptx::fence_operands(d);
  ptx::wgmma_fence();
#pragma unroll
  for (int j = 0; j < kK / 16; ++j) {
    const uint32_t accumulate = j > 0 ? 1u : 0u;
    constexpr int kTransB = kB == BMajor::kMN ? 1 : 0;
    if constexpr (kA == ASource::kShared) {
      const uint64_t a_desc = ptx::desc_advance(ptx::make_kmajor_desc(smem_a), 32 * j);
      ptx::wgmma_ss<N, Elt, 0, kTransB>(d, a_desc, b_desc<kB, N>(smem_b, j), accumulate);
    } else {
      ptx::wgmma_rs<N, Elt, kTransB>(d, frags[j], b_desc<kB, N>(smem_b, j), accumulate);
    }
  }
  ptx::wgmma_commit_group();
  ptx::wgmma_wait_group<0>();
  ptx::fence_operands(d);
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d_out[acc_row(t, i) * N + acc_col(t, i)] = d[i];
}

// S = Q K^T (N = 64 keys), P = Elt(S) kept in registers, O = P V (N = 128 columns of V).
template <class Elt>
__global__ void __launch_bounds__(128)
    attention_chain_kernel(const __grid_constant__ CUtensorMap tm_q,
                           const __grid_constant__ CUtensorMap tm_k,
                           const __grid_constant__ CUtensorMap tm_v, float* o_out, int* status) {
  constexpr int kKeys = 64, kDv = 128;
  __shared__ alignas(1024) uint8_t smem_q[kM * kK * 2];
  __shared__ alignas(1024) uint8_t smem_k[kKeys * kK * 2];
  __shared__ alignas(1024) uint8_t smem_v[kKeys * kDv * 2];  // two panels [64 keys][64 d]
  __shared__ uint64_t bar;
  const int t = threadIdx.x;
  if (t == 0) ptx::mbarrier_init(&bar, 1);
  __syncthreads();
  if (t == 0) {
    ptx::mbarrier_arrive_expect_tx(&bar, sizeof(smem_q) + sizeof(smem_k) + sizeof(smem_v));
    ptx::tma_load_2d(smem_q, &tm_q, &bar, 0, 0);
    ptx::tma_load_2d(smem_k, &tm_k, &bar, 0, 0);
    ptx::tma_load_2d(smem_v, &tm_v, &bar, 0, 0);
    ptx::tma_load_2d(smem_v + kKeys * 128, &tm_v, &bar, 64, 0);
  }
  if (!ptx::mbarrier_wait_parity_for(&bar, 0, 2'000'000'000ull)) {
    if (t == 0) *status = 1;
    return;
  }
  float s[kKeys / 2];
  ptx::fence_operands(s);
  ptx::wgmma_fence();
#pragma unroll
  for (int j = 0; j < kK / 16; ++j) {
    ptx::wgmma_ss<kKeys, Elt, 0, 0>(s, ptx::desc_advance(ptx::make_kmajor_desc(smem_q), 32 * j),
                                    ptx::desc_advance(ptx::make_kmajor_desc(smem_k), 32 * j),
                                    j > 0 ? 1u : 0u);
  }
  ptx::wgmma_commit_group();
  ptx::wgmma_wait_group<0>();
  ptx::fence_operands(s);
  // The accumulator of a 64x16 block has the A-fragment layout: no shuffles.
  uint32_t p[kKeys / 16][4];
#pragma unroll
  for (int j = 0; j < kKeys / 16; ++j) {
#pragma unroll
    for (int r = 0; r < 4; ++r) p[j][r] = ptx::pack2<Elt>(s[8 * j + 2 * r], s[8 * j + 2 * r + 1]);
  }
  float o[kDv / 2];
#pragma unroll
  for (int i = 0; i < kDv / 2; ++i) o[i] = 0.f;
  ptx::fence_operands(o);
  ptx::wgmma_fence();
#pragma unroll
  for (int j = 0; j < kKeys / 16; ++j) {
    ptx::wgmma_rs<kDv, Elt, 1>(
        o, p[j], ptx::desc_advance(ptx::make_mnmajor_desc(smem_v, kKeys * 128), 2048 * j), 1u);
  }
  ptx::wgmma_commit_group();
  ptx::wgmma_wait_group<0>();
  ptx::fence_operands(o);
#pragma unroll
  for (int i = 0; i < kDv / 2; ++i) o_out[acc_row(t, i) * kDv + acc_col(t, i)] = o[i];
}

// ---------------------------------------------------------------------------- host side
template <class Elt>
constexpr bool kIsBf16 = std::is_same_v<Elt, __nv_bfloat16>;

template <class Elt>
uint16_t to_bits(double v) {
  return kIsBf16<Elt> ? numeric::float_to_bf16(static_cast<float>(v))
                      : numeric::float_to_fp16(static_cast<float>(v));
}
template <class Elt>
double from_bits(uint16_t b) {
  return kIsBf16<Elt> ? numeric::bf16_to_float(b) : numeric::fp16_to_float(b);
}

template <class Elt>
CUtensorMap map_2d(const DeviceBuffer<uint16_t>& buf, uint64_t cols, uint64_t rows,
                   uint32_t box_cols, uint32_t box_rows) {
  ptx::TensorMapSpec s;
  s.base = buf.get();
  s.dtype = kIsBf16<Elt> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  s.rank = 2;
  s.dims = {cols, rows};
  s.strides = {0, cols * 2};
  s.box = {box_cols, box_rows};
  return ptx::encode_tensor_map(s);
}

// Logical A [64][64] and B [64][N] (as doubles, already representable in Elt).
struct GemmInputs {
  std::vector<double> a, b;
};

template <class Elt, int N, BMajor kB, ASource kA>
std::vector<float> run_gemm(const GemmInputs& in) {
  std::vector<uint16_t> a_bits(kM * kK), b_bits(kK * N);
  for (int i = 0; i < kM * kK; ++i) a_bits[i] = to_bits<Elt>(in.a[i]);
  for (int k = 0; k < kK; ++k) {
    for (int n = 0; n < N; ++n) {
      const int stored = kB == BMajor::kK ? n * kK + k : k * N + n;
      b_bits[stored] = to_bits<Elt>(in.b[k * N + n]);
    }
  }
  auto a = to_device(a_bits);
  auto b = to_device(b_bits);
  const CUtensorMap tm_a = map_2d<Elt>(a, kK, kM, 64, 64);
  const CUtensorMap tm_b =
      kB == BMajor::kK ? map_2d<Elt>(b, kK, N, 64, N) : map_2d<Elt>(b, N, kK, 64, 64);
  DeviceBuffer<float> d(kM * N);
  d.fill_bytes(0xFF);
  DeviceBuffer<int> status(1);
  status.fill_bytes(0);
  gemm_tile_kernel<Elt, N, kB, kA><<<1, 128>>>(tm_a, tm_b, a.get(), d.get(), status.get());
  cuda_check(cudaGetLastError(), "gemm_tile_kernel launch");
  sync_or_die(nullptr, "gemm_tile_kernel");
  EXPECT_EQ(status.download()[0], 0) << "TMA loads never completed";
  return d.download();
}

std::vector<double> host_gemm(const std::vector<double>& a, const std::vector<double>& b, int n) {
  std::vector<double> d(kM * n, 0.0);
  for (int m = 0; m < kM; ++m) {
    for (int k = 0; k < kK; ++k) {
      for (int j = 0; j < n; ++j) d[m * n + j] += a[m * kK + k] * b[k * n + j];
    }
  }
  return d;
}

// Prints a 64-row map of which 8-column groups of D mismatch ('.' ok, 'X' bad).
void print_mismatch_map(const std::vector<float>& got, const std::vector<double>& want, int n) {
  std::printf("mismatch map (rows 0..63, one char per 8 columns):\n");
  for (int m = 0; m < kM; ++m) {
    std::printf("  %2d ", m);
    for (int c = 0; c < n; c += 8) {
      bool ok = true;
      for (int j = c; j < c + 8; ++j) ok = ok && got[m * n + j] == want[m * n + j];
      std::printf("%c", ok ? '.' : 'X');
    }
    std::printf("\n");
  }
}

// With A = identity, D = B: probe B with its own row index k and then its column index n, and
// print for the first mismatching outputs which (k, n) of B they show.
template <class Elt, int N, BMajor kB, ASource kA>
void probe_b_placement() {
  GemmInputs in;
  in.a.assign(kM * kK, 0.0);
  for (int i = 0; i < kM; ++i) in.a[i * kK + i] = 1.0;
  in.b.assign(kK * N, 0.0);
  for (int k = 0; k < kK; ++k) {
    for (int n = 0; n < N; ++n) in.b[k * N + n] = k;
  }
  const std::vector<float> row_probe = run_gemm<Elt, N, kB, kA>(in);
  for (int k = 0; k < kK; ++k) {
    for (int n = 0; n < N; ++n) in.b[k * N + n] = n;
  }
  const std::vector<float> col_probe = run_gemm<Elt, N, kB, kA>(in);
  int shown = 0;
  for (int m = 0; m < kM && shown < 24; ++m) {
    for (int n = 0; n < N && shown < 24; ++n) {
      const float rk = row_probe[m * N + n], cn = col_probe[m * N + n];
      if (rk != m || cn != n) {
        std::printf("  probe: D[%d][%d] shows B[k=%g][n=%g] (want B[%d][%d])\n", m, n, rk, cn, m,
                    n);
        ++shown;
      }
    }
  }
  if (shown == 0) std::printf("  probe: identity-A probes are all correct (A side is suspect)\n");
}

template <class Elt, int N, BMajor kB, ASource kA>
void check_gemm(uint64_t seed) {
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> small(-3, 3);
  GemmInputs in;
  in.a.resize(kM * kK);
  in.b.resize(kK * N);
  for (auto& x : in.a) x = small(rng);
  for (auto& x : in.b) x = small(rng);
  const std::vector<float> got = run_gemm<Elt, N, kB, kA>(in);
  const std::vector<double> want = host_gemm(in.a, in.b, N);
  int bad = 0;
  for (int i = 0; i < kM * N; ++i) {
    if (got[i] != want[i] && ++bad <= 6) {
      ADD_FAILURE() << "D[" << i / N << "][" << i % N << "] = " << got[i] << ", expected "
                    << want[i];
    }
  }
  if (bad > 0) {
    std::printf("%d of %d outputs wrong\n", bad, kM * N);
    print_mismatch_map(got, want, N);
    probe_b_placement<Elt, N, kB, kA>();
  }
}

#define SKIP_WITHOUT_HOPPER() \
  if (auto why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why

TEST(PtxWgmma, SS_KMajorB_N64_bf16) {
  SKIP_WITHOUT_HOPPER();
  check_gemm<__nv_bfloat16, 64, BMajor::kK, ASource::kShared>(test_seed());
}
TEST(PtxWgmma, SS_KMajorB_N128_bf16) {
  SKIP_WITHOUT_HOPPER();
  check_gemm<__nv_bfloat16, 128, BMajor::kK, ASource::kShared>(test_seed());
}
TEST(PtxWgmma, SS_KMajorB_N128_fp16) {
  SKIP_WITHOUT_HOPPER();
  check_gemm<__half, 128, BMajor::kK, ASource::kShared>(test_seed());
}
TEST(PtxWgmma, SS_KMajorB_N256_bf16) {
  SKIP_WITHOUT_HOPPER();
  check_gemm<__nv_bfloat16, 256, BMajor::kK, ASource::kShared>(test_seed());
}
TEST(PtxWgmma, SS_MNMajorB_N64_bf16) {
  SKIP_WITHOUT_HOPPER();
  check_gemm<__nv_bfloat16, 64, BMajor::kMN, ASource::kShared>(test_seed());
}
TEST(PtxWgmma, SS_MNMajorB_N128_bf16) {
  SKIP_WITHOUT_HOPPER();
  check_gemm<__nv_bfloat16, 128, BMajor::kMN, ASource::kShared>(test_seed());
}
TEST(PtxWgmma, RS_MNMajorB_N128_bf16) {
  SKIP_WITHOUT_HOPPER();
  check_gemm<__nv_bfloat16, 128, BMajor::kMN, ASource::kRegisters>(test_seed());
}
TEST(PtxWgmma, RS_MNMajorB_N128_fp16) {
  SKIP_WITHOUT_HOPPER();
  check_gemm<__half, 128, BMajor::kMN, ASource::kRegisters>(test_seed());
}
TEST(PtxWgmma, RS_KMajorB_N64_bf16) {
  SKIP_WITHOUT_HOPPER();
  check_gemm<__nv_bfloat16, 64, BMajor::kK, ASource::kRegisters>(test_seed());
}

template <class Elt>
void check_attention_chain(uint64_t seed) {
  SCOPED_TRACE(seed_trace(seed));
  constexpr int kKeys = 64, kDv = 128;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> small(-3, 3);
  std::vector<uint16_t> q(kM * kK), k(kKeys * kK), v(kKeys * kDv);
  for (auto& x : q) x = to_bits<Elt>(small(rng));
  for (auto& x : k) x = to_bits<Elt>(small(rng));
  for (auto& x : v) x = to_bits<Elt>(small(rng));
  // Host: S exact, P = S rounded to Elt (as cvt.rn does), O = P V exact.
  std::vector<double> p(kM * kKeys), want(kM * kDv, 0.0);
  for (int m = 0; m < kM; ++m) {
    for (int j = 0; j < kKeys; ++j) {
      double s = 0;
      for (int d = 0; d < kK; ++d)
        s += from_bits<Elt>(q[m * kK + d]) * from_bits<Elt>(k[j * kK + d]);
      p[m * kKeys + j] = from_bits<Elt>(to_bits<Elt>(s));
    }
    for (int j = 0; j < kKeys; ++j) {
      for (int d = 0; d < kDv; ++d)
        want[m * kDv + d] += p[m * kKeys + j] * from_bits<Elt>(v[j * kDv + d]);
    }
  }
  auto qd = to_device(q);
  auto kd = to_device(k);
  auto vd = to_device(v);
  DeviceBuffer<float> o(kM * kDv);
  o.fill_bytes(0xFF);
  DeviceBuffer<int> status(1);
  status.fill_bytes(0);
  attention_chain_kernel<Elt>
      <<<1, 128>>>(map_2d<Elt>(qd, kK, kM, 64, 64), map_2d<Elt>(kd, kK, kKeys, 64, kKeys),
                   map_2d<Elt>(vd, kDv, kKeys, 64, kKeys), o.get(), status.get());
  cuda_check(cudaGetLastError(), "attention_chain_kernel launch");
  sync_or_die(nullptr, "attention_chain_kernel");
  ASSERT_EQ(status.download()[0], 0) << "TMA loads never completed";
  const std::vector<float> got = o.download();
  int bad = 0;
  for (int i = 0; i < kM * kDv; ++i) {
    if (got[i] != want[i] && ++bad <= 6) {
      ADD_FAILURE() << "O[" << i / kDv << "][" << i % kDv << "] = " << got[i] << ", expected "
                    << want[i];
    }
  }
  if (bad > 0) {
    std::printf(
        "%d of %d outputs wrong (if the SS/RS tests pass, the accumulator -> A fragment "
        "mapping P[j][r] = pack(s[8j+2r], s[8j+2r+1]) is the suspect)\n",
        bad, kM * kDv);
    print_mismatch_map(got, want, kDv);
  }
}

TEST(PtxWgmma, AttentionChain_bf16) {
  SKIP_WITHOUT_HOPPER();
  check_attention_chain<__nv_bfloat16>(test_seed());
}
TEST(PtxWgmma, AttentionChain_fp16) {
  SKIP_WITHOUT_HOPPER();
  check_attention_chain<__half>(test_seed());
}

}  // namespace
}  // namespace hopattn::testing
