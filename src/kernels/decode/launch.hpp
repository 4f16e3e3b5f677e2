// Host entry points of the decode kernel; includable without CUDA headers. The definitions exist
// only in CUDA builds (HOPATTN_WITH_CUDA). Arguments are expected to be validated
// (src/api/validate_decode.cpp) and on one CUDA device.
#pragma once

#include "hopattn/options.hpp"
#include "plan/decode_plan.hpp"

namespace hopattn::kernels::decode {

// How one decode call is cut into CTAs, and the workspace it needs: plan::plan_decode, a pure
// function of the shapes, the options and the SM count (src/plan/decode_plan.hpp).
using LaunchPlan = plan::DecodePlan;

// The plan for the device that holds q: plan::plan_decode with that device's SM count (queried
// once per device, an attribute read without synchronization).
LaunchPlan device_plan(const DecodeArgs& args, const DecodeOptions& opts);

// Launches on `stream` (no allocation, no synchronization, one kernel node; CUDA-graph
// capturable). With num_splits > 1 the semaphores at the workspace's start must be zero (the
// caller zeroes a workspace once after allocating it); the kernel's last blocks leave them zero.
void launch(const DecodeArgs& args, const DecodeOptions& opts, const LaunchPlan& plan,
            Stream stream);

}  // namespace hopattn::kernels::decode
