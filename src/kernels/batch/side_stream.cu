// SideStream (side_stream.hpp): a non-blocking stream and two timing-free events.
#include <cuda_runtime.h>

#include "kernels/batch/side_stream.hpp"
#include "kernels/common/cuda_host.hpp"

namespace hopattn::kernels::batch {
namespace {

constexpr const char* kWhere = "hopattn.BatchAttention";

void cuda_ok(cudaError_t err, const char* what) { throw_if_cuda_error(err, kWhere, what); }

cudaStream_t raw(Stream s) { return reinterpret_cast<cudaStream_t>(s); }

}  // namespace

SideStream::SideStream(int device) {
  DeviceGuard guard(device, kWhere);
  try {
    cudaStream_t s = nullptr;
    cuda_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    stream_ = reinterpret_cast<Stream>(s);
    for (void** e : {&forked_, &joined_}) {
      cudaEvent_t event = nullptr;
      cuda_ok(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
      *e = event;
    }
  } catch (...) {
    release();
    throw;
  }
}

SideStream::~SideStream() { release(); }

void SideStream::release() {
  if (stream_ != nullptr) {
    (void)cudaStreamSynchronize(raw(stream_));  // nothing queued outlives its stream
    (void)cudaStreamDestroy(raw(stream_));
    stream_ = nullptr;
  }
  for (void** e : {&forked_, &joined_}) {
    if (*e != nullptr) (void)cudaEventDestroy(static_cast<cudaEvent_t>(*e));
    *e = nullptr;
  }
}

void SideStream::fork(Stream stream) {
  auto* e = static_cast<cudaEvent_t>(forked_);
  cuda_ok(cudaEventRecord(e, raw(stream)), "cudaEventRecord (fork)");
  cuda_ok(cudaStreamWaitEvent(raw(stream_), e, 0), "cudaStreamWaitEvent (fork)");
}

void SideStream::join(Stream stream) {
  auto* e = static_cast<cudaEvent_t>(joined_);
  cuda_ok(cudaEventRecord(e, raw(stream_)), "cudaEventRecord (join)");
  cuda_ok(cudaStreamWaitEvent(raw(stream), e, 0), "cudaStreamWaitEvent (join)");
}

SideStream::Fork::Fork(SideStream& side, Stream stream) : side_(side), stream_(stream) {
  side_.fork(stream_);
}

SideStream::Fork::~Fork() {
  if (joined_) return;
  // Unwinding from a launch error: the join's own error, if any, must not replace it.
  try {
    side_.join(stream_);
  } catch (...) {
  }
}

void SideStream::Fork::join() {
  joined_ = true;
  side_.join(stream_);
}

}  // namespace hopattn::kernels::batch
