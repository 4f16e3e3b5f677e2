// Persistent static tile scheduler of the fwd kernel. A work tile is (m_block, head, batch): 128
// query rows of one q head, or with GQA packing 128 (q position, q head) rows of one KV head
// (`head` is then the KV head; traits.cuh, PackParams). The grid has one CTA per SM. Round r of
// the walk hands out tiles r grid .. r grid + grid - 1 of one fixed order: CTA c takes the c-th
// of an even round and the (grid - 1 - c)-th of an odd one (a snake), so the producer and the
// consumers of a CTA walk the same sequence with no communication, and a rerun assigns every
// tile to the same CTA (bitwise reproducible). The snake matters for causal masks with few tiles
// of each length per round (B = 1, 8 heads, 16k): plain striding (c, c + grid, ...) gave CTA 0
// the longest tile of every round, ~15% more work than the last CTA.
//
// The order is longest-processing-time first within L2 sections: (batch, head) pairs are cut into
// sections whose K/V fit in about half the L2; inside a section the highest m_block comes first
// (with causal masking or varlen it has the most KV tiles), then the heads of the section, so the
// q heads of one KV head run side by side and share its K/V in L2. Handing tiles out in
// decreasing cost is the greedy LPT rule, which keeps the last wave short.
//
// Paired (SchedulerParams::paired, where plan/fwd_order.hpp's rule says: dense calls with a
// causal diagonal whose units fill the grid's rounds): each section's heavy-to-light run of tiles
// is a sawtooth over the sections, and a round-robin over it loads some CTAs with mostly heavy
// tiles (1.79x the mean at B = 1, hd256, 16k causal). There the walk goes over units instead: unit
// k of a (batch, head) pair is m-blocks n - 1 - k and k (n even; an odd count gets one empty
// m-block past the end), about equal in cost for every k, and a CTA runs the two tiles of its unit
// back to back. The units take the tiles' places in the order above (sections, then rank k, then
// the pairs of the section) and the snake; tile index 2 u + h is tile h of unit u.
#pragma once

#include <cstdint>

#include "kernels/fwd/mask.cuh"
#include "kernels/fwd/traits.cuh"
#include "kernels/fwd/work_tile.cuh"

namespace hopattn::kernels::fwd {

class LptTileScheduler {
 public:
  // The fwd family's calls carry no KV scales: its kernels leave tile_scales out (kernel.cuh).
  static constexpr bool kKVScales = false;
  // No side lane (the batch family's side-lane scheduler has one: batch/side_lane.cuh).
  static constexpr bool kSideLane = false;
  // Every CTA runs its own tiles (the batch family's placed launches claim theirs:
  // batch/placement.cuh).
  __device__ static void take_list(const FwdParams&) {}
  __device__ static constexpr bool has_list(const FwdParams&) { return true; }

  // `p` must outlive the scheduler (the kernel's __grid_constant__ parameters): its fields are
  // read where needed rather than copied into registers, which the producer thread has few of.
  __device__ explicit LptTileScheduler(const SchedulerParams& p)
      : p_(p), state_(first_state(static_cast<int>(blockIdx.x), p.paired)) {}
  __device__ explicit LptTileScheduler(const FwdParams& p) : LptTileScheduler(p.sched) {}

  __device__ bool valid() const { return (state_ >> 1) < p_.total_tiles; }
  // gridDim.x and blockIdx.x are read afresh each time (volatile reads of %nctaid.x, %ctaid.x):
  // hoisted out of the tile loop they would pin registers for the whole loop. The round's parity
  // rides in the state's low bit (state = 2 linear + odd): a separate flag cost the producer, whose
  // budget is 24 registers, a spill.
  __device__ void advance() {
    uint32_t grid, cta;
    asm volatile("mov.u32 %0, %%nctaid.x;\n" : "=r"(grid));
    asm volatile("mov.u32 %0, %%ctaid.x;\n" : "=r"(cta));
    state_ = next_state(state_, static_cast<int>(cta), static_cast<int>(grid), p_.paired);
  }

  __device__ WorkTile tile() const { return tile_at(p_, state_ >> 1); }
  // The tile's geometry (mask.cuh), from the sequence lengths in FwdParams.
  template <class Traits, bool kReport = false>
  __device__ TileInfo info(const FwdParams& p, const WorkTile& w,
                           DeviceStatus* note = nullptr) const {
    return make_tile_info<Traits, kReport>(p, w, note);
  }

  // CTA `cta`'s first state: tile (paired: unit) `cta` of an even round.
  __host__ __device__ static int first_state(int cta, bool paired) {
    return paired ? 4 * cta : 2 * cta;
  }

  // The state after `state` for CTA `cta` (host-callable for tests): from the c-th tile (paired:
  // unit, after its first tile the second) of an even round to the (grid - 1 - c)-th of the next,
  // and back.
  __host__ __device__ static int next_state(int state, int cta, int grid, bool paired) {
    const bool odd = (state & 1) != 0;
    const int step = odd ? 2 * cta + 1 : 2 * (grid - cta) - 1;
    if (paired) {
      const int linear = state >> 1;
      if ((linear & 1) == 0) return state + 2;  // the unit's second tile, same round
      return 4 * ((linear >> 1) + step) + (odd ? 0 : 1);
    }
    return 2 * ((state >> 1) + step) + (odd ? 0 : 1);
  }

  // Tile number `linear` of the order (host-callable for tests).
  __host__ __device__ static WorkTile tile_at(const SchedulerParams& p, int linear_index) {
    const uint32_t linear = static_cast<uint32_t>(linear_index);
    const uint32_t index = p.paired ? linear >> 1 : linear;  // the unit's, or the tile's
    const uint32_t section = p.per_section.divide(index);
    const uint32_t rem = index - section * p.per_section.divisor;
    const uint32_t first_bh = section * p.section.divisor;
    // The last section may be short: its pairs divide the remainder instead.
    const bool last = first_bh + p.section.divisor >
                      static_cast<uint32_t>(p.num_heads) * static_cast<uint32_t>(p.batch);
    const FastDivisor& pairs = last ? p.last_section : p.section;
    const uint32_t m_rank = pairs.divide(rem);
    const uint32_t bh = first_bh + (rem - m_rank * pairs.divisor);
    const uint32_t batch = p.heads.divide(bh);
    WorkTile w;
    const int heavy = p.num_m_blocks - 1 - static_cast<int>(m_rank);
    w.m_block = p.paired && (linear & 1) != 0 ? static_cast<int>(m_rank) : heavy;
    w.batch = static_cast<int>(batch);
    w.head = static_cast<int>(bh - batch * p.heads.divisor);
    return w;
  }

 private:
  const SchedulerParams& p_;
  int state_;
};

}  // namespace hopattn::kernels::fwd
