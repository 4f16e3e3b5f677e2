// The concurrent form's placement of its prefill lists by SM (BatchAttentionVariants::
// concurrent_sm_order; hopattn bench batch --decode-sm-order): the step's decodes get the first
// SMs of an order and the prefill CTAs the others, whichever SMs the hardware hands the CTAs
// (kernels/batch/placement.cuh). Decodes alone on few SMs stream ~70 GB/s an SM where the plain
// stream reaches 95-116 (docs/perf/NOTES.md, run set as); an order spread over the GPCs against
// one packed into few tells whether the GPCs' ports cap them. No CUDA headers (used by src/api);
// defined in CUDA builds only.
#pragma once

#include <cstdint>
#include <vector>

#include "hopattn/options.hpp"

namespace hopattn::kernels::batch {

inline constexpr int kMaxPlacedSms = 256;

class SmPlacement {
 public:
  // `order`: the SM ids 0 .. n - 1 of a card of n SMs, each once, the decodes' first. Throws
  // hopattn::Error (kValue) for anything else. Allocates the ranks and claims on `device`.
  SmPlacement(int device, const std::vector<int>& order);
  // The order from the card's GPCs, probed on the device by the first reset(): SMs taken
  // round-robin over the GPCs (largest first), so that the decodes' SMs are spread over them,
  // and one SM a TPC first (gpc_order.hpp).
  // The GPCs are the groups of SMs that thread-block clusters (which the hardware keeps in one
  // GPC) share, as tools/sm_gpcs.cu finds them, joined on the device: no read-back.
  explicit SmPlacement(int device);
  ~SmPlacement();
  SmPlacement(const SmPlacement&) = delete;
  SmPlacement& operator=(const SmPlacement&) = delete;

  int sms() const { return sms_; }
  const int16_t* ranks() const { return ranks_; }
  uint32_t* claims() const { return claims_; }

  // Zeroes the claims on `stream` before each placed launch, and writes the ranks the first time
  // (the given order's, passed by value to one small kernel; or the GPC probe's launches): no
  // host copy, no allocation. One placed launch of the object at a time: its claims are the
  // object's.
  void reset(Stream stream);

 private:
  SmPlacement(int device, bool probe);  // the card's SMs, checked against kMaxPlacedSms
  void allocate();

  int device_ = 0;
  bool probe_ = false;  // the ranks come from the GPC probe
  int sms_ = 0;
  bool ranks_written_ = false;
  int16_t host_ranks_[kMaxPlacedSms] = {};  // a given order's, until the first reset writes them
  void* buffer_ = nullptr;                  // ranks, the claim words, then the probe's records
  int16_t* ranks_ = nullptr;
  uint32_t* claims_ = nullptr;
  uint32_t* records_ = nullptr;
};

}  // namespace hopattn::kernels::batch
