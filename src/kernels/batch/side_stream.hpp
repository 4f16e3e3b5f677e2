// A second stream of a BatchAttention for the concurrent form of a mixed step (plan::
// BatchConcurrentForm): the decode-family calls run on it beside the batch kernel's prefill
// launch on the caller's stream. No CUDA headers (used by src/api); defined in CUDA builds only.
#pragma once

#include "hopattn/options.hpp"

namespace hopattn::kernels::batch {

class SideStream {
 public:
  // A non-blocking stream and two events on `device`.
  explicit SideStream(int device);
  ~SideStream();
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;

  Stream stream() const { return stream_; }

  // The concurrent form's launches on both streams: made, the side stream waits for what `stream`
  // holds so far (forked before the prefill launch, so the decodes wait for what came before the
  // step, not for the step's own launch); join(), `stream` waits for what the side stream holds,
  // so the step's outputs are complete on `stream` after it, as after a single launch. Unwinding
  // joins too, so that a launch that throws in between never leaves work on the side stream that
  // `stream` does not wait for (decodes launched before the throw would land after it).
  class Fork {
   public:
    Fork(SideStream& side, Stream stream);
    ~Fork();
    Fork(const Fork&) = delete;
    Fork& operator=(const Fork&) = delete;
    void join();  // the normal way out: errors reach the caller

   private:
    SideStream& side_;
    Stream stream_;
    bool joined_ = false;
  };

 private:
  void fork(Stream stream);
  void join(Stream stream);
  void release();

  Stream stream_ = nullptr;
  void* forked_ = nullptr;  // cudaEvent_t
  void* joined_ = nullptr;
};

}  // namespace hopattn::kernels::batch
