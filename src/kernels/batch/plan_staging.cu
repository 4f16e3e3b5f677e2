// PlanStaging (plan_staging.hpp): cudaHostAlloc'ed buffers, one event per buffer.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/batch/plan_staging.hpp"
#include "kernels/common/cuda_host.hpp"
#include "plan/batch_plan.hpp"

namespace hopattn::kernels::batch {
namespace {

constexpr const char* kWhere = "hopattn.BatchAttention";

void cuda_ok(cudaError_t err, const char* what) { throw_if_cuda_error(err, kWhere, what); }

}  // namespace

PlanStaging::PlanStaging(size_t bytes, int device) : device_(device) {
  DeviceGuard guard(device, kWhere);
  try {
    for (int i = 0; i < 2; ++i) {
      cuda_ok(cudaHostAlloc(&buffers_[i], bytes, cudaHostAllocPortable), "cudaHostAlloc (plan)");
      cudaEvent_t e = nullptr;
      cuda_ok(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
      events_[i] = e;
    }
  } catch (...) {
    release();
    throw;
  }
}

PlanStaging::~PlanStaging() { release(); }

void PlanStaging::release() {
  for (int i = 0; i < 2; ++i) {
    if (events_[i] != nullptr) {
      (void)cudaEventSynchronize(
          static_cast<cudaEvent_t>(events_[i]));  // no copy reads freed memory
      (void)cudaEventDestroy(static_cast<cudaEvent_t>(events_[i]));
      events_[i] = nullptr;
    }
    if (buffers_[i] != nullptr) (void)cudaFreeHost(buffers_[i]);
    buffers_[i] = nullptr;
  }
}

void* PlanStaging::next() {
  const int i = 1 - current_;
  if (pending_[i]) {
    cuda_ok(cudaEventSynchronize(static_cast<cudaEvent_t>(events_[i])),
            "waiting for the upload of the plan before last");
    pending_[i] = false;
  }
  return buffers_[i];
}

void PlanStaging::commit() { current_ = 1 - current_; }

void PlanStaging::upload(void* device_dst, size_t bytes, Stream stream) {
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  DeviceGuard guard(device_, kWhere);
  cuda_ok(cudaMemcpyAsync(device_dst, buffers_[current_], bytes, cudaMemcpyHostToDevice, s),
          "plan upload (cudaMemcpyAsync)");
  cuda_ok(cudaEventRecord(static_cast<cudaEvent_t>(events_[current_]), s), "cudaEventRecord");
  pending_[current_] = true;
}

int card_hbm_gbps(int device) {
  // A tuning input, not a requirement: a card that reports no memory clock or bus width (or an
  // error, cleared here) plans with the model's own card (0).
  static PerDeviceCache<> cache;
  return cache.get(device, [&] {
    int clock_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    // Two transfers a clock (double data rate), bus_bits / 8 bytes each.
    const int64_t gbps = int64_t{clock_khz} * 1000 * 2 * (bus_bits / 8) / 1000000000;
    return gbps > 0 && gbps <= plan::kMaxHbmGbps ? static_cast<int>(gbps) : 0;
  });
}

}  // namespace hopattn::kernels::batch
