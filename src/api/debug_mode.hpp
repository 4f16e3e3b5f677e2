// Debug mode (hopattn::set_debug): before a launch on CUDA tensors, the call's device-resident
// index arrays (and per-head scales, sinks) are copied to the host, synchronously, and the
// family's validator runs again over the copies (validate::DeviceValues::kHostCopies), throwing
// the error a CPU call would give before anything is launched.
#pragma once

#include <memory>
#include <vector>

#include "api/validate.hpp"
#include "hopattn/batch.hpp"
#include "hopattn/options.hpp"

namespace hopattn::debug {

bool enabled();

// Host copies of device tensors for one call; freed with it.
class HostCopies {
 public:
  HostCopies(Stream stream, const char* where) : stream_(stream), where_(where) {}
  // A view with t's dtype, shape, strides and device whose data is a host copy of t's elements;
  // t itself when undefined, on the CPU or empty.
  TensorView of(const TensorView& t);
  PageTable of(const PageTable& pages);
  KVScale of(const KVScale& scale);

 private:
  Stream stream_;
  const char* where_;
  std::vector<std::unique_ptr<unsigned char[]>> buffers_;
};

// Each validates one CUDA call's device values (the call's other arguments already passed
// their validator); throws hopattn::Error on the first bad one.
void check_device_values(const FwdArgs& args, const AttentionOptions& opts, Stream stream);
void check_device_values(const BwdArgs& args, const AttentionOptions& opts, Stream stream);
void check_device_values(const DecodeArgs& args, const DecodeOptions& opts, Stream stream);
void check_device_values(const MlaArgs& args, const MlaOptions& opts, Stream stream);
void check_device_values(const BatchArgs& args, const BatchAttentionConfig& config,
                         const validate::BatchPlanned& planned, size_t workspace_bytes,
                         Stream stream);

}  // namespace hopattn::debug
