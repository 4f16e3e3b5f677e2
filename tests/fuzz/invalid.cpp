#include "invalid.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "generate.hpp"
#include "hopattn/error.hpp"

namespace hopattn::fuzz {
namespace {

using testing::fwd_bwd::Layout;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void put(const TensorView& t, std::initializer_list<int64_t> index, double value) {
  store_element(t, t.offset(index), value);
}
int64_t get(const TensorView& t, std::initializer_list<int64_t> index) {
  return static_cast<int64_t>(load_element(t, t.offset(index)));
}

// ---------------------------------------------------------------- what a case has

bool paged(const Case& c) {
  return c.family == Family::kDecode || c.family == Family::kMla || c.family == Family::kBatch ||
         ((c.family == Family::kFwd || c.family == Family::kBwd) &&
          c.attn.build.layout == Layout::kPaged);
}
// Query rows given by cu_seqlens_q (varlen q; a paged fwd's q is varlen too).
bool varlen_q(const Case& c) {
  return c.family == Family::kMla || c.family == Family::kBatch ||
         ((c.family == Family::kFwd || c.family == Family::kBwd) &&
          c.attn.build.layout != Layout::kDense);
}
bool varlen_k(const Case& c) {
  return (c.family == Family::kFwd || c.family == Family::kBwd) &&
         c.attn.build.layout == Layout::kVarlen;
}
int requests(const Case& c) {
  if (c.family == Family::kDecode) return c.decode.c.batch;
  if (c.family == Family::kMla) return int(c.mla.c.q_lens.size());
  if (c.family == Family::kBatch) return int(c.batch.c.q_lens.size());
  return int(c.attn.spec.q_lens.size());
}
// The first request with cached keys (-1: none).
int request_with_keys(const Case& c) {
  for (int b = 0; b < requests(c); ++b) {
    const int64_t n = c.family == Family::kDecode  ? c.decode.c.kv_lens[b]
                      : c.family == Family::kMla   ? c.mla.c.kv_lens[b]
                      : c.family == Family::kBatch ? c.batch.c.kv_lens[b]
                                                   : c.attn.spec.kv_lens[b];
    if (n > 0) return b;
  }
  return -1;
}
bool attn_or_decode(const Case& c) {
  return c.family == Family::kFwd || c.family == Family::kBwd || c.family == Family::kDecode;
}
// Window and softcap options (fwd, bwd, decode, batch).
bool masked_family(const Case& c) { return attn_or_decode(c) || c.family == Family::kBatch; }
bool sinks(const Case& c) {
  if (c.family == Family::kBatch) return c.batch.c.sinks;
  return c.family == Family::kDecode ? c.decode.c.sinks : attn_or_decode(c) && c.attn.spec.sinks;
}
// A request of the batch step with q tokens (-1: none).
int batch_request_with_queries(const Case& c) {
  if (c.family != Family::kBatch) return -1;
  for (size_t b = 0; b < c.batch.c.q_lens.size(); ++b) {
    if (c.batch.c.q_lens[b] > 0) return int(b);
  }
  return -1;
}
int batch_tokens(const Case& c) {
  int n = 0;
  for (int q : c.batch.c.q_lens) n += q;
  return n;
}

// ---------------------------------------------------------------- where a problem keeps it

struct Pages {
  PageTable* table;
  int64_t num_pages, page_size;
};
Pages pages_of(HostProblem& p) {
  auto pool = [](PageTable* t, const TensorView& k) {
    const bool nhd = t->layout == KVLayout::kNHD;
    return Pages{t, k.size(0), k.rank() == 3 || nhd ? k.size(1) : k.size(2)};
  };
  if (p.decode) return pool(&p.decode->args.pages, p.decode->args.k_cache);
  if (p.mla) return pool(&p.mla->args.pages, p.mla->args.ckv);
  // The batch step's pages: its K pool's table, whose kv_lens are the call's (problem.cpp).
  if (p.batch) return pool(&p.batch->k_cache->pages, p.batch->args.k_cache);
  return pool(&p.bundle->fwd.pages, p.bundle->fwd.k);
}
// Pages of request b: table row b, or its CSR range.
int64_t page_slots(const Pages& pg, int64_t b) {
  const PageTable& t = *pg.table;
  if (t.block_table.defined()) return t.block_table.size(1);
  return get(t.indptr, {b + 1}) - get(t.indptr, {b});
}
const TensorView& cu_seqlens_q(HostProblem& p) {
  if (p.batch) return p.batch->args.cu_seqlens_q;
  return p.mla ? p.mla->args.cu_seqlens_q : p.bundle->fwd.cu_seqlens_q;
}
int64_t q_rows(HostProblem& p) {
  if (p.batch) return p.batch->args.q.size(0);
  return p.mla ? p.mla->args.q_nope.size(0) : p.bundle->fwd.q.size(0);
}
const TensorView& sinks_of(HostProblem& p) {
  if (p.batch) return p.batch->args.sinks;
  return p.decode ? p.decode->args.sinks : p.bundle->fwd.sinks;
}
// The batch family's options are its configuration's, which the API builds from p.c.
std::optional<float>& scale_of(HostProblem& p) {
  if (p.batch) return p.c.batch.c.scale;
  return p.decode ? p.decode->opts.scale : p.mla ? p.mla->opts.scale : p.c.attn.opts.scale;
}
Window& window_of(HostProblem& p) {
  if (p.batch) return p.c.batch.c.window;
  return p.decode ? p.decode->opts.window : p.c.attn.opts.window;
}
float& softcap_of(HostProblem& p) {
  if (p.batch) return p.c.batch.c.softcap;
  return p.decode ? p.decode->opts.softcap : p.c.attn.opts.softcap;
}
KVScale& k_scale_of(HostProblem& p) {
  return p.batch ? p.batch->args.k_scale : p.decode->args.k_scale;
}
KVScale& v_scale_of(HostProblem& p) {
  return p.batch ? p.batch->args.v_scale : p.decode->args.v_scale;
}

// Output views of a call, by reference so a corruption can replace one.
TensorView& out_of(HostProblem& p) {
  if (p.batch) return p.batch->args.out;
  if (p.decode) return p.decode->args.out;
  if (p.mla) return p.mla->args.out;
  if (p.merge) return p.c.merge.n_way ? p.merge->many.out : p.merge->two.out;
  return p.bundle->fwd.out;
}
TensorView& lse_of(HostProblem& p) {
  if (p.batch) return p.batch->args.lse;
  if (p.decode) return p.decode->args.lse;
  if (p.mla) return p.mla->args.lse;
  if (p.merge) return p.c.merge.n_way ? p.merge->many.lse_out : p.merge->two.lse;
  return p.bundle->fwd.lse;
}
// A contiguous view shaped like `like` at the lowest address of `t` (whose elements must span at
// least as many bytes). A negative stride puts t.data() above that address, not at it.
TensorView view_over(const TensorView& t, DType dtype, const TensorView& like) {
  int64_t low = 0;
  for (int i = 0; i < t.rank(); ++i) {
    if (t.size(i) > 0) low += std::min<int64_t>(0, (t.size(i) - 1) * t.stride(i));
  }
  std::vector<int64_t> shape(like.rank());
  for (int i = 0; i < like.rank(); ++i) shape[i] = like.size(i);
  char* base = static_cast<char*>(t.data()) + low * dtype_size(t.dtype());
  return TensorView(base, dtype, like.rank(), shape.data(), nullptr);
}

// Whether out has elements (empty tensors share no memory) and its bytes can hold lse (fp32,
// one value per row of out's last dim).
bool out_holds_lse(const Case& c) {
  auto any = [](const auto& lens) {
    for (auto n : lens) {
      if (n > 0) return true;
    }
    return false;
  };
  switch (c.family) {
    case Family::kDecode:
      return c.decode.c.head_dim * dtype_size(c.decode.c.q_dtype) >= 4;
    case Family::kMla:
      return any(c.mla.c.q_lens);
    case Family::kMerge:
      return c.merge.tokens > 0 && c.merge.dim * dtype_size(c.merge.out_dtype) >= 4;
    case Family::kBatch:
      return any(c.batch.c.q_lens) && c.batch.c.dv() * dtype_size(c.batch.c.q_dtype) >= 4;
    default:
      return any(c.attn.spec.q_lens) && c.attn.spec.dv * dtype_size(c.attn.spec.dtype) >= 4;
  }
}

struct Corruption {
  const char* name;
  std::function<bool(const Case&)> applies;
  std::function<void(HostProblem&)> apply;
};

const std::vector<Corruption>& all_corruptions() {
  static const std::vector<Corruption> list = {
      {"page_index_past_pool", [](const Case& c) { return paged(c) && request_with_keys(c) >= 0; },
       [](HostProblem& p) {
         const Pages pg = pages_of(p);
         const int64_t b = request_with_keys(p.c);
         const PageTable& t = *pg.table;
         if (t.block_table.defined()) {
           put(t.block_table, {b, 0}, double(pg.num_pages));
         } else {
           put(t.indices, {get(t.indptr, {b})}, double(pg.num_pages));
         }
       }},
      {"kv_len_past_pages", paged,
       [](HostProblem& p) {
         const Pages pg = pages_of(p);
         put(pg.table->kv_lens, {0}, double(page_slots(pg, 0) * pg.page_size + 1));
       }},
      {"kv_len_negative", paged,
       [](HostProblem& p) { put(pages_of(p).table->kv_lens, {0}, -1.0); }},
      {"cu_seqlens_q_past_rows", varlen_q,
       [](HostProblem& p) {
         const TensorView& cu = cu_seqlens_q(p);
         put(cu, {cu.size(0) - 1}, double(q_rows(p) + 1));
       }},
      {"cu_seqlens_q_first_not_zero", varlen_q,
       [](HostProblem& p) { put(cu_seqlens_q(p), {0}, 1.0); }},
      {"cu_seqlens_q_decreasing", [](const Case& c) { return varlen_q(c) && requests(c) >= 2; },
       [](HostProblem& p) {
         const TensorView& cu = cu_seqlens_q(p);
         put(cu, {1}, double(get(cu, {2}) + 1));
       }},
      {"cu_seqlens_k_past_rows", varlen_k,
       [](HostProblem& p) {
         const TensorView& cu = p.bundle->fwd.cu_seqlens_k;
         put(cu, {cu.size(0) - 1}, double(p.bundle->fwd.k.size(0) + 1));
       }},
      {"sink_nan", sinks, [](HostProblem& p) { put(sinks_of(p), {0}, kNaN); }},
      {"sink_plus_inf", sinks, [](HostProblem& p) { put(sinks_of(p), {0}, INFINITY); }},
      {"scale_zero", [](const Case& c) { return c.family != Family::kMerge; },
       [](HostProblem& p) { scale_of(p) = 0.f; }},
      {"scale_nan", [](const Case& c) { return c.family != Family::kMerge; },
       [](HostProblem& p) { scale_of(p) = float(kNaN); }},
      {"window_below_minus_one", masked_family, [](HostProblem& p) { window_of(p).left = -2; }},
      {"softcap_negative", masked_family, [](HostProblem& p) { softcap_of(p) = -1.f; }},
      {"kv_len_below_q_len",
       [](const Case& c) {
         return c.family == Family::kDecode && c.decode.c.q_len > 1 && request_with_keys(c) >= 0;
       },
       [](HostProblem& p) {
         const int64_t b = request_with_keys(p.c);
         put(p.decode->args.pages.kv_lens, {b}, 1.0);
       }},
      {"k_scale_not_positive",
       [](const Case& c) { return c.family == Family::kDecode || c.family == Family::kBatch; },
       [](HostProblem& p) {
         KVScale& k = k_scale_of(p);
         if (k.per_head.defined()) {
           put(k.per_head, {0}, 0.0);
         } else {
           k.value = -1.f;
         }
       }},
      {"v_scale_nan",
       [](const Case& c) { return c.family == Family::kDecode || c.family == Family::kBatch; },
       [](HostProblem& p) {
         KVScale& v = v_scale_of(p);
         if (v.per_head.defined()) {
           put(v.per_head, {0}, kNaN);
         } else {
           v.value = float(kNaN);
         }
       }},
      // Batch: a request's kv_len (which counts its q tokens) below its q tokens.
      {"batch_kv_len_below_q_len", [](const Case& c) { return batch_request_with_queries(c) >= 0; },
       [](HostProblem& p) {
         const int b = batch_request_with_queries(p.c);
         put(p.batch->args.kv_lens, {b}, double(p.c.batch.c.q_lens[b] - 1));
       }},
      // Batch: more requests, or more q tokens, than the BatchAttention was made for.
      {"batch_past_max_batch",
       [](const Case& c) { return c.family == Family::kBatch && c.batch.c.q_lens.size() >= 2; },
       [](HostProblem& p) { p.c.batch.c.max_batch = int(p.c.batch.c.q_lens.size()) - 1; }},
      {"batch_past_max_tokens",
       [](const Case& c) { return c.family == Family::kBatch && batch_tokens(c) >= 2; },
       [](HostProblem& p) { p.c.batch.c.max_tokens = batch_tokens(p.c) - 1; }},
      // Batch: run() over lengths other than the ones plan() saw.
      {"batch_lengths_changed_after_plan",
       [](const Case& c) { return batch_request_with_queries(c) >= 0; },
       [](HostProblem& p) {
         p.between_plan_and_run = [&p] {
           const int b = batch_request_with_queries(p.c);
           put(p.batch->args.kv_lens, {b}, double(get(p.batch->args.kv_lens, {b}) + 1));
         };
       }},
      {"shared_prefix_past_kv_len",
       [](const Case& c) { return c.family == Family::kDecode && c.decode.c.shared_prefix; },
       [](HostProblem& p) {
         put(p.decode->args.shared_kv_lens, {0}, double(p.decode->kv_lens[0] + 1));
       }},
      {"beam_width_not_dividing_batch", [](const Case& c) { return c.family == Family::kDecode; },
       [](HostProblem& p) { p.decode->opts.beam_width = p.decode->c.batch + 1; }},
      {"num_splits_past_256", [](const Case& c) { return c.family == Family::kDecode; },
       [](HostProblem& p) { p.decode->opts.num_splits = 257; }},
      {"kv_scale_zero", [](const Case& c) { return c.family == Family::kMla; },
       [](HostProblem& p) { p.mla->args.kv_scale = 0.f; }},
      // Outputs that share memory: lse written over out's bytes.
      {"lse_aliases_out", out_holds_lse,
       [](HostProblem& p) {
         TensorView& lse = lse_of(p);
         lse = view_over(out_of(p), DType::kFP32, lse);
         if (p.bundle) p.bundle->bwd.fwd.lse = lse;
       }},
      // In-place merging is not supported: out over the first state's o.
      {"merge_out_aliases_input",
       [](const Case& c) {
         return c.family == Family::kMerge && c.merge.dtype == c.merge.out_dtype &&
                c.merge.tokens > 0;
       },
       [](HostProblem& p) {
         MergeRun& m = *p.merge;
         TensorView& out = out_of(p);
         out = view_over(p.c.merge.n_way ? m.many.o : m.two.o_a, out.dtype(), out);
       }},
  };
  return list;
}

const Corruption* find(const std::string& name) {
  for (const Corruption& k : all_corruptions()) {
    if (name == k.name) return &k;
  }
  return nullptr;
}

// Every output of the problem's call, for the "nothing written" rule.
std::vector<TensorView> outputs_of(HostProblem& p) {
  if (!p.bundle) return {out_of(p), lse_of(p)};
  const auto& t = *p.bundle;
  return {t.fwd.out, t.fwd.lse, t.bwd.dq, t.bwd.dk, t.bwd.dv, t.bwd.dsinks};
}

// What every output holds (an alias of an input included), to tell whether a call wrote any.
std::vector<std::vector<double>> snapshot(HostProblem& p) {
  std::vector<std::vector<double>> s;
  for (const TensorView& t : outputs_of(p))
    s.push_back(t.defined() ? testing::gather(t) : std::vector<double>{});
  return s;
}
bool same(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    for (size_t j = 0; j < a[i].size(); ++j) {
      if (!(a[i][j] == b[i][j] || (std::isnan(a[i][j]) && std::isnan(b[i][j])))) return false;
    }
  }
  return true;
}

}  // namespace

std::vector<std::string> corruption_names() {
  std::vector<std::string> names;
  for (const Corruption& k : all_corruptions()) names.push_back(k.name);
  return names;
}

std::vector<std::string> corruptions_for(const Case& c) {
  std::vector<std::string> names;
  for (const Corruption& k : all_corruptions()) {
    if (k.applies(c)) names.push_back(k.name);
  }
  return names;
}

Case generate_invalid(Family family, uint64_t seed) {
  Case c = generate(family, seed);
  const std::vector<std::string> names = corruptions_for(c);
  if (!names.empty()) {
    std::mt19937_64 rng(seed ^ 0xA0761D6478BD642Full);
    c.corrupt = names[std::uniform_int_distribution<size_t>(0, names.size() - 1)(rng)];
  }
  return c;
}

Report run_rejection(const Case& c, const Implementation& api) {
  const Corruption* k = find(c.corrupt);
  if (!k) return {Report::Kind::kCrash, "unknown corruption '" + c.corrupt + "'"};
  if (!k->applies(c)) return {};
  try {
    std::unique_ptr<HostProblem> p = build(c);
    k->apply(*p);
    const auto before = snapshot(*p);
    try {
      api.run(*p);
    } catch (const Error&) {
      if (same(before, snapshot(*p))) return {};
      return {Report::Kind::kMismatch,
              api.name + " rejected " + c.corrupt + " but wrote an output first"};
    }
    return {Report::Kind::kAccepted, api.name + " accepted a case with " + c.corrupt};
  } catch (const std::exception& e) {
    return {Report::Kind::kCrash, std::string("threw other than hopattn::Error: ") + e.what()};
  }
}

Report check_case(const Case& c, const Implementation& a, const Implementation& b,
                  const Tolerance& tol) {
  return c.corrupt.empty() ? run_pair(c, a, b, tol) : run_rejection(c, a);
}

::testing::AssertionResult line_passes(const std::string& line, const Implementation& a,
                                       const Implementation& b, const Tolerance& tol) {
  Case c = parse(line);
  legalize(c);
  const Report r = check_case(c, a, b, tol);
  if (r.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << describe(c) << "\n"
                                       << kind_name(r.kind) << ": " << r.detail;
}

}  // namespace hopattn::fuzz
