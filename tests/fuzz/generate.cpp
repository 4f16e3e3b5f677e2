#include "generate.hpp"

#include <algorithm>
#include <initializer_list>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

namespace hopattn::fuzz {
namespace {

using testing::decode_case::ScaleKind;
using testing::fwd_bwd::Layout;

// Per-case work bounds (multiply-adds, case_work()). Sized so that one case, reference and naive
// together, takes a few milliseconds on one core: a CI minute runs hundreds of cases.
constexpr double kFwdWork = 4e6, kBwdWork = 1.5e6, kDecodeWork = 4e6, kMlaWork = 6e6,
                 kMergeWork = 4e5, kBatchWork = 4e6;

class Draw {
 public:
  explicit Draw(uint64_t seed) : rng_(seed) {}
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  template <typename T>
  T pick(std::initializer_list<T> items) {
    return items.begin()[uniform(0, int(items.size()) - 1)];
  }
  template <typename T>
  T pick(const std::vector<T>& items) {
    return items[uniform(0, int(items.size()) - 1)];
  }
  // A sequence length up to `max`: the edges (0, 1, a page boundary and its neighbours) far more
  // often than a uniform draw would give them, since that is where masks and pages go wrong.
  // One in ten is long (up to 4 max), to cross several of the largest pages.
  int length(int max, int page_size = 0) {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng_);
    if (u < 0.1) return uniform(max, 4 * max);
    if (u < 0.18) return 0;
    if (u < 0.26) return 1;
    if (u < 0.5) return uniform(2, std::min(max, 16));
    if (u < 0.85 || page_size <= 1) return uniform(0, max);
    const int pages = uniform(1, std::max(1, max / page_size));
    return std::clamp(pages * page_size + uniform(-1, 1), 0, max);
  }

 private:
  std::mt19937_64 rng_;
};

const std::vector<int> kPageSizes = {1, 2, 3, 5, 8, 13, 16, 32, 64, 100, 128, 256};

Window draw_window(Draw& d) {
  Window w;
  while (w.left < 0 && w.right < 0) {
    w.left = d.pick({-1, 0, 1, 3, 8, 17, 40});
    w.right = d.pick({-1, -1, 0, 1, 2, 5, 20});
  }
  return w;
}

DType draw_io_dtype(Draw& d, const Space& space) {
  if (space.fp32_io && d.chance(0.3)) return DType::kFP32;
  return d.chance(0.55) ? DType::kBF16 : DType::kFP16;
}

// Halves the longest length of `lists` until `work()` fits `bound`, so that the short lengths
// (the edge cases 0, 1, q_len) survive a long neighbour; lengths of 0 and 1 stay as they are.
template <typename T, typename Work>
void fit(std::initializer_list<std::vector<T>*> lists, double bound, const Work& work) {
  while (work() > bound) {
    T* longest = nullptr;
    for (std::vector<T>* lens : lists) {
      for (T& l : *lens) {
        if (!longest || l > *longest) longest = &l;
      }
    }
    if (!longest || *longest <= 1) return;
    *longest = (*longest + 1) / 2;
  }
}

AttnCase generate_attn(Draw& d, bool bwd, const Space& space) {
  AttnCase a;
  auto& s = a.spec;
  auto& b = a.build;
  const double u = d.uniform(0, 99) / 100.0;
  const double paged = bwd ? (space.paged_bwd ? 0.15 : 0.0) : 0.3;
  b.layout = u < paged ? Layout::kPaged : u < paged + 0.3 ? Layout::kDense : Layout::kVarlen;
  s.hkv = d.pick({1, 1, 1, 2, 2, 3, 4});
  s.hq = s.hkv * d.pick({1, 1, 2, 3, 4, 5, 6, 7, 8, 16});
  std::vector<std::pair<int, int>> dims = {{64, 64}, {128, 128}, {256, 256}, {192, 128}};
  if (space.any_head_dim) {
    dims.insert(dims.end(), {{16, 16}, {32, 32}, {8, 24}, {1, 1}, {3, 5}, {40, 40}, {24, 8}});
  }
  std::tie(s.dqk, s.dv) = d.pick(dims);
  s.dtype = draw_io_dtype(d, space);
  a.opts.causal = d.chance(0.5);
  if (d.chance(0.3)) a.opts.window = draw_window(d);
  if (d.chance(0.25)) a.opts.softcap = d.pick({0.5f, 1.f, 2.5f, 10.f, 30.f});
  s.sinks = d.chance(0.25);
  a.no_sink_head0 = s.sinks && d.chance(0.3);
  // Large queries make peaked softmaxes (logits in the hundreds); a negative scale is legal.
  s.q_range = d.chance(0.2) ? 8.0 : 2.0;
  if (d.chance(0.2)) a.opts.scale = d.pick({0.03125f, 0.1f, 0.25f, 0.5f, 1.f, -0.25f});
  a.opts.deterministic = bwd && d.chance(0.5);
  b.page_size = d.pick(kPageSizes);
  b.kv_layout = d.chance(0.5) ? KVLayout::kHND : KVLayout::kNHD;
  b.csr = d.chance(0.5);
  b.strided = space.strided && d.chance(0.25);
  b.reversed = space.strided && d.chance(0.15);
  b.pad_rows = d.chance(0.2) ? d.uniform(1, 3) : 0;
  b.packed_kv = d.chance(0.3);

  const int batch = b.layout == Layout::kDense ? d.uniform(1, 4) : d.uniform(1, 6);
  const int ps = b.layout == Layout::kPaged ? b.page_size : 0;
  for (int r = 0; r < batch; ++r) {
    int q = d.length(96), k = d.length(160, ps);
    // More queries than keys under a causal mask or a window: the first rows see nothing.
    const bool masked = a.opts.causal || a.opts.window.left >= 0 || a.opts.window.right >= 0;
    if (masked && d.chance(0.3) && q < k) std::swap(q, k);
    if (b.layout == Layout::kDense && r > 0) {
      q = int(s.q_lens[0]);
      k = int(s.kv_lens[0]);
    }
    s.q_lens.push_back(q);
    s.kv_lens.push_back(k);
  }
  return a;
}

testing::decode_case::DecodeCase generate_decode(Draw& d, const Space& space, int* num_splits,
                                                 bool* no_sink_head0) {
  testing::decode_case::DecodeCase c;
  c.beam_width = d.chance(0.7) ? 1 : d.pick({2, 3, 4});
  const int requests = d.uniform(1, c.beam_width > 1 ? 3 : 6);
  c.batch = requests * c.beam_width;
  c.shared_prefix = d.chance(c.beam_width > 1 ? 0.7 : 0.1);
  c.q_len = d.chance(0.4) ? 1 : d.uniform(2, 16);
  c.kv_heads = d.pick({1, 1, 2, 2, 3, 4});
  c.group = d.pick({1, 1, 2, 3, 4, 5, 6, 7, 8, 16});
  std::vector<int> dims = {64, 128, 256};
  if (space.any_head_dim) dims.insert(dims.end(), {1, 3, 8, 16, 24, 32, 32, 40});
  c.head_dim = d.pick(dims);
  c.q_dtype = draw_io_dtype(d, space);
  c.cache.dtype =
      d.chance(0.4) ? c.q_dtype : d.pick({DType::kFP8E4M3, DType::kFP8E5M2, DType::kInt8});
  c.scale_kind = d.chance(0.5) ? ScaleKind::kHead : ScaleKind::kTensor;
  c.cache.page_size = d.pick(kPageSizes);
  c.cache.layout = d.chance(0.5) ? KVLayout::kHND : KVLayout::kNHD;
  c.cache.csr = d.chance(0.5);
  c.cache.shuffle = d.chance(0.9);
  c.cache.extra_pages = d.uniform(0, 3);
  c.cache.pad = space.strided && d.chance(0.25) ? d.uniform(1, 3) : 0;
  c.padded = space.strided && d.chance(0.25);
  c.causal = d.chance(0.85);
  c.tree = d.chance(0.2);
  if (d.chance(0.25)) c.window = draw_window(d);
  if (d.chance(0.2)) c.softcap = d.pick({0.5f, 1.f, 2.5f, 10.f, 30.f});
  c.sinks = d.chance(0.25);
  *no_sink_head0 = c.sinks && d.chance(0.3);
  if (d.chance(0.15)) c.scale = d.pick({0.03125f, 0.1f, 0.25f, 0.5f, -0.25f});
  *num_splits = d.chance(0.5) ? 0 : d.pick({1, 2, 3, 4, 7, 16, 64, 256});
  for (int r = 0; r < requests; ++r) {
    const int n = d.chance(0.1) ? 0 : c.q_len + d.length(200, c.cache.page_size);
    for (int w = 0; w < c.beam_width; ++w) c.kv_lens.push_back(n);
  }
  return c;
}

testing::mla_case::MlaCase generate_mla(Draw& d, const Space& space, int* num_splits) {
  testing::mla_case::MlaCase c;
  const int batch = d.uniform(1, 5);
  c.heads = d.pick({1, 2, 3, 4, 8, 16, 16, 22});
  c.page_size = d.pick(kPageSizes);
  c.csr = d.chance(0.5);
  c.causal = d.chance(0.8);
  c.q_dtype = draw_io_dtype(d, space);
  const bool fp8 = d.chance(0.35);
  c.kv_dtype = fp8 ? DType::kFP8E4M3 : c.q_dtype;
  c.kv_scale = fp8 ? d.pick({0.0625f, 0.125f, 0.25f, 0.5f}) : d.chance(0.8) ? 1.f : 0.5f;
  if (d.chance(0.15)) c.scale = d.pick({0.02f, 0.05f, 0.1f, -0.05f});
  c.pad = space.strided && d.chance(0.25) ? d.uniform(1, 3) : 0;
  *num_splits = d.chance(0.5) ? 0 : d.pick({1, 2, 3, 8, 32});
  for (int r = 0; r < batch; ++r) {
    // Decode steps (1..8 queries) mostly, prefill chunks sometimes, now and then no query.
    c.q_lens.push_back(d.chance(0.7) ? d.pick({0, 1, 1, 1, 2, 3, 4, 5, 8}) : d.uniform(9, 48));
    c.kv_lens.push_back(d.length(220, c.page_size));
  }
  return c;
}

MergeCase generate_merge(Draw& d, const Space& space) {
  MergeCase m;
  m.n = d.chance(0.35) ? 2 : d.pick({1, 3, 4, 5, 8, 16});
  m.n_way = m.n != 2 || d.chance(0.4);
  m.tokens = d.uniform(0, 40);
  m.heads = d.uniform(1, 8);
  m.dim = d.pick({1, 3, 8, 16, 64, 128, 512});
  m.dtype = draw_io_dtype(d, space);
  m.out_dtype = draw_io_dtype(d, space);
  m.empty_percent = d.pick({0, 0, 10, 30, 60, 100});
  m.lse_center = d.pick({0.0, 0.0, 5.0, -30.0, 80.0, 1000.0, -1000.0});
  m.lse_spread = d.pick({0.0, 1.0, 4.0, 20.0, 100.0});
  m.pad = space.strided && d.chance(0.25) ? d.uniform(1, 3) : 0;
  return m;
}

// A serving step: idle slots, decodes of 1..4 tokens, speculative decodes of 5..16, prefill
// chunks of 17..200, each over a cache of earlier tokens (often none: a first chunk), on grids
// from one CTA (every item on one walk) to the default (long ranges split and merged).
testing::batch_case::BatchCase generate_batch(Draw& d, const Space& space) {
  testing::batch_case::BatchCase c;
  c.kv_heads = d.pick({1, 1, 2, 2, 3, 4});
  c.group = d.pick({1, 1, 2, 3, 4, 5, 6, 7, 8, 16});
  const std::vector<std::pair<int, int>> dims = {{64, 0},    {128, 0},  {256, 0},
                                                 {128, 128}, {64, 128}, {256, 128}};
  std::tie(c.head_dim, c.head_dim_v) = d.pick(dims);
  c.page_size = d.pick(kPageSizes);
  c.layout = d.chance(0.5) ? KVLayout::kHND : KVLayout::kNHD;
  c.q_dtype = draw_io_dtype(d, space);
  const std::vector<DType> caches =
      space.fp32_io ? std::vector<DType>{DType::kFP8E4M3, DType::kFP8E5M2, DType::kInt8}
                    : std::vector<DType>{DType::kFP8E4M3};
  c.cache_dtype = d.chance(0.5) ? c.q_dtype : d.pick(caches);
  c.per_head_scales = d.chance(0.4);
  c.causal = d.chance(0.8);
  if (d.chance(0.25)) c.window = draw_window(d);
  if (d.chance(0.2)) c.softcap = d.pick({0.5f, 1.f, 2.5f, 10.f, 30.f});
  if (d.chance(0.15)) c.scale = d.pick({0.03125f, 0.1f, 0.25f, 0.5f, -0.25f});
  c.sinks = d.chance(0.25);
  c.num_ctas = d.pick({0, 0, 0, 1, 2, 7, 132});
  c.pad_rows = d.chance(0.3) ? d.uniform(1, 3) : 0;
  c.cache_pad = space.strided && d.chance(0.2) ? d.uniform(1, 3) : 0;
  const int batch = d.uniform(1, 8);
  int total = 0;
  for (int r = 0; r < batch; ++r) {
    const int kind = d.uniform(0, 9);
    const int q = kind == 0   ? 0
                  : kind <= 4 ? d.uniform(1, 4)
                  : kind <= 6 ? d.uniform(5, 16)
                              : d.uniform(17, 200);
    const int cached = d.chance(0.25) ? 0 : d.length(300, c.page_size);
    c.q_lens.push_back(q);
    c.kv_lens.push_back(q + cached);
    total += q;
  }
  // Limits at the step, or above it (the planner's buffers sized for more than it gets).
  c.max_batch = d.chance(0.5) ? batch : batch + d.uniform(1, 300);
  c.max_tokens = std::max(1, d.chance(0.5) ? total : total + d.uniform(1, 20000));
  return c;
}

}  // namespace

double case_work(const Case& c) {
  double w = 0;
  switch (c.family) {
    case Family::kFwd:
    case Family::kBwd: {
      const auto& s = c.attn.spec;
      for (size_t b = 0; b < s.q_lens.size(); ++b) w += double(s.q_lens[b]) * s.kv_lens[b];
      return w * s.hq * (s.dqk + s.dv);
    }
    case Family::kDecode: {
      const auto& d = c.decode.c;
      for (int n : d.kv_lens) w += n;
      return w * d.q_len * d.kv_heads * d.group * 2.0 * d.head_dim;
    }
    case Family::kMla: {
      const auto& m = c.mla.c;
      for (size_t b = 0; b < m.q_lens.size(); ++b) w += double(m.q_lens[b]) * m.kv_lens[b];
      return w * m.heads * (2 * testing::mla_case::kLatent + testing::mla_case::kRope);
    }
    case Family::kMerge: {
      const auto& m = c.merge;
      return double(m.tokens) * m.heads * m.n * m.dim;
    }
    case Family::kBatch: {
      const auto& b = c.batch.c;
      for (size_t r = 0; r < b.q_lens.size(); ++r) w += double(b.q_lens[r]) * b.kv_lens[r];
      return w * b.q_heads() * (b.head_dim + b.dv());
    }
  }
  return w;
}

Case generate(Family family, uint64_t seed, const Space& space) {
  Case c;
  c.family = family;
  c.seed = seed;
  Draw d(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(family));
  double bound = 0;
  switch (family) {
    case Family::kFwd:
    case Family::kBwd: {
      c.attn = generate_attn(d, family == Family::kBwd, space);
      bound = family == Family::kBwd ? kBwdWork : kFwdWork;
      auto& s = c.attn.spec;
      fit({&s.q_lens, &s.kv_lens}, bound * space.work_scale, [&] { return case_work(c); });
      break;
    }
    case Family::kDecode: {
      auto& dc = c.decode.c;
      dc = generate_decode(d, space, &c.decode.num_splits, &c.decode.no_sink_head0);
      const double limit = kDecodeWork * space.work_scale;
      fit({&dc.kv_lens}, limit, [&] { return case_work(c); });
      // kv_lens stay >= q_len: a long draft over many heads fits by fewer heads.
      while (case_work(c) > limit && dc.group > 1) dc.group /= 2;
      break;
    }
    case Family::kMla: {
      auto& m = c.mla.c;
      m = generate_mla(d, space, &c.mla.num_splits);
      fit({&m.q_lens, &m.kv_lens}, kMlaWork * space.work_scale, [&] { return case_work(c); });
      break;
    }
    case Family::kMerge:
      c.merge = generate_merge(d, space);
      while (case_work(c) > kMergeWork * space.work_scale && c.merge.tokens > 1) {
        c.merge.tokens = (c.merge.tokens + 1) / 2;
      }
      break;
    case Family::kBatch: {
      auto& b = c.batch.c;
      b = generate_batch(d, space);
      // Lengths halved together keep kv_len >= q_len (legalize restores it where a halving of
      // the longest broke it).
      fit({&b.q_lens, &b.kv_lens}, kBatchWork * space.work_scale, [&] { return case_work(c); });
      break;
    }
  }
  legalize(c);
  return c;
}

void legalize(Case& c) {
  switch (c.family) {
    case Family::kFwd:
    case Family::kBwd: {
      auto& s = c.attn.spec;
      auto& b = c.attn.build;
      s.hkv = std::max<int64_t>(1, s.hkv);
      s.hq = std::max<int64_t>(s.hkv, s.hq - s.hq % s.hkv);
      s.dqk = std::max<int64_t>(1, s.dqk);
      s.dv = std::max<int64_t>(1, s.dv);
      if (s.q_lens.empty()) s.q_lens = {1};
      s.kv_lens.resize(s.q_lens.size(), s.kv_lens.empty() ? 1 : s.kv_lens.back());
      for (size_t r = 0; r < s.q_lens.size(); ++r) {
        s.q_lens[r] = std::max<int64_t>(0, s.q_lens[r]);
        s.kv_lens[r] = std::max<int64_t>(0, s.kv_lens[r]);
        // Dense tensors have one length for all requests.
        if (b.layout == Layout::kDense) s.q_lens[r] = s.q_lens[0], s.kv_lens[r] = s.kv_lens[0];
      }
      b.page_size = std::clamp<int64_t>(b.page_size, 1, 256);
      b.pad_rows = b.layout == Layout::kDense ? 0 : std::max<int64_t>(0, b.pad_rows);
      // Packing (one [.., 2, Hkv, D] buffer) needs one head dim, plain strides, no pages.
      b.packed_kv =
          b.packed_kv && s.dqk == s.dv && !b.strided && !b.reversed && b.layout != Layout::kPaged;
      b.shared_prefix_pages = 0;
      b.page_seed = c.seed;
      auto& o = c.attn.opts;
      o.window.left = std::max(-1, o.window.left);
      o.window.right = std::max(-1, o.window.right);
      o.softcap = std::max(0.f, o.softcap);
      break;
    }
    case Family::kDecode: {
      auto& d = c.decode.c;
      d.beam_width = std::max(1, d.beam_width);
      d.batch = std::max(d.beam_width, d.batch - d.batch % d.beam_width);
      d.q_len = std::clamp(d.q_len, 1, 16);
      d.kv_heads = std::max(1, d.kv_heads);
      d.group = std::max(1, d.group);
      d.head_dim = std::max(1, d.head_dim);
      d.kv_lens.resize(d.batch, d.kv_lens.empty() ? d.q_len : d.kv_lens.back());
      for (int b = 0; b < d.batch; ++b) {
        int& n = d.kv_lens[b];
        n = b % d.beam_width ? d.kv_lens[b - 1] : n <= 0 ? 0 : std::max(n, d.q_len);
      }
      d.cache.page_size = std::clamp(d.cache.page_size, 1, 256);
      d.cache.extra_pages = std::max(0, d.cache.extra_pages);
      d.cache.pad = std::max(0, d.cache.pad);
      // A cache that is not 8-bit holds q's own type.
      if (dtype_size(d.cache.dtype) != 1) d.cache.dtype = d.q_dtype;
      d.window.left = std::max(-1, d.window.left);
      d.window.right = std::max(-1, d.window.right);
      d.softcap = std::max(0.f, d.softcap);
      c.decode.num_splits = std::clamp(c.decode.num_splits, 0, 256);
      break;
    }
    case Family::kMla: {
      auto& m = c.mla.c;
      if (m.q_lens.empty()) m.q_lens = {1};
      m.kv_lens.resize(m.q_lens.size(), m.kv_lens.empty() ? 1 : m.kv_lens.back());
      for (int& n : m.q_lens) n = std::max(0, n);
      for (int& n : m.kv_lens) n = std::max(0, n);
      m.heads = std::max(1, m.heads);
      m.page_size = std::clamp(m.page_size, 1, 256);
      if (m.kv_dtype != DType::kFP8E4M3) m.kv_dtype = m.q_dtype;
      if (!(m.kv_scale > 0.f)) m.kv_scale = 1.f;
      m.pad = std::max(0, m.pad);
      c.mla.num_splits = std::max(0, c.mla.num_splits);
      break;
    }
    case Family::kBatch: {
      auto& b = c.batch.c;
      if (b.q_lens.empty()) b.q_lens = {1};
      b.kv_lens.resize(b.q_lens.size(), b.kv_lens.empty() ? 1 : b.kv_lens.back());
      int total = 0;
      for (size_t r = 0; r < b.q_lens.size(); ++r) {
        b.q_lens[r] = std::max(0, b.q_lens[r]);
        b.kv_lens[r] = std::max(b.kv_lens[r], b.q_lens[r]);  // kv_len counts the new tokens
        total += b.q_lens[r];
      }
      b.kv_heads = std::max(1, b.kv_heads);
      b.group = std::max(1, b.group);
      // Head dims the planner takes: 64, 128 or 256 (a smaller value rounds up to one of them).
      auto head_dim = [](int d) { return d <= 64 ? 64 : d <= 128 ? 128 : 256; };
      b.head_dim = head_dim(b.head_dim);
      b.head_dim_v = b.head_dim_v <= 0 ? 0 : head_dim(b.head_dim_v);
      b.page_size = std::clamp(b.page_size, 1, 256);
      if (dtype_size(b.cache_dtype) != 1) b.cache_dtype = b.q_dtype;
      b.window.left = std::max(-1, b.window.left);
      b.window.right = std::max(-1, b.window.right);
      b.softcap = std::max(0.f, b.softcap);
      b.num_ctas = std::max(0, b.num_ctas);
      b.max_batch = std::max(b.max_batch, int(b.q_lens.size()));
      b.max_tokens = std::max({b.max_tokens, total, 1});
      b.pad_rows = std::max(0, b.pad_rows);
      b.cache_pad = std::max(0, b.cache_pad);
      break;
    }
    case Family::kMerge: {
      auto& m = c.merge;
      m.n = std::max(1, m.n);
      if (m.n != 2) m.n_way = true;
      m.tokens = std::max(0, m.tokens);
      m.heads = std::max(1, m.heads);
      m.dim = std::max(1, m.dim);
      m.empty_percent = std::clamp(m.empty_percent, 0, 100);
      m.pad = std::max(0, m.pad);
      break;
    }
  }
}

}  // namespace hopattn::fuzz
