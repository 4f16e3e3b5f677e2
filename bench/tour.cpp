// `hopattn`: every family once on its default shape, checked, in one table.
#include "commands.hpp"
#include "device.hpp"
#include "report.hpp"

namespace hopattn::cli {
namespace {

constexpr int kGpuWarmup = 2, kGpuIters = 10;
// The naive reference is slow on model shapes: a few iterations show its time well enough.
constexpr int kNaiveWarmup = 1, kNaiveIters = 3;

}  // namespace

int run_tour(const BenchFlags& flags, std::ostream& out) {
  const GpuInfo& gpu = gpu_info();
  const uint64_t seed = flags.seed.value_or(kDefaultSeed);
  std::vector<RunRequest> requests;
  for (Family f : kAllFamilies) {
    RunRequest r;
    r.seed = seed;
    r.l2_flush = flags.l2_flush;
    if (!gpu.usable) {
      r.shape = cpu_shape(f);
      r.impl = Impl::kCpu;
      r.warmup = 0;
      r.iters = 1;
      requests.push_back(r);
      continue;
    }
    r.shape = model_shape(f);
    r.impl = Impl::kKernel;
    r.warmup = kGpuWarmup;
    r.iters = kGpuIters;
    requests.push_back(r);
    if (has_naive(f)) {
      r.impl = Impl::kNaive;
      r.warmup = kNaiveWarmup;
      r.iters = kNaiveIters;
      requests.push_back(r);
    }
  }
  if (!flags.csv) {
    if (gpu.usable) {
      out << "hopattn tour on " << gpu.name
          << ": each family's GPU kernel and, for fwd and decode, the naive fp32 GPU reference,\n"
             "on model shapes (Llama-3-8B: 32 q heads, 8 KV heads, head dim 128; DeepSeek-V3 "
             "MLA: 128 heads, 512 + 64; batch: a serving step of 4 prefill chunks and 124 decodes, "
             "--step a), checked against the CPU reference. Seed "
          << seed << ".\n\n";
    } else {
      out << "*** No GPU: " << gpu.why_not << ". ***\n"
          << "hopattn tour on the CPU: the double-precision CPU reference of each family on short\n"
             "sequences with the model's head counts (Llama-3-8B: 32 q heads, 8 KV heads, head "
             "dim 128;\nDeepSeek-V3 MLA: 128 heads, 512 + 64; batch: a step of 2 short prefill "
             "chunks and "
             "8 decodes),\neach checked against an independent computation of the same math. No "
             "GPU kernel ran. Seed "
          << seed << ".\n\n";
    }
  }
  return run_and_report("hopattn tour", requests, flags.csv, out);
}

}  // namespace hopattn::cli
