// A work tile of the fwd kernel: which rows of which (batch, head) a CTA computes next, as handed
// out by a scheduler (tile_scheduler.cuh for fwd calls, src/kernels/batch/scheduler.cuh for the
// batch family's work lists) to the producer and both consumers alike.
#pragma once

#include <cstdint>

namespace hopattn::kernels::fwd {

struct WorkTile {
  int m_block;
  int head;  // q head; KV head with GQA packing
  int batch;
  // The batch family's work items (src/kernels/batch/scheduler.cuh) add: keys [kv_begin, kv_end)
  // of a KV split (the fwd tiles below see every key: constants the compiler folds away), and
  // partial_row >= 0 when the tile's rows go to the partial-state buffer rather than out / lse.
  int kv_begin = 0;
  int kv_end = INT32_MAX;
  int partial_row = -1;
};

}  // namespace hopattn::kernels::fwd
