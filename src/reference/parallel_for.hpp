// A minimal work-sharing loop for the CPU reference: independent items (e.g. one (request, KV
// head) pair each) are handed out one at a time through an atomic counter, so uneven items
// (different kv_lens) still balance across the host's cores.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace hopattn::reference {

// Calls fn(i) for every i in [0, n), on up to hardware_concurrency() threads. The first exception
// thrown by any fn is rethrown on the calling thread after all threads have stopped.
template <typename Fn>
void parallel_for(int64_t n, const Fn& fn) {
  if (n <= 0) return;
  const int64_t hw = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t num_threads = std::min(n, hw);
  if (num_threads == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        next.store(n);  // stop handing out work
      }
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(num_threads - 1));
  for (int64_t t = 1; t < num_threads; ++t) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace hopattn::reference
