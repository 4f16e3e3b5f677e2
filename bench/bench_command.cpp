// `hopattn bench FAMILY [flags]`: one family on one shape, on the chosen implementations.
#include "commands.hpp"
#include "device.hpp"
#include "hopattn/error.hpp"
#include "report.hpp"

namespace hopattn::cli {

int run_bench(Family family, const BenchFlags& flags, std::ostream& out) {
  const GpuInfo& gpu = gpu_info();
  std::vector<Impl> impls;
  switch (flags.impl) {
    case Impl::kAuto:
      if (gpu.usable) {
        impls.push_back(Impl::kKernel);
        if (has_naive(family)) impls.push_back(Impl::kNaive);
      } else {
        impls.push_back(Impl::kCpu);
      }
      break;
    case Impl::kNaive:
      if (!has_naive(family)) {
        throw UsageError("--impl naive: the naive GPU reference covers fwd and decode only");
      }
      [[fallthrough]];
    default:
      impls.push_back(flags.impl);
  }
  const bool on_gpu = impls.front() != Impl::kCpu;
  if (on_gpu && !gpu.usable) {
    throw Error(ErrorKind::kRuntime, std::string("--impl ") +
                                         (flags.impl == Impl::kNaive ? "naive" : "kernel") +
                                         " needs a GPU: " + gpu.why_not);
  }
  // Default shapes: the model's on a GPU; the short CPU one for the CPU reference.
  const Shape shape = apply_flags(on_gpu ? model_shape(family) : cpu_shape(family), flags);
  std::vector<RunRequest> requests;
  for (Impl impl : impls) {
    RunRequest r;
    r.shape = shape;
    r.impl = impl;
    // The naive reference takes up to seconds per call on model shapes: fewer default iterations.
    const bool slow = !on_gpu || impl == Impl::kNaive;
    r.warmup = flags.warmup.value_or(slow ? 1 : 3);
    r.iters = flags.iters.value_or(slow ? 3 : 20);
    r.check = flags.check;
    r.l2_flush = flags.l2_flush;
    r.chain = flags.chain;
    r.hold = flags.hold;
    r.seed = flags.seed.value_or(kDefaultSeed);
    if (family == Family::kBatch) {
      // BatchAttention and the alternatives of the same step, each a row of its own; the report
      // prints their times relative to the first.
      std::vector<BatchImpl> chosen = flags.batch_impls;
      if (shape.kv_dtype != shape.dtype) {
        // The alternatives' fwd calls take K/V in q's dtype: an fp8 cache runs the batch only.
        for (BatchImpl b : chosen) {
          if (b != BatchImpl::kBatch) {
            throw UsageError(std::string("--batch-impl ") + batch_impl_name(b) +
                             ": with --kv-dtype " + dtype_name(shape.kv_dtype) +
                             " only batch runs (attention_fwd takes K/V in q's dtype)");
          }
        }
        chosen = {BatchImpl::kBatch};
      }
      if (chosen.empty()) chosen.assign(std::begin(kAllBatchImpls), std::end(kAllBatchImpls));
      for (BatchImpl b : chosen) {
        r.shape.batch_impl = b;
        requests.push_back(r);
      }
      continue;
    }
    requests.push_back(r);
    // The bwd kernel's deterministic mode (ordered dQ accumulation) next to the normal one: its
    // cost is a target of its own (>= 0.85x the normal speed, docs/perf/bwd.md).
    if (family == Family::kBwd && impl == Impl::kKernel) {
      r.shape.deterministic = true;
      requests.push_back(r);
    }
  }
  if (!flags.csv && !on_gpu) {
    out << "(no GPU: " << gpu.why_not << "; timing the CPU reference)\n";
  }
  return run_and_report(std::string("hopattn bench ") + family_name(family), requests, flags.csv,
                        out);
}

}  // namespace hopattn::cli
