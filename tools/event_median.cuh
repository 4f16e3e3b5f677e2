// The median time of a launch on the default stream by CUDA events, for the device tools
// (ceilings.cu, stream_rate.cu): `warmup` untimed calls, then `iters` timed one by one.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace hopattn::tools {

inline void check_event(cudaError_t s, const char* what) {
  if (s != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(s));
    std::exit(1);
  }
}

// Milliseconds; an even count takes the mean of the two middle times.
template <class Launch>
double event_median_ms(const Launch& launch, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) launch();
  check_event(cudaDeviceSynchronize(), "warm-up");
  cudaEvent_t start, stop;
  check_event(cudaEventCreate(&start), "cudaEventCreate");
  check_event(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    check_event(cudaEventRecord(start), "cudaEventRecord");
    launch();
    check_event(cudaEventRecord(stop), "cudaEventRecord");
    check_event(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float t = 0;
    check_event(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  check_event(cudaGetLastError(), "timed runs");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return 0.5 * (ms[(iters - 1) / 2] + ms[iters / 2]);
}

}  // namespace hopattn::tools
