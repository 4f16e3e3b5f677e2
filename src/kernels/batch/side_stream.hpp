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

  // The side stream waits for what `stream` holds so far (recorded before the prefill launch, so
  // the decodes wait for what came before the step, not for the step's own launch).
  void fork(Stream stream);
  // `stream` waits for what the side stream holds so far: the step's outputs are complete on
  // `stream` after it, as they are after a single launch.
  void join(Stream stream);
  Stream stream() const { return stream_; }

  // Between fork() and join(): joins on the way out unless join() ran, so that a launch that
  // throws in between never leaves work queued on the side stream that the caller's stream does
  // not wait for (the outputs of decodes launched before the throw would land after it).
  class Joined {
   public:
    Joined(SideStream& side, Stream stream) : side_(side), stream_(stream) {}
    ~Joined();
    Joined(const Joined&) = delete;
    Joined& operator=(const Joined&) = delete;
    void join();  // the normal way out: errors reach the caller

   private:
    SideStream& side_;
    Stream stream_;
    bool joined_ = false;
  };

 private:
  void release();

  Stream stream_ = nullptr;
  void* forked_ = nullptr;  // cudaEvent_t
  void* joined_ = nullptr;
};

}  // namespace hopattn::kernels::batch
