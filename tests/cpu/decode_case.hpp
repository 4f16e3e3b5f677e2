// Test-side construction of decode problems: random logical data (stored cache values and their
// scales kept as plain arrays), scattered into a paged cache by the test's own address math, plus
// the matching naive problem. Unused cache slots and pages hold a poison pattern (NaN where the
// dtype has one) so that a read past kv_len, or through a wrong page, shows up in the result.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "hopattn/options.hpp"
#include "naive_decode.hpp"
#include "support/host_tensor.hpp"

namespace hopattn::testing::decode_case {

// rows[b][h][t][d]
using KVRows = std::vector<std::vector<std::vector<std::vector<double>>>>;

enum class ScaleKind { kTensor, kHead };

struct CacheSpec {
  DType dtype = DType::kBF16;
  int page_size = 16;
  KVLayout layout = KVLayout::kNHD;
  bool csr = false;
  bool shuffle = true;  // pages in random physical order (else row-major, in order)
  int extra_pages = 3;  // poisoned pages nobody owns
  int pad = 0;          // extra elements after each head row (pool strides != contiguous)
};

struct DecodeCase {
  int batch = 2, q_len = 1, kv_heads = 2, group = 1, head_dim = 32;
  std::vector<int> kv_lens;  // empty: random in [0, 130]
  CacheSpec cache;
  DType q_dtype = DType::kBF16;
  ScaleKind scale_kind = ScaleKind::kTensor;
  bool causal = true;
  Window window{};
  float softcap = 0.f;
  bool sinks = false;
  bool tree = false;
  std::optional<float> scale;
  int beam_width = 1;
  bool shared_prefix = false;
  bool padded = false;  // q / out / lse as strided views into larger buffers
};

// The byte pattern unused cache slots hold: NaN for the float formats, 127 for int8.
inline uint8_t poison_byte(DType t) {
  switch (t) {
    case DType::kFP8E4M3:
    case DType::kFP8E5M2:
    case DType::kInt8:
      return 0x7f;
    default:
      return 0xff;
  }
}

// The value a `dtype` tensor holds after storing x.
inline double quantize(DType dtype, double x) {
  uint64_t bits = 0;
  const TensorView t(&bits, dtype, {1});
  store_element(t, 0, x);
  return load_element(t, 0);
}

// Random stored cache values: integers for int8, a few binades for fp8, [-1, 1) for 16-bit.
inline double random_stored(DType dtype, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  switch (dtype) {
    case DType::kInt8:
      return std::nearbyint(127.0 * u(rng));
    case DType::kFP8E4M3:
    case DType::kFP8E5M2:
      return quantize(dtype, 8.0 * u(rng));
    default:
      return quantize(dtype, u(rng));
  }
}

// Nominal dequantization scale of a dtype, so that real values land roughly in [-1, 1].
inline double nominal_scale(DType dtype) {
  switch (dtype) {
    case DType::kInt8:
      return 1.0 / 127;
    case DType::kFP8E4M3:
    case DType::kFP8E5M2:
      return 1.0 / 8;
    default:
      return 1.0;
  }
}

// A paged cache built from logical rows by the test's own address math.
struct PagedKV {
  HostTensor k_buf, v_buf;
  TensorView k, v;  // [P, ps, H, D] (NHD) or [P, H, ps, D] (HND), maybe padded
  HostTensor table, indptr, indices, lens;
  PageTable pages;
  std::vector<std::vector<int>> page_list;  // physical pages of each row, in token order
  CacheSpec spec;
  int heads = 0, dim = 0;

  int64_t offset(int page, int slot, int h, int d) const {
    const int64_t row = spec.layout == KVLayout::kNHD
                            ? (int64_t(page) * spec.page_size + slot) * heads + h
                            : (int64_t(page) * heads + h) * spec.page_size + slot;
    return row * (dim + spec.pad) + d;
  }
  int64_t token_offset(int b, int t, int h, int d) const {
    return offset(page_list[b][t / spec.page_size], t % spec.page_size, h, d);
  }
};

inline std::unique_ptr<PagedKV> scatter(const KVRows& k, const KVRows& v,
                                        const std::vector<int>& kv_lens, int heads, int dim,
                                        const CacheSpec& spec, std::mt19937_64& rng) {
  auto kv = std::make_unique<PagedKV>();
  kv->spec = spec;
  kv->heads = heads;
  kv->dim = dim;
  const int batch = static_cast<int>(kv_lens.size());
  const int ps = spec.page_size;
  int used = 0, max_pages = 0;
  for (int len : kv_lens) {
    used += (len + ps - 1) / ps;
    max_pages = std::max(max_pages, (len + ps - 1) / ps);
  }
  const int num_pages = used + spec.extra_pages;
  std::vector<int> physical(num_pages);
  std::iota(physical.begin(), physical.end(), 0);
  if (spec.shuffle) std::shuffle(physical.begin(), physical.end(), rng);

  const std::vector<int64_t> shape =
      spec.layout == KVLayout::kNHD ? std::vector<int64_t>{num_pages, ps, heads, dim + spec.pad}
                                    : std::vector<int64_t>{num_pages, heads, ps, dim + spec.pad};
  kv->k_buf = HostTensor(spec.dtype, shape);
  kv->v_buf = HostTensor(spec.dtype, shape);
  kv->k_buf.fill_bytes(poison_byte(spec.dtype));
  kv->v_buf.fill_bytes(poison_byte(spec.dtype));
  const int64_t d_stride = 1, row_stride = dim + spec.pad;
  const int64_t inner = int64_t(ps) * heads * row_stride;  // elements per page
  const int64_t second =
      spec.layout == KVLayout::kNHD ? int64_t(heads) * row_stride : int64_t(ps) * row_stride;
  kv->k = TensorView(kv->k_buf.data(), spec.dtype, {shape[0], shape[1], shape[2], int64_t(dim)},
                     {inner, second, row_stride, d_stride});
  kv->v = TensorView(kv->v_buf.data(), spec.dtype, {shape[0], shape[1], shape[2], int64_t(dim)},
                     {inner, second, row_stride, d_stride});

  // Page lists; an unused block-table entry names a poisoned page (reading it shows up as NaN).
  int next = 0;
  const int poison_page = spec.extra_pages > 0 ? physical[num_pages - 1] : 0;
  kv->page_list.resize(batch);
  std::vector<int32_t> table(size_t(batch) * (max_pages + 1), poison_page);
  std::vector<int32_t> indptr(1, 0), indices;
  for (int b = 0; b < batch; ++b) {
    const int n = (kv_lens[b] + ps - 1) / ps;
    for (int i = 0; i < n; ++i) {
      const int page = physical[next++];
      kv->page_list[b].push_back(page);
      table[size_t(b) * (max_pages + 1) + i] = page;
      indices.push_back(page);
    }
    indptr.push_back(static_cast<int32_t>(indices.size()));
  }
  for (int b = 0; b < batch; ++b) {
    for (int h = 0; h < heads; ++h) {
      for (int t = 0; t < kv_lens[b]; ++t) {
        for (int d = 0; d < dim; ++d) {
          store_element(kv->k_buf, kv->token_offset(b, t, h, d), k[b][h][t][d]);
          store_element(kv->v_buf, kv->token_offset(b, t, h, d), v[b][h][t][d]);
        }
      }
    }
  }
  kv->lens = int_tensor(std::vector<int32_t>(kv_lens.begin(), kv_lens.end()));
  kv->pages.kv_lens = kv->lens;
  kv->pages.layout = spec.layout;
  if (spec.csr) {
    if (indices.empty()) indices.push_back(0);  // a valid (never read) buffer
    kv->indptr = int_tensor(indptr);
    kv->indices = int_tensor(indices, {int64_t(indptr.back())});
    kv->pages.indptr = kv->indptr;
    kv->pages.indices = kv->indices;
  } else {
    // Declared [B, max_pages] with a row stride of max_pages + 1: strided index tensors.
    kv->table = int_tensor(table, {batch, max_pages + 1});
    kv->pages.block_table =
        TensorView(kv->table.data(), DType::kInt32, {batch, max_pages}, {max_pages + 1, 1});
  }
  return kv;
}

// Everything one decode call needs, with the logical data it was built from.
struct DecodeRun {
  DecodeCase c;
  int q_heads = 0;
  std::vector<int> kv_lens;
  std::vector<double> q;                 // logical [B][L][Hq][D], as stored
  KVRows stored_k, stored_v;             // before scaling
  std::vector<double> k_scale, v_scale;  // per KV head
  std::vector<double> sinks;             // [Hq]
  std::vector<char> tree;                // [B][L][L]
  std::vector<int> shared;               // [B / W]

  HostTensor q_buf, out_buf, lse_buf, sinks_buf, tree_buf, shared_buf, k_heads, v_heads;
  std::unique_ptr<PagedKV> kv;
  DecodeArgs args;
  DecodeOptions opts;
};

// Random logical data for `c` (lengths, q, cache values, scales, sinks, tree, shared prefixes).
inline std::unique_ptr<DecodeRun> random_run(const DecodeCase& c, std::mt19937_64& rng) {
  auto r = std::make_unique<DecodeRun>();
  r->c = c;
  r->q_heads = c.kv_heads * c.group;
  std::uniform_int_distribution<int> len(0, 130);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  r->kv_lens = c.kv_lens;
  if (r->kv_lens.empty()) {
    for (int b = 0; b < c.batch; ++b) r->kv_lens.push_back(len(rng));
  }
  // kv_lens count the q_len new tokens: 0 (an idle slot) or at least q_len. Beams of one request
  // have the same length.
  for (int b = 0; b < c.batch; ++b) {
    if (r->kv_lens[b] > 0) r->kv_lens[b] = std::max(r->kv_lens[b], c.q_len);
    r->kv_lens[b] = r->kv_lens[b - b % c.beam_width];
  }
  const size_t q_elems = size_t(c.batch) * c.q_len * r->q_heads * c.head_dim;
  for (size_t i = 0; i < q_elems; ++i) r->q.push_back(quantize(c.q_dtype, 4.0 * u(rng) - 2.0));
  for (KVRows* rows : {&r->stored_k, &r->stored_v}) {
    rows->resize(c.batch);
    for (int b = 0; b < c.batch; ++b) {
      (*rows)[b].assign(c.kv_heads, std::vector<std::vector<double>>(r->kv_lens[b]));
      for (auto& head : (*rows)[b]) {
        for (auto& tok : head) {
          tok.resize(c.head_dim);
          for (double& x : tok) x = random_stored(c.cache.dtype, rng);
        }
      }
    }
  }
  const double nominal = nominal_scale(c.cache.dtype);
  for (std::vector<double>* s : {&r->k_scale, &r->v_scale}) {
    const double tensor_scale = nominal * (0.5 + 1.5 * u(rng));
    for (int h = 0; h < c.kv_heads; ++h) {
      s->push_back(c.scale_kind == ScaleKind::kHead ? float(nominal * (0.5 + 1.5 * u(rng)))
                                                    : float(tensor_scale));
    }
  }
  if (c.sinks) {
    for (int h = 0; h < r->q_heads; ++h) r->sinks.push_back(float(3.0 * u(rng) - 1.0));
  }
  if (c.tree) {
    for (int i = 0; i < c.batch * c.q_len * c.q_len; ++i) r->tree.push_back(u(rng) < 0.5);
  }
  if (c.shared_prefix) {
    for (int b = 0; b < c.batch; b += c.beam_width) {
      const int n = r->kv_lens[b];
      const double pick = u(rng);
      // Whole cache, nothing, a page boundary, or anywhere: every edge of the prefix rule.
      int s = pick < 0.15 ? n : pick < 0.25 ? 0 : int(u(rng) * (n + 1));
      if (pick >= 0.25 && pick < 0.45) s -= s % c.cache.page_size;
      r->shared.push_back(std::min(s, n));
    }
    if (!r->shared.empty() && r->kv_lens[0] > 0) r->shared[0] = std::max(r->shared[0], 1);
  }
  return r;
}

// A new run with the same logical data (and case); its tensors are built by assemble().
inline std::unique_ptr<DecodeRun> clone_logical(const DecodeRun& r) {
  auto c = std::make_unique<DecodeRun>();
  c->c = r.c;
  c->q_heads = r.q_heads;
  c->kv_lens = r.kv_lens;
  c->q = r.q;
  c->stored_k = r.stored_k;
  c->stored_v = r.stored_v;
  c->k_scale = r.k_scale;
  c->v_scale = r.v_scale;
  c->sinks = r.sinks;
  c->tree = r.tree;
  c->shared = r.shared;
  return c;
}

// Builds the tensors and the DecodeArgs from the logical data (cache scattered per r.c.cache).
inline void assemble(DecodeRun& r, std::mt19937_64& rng) {
  const DecodeCase& c = r.c;
  const int pad = c.padded ? 3 : 0;
  const int64_t B = c.batch, L = c.q_len, H = r.q_heads, D = c.head_dim;
  r.q_buf = HostTensor(c.q_dtype, {B, L, H, D + pad});
  r.q_buf.fill_bytes(0xff);
  const TensorView q(r.q_buf.data(), c.q_dtype, {B, L, H, D},
                     {L * H * (D + pad), H * (D + pad), D + pad, 1});
  for (int64_t i = 0; i < B * L * H * D; ++i) {
    store_element(q, (i / D) * (D + pad) + i % D, r.q[i]);
  }
  r.out_buf = HostTensor(c.q_dtype, {B, L, H, D + pad});
  r.lse_buf = HostTensor(DType::kFP32, {B, L, H + pad});
  r.args = DecodeArgs{};
  r.args.q = q;
  r.args.out = TensorView(r.out_buf.data(), c.q_dtype, {B, L, H, D},
                          {L * H * (D + pad), H * (D + pad), D + pad, 1});
  r.args.lse = TensorView(r.lse_buf.data(), DType::kFP32, {B, L, H}, {L * (H + pad), H + pad, 1});

  r.kv = scatter(r.stored_k, r.stored_v, r.kv_lens, c.kv_heads, c.head_dim, c.cache, rng);
  r.args.k_cache = r.kv->k;
  r.args.v_cache = r.kv->v;
  r.args.pages = r.kv->pages;
  if (c.scale_kind == ScaleKind::kHead) {
    r.k_heads = HostTensor(DType::kFP32, {c.kv_heads});
    r.v_heads = HostTensor(DType::kFP32, {c.kv_heads});
    for (int h = 0; h < c.kv_heads; ++h) {
      r.k_heads.set(h, r.k_scale[h]);
      r.v_heads.set(h, r.v_scale[h]);
    }
    r.args.k_scale.per_head = r.k_heads;
    r.args.v_scale.per_head = r.v_heads;
    r.args.k_scale.value = 7.f;  // must be ignored when per_head is given
    r.args.v_scale.value = 9.f;
  } else {
    r.args.k_scale.value = float(r.k_scale[0]);
    r.args.v_scale.value = float(r.v_scale[0]);
  }
  if (c.sinks) {
    r.sinks_buf = HostTensor(DType::kFP32, {H});
    for (int h = 0; h < H; ++h) r.sinks_buf.set(h, r.sinks[h]);
    r.args.sinks = r.sinks_buf;
  }
  if (c.tree) {
    r.tree_buf = HostTensor(DType::kBool, {B, L, L});
    for (size_t i = 0; i < r.tree.size(); ++i) r.tree_buf.set(int64_t(i), r.tree[i]);
    r.args.tree_mask = r.tree_buf;
  }
  if (c.shared_prefix) {
    r.shared_buf = int_tensor(std::vector<int32_t>(r.shared.begin(), r.shared.end()));
    r.args.shared_kv_lens = r.shared_buf;
  }
  r.opts = DecodeOptions{};
  r.opts.causal = c.causal;
  r.opts.window = c.window;
  r.opts.softcap = c.softcap;
  r.opts.scale = c.scale;
  r.opts.beam_width = c.beam_width;
}

// The naive problem of a run: real values = stored * scale, in the logical order each row sees
// (a beam's shared prefix comes from its request's first beam).
inline naive::DecodeProblem naive_problem(const DecodeRun& r) {
  const DecodeCase& c = r.c;
  naive::DecodeProblem p;
  p.batch = c.batch;
  p.q_len = c.q_len;
  p.q_heads = r.q_heads;
  p.kv_heads = c.kv_heads;
  p.head_dim = c.head_dim;
  p.kv_lens = r.kv_lens;
  p.q = r.q;
  p.k.resize(c.batch);
  p.v.resize(c.batch);
  for (int b = 0; b < c.batch; ++b) {
    const int first = b - b % c.beam_width;
    const int prefix = c.shared_prefix ? r.shared[b / c.beam_width] : 0;
    p.k[b] = r.stored_k[b];
    p.v[b] = r.stored_v[b];
    for (int h = 0; h < c.kv_heads; ++h) {
      for (int t = 0; t < r.kv_lens[b]; ++t) {
        const int src = t < prefix ? first : b;
        for (int d = 0; d < c.head_dim; ++d) {
          p.k[b][h][t][d] = r.stored_k[src][h][t][d] * r.k_scale[h];
          p.v[b][h][t][d] = r.stored_v[src][h][t][d] * r.v_scale[h];
        }
      }
    }
  }
  p.sinks = r.sinks;
  p.tree = c.tree ? r.tree : std::vector<char>{};
  p.causal = c.causal;
  p.window_left = c.window.left;
  p.window_right = c.window.right;
  p.softcap = c.softcap;
  p.scale = c.scale ? double(*c.scale) : 1.0 / std::sqrt(double(c.head_dim));
  return p;
}

// What the call wrote, read back through the output views in logical order: out [B][L][Hq][D],
// lse [B][L][Hq].
inline void read_outputs(const DecodeRun& r, std::vector<double>& out, std::vector<double>& lse) {
  out = gather(r.args.out);
  lse = gather(r.args.lse);
}

}  // namespace hopattn::testing::decode_case
