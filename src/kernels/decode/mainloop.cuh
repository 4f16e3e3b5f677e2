// Decode kernel, part 2 of 3: the main loop's pieces. Loads: the page gather (one page lookup
// per key, one tile ahead; 16-byte cp.async pieces into swizzled smem). Block math: one warp's
// QK^T, mask, online softmax and PV over 16 keys with mma.sync m16n8k16, 8-bit KV dequantized
// in registers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "kernels/decode/kv_bits.hpp"
#include "kernels/decode/schedule.cuh"
#include "ptx/cp_async.cuh"
#include "ptx/dequant.cuh"
#include "ptx/fast_math.cuh"
#include "ptx/ldmatrix.cuh"
#include "ptx/mma_sync.cuh"
#include "ptx/pack.cuh"

namespace hopattn::kernels::decode {

// ------------------------------------------------------------------------------ loads

// Page of one key of a tile, held by lane l < 16 of warp w for key 16w + l. Looked up one
// iteration before its copies are issued, so the page-table latency hides behind a tile's math:
// the page id is checked against the pool where it is used (issue_tile), not here, where the
// check would wait for the load.
struct PageRef {
  int page;  // kNoKey: no key (past the segment end, or no such tile); else the table's entry
  int slot;
};
// Any int is a page-table entry (-1 included), so "no key" is one no table holds in practice.
constexpr int kNoKey = INT_MIN;

// Entry `index` of the page list at element offset `at` (page_list_at), through the read-only path.
__device__ __forceinline__ int page_entry(const Params& p, int64_t at, int index) {
  return p.block_table != nullptr ? __ldg(p.block_table + at + index * p.bt_stride_page)
                                  : __ldg(p.indices + (at + index) * p.indices_stride);
}

// The page-table entries of the next kAhead blocks of a warp, looked up kAhead blocks before the
// block's copies are issued (the small and narrow kernels; kAhead = 1 is kernel.cuh's one tile
// ahead). `fetch(i)` looks up block i. At batch 1 over pages of 16, Nsight Compute put 10% of the
// stall samples on the issue's first use of an entry looked up one block ahead, but four ahead
// gained no time there (the warp then waits on its copies); over pages of 1, where a block's 16
// keys lie in 16 pages, it did (docs/perf/NOTES.md, run set ah).
template <int kAhead, class Entry>
struct PageWindow {
  Entry ref[kAhead];  // blocks b .. b + kAhead - 1, oldest first

  // Blocks 0 .. kAhead - 1, loaded together.
  template <class Fetch>
  __device__ __forceinline__ void start(const Fetch& fetch) {
#pragma unroll
    for (int j = 0; j < kAhead; ++j) ref[j] = fetch(j);
  }
  // The oldest block's entry; the window then looks up block `next` (b + kAhead).
  template <class Fetch>
  __device__ __forceinline__ Entry pop(const Fetch& fetch, int next) {
    const Entry oldest = ref[0];
#pragma unroll
    for (int j = 0; j + 1 < kAhead; ++j) ref[j] = ref[j + 1];
    ref[kAhead - 1] = fetch(next);
    return oldest;
  }
};

// One warp streaming its 16-key blocks through its own ring of kStages stages (the small and
// narrow kernels: __syncwarp, no CTA barrier in the loop). start() issues blocks 0 .. kStages - 2;
// run() then, for each block i, waits for it, issues block i + kStages - 1 into block i - 1's
// stage (every lane is done with it) and attends block i. `load(j, stage)` is called once for
// each j in order, past the warp's blocks too (a page window advances with it), and issues block
// j's copies into `stage` where j < r.blocks: one cp.async group a call. `attend(stage, key0,
// masked)`: block i at keys key0 .., masked unless inside the keys every row sees (r.full_lo ..
// r.full_hi, below r.hi).
template <int kStages, int kStageBytes, class Stage>
struct WarpRing {
  Stage base;  // the warp's first stage: a generic pointer or a shared-window address

  template <class Load>
  __device__ __forceinline__ void start(const Load& load) const {
#pragma unroll 1
    for (int s = 0; s < kStages - 1; ++s) {
      load(s, base + s * kStageBytes);
      ptx::cp_async_commit();
    }
  }

  template <class Range, class Load, class Attend>
  __device__ __forceinline__ void run(const Range& r, const Load& load,
                                      const Attend& attend) const {
    int stage = 0, issue_stage = kStages - 1;
#pragma unroll 1
    for (int i = 0; i < r.blocks; ++i) {
      // Block i landed (own copies); __syncwarp: every lane's copies are visible, and every
      // lane is done with block i - 1, whose stage the next copies overwrite.
      ptx::cp_async_wait<kStages - 2>();
      __syncwarp();
      load(i + kStages - 1, base + issue_stage * kStageBytes);
      ptx::cp_async_commit();
      const int key0 = r.warp_first + i * (kWarps * kBlockTokens);
      const int key_last = key0 + kBlockTokens - 1;
      const bool masked = key0 < r.full_lo || key_last > r.full_hi || key_last >= r.hi;
      attend(base + stage * kStageBytes, key0, masked);
      stage = stage + 1 == kStages ? 0 : stage + 1;
      issue_stage = issue_stage + 1 == kStages ? 0 : issue_stage + 1;
    }
  }
};

__device__ __forceinline__ PageRef fetch_page(const Params& p, const CtaShared& cs, int k, int warp,
                                              int lane) {
  PageRef ref{kNoKey, 0};
  if (k < cs.tile_count && lane < kLoadTokensPerWarp) {
    const TileInfo t = tile_info(cs, k);
    const int key = t.start + warp * kLoadTokensPerWarp + lane;
    if (key < t.end) {
      const int index = static_cast<int>(p.page_div.divide(static_cast<uint32_t>(key)));
      ref.slot = key - index * p.page_size;
      ref.page = page_entry(p, cs.seg_pages[t.segment], index);
    }
  }
  return ref;
}

// After the main loop's last barrier: a bad page id the CTA met, if any, into the device status
// word (one thread). The request is the CTA's (its beams share it).
__device__ __forceinline__ void report_bad_page(const Params& p, const CtaShared& cs) {
  if (threadIdx.x == 0 && cs.bad_claimed != 0u) {
    record_bad_index(p, StatusIndex::kPage, static_cast<int>(blockIdx.z), -1, cs.bad_page,
                     p.num_pages);
  }
}

// Where issue_tile notes a page id outside the pool. kernel.cuh: straight into the CTA's shared
// word, reset (setup_cta) before its first copies. The small kernel issues its first copies
// before the barrier that orders that reset, so each thread keeps the id in a register and
// publishes it after its main loop, ahead of the barrier before report_bad_page.
struct BadPageInShared {
  CtaShared& cs;
  __device__ __forceinline__ void note(int page) const {
    cs.bad_page = page;
    cs.bad_claimed = 1u;
  }
};
struct BadPageInRegister {
  int page = kNoKey;
  __device__ __forceinline__ void note(int id) { page = id; }
  __device__ __forceinline__ void publish(CtaShared& cs) const {
    if (page != kNoKey) BadPageInShared{cs}.note(page);
  }
};

// After a kernel's main loop over cp.async rings: every copy landed, the bad page id a thread
// noted published, the CTA past its ring (which may then be reused), and the id reported.
__device__ __forceinline__ void drain_and_report(const Params& p, CtaShared& cs,
                                                 const BadPageInRegister& bad) {
  ptx::cp_async_wait<0>();
  bad.publish(cs);
  __syncthreads();
  report_bad_page(p, cs);
}

// 64-bit shuffle of a pointer from lane `from`.
__device__ __forceinline__ const char* shfl_ptr(const char* ptr, int from) {
  const uint64_t v = reinterpret_cast<uint64_t>(ptr);
  const uint32_t lo = __shfl_sync(0xffffffffu, static_cast<uint32_t>(v), from);
  const uint32_t hi = __shfl_sync(0xffffffffu, static_cast<uint32_t>(v >> 32), from);
  return reinterpret_cast<const char*>(uint64_t(hi) << 32 | lo);
}

// Issues this warp's 16 K rows and 16 V rows of one tile: consecutive lanes copy consecutive
// 16-byte pieces of a row, so each instruction reads whole rows (coalesced); a row's kChunks
// pieces divide 32, so lane l always copies piece l % kChunks, of row j * 32 / kChunks +
// l / kChunks in copy j. Missing keys and bad page ids: a ballot bit (zero-fill, the source then
// the cache base).
//
// Two address paths. When the warp's keys are consecutive slots of one page (pages of 16 and
// more, keys not cut by a page boundary: nearly every tile), every row address is the first
// key's plus a multiple of the slot stride, so each lane walks its rows by one add a copy. Else
// lane l < 16 turns its key's (page, slot) into the 64-bit K and V row addresses and each copy
// shuffles the two addresses of its row: 4 shuffles and the swizzle of a row a copy, about half
// of a tile's instructions at batch 1 (run set l's profile), hence the first path.
//
// A page id outside the pool goes to `bad` (BadPageInShared, BadPageInRegister).
template <class T, class BadPage>
__device__ __forceinline__ void issue_tile(const Params& p, BadPage& bad, char* stage,
                                           const PageRef& ref, const char* k_head,
                                           const char* v_head, int warp, int lane) {
  constexpr int kChunks = T::kChunksPerRow;
  static_assert(32 % kChunks == 0, "a row's pieces divide a warp");
  constexpr int kRowsPerCopy = 32 / kChunks;
  // One compare (kNoKey fails it too): a page id outside the pool is never read, its key is
  // zero-filled, and the CTA notes it (any one of them; report_bad_page).
  const bool own = static_cast<uint32_t>(ref.page) < static_cast<uint32_t>(p.num_pages);
  if (!own && ref.page != kNoKey) bad.note(ref.page);
  const uint32_t present = __ballot_sync(0xffffffffu, own);
  const int chunk = lane % kChunks;
  const int first = lane / kChunks;
  const auto k_tile = static_cast<uint32_t>(__cvta_generic_to_shared(stage));
  const uint32_t v_tile = k_tile + T::kTileBytes;

  // Keys are a prefix of the warp's 16 (a tile ends, it has no holes): the first path needs
  // lane 0's key present and every present key at lane 0's slot + lane in its page.
  const int page0 = __shfl_sync(0xffffffffu, ref.page, 0);
  const int slot0 = __shfl_sync(0xffffffffu, ref.slot, 0);
  const bool in_line = !own || (ref.page == page0 && ref.slot == slot0 + lane);
  if ((present & 1u) != 0u && __all_sync(0xffffffffu, in_line)) {
    const int64_t k_step = kRowsPerCopy * p.k_slot_stride, v_step = kRowsPerCopy * p.v_slot_stride;
    const char* k_src =
        k_head + page0 * p.k_page_stride + (slot0 + first) * p.k_slot_stride + chunk * 16;
    const char* v_src =
        v_head + page0 * p.v_page_stride + (slot0 + first) * p.v_slot_stride + chunk * 16;
#pragma unroll
    for (int j = 0; j < T::kIssueIters; ++j) {
      const int token = j * kRowsPerCopy + first;
      const int row = warp * kLoadTokensPerWarp + token;
      const bool ok = (present >> token) & 1u;
      ptx::cp_async_16(k_tile + T::swizzled(row, chunk * 16, T::kRowBytes, T::k_mask(row)),
                       ok ? k_src : p.k_cache, ok ? 16 : 0);
      ptx::cp_async_16(v_tile + T::swizzled(row, chunk * 16, T::kRowBytes, T::v_mask(row)),
                       ok ? v_src : p.v_cache, ok ? 16 : 0);
      k_src += k_step;
      v_src += v_step;
    }
    return;
  }

  const int64_t page = own ? ref.page : 0;
  const char* k_row =
      own ? k_head + page * p.k_page_stride + ref.slot * p.k_slot_stride : p.k_cache;
  const char* v_row =
      own ? v_head + page * p.v_page_stride + ref.slot * p.v_slot_stride : p.v_cache;
#pragma unroll(T::kIssueUnroll)
  for (int j = 0; j < T::kIssueIters; ++j) {
    const int token = j * kRowsPerCopy + first;
    const int row = warp * kLoadTokensPerWarp + token;
    const bool ok = (present >> token) & 1u;
    const char* k_src = shfl_ptr(k_row, token) + chunk * 16;
    const char* v_src = shfl_ptr(v_row, token) + chunk * 16;
    ptx::cp_async_16(k_tile + T::swizzled(row, chunk * 16, T::kRowBytes, T::k_mask(row)), k_src,
                     ok ? 16 : 0);
    ptx::cp_async_16(v_tile + T::swizzled(row, chunk * 16, T::kRowBytes, T::v_mask(row)), v_src,
                     ok ? 16 : 0);
  }
}

// q rows of this CTA into smem (zeros for padding rows), as they are: q's dtype is the MMA type,
// except for bf16 q over an 8-bit cache (to_half_q below). Row rr of the CTA = request row
// row_begin + rr = (beam, token, head in group). With kTrackMax each warp also leaves the largest
// |q| (as a bf16 bit pattern) in cs.q_absmax[warp]. A thread holds T::kQLoadBatch pieces (QPieces)
// between their loads and their stores: the small-grid kernel loads all of its pieces in one
// batch, issued with kv_len's load and stored after its first copies (small_kernel.cuh);
// kernel.cuh keeps one at a time (more in flight spilled its three-CTA kernels, whose q phase is
// off the critical path at large batch).
template <class T>
struct QPieces {
  static constexpr int kChunks = T::kQRowBytes / 16;
  static constexpr int kBatch = T::kQLoadBatch;
  uint4 v[kBatch];

  // Pieces base, base + kThreads, .. of the CTA's rows_per_cta x kChunks (zeros past the valid
  // rows).
  __device__ __forceinline__ void load(const Params& p, int base, int request, int kv_head,
                                       int row_begin, int rows_valid) {
    const int items = p.rows_per_cta * kChunks;
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int idx = base + j * kThreads;
      const int rr = idx / kChunks;
      v[j] = make_uint4(0, 0, 0, 0);
      if (idx < items && rr < rows_valid) {
        const RowCoord c = row_coord(p, row_begin + rr);
        const int w = c.beam, i = c.token, h = kv_head * p.group + c.head;
        const int64_t offset =
            (request * p.beam_width + w) * p.q_stride[0] + i * p.q_stride[1] + h * p.q_stride[2];
        v[j] = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.q) + offset) +
                     idx % kChunks);
      }
    }
  }
  // The same pieces into q_smem; with kTrackMax their largest |q| into absmax.
  template <bool kTrackMax>
  __device__ __forceinline__ void store(const Params& p, int base, char* q_smem,
                                        uint32_t& absmax) const {
    const int items = p.rows_per_cta * kChunks;
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int idx = base + j * kThreads;
      const int rr = idx / kChunks, chunk = idx % kChunks;
      if (idx >= items) break;
      if constexpr (kTrackMax) {
        // |x| of a bf16 orders like its bit pattern without the sign (NaN above infinity).
        const uint32_t words[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          absmax = max(absmax, max(words[k] & 0x7fffu, (words[k] >> 16) & 0x7fffu));
        }
      }
      *reinterpret_cast<uint4*>(q_smem +
                                T::swizzled(rr, chunk * 16, T::kQRowBytes, T::q_mask(rr))) = v[j];
    }
  }
};

// Each warp's largest |q| (kTrackMax) into cs.q_absmax[warp]; every lane of the warp calls it.
template <bool kTrackMax>
__device__ __forceinline__ void publish_q_absmax(CtaShared& cs, uint32_t absmax) {
  if constexpr (kTrackMax) {
    absmax = __reduce_max_sync(0xffffffffu, absmax);
    if (threadIdx.x % 32 == 0) cs.q_absmax[threadIdx.x / 32] = absmax;
  }
}

template <class T, bool kTrackMax>
__device__ __forceinline__ void load_q(const Params& p, CtaShared& cs, char* q_smem, int request,
                                       int kv_head, int row_begin, int rows_valid) {
  const int items = p.rows_per_cta * QPieces<T>::kChunks;
  uint32_t absmax = 0;
  for (int base = threadIdx.x; base < items; base += QPieces<T>::kBatch * kThreads) {
    QPieces<T> pieces;
    pieces.load(p, base, request, kv_head, row_begin, rows_valid);
    pieces.template store<kTrackMax>(p, base, q_smem, absmax);
  }
  publish_q_absmax<kTrackMax>(cs, absmax);
}

// bf16 q over an 8-bit cache: the MMAs run in fp16 instead, because every 8-bit value is an fp16
// (one cvt per pair) but turning that fp16 into a bf16 costs two more conversions per pair, which
// made the fp8 kernel ALU-bound. q is scaled by 2^-shift so that its largest |value| lands in
// [2^13, 2^14): every bf16 value within 2^27 of the largest is then exact in fp16 (fp16 keeps 11
// significant bits, bf16 8), and the logit multiplier takes 2^shift back, exactly. Each thread
// converts the chunks it stored in load_q (no race); cs.q_absmax must be visible (a barrier
// after load_q). Returns 2^shift.
template <class T>
__device__ __forceinline__ float to_half_q(const Params& p, const CtaShared& cs, char* q_smem) {
  uint32_t absmax = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) absmax = max(absmax, cs.q_absmax[w]);
  // Biased exponent E of the largest |q|: |q| < 2^(E - 126). Shift to exponent 13 (E = 140);
  // clamped so that 2^shift stays a normal float (only inf/NaN or all-zero q reach the clamps).
  const int biased = static_cast<int>(absmax >> 7);
  const int shift = min(max(biased - 140, -100), 115);
  const float down = __int_as_float((127 - shift) << 23);  // 2^-shift, exactly
  constexpr int kChunks = T::kQRowBytes / 16;
  for (int idx = threadIdx.x; idx < p.rows_per_cta * kChunks; idx += kThreads) {
    const int rr = idx / kChunks;
    const int chunk = idx % kChunks;
    uint4* at = reinterpret_cast<uint4*>(q_smem +
                                         T::swizzled(rr, chunk * 16, T::kQRowBytes, T::q_mask(rr)));
    uint4 v = *at;
    uint32_t* words = reinterpret_cast<uint32_t*>(&v);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[j]));
      words[j] = ptx::pack_f16x2(f.x * down, f.y * down);
    }
    *at = v;
  }
  return __int_as_float((127 + shift) << 23);
}

// A fragments of q for the 4 k16 steps of 64-feature chunk c. Features are permuted within the
// chunk: in step s, k indices 2qd+e and 2qd+8+e (e = 0, 1) of lane quad qd are features
// 16qd+4s+e and 16qd+4s+2+e. Each lane's B fragments of K are then 16 contiguous features of one
// key row (one or two 16-byte loads); QK^T sums over features, so permuting both operands the
// same way leaves it unchanged.
template <class T>
__device__ __forceinline__ void load_q_chunk(const char* q_smem, int m_tile, int c, int lane,
                                             uint32_t (&qa)[4][4]) {
  const int g = lane / 4, qd = lane % 4;
  const int r0 = m_tile * kMmaRows + g, r1 = r0 + 8;
  const int byte = 128 * c + 32 * qd;
  const uint4 a_lo =
      *reinterpret_cast<const uint4*>(q_smem + T::swizzled(r0, byte, T::kQRowBytes, T::q_mask(r0)));
  const uint4 a_hi = *reinterpret_cast<const uint4*>(
      q_smem + T::swizzled(r0, byte + 16, T::kQRowBytes, T::q_mask(r0)));
  const uint4 b_lo =
      *reinterpret_cast<const uint4*>(q_smem + T::swizzled(r1, byte, T::kQRowBytes, T::q_mask(r1)));
  const uint4 b_hi = *reinterpret_cast<const uint4*>(
      q_smem + T::swizzled(r1, byte + 16, T::kQRowBytes, T::q_mask(r1)));
  const uint32_t ra[8] = {a_lo.x, a_lo.y, a_lo.z, a_lo.w, a_hi.x, a_hi.y, a_hi.z, a_hi.w};
  const uint32_t rb[8] = {b_lo.x, b_lo.y, b_lo.z, b_lo.w, b_hi.x, b_hi.y, b_hi.z, b_hi.w};
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    qa[s][0] = ra[2 * s];
    qa[s][1] = rb[2 * s];
    qa[s][2] = ra[2 * s + 1];
    qa[s][3] = rb[2 * s + 1];
  }
}

// A fragments of q for every k16 step of row tile m_tile (D <= 128: 32 registers).
template <class T>
__device__ __forceinline__ void load_q_regs(const char* q_smem, int m_tile, int lane,
                                            uint32_t (&q_regs)[T::kHeadDimValue / 16][4]) {
#pragma unroll
  for (int c = 0; c < T::kHeadDimValue / 64; ++c) {
    uint32_t qa[4][4];
    load_q_chunk<T>(q_smem, m_tile, c, lane, qa);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int r = 0; r < 4; ++r) q_regs[4 * c + i][r] = qa[i][r];
    }
  }
}

// Four 8-bit values -> two fp16 pairs {(x0, x1), (x2, x3)}, the MMA operands of an 8-bit cache.
// e4m3: cvt per pair; with kIntHi the second pair by integer operations at 2^-8 scale
// (kv_bits.hpp; the caller undoes the scale). V takes kIntHi: its second pairs (features 8g + odd
// j of a 64-feature chunk: the odd n-tiles of o, a quarter of a block's pairs) then use the
// integer pipe instead of the conversion pipe (README "8-bit KV"); K converts both pairs. e5m2:
// each code is the high byte of its fp16, so a byte permute per pair and no conversion. int8:
// byte permutes and an fp16 subtraction.
template <KvFormat kFormat, bool kIntHi = false>
__device__ __forceinline__ uint2 dequant4(uint32_t four) {
  if constexpr (kFormat == KvFormat::kE4M3) {
    const uint32_t lo = ptx::cvt_f16x2_e4m3x2_half<false>(four);
    if constexpr (kIntHi) {
      // Bytes 2, 3 to bytes 1, 3 (bytes 0, 2 are ignored).
      return make_uint2(lo, e4m3x2_hi_bytes_to_f16x2_scaled(ptx::prmt(four, 0u, 0x3322u)));
    } else {
      return make_uint2(lo, ptx::cvt_f16x2_e4m3x2_half<true>(four));
    }
  } else if constexpr (kFormat == KvFormat::kE5M2) {
    // {0, x0, 0, x1} and {0, x2, 0, x3}: byte 4 of the selector is the zero operand's.
    return make_uint2(ptx::prmt(four, 0u, 0x1404u), ptx::prmt(four, 0u, 0x3424u));
  } else {
    static_assert(kFormat == KvFormat::kInt8, "8-bit formats only");
    return ptx::int8x4_to_f16x2x2(four);
  }
}

// Factor of o's n-tile n that the V unpacking left out: 2^8 on the n-tiles of e4m3's integer
// pairs (odd n), 1 elsewhere; applied once, when the accumulator leaves the registers.
template <KvFormat kFormat>
__device__ __forceinline__ constexpr float o_unscale(int n) {
  return kFormat == KvFormat::kE4M3 && (n % 2) == 1 ? kE4m3BitsUnscale : 1.f;
}

// ------------------------------------------------------------------------------ block math

template <int kFeatures>
struct WarpState {
  float o[kFeatures / 8][4];  // 16 rows x this warp's features (fp32), n-tiles of 8 features
  float m[2];                 // running max of rows g, g+8 (log2 domain; -inf: nothing seen)
  float l[2];                 // this lane's part of the row sums

  __device__ __forceinline__ void reset() {
#pragma unroll
    for (int n = 0; n < kFeatures / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[n][e] = 0.f;
    }
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.f;
  }

  // Rows g and g + 8's (max, sum) into m_out[g], l_out[g] (and g + 8) for a cross-warp merge:
  // the sums over the lane quad first; lane qd = 0 of each quad stores when `store`.
  __device__ __forceinline__ void store_rows(float* m_out, float* l_out, int g, bool store) const {
    float sum[2] = {l[0], l[1]};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 1);
      sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 2);
    }
    if (store) {
      m_out[g] = m[0];
      m_out[g + 8] = m[1];
      l_out[g] = sum[0];
      l_out[g + 8] = sum[1];
    }
  }
};

// Scores of a block in the log2 domain: s2 = log2(e) * softcap(scale * k_scale * q.k). One
// warp-uniform branch per block picks the softcap loop, so the common path is 8 multiplies.
struct LogitTransform {
  float mul;   // no softcap: scale * k_scale * log2(e); softcap: scale * k_scale / c
  float post;  // softcap: c * log2(e)
  bool softcap;
  __device__ __forceinline__ void operator()(float (&s)[2][4]) const {
    apply(s[0]);
    apply(s[1]);
  }
  // Four scores (one n-tile, or the narrow kernel's S^T fragment).
  __device__ __forceinline__ void apply(float (&s)[4]) const {
    if (softcap) {
      // tanh(u) = 1 - 2 / (1 + e^2u): absolute error ~1e-7 (tanh.approx's 2^-11 relative error
      // would move the logits by ~1e-2 at c = 30). rcp.approx (1 ulp): e = inf gives 1, e = 0
      // gives -1, as the IEEE reciprocal did, without its denormal slow path.
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float x = ptx::exp2_approx(2.f * kLog2e * (s[e] * mul));
        s[e] = post * (1.f - 2.f * ptx::rcp_approx(1.f + x));
      }
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[e] *= mul;
    }
  }
};

// The dequantization scales of KV head `kv_head`'s K and V: per head where given, else per tensor.
struct HeadScales {
  float k, v;
};
__device__ __forceinline__ HeadScales head_scales(const Params& p, int kv_head) {
  return {
      p.k_scale_per_head != nullptr ? p.k_scale_per_head[kv_head * p.k_scale_stride] : p.k_scale,
      p.v_scale_per_head != nullptr ? p.v_scale_per_head[kv_head * p.v_scale_stride] : p.v_scale};
}

// The logit transform of a CTA: q_unscale undoes to_half_q's power of two (1 otherwise).
__device__ __forceinline__ LogitTransform make_logit(const Params& p, float k_scale,
                                                     float q_unscale) {
  LogitTransform logit;
  logit.softcap = p.softcap > 0.f;
  logit.mul =
      (logit.softcap ? p.softmax_scale * k_scale / p.softcap : p.softmax_scale * k_scale * kLog2e) *
      q_unscale;
  logit.post = p.softcap * kLog2e;
  return logit;
}

// -inf for the (row, key) pairs of a boundary block that a row does not see (keys past the tile
// end included). Element e of n-tile nt: row g (e < 2) or g + 8, key key0 + 8nt + 2qd + (e & 1).
// Both row masks are read once; the test is branch-free (key_visible), so a masked block costs
// ~60 instructions and no divergence.
__device__ __forceinline__ void mask_block(float (&s)[2][4], const RowMask* rows, int m_tile,
                                           int lane, int key0, int tile_end, int beam) {
  const int g = lane / 4, qd = lane % 4;
  const RowMask r[2] = {rows[m_tile * kMmaRows + g], rows[m_tile * kMmaRows + g + 8]};
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = key0 + 8 * nt + 2 * qd + (e & 1);
      const bool ok = (key < tile_end) & key_visible(r[e >> 1], key, beam);
      s[nt][e] = ok ? s[nt][e] : -INFINITY;
    }
  }
}

// One warp, one 16-key block (keys tb .. tb+15 of the stage): S = Q K^T (16 x 16), mask, online
// softmax update, O += P V for the warp's features (half `half` of them at D = 256).
template <class T, class Elt, KvFormat kFormat>
__device__ __forceinline__ void attend_block(WarpState<T::kWarpFeatures>& st, const char* k_tile,
                                             const char* v_tile, const char* q_smem,
                                             const uint32_t (*q_regs)[4], int m_tile, int half,
                                             int tb, int lane, int key0, bool masked, int tile_end,
                                             int beam, const RowMask* rows,
                                             const LogitTransform& logit) {
  constexpr int kHeadDim = T::kHeadDimValue;
  constexpr int kFeatures = T::kWarpFeatures;
  static_assert(kFormat == KvFormat::kNative16 || std::is_same_v<Elt, __half>,
                "8-bit caches run fp16 MMAs (dequant4 makes fp16 pairs)");
  const int g = lane / 4, qd = lane % 4;
  float s[2][4] = {};
  // D = 256 (q from smem) keeps one chunk's fragments live at a time: the o accumulator already
  // takes 128 registers.
#pragma unroll(T::kQInRegisters ? kHeadDim / 64 : 1)
  for (int c = 0; c < kHeadDim / 64; ++c) {
    uint32_t qa[4][4];
    if constexpr (T::kQInRegisters) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int r = 0; r < 4; ++r) qa[i][r] = q_regs[4 * c + i][r];
      }
    } else {
      load_q_chunk<T>(q_smem, m_tile, c, lane, qa);
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const int row = tb + 8 * nt + g;
      uint32_t b[8];
      if constexpr (kFormat == KvFormat::kNative16) {
        const int byte = 128 * c + 32 * qd;
        const uint4 lo = *reinterpret_cast<const uint4*>(
            k_tile + T::swizzled(row, byte, T::kRowBytes, T::k_mask(row)));
        const uint4 hi = *reinterpret_cast<const uint4*>(
            k_tile + T::swizzled(row, byte + 16, T::kRowBytes, T::k_mask(row)));
        b[0] = lo.x, b[1] = lo.y, b[2] = lo.z, b[3] = lo.w;
        b[4] = hi.x, b[5] = hi.y, b[6] = hi.z, b[7] = hi.w;
      } else {
        const uint4 w = *reinterpret_cast<const uint4*>(
            k_tile + T::swizzled(row, 64 * c + 16 * qd, T::kRowBytes, T::k_mask(row)));
        const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const uint2 pr = dequant4<kFormat>(words[i]);
          b[2 * i] = pr.x;
          b[2 * i + 1] = pr.y;
        }
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) ptx::mma_m16n8k16<Elt>(s[nt], qa[i], b[2 * i], b[2 * i + 1]);
    }
  }

  logit(s);
  if (masked) mask_block(s, rows, m_tile, lane, key0, tile_end, beam);

  // Online softmax. A row spans one lane quad: reduce over qd with two xor-shuffles.
  float mx[2] = {fmaxf(fmaxf(s[0][0], s[0][1]), fmaxf(s[1][0], s[1][1])),
                 fmaxf(fmaxf(s[0][2], s[0][3]), fmaxf(s[1][2], s[1][3]))};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    mx[r] = fmaxf(mx[r], st.m[r]);
  }
  // Rescale only when some row's max grew (rare once the first blocks have been seen).
  const bool grew = mx[0] > st.m[0] || mx[1] > st.m[1];
  if (__any_sync(0xffffffffu, grew)) {
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // Old max -inf: nothing accumulated yet (o = l = 0), alpha = 0 avoids -inf - -inf.
      alpha[r] = st.m[r] == -INFINITY ? 0.f : ptx::exp2_approx(st.m[r] - mx[r]);
      st.l[r] *= alpha[r];
    }
#pragma unroll
    for (int n = 0; n < kFeatures / 8; ++n) {
      st.o[n][0] *= alpha[0];
      st.o[n][1] *= alpha[0];
      st.o[n][2] *= alpha[1];
      st.o[n][3] *= alpha[1];
    }
  }
  st.m[0] = mx[0];
  st.m[1] = mx[1];
  // A fully masked row so far keeps max -inf: subtract 0 instead, exp2(-inf) = 0.
  const float base[2] = {mx[0] == -INFINITY ? 0.f : mx[0], mx[1] == -INFINITY ? 0.f : mx[1]};
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[nt][e] = ptx::exp2_approx(s[nt][e] - base[e >> 1]);
      st.l[e >> 1] += s[nt][e];
    }
  }
  // P as the A fragment of the PV MMA (k = the 16 keys): same layout as the S accumulator.
  const uint32_t pa[4] = {ptx::pack2<Elt>(s[0][0], s[0][1]), ptx::pack2<Elt>(s[0][2], s[0][3]),
                          ptx::pack2<Elt>(s[1][0], s[1][1]), ptx::pack2<Elt>(s[1][2], s[1][3])};

  if constexpr (kFormat == KvFormat::kNative16) {
    // ldmatrix.trans of V [key][feature]: matrices (keys 0-7 | 8-15) x (features +0 | +8).
    const int mi = lane >> 3;
    const int row = tb + (lane & 7) + 8 * (mi & 1);
    const uint32_t mask = T::v_mask(row);
#pragma unroll
    for (int i = 0; i < kFeatures / 16; ++i) {
      const int pp = half * (kFeatures / 16) + i;  // 16-feature group of V
      uint32_t b[4];
      ptx::ldmatrix_x4_trans(
          b, v_tile + T::swizzled(row, 32 * pp + 16 * (mi >> 1), T::kRowBytes, mask));
      ptx::mma_m16n8k16<Elt>(st.o[2 * i], pa, b[0], b[1]);
      ptx::mma_m16n8k16<Elt>(st.o[2 * i + 1], pa, b[2], b[3]);
    }
  } else {
    // 8-bit V: lane (g, qd) reads 8 features (64c + 8g ..) of keys 2qd, 2qd+1, 2qd+8, 2qd+9 and
    // uses feature 64c + 8g + j as column g of n-tile 8c + j: the output features are permuted
    // (undone in the epilogue), the key order is the MMA's.
    const int r0 = tb + 2 * qd;
    const int vrows[4] = {r0, r0 + 1, r0 + 8, r0 + 9};
#pragma unroll
    for (int cl = 0; cl < kFeatures / 64; ++cl) {
      const int c = half * (kFeatures / 64) + cl;  // 64-feature chunk of V
      uint2 w[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        w[i] = *reinterpret_cast<const uint2*>(
            v_tile + T::swizzled(vrows[i], 64 * c + 8 * g, T::kRowBytes, T::v_mask(vrows[i])));
      }
#pragma unroll
      for (int j = 0; j < 8; j += 2) {
        // Bytes j, j+1 of keys (2qd, 2qd+1) and of keys (2qd+8, 2qd+9).
        const int jj = j & 3;
        const uint32_t sel = jj | (4 + jj) << 4 | (jj + 1) << 8 | (5 + jj) << 12;
        const uint32_t k01 = ptx::prmt(j < 4 ? w[0].x : w[0].y, j < 4 ? w[1].x : w[1].y, sel);
        const uint32_t k89 = ptx::prmt(j < 4 ? w[2].x : w[2].y, j < 4 ? w[3].x : w[3].y, sel);
        // b0 / b1 of n-tiles j, j+1 (j + 1 odd: at 2^-8 scale on e4m3's integer path).
        const uint2 b0 = dequant4<kFormat, /*kIntHi=*/true>(k01);
        const uint2 b1 = dequant4<kFormat, /*kIntHi=*/true>(k89);
        ptx::mma_m16n8k16<Elt>(st.o[8 * cl + j], pa, b0.x, b1.x);
        ptx::mma_m16n8k16<Elt>(st.o[8 * cl + j + 1], pa, b0.y, b1.y);
      }
    }
  }
}

// Feature of accumulator element (n-tile n, column 2qd + e) of a warp whose features start at
// `first`.
template <KvFormat kFormat>
__device__ __forceinline__ int out_feature(int first, int n, int qd, int e) {
  if constexpr (kFormat == KvFormat::kNative16) {
    return first + 8 * n + 2 * qd + e;
  } else {
    return first + 64 * (n / 8) + 8 * (2 * qd + e) + n % 8;
  }
}

}  // namespace hopattn::kernels::decode
