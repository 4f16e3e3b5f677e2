#include "runner.hpp"

#include <chrono>
#include <cstdio>

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
    case Family::kBatch:
      return make_batch_workload(s, seed);
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

// 1.234e12 -> "1.234 T" + unit (G, M, k below).
std::string si(double v, const char* unit) {
  const char* prefix = v >= 1e12 ? "T" : v >= 1e9 ? "G" : v >= 1e6 ? "M" : v >= 1e3 ? "k" : "";
  const double scale = v >= 1e12 ? 1e-12 : v >= 1e9 ? 1e-9 : v >= 1e6 ? 1e-6 : v >= 1e3 ? 1e-3 : 1;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.4g %s%s", v * scale, prefix, unit);
  return buf;
}

// A mixed serving step is both compute and traffic: both rates, whichever the rate column shows.
std::string both_rates(const Shape& s, double seconds) {
  return "step of " + si(flops(s), "FLOP") + " and at least " + si(bytes(s), "B") + ": " +
         si(flops(s) / seconds, "FLOP/s") + ", " + si(bytes(s) / seconds, "B/s");
}

}  // namespace

bool has_naive(Family f) { return f == Family::kFwd || f == Family::kDecode; }

Row run_row(const RunRequest& req) {
  const Shape& s = req.shape;
  const bool gpu = req.impl != Impl::kCpu;
  Row row;
  row.family = family_name(s.family);
  row.impl = impl_name(req.impl);
  if (s.family == Family::kBatch) {
    if (s.batch_impl != BatchImpl::kBatch)
      row.impl += std::string(" ") + batch_impl_name(s.batch_impl);
    row.ratio_group = row.impl.substr(0, row.impl.find(' ')) + " " + s.describe();
  }
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
      t = gpu ? time_gpu(fn, req.warmup, req.iters, req.l2_flush, req.chain, req.hold, req.progress)
              : time_cpu(fn, req.warmup, req.iters, req.progress);
    }
    row.time_ms = t.median_ms;
    if (gpu) row.host_us = t.host_median_ms * 1e3;
    const double seconds = t.median_ms * 1e-3;
    if (seconds > 0) {
      const bool compute = metric(s) == Metric::kFlops;
      row.rate = (compute ? flops(s) : bytes(s)) / seconds;
      row.rate_unit = compute ? "FLOP/s" : "B/s";
    }
    row.detail = w->detail();
    if (s.family == Family::kBatch && seconds > 0) {
      row.detail += (row.detail.empty() ? "" : "; ") + both_rates(s, seconds);
    }
    if (s.family == Family::kBatch && row.host_us) {
      // run() is called once a layer with one plan: its own host cost matters to an engine.
      char buf[96];
      std::snprintf(buf, sizeof buf, "run %.1f us on the host a call (its enqueue, median)",
                    *row.host_us);
      row.detail += (row.detail.empty() ? "" : "; ") + std::string(buf);
    }
    if (!row.detail.empty()) row.detail = row.family + " " + row.impl + ": " + row.detail;
  } catch (const std::exception& e) {
    row.status = std::string("ERROR: ") + e.what();
    row.failed = true;
  }
  return row;
}

}  // namespace hopattn::cli
