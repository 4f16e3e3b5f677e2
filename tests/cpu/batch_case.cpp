#include "batch_case.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "hopattn/api.hpp"
#include "kernels/batch/launch.hpp"

namespace hopattn::testing::batch_case {
namespace {

using decode_case::KVRows;

constexpr uint8_t kPoison = 0xff;  // NaN in every float dtype

bool is_8bit(DType t) { return t == DType::kFP8E4M3 || t == DType::kFP8E5M2 || t == DType::kInt8; }

// Rows [first, first + n) of a tensor whose dim 0 is rows, as a tensor of n rows.
TensorView rows_of(const TensorView& t, int64_t first, int64_t n) {
  int64_t shape[TensorView::kMaxRank], strides[TensorView::kMaxRank];
  for (int i = 0; i < t.rank(); ++i) shape[i] = t.size(i), strides[i] = t.stride(i);
  shape[0] = n;
  char* data = static_cast<char*>(t.data()) + first * t.stride(0) * dtype_size(t.dtype());
  return TensorView(data, t.dtype(), t.rank(), shape, strides, t.device());
}

// The same rows with a leading batch dim of 1 (decode's [B, q_len, ...]).
TensorView batch_of_one(const TensorView& rows) {
  int64_t shape[TensorView::kMaxRank], strides[TensorView::kMaxRank];
  shape[0] = 1;
  strides[0] = rows.size(0) * rows.stride(0);
  for (int i = 0; i < rows.rank(); ++i)
    shape[i + 1] = rows.size(i), strides[i + 1] = rows.stride(i);
  return TensorView(rows.data(), rows.dtype(), rows.rank() + 1, shape, strides, rows.device());
}

KVRows random_rows(const BatchCase& c, int dim, std::mt19937_64& rng) {
  KVRows rows(c.kv_lens.size());
  for (size_t b = 0; b < rows.size(); ++b) {
    rows[b].assign(c.kv_heads, std::vector<std::vector<double>>(c.kv_lens[b]));
    for (auto& head : rows[b]) {
      for (auto& token : head) {
        token.resize(dim);
        for (double& x : token) x = decode_case::random_stored(c.cache_dtype, rng);
      }
    }
  }
  return rows;
}

// An 8-bit pool dequantized into a contiguous q-dtype copy of the same logical shape (what the
// fwd entry point, which takes 16-bit or fp32 caches only, reads instead).
HostTensor dequantized(const TensorView& pool, KVLayout layout, DType dtype,
                       const std::vector<double>& scale) {
  HostTensor out(dtype, {pool.size(0), pool.size(1), pool.size(2), pool.size(3)});
  int64_t i = 0;
  for (int64_t a = 0; a < pool.size(0); ++a) {
    for (int64_t b = 0; b < pool.size(1); ++b) {
      for (int64_t c = 0; c < pool.size(2); ++c) {
        const int64_t head = layout == KVLayout::kNHD ? c : b;
        for (int64_t d = 0; d < pool.size(3); ++d, ++i) {
          out.set(i, load_element(pool, pool.offset({a, b, c, d})) * scale[head]);
        }
      }
    }
  }
  return out;
}

}  // namespace

std::string describe(const BatchCase& c) {
  std::ostringstream os;
  os << "Hkv " << c.kv_heads << " group " << c.group << " D " << c.head_dim << " Dv " << c.dv()
     << " page " << c.page_size << (c.layout == KVLayout::kNHD ? " NHD" : " HND") << " q "
     << dtype_name(c.q_dtype) << " kv " << dtype_name(c.cache_dtype)
     << (c.per_head_scales ? " per-head scales" : "") << (c.causal ? " causal" : " full")
     << " window (" << c.window.left << ", " << c.window.right << ") softcap " << c.softcap
     << (c.scale ? " scale " + std::to_string(*c.scale) : "") << (c.sinks ? " sinks" : "")
     << " ctas " << c.num_ctas << " step (q/kv):";
  for (size_t b = 0; b < c.q_lens.size(); ++b) os << ' ' << c.q_lens[b] << '/' << c.kv_lens[b];
  return os.str();
}

BatchAttentionConfig config_of(const BatchCase& c) {
  BatchAttentionConfig cfg;
  cfg.num_qo_heads = c.q_heads();
  cfg.num_kv_heads = c.kv_heads;
  cfg.head_dim = c.head_dim;
  cfg.head_dim_v = c.head_dim_v;
  cfg.page_size = c.page_size;
  cfg.kv_layout = c.layout;
  cfg.causal = c.causal;
  cfg.window = c.window;
  cfg.softcap = c.softcap;
  cfg.scale = c.scale;
  cfg.max_batch = c.max_batch;
  cfg.max_tokens = c.max_tokens;
  cfg.num_ctas = c.num_ctas;
  return cfg;
}

std::unique_ptr<BatchStep> make_step(const BatchCase& c, std::mt19937_64& rng) {
  auto s = std::make_unique<BatchStep>();
  s->cu.assign(1, 0);
  for (int q : c.q_lens) s->cu.push_back(s->cu.back() + q);
  s->kv.assign(c.kv_lens.begin(), c.kv_lens.end());
  const int64_t rows = s->total_q() + c.pad_rows, hq = c.q_heads();
  std::uniform_real_distribution<double> u(0.0, 1.0);

  s->q = HostTensor(c.q_dtype, {rows, hq, c.head_dim});
  s->q.fill_bytes(kPoison);
  for (int64_t i = 0; i < s->total_q() * hq * c.head_dim; ++i) s->q.set(i, 4.0 * u(rng) - 2.0);
  s->out = HostTensor(c.q_dtype, {rows, hq, c.dv()});
  s->lse = HostTensor(DType::kFP32, {rows, hq});
  s->out.fill_bytes(kPoison);
  s->lse.fill_bytes(kPoison);

  // K and V over the same pages: two scatters from one generator state shuffle them alike.
  decode_case::CacheSpec spec;
  spec.dtype = c.cache_dtype;
  spec.page_size = c.page_size;
  spec.layout = c.layout;
  spec.pad = c.cache_pad;
  const KVRows k = random_rows(c, c.head_dim, rng), v = random_rows(c, c.dv(), rng);
  std::mt19937_64 pages_rng = rng;
  s->k_cache = decode_case::scatter(k, k, c.kv_lens, c.kv_heads, c.head_dim, spec, pages_rng);
  s->v_cache = decode_case::scatter(v, v, c.kv_lens, c.kv_heads, c.dv(), spec, rng);

  const double nominal = decode_case::nominal_scale(c.cache_dtype);
  for (std::vector<double>* scale : {&s->k_scale, &s->v_scale}) {
    const double tensor = is_8bit(c.cache_dtype) ? nominal * (0.5 + 1.5 * u(rng)) : 1.0;
    for (int h = 0; h < c.kv_heads; ++h) {
      scale->push_back(c.per_head_scales ? float(nominal * (0.5 + 1.5 * u(rng))) : float(tensor));
    }
  }
  BatchArgs& a = s->args;
  if (c.per_head_scales) {
    s->k_heads = HostTensor(DType::kFP32, {c.kv_heads});
    s->v_heads = HostTensor(DType::kFP32, {c.kv_heads});
    for (int h = 0; h < c.kv_heads; ++h) s->k_heads.set(h, s->k_scale[h]);
    for (int h = 0; h < c.kv_heads; ++h) s->v_heads.set(h, s->v_scale[h]);
    a.k_scale.per_head = s->k_heads;
    a.v_scale.per_head = s->v_heads;
  } else {
    a.k_scale.value = float(s->k_scale[0]);
    a.v_scale.value = float(s->v_scale[0]);
  }
  if (c.sinks) {
    s->sinks = HostTensor(DType::kFP32, {hq});
    for (int h = 0; h < hq; ++h) s->sinks.set(h, 3.0 * u(rng) - 1.0);
    if (hq > 1 && u(rng) < 0.5) s->sinks.set(0, -std::numeric_limits<double>::infinity());
    a.sinks = s->sinks;
  }
  s->cu_t = int_tensor(s->cu);
  s->kv_t = int_tensor(s->kv);
  a.q = s->q;
  a.k_cache = s->k_cache->k;
  a.v_cache = s->v_cache->k;
  a.cu_seqlens_q = s->cu_t;
  a.kv_lens = s->kv_t;
  a.page_table = s->k_cache->pages.block_table;
  a.out = s->out;
  a.lse = s->lse;
  return s;
}

Expected per_request_reference(const BatchCase& c, const BatchStep& s) {
  const BatchArgs& a = s.args;
  Expected e{HostTensor(c.q_dtype, {a.out.size(0), a.out.size(1), a.out.size(2)}),
             HostTensor(DType::kFP32, {a.lse.size(0), a.lse.size(1)})};
  e.out.fill_bytes(kPoison);
  e.lse.fill_bytes(kPoison);
  const bool deq = is_8bit(c.cache_dtype);
  const HostTensor k16 =
      deq ? dequantized(a.k_cache, c.layout, c.q_dtype, s.k_scale) : HostTensor();
  const HostTensor v16 =
      deq ? dequantized(a.v_cache, c.layout, c.q_dtype, s.v_scale) : HostTensor();
  const TensorView& table = a.page_table;
  for (size_t b = 0; b < c.q_lens.size(); ++b) {
    const int64_t q_len = c.q_lens[b], first = s.cu[b];
    if (q_len == 0) continue;
    PageTable pages;
    pages.block_table = TensorView(table.data_as<int32_t>() + b * table.stride(0), DType::kInt32,
                                   {1, table.size(1)}, {table.stride(0), 1});
    pages.kv_lens = TensorView(const_cast<int32_t*>(&s.kv[b]), DType::kInt32, {1});
    pages.layout = c.layout;
    const TensorView q = rows_of(a.q, first, q_len);
    const TensorView out = rows_of(e.out, first, q_len), lse = rows_of(e.lse, first, q_len);
    if (q_len <= 16) {
      DecodeArgs d;
      d.q = batch_of_one(q);
      d.k_cache = a.k_cache;
      d.v_cache = a.v_cache;
      d.pages = pages;
      d.k_scale = a.k_scale;
      d.v_scale = a.v_scale;
      d.sinks = a.sinks;
      d.out = batch_of_one(out);
      d.lse = batch_of_one(lse);
      decode(d, kernels::batch::mask_options<DecodeOptions>(config_of(c)));
      continue;
    }
    const HostTensor cu = int_tensor({0, static_cast<int32_t>(q_len)});
    FwdArgs f;
    f.q = q;
    f.k = deq ? k16.view() : a.k_cache;
    f.v = deq ? v16.view() : a.v_cache;
    f.cu_seqlens_q = cu;
    f.pages = pages;
    f.sinks = a.sinks;
    f.out = out;
    f.lse = lse;
    attention_fwd(f, kernels::batch::mask_options<AttentionOptions>(config_of(c)));
  }
  return e;
}

std::string compare(const BatchCase& c, const BatchStep& s, const Expected& e) {
  // The merged rows round once, like the direct ones, from partial states of fp32 precision:
  // within one unit of the last place of the q dtype.
  const double rtol = c.q_dtype == DType::kFP32   ? 2e-5
                      : c.q_dtype == DType::kFP16 ? 1.0 / 1024
                                                  : 1.0 / 128;
  const TensorView out = s.args.out, lse = s.args.lse;
  const int64_t hq = out.size(1), dv = out.size(2);
  std::ostringstream why;
  for (int64_t r = 0; r < out.size(0); ++r) {
    const bool owned = r < s.total_q();
    for (int64_t h = 0; h < hq; ++h) {
      const double got_lse = load_element(lse, lse.offset({r, h}));
      const double want_lse = load_element(e.lse.view(), r * hq + h);
      if (!owned) {
        if (!std::isnan(got_lse)) return (why << "pad row " << r << " lse was written", why.str());
      } else if (std::isinf(want_lse)
                     ? got_lse != want_lse
                     : !(std::fabs(got_lse - want_lse) <= 1e-5 * (1 + std::fabs(want_lse)))) {
        why << "lse[" << r << "][" << h << "] = " << got_lse << ", expected " << want_lse;
        return why.str();
      }
      for (int64_t d = 0; d < dv; ++d) {
        const double got = load_element(out, out.offset({r, h, d}));
        const double want = load_element(e.out.view(), (r * hq + h) * dv + d);
        if (!owned) {
          if (!std::isnan(got)) return (why << "pad row " << r << " out was written", why.str());
        } else if (!(std::fabs(got - want) <= rtol * std::fabs(want) + 1e-6)) {
          why << "out[" << r << "][" << h << "][" << d << "] = " << got << ", expected " << want;
          return why.str();
        }
      }
    }
  }
  return "";
}

}  // namespace hopattn::testing::batch_case
