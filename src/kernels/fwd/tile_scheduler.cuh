// Persistent static tile scheduler of the fwd kernel. A work tile is (m_block, head, batch): 128
// query rows of one q head. The grid has one CTA per SM; CTA c takes tiles c, c + grid, c + 2 grid
// ... of one fixed order, so the producer and the consumers of a CTA walk the same sequence with
// no communication, and a rerun assigns every tile to the same CTA (bitwise reproducible).
//
// The order is longest-processing-time first within L2 sections: (batch, head) pairs are cut into
// sections whose K/V fit in about half the L2; inside a section the highest m_block comes first
// (with causal masking or varlen it has the most KV tiles), then the heads of the section, so the
// q heads of one KV head run side by side and share its K/V in L2. Handing tiles out in
// decreasing cost is the greedy LPT rule, which keeps the last wave short.
#pragma once

#include "kernels/fwd/traits.cuh"

namespace hopattn::kernels::fwd {

struct WorkTile {
  int m_block;
  int head;
  int batch;
};

class LptTileScheduler {
 public:
  __device__ explicit LptTileScheduler(const SchedulerParams& p)
      : p_(p), linear_(static_cast<int>(blockIdx.x)) {}

  __device__ bool valid() const { return linear_ < p_.total_tiles; }
  __device__ void advance() { linear_ += static_cast<int>(gridDim.x); }

  __device__ WorkTile tile() const {
    const int bh_total = p_.num_heads * p_.batch;
    const int per_section = p_.num_m_blocks * p_.section_bh;
    const int section = linear_ / per_section;
    const int rem = linear_ - section * per_section;
    const int first_bh = section * p_.section_bh;
    const int bh_here = min(p_.section_bh, bh_total - first_bh);  // the last section may be short
    const int m_rank = rem / bh_here;
    const int bh = first_bh + (rem - m_rank * bh_here);
    WorkTile w;
    w.m_block = p_.num_m_blocks - 1 - m_rank;
    w.batch = bh / p_.num_heads;
    w.head = bh - w.batch * p_.num_heads;
    return w;
  }

 private:
  SchedulerParams p_;
  int linear_;
};

}  // namespace hopattn::kernels::fwd
