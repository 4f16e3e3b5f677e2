// Median time of a call: CUDA events on the GPU (L2 flushed before each iteration, outside the
// timed region), steady_clock on the CPU.
#pragma once

#include <functional>

#include "progress.hpp"

namespace hopattn::cli {

struct Timing {
  double median_ms = 0;
  double min_ms = 0;
  int iters = 0;
};

Timing time_cpu(const std::function<void()>& fn, int warmup, int iters, Progress* progress);
Timing time_gpu(const std::function<void()>& fn, int warmup, int iters, Progress* progress);

}  // namespace hopattn::cli
