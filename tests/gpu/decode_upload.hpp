// Device copy of a decode test run's arguments, shared by the decode kernel and naive tests.
#pragma once

#include "cpu/decode_case.hpp"
#include "gpu_test_support.hpp"
#include "hopattn/options.hpp"

namespace hopattn::testing {

// `host` (arguments over r's host buffers) with every tensor replaced by its device copy in `dev`.
inline DecodeArgs upload_decode_args(DeviceSet& dev, const decode_case::DecodeRun& r,
                                     const DecodeArgs& host) {
  DecodeArgs gpu = host;
  gpu.q = dev.put(r.q_buf, host.q);
  gpu.out = dev.put(r.out_buf, host.out);
  gpu.lse = dev.put(r.lse_buf, host.lse);
  gpu.k_cache = dev.put(r.kv->k_buf, host.k_cache);
  gpu.v_cache = dev.put(r.kv->v_buf, host.v_cache);
  gpu.pages.block_table = dev.put(r.kv->table, host.pages.block_table);
  gpu.pages.indptr = dev.put(r.kv->indptr, host.pages.indptr);
  gpu.pages.indices = dev.put(r.kv->indices, host.pages.indices);
  gpu.pages.kv_lens = dev.put(r.kv->lens, host.pages.kv_lens);
  gpu.k_scale.per_head = dev.put(r.k_heads, host.k_scale.per_head);
  gpu.v_scale.per_head = dev.put(r.v_heads, host.v_scale.per_head);
  gpu.sinks = dev.put(r.sinks_buf, host.sinks);
  gpu.tree_mask = dev.put(r.tree_buf, host.tree_mask);
  gpu.shared_kv_lens = dev.put(r.shared_buf, host.shared_kv_lens);
  return gpu;
}

}  // namespace hopattn::testing
