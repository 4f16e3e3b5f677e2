// Replay of the fwd kernel's static tile walk on the host (kernels/fwd/tile_scheduler.cuh): how
// evenly a dense call's growing-diagonal work spreads over the CTAs, plain and paired, and the
// walk that spreads it better. Pure C++ (no CUDA), tested on the CPU; tools/fwd_walk_replay.py is
// the same model in Python, for sweeps.
//
// Why a replay rather than a closed rule (plan/fwd_order.hpp's, which the 128-row tiles keep):
// at 192 query rows a tile the walk's balance depends on how many (batch, head) pairs an L2
// section holds, which GQA multiplies by its group (a section is counted in KV heads). H100,
// hd64 causal 192-row tiles, paired / plain time: 32 heads 2k-16k 0.84-0.91 (paired wins),
// 32:8 GQA 2k and 8k 1.02-1.07 (plain wins), 512 1.06 (plain wins); the replay's busiest CTA
// picks the faster walk on all ten rows timed (docs/perf/NOTES.md, run set w).
#pragma once

#include <cstdint>

namespace hopattn::plan {

// A dense call's walk: every (batch, head) pair has the same lengths.
struct FwdWalkShape {
  int64_t rows = 0;      // query positions a tile (its rows over the GQA pack)
  int64_t seqlen_q = 0;  // the diagonal is bottom-right aligned: q_len - 1 meets kv_len - 1
  int64_t seqlen_k = 0;
  int64_t window_right = 0;  // keys past the diagonal a row sees (0: causal)
  int block_n = 128;         // keys a KV block
  int64_t pairs = 0;         // (batch, head) pairs of the walk
  int64_t section = 1;       // pairs an L2 section (LPT order inside, sections one after another)
  int grid = 0;              // CTAs (SMs); the kernel launches min(grid, units)
};

// The busiest CTA's work over the mean, a tile's work being its KV blocks plus one for its fixed
// cost. 1.0 for an empty walk.
double fwd_walk_busiest_over_mean(const FwdWalkShape& shape, bool paired);

// Whether the paired walk's busiest CTA carries less than the plain walk's. Thread-safe; the last
// few shapes asked are remembered per thread (the replay costs a few ns a tile).
bool fwd_pair_by_replay(const FwdWalkShape& shape);

}  // namespace hopattn::plan
