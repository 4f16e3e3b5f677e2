// Problem construction and the 16-bit emulation of the bwd GPU tests (bwd_kernel_test.cpp).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/element_access.hpp"
#include "common/numeric.hpp"
#include "hopattn/options.hpp"
#include "hopper_test_util.hpp"
#include "reference/attend.hpp"
#include "reference/reference.hpp"
#include "support/host_tensor.hpp"

namespace hopattn::testing::bwd {

using hopper::cuda_check;
using hopper::DeviceBuffer;

struct BwdCase {
  DType dtype = DType::kBF16;
  int hq = 1, hkv = 1, d = 128;
  int dv = 0;  // Dv; 0: Dv = d (Dqk)
  bool varlen = false;
  std::vector<int> q_lens, kv_lens;  // per request; dense: all equal
  AttentionOptions opts;
  bool sinks = false;
  double qk_range = 2.0;  // q, k uniform in [-qk_range, qk_range); v, dout in [-1, 1)

  int batch() const { return static_cast<int>(q_lens.size()); }
  int d_v() const { return dv > 0 ? dv : d; }
  std::string describe() const {
    std::string s = std::string(dtype_name(dtype)) + (varlen ? " varlen" : " dense") + " d " +
                    std::to_string(d) + (d_v() != d ? "x" + std::to_string(d_v()) : "") + " hq " +
                    std::to_string(hq) + " hkv " + std::to_string(hkv) + " lens";
    for (int b = 0; b < batch() && b < 6; ++b) {
      s += " " + std::to_string(q_lens[b]) + "x" + std::to_string(kv_lens[b]);
    }
    if (batch() > 6) s += " ... (" + std::to_string(batch()) + " requests)";
    if (opts.causal) s += " causal";
    if (opts.window.left >= 0 || opts.window.right >= 0) {
      s += " window " + std::to_string(opts.window.left) + "," + std::to_string(opts.window.right);
    }
    if (opts.softcap > 0) s += " softcap " + std::to_string(opts.softcap);
    if (sinks) s += " sinks";
    if (opts.deterministic) s += " deterministic";
    return s;
  }
};

inline BwdCase dense_case(DType dtype, int batch, int q_len, int kv_len, int hkv, int group,
                          bool causal, int d = 128, int dv = 0) {
  BwdCase c;
  c.dtype = dtype;
  c.hkv = hkv;
  c.hq = hkv * group;
  c.d = d;
  c.dv = dv;
  c.q_lens.assign(batch, q_len);
  c.kv_lens.assign(batch, kv_len);
  c.opts.causal = causal;
  return c;
}

inline BwdCase varlen_case(DType dtype, std::vector<int> q_lens, std::vector<int> kv_lens, int hkv,
                           int group, bool causal, int d = 128, int dv = 0) {
  BwdCase c = dense_case(dtype, 0, 0, 0, hkv, group, causal, d, dv);
  c.varlen = true;
  c.q_lens = std::move(q_lens);
  c.kv_lens = std::move(kv_lens);
  return c;
}

// Host bytes plus a device copy of the same size.
struct Mirrored {
  HostTensor host;
  DeviceBuffer<uint8_t> dev;
  Mirrored(DType dtype, std::vector<int64_t> shape)
      : host(dtype, std::move(shape)), dev(std::max<size_t>(bytes_of(host), 16)) {}
  static size_t bytes_of(const HostTensor& h) {
    return static_cast<size_t>(h.numel()) * dtype_size(h.dtype());
  }
  size_t bytes() const { return bytes_of(host); }
  void upload() {
    cuda_check(cudaMemcpy(dev.get(), host.data(), bytes(), cudaMemcpyHostToDevice), "upload");
  }
  void download() {
    cuda_check(cudaMemcpy(host.data(), dev.get(), bytes(), cudaMemcpyDeviceToHost), "download");
  }
  void poison() { dev.fill_bytes(0xFF); }
  std::vector<uint8_t> raw() {
    const auto* p = static_cast<const uint8_t*>(host.data());
    return std::vector<uint8_t>(p, p + bytes());
  }
  TensorView view(bool device) const {
    const std::vector<int64_t>& shape = host.shape();
    std::vector<int64_t> strides(shape.size(), 1);
    for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) {
      strides[i] = strides[i + 1] * shape[i + 1];
    }
    void* base = device ? static_cast<void*>(dev.get()) : const_cast<HostTensor&>(host).data();
    return TensorView(base, host.dtype(), static_cast<int>(shape.size()), shape.data(),
                      strides.data(), device ? Device{DeviceType::kCUDA, 0} : Device{});
  }
};

// Every tensor of a case: inputs on host and device, the forward's out/lse (from the CPU
// reference, rounded into the stored dtypes), and the gradient outputs.
struct Problem {
  const BwdCase& c;
  std::vector<int> cu_q{0}, cu_k{0};
  std::unique_ptr<Mirrored> q, k, v, dout, out, lse, sinks, cu_q_t, cu_k_t;
  std::unique_ptr<Mirrored> dq, dk, dv, dsinks;

  // Shape of a query- or key-side tensor with `dim` columns (Dqk: q, k, dq, dk; Dv: v, out,
  // dout, dv).
  std::vector<int64_t> rows(int total, int dense_len, int heads, int dim) const {
    return c.varlen ? std::vector<int64_t>{total, heads, dim}
                    : std::vector<int64_t>{c.batch(), dense_len, heads, dim};
  }

  Problem(const BwdCase& bc, std::mt19937_64& rng) : c(bc) {
    for (int b = 0; b < c.batch(); ++b) {
      cu_q.push_back(cu_q.back() + c.q_lens[b]);
      cu_k.push_back(cu_k.back() + c.kv_lens[b]);
    }
    const int sq = c.varlen || c.batch() == 0 ? 0 : c.q_lens[0];
    const int sk = c.varlen || c.batch() == 0 ? 0 : c.kv_lens[0];
    const int dqk = c.d, dvv = c.d_v();
    q = std::make_unique<Mirrored>(c.dtype, rows(cu_q.back(), sq, c.hq, dqk));
    k = std::make_unique<Mirrored>(c.dtype, rows(cu_k.back(), sk, c.hkv, dqk));
    v = std::make_unique<Mirrored>(c.dtype, rows(cu_k.back(), sk, c.hkv, dvv));
    dout = std::make_unique<Mirrored>(c.dtype, rows(cu_q.back(), sq, c.hq, dvv));
    out = std::make_unique<Mirrored>(c.dtype, rows(cu_q.back(), sq, c.hq, dvv));
    std::vector<int64_t> lse_shape = rows(cu_q.back(), sq, c.hq, dqk);
    lse_shape.pop_back();
    lse = std::make_unique<Mirrored>(DType::kFP32, lse_shape);
    dq = std::make_unique<Mirrored>(c.dtype, rows(cu_q.back(), sq, c.hq, dqk));
    dk = std::make_unique<Mirrored>(c.dtype, rows(cu_k.back(), sk, c.hkv, dqk));
    dv = std::make_unique<Mirrored>(c.dtype, rows(cu_k.back(), sk, c.hkv, dvv));
    q->host.fill_uniform(rng, -c.qk_range, c.qk_range);
    k->host.fill_uniform(rng, -c.qk_range, c.qk_range);
    v->host.fill_uniform(rng, -1.0, 1.0);
    dout->host.fill_uniform(rng, -1.0, 1.0);
    if (c.sinks) {
      sinks = std::make_unique<Mirrored>(DType::kFP32, std::vector<int64_t>{c.hq});
      dsinks = std::make_unique<Mirrored>(DType::kFP32, std::vector<int64_t>{c.hq});
      sinks->host.fill_uniform(rng, -2.0, 3.0);
    }
    if (c.varlen) {
      cu_q_t = std::make_unique<Mirrored>(DType::kInt32, std::vector<int64_t>{c.batch() + 1});
      cu_k_t = std::make_unique<Mirrored>(DType::kInt32, std::vector<int64_t>{c.batch() + 1});
      std::memcpy(cu_q_t->host.data(), cu_q.data(), cu_q.size() * 4);
      std::memcpy(cu_k_t->host.data(), cu_k.data(), cu_k.size() * 4);
    }
    // The forward's outputs as a training step stores them: out rounded to the dtype, lse fp32.
    reference::attention_fwd(fwd_args(false), c.opts);
    for (Mirrored* m : {q.get(), k.get(), v.get(), dout.get(), out.get(), lse.get(), sinks.get(),
                        cu_q_t.get(), cu_k_t.get()}) {
      if (m != nullptr) m->upload();
    }
  }

  FwdArgs fwd_args(bool device) const {
    FwdArgs a;
    a.q = q->view(device);
    a.k = k->view(device);
    a.v = v->view(device);
    a.out = out->view(device);
    a.lse = lse->view(device);
    if (c.varlen) {
      a.cu_seqlens_q = cu_q_t->view(device);
      a.cu_seqlens_k = cu_k_t->view(device);
      a.max_seqlen_q = std::max(1, *std::max_element(c.q_lens.begin(), c.q_lens.end()));
      a.max_seqlen_k = std::max(1, *std::max_element(c.kv_lens.begin(), c.kv_lens.end()));
    }
    if (sinks) a.sinks = sinks->view(device);
    return a;
  }

  // The backward's arguments over this problem's tensors (no workspace).
  BwdArgs bwd_args(bool device) const {
    BwdArgs a;
    a.fwd = fwd_args(device);
    a.dout = dout->view(device);
    a.dq = dq->view(device);
    a.dk = dk->view(device);
    a.dv = dv->view(device);
    if (dsinks) a.dsinks = dsinks->view(device);
    return a;
  }

  // Element offset of (request b, position i, head h, dim d) in a query- or key-side tensor of
  // `dim` columns (default Dqk).
  int64_t offset(bool kv, int b, int i, int h, int d, int heads, int dim = 0) const {
    const int64_t row = c.varlen ? (kv ? cu_k[b] : cu_q[b]) + i : i;
    const int64_t len = c.varlen ? 0 : (kv ? c.kv_lens[0] : c.q_lens[0]);
    return (((c.varlen ? 0 : b * len) + row) * heads + h) * (dim > 0 ? dim : c.d) + d;
  }

  // The forward's fp32 lse of (request b, row i, q head h), as passed to the kernel.
  double stored_lse(int b, int i, int h) const {
    return lse->host.get(offset(false, b, i, h, 0, c.hq) / c.d);
  }

  // D = rowsum(dO * O) of one query row from the stored 16-bit out, as the kernel's preprocess
  // reads it (the reference recomputes O exactly instead), in double; with sum |dO * O| and
  // sum |dO|, which scale the errors of computing it in fp32 and of O's rounding to 16 bits.
  struct RowDot {
    double dot = 0, abs = 0, abs_dout = 0;
  };
  RowDot stored_row_dot(int b, int i, int h) const {
    RowDot r;
    for (int e = 0; e < c.d_v(); ++e) {
      const int64_t off = offset(false, b, i, h, e, c.hq, c.d_v());
      const double x = dout->host.get(off), o = out->host.get(off);
      r.dot += x * o;
      r.abs += std::fabs(x * o);
      r.abs_dout += std::fabs(x);
    }
    return r;
  }
};

// ---------------------------------------------------------------------------- 16-bit emulation
inline double round_to(DType dtype, double x) {
  const float f = static_cast<float>(x);
  return dtype == DType::kBF16 ? numeric::bf16_to_float(numeric::float_to_bf16(f))
                               : numeric::fp16_to_float(numeric::float_to_fp16(f));
}

// The backward as a plain 16-bit PyTorch program computes it (each op's result rounded to the
// dtype, matmuls accumulating in fp32): S = q k^T, logits = S * scale (then softcap), P = softmax
// (fp32 inside, sink in the denominator), dV = P^T dO, dP = dO V^T, dlogits = P (dP - sum(P dP)),
// softcap's (1 - t^2), dS = dlogits * scale, dQ = dS K, dK = dS^T Q; GQA groups summed in fp32.
// Outputs fp32 tensors of dq/dk/dv's shapes (one rounding of each element at the end).
struct Emulated {
  std::vector<float> dq, dk, dv, dsinks;
};

inline void emulate_head(const Problem& pb, int b, int h, std::vector<float>& dq,
                         std::vector<float>& dk, std::vector<float>& dv, float* dsink) {
  const BwdCase& c = pb.c;
  const DType t = c.dtype;
  const double scale = reference::default_scale(c.opts.scale, c.d);
  const int kvh = h / (c.hq / c.hkv);
  const int ql = c.q_lens[b], kl = c.kv_lens[b], d = c.d, dvd = c.d_v();
  const auto at = [&](const Mirrored& m, bool kv, int i, int hh, int dd, int heads, int dim) {
    return static_cast<float>(m.host.get(pb.offset(kv, b, i, hh, dd, heads, dim)));
  };
  std::vector<float> kk(static_cast<size_t>(kl) * d), vv(static_cast<size_t>(kl) * dvd);
  for (int j = 0; j < kl; ++j) {
    for (int e = 0; e < d; ++e) kk[j * d + e] = at(*pb.k, true, j, kvh, e, c.hkv, d);
    for (int e = 0; e < dvd; ++e) vv[j * dvd + e] = at(*pb.v, true, j, kvh, e, c.hkv, dvd);
  }
  const double sink = c.sinks ? pb.sinks->host.get(h) : -std::numeric_limits<double>::infinity();
  std::vector<float> qq(d), oo(dvd), logit(kl), p(kl), dp(kl), ds(kl);
  std::vector<char> visible(kl);
  float sink_sum = 0.f;
  for (int i = 0; i < ql; ++i) {
    for (int e = 0; e < d; ++e) qq[e] = at(*pb.q, false, i, h, e, c.hq, d);
    for (int e = 0; e < dvd; ++e) oo[e] = at(*pb.dout, false, i, h, e, c.hq, dvd);
    float m = static_cast<float>(sink);
    for (int j = 0; j < kl; ++j) {
      visible[j] = reference::key_visible(i, j, ql, kl, c.opts.causal, c.opts.window);
      if (!visible[j]) continue;
      float s = 0.f;
      for (int e = 0; e < d; ++e) s += qq[e] * kk[j * d + e];
      float l = static_cast<float>(round_to(t, round_to(t, s) * scale));
      if (c.opts.softcap > 0) {
        l = static_cast<float>(round_to(t, c.opts.softcap * std::tanh(l / c.opts.softcap)));
      }
      logit[j] = l;
      m = std::max(m, l);
    }
    if (m == -std::numeric_limits<float>::infinity()) continue;  // no key, no sink: zero grads
    float denom = c.sinks ? std::exp(static_cast<float>(sink) - m) : 0.f;
    for (int j = 0; j < kl; ++j) {
      p[j] = visible[j] ? std::exp(logit[j] - m) : 0.f;
      denom += p[j];
    }
    float pdp = 0.f;
    for (int j = 0; j < kl; ++j) {
      if (!visible[j]) continue;
      p[j] = static_cast<float>(round_to(t, p[j] / denom));
      float acc = 0.f;
      for (int e = 0; e < dvd; ++e) acc += oo[e] * vv[j * dvd + e];
      dp[j] = static_cast<float>(round_to(t, acc));
      pdp += p[j] * dp[j];
    }
    if (c.sinks) sink_sum -= std::exp(static_cast<float>(sink) - m) / denom * pdp;
    for (int j = 0; j < kl; ++j) {
      if (!visible[j]) continue;
      float g = static_cast<float>(round_to(t, p[j] * (dp[j] - pdp)));
      if (c.opts.softcap > 0) {
        const float th = logit[j] / c.opts.softcap;
        g = static_cast<float>(round_to(t, g * (1.f - th * th)));
      }
      ds[j] = static_cast<float>(round_to(t, g * scale));
      for (int e = 0; e < d; ++e) {
        dq[static_cast<size_t>(i) * d + e] += ds[j] * kk[j * d + e];
        dk[static_cast<size_t>(j) * d + e] += ds[j] * qq[e];
      }
      for (int e = 0; e < dvd; ++e) dv[static_cast<size_t>(j) * dvd + e] += p[j] * oo[e];
    }
  }
  *dsink = sink_sum;
}

// All (request, KV head) tasks over the host's cores; each task owns its rows of dk/dv and the
// dq rows of its group's heads.
inline Emulated emulate_16bit(const Problem& pb) {
  const BwdCase& c = pb.c;
  Emulated em;
  em.dq.assign(pb.dq->host.numel(), 0.f);
  em.dk.assign(pb.dk->host.numel(), 0.f);
  em.dv.assign(pb.dv->host.numel(), 0.f);
  em.dsinks.assign(c.hq, 0.f);
  std::vector<std::vector<float>> sink_parts(c.batch(), std::vector<float>(c.hq, 0.f));
  const int group = c.hq / c.hkv;
  const int tasks = c.batch() * c.hkv;
  std::atomic<int> next{0};
  const auto worker = [&] {
    for (int task = next++; task < tasks; task = next++) {
      const int b = task / c.hkv, kvh = task % c.hkv;
      const int ql = c.q_lens[b], kl = c.kv_lens[b], d = c.d, dvd = c.d_v();
      std::vector<float> dk(static_cast<size_t>(kl) * d, 0.f),
          dv(static_cast<size_t>(kl) * dvd, 0.f);
      for (int r = 0; r < group; ++r) {
        const int h = kvh * group + r;
        std::vector<float> dq(static_cast<size_t>(ql) * d, 0.f), hk(dk.size(), 0.f),
            hv(dv.size(), 0.f);
        emulate_head(pb, b, h, dq, hk, hv, &sink_parts[b][h]);
        for (int i = 0; i < ql; ++i) {
          for (int e = 0; e < d; ++e) {
            em.dq[pb.offset(false, b, i, h, e, c.hq)] =
                static_cast<float>(round_to(c.dtype, dq[static_cast<size_t>(i) * d + e]));
          }
        }
        // PyTorch rounds each head's gradient of the expanded k/v, then sums the group.
        for (size_t x = 0; x < dk.size(); ++x)
          dk[x] += static_cast<float>(round_to(c.dtype, hk[x]));
        for (size_t x = 0; x < dv.size(); ++x)
          dv[x] += static_cast<float>(round_to(c.dtype, hv[x]));
      }
      for (int j = 0; j < kl; ++j) {
        for (int e = 0; e < d; ++e) {
          em.dk[pb.offset(true, b, j, kvh, e, c.hkv)] =
              static_cast<float>(round_to(c.dtype, dk[static_cast<size_t>(j) * d + e]));
        }
        for (int e = 0; e < dvd; ++e) {
          em.dv[pb.offset(true, b, j, kvh, e, c.hkv, dvd)] =
              static_cast<float>(round_to(c.dtype, dv[static_cast<size_t>(j) * dvd + e]));
        }
      }
    }
  };
  const int threads = std::max(1, std::min<int>(tasks, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  for (int b = 0; b < c.batch(); ++b) {
    for (int h = 0; h < c.hq; ++h) em.dsinks[h] += sink_parts[b][h];
  }
  return em;
}

}  // namespace hopattn::testing::bwd
