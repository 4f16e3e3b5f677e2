// The bench's --hold-sms / --free-sms request, without CUDA headers (device.hpp's SmHold runs it).
#pragma once

#include <vector>

namespace hopattn::cli {

// Which SMs a hold parks CTAs on: `sms` of them where the CTA scheduler places them (--hold-sms
// K), or every SM but the ones `free` names by %smid (--free-sms LIST: the calls then run on
// exactly those, e.g. SMs spread over the GPCs against SMs of a few).
struct SmHoldSpec {
  int sms = 0;
  std::vector<int> free;
  bool active() const { return sms > 0 || !free.empty(); }
};

}  // namespace hopattn::cli
