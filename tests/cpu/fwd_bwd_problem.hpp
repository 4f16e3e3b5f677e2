// Test problems for the fwd/bwd reference: random logical data (textbook::Request) and the
// same data laid out as the tensors FwdArgs/BwdArgs take: dense, varlen or paged (random page
// permutation, NHD/HND, block table or CSR), contiguous or strided. Every byte the reference must
// not read (padding, slots past kv_len, unused pages) and every output is NaN beforehand.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "hopattn/options.hpp"
#include "naive_fwd_bwd.hpp"
#include "support/host_tensor.hpp"

namespace hopattn::testing::fwd_bwd {

struct Spec {
  int64_t hq = 2, hkv = 1, dqk = 64, dv = 64;
  std::vector<int64_t> q_lens, kv_lens;  // one entry per request
  DType dtype = DType::kBF16;            // q, k, v, out, dout, dq, dk, dv
  bool sinks = false;
  double q_range = 2.0;  // q uniform in [-q_range, q_range); k, v, dout in [-1, 1)
};

struct Problem {
  Spec spec;
  std::vector<textbook::Request> requests;
  std::vector<double> sinks;  // [hq] or empty
};

// x rounded to what a `dtype` tensor holds.
inline double round_to(DType dtype, double x) {
  alignas(8) unsigned char cell[8] = {};
  const TensorView t(cell, dtype, {1});
  store_element(t, 0, x);
  return load_element(t, 0);
}

inline std::vector<double> random_values(std::mt19937_64& rng, int64_t n, double lo, double hi,
                                         DType dtype) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> x(n);
  for (double& e : x) e = round_to(dtype, dist(rng));
  return x;
}

inline Problem make_problem(const Spec& spec, std::mt19937_64& rng) {
  Problem p{spec, {}, {}};
  for (size_t b = 0; b < spec.q_lens.size(); ++b) {
    textbook::Request r;
    r.q_len = spec.q_lens[b];
    r.kv_len = spec.kv_lens[b];
    r.q = random_values(rng, r.q_len * spec.hq * spec.dqk, -spec.q_range, spec.q_range, spec.dtype);
    r.k = random_values(rng, r.kv_len * spec.hkv * spec.dqk, -1, 1, spec.dtype);
    r.v = random_values(rng, r.kv_len * spec.hkv * spec.dv, -1, 1, spec.dtype);
    r.dout = random_values(rng, r.q_len * spec.hq * spec.dv, -1, 1, spec.dtype);
    p.requests.push_back(std::move(r));
  }
  if (spec.sinks) p.sinks = random_values(rng, spec.hq, -1, 2, DType::kFP32);
  return p;
}

inline textbook::Config naive_config(const Spec& spec, const AttentionOptions& opts) {
  textbook::Config c;
  c.hq = spec.hq;
  c.hkv = spec.hkv;
  c.dqk = spec.dqk;
  c.dv = spec.dv;
  c.scale = opts.scale ? double(*opts.scale) : 1.0 / std::sqrt(double(spec.dqk));
  c.softcap = opts.softcap;
  c.causal = opts.causal;
  c.window_left = opts.window.left;
  c.window_right = opts.window.right;
  return c;
}

enum class Layout { kDense, kVarlen, kPaged };

struct BuildOptions {
  Layout layout = Layout::kVarlen;
  bool strided = false;   // every tensor non-contiguous: first two dims swapped, innermost stride 2
  bool reversed = false;  // every tensor's outermost dim runs backwards (negative stride)
  int64_t page_size = 16;
  KVLayout kv_layout = KVLayout::kNHD;
  bool csr = false;
  // Requests b > 0 read request 0's first pages (their data must be equal there).
  int64_t shared_prefix_pages = 0;
  uint64_t page_seed = 1;
  // Varlen / paged: rows past cu_seqlens_q[B] (and, varlen, past cu_seqlens_k[B]) that no request
  // owns, which the validators allow: NaN, never read, and out / dq there never written.
  int64_t pad_rows = 0;
  // Dense / varlen with Dqk == Dv, not strided: k and v, and dk and dv, are the two halves of one
  // [.., 2, Hkv, D] buffer, as a packed KV projection gives them.
  bool packed_kv = false;
};

// A problem as tensors. Owns their storage; `fwd` and `bwd` hold the views.
class Bundle {
 public:
  Bundle(const Problem& p, const BuildOptions& o) : p_(p), o_(o) {
    const auto& s = p.spec;
    const int64_t batch = static_cast<int64_t>(s.q_lens.size());
    cu_q_.assign(1, 0);
    cu_k_.assign(1, 0);
    for (int64_t b = 0; b < batch; ++b) {
      cu_q_.push_back(cu_q_.back() + s.q_lens[b]);
      cu_k_.push_back(cu_k_.back() + s.kv_lens[b]);
    }
    const bool dense = o.layout == Layout::kDense;
    const int64_t sq = batch ? s.q_lens[0] : 0, sk = batch ? s.kv_lens[0] : 0;
    const int64_t pad = dense ? 0 : o.pad_rows;
    auto q_shape = [&](int64_t d) {
      return dense ? std::vector<int64_t>{batch, sq, s.hq, d}
                   : std::vector<int64_t>{cu_q_.back() + pad, s.hq, d};
    };
    fwd.q = alloc(s.dtype, q_shape(s.dqk));
    fwd.out = alloc(s.dtype, q_shape(s.dv));
    fwd.lse = alloc(DType::kFP32, dense ? std::vector<int64_t>{batch, sq, s.hq}
                                        : std::vector<int64_t>{cu_q_.back() + pad, s.hq});
    bwd.dout = alloc(s.dtype, q_shape(s.dv));
    bwd.dq = alloc(s.dtype, q_shape(s.dqk));
    if (!dense) {
      fwd.cu_seqlens_q = index_tensor(cu_q_, {batch + 1});
      fwd.max_seqlen_q = static_cast<int>(*std::max_element(s.q_lens.begin(), s.q_lens.end()));
    }
    if (o.layout == Layout::kPaged) {
      build_pages();
    } else {
      auto kv_shape = [&](int64_t d) {
        return dense ? std::vector<int64_t>{batch, sk, s.hkv, d}
                     : std::vector<int64_t>{cu_k_.back() + pad, s.hkv, d};
      };
      if (o.packed_kv && s.dqk == s.dv && !o.strided) {
        std::tie(fwd.k, fwd.v) = alloc_pair(s.dtype, kv_shape(s.dqk));
        std::tie(bwd.dk, bwd.dv) = alloc_pair(s.dtype, kv_shape(s.dqk));
      } else {
        fwd.k = alloc(s.dtype, kv_shape(s.dqk));
        fwd.v = alloc(s.dtype, kv_shape(s.dv));
        bwd.dk = alloc(s.dtype, kv_shape(s.dqk));
        bwd.dv = alloc(s.dtype, kv_shape(s.dv));
      }
      if (!dense) {
        fwd.cu_seqlens_k = index_tensor(cu_k_, {batch + 1});
        fwd.max_seqlen_k = static_cast<int>(*std::max_element(s.kv_lens.begin(), s.kv_lens.end()));
      }
    }
    if (s.sinks) {
      fwd.sinks = alloc(DType::kFP32, {s.hq});
      for (int64_t h = 0; h < s.hq; ++h)
        store_element(fwd.sinks, fwd.sinks.offset({h}), p.sinks[h]);
      bwd.dsinks = alloc(DType::kFP32, {s.hq});
    }
    for (int64_t b = 0; b < batch; ++b) write_request(b);
    bwd.fwd = fwd;
  }

  FwdArgs fwd;
  BwdArgs bwd;  // bwd.fwd is a copy of fwd: out/lse are the same tensors

  int64_t batch() const { return static_cast<int64_t>(cu_q_.size()) - 1; }
  int64_t num_pages() const { return num_pages_; }

  // Element offsets of logical coordinates in a query-side tensor (q, out, dout, dq), in lse, and
  // in a key-side tensor (k, v, dk, dv).
  int64_t q_off(const TensorView& t, int64_t b, int64_t i, int64_t h, int64_t d) const {
    return t.rank() == 4 ? t.offset({b, i, h, d}) : t.offset({cu_q_[b] + i, h, d});
  }
  int64_t lse_off(const TensorView& t, int64_t b, int64_t i, int64_t h) const {
    return t.rank() == 3 ? t.offset({b, i, h}) : t.offset({cu_q_[b] + i, h});
  }
  int64_t kv_off(const TensorView& t, int64_t b, int64_t j, int64_t h, int64_t d) const {
    if (o_.layout == Layout::kDense) return t.offset({b, j, h, d});
    if (o_.layout == Layout::kVarlen) return t.offset({cu_k_[b] + j, h, d});
    const int64_t page = pages_of_[b][j / o_.page_size], slot = j % o_.page_size;
    return o_.kv_layout == KVLayout::kNHD ? t.offset({page, slot, h, d})
                                          : t.offset({page, h, slot, d});
  }

  textbook::Forward read_forward(int64_t b) const {
    const auto& s = p_.spec;
    textbook::Forward f;
    for (int64_t i = 0; i < s.q_lens[b]; ++i) {
      for (int64_t h = 0; h < s.hq; ++h) {
        f.lse.push_back(load_element(fwd.lse, lse_off(fwd.lse, b, i, h)));
        for (int64_t d = 0; d < s.dv; ++d) {
          f.out.push_back(load_element(fwd.out, q_off(fwd.out, b, i, h, d)));
        }
      }
    }
    return f;
  }

  // dq, dk, dv of request b in logical order (a shared page shows every request's sum).
  textbook::Backward read_backward(int64_t b) const {
    const auto& s = p_.spec;
    textbook::Backward g;
    for (int64_t i = 0; i < s.q_lens[b]; ++i) {
      for (int64_t h = 0; h < s.hq; ++h) {
        for (int64_t d = 0; d < s.dqk; ++d) {
          g.dq.push_back(load_element(bwd.dq, q_off(bwd.dq, b, i, h, d)));
        }
      }
    }
    for (int64_t j = 0; j < s.kv_lens[b]; ++j) {
      for (int64_t h = 0; h < s.hkv; ++h) {
        for (int64_t d = 0; d < s.dqk; ++d) {
          g.dk.push_back(load_element(bwd.dk, kv_off(bwd.dk, b, j, h, d)));
        }
        for (int64_t d = 0; d < s.dv; ++d) {
          g.dv.push_back(load_element(bwd.dv, kv_off(bwd.dv, b, j, h, d)));
        }
      }
    }
    return g;
  }

  // Every element of the rows of a varlen query-side tensor (out, dq) that no request owns.
  std::vector<double> read_pad_rows(const TensorView& t) const {
    std::vector<double> x;
    for (int64_t i = t.rank() == 3 ? cu_q_.back() : t.size(0); i < t.size(0); ++i) {
      for (int64_t h = 0; h < t.size(1); ++h) {
        for (int64_t d = 0; d < t.size(2); ++d) x.push_back(load_element(t, t.offset({i, h, d})));
      }
    }
    return x;
  }

  std::vector<double> read_dsinks() const {
    std::vector<double> x;
    for (int64_t h = 0; bwd.dsinks.defined() && h < p_.spec.hq; ++h) {
      x.push_back(load_element(bwd.dsinks, bwd.dsinks.offset({h})));
    }
    return x;
  }

  // Every element of a rank-4 tensor (a page pool), in logical order.
  static std::vector<double> read_all4(const TensorView& t) { return gather(t); }

 private:
  // A NaN-filled tensor of `shape`; strided (see BuildOptions) when asked.
  TensorView alloc(DType dtype, const std::vector<int64_t>& shape) {
    const int rank = static_cast<int>(shape.size());
    std::vector<int64_t> strides(rank);
    int64_t total = 1;
    if (!o_.strided) {
      for (int d = rank - 1; d >= 0; --d) {
        strides[d] = total;
        total *= std::max<int64_t>(shape[d], 1);
      }
    } else {
      std::vector<int> order(rank);  // outermost to innermost in memory
      std::iota(order.begin(), order.end(), 0);
      if (rank >= 2) std::swap(order[0], order[1]);
      total = 2;
      for (int k = rank - 1; k >= 0; --k) {
        strides[order[k]] = total;
        total *= std::max<int64_t>(shape[order[k]], 1);
      }
    }
    storage_.emplace_back(dtype, std::vector<int64_t>{total});
    storage_.back().fill_bytes(0xff);
    char* base = static_cast<char*>(storage_.back().data());
    if (o_.reversed && rank > 0 && shape[0] > 1) {
      // Element 0 of dim 0 at the far end: numpy's t[::-1].
      base += (shape[0] - 1) * strides[0] * dtype_size(dtype);
      strides[0] = -strides[0];
    }
    return TensorView(base, dtype, rank, shape.data(), strides.data());
  }

  // Two NaN-filled tensors of `shape` (rank >= 2), the halves of one buffer with a dimension of 2
  // inserted before the head dimension: [.., 2, H, D].
  std::pair<TensorView, TensorView> alloc_pair(DType dtype, const std::vector<int64_t>& shape) {
    const int rank = static_cast<int>(shape.size());
    std::vector<int64_t> strides(rank);
    int64_t total = 1;
    for (int d = rank - 1; d >= 0; --d) {
      if (d == rank - 3) total *= 2;  // the pair dimension sits between dims rank-3 and rank-2
      strides[d] = total;
      total *= std::max<int64_t>(shape[d], 1);
    }
    const int64_t half = strides[rank - 2] * std::max<int64_t>(shape[rank - 2], 1);
    storage_.emplace_back(dtype, std::vector<int64_t>{total});
    storage_.back().fill_bytes(0xff);
    char* base = static_cast<char*>(storage_.back().data());
    return {TensorView(base, dtype, rank, shape.data(), strides.data()),
            TensorView(base + half * dtype_size(dtype), dtype, rank, shape.data(), strides.data())};
  }

  TensorView index_tensor(const std::vector<int32_t>& values, const std::vector<int64_t>& shape) {
    const TensorView t = alloc(DType::kInt32, shape);
    const int64_t cols = shape.size() == 2 ? shape[1] : 1;
    for (size_t e = 0; e < values.size(); ++e) {
      const int64_t off = shape.size() == 2 ? t.offset({int64_t(e) / cols, int64_t(e) % cols})
                                            : t.offset({int64_t(e)});
      store_element(t, off, values[e]);
    }
    return t;
  }
  TensorView index_tensor(const std::vector<int64_t>& values, const std::vector<int64_t>& shape) {
    return index_tensor(std::vector<int32_t>(values.begin(), values.end()), shape);
  }

  // Pages of each request: a random permutation of the pool, request b > 0 sharing request 0's
  // first `shared_prefix_pages`, plus two never-referenced pages. Block-table entries past a
  // request's pages point at one of those NaN pages, so reading past kv_len would show.
  void build_pages() {
    const auto& s = p_.spec;
    const int64_t batch = this->batch(), ps = o_.page_size;
    std::vector<int64_t> need(batch);
    int64_t distinct = 0;
    for (int64_t b = 0; b < batch; ++b) {
      need[b] = (s.kv_lens[b] + ps - 1) / ps;
      distinct += b == 0 ? need[b] : need[b] - std::min(o_.shared_prefix_pages, need[b]);
    }
    num_pages_ = distinct + 2;
    std::vector<int32_t> perm(num_pages_);
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937_64 rng(o_.page_seed);
    std::shuffle(perm.begin(), perm.end(), rng);
    int64_t next = 0;
    pages_of_.assign(batch, {});
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t n = 0; n < need[b]; ++n) {
        const bool shared = b > 0 && n < o_.shared_prefix_pages && n < need[0];
        pages_of_[b].push_back(shared ? pages_of_[0][n] : perm[next++]);
      }
    }
    const int32_t poison_page = perm[next];
    auto pool_shape = [&](int64_t d) {
      return o_.kv_layout == KVLayout::kNHD ? std::vector<int64_t>{num_pages_, ps, s.hkv, d}
                                            : std::vector<int64_t>{num_pages_, s.hkv, ps, d};
    };
    fwd.k = alloc(s.dtype, pool_shape(s.dqk));
    fwd.v = alloc(s.dtype, pool_shape(s.dv));
    bwd.dk = alloc(s.dtype, pool_shape(s.dqk));
    bwd.dv = alloc(s.dtype, pool_shape(s.dv));
    fwd.pages.layout = o_.kv_layout;
    fwd.pages.kv_lens = index_tensor(s.kv_lens, {batch});
    if (o_.csr) {
      std::vector<int32_t> indptr{0}, indices;
      for (const auto& pages : pages_of_) {
        indices.insert(indices.end(), pages.begin(), pages.end());
        indptr.push_back(static_cast<int32_t>(indices.size()));
      }
      fwd.pages.indptr = index_tensor(indptr, {batch + 1});
      fwd.pages.indices = index_tensor(indices, {std::max<int64_t>(1, indices.size())});
    } else {
      const int64_t cols = *std::max_element(need.begin(), need.end()) + 1;
      std::vector<int32_t> table(batch * cols, poison_page);
      for (int64_t b = 0; b < batch; ++b) {
        std::copy(pages_of_[b].begin(), pages_of_[b].end(), table.begin() + b * cols);
      }
      fwd.pages.block_table = index_tensor(table, {batch, cols});
    }
  }

  void write_request(int64_t b) {
    const auto& s = p_.spec;
    const textbook::Request& r = p_.requests[b];
    for (int64_t i = 0; i < r.q_len; ++i) {
      for (int64_t h = 0; h < s.hq; ++h) {
        for (int64_t d = 0; d < s.dqk; ++d) {
          store_element(fwd.q, q_off(fwd.q, b, i, h, d), r.q[(i * s.hq + h) * s.dqk + d]);
        }
        for (int64_t d = 0; d < s.dv; ++d) {
          store_element(bwd.dout, q_off(bwd.dout, b, i, h, d), r.dout[(i * s.hq + h) * s.dv + d]);
        }
      }
    }
    for (int64_t j = 0; j < r.kv_len; ++j) {
      for (int64_t h = 0; h < s.hkv; ++h) {
        for (int64_t d = 0; d < s.dqk; ++d) {
          store_element(fwd.k, kv_off(fwd.k, b, j, h, d), r.k[(j * s.hkv + h) * s.dqk + d]);
        }
        for (int64_t d = 0; d < s.dv; ++d) {
          store_element(fwd.v, kv_off(fwd.v, b, j, h, d), r.v[(j * s.hkv + h) * s.dv + d]);
        }
      }
    }
  }

  const Problem& p_;
  BuildOptions o_;
  std::vector<HostTensor> storage_;
  std::vector<int64_t> cu_q_, cu_k_;
  std::vector<std::vector<int32_t>> pages_of_;
  int64_t num_pages_ = 0;
};

// ---------------------------------------------------------------- shorthands for test cases

inline AttentionOptions options(bool causal, Window window = {}, float softcap = 0.f,
                                std::optional<float> scale = std::nullopt) {
  AttentionOptions o;
  o.causal = causal;
  o.window = window;
  o.softcap = softcap;
  o.scale = scale;
  return o;
}

inline Spec spec(int64_t hq, int64_t hkv, int64_t dqk, int64_t dv, std::vector<int64_t> q_lens,
                 std::vector<int64_t> kv_lens, DType dtype = DType::kBF16, bool sinks = false) {
  Spec s;
  s.hq = hq;
  s.hkv = hkv;
  s.dqk = dqk;
  s.dv = dv;
  s.q_lens = std::move(q_lens);
  s.kv_lens = std::move(kv_lens);
  s.dtype = dtype;
  s.sinks = sinks;
  return s;
}

// Random ragged lengths in [0, max_len], with a 0 and a 1 among the first requests.
inline std::vector<int64_t> ragged(std::mt19937_64& rng, int64_t batch, int64_t max_len) {
  std::uniform_int_distribution<int64_t> len(0, max_len);
  std::vector<int64_t> lens(batch);
  for (auto& l : lens) l = len(rng);
  if (batch > 2) lens[0] = 0, lens[1] = 1;
  return lens;
}

// A copy of `p` with every q head owning its own copy of its kv head (Hkv = Hq).
inline Problem expand_to_mha(const Problem& p) {
  Problem m = p;
  const Spec& s = p.spec;
  m.spec.hkv = s.hq;
  const int64_t group = s.hq / s.hkv;
  for (auto& r : m.requests) {
    std::vector<double> k, v;
    for (int64_t j = 0; j < r.kv_len; ++j) {
      for (int64_t h = 0; h < s.hq; ++h) {
        const int64_t g = h / group;
        for (int64_t d = 0; d < s.dqk; ++d) k.push_back(r.k[(j * s.hkv + g) * s.dqk + d]);
        for (int64_t d = 0; d < s.dv; ++d) v.push_back(r.v[(j * s.hkv + g) * s.dv + d]);
      }
    }
    r.k = k;
    r.v = v;
  }
  return m;
}

}  // namespace hopattn::testing::fwd_bwd
