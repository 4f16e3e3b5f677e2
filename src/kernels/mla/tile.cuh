// One CTA's work in the MLA kernel: which request, row tile and key split it owns, the keys
// that split covers, and the visibility bound of each of its rows. Every thread derives the same
// values from blockIdx and three device-resident lengths, so no role waits on another for them.
#pragma once

#include <cstdint>

#include "kernels/common/device_status.cuh"
#include "kernels/mla/traits.cuh"

namespace hopattn::kernels::mla {

struct Tile {
  int batch, row_tile, split;
  int q_begin;        // the request's first q token (index into total_q)
  int q_len, kv_len;  // the request's q tokens and cached keys (new ones included)
  int rows;           // valid rows of the tile, 0..64 (row r is (q token, head) pair 64 t + r)
  int block_begin;    // first KV block (kBlockKeys keys, make_tile's) of the split
  int num_blocks;     // blocks of the split that some row of the tile sees (0: nothing to read)
  int key_end;        // keys >= key_end are not this split's (nor, past kv_len, anyone's)

  // Row r of the tile is (q token i of the request, head): the request's row 64 t + r = i H + head.
  struct RowPosition {
    int token;  // within the request
    int head;
    __device__ int64_t q_row(const Tile& t) const { return t.q_begin + int64_t{token}; }
  };
  __device__ RowPosition position(const MlaParams& p, int r) const {
    const uint32_t g = static_cast<uint32_t>(row_tile * kTileRows + r);
    const uint32_t i = p.head_div.divide(g);
    return {static_cast<int>(i), static_cast<int>(g - i * static_cast<uint32_t>(p.heads))};
  }

  // Keys row r sees are [block_begin * kBlockKeys, limit(r)): causal bottom-right, clipped to
  // the split. Invalid rows (r >= rows) see nothing.
  __device__ int limit(const MlaParams& p, int r) const {
    if (r >= rows) return 0;
    const int i = position(p, r).token;
    const int causal_end = p.causal ? i + 1 + kv_len - q_len : kv_len;
    return min(key_end, causal_end);
  }
};

// Lengths come from the device (cu_seqlens_q, kv_lens). A CTA past its request's rows has
// rows = 0 and does nothing; so has every CTA of a request whose cu_seqlens_q entries leave
// [0, total_q] or decrease (recorded once, by its first CTA). Split s covers KV blocks [s * chunk,
// (s + 1) * chunk) of the request's own length, so that every split of a long request carries the
// same work.
template <int kBlockKeys>
__device__ __forceinline__ Tile make_tile(const MlaParams& p) {
  Tile t;
  t.row_tile = static_cast<int>(blockIdx.x);
  t.split = static_cast<int>(blockIdx.y);
  t.batch = static_cast<int>(blockIdx.z);
  const int q_begin = p.cu_seqlens_q[t.batch * p.cu_seqlens_stride];
  const int q_end = p.cu_seqlens_q[(t.batch + 1) * p.cu_seqlens_stride];
  const bool end_ok = in_closed_range(q_end, p.total_q);
  const bool q_ok = end_ok && in_closed_range(q_begin, q_end);  // 0 <= begin <= end <= total_q
  if (!q_ok && threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0) {
    record_violation(p.status, status_tag(StatusFamily::kMla, StatusIndex::kCuSeqlensQ), t.batch,
                     end_ok ? t.batch : t.batch + 1, end_ok ? q_begin : q_end, p.total_q);
  }
  t.q_begin = q_ok ? q_begin : 0;
  t.q_len = q_ok ? q_end - q_begin : 0;
  t.kv_len = max(p.kv_lens[t.batch * p.kv_lens_stride], 0);
  const int request_rows = t.q_len * p.heads;
  t.rows = max(min(request_rows - t.row_tile * kTileRows, kTileRows), 0);
  const int blocks = (t.kv_len + kBlockKeys - 1) / kBlockKeys;
  const int chunk = (blocks + p.num_splits - 1) / p.num_splits;
  t.block_begin = t.split * chunk;
  const int split_end = min(t.block_begin + chunk, blocks);
  t.key_end = min(split_end * kBlockKeys, t.kv_len);
  t.num_blocks = 0;
  if (t.rows > 0) {
    // Rows are token-major, so the tile's last row sees the most keys.
    const int last = t.limit(p, t.rows - 1);
    const int end = min(split_end, (max(last, 0) + kBlockKeys - 1) / kBlockKeys);
    t.num_blocks = max(end - t.block_begin, 0);
  }
  return t;
}

// Views of the shared-memory plan (addresses from a 1024-aligned base).
template <class Traits>
struct SharedPlan {
  // Block b's row table is b % 2's: block b - 2's copies were issued before block b - 1's
  // table was published (loader.cuh), so no thread still reads it.
  static constexpr int kRowTables = 2;
  uint8_t* base;
  __device__ uint8_t* q() const { return base + Traits::kQOffset; }
  __device__ uint8_t* kv(uint32_t stage) const {
    return base + Traits::kKVOffset + Traits::stage_offset(stage);
  }
  __device__ uint8_t* raw(uint32_t slot) const {
    return base + Traits::kRawOffset + slot * Traits::kRawBytes;
  }
  __device__ uint8_t* p() const { return base + Traits::kPOffset; }
  __device__ float* row_factor() const {
    return reinterpret_cast<float*>(base + Traits::kRowFactorOffset);
  }
  __device__ float* final_scale() const {
    return reinterpret_cast<float*>(base + Traits::kFinalOffset);
  }
  // A stage's row table: (page, slot) of each of its keys, page -1 for a key not to be read.
  __device__ int2* row_table(uint32_t stage) const {
    return reinterpret_cast<int2*>(base + Traits::kRowTableOffset) + stage * Traits::kBlockKeys;
  }
  __device__ uint64_t* full(uint32_t s) const {
    return reinterpret_cast<uint64_t*>(base + Traits::kBarrierOffset) + s;
  }
  __device__ uint64_t* empty(uint32_t s) const {
    return reinterpret_cast<uint64_t*>(base + Traits::kBarrierOffset) + Traits::kStages + s;
  }
  // Consumer 0 -> 1, once a block: P and the rows' rescale factors are written (128 arrivals);
  // consumer 1 -> 0: its O += P V has read them (128 arrivals); consumer 0 -> 1 once a tile: the
  // final row scales are written (128 arrivals).
  __device__ uint64_t* p_full() const {
    return reinterpret_cast<uint64_t*>(base + Traits::kBarrierOffset) + 2 * Traits::kStages;
  }
  __device__ uint64_t* p_empty() const { return p_full() + 1; }
  __device__ uint64_t* final_ready() const { return p_full() + 2; }
};

// Byte offset of 16-byte chunk `chunk` (of 72 in a 576-wide row) of row `row` in a tile of
// `panel_bytes`-sized panels: the 128B swizzle TMA would apply.
__device__ __forceinline__ uint32_t swizzled_offset(uint32_t panel_bytes, uint32_t row,
                                                    uint32_t chunk) {
  return (chunk / 8) * panel_bytes + row * 128 + (((chunk % 8) ^ (row % 8)) << 4);
}

}  // namespace hopattn::kernels::mla
