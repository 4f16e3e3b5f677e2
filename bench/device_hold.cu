// device.hpp's SmHold: a timed call on the SMs that K held ones leave it (--hold-sms), the
// question behind the batch family's concurrent form, whose decodes run on the few SMs its
// prefill leaves them (docs/perf/batch.md). A holder is one CTA of one thread with the most
// shared memory a CTA may have, so no other CTA that uses shared memory fits beside it; the
// holders spin on a release word that a one-thread kernel on the timed stream writes after the
// call, and a one-thread kernel before the call waits until all of them are resident.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda_check.hpp"
#include "device.hpp"
#include "hopattn/error.hpp"

namespace hopattn::cli {
namespace {

struct HoldWords {
  unsigned resident;  // holders started, over every hold
  unsigned released;  // the last hold released
};

__global__ void hold_sm(HoldWords* w, unsigned generation) {
  extern __shared__ char smem[];
  smem[0] = 0;  // the shared memory is the point; touch it so the launch keeps it
  atomicAdd(&w->resident, 1u);
  while (atomicAdd(&w->released, 0u) < generation) __nanosleep(1000);
}

__global__ void wait_resident(HoldWords* w, unsigned target) {
  while (atomicAdd(&w->resident, 0u) < target) __nanosleep(200);
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

SmHold::SmHold(int sms) : sms_(sms) {
  int count = 0;
  check_cuda(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, 0),
             "cudaDeviceGetAttribute");
  if (sms <= 0 || sms >= count) {
    throw Error(ErrorKind::kValue, "--hold-sms: expected 1.." + std::to_string(count - 1) +
                                       " (the card has " + std::to_string(count) + " SMs), got " +
                                       std::to_string(sms));
  }
  shared_ = max_shared_per_cta();
  check_cuda(cudaFuncSetAttribute(hold_sm, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_),
             "cudaFuncSetAttribute");
  cudaStream_t s = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  stream_ = s;
  words_ = DeviceMemory(sizeof(HoldWords));
  fill_device_bytes(words_.data(), 0, sizeof(HoldWords));
}

SmHold::~SmHold() {
  cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void SmHold::hold() {
  ++generation_;
  auto* w = static_cast<HoldWords*>(words_.data());
  hold_sm<<<sms_, 1, shared_, static_cast<cudaStream_t>(stream_)>>>(w, generation_);
  check_cuda(cudaGetLastError(), "hold_sm launch");
  wait_resident<<<1, 1>>>(w, generation_ * static_cast<unsigned>(sms_));
  check_cuda(cudaGetLastError(), "wait_resident launch");
}

void SmHold::release() {
  release_hold<<<1, 1>>>(static_cast<HoldWords*>(words_.data()), generation_);
  check_cuda(cudaGetLastError(), "release_hold launch");
  check_cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "cudaStreamSynchronize");
}

}  // namespace hopattn::cli
