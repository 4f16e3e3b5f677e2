// Valid argument sets of attention_fwd and attention_bwd for the validator tests (dense, varlen,
// paged by block table or CSR), shared by the test files of the forward's and backward's rules.
#pragma once

#include <cstddef>
#include <cstdint>

#include "api/validate.hpp"
#include "hopattn/options.hpp"
#include "validate_testing.hpp"

namespace hopattn::testing {

inline constexpr DType kBF16 = DType::kBF16;
inline constexpr DType kFP16 = DType::kFP16;
inline constexpr DType kFP32 = DType::kFP32;

struct Fwd {
  TensorKeeper keep;
  FwdArgs args;
  AttentionOptions opts;
};

// q [2, 5, Hq, Dqk], k/v [2, 7, Hkv, D], with sinks.
inline Fwd dense_fwd(DType dtype = kBF16, int64_t hq = 8, int64_t hkv = 2, int64_t dqk = 64,
                     int64_t dv = 64) {
  Fwd f;
  f.args.q = f.keep.make(dtype, {2, 5, hq, dqk});
  f.args.k = f.keep.make(dtype, {2, 7, hkv, dqk});
  f.args.v = f.keep.make(dtype, {2, 7, hkv, dv});
  f.args.out = f.keep.make(dtype, {2, 5, hq, dv});
  f.args.lse = f.keep.make(kFP32, {2, 5, hq});
  f.args.sinks = f.keep.make(kFP32, {hq});
  return f;
}

// Two sequences: q lengths 3, 2 in 6 rows (the last row unused), k lengths 4, 5.
inline Fwd varlen_fwd() {
  Fwd f;
  f.args.q = f.keep.make(kBF16, {6, 8, 64});
  f.args.k = f.keep.make(kBF16, {9, 2, 64});
  f.args.v = f.keep.make(kBF16, {9, 2, 64});
  f.args.out = f.keep.make(kBF16, {6, 8, 64});
  f.args.lse = f.keep.make(kFP32, {6, 8});
  f.args.cu_seqlens_q = f.keep.ints({0, 3, 5});
  f.args.cu_seqlens_k = f.keep.ints({0, 4, 9});
  f.args.max_seqlen_q = 3;
  f.args.max_seqlen_k = 5;
  return f;
}

// q lengths 2, 3; NHD pools of 6 pages of 4 tokens; kv_lens 5, 12. Request 0 uses 2 of its 3
// page slots: its third holds -1, which is never read.
inline Fwd paged_fwd() {
  Fwd f;
  f.args.q = f.keep.make(kBF16, {5, 8, 64});
  f.args.k = f.keep.make(kBF16, {6, 4, 2, 64});
  f.args.v = f.keep.make(kBF16, {6, 4, 2, 64});
  f.args.out = f.keep.make(kBF16, {5, 8, 64});
  f.args.lse = f.keep.make(kFP32, {5, 8});
  f.args.cu_seqlens_q = f.keep.ints({0, 2, 5});
  f.args.pages.block_table = f.keep.ints({0, 1, -1, 3, 4, 5}, {2, 3});
  f.args.pages.kv_lens = f.keep.ints({5, 12});
  return f;
}

// The same with a CSR page list: request 0 has pages {0, 1}, request 1 {3, 4, 5}.
inline Fwd csr_fwd() {
  Fwd f = paged_fwd();
  f.args.pages.block_table = {};
  f.args.pages.indptr = f.keep.ints({0, 2, 5});
  f.args.pages.indices = f.keep.ints({0, 1, 3, 4, 5});
  return f;
}

inline void move_to_cuda(FwdArgs& a) {
  for (TensorView* t :
       {&a.q, &a.k, &a.v, &a.out, &a.lse, &a.sinks, &a.cu_seqlens_q, &a.cu_seqlens_k,
        &a.pages.block_table, &a.pages.indptr, &a.pages.indices, &a.pages.kv_lens}) {
    *t = on_cuda(*t);
  }
}

inline void validate_fwd(const Fwd& f) { validate::attention_fwd(f.args, f.opts); }

using FwdRejection = Rejection<FwdArgs, AttentionOptions>;

inline Fwd default_dense() { return dense_fwd(); }

// ------------------------------------------------------------------------------------ backward

struct Bwd {
  Fwd fwd;
  BwdArgs args;
};

inline Bwd dense_bwd() {
  Bwd b{dense_fwd(), {}};
  TensorKeeper& keep = b.fwd.keep;
  b.args.fwd = b.fwd.args;
  b.args.dout = keep.make(kBF16, {2, 5, 8, 64});
  b.args.dq = keep.make(kBF16, {2, 5, 8, 64});
  b.args.dk = keep.make(kBF16, {2, 7, 2, 64});
  b.args.dv = keep.make(kBF16, {2, 7, 2, 64});
  b.args.dsinks = keep.make(kFP32, {8});
  return b;
}

inline void validate_bwd(const Bwd& b) { validate::attention_bwd(b.args, b.fwd.opts); }

using BwdRejection = Rejection<BwdArgs, AttentionOptions>;

template <size_t N>
void expect_bwd_rejections(const BwdRejection (&rejections)[N]) {
  for (const BwdRejection& r : rejections) {
    Bwd b = dense_bwd();
    r.mutate(b.fwd.keep, b.args, b.fwd.opts);
    EXPECT_TRUE(throws_error([&] { validate_bwd(b); }, r.kind, r.fragment)) << r.name;
  }
}

}  // namespace hopattn::testing
