// The bwd family's workspace and block geometry, in plain C++ (no CUDA headers): the host sizes
// the workspace from shapes alone (attention_bwd_workspace_size, also in builds without CUDA), the
// kernels index it with the same functions, and the tests decode it and check the geometry on the
// CPU.
//
// Workspace (caller-owned device memory, sections 256-byte aligned). Query rows are laid out per q
// head in R "padded rows": a sequence starts on a multiple of kBlockM, so every (q tile, head) owns
// kBlockM rows that no other tile touches (varlen: start(b) = floor((cu_q[b] + b kBlockM) /
// kBlockM) kBlockM, which leaves room for sequence b's tiles before start(b + 1); dense: b times
// the padded length).
//   lse_log2  fp32 [Hq][R]      lse * log2(e); +inf for rows past the end and rows with lse = -inf
//                               (no visible key), so that P = 2^(s - lse_log2) is 0 there
//   delta     fp32 [Hq][R]      D = rowsum(dO * O); 0 for rows past the end
//   dsink     fp32 [Hq][R / kBlockM]  per-tile partial sums of the sink gradient
//   dq_accum  fp32 [Hq][R][Dqk] unscaled dQ, summed over KV blocks (bulk reduce-add); each tile's
//                               kBlockM x Dqk floats are in "fragment order" (dq_accum_index)
//   semaphore int32 [Hq][R / kBlockM]  deterministic mode: KV blocks done per dQ tile
// dq_accum and the semaphores are adjacent: one memset clears both at the start of a call.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "hopattn/options.hpp"
#include "kernels/common/host_device.hpp"

namespace hopattn::kernels::bwd {

// Keys per CTA at head dims up to 128 (two MMA warpgroups of 64 keys each); above, a CTA owns 64
// keys (traits.cuh: BwdTraits::kBlockN).
inline constexpr int kBlockN = 128;

// Above head dim 128 the two MMA warpgroups share the CTA's keys and split the columns instead
// (traits.cuh: BwdTraits::kSharedKeys). The one tile rule of the kernel and the host's grid check.
HOPATTN_HOST_DEVICE constexpr bool shares_keys(int head_dim) { return head_dim > 128; }
HOPATTN_HOST_DEVICE constexpr int block_n_for(int head_dim) {
  return shares_keys(head_dim) ? 64 : kBlockN;
}

// Query rows per step of the main loop (the register budget of dK, dV and the two 64 x kBlockM
// score tiles of an MMA thread).
inline constexpr int kBlockM = 64;

// ------------------------------------------------------------------------------ dQ fragments
// A dQ tile (kBlockM x Dqk floats) is stored panel by panel (64 columns, kDqPanelFloats each), a
// panel being what one MMA warpgroup's m64n64 dQ accumulator holds (which warpgroup computes
// which panel: BwdTraits::dq_panel). Inside a panel, thread t (0..127) of the warpgroup stores
// accumulator registers 4c..4c+3 as the 16-byte chunk c * 128 + t. Those registers are rows r and
// r + 8, columns k and k + 1 of the panel, with r = 16 (t / 32) + (t % 32) / 4 and
// k = 8c + 2 (t % 4) (the wgmma accumulator layout). Returns the float index of (row, col) in the
// tile.
inline constexpr int kDqPanelCols = 64;
inline constexpr int kDqPanelFloats = kBlockM * kDqPanelCols;

HOPATTN_HOST_DEVICE constexpr int dq_accum_index(int row, int col) {
  const int panel = col / kDqPanelCols;
  const int k = col % kDqPanelCols;
  const int t = 32 * (row / 16) + 4 * (row % 8) + (k % 8) / 2;
  const int c = k / 8;
  const int in_chunk = 2 * ((row / 8) % 2) + (k % 2);
  return panel * kDqPanelFloats + (c * 128 + t) * 4 + in_chunk;
}

// ------------------------------------------------------------------------------ block geometry
// One rule everywhere (DESIGN.md): query i of q_len sees key j iff j < kv_len and, with
// diag = i + kv_len - q_len, diag - window_left <= j <= diag + window_right (-1 = unbounded;
// causal = right 0). A q tile m (rows [m M, min((m + 1) M, q_len))) sees keys
// [col_begin(m), col_end(m)), the union of its rows' visible keys (contiguous: the rows' intervals
// slide by one per row). KV block n and q tile m meet iff that interval intersects
// [n N, (n + 1) N). Every function here derives from that one interval.
struct BlockGeometry {
  int seqlen_q, seqlen_k;
  int window_left, window_right;  // right = 0 for causal
  int block_m, block_n;

  HOPATTN_HOST_DEVICE int64_t diag() const { return int64_t{seqlen_k} - seqlen_q; }
  HOPATTN_HOST_DEVICE int num_m_blocks() const { return (seqlen_q + block_m - 1) / block_m; }
  HOPATTN_HOST_DEVICE int num_n_blocks() const { return (seqlen_k + block_n - 1) / block_n; }

  HOPATTN_HOST_DEVICE int64_t col_begin(int m) const {
    if (window_left < 0) return 0;
    const int64_t c = int64_t{m} * block_m + diag() - window_left;
    return c > 0 ? c : 0;
  }
  HOPATTN_HOST_DEVICE int64_t col_end(int m) const {
    if (window_right < 0) return seqlen_k;
    const int64_t last_row = std::min<int64_t>(int64_t{m + 1} * block_m, seqlen_q) - 1;
    return std::min<int64_t>(seqlen_k, last_row + diag() + window_right + 1);
  }

  // The KV blocks that meet q tile m are first_n_block(m) .. last_n_block(m) (none when
  // last < first; m_range says the same from the blocks' side).
  HOPATTN_HOST_DEVICE int first_n_block(int m) const {
    return static_cast<int>(col_begin(m) / block_n);
  }
  HOPATTN_HOST_DEVICE int last_n_block(int m) const {
    const int64_t e = col_end(m);
    return e <= 0 ? -1 : static_cast<int>((e - 1) / block_n);
  }

  // Deterministic mode: the KV blocks add their dQ sums to tile m in descending block order, and
  // this is how many add before block n (the tile semaphore's value block n waits for). Every
  // block walks its q tiles upwards from m_range(n).begin, which does not decrease with n, so a
  // higher block reaches each tile (of the group's first q head; the later heads follow a walk of
  // the same or, causal, fewer tiles) no later than a lower one: CTAs that start together never
  // wait. Ascending order made every block wait for all lower ones, which reach the tile last.
  HOPATTN_HOST_DEVICE int dq_turn(int m, int n) const { return last_n_block(m) - n; }

  // The q tiles [m_begin, m_end) that KV block n (n N < seqlen_k) meets; empty when
  // m_begin >= m_end.
  struct MRange {
    int begin, end;
  };
  HOPATTN_HOST_DEVICE MRange m_range(int n) const {
    const int num_m = num_m_blocks();
    MRange r{0, num_m};
    if (window_right >= 0) {
      // col_end(m) > n N  <=>  min((m + 1) M, q_len) > x
      const int64_t x = int64_t{n} * block_n - diag() - window_right;
      if (seqlen_q <= x) return MRange{0, 0};
      r.begin = x < 0 ? 0 : static_cast<int>(std::min<int64_t>(x / block_m, num_m - 1));
    }
    if (window_left >= 0) {
      // col_begin(m) < (n + 1) N  <=>  m M < y
      const int64_t y = int64_t{n + 1} * block_n - diag() + window_left;
      if (y <= 0) return MRange{0, 0};
      r.end = static_cast<int>(std::min<int64_t>(num_m, (y + block_m - 1) / block_m));
    }
    return r;
  }

  // False when every query row < q_len of tile m sees every key of block n (the mask can be
  // skipped); rows past q_len need no mask (their lse_log2 is +inf).
  // fwd/mask.cuh block_needs_mask states the same rule in int over a work tile's q positions
  // (plus the KV-split bounds); it stays separate because no shared form kept this kernel's code
  // byte for byte (see there). Change both together.
  HOPATTN_HOST_DEVICE bool needs_mask(int m, int n) const {
    const int64_t n_lo = int64_t{n} * block_n, n_hi = n_lo + block_n;  // exclusive
    if (n_hi > seqlen_k) return true;
    if (window_right >= 0 && n_hi - 1 > int64_t{m} * block_m + diag() + window_right) return true;
    const int64_t m_last = std::min<int64_t>(int64_t{m + 1} * block_m, seqlen_q) - 1;
    if (window_left >= 0 && n_lo < m_last + diag() - window_left) return true;
    return false;
  }
};

// ------------------------------------------------------------------------------ launch order
// Which KV block of which group (a (KV head, request) pair: group = kv_head + Hkv * request) a CTA
// of the 1-D grid works on. CTAs start roughly in blockIdx order, and that order goes section by
// section of `section` groups (the host planner, src/plan/bwd_order.hpp, sizes a section so that
// its groups' Q, dO and dq_accum fit in L2) and, inside a section, block by block, each block of
// every group of the section before the next block. Blocks ascend, so that the longest causal
// blocks (the lowest) start first across several heads, or descend in deterministic mode: there
// a CTA waits for the higher blocks of its group (dq_turn), so those must start before it, else a
// CTA could wait for one that cannot start until a waiting CTA exits.
struct CtaOrder {
  int num_n_blocks;  // KV blocks per group (of the longest request)
  int groups;        // Hkv * requests
  int section;       // groups per section, >= 1
  bool descending;

  struct Coord {
    int n_block, group;
  };
  HOPATTN_HOST_DEVICE Coord at(int linear) const {
    const int per_section = section * num_n_blocks;
    const int first = linear / per_section * section;
    const int width = std::min(section, groups - first);
    const int in = linear % per_section;
    const int step = in / width;
    return Coord{descending ? num_n_blocks - 1 - step : step, first + in % width};
  }
};

// ------------------------------------------------------------------------------ workspace
struct WorkspaceLayout {
  int block_m = 64;
  int64_t heads = 0;     // Hq
  int64_t head_dim = 0;  // Dqk
  int64_t rows = 0;      // R: padded rows per head (a multiple of block_m)
  int64_t tiles() const { return rows / block_m; }
  size_t lse_offset = 0, delta_offset = 0, dsink_offset = 0;
  size_t dq_accum_offset = 0, semaphore_offset = 0;
  size_t clear_offset = 0, clear_bytes = 0;  // dq_accum + semaphores (zeroed every call)
  size_t total = 0;
};

inline size_t align_256(size_t x) { return (x + 255) & ~size_t{255}; }

// From shapes only: q dense [B, Sq, Hq, Dqk] or varlen [total_q, Hq, Dqk] with cu_seqlens_q
// [B + 1]. Never reads tensor data (the validator and the support probes call it too).
inline WorkspaceLayout workspace_layout(const BwdArgs& args) {
  const TensorView& q = args.fwd.q;
  WorkspaceLayout w;
  if (!q.defined() || (q.rank() != 3 && q.rank() != 4)) return w;
  w.heads = q.size(-2);
  w.head_dim = q.size(-1);
  w.block_m = kBlockM;
  const int64_t m = w.block_m;
  if (q.rank() == 4) {
    w.rows = q.size(0) * ((q.size(1) + m - 1) / m) * m;
  } else {
    const int64_t batch = args.fwd.cu_seqlens_q.defined()
                              ? std::max<int64_t>(args.fwd.cu_seqlens_q.size(0) - 1, 0)
                              : 1;
    w.rows = ((q.size(0) + batch * m + m - 1) / m) * m;
  }
  const size_t row_floats = static_cast<size_t>(w.heads * w.rows) * sizeof(float);
  const size_t tile_words = static_cast<size_t>(w.heads * w.tiles()) * sizeof(float);
  size_t at = 0;
  w.lse_offset = at;
  at = align_256(at + row_floats);
  w.delta_offset = at;
  at = align_256(at + row_floats);
  w.dsink_offset = at;
  at = align_256(at + tile_words);
  w.dq_accum_offset = at;
  at = align_256(at + row_floats * static_cast<size_t>(w.head_dim));
  w.semaphore_offset = at;
  at = align_256(at + tile_words);
  w.clear_offset = w.dq_accum_offset;
  w.clear_bytes = at - w.dq_accum_offset;
  w.total = at;
  return w;
}

}  // namespace hopattn::kernels::bwd
