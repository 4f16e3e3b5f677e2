#include "runner.hpp"

#include <chrono>

#include "device.hpp"
#include "hopattn/error.hpp"
#include "timing.hpp"

namespace hopattn::cli {
namespace {

std::unique_ptr<Workload> make_workload(const Shape& s, Impl impl, uint64_t seed) {
  switch (s.family) {
    case Family::kFwd:
      return make_fwd_workload(s, seed);
    case Family::kBwd:
      return make_bwd_workload(s, seed);
    case Family::kDecode:
      return make_decode_workload(s, seed);
    case Family::kMla:
      return make_mla_workload(s, seed);
    case Family::kMerge:
      return make_merge_workload(s, seed, impl == Impl::kCpu);
  }
  return nullptr;
}

// kNotImplemented from the API: either the family has no GPU kernel, or the kernel does not
// cover this shape or option. Neither is a failure of what exists.
std::string not_implemented_status(const Error& e) {
  const std::string what = e.what();
  if (what.find("no GPU kernel") != std::string::npos) return "no GPU kernel yet";
  return "not supported on GPU: " + what;
}

}  // namespace

bool has_naive(Family f) { return f == Family::kFwd || f == Family::kDecode; }

Row run_row(const RunRequest& req) {
  const Shape& s = req.shape;
  const bool gpu = req.impl != Impl::kCpu;
  Row row;
  row.family = family_name(s.family);
  row.impl = impl_name(req.impl);
  row.shape = s.describe();
  row.device = gpu ? gpu_info().name : "CPU";
  if (req.impl == Impl::kNaive && !has_naive(s.family)) {
    row.status = "n/a (naive reference: fwd and decode only)";
    return row;
  }
  if (gpu && !gpu_info().usable) {
    row.status = "no GPU: " + gpu_info().why_not;
    return row;
  }
  try {
    if (req.progress) req.progress->set_detail(row.family + " " + row.impl + ": preparing inputs");
    const std::unique_ptr<Workload> w = make_workload(s, req.impl, req.seed);
    w->prepare(gpu);
    w->poison_outputs(gpu);
    if (req.progress) req.progress->set_detail(row.family + " " + row.impl + ": first run");
    const auto start = std::chrono::steady_clock::now();
    try {
      w->run(req.impl);
      if (gpu) device_synchronize();
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kNotImplemented) throw;
      row.status = not_implemented_status(e);
      return row;
    }
    const double first_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (req.check) {
      if (req.progress) req.progress->set_detail(row.family + " " + row.impl + ": checking");
      const Check c = gpu ? w->check_gpu() : w->check_cpu();
      row.max_err = c.max_err;
      row.status = c.ok ? "OK" : "FAIL: " + c.why;
      row.failed = !c.ok;
      row.note = gpu ? w->gpu_check_note() : w->cpu_check_note();
    } else {
      row.status = "unchecked";
    }
    Timing t;
    if (!gpu && req.warmup == 0 && req.iters == 1) {
      t.median_ms = first_ms;  // the checked run was already a cold, complete CPU call
    } else {
      const auto fn = [&] { w->run(req.impl); };
      t = gpu ? time_gpu(fn, req.warmup, req.iters, req.flush_l2, req.progress)
              : time_cpu(fn, req.warmup, req.iters, req.progress);
    }
    row.time_ms = t.median_ms;
    const double seconds = t.median_ms * 1e-3;
    if (seconds > 0) {
      const bool compute = metric(s) == Metric::kFlops;
      row.rate = (compute ? flops(s) : bytes(s)) / seconds;
      row.rate_unit = compute ? "FLOP/s" : "B/s";
    }
  } catch (const std::exception& e) {
    row.status = std::string("ERROR: ") + e.what();
    row.failed = true;
  }
  return row;
}

}  // namespace hopattn::cli
