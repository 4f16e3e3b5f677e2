// device.hpp's SmHold: a timed call on the SMs that K held ones leave it (--hold-sms), the
// question behind the batch family's concurrent form, whose decodes run on the few SMs its
// prefill leaves them (docs/perf/batch.md). A holder is one CTA of one thread with the most
// shared memory a CTA may have, so no other CTA that uses shared memory fits beside it; the
// holders spin on a release word that a one-thread kernel on the timed stream writes after the
// call, and a one-thread kernel before the call waits until all of them are resident.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "cuda_check.hpp"
#include "device.hpp"
#include "hopattn/error.hpp"

namespace hopattn::cli {
namespace {

constexpr int kMaxSms = 256;

struct HoldWords {
  unsigned resident;      // holders started, over every hold
  unsigned released;      // the last hold released
  unsigned timed_out;     // a spin gave up (a hold that could not be placed, or was not released)
  uint8_t held[kMaxSms];  // SM i held by the last hold (%smid)
  uint8_t free[kMaxSms];  // --free-sms: a holder on SM i exits at once
};

// Every spin gives up after this long, so that a hold which cannot work ends instead of hanging
// the call; release() then reports it.
constexpr uint64_t kSpinLimitNs = 3'000'000'000ull;

__device__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins (sleeping `sleep_ns` a turn) until *word reaches `target`; past kSpinLimitNs it notes
// the failure in w->timed_out and returns.
__device__ void spin_until(HoldWords* w, unsigned* word, unsigned target, unsigned sleep_ns) {
  const uint64_t start = now_ns();
  while (atomicAdd(word, 0u) < target) {
    if (now_ns() - start > kSpinLimitNs) {
      atomicExch(&w->timed_out, 1u);
      return;
    }
    __nanosleep(sleep_ns);
  }
}

__global__ void hold_sm(HoldWords* w, unsigned generation) {
  extern __shared__ char smem[];
  smem[0] = 0;  // the shared memory is the point; touch it so the launch keeps it
  unsigned smid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  if (smid < kMaxSms && w->free[smid] != 0) return;  // neither held nor counted
  if (smid < kMaxSms) w->held[smid] = static_cast<uint8_t>(generation);
  atomicAdd(&w->resident, 1u);
  spin_until(w, &w->released, generation, 1000);
}

__global__ void wait_resident(HoldWords* w, unsigned target) {
  spin_until(w, &w->resident, target, 200);
}

__global__ void release_hold(HoldWords* w, unsigned generation) {
  atomicExch(&w->released, generation);
}

int max_shared_per_cta() {
  int bytes = 0;
  check_cuda(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0),
             "cudaDeviceGetAttribute");
  return bytes;
}

}  // namespace

SmHold::SmHold(const SmHoldSpec& spec) : sms_(spec.sms) {
  int count = 0;
  check_cuda(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, 0),
             "cudaDeviceGetAttribute");
  count_ = count;
  uint8_t free[kMaxSms] = {};
  if (!spec.free.empty()) {
    for (int sm : spec.free) {
      if (sm < 0 || sm >= count || sm >= kMaxSms || free[sm] != 0) {
        throw Error(ErrorKind::kValue, "--free-sms: expected distinct SM ids 0.." +
                                           std::to_string(count - 1) + ", got " +
                                           std::to_string(sm));
      }
      free[sm] = 1;
    }
    // A holder takes an SM's shared memory, so each SM parks at most one; those on a free SM
    // exit. Twice the SMs' holders: where the launch meets busy SMs (the flush before a call),
    // a free SM may take several in turn, and the rest still reach every SM to be held (a
    // holder left after that lands on a free SM and exits).
    sms_ = count - static_cast<int>(spec.free.size());
    grid_ = 2 * count;
    if (sms_ == 0) throw Error(ErrorKind::kValue, "--free-sms: lists every SM, holds none");
  } else {
    grid_ = sms_;
    if (sms_ <= 0 || sms_ >= count) {
      throw Error(ErrorKind::kValue, "--hold-sms: expected 1.." + std::to_string(count - 1) +
                                         " (the card has " + std::to_string(count) + " SMs), got " +
                                         std::to_string(sms_));
    }
  }
  // Loaded now: with lazy module loading the first launch of a kernel waits for the device to
  // go idle, which a holder never lets it do (the waiter and the release would hang).
  cudaFuncAttributes attributes;
  check_cuda(cudaFuncGetAttributes(&attributes, hold_sm), "cudaFuncGetAttributes");
  check_cuda(cudaFuncGetAttributes(&attributes, wait_resident), "cudaFuncGetAttributes");
  check_cuda(cudaFuncGetAttributes(&attributes, release_hold), "cudaFuncGetAttributes");
  shared_ = max_shared_per_cta();
  check_cuda(cudaFuncSetAttribute(hold_sm, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_),
             "cudaFuncSetAttribute");
  cudaStream_t s = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  stream_ = s;
  words_ = DeviceMemory(sizeof(HoldWords));
  fill_device_bytes(words_.data(), 0, sizeof(HoldWords));
  copy_to_device(static_cast<HoldWords*>(words_.data())->free, free, sizeof(free));
  // The holders run on a stream that does not wait for the default one: the zeros must land
  // before the first of them counts itself.
  device_synchronize();
}

SmHold::~SmHold() {
  cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void SmHold::hold() {
  ++generation_;
  auto* w = static_cast<HoldWords*>(words_.data());
  hold_sm<<<grid_, 1, shared_, static_cast<cudaStream_t>(stream_)>>>(w, generation_);
  check_cuda(cudaGetLastError(), "hold_sm launch");
  wait_resident<<<1, 1>>>(w, generation_ * static_cast<unsigned>(sms_));
  check_cuda(cudaGetLastError(), "wait_resident launch");
}

void SmHold::release() {
  release_hold<<<1, 1>>>(static_cast<HoldWords*>(words_.data()), generation_);
  check_cuda(cudaGetLastError(), "release_hold launch");
  check_cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "cudaStreamSynchronize");
  unsigned timed_out = 0;
  copy_to_host(&timed_out, &static_cast<HoldWords*>(words_.data())->timed_out, sizeof(unsigned));
  if (timed_out != 0) {
    throw Error(ErrorKind::kRuntime,
                "SM hold (--hold-sms, --free-sms): the held SMs were not all resident, or "
                "not released, within 3 s");
  }
  if (generation_ == 1) {
    // Which SMs the calls run on (%smid of the SMs no holder took): whether they share a few
    // GPCs bears on what they stream.
    uint8_t held[kMaxSms];
    copy_to_host(held, static_cast<HoldWords*>(words_.data())->held, sizeof(held));
    std::string free;
    for (int i = 0; i < count_ && i < kMaxSms; ++i) {
      if (held[i] != 1) free += (free.empty() ? "" : ",") + std::to_string(i);
    }
    std::fprintf(stderr, "SM hold: the calls run on SMs %s\n", free.c_str());
  }
}

}  // namespace hopattn::cli
