#include "problem.hpp"

#include <cmath>
#include <random>

namespace hopattn::fuzz {
namespace {

using testing::HostTensor;
using testing::mla_case::padded_view;

// The data stream of a case: its own seed, decorrelated from the stream generate() drew the
// case's shape from.
std::mt19937_64 data_rng(const Case& c) { return std::mt19937_64(c.seed ^ 0xD1B54A32D192ED03ull); }

std::unique_ptr<MergeRun> build_merge(const MergeCase& m, std::mt19937_64& rng) {
  auto r = std::make_unique<MergeRun>();
  std::uniform_real_distribution<double> u(-1.0, 1.0), pct(0.0, 100.0);
  const int T = m.tokens, H = m.heads, n = m.n, D = m.dim;
  auto tensor = [&](DType dtype, std::vector<int64_t> shape) {
    std::vector<int64_t> full = shape;
    full.back() += m.pad;
    r->buffers.emplace_back(dtype, full);
    r->buffers.back().fill_bytes(0xff);
    return padded_view(r->buffers.back(), dtype, shape, m.pad);
  };
  // Every state's view: one [T, n, H, D] tensor, or n == 2 separate [T, H, D] ones.
  std::vector<TensorView> o, lse;
  if (m.n_way) {
    o.push_back(tensor(m.dtype, {T, n, H, D}));
    lse.push_back(tensor(DType::kFP32, {T, n, H}));
  } else {
    for (int k = 0; k < 2; ++k) {
      o.push_back(tensor(m.dtype, {T, H, D}));
      lse.push_back(tensor(DType::kFP32, {T, H}));
    }
  }
  auto o_offset = [&](int t, int k, int h, int d) {
    return m.n_way ? o[0].offset({t, k, h, d}) : o[k].offset({t, h, d});
  };
  auto lse_offset = [&](int t, int k, int h) {
    return m.n_way ? lse[0].offset({t, k, h}) : lse[k].offset({t, h});
  };
  r->states.resize(size_t(T) * H * n);
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      for (int k = 0; k < n; ++k) {
        testing::naive::State& s = r->states[(size_t(t) * H + h) * n + k];
        const bool empty = pct(rng) < m.empty_percent;
        const TensorView& ov = o[m.n_way ? 0 : k];
        const TensorView& lv = lse[m.n_way ? 0 : k];
        store_element(lv, lse_offset(t, k, h),
                      empty ? -INFINITY : m.lse_center + m.lse_spread * u(rng));
        s.lse = load_element(lv, lse_offset(t, k, h));
        for (int d = 0; d < D; ++d) {
          store_element(ov, o_offset(t, k, h, d), empty ? 0.0 : u(rng));
          s.o.push_back(load_element(ov, o_offset(t, k, h, d)));
        }
      }
    }
  }
  const TensorView out = tensor(m.out_dtype, {T, H, D});
  const TensorView lse_out = tensor(DType::kFP32, {T, H});
  if (m.n_way) {
    r->many = MergeNArgs{o[0], lse[0], out, lse_out};
  } else {
    r->two = MergeArgs{o[0], lse[0], o[1], lse[1], out, lse_out};
  }
  return r;
}

}  // namespace

std::unique_ptr<HostProblem> build(const Case& c) {
  auto p = std::make_unique<HostProblem>();
  p->c = c;
  std::mt19937_64 rng = data_rng(c);
  switch (c.family) {
    case Family::kFwd:
    case Family::kBwd:
      p->attn = std::make_unique<testing::fwd_bwd::Problem>(
          testing::fwd_bwd::make_problem(c.attn.spec, rng));
      if (c.attn.no_sink_head0 && c.attn.spec.sinks) p->attn->sinks[0] = -INFINITY;
      p->bundle = std::make_unique<testing::fwd_bwd::Bundle>(*p->attn, c.attn.build);
      break;
    case Family::kDecode:
      p->decode = testing::decode_case::random_run(c.decode.c, rng);
      if (c.decode.no_sink_head0 && c.decode.c.sinks) p->decode->sinks[0] = -INFINITY;
      testing::decode_case::assemble(*p->decode, rng);
      p->decode->out_buf.fill_bytes(0xff);
      p->decode->lse_buf.fill_bytes(0xff);
      p->decode->opts.num_splits = c.decode.num_splits;
      break;
    case Family::kMla:
      p->mla = testing::mla_case::build(c.mla.c, rng);
      p->mla->opts.num_splits = c.mla.num_splits;
      break;
    case Family::kMerge:
      p->merge = build_merge(c.merge, rng);
      break;
    case Family::kBatch:
      p->batch = testing::batch_case::make_step(c.batch.c, rng);
      // The lengths the call reads, also through the pool's page table (invalid.cpp's page and
      // kv_len corruptions write there).
      p->batch->k_cache->pages.kv_lens = p->batch->kv_t;
      break;
  }
  return p;
}

}  // namespace hopattn::fuzz
