#include "shrink.hpp"

#include <algorithm>
#include <chrono>
#include <set>
#include <string>

#include "generate.hpp"

namespace hopattn::fuzz {
namespace {

using testing::decode_case::ScaleKind;
using testing::fwd_bwd::Layout;

// Collects candidates: each a legalized copy of the base with one change; changes that legalize
// back to the base (or to an earlier candidate) are dropped. Every change only moves a field
// towards "smaller" (shorter, fewer, off, fp32), so shrinking terminates.
class Candidates {
 public:
  explicit Candidates(const Case& base) : base_(base) { seen_.insert(describe(base)); }

  template <typename Mutate>
  void add(Mutate mutate) {
    Case c = base_;
    mutate(c);
    legalize(c);
    if (seen_.insert(describe(c)).second) list_.push_back(c);
  }

  // The field `get` selects (a count, a length, a size), lowered to lo, to half, by one.
  template <typename Get>
  void smaller(Get get, int64_t lo) {
    Case b = base_;
    const int64_t v = get(b);
    for (int64_t x : {lo, v / 2, v - 1}) {
      if (x >= lo && x < v) add([&](Case& c) { get(c) = x; });
    }
  }

  // The lengths of the list `get` selects: all halved together, then each one lowered alone.
  template <typename Get>
  void lengths(Get get, int64_t lo) {
    add([&](Case& c) {
      for (auto& l : get(c)) l /= 2;
    });
    Case b = base_;
    for (size_t i = 0; i < get(b).size(); ++i) {
      smaller(
          [&, i ](Case & c) -> auto& { return get(c)[i]; }, lo);
    }
  }

  // Requests of `width` consecutive entries in every list `lists` selects: keep only one, or
  // drop one. `fix` restores what depends on the request count.
  template <typename Lists, typename Fix>
  void requests(Lists lists, int width, Fix fix) {
    Case b = base_;
    const int n = int(lists(b).front()->size()) / width;
    for (int r = 0; n > 1 && r < n; ++r) {
      add([&](Case& c) {
        for (auto* l : lists(c)) {
          l->erase(l->begin() + (r + 1) * width, l->end());
          l->erase(l->begin(), l->begin() + r * width);
        }
        fix(c);
      });
    }
    for (int r = 0; n > 1 && r < n; ++r) {
      add([&](Case& c) {
        for (auto* l : lists(c)) l->erase(l->begin() + r * width, l->begin() + (r + 1) * width);
        fix(c);
      });
    }
  }

  std::vector<Case> take() { return std::move(list_); }

 private:
  const Case& base_;
  std::set<std::string> seen_;
  std::vector<Case> list_;
};

void no_fix(Case&) {}

void attn_candidates(Candidates& k) {
  k.requests(
      [](Case& c) {
        return std::vector<std::vector<int64_t>*>{&c.attn.spec.q_lens, &c.attn.spec.kv_lens};
      },
      1, no_fix);
  k.lengths(
      [](Case & c) -> auto& { return c.attn.spec.kv_lens; }, 0);
  k.lengths(
      [](Case & c) -> auto& { return c.attn.spec.q_lens; }, 0);
  k.add([](Case& c) { c.attn.spec.hq /= c.attn.spec.hkv, c.attn.spec.hkv = 1; });
  k.add([](Case& c) { c.attn.spec.hq = c.attn.spec.hkv; });
  k.add([](Case& c) {
    auto& s = c.attn.spec;
    s.hq = s.hkv * std::max<int64_t>(1, s.hq / s.hkv / 2);
  });
  k.smaller(
      [](Case & c) -> auto& { return c.attn.spec.hkv; }, 1);
  k.add([](Case& c) { c.attn.spec.dqk = c.attn.spec.dv = 1; });
  k.add([](Case& c) { c.attn.spec.dqk /= 2, c.attn.spec.dv /= 2; });
  k.smaller(
      [](Case & c) -> auto& { return c.attn.spec.dqk; }, 1);
  k.smaller(
      [](Case & c) -> auto& { return c.attn.spec.dv; }, 1);
  k.add([](Case& c) {
    if (c.attn.build.layout == Layout::kPaged) c.attn.build.layout = Layout::kVarlen;
  });
  k.smaller(
      [](Case & c) -> auto& { return c.attn.build.page_size; }, 1);
  k.add([](Case& c) { c.attn.build.csr = false; });
  k.add([](Case& c) { c.attn.build.kv_layout = KVLayout::kNHD; });
  k.add([](Case& c) { c.attn.build.strided = false; });
  k.add([](Case& c) { c.attn.build.reversed = false; });
  k.add([](Case& c) { c.attn.build.pad_rows = 0; });
  k.add([](Case& c) { c.attn.build.packed_kv = false; });
  k.add([](Case& c) { c.attn.opts.softcap = 0.f; });
  k.add([](Case& c) { c.attn.spec.sinks = false; });
  k.add([](Case& c) { c.attn.no_sink_head0 = false; });
  k.add([](Case& c) { c.attn.spec.q_range = 2.0; });
  k.add([](Case& c) { c.attn.opts.window = {}; });
  k.add([](Case& c) { c.attn.opts.window.left = -1; });
  k.add([](Case& c) { c.attn.opts.window.right = -1; });
  k.smaller(
      [](Case & c) -> auto& { return c.attn.opts.window.left; }, 0);
  k.smaller(
      [](Case & c) -> auto& { return c.attn.opts.window.right; }, 0);
  k.add([](Case& c) { c.attn.opts.causal = false; });
  k.add([](Case& c) { c.attn.opts.scale.reset(); });
  k.add([](Case& c) { c.attn.opts.deterministic = false; });
  k.add([](Case& c) { c.attn.spec.dtype = DType::kFP32; });
}

void decode_candidates(Candidates& k, const Case& base) {
  const int width = base.decode.c.beam_width;
  k.requests([](Case& c) { return std::vector<std::vector<int>*>{&c.decode.c.kv_lens}; }, width,
             [](Case& c) { c.decode.c.batch = int(c.decode.c.kv_lens.size()); });
  // One beam per request: the first beam of each, which holds the shared prefix.
  k.add([](Case& c) {
    auto& d = c.decode.c;
    std::vector<int> lens;
    for (int b = 0; b < d.batch; b += d.beam_width) lens.push_back(d.kv_lens[b]);
    d.kv_lens = lens;
    d.batch = int(lens.size());
    d.beam_width = 1;
  });
  k.add([](Case& c) { c.decode.c.shared_prefix = false; });
  k.lengths(
      [](Case & c) -> auto& { return c.decode.c.kv_lens; }, 0);
  k.smaller(
      [](Case & c) -> auto& { return c.decode.c.q_len; }, 1);
  k.smaller(
      [](Case & c) -> auto& { return c.decode.c.kv_heads; }, 1);
  k.smaller(
      [](Case & c) -> auto& { return c.decode.c.group; }, 1);
  k.smaller(
      [](Case & c) -> auto& { return c.decode.c.head_dim; }, 1);
  k.smaller(
      [](Case & c) -> auto& { return c.decode.c.cache.page_size; }, 1);
  k.smaller(
      [](Case & c) -> auto& { return c.decode.c.cache.extra_pages; }, 0);
  k.add([](Case& c) { c.decode.c.cache.csr = false; });
  k.add([](Case& c) { c.decode.c.cache.layout = KVLayout::kNHD; });
  k.add([](Case& c) { c.decode.c.cache.shuffle = false; });
  k.add([](Case& c) { c.decode.c.cache.pad = 0; });
  k.add([](Case& c) { c.decode.c.padded = false; });
  k.add([](Case& c) { c.decode.c.tree = false; });
  k.add([](Case& c) { c.decode.c.window = {}; });
  k.smaller(
      [](Case & c) -> auto& { return c.decode.c.window.left; }, 0);
  k.smaller(
      [](Case & c) -> auto& { return c.decode.c.window.right; }, 0);
  k.add([](Case& c) { c.decode.c.softcap = 0.f; });
  k.add([](Case& c) { c.decode.c.sinks = false; });
  k.add([](Case& c) { c.decode.no_sink_head0 = false; });
  k.add([](Case& c) { c.decode.c.scale.reset(); });
  k.add([](Case& c) { c.decode.c.causal = false; });
  k.add([](Case& c) { c.decode.c.scale_kind = ScaleKind::kTensor; });
  k.add([](Case& c) { c.decode.c.cache.dtype = c.decode.c.q_dtype; });
  k.add([](Case& c) { c.decode.c.q_dtype = DType::kFP32; });
  k.add([](Case& c) { c.decode.num_splits = 0; });
}

void mla_candidates(Candidates& k) {
  k.requests(
      [](Case& c) {
        return std::vector<std::vector<int>*>{&c.mla.c.q_lens, &c.mla.c.kv_lens};
      },
      1, no_fix);
  k.lengths(
      [](Case & c) -> auto& { return c.mla.c.kv_lens; }, 0);
  k.lengths(
      [](Case & c) -> auto& { return c.mla.c.q_lens; }, 0);
  k.smaller(
      [](Case & c) -> auto& { return c.mla.c.heads; }, 1);
  k.smaller(
      [](Case & c) -> auto& { return c.mla.c.page_size; }, 1);
  k.add([](Case& c) { c.mla.c.csr = false; });
  k.add([](Case& c) { c.mla.c.pad = 0; });
  k.add([](Case& c) { c.mla.c.causal = false; });
  k.add([](Case& c) { c.mla.c.scale.reset(); });
  k.add([](Case& c) { c.mla.c.kv_dtype = c.mla.c.q_dtype, c.mla.c.kv_scale = 1.f; });
  k.add([](Case& c) { c.mla.c.kv_scale = 1.f; });
  k.add([](Case& c) { c.mla.c.q_dtype = DType::kFP32; });
  k.add([](Case& c) { c.mla.num_splits = 0; });
}

void merge_candidates(Candidates& k) {
  k.smaller(
      [](Case & c) -> auto& { return c.merge.tokens; }, 1);
  k.smaller(
      [](Case & c) -> auto& { return c.merge.heads; }, 1);
  k.smaller(
      [](Case & c) -> auto& { return c.merge.dim; }, 1);
  k.smaller(
      [](Case & c) -> auto& { return c.merge.n; }, 1);
  k.add([](Case& c) { c.merge.n_way = false; });
  k.add([](Case& c) { c.merge.empty_percent = 0; });
  k.add([](Case& c) { c.merge.lse_center = 0.0; });
  k.add([](Case& c) { c.merge.lse_spread = 0.0; });
  k.add([](Case& c) { c.merge.pad = 0; });
  k.add([](Case& c) { c.merge.dtype = DType::kFP32; });
  k.add([](Case& c) { c.merge.out_dtype = DType::kFP32; });
}

void batch_candidates(Candidates& k) {
  k.requests(
      [](Case& c) {
        return std::vector<std::vector<int>*>{&c.batch.c.q_lens, &c.batch.c.kv_lens};
      },
      1, no_fix);
  k.lengths(
      [](Case & c) -> auto& { return c.batch.c.kv_lens; }, 0);
  k.lengths(
      [](Case & c) -> auto& { return c.batch.c.q_lens; }, 0);
  k.smaller(
      [](Case & c) -> auto& { return c.batch.c.kv_heads; }, 1);
  k.smaller(
      [](Case & c) -> auto& { return c.batch.c.group; }, 1);
  k.add([](Case& c) { c.batch.c.head_dim = 64; });
  k.add([](Case& c) { c.batch.c.head_dim_v = 0; });
  k.smaller(
      [](Case & c) -> auto& { return c.batch.c.page_size; }, 1);
  k.add([](Case& c) { c.batch.c.layout = KVLayout::kNHD; });
  k.add([](Case& c) { c.batch.c.causal = false; });
  k.add([](Case& c) { c.batch.c.window = {}; });
  k.smaller(
      [](Case & c) -> auto& { return c.batch.c.window.left; }, 0);
  k.smaller(
      [](Case & c) -> auto& { return c.batch.c.window.right; }, 0);
  k.add([](Case& c) { c.batch.c.softcap = 0.f; });
  k.add([](Case& c) { c.batch.c.scale.reset(); });
  k.add([](Case& c) { c.batch.c.sinks = false; });
  k.add([](Case& c) { c.batch.c.per_head_scales = false; });
  k.add([](Case& c) { c.batch.c.cache_dtype = c.batch.c.q_dtype; });
  k.add([](Case& c) { c.batch.c.q_dtype = DType::kFP32; });
  k.add([](Case& c) { c.batch.c.num_ctas = 0; });
  k.add([](Case& c) { c.batch.c.num_ctas = 1; });
  k.add([](Case& c) { c.batch.c.max_batch = c.batch.c.max_tokens = 0; });  // legalized up
  k.add([](Case& c) { c.batch.c.pad_rows = 0; });
  k.add([](Case& c) { c.batch.c.cache_pad = 0; });
}

}  // namespace

std::vector<Case> shrink_candidates(const Case& c) {
  Candidates k(c);
  switch (c.family) {
    case Family::kFwd:
    case Family::kBwd:
      attn_candidates(k);
      break;
    case Family::kDecode:
      decode_candidates(k, c);
      break;
    case Family::kMla:
      mla_candidates(k);
      break;
    case Family::kMerge:
      merge_candidates(k);
      break;
    case Family::kBatch:
      batch_candidates(k);
      break;
  }
  return k.take();
}

Shrunk shrink(const Case& failing, const Report& failure,
              const std::function<Report(const Case&)>& check, int max_tries, double seconds) {
  const auto start = std::chrono::steady_clock::now();
  auto out_of_time = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
           seconds;
  };
  Shrunk s{failing, failure, 0, 0};
  bool progress = true;
  while (progress && s.tried < max_tries && !out_of_time()) {
    progress = false;
    for (const Case& candidate : shrink_candidates(s.c)) {
      if (s.tried >= max_tries || out_of_time()) break;
      ++s.tried;
      const Report r = check(candidate);
      if (r.kind != failure.kind) continue;
      s.c = candidate;
      s.report = r;
      ++s.steps;
      progress = true;
      break;
    }
  }
  return s;
}

}  // namespace hopattn::fuzz
