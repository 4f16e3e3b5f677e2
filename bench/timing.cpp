#include "timing.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "device.hpp"

namespace hopattn::cli {
namespace {

Timing summarize(std::vector<double> ms) {
  Timing t;
  t.iters = static_cast<int>(ms.size());
  if (ms.empty()) return t;
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  t.median_ms = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  t.min_ms = ms.front();
  return t;
}

// The timed iterations fill the bar's current step (the first run and the check precede them).
void report(Progress* progress, const char* what, int i, int n, bool timed) {
  if (progress != nullptr) {
    progress->set_detail(std::string(what) + " " + std::to_string(i + 1) + "/" + std::to_string(n),
                         timed ? double(i) / n : 0.0);
  }
}

}  // namespace

Timing time_cpu(const std::function<void()>& fn, int warmup, int iters, Progress* progress) {
  for (int i = 0; i < warmup; ++i) {
    report(progress, "warmup", i, warmup, false);
    fn();
  }
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    report(progress, "timing", i, iters, true);
    const auto start = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  return summarize(std::move(ms));
}

Timing time_gpu(const std::function<void()>& fn, int warmup, int iters, L2Flush flush, int chain,
                const SmHoldSpec& hold_spec, Progress* progress) {
  std::optional<SmHold> hold;
  if (hold_spec.active()) hold.emplace(hold_spec);
  for (int i = 0; i < warmup; ++i) {
    report(progress, "warmup", i, warmup, false);
    if (hold) hold->hold();
    fn();
    if (hold) hold->release();
  }
  device_synchronize();
  GpuTimer timer;
  std::vector<double> ms, host_ms;
  for (int i = 0; i < iters; ++i) {
    report(progress, "timing", i, iters, true);
    flush_l2(flush);
    if (hold) hold->hold();
    timer.start();
    const auto issued = std::chrono::steady_clock::now();
    for (int c = 0; c < chain; ++c) fn();
    host_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - issued)
            .count() /
        chain);
    ms.push_back(timer.stop_ms() / chain);  // waits for the calls: the next ones start idle
    if (hold) hold->release();
  }
  device_synchronize();
  Timing t = summarize(std::move(ms));
  t.host_median_ms = summarize(std::move(host_ms)).median_ms;
  return t;
}

}  // namespace hopattn::cli
