// The argument structs of the public API through a ViewMirror: add() registers a call's inputs
// and outputs, map() (after ViewMirror::upload) gives the same struct over the device twins.
// BwdArgs: add() and map() cover dout and the gradients; its forward part goes through the FwdArgs
// overloads (bwd.fwd = map(m, fwd), so the forward's out / lse are the device ones).
#pragma once

#include "hopattn/batch.hpp"
#include "hopattn/options.hpp"
#include "view_mirror.hpp"

namespace hopattn::testing {

inline void add(ViewMirror& m, const FwdArgs& a) {
  for (const TensorView* v : {&a.q, &a.k, &a.v, &a.cu_seqlens_q, &a.cu_seqlens_k, &a.sinks}) {
    m.add(*v, false);
  }
  m.add(a.pages);
  m.add(a.out, true);
  m.add(a.lse, true);
}

inline FwdArgs map(const ViewMirror& m, const FwdArgs& a) {
  FwdArgs d = a;
  d.q = m.map(a.q);
  d.k = m.map(a.k);
  d.v = m.map(a.v);
  d.cu_seqlens_q = m.map(a.cu_seqlens_q);
  d.cu_seqlens_k = m.map(a.cu_seqlens_k);
  d.pages = m.map(a.pages);
  d.sinks = m.map(a.sinks);
  d.out = m.map(a.out);
  d.lse = m.map(a.lse);
  return d;
}

inline void add(ViewMirror& m, const BwdArgs& a) {
  m.add(a.dout, false);
  for (const TensorView* v : {&a.dq, &a.dk, &a.dv, &a.dsinks}) m.add(*v, true);
}

inline BwdArgs map(const ViewMirror& m, const BwdArgs& a, const FwdArgs& device_fwd) {
  BwdArgs d = a;
  d.fwd = device_fwd;
  d.dout = m.map(a.dout);
  d.dq = m.map(a.dq);
  d.dk = m.map(a.dk);
  d.dv = m.map(a.dv);
  d.dsinks = m.map(a.dsinks);
  return d;
}

inline void add(ViewMirror& m, const DecodeArgs& a) {
  for (const TensorView* v : {&a.q, &a.k_cache, &a.v_cache, &a.k_scale.per_head,
                              &a.v_scale.per_head, &a.sinks, &a.tree_mask, &a.shared_kv_lens}) {
    m.add(*v, false);
  }
  m.add(a.pages);
  m.add(a.out, true);
  m.add(a.lse, true);
}

inline DecodeArgs map(const ViewMirror& m, const DecodeArgs& a) {
  DecodeArgs d = a;
  d.q = m.map(a.q);
  d.k_cache = m.map(a.k_cache);
  d.v_cache = m.map(a.v_cache);
  d.pages = m.map(a.pages);
  d.k_scale.per_head = m.map(a.k_scale.per_head);
  d.v_scale.per_head = m.map(a.v_scale.per_head);
  d.sinks = m.map(a.sinks);
  d.tree_mask = m.map(a.tree_mask);
  d.shared_kv_lens = m.map(a.shared_kv_lens);
  d.out = m.map(a.out);
  d.lse = m.map(a.lse);
  return d;
}

inline void add(ViewMirror& m, const MlaArgs& a) {
  for (const TensorView* v : {&a.q_nope, &a.q_pe, &a.ckv, &a.kpe, &a.cu_seqlens_q}) {
    m.add(*v, false);
  }
  m.add(a.pages);
  m.add(a.out, true);
  m.add(a.lse, true);
}

inline MlaArgs map(const ViewMirror& m, const MlaArgs& a) {
  MlaArgs d = a;
  d.q_nope = m.map(a.q_nope);
  d.q_pe = m.map(a.q_pe);
  d.ckv = m.map(a.ckv);
  d.kpe = m.map(a.kpe);
  d.cu_seqlens_q = m.map(a.cu_seqlens_q);
  d.pages = m.map(a.pages);
  d.out = m.map(a.out);
  d.lse = m.map(a.lse);
  return d;
}

inline void add(ViewMirror& m, const MergeArgs& a) {
  for (const TensorView* v : {&a.o_a, &a.lse_a, &a.o_b, &a.lse_b}) m.add(*v, false);
  m.add(a.out, true);
  m.add(a.lse, true);
}

inline MergeArgs map(const ViewMirror& m, const MergeArgs& a) {
  return {m.map(a.o_a), m.map(a.lse_a), m.map(a.o_b), m.map(a.lse_b), m.map(a.out), m.map(a.lse)};
}

inline void add(ViewMirror& m, const MergeNArgs& a) {
  m.add(a.o, false);
  m.add(a.lse, false);
  m.add(a.out, true);
  m.add(a.lse_out, true);
}

inline MergeNArgs map(const ViewMirror& m, const MergeNArgs& a) {
  return {m.map(a.o), m.map(a.lse), m.map(a.out), m.map(a.lse_out)};
}

inline void add(ViewMirror& m, const BatchArgs& a) {
  for (const TensorView* v : {&a.q, &a.k_cache, &a.v_cache, &a.cu_seqlens_q, &a.kv_lens,
                              &a.page_table, &a.sinks, &a.k_scale.per_head, &a.v_scale.per_head}) {
    m.add(*v, false);
  }
  m.add(a.out, true);
  m.add(a.lse, true);
}

inline BatchArgs map(const ViewMirror& m, const BatchArgs& a) {
  BatchArgs d = a;
  d.q = m.map(a.q);
  d.k_cache = m.map(a.k_cache);
  d.v_cache = m.map(a.v_cache);
  d.cu_seqlens_q = m.map(a.cu_seqlens_q);
  d.kv_lens = m.map(a.kv_lens);
  d.page_table = m.map(a.page_table);
  d.sinks = m.map(a.sinks);
  d.k_scale.per_head = m.map(a.k_scale.per_head);
  d.v_scale.per_head = m.map(a.v_scale.per_head);
  d.out = m.map(a.out);
  d.lse = m.map(a.lse);
  return d;
}

// A zeroed device workspace of `bytes` (decode's contract: zeroed once), and its Workspace.
struct DeviceScratch {
  explicit DeviceScratch(size_t bytes) : buffer(bytes) {
    check_cuda(cudaMemset(buffer.data(), 0, bytes > 0 ? bytes : 16), "cudaMemset");
    ws = {buffer.data(), bytes};
  }
  DeviceAllocation buffer;
  Workspace ws;
};

}  // namespace hopattn::testing
