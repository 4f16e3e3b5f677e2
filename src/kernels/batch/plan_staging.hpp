// Pinned host staging of the batch family's plans for CUDA configurations, and the copy of a plan
// into run()'s workspace (no CUDA headers: used by src/api; defined only in CUDA builds).
//
// Two buffers alternate: plan() writes the one the upload before last read from, after waiting
// for that upload (a cudaEventSynchronize on its own copy, normally long complete), so planning
// the next step while the GPU still runs this one never overwrites bytes a queued copy has yet to
// read, and no call waits on the device's other work.
#pragma once

#include <cstddef>

#include "hopattn/options.hpp"

namespace hopattn::kernels::batch {

class PlanStaging {
 public:
  // Two pinned buffers of `bytes` each (16-byte aligned) on behalf of `device`.
  PlanStaging(size_t bytes, int device);
  ~PlanStaging();
  PlanStaging(const PlanStaging&) = delete;
  PlanStaging& operator=(const PlanStaging&) = delete;

  // The buffer the next plan goes to, once its last upload has left host memory.
  void* next();
  // Marks next() as planned: it becomes current(), and the following next() is the other one.
  void commit();
  const void* current() const { return buffers_[current_]; }
  // Copies `bytes` of current() to `device_dst` on `stream` and records the copy's completion.
  void upload(void* device_dst, size_t bytes, Stream stream);

 private:
  void release();  // waits for queued uploads, then frees what was made

  void* buffers_[2] = {nullptr, nullptr};
  void* events_[2] = {nullptr, nullptr};  // cudaEvent_t of each buffer's last upload
  bool pending_[2] = {false, false};
  int current_ = 1;  // next() starts with buffer 0
  int device_ = 0;
};

// The peak HBM bandwidth of `device` in GB/s, from its memory clock and bus width (attribute
// reads, cached per device): what the planner's concurrent form scales its model by
// (BatchPlanLimits::hbm_gbps).
int card_hbm_gbps(int device);

}  // namespace hopattn::kernels::batch
