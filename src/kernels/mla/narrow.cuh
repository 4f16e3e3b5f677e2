// The MLA kernel's narrow schedule (narrow_traits.cuh): requests of at most 16 rows, e.g. a
// tensor-parallel shard of 16 heads at q_len 1. Per block of 64 keys (a pair of 32-key stages),
// a consumer warpgroup computes
//   S^T = K Q^T            36 m64n16k16 steps, K (A, K-major) and Q (B, K-major) from shared memory
//   P^T = 2^(S^T - max)    per column (row of the problem): the maxima over the 64 keys reduce
//                          across the warpgroup's four warps through shared memory
//   O^T += V^T P^T         8 column chunks of 64 latent features x 4 k16 steps; V^T is the
//                          stage's ckv panel read MN-major (imm-trans-a), P^T goes through shared
//                          memory (stmatrix .trans writes the accumulator transposed, K-major)
// With an fp8 cache K and V^T come from registers instead (wgmma's A operand): each consumer
// converts its pair's codes from the raw ring into fp16 fragments as it issues the MMAs, and no
// widened copy of the cache is stored (issue_s_registers, issue_pv_registers).
// The MMA work of a block is a quarter of the one-S-consumer schedule's 64-row tile, whose 48
// padding rows cost as much as the 16 real ones. Consumer g takes pairs g, g + 2, ... with its
// own softmax state, and the two states merge at the end of the tile through shared memory, where
// the output rows are also assembled for coalesced stores.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/common/keys_as_m.cuh"
#include "kernels/fwd/softmax.cuh"
#include "kernels/mla/kernel.cuh"
#include "kernels/mla/loader.cuh"
#include "kernels/mla/narrow_fragments.hpp"
#include "kernels/mla/narrow_traits.cuh"
#include "kernels/mla/q_tile.cuh"
#include "kernels/mla/tile.cuh"
#include "ptx/fast_math.cuh"
#include "ptx/fence.cuh"
#include "ptx/grid_dependency.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/pack.cuh"
#include "ptx/setmaxnreg.cuh"
#include "ptx/shared_memory.cuh"
#include "ptx/stmatrix.cuh"
#include "ptx/warpgroup.cuh"
#include "ptx/wgmma.cuh"

namespace hopattn::kernels::mla {

namespace frag = narrow_fragments;

template <class Traits>
struct NarrowConsumer {
  using Elt = typename Traits::Elt;        // q and out
  using MmaElt = typename Traits::MmaElt;  // the MMAs' operands (fp16 with an fp8 cache)
  using Plan = SharedPlan<Traits>;
  static constexpr int kCols = Traits::kCols;
  static constexpr int kColsPerThread = kCols / 4;  // the accumulator's columns in one thread
  static constexpr int kSRegs = kCols / 2;          // 64 x kCols fp32 accumulator
  static constexpr int kChunks = kLatentDim / 64;   // O^T: 8 chunks of 64 features
  static constexpr int kQKSteps = kQkDim / 16;      // 36
  static constexpr int kPVSteps = Traits::kPairKeys / 16;
  using OTile = float[kChunks][kSRegs];

  // Accumulator element i of a thread: key (M) row 16 warp + lane / 4 + 8 ((i >> 1) & 1), column
  // (N) 8 (i >> 2) + 2 (lane % 4) + (i & 1). The thread's columns are j = 0..kColsPerThread - 1,
  // column(j); the element of column j in row half h is element(j, h).
  __device__ static int column(int j) {
    return 8 * (j >> 1) + 2 * (static_cast<int>(threadIdx.x) % 4) + (j & 1);
  }
  __device__ static constexpr int element(int j, int h) { return 4 * (j >> 1) + 2 * h + (j & 1); }
  __device__ static constexpr int column_of(int i) { return 2 * (i >> 2) + (i & 1); }

  __device__ static uint64_t* sync_bar(const Plan& sm, int which) {
    return sm.full(0) + 2 * Traits::kStages + which;
  }
  // All parties of mbarrier `which` (NarrowSync) arrive, then wait for its `use`-th phase.
  __device__ static void sync(const Plan& sm, int which, int use) {
    ptx::mbarrier_arrive(sync_bar(sm, which));
    ptx::mbarrier_wait_or_trap(sync_bar(sm, which), static_cast<uint32_t>(use) & 1);
  }

  __device__ static uint8_t* p_tile(const Plan& sm, int g) {
    return sm.base + Traits::kPOffset + g * Traits::kPTBytes;
  }
  // Shared addresses of float [4 warps][kCols]: a block's column maxima (double-buffered), a
  // consumer's final state (what 0: max, 1: sums).
  __device__ static uint32_t maxima(const Plan& sm, int g, int buffer) {
    return ptx::smem_address(sm.base + Traits::kMaxOffset) + (2 * g + buffer) * 4 * kCols * 4;
  }
  __device__ static uint32_t state(const Plan& sm, int g, int what) {
    return ptx::smem_address(sm.base + Traits::kStateOffset) + (2 * g + what) * 4 * kCols * 4;
  }
  __device__ static float ld_float(uint32_t addr) {
    return __uint_as_float(ptx::ld_shared_u32(addr));
  }
  __device__ static void st_float(uint32_t addr, float v) {
    ptx::st_shared_u32(addr, __float_as_uint(v));
  }
  __device__ static uint32_t q_exponent_address(const Plan& sm, int r) {
    return ptx::smem_address(sm.base + Traits::kQExpOffset) + 4 * r;
  }
  // Column r's key limit (int) and softmax scale (float), written with Q (kRegisterA).
  __device__ static uint32_t column_limit_address(const Plan& sm, int r) {
    return ptx::smem_address(sm.base + Traits::kColumnOffset) + 4 * r;
  }
  __device__ static uint32_t column_scale_address(const Plan& sm, int r) {
    return column_limit_address(sm, r) + 4 * kCols;
  }
  // Consumer g's running maxima of iteration parity `parity` (kRegisterA), float [kCols].
  __device__ static uint32_t run_max(const Plan& sm, int g, int parity) {
    return ptx::smem_address(sm.base + Traits::kRunMaxOffset) + (2 * g + parity) * kCols * 4;
  }
  // 2^e as a float for e in [-126, 127].
  __device__ static float pow2(int e) { return __int_as_float((127 + e) << 23); }
  // Row r's logits over its rescaled q times 2^-e[r], in two float factors (|e| <= 100).
  __device__ static float unscale_by(int e, float x) {
    return x * pow2(-(e / 2)) * pow2(-(e - e / 2));
  }
  __device__ static float unscale(const Plan& sm, int r, float x) {
    if constexpr (!Traits::kRescaleQ) return x;
    return unscale_by(static_cast<int>(ptx::ld_shared_u32(q_exponent_address(sm, r))), x);
  }

  // Q into its 16-row panels: by cp.async when the MMAs take q's type; else (bf16 q, fp8 cache:
  // fp16 MMAs) through registers, row r times 2^e[r] with e[r] putting the row's largest finite
  // |q| into [2^14, 2^15): fp16 then holds every element of at least 2^-28 of that largest one
  // exactly (bf16's 8 significant bits within fp16's 11) and none overflows; inf and NaN stay.
  // The exponents go to shared memory; the logits of row r are 2^e[r] too large, which its
  // softmax scale takes back (run()).
  __device__ static void load_q(const MlaParams& p, const Plan& sm, const Tile& t) {
    const uint32_t tid = threadIdx.x - 128;
    const uint32_t dst = ptx::smem_address(sm.q());
    if constexpr (!Traits::kRescaleQ && !Traits::kRegisterA) {
      load_q_tile<Elt, kCols>(p, t, dst, Traits::kQPanelBytes, tid, Traits::kConsumerThreads);
    } else {
      static_assert(Traits::kConsumerThreads == 16 * 16, "16 threads a row, 16 rows a pass");
      constexpr int kPerThread = (kQChunks + 15) / 16;
#pragma unroll 1
      for (int pass = 0; pass < kCols / 16; ++pass) {
        const int row = 16 * pass + static_cast<int>(tid) / 16, sub = static_cast<int>(tid) % 16;
        uint4 v[kPerThread];
        float top = 0.f;
        const Tile::RowPosition at = t.position(p, row < t.rows ? row : 0);
#pragma unroll
        for (int k = 0; k < kPerThread; ++k) {
          const int chunk = sub + 16 * k;
          v[k] = make_uint4(0u, 0u, 0u, 0u);
          if (row >= t.rows || chunk >= static_cast<int>(kQChunks)) continue;
          v[k] = *reinterpret_cast<const uint4*>(q_chunk<Elt>(p, at.q_row(t), at.head, chunk));
          const Elt* e = reinterpret_cast<const Elt*>(&v[k]);
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            const float x = fabsf(static_cast<float>(e[i]));
            if (x <= 3.4e38f) top = fmaxf(top, x);  // finite only
          }
        }
#pragma unroll
        for (int o = 1; o < 16; o <<= 1) top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, o));
        // Clamped to +-100 (unscale's two factors): a row whose largest |q| is 2^116 or more
        // overflows to inf, and one under 2^-86 keeps elements down to 2^-124 only (fp16's
        // smallest subnormal, 2^-24, after the 2^100).
        const int e = Traits::kRescaleQ && top > 0.f ? max(-100, min(100, 14 - ilogbf(top))) : 0;
        if (sub == 0) {
          ptx::st_shared_u32(q_exponent_address(sm, row), static_cast<uint32_t>(e));
          if constexpr (Traits::kRegisterA) {
            ptx::st_shared_u32(column_limit_address(sm, row),
                               static_cast<uint32_t>(t.limit(p, row)));
            st_float(column_scale_address(sm, row), unscale_by(e, p.scale_log2));
          }
        }
        const float f0 = pow2(e / 2), f1 = pow2(e - e / 2);
#pragma unroll
        for (int k = 0; k < kPerThread; ++k) {
          const int chunk = sub + 16 * k;
          if (chunk >= static_cast<int>(kQChunks)) continue;
          const Elt* x = reinterpret_cast<const Elt*>(&v[k]);
          uint32_t h[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            h[i] = ptx::pack2<MmaElt>(static_cast<float>(x[2 * i]) * f0 * f1,
                                      static_cast<float>(x[2 * i + 1]) * f0 * f1);
          }
          if constexpr (Traits::kRegisterA) {
            store_q_permuted(dst, row, chunk, h);
          } else {
            ptx::st_shared_v4(dst + swizzled_offset(Traits::kQPanelBytes, row, chunk),
                              make_uint4(h[0], h[1], h[2], h[3]));
          }
        }
      }
      ptx::fence_proxy_async_shared();  // st.shared wrote Q; wgmma reads it
      sync(sm, kQLoaded, 0);
    }
  }

  // ---- Register A operands (Traits::kRegisterA, fp8 cache): the consumers convert their pair's
  // codes from the raw ring straight into the fp16 A fragments of S^T = K Q^T and O^T += V^T P^T.
  // Which rows and bytes a thread loads, the permutations of keys, columns and features that keep
  // the loads 16 bytes wide and free of bank conflicts, and how the codes become fragments:
  // narrow_fragments.hpp (tested on the CPU).

  // Q's physical 16-byte chunk `chunk` of row `row`, as four 16-bit pairs, into the permuted
  // panels (the fragments' column order).
  __device__ static void store_q_permuted(uint32_t dst, int row, int chunk,
                                          const uint32_t (&h)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      ptx::st_shared_u32(
          dst + swizzled_offset(Traits::kQPanelBytes, row, frag::q_chunk_of(chunk, i)) +
              frag::q_byte_of(chunk),
          h[i]);
    }
  }

  __device__ static uint32_t raw_slot(const Plan& sm, int b) {
    return ptx::smem_address(sm.raw(b % Traits::kRawSlots));
  }

  // The fp16 pair of the codes in bytes 0, 1 (high: 2, 3) of a word.
  struct Widen {
    __device__ uint32_t operator()(uint32_t four, bool high) const {
      return high ? ptx::cvt_f16x2_e4m3x2_half<true>(four)
                  : ptx::cvt_f16x2_e4m3x2_half<false>(four);
    }
  };

  // S^T of pair n: 9 groups of 4 k steps, each group's fragments converted from two 16-byte loads
  // while the previous group's MMAs run; two register buffers, so that a buffer is rewritten only
  // after the MMAs that read it are complete.
  __device__ static void issue_s_registers(const Plan& sm, float (&s)[kSRegs], int n,
                                           uint64_t q_desc) {
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int warp = (static_cast<int>(threadIdx.x) % 128) / 32;
    const uint32_t src = raw_slot(sm, 2 * n + frag::s_block(warp)) +
                         frag::s_row(warp, lane) * Traits::kRawRowBytes + frag::s_byte(lane, 0);
    constexpr int kBuffers = kCols <= 16 ? 2 : 1;  // as in issue_pv_registers
    uint32_t a[kBuffers][4][4];
#pragma unroll
    for (int group = 0; group < kQKSteps / 4; ++group) {
      uint32_t(&f)[4][4] = a[group % kBuffers];
      const uint4 lo = ptx::ld_shared_v4(src + frag::s_byte(0, group));
      const uint4 hi = ptx::ld_shared_v4(src + 8 * Traits::kRawRowBytes + frag::s_byte(0, group));
      if (group >= kBuffers) {
        // Group group - kBuffers's MMAs, the last readers of f, are complete.
        ptx::wgmma_wait_group<kBuffers - 1>();
        ptx::fence_operands(s);
#pragma unroll
        for (int j = 0; j < 4; ++j) ptx::fence_operands(f[j]);
      }
      const uint32_t wl[4] = {lo.x, lo.y, lo.z, lo.w}, wh[4] = {hi.x, hi.y, hi.z, hi.w};
      frag::s_fragments(wl, wh, f, Widen{});
#pragma unroll
      for (int j = 0; j < 4; ++j) ptx::fence_operands(f[j]);
      ptx::wgmma_fence();
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        ptx::wgmma_rs<kCols, MmaElt, 0>(
            s, f[j], ptx::desc_advance(q_desc, group * Traits::kQPanelBytes + 32 * j),
            group + j > 0 ? 1u : 0u);
      }
      ptx::wgmma_commit_group();
    }
    ptx::wgmma_wait_group<0>();
    ptx::fence_operands(s);
  }

  // O^T += V^T P^T of pair n: per k step j (16 keys) a thread loads its 16 features of four keys
  // and byte-permutes them into the fragments of the 8 feature chunks. 16 columns: all 8 chunks
  // a unit, two register buffers as in the S steps. 32 columns: O^T alone takes 128 registers,
  // so a unit is 4 chunks (2 words of each key) and one buffer, each unit's conversion waiting
  // for the MMAs of the one before. The pair's raw slots are handed back after the last loads.
  __device__ static void issue_pv_registers(const Plan& sm, OTile& o, int n, uint64_t p_desc) {
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int warp = (static_cast<int>(threadIdx.x) % 128) / 32;
    constexpr int kUnitsPerStep = kCols <= 16 ? 1 : 2;
    constexpr int kUnitChunks = kChunks / kUnitsPerStep;
    constexpr int kBuffers = kCols <= 16 ? 2 : 1;
    uint32_t a[kBuffers][kUnitChunks][4];
    uint32_t key[4][4];
#pragma unroll
    for (int u = 0; u < kPVSteps * kUnitsPerStep; ++u) {
      const int j = u / kUnitsPerStep, part = u % kUnitsPerStep;
      uint32_t(&f)[kUnitChunks][4] = a[u % kBuffers];
      if (part == 0) {
        const uint32_t src = raw_slot(sm, 2 * n + frag::pv_block(j)) +
                             frag::pv_row(j, lane, 0) * Traits::kRawRowBytes +
                             frag::pv_byte(warp, lane);
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const uint4 v = ptx::ld_shared_v4(
              src + (frag::pv_row(j, lane, r) - frag::pv_row(j, lane, 0)) * Traits::kRawRowBytes);
          key[r][0] = v.x, key[r][1] = v.y, key[r][2] = v.z, key[r][3] = v.w;
        }
        if (j == kPVSteps - 1) {
          // Every code of the pair is in registers (the loads above complete before their use).
          ptx::mbarrier_arrive(MlaLoader<Traits>::raw_empty(sm, (2 * n) % Traits::kRawSlots));
          ptx::mbarrier_arrive(MlaLoader<Traits>::raw_empty(sm, (2 * n + 1) % Traits::kRawSlots));
        }
      }
      if (u >= kBuffers) {
        // Unit u - kBuffers's MMAs, the last readers of f, are complete.
        ptx::wgmma_wait_group<kBuffers - 1>();
#pragma unroll
        for (int c = 0; c < kChunks; ++c) ptx::fence_operands(o[c]);
#pragma unroll
        for (int c = 0; c < kUnitChunks; ++c) ptx::fence_operands(f[c]);
      }
      frag::pv_fragments<kUnitChunks / 2>(key, f, Widen{}, part * kUnitChunks / 2);
#pragma unroll
      for (int c = 0; c < kUnitChunks; ++c) ptx::fence_operands(f[c]);
      ptx::wgmma_fence();
#pragma unroll
      for (int c = 0; c < kUnitChunks; ++c) {
        ptx::wgmma_rs<kCols, MmaElt, 0>(o[part * kUnitChunks + c], f[c],
                                        ptx::desc_advance(p_desc, 32 * j), 1u);
      }
      ptx::wgmma_commit_group();
    }
    ptx::wgmma_wait_group<0>();
#pragma unroll
    for (int c = 0; c < kChunks; ++c) ptx::fence_operands(o[c]);
  }

  // Consumer g's O^T staging at the end of the tile: fp32 [kCols][kStageRow] over its pair
  // (shared address).
  __device__ static uint32_t staging(const Plan& sm, int g) {
    if constexpr (Traits::kRegisterA) {
      return ptx::smem_address(sm.raw(0)) + g * Traits::kStagingBytes;
    } else {
      return ptx::smem_address(sm.kv(2 * g));
    }
  }

  __device__ static void issue_s(float (&s)[kSRegs], uint64_t k_desc, uint64_t q_desc) {
#pragma unroll
    for (int j = 0; j < kQKSteps; ++j) {
      const uint32_t col = (j % 4) * 32;
      ptx::wgmma_ss<kCols, MmaElt, 0, 0>(
          s, ptx::desc_advance(k_desc, (j / 4) * Traits::kKVPanelStride + col),
          ptx::desc_advance(q_desc, (j / 4) * Traits::kQPanelBytes + col), j > 0 ? 1u : 0u);
    }
  }

  __device__ static void issue_pv(OTile& o, uint64_t v_desc, uint64_t p_desc) {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
#pragma unroll
      for (int k = 0; k < kPVSteps; ++k) {
        ptx::wgmma_ss<kCols, MmaElt, 1, 0>(
            o[c], ptx::desc_advance(v_desc, c * Traits::kKVPanelStride + k * 2048),
            ptx::desc_advance(p_desc, 32 * k), 1u);
      }
    }
  }

  // P^T (16-bit) to consumer g's tile, 16 columns a stmatrix (group cg: elements 8 cg ..
  // 8 cg + 7): matrix i of it is row half i & 1 of column group 2 cg + (i >> 1), stored
  // transposed: column 16 cg + 8 (i >> 1) + lane % 8 becomes a 128-byte row of keys (16-byte
  // chunk 2 warp + (i & 1), swizzled).
  __device__ static void store_p(uint32_t tile, const float (&s)[kSRegs]) {
    const uint32_t lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
#pragma unroll
    for (int cg = 0; cg < kCols / 16; ++cg) {
      uint32_t r[4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        r[i] = ptx::pack2<MmaElt>(s[8 * cg + 2 * i], s[8 * cg + 2 * i + 1]);
      const uint32_t m = lane / 8, row = 16 * cg + 8 * (m >> 1) + lane % 8;
      const uint32_t chunk = 2 * warp + (m & 1);
      ptx::stmatrix_x4_trans(tile + row * 128 + ((chunk ^ (row % 8)) << 4), r);
    }
  }

  // Consumer g (0 or 1) over pairs g, g + 2, ... of the tile's split: O^T, and per column j the
  // running max m[j] (raw logits, this warpgroup's) and this thread's part of the sum l[j].
  __device__ static void run(const MlaParams& p, const Plan& sm, const Tile& t, int g, OTile& o,
                             float (&m)[kColsPerThread], float (&l)[kColsPerThread]) {
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int warp = (static_cast<int>(threadIdx.x) % 128) / 32;
    // Each column's key limit and softmax scale (log2 e folded in, over its rescaled q): in
    // registers, or (kRegisterA) read from shared memory where load_q put them, which keeps them
    // out of the registers a 32-column O^T needs.
    constexpr int kColumnRegs = Traits::kRegisterA ? 1 : kColsPerThread;
    int limit_regs[kColumnRegs];
    float scale_regs[kColumnRegs];
#pragma unroll
    for (int j = 0; j < kColsPerThread; ++j) {
      if constexpr (!Traits::kRegisterA) {
        limit_regs[j] = t.limit(p, column(j));
        scale_regs[j] = unscale(sm, column(j), p.scale_log2);
      }
      m[j] = -INFINITY;
      l[j] = 0.f;
    }
    const auto limit = [&](int j) {
      if constexpr (Traits::kRegisterA) {
        return static_cast<int>(ptx::ld_shared_u32(column_limit_address(sm, column(j))));
      } else {
        return limit_regs[j];
      }
    };
    const auto scale = [&](int j) {
      if constexpr (Traits::kRegisterA) {
        return ld_float(column_scale_address(sm, column(j)));
      } else {
        return scale_regs[j];
      }
    };
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
#pragma unroll
      for (int i = 0; i < kSRegs; ++i) o[c][i] = 0.f;
    }
    const uint64_t q_desc = ptx::make_kmajor_desc(sm.q());
    [[maybe_unused]] const uint64_t k_desc = ptx::make_kmajor_desc(sm.kv(2 * g));
    [[maybe_unused]] const uint64_t v_desc =
        ptx::make_mnmajor_desc(sm.kv(2 * g), Traits::kKVPanelStride);
    const uint64_t p_desc = ptx::make_kmajor_desc(p_tile(sm, g));
    const uint32_t p_addr = ptx::smem_address(p_tile(sm, g));
    const int pairs = t.num_blocks / 2;
    // kRegisterA: the running maxima live in shared memory (run_max, by iteration parity), not
    // in registers beside O^T; warp 0's column lanes write them, the next iteration's kMaxReady
    // orders the writes before every read.
    const bool max_writer = warp == 0 && lane < 4;
    if constexpr (Traits::kRegisterA) {
      if (max_writer) {
#pragma unroll
        for (int j = 0; j < kColsPerThread; ++j)
          st_float(run_max(sm, g, 0) + 4 * column(j), -INFINITY);
      }
    }
    int it = 0;
    for (int n = g; n < pairs; n += 2, ++it) {
      float s[kSRegs];
#pragma unroll
      for (int i = 0; i < kSRegs; ++i) s[i] = 0.f;
      ptx::fence_operands(s);
      if constexpr (Traits::kRegisterA) {
        for (int h = 0; h < 2; ++h) {
          const int b = 2 * n + h;
          ptx::mbarrier_wait_or_trap(MlaLoader<Traits>::raw_full(sm, b % Traits::kRawSlots),
                                     (b / Traits::kRawSlots) & 1);
        }
        issue_s_registers(sm, s, n, q_desc);
      } else {
        ptx::mbarrier_wait_or_trap(sm.full(2 * g), it & 1);
        ptx::mbarrier_wait_or_trap(sm.full(2 * g + 1), it & 1);
        ptx::fence_proxy_async_shared();  // cp.async wrote the stages; wgmma reads them
        ptx::wgmma_fence();
        issue_s(s, k_desc, q_desc);
        ptx::wgmma_commit_group();
        ptx::wgmma_wait_group<0>();
        ptx::fence_operands(s);
      }

      // Mask, then the block's column maxima over the warpgroup.
      // Row 16 warp + lane / 4 + 8 h of S^T; with register operands its key is key_row's.
      const int s_row = 16 * warp + lane / 4;
      const int key = (t.block_begin + 2 * n) * Traits::kBlockKeys +
                      (Traits::kRegisterA ? frag::key_row(s_row) : s_row);
      float block_max[kColsPerThread];
#pragma unroll
      for (int j = 0; j < kColsPerThread; ++j) {
        const int limit_j = limit(j);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (key + 8 * h >= limit_j) s[element(j, h)] = -INFINITY;
        }
        block_max[j] = keys_max(fmaxf(s[element(j, 0)], s[element(j, 1)]));
      }
      const uint32_t mx = maxima(sm, g, it & 1);
      if (lane < 4) {
#pragma unroll
        for (int j = 0; j < kColsPerThread; ++j) {
          st_float(mx + 4 * (warp * kCols + column(j)), block_max[j]);
        }
      }
      sync(sm, kMaxReady + g, it);
#pragma unroll
      for (int j = 0; j < kColsPerThread; ++j) {
        const float old_max =
            Traits::kRegisterA ? ld_float(run_max(sm, g, it & 1) + 4 * column(j)) : m[j];
        float top = old_max;
#pragma unroll
        for (int w = 0; w < 4; ++w) top = fmaxf(top, ld_float(mx + 4 * (w * kCols + column(j))));
        const float scale_j = scale(j);
        // A column that has seen no visible key keeps -inf and takes 0 as its base.
        const float base = top == -INFINITY ? 0.f : top * scale_j;
        const float factor = top == -INFINITY ? 1.f : ptx::exp2_approx(old_max * scale_j - base);
        if constexpr (Traits::kRegisterA) {
          if (max_writer) st_float(run_max(sm, g, (it + 1) & 1) + 4 * column(j), top);
        } else {
          m[j] = top;
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float& x = s[element(j, h)];
          x = ptx::exp2_approx(fmaf(x, scale_j, -base));
        }
        l[j] = l[j] * factor + s[element(j, 0)] + s[element(j, 1)];
        // O^T's elements of column j, where the column's max moved in some lane of the warp (a
        // column at a time: no array of factors beside a 32-column O^T).
        if (__any_sync(0xffffffffu, factor != 1.f)) {
#pragma unroll
          for (int c = 0; c < kChunks; ++c) {
#pragma unroll
            for (int h = 0; h < 2; ++h) o[c][element(j, h)] *= factor;
          }
        }
      }
      store_p(p_addr, s);
      ptx::fence_proxy_async_shared();  // st.shared (stmatrix) wrote P^T; wgmma reads it
      sync(sm, kPReady + g, it);

#pragma unroll
      for (int c = 0; c < kChunks; ++c) ptx::fence_operands(o[c]);
      if constexpr (Traits::kRegisterA) {
        issue_pv_registers(sm, o, n, p_desc);
      } else {
        ptx::wgmma_fence();
        issue_pv(o, v_desc, p_desc);
        ptx::wgmma_commit_group();
        ptx::wgmma_wait_group<0>();
#pragma unroll
        for (int c = 0; c < kChunks; ++c) ptx::fence_operands(o[c]);
        ptx::mbarrier_arrive(sm.empty(2 * g));
        ptx::mbarrier_arrive(sm.empty(2 * g + 1));
      }
    }
    // finish() reads the maxima in warp 0's column lanes only: the threads that wrote them.
    if constexpr (Traits::kRegisterA) {
#pragma unroll
      for (int j = 0; j < kColsPerThread; ++j) {
        m[j] = max_writer ? ld_float(run_max(sm, g, it & 1) + 4 * column(j)) : -INFINITY;
      }
    }
  }

  // Acquires the last phase of pair g's full barriers (if the producer filled the pair at all):
  // consumer 1 - g reads g's staging, memory the producer last wrote (TMA, cp.async) under those
  // barriers. Its order through consumer g's own wait and the barrier between the consumers is
  // transitive; this acquire states it directly, for the reader and for racecheck (which
  // reported the staging reads as hazards before, run set q, with named barriers there).
  __device__ static void acquire_pair(const Plan& sm, const Tile& t, int g) {
    if constexpr (Traits::kRawRing) return;           // the producer writes no stage then
    const int uses = (t.num_blocks / 2 - g + 1) / 2;  // pairs g, g + 2, ...
    if (uses <= 0) return;
    ptx::mbarrier_wait_or_trap(sm.full(2 * g), (uses - 1) & 1);
    ptx::mbarrier_wait_or_trap(sm.full(2 * g + 1), (uses - 1) & 1);
  }

  // With register operands the stagings lie over the raw ring, which the producer last wrote
  // (cp.async) under each slot's full barrier: both consumers acquire the last phase of every
  // slot filled before they write over them (the order is already transitive through the other
  // consumer's wait and kStateReady; this states it for racecheck, as acquire_pair does).
  __device__ static void acquire_raw(const Plan& sm, const Tile& t) {
    for (int slot = 0; slot < Traits::kRawSlots && slot < t.num_blocks; ++slot) {
      const int uses = (t.num_blocks - slot + Traits::kRawSlots - 1) / Traits::kRawSlots;
      ptx::mbarrier_wait_or_trap(MlaLoader<Traits>::raw_full(sm, slot), (uses - 1) & 1);
    }
  }

  // Both consumers, after run(): the two states merge per column (a column's max over both, the
  // sums rescaled to it), each consumer stages its O^T times its factor over its own pair, and
  // all 256 threads add the two stagings and store rows of 512 contiguous features (16-bit out,
  // or the split's fp32 partial state); consumer 0's first warp writes the lse.
  __device__ static void finish(const MlaParams& p, const Plan& sm, const Tile& t, int g,
                                const OTile& o, const float (&m)[kColsPerThread],
                                const float (&l)[kColsPerThread]) {
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int warp = (static_cast<int>(threadIdx.x) % 128) / 32;
    float sum[kColsPerThread];
#pragma unroll
    for (int j = 0; j < kColsPerThread; ++j) sum[j] = keys_sum(l[j]);
    if (lane < 4) {
#pragma unroll
      for (int j = 0; j < kColsPerThread; ++j) {
        st_float(state(sm, g, 1) + 4 * (warp * kCols + column(j)), sum[j]);
        if (warp == 0) st_float(state(sm, g, 0) + 4 * column(j), unscale(sm, column(j), m[j]));
      }
    }
    sync(sm, kStateReady, 0);

    float own[kColsPerThread], lse[kColsPerThread];
#pragma unroll
    for (int j = 0; j < kColsPerThread; j += 2) {
      fwd::OnlineSoftmax<2> merged(p.scale_log2);
      float sums[2], mine[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int col = column(j + h);
        const float m0 = ld_float(state(sm, 0, 0) + 4 * col),
                    m1 = ld_float(state(sm, 1, 0) + 4 * col);
        const float top = fmaxf(m0, m1);
        float f[2], s[2] = {0.f, 0.f};
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const float mc = c == 0 ? m0 : m1;
          f[c] = mc == -INFINITY ? 0.f : ptx::exp2_approx((mc - top) * p.scale_log2);
#pragma unroll
          for (int w = 0; w < 4; ++w) s[c] += ld_float(state(sm, c, 1) + 4 * (w * kCols + col));
        }
        merged.row_max[h] = top;
        sums[h] = s[0] * f[0] + s[1] * f[1];
        mine[h] = g == 0 ? f[0] : f[1];
      }
      const float no_sink[2] = {-INFINITY, -INFINITY};
      float out_scale[2], row_lse[2];
      merged.finalize_sums(sums, no_sink, out_scale, row_lse);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        own[j + h] = mine[h] * out_scale[h] * p.v_scale;
        lse[j + h] = row_lse[h];
      }
    }

    const uint32_t stage = staging(sm, g);
    if constexpr (Traits::kRegisterA) {
      acquire_raw(sm, t);
      // Elements i and i + 2 (row halves h = 0, 1) are adjacent physical features (feature_of).
      const int feature_base = frag::feature_of(warp, lane, 0, 0);
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
#pragma unroll
        for (int k = 0; k < kSRegs / 2; ++k) {
          const int i = (k & 1) + 4 * (k >> 1);  // 0, 1, 4, 5, ...: the h = 0 elements
          const float f = own[column_of(i)];
          ptx::st_shared_v2(
              stage + 4 * (column(column_of(i)) * Traits::kStageRow + feature_base + 2 * c),
              __float_as_uint(o[c][i] * f), __float_as_uint(o[c][i + 2] * f));
        }
      }
    } else {
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
#pragma unroll
        for (int i = 0; i < kSRegs; ++i) {
          const int feature = 64 * c + 16 * warp + lane / 4 + 8 * ((i >> 1) & 1);
          st_float(stage + 4 * (column(column_of(i)) * Traits::kStageRow + feature),
                   o[c][i] * own[column_of(i)]);
        }
      }
    }
    sync(sm, kStateReady, 1);

    const bool whole = p.num_splits == 1;
    if (g == 0 && warp == 0 && lane < 4) {
#pragma unroll
      for (int j = 0; j < kColsPerThread; ++j) {
        const int col = column(j);
        if (col >= t.rows) continue;
        const Tile::RowPosition at = t.position(p, col);
        if (whole) {
          p.lse[at.q_row(t) * p.lse_stride[0] + at.head * p.lse_stride[1]] = lse[j];
        } else {
          p.partial_lse[(t.split * p.total_q + at.q_row(t)) * p.heads + at.head] = lse[j];
        }
      }
    }
    acquire_pair(sm, t, 1 - g);
    // 8 features a step: one 16-byte store of 16-bit out, two of fp32.
    constexpr int kPieces = kLatentDim / 8;
    const int tid = static_cast<int>(threadIdx.x) - 128;
    for (int idx = tid; idx < t.rows * kPieces; idx += Traits::kConsumerThreads) {
      const int r = idx / kPieces, f = 8 * (idx % kPieces);
      const uint32_t offset = 4 * (r * Traits::kStageRow + f);
      float v[8];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint4 a = ptx::ld_shared_v4(staging(sm, 0) + offset + 16 * h);
        const uint4 b = ptx::ld_shared_v4(staging(sm, 1) + offset + 16 * h);
        v[4 * h + 0] = __uint_as_float(a.x) + __uint_as_float(b.x);
        v[4 * h + 1] = __uint_as_float(a.y) + __uint_as_float(b.y);
        v[4 * h + 2] = __uint_as_float(a.z) + __uint_as_float(b.z);
        v[4 * h + 3] = __uint_as_float(a.w) + __uint_as_float(b.w);
      }
      const Tile::RowPosition at = t.position(p, r);
      if (whole) {
        Elt* out = static_cast<Elt*>(p.out) + at.q_row(t) * p.out_stride[0] +
                   at.head * p.out_stride[1] + f;
        *reinterpret_cast<uint4*>(out) =
            make_uint4(ptx::pack2<Elt>(v[0], v[1]), ptx::pack2<Elt>(v[2], v[3]),
                       ptx::pack2<Elt>(v[4], v[5]), ptx::pack2<Elt>(v[6], v[7]));
      } else {
        const int64_t st = (t.split * p.total_q + at.q_row(t)) * p.heads + at.head;
        float4* out = reinterpret_cast<float4*>(p.partial_o + st * kLatentDim + f);
        out[0] = make_float4(v[0], v[1], v[2], v[3]);
        out[1] = make_float4(v[4], v[5], v[6], v[7]);
      }
    }
  }
};

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    mla_narrow_kernel(const __grid_constant__ MlaParams p) {
  extern __shared__ uint8_t smem_raw[];
  const SharedPlan<Traits> sm{ptx::align_to_1024(smem_raw)};
  ptx::begin_dependent_grid();  // as mla_kernel
  Tile t = make_tile<Traits::kBlockKeys>(p);
  if (t.rows == 0) return;
  // Whole pairs: a padding block past the split's visible keys is read as zeros where it lies
  // past key_end (loader.cuh) and masked like any key past a row's limit.
  t.num_blocks += t.num_blocks & 1;

  using Consumer = NarrowConsumer<Traits>;
  if (threadIdx.x == 0) {
    for (int s = 0; s < Traits::kStages; ++s) {
      ptx::mbarrier_init(sm.full(s), 128);   // one arrival per producer thread
      ptx::mbarrier_init(sm.empty(s), 128);  // the one consumer warpgroup that reads the stage
    }
    for (int g = 0; g < 2; ++g) {
      ptx::mbarrier_init(Consumer::sync_bar(sm, kMaxReady + g), 128);
      ptx::mbarrier_init(Consumer::sync_bar(sm, kPReady + g), 128);
    }
    ptx::mbarrier_init(Consumer::sync_bar(sm, kStateReady), Traits::kConsumerThreads);
    ptx::mbarrier_init(Consumer::sync_bar(sm, kQLoaded), Traits::kConsumerThreads);
    for (int s = 0; s < Traits::kRawSlots; ++s) {
      ptx::mbarrier_init(MlaLoader<Traits>::raw_full(sm, s), 128);   // producer cp.async
      ptx::mbarrier_init(MlaLoader<Traits>::raw_empty(sm, s), 128);  // the widening consumer
    }
  }
  __syncthreads();

  if (run_producer<Traits, MlaLoader<Traits>>(p, sm, t)) return;
  const int role = ptx::warpgroup_index();
  Consumer::load_q(p, sm, t);
  ptx::setmaxnreg_to<Traits::kConsumerRegisters, Traits::kLaunchRegisters>();
  typename Consumer::OTile o;
  float m[Consumer::kColsPerThread], l[Consumer::kColsPerThread];
  Consumer::run(p, sm, t, role - 1, o, m, l);
  Consumer::finish(p, sm, t, role - 1, o, m, l);
}

}  // namespace hopattn::kernels::mla
