// Median time of a call: CUDA events on the GPU (L2 flushed before each iteration, outside the
// timed region, unless the caller asks for a warm L2), steady_clock on the CPU.
#pragma once

#include <functional>

#include "l2_flush.hpp"
#include "progress.hpp"
#include "sm_hold_spec.hpp"

namespace hopattn::cli {

struct Timing {
  double median_ms = 0;
  double min_ms = 0;
  int iters = 0;
  // GPU rows: the median host time of one call (its enqueue: validation, launches), each timed
  // iteration's calls issued behind nothing but the L2 flush; 0 on the CPU.
  double host_median_ms = 0;
};

Timing time_cpu(const std::function<void()>& fn, int warmup, int iters, Progress* progress);
// flush kNone (--warm-l2) skips the flush: a diagnostic that tells the cost of cold code and data
// (the flush evicts both) from the rest; the tables are taken with kWrite (kRead, --l2-flush read:
// the L2 left clean). chain > 1 (--chain): each timed iteration makes `chain` calls back to back
// between its two events and counts a call as 1 / chain of it, as a serving step's kernels follow
// one another (a kernel's launch then overlaps the tail of the one before; the L2 is flushed
// before the first only). hold.active() (--hold-sms, --free-sms): every call, warm-ups too, runs
// on the SMs the held ones leave it (SmHold).
Timing time_gpu(const std::function<void()>& fn, int warmup, int iters, L2Flush flush, int chain,
                const SmHoldSpec& hold, Progress* progress);

}  // namespace hopattn::cli
