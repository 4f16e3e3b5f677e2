// The MLA kernel (src/kernels/mla) through the public hopattn::mla against the CPU reference
// (double precision, fp32 outputs) on fresh seeded random data: the odd-shape grid of the family
// (batch 1/17/128, q_len 1/2/4/8/239, heads 16/24/64/128, kv_len 0/1/113/4097, pages 1/16/64,
// bf16/fp16, splits forced to 1, automatic and many, block table and CSR, one combined
// [pages, page, 576] cache seen as the two views ckv = [..., :512] and kpe = [..., 512:]).
// Every cache slot a request does not own (past kv_len in its last page, unused pages, the
// target of unused block-table entries) holds NaN, and outputs are poisoned before each run;
// each case runs twice and the two results must be bitwise equal.
//
// Error bound: inputs are exact on both sides; the kernel rounds P to q's dtype before P V and
// rounds the output, as a plain 16-bit implementation (fp32 softmax, 16-bit P, fp32
// accumulation) does. With u the unit roundoff (bf16 2^-8, fp16 2^-11) and vmax = max |ckv|:
// |o - o_exact| <= 2 u vmax; the bound is twice that, 4 u vmax. lse: |err| <= 1e-3, -inf exact.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cuda_stream.hpp"
#include "gpu_test_support.hpp"
#include "hopattn/api.hpp"
#include "late_write.hpp"
#include "plan/mla_plan.hpp"
#include "reference/reference.hpp"

namespace hopattn::testing {
namespace {

struct MlaCase {
  std::string name;
  int batch = 17, q_len = 1, heads = 16, page_size = 16;
  std::vector<int32_t> kv_lens;  // first lengths; the rest random in [q_len, max_kv]
  int max_kv = 700;
  DType dtype = DType::kBF16;
  int num_splits = 0;
  bool causal = true;
  bool csr = false;
  bool combined_cache = false;  // one [P, page, 576] pool, ckv and kpe are views into it
  std::vector<int32_t> q_lens;  // per request (varlen); empty: q_len for all
  bool fp8_cache = false;       // ckv / kpe in fp8 e4m3 with kv_scale
  double q_range = 1.0;         // q uniform in [-q_range, q_range] (fp8 cases: kv_scale / q_range)
};

void PrintTo(const MlaCase& c, std::ostream* os) { *os << c.name; }

std::vector<MlaCase> mla_cases() {
  std::vector<MlaCase> v;
  auto add = [&](MlaCase c) { v.push_back(std::move(c)); };
  add({"b1_q1_h16_kv113_p16", 1, 1, 16, 16, {113}});
  add({"b17_q1_h16_p16", 17, 1, 16, 16, {1, 113, 0, 64, 65}});
  add({"b17_q1_h16_p16_split1", 17, 1, 16, 16, {1, 113, 0}, 700, DType::kBF16, 1});
  add({"b17_q1_h16_p16_split7", 17, 1, 16, 16, {1, 113, 0}, 700, DType::kBF16, 7});
  add({"b17_q2_h24_p1", 17, 2, 24, 1, {2, 113, 0}, 300});
  add({"b17_q4_h16_p64", 17, 4, 16, 64, {4, 113, 4097}, 900});
  add({"b17_q4_h16_p64_noncausal", 17, 4, 16, 64, {4, 113}, 500, DType::kBF16, 0, false});
  add({"b17_q8_h16_p16_csr", 17, 8, 16, 16, {8, 113}, 600, DType::kBF16, 0, true, true});
  add({"b5_q1_h64_p16_fp16", 5, 1, 64, 16, {4097, 1, 113}, 2000, DType::kFP16});
  add({"b3_q2_h128_p64", 3, 2, 128, 64, {113, 2, 4097}, 1000});
  add({"b128_q1_h16_p64", 128, 1, 16, 64, {0, 1, 113}, 1500});
  add({"b128_q1_h128_p64_short", 128, 1, 128, 64, {1, 113}, 200});
  add({"b1_q1_h128_kv4097_split40", 1, 1, 128, 64, {4097}, 4097, DType::kBF16, 40});
  add({"b1_q239_h16_kv4097_p64", 1, 239, 16, 64, {4097}, 4097});
  add({"b2_q239_h16_kv113_p16", 2, 239, 16, 16, {113, 239}, 300});  // q_len > kv_len: empty rows
  add({"b3_q239_h24_p16_split3", 3, 239, 24, 16, {239, 1000}, 1200, DType::kBF16, 3});
  {
    MlaCase c{"b17_q1_h16_p16_combined_cache", 17, 1, 16, 16, {1, 113, 0}, 700};
    c.combined_cache = true;
    add(c);
  }
  // Pages holding whole 32-key blocks: those blocks come by TMA (the rest by the gather),
  // also through the strided views of a combined cache.
  add({"b5_q1_h16_p32_tma", 5, 1, 16, 32, {64, 4096, 33, 32, 1}, 4096});
  add({"b3_q2_h64_p256_tma", 3, 2, 64, 256, {512, 4097, 2}, 1000});
  {
    MlaCase c{"b9_q2_h16_p64_combined_cache_tma", 9, 2, 16, 64, {128, 2, 4096}, 3000};
    c.combined_cache = true;
    add(c);
  }
  {
    MlaCase c{"b6_varlen_h16_p16", 6, 8, 16, 16, {8, 0, 113, 50, 3, 700}, 700};
    c.q_lens = {8, 0, 5, 1, 3, 2};
    add(c);
  }
  auto fp8 = [&](MlaCase c) {
    c.fp8_cache = true;
    add(std::move(c));
  };
  fp8({"fp8_b17_q1_h16_p16", 17, 1, 16, 16, {1, 113, 0, 64, 65}});
  fp8({"fp8_b17_q4_h16_p64_split5", 17, 4, 16, 64, {4, 4097}, 900, DType::kBF16, 5});
  fp8({"fp8_b3_q2_h128_p1_fp16", 3, 2, 128, 1, {113, 2}, 300, DType::kFP16});
  fp8({"fp8_b2_q239_h16_p16", 2, 239, 16, 16, {113, 239}, 300});
  {
    MlaCase c{"fp8_b17_q1_h16_p64_csr_combined", 17, 1, 16, 64, {1, 113, 0}, 700};
    c.csr = true;
    c.combined_cache = true;
    fp8(c);
  }
  // Requests of <= 16 rows (the narrow schedule: planned for fp8 caches, forced for 16-bit
  // ones): two tokens of 8 heads (causal
  // between them), 15 rows of an odd head count, many splits of one long request (the partial
  // states), and an fp8 cache.
  add({"b17_q2_h8_p16", 17, 2, 8, 16, {2, 113, 0, 1, 64}, 300});
  add({"b5_q3_h5_p1_fp16", 5, 3, 5, 1, {3, 113, 4097, 4, 40}, 4097, DType::kFP16});
  add({"b1_q1_h16_kv4097_split40", 1, 1, 16, 64, {4097}, 4097, DType::kBF16, 40});
  fp8({"fp8_b1_q1_h16_kv4097_p64_split40", 1, 1, 16, 64, {4097}, 4097, DType::kBF16, 40});
  fp8({"fp8_b17_q2_h8_p64_fp16", 17, 2, 8, 64, {2, 4097, 113, 0}, 4097, DType::kFP16});
  // Requests of 17..32 rows over an fp8 cache: the narrow schedule with 32 columns (16 heads x 2
  // MTP tokens, 24 heads over pages of 1 with an fp16 q, 40 splits of one long request).
  fp8({"fp8_b17_q2_h16_p16", 17, 2, 16, 16, {2, 113, 0, 64, 65}, 300});
  fp8({"fp8_b5_q1_h24_p1_fp16", 5, 1, 24, 1, {1, 113, 4097, 40}, 4097, DType::kFP16});
  fp8({"fp8_b1_q2_h16_kv4097_p64_split40", 1, 2, 16, 64, {4097}, 4097, DType::kBF16, 40});
  // A bf16 q far outside fp16's range either way (kv_scale divided by as much, so the logits are
  // ordinary): the narrow schedule's fp16 MMAs take each row rescaled by a power of two (2^-2
  // here: |q| up to 1e5 > 65504; 2^34 for 1e-6).
  {
    MlaCase c{"fp8_b5_q1_h16_p64_q1e5", 5, 1, 16, 64, {113, 4097, 1}, 4097};
    c.q_range = 1e5;
    fp8(c);
    c = MlaCase{"fp8_b5_q2_h8_p16_q1em6", 5, 2, 8, 16, {2, 113}, 700};
    c.q_range = 1e-6;
    fp8(c);
    c = MlaCase{"fp8_b5_q2_h16_p64_q1e5", 5, 2, 16, 64, {2, 4097, 113}, 4097};
    c.q_range = 1e5;
    fp8(c);
  }
  // Compute-bound shapes the plan gives the seesaw schedule by itself (the rule's other side).
  // (Checked against src/plan/mla_plan.cpp by MlaPlan.TheGpuGridReachesTheSeesawRule.)
  add({"b48_q1_h128_kv1024_p64_auto", 48, 1, 128, 64, {1024, 1023, 961, 65, 1}, 1024});
  add({"b24_q2_h64_kv2048_p128_fp16_auto",
       24,
       2,
       64,
       128,
       {2048, 1999, 130, 2},
       2048,
       DType::kFP16});
  return v;
}

struct MlaProblem {
  HostTensor q_nope, q_pe, cache_a, cache_b, cu, lens, table, indptr, indices;
  MlaArgs args;
  double vmax = 0;
};

std::unique_ptr<MlaProblem> make_problem(const MlaCase& c, std::mt19937_64& rng) {
  auto pr = std::make_unique<MlaProblem>();
  std::vector<int32_t> q_lens = c.q_lens;
  if (q_lens.empty()) q_lens.assign(c.batch, c.q_len);
  std::vector<int32_t> kv(c.batch);
  std::uniform_int_distribution<int> len(0, c.max_kv);
  for (int b = 0; b < c.batch; ++b) {
    kv[b] = b < static_cast<int>(c.kv_lens.size()) ? c.kv_lens[b] : std::max(len(rng), q_lens[b]);
  }
  std::vector<int32_t> cu(c.batch + 1, 0);
  for (int b = 0; b < c.batch; ++b) cu[b + 1] = cu[b] + q_lens[b];
  const int64_t T = cu[c.batch], H = c.heads;

  pr->q_nope = HostTensor(c.dtype, {T, H, 512});
  pr->q_pe = HostTensor(c.dtype, {T, H, 64});
  pr->q_nope.fill_uniform(rng, -c.q_range, c.q_range);
  pr->q_pe.fill_uniform(rng, -c.q_range, c.q_range);

  PagePlan plan = PagePlan::fresh(kv, c.page_size);
  plan.shuffle(rng);
  const int64_t P = plan.num_pages, ps = c.page_size;
  // fp8: stored values up to 8 with kv_scale 1/8, so the real values span [-1, 1) as in the
  // 16-bit cases and the small ones fall on e4m3's subnormal codes; a q_range other than 1
  // divides kv_scale by it, so that the logits stay those of a q in [-1, 1].
  const DType cache_dtype = c.fp8_cache ? DType::kFP8E4M3 : c.dtype;
  pr->args.kv_scale = c.fp8_cache ? static_cast<float>(0.125 / c.q_range) : 1.f;
  const double range = 1.0 / pr->args.kv_scale;
  TensorView ckv, kpe;
  if (c.combined_cache) {
    pr->cache_a = HostTensor(cache_dtype, {P, ps, 576});
    pr->cache_a.fill_bytes(0xff);
    const TensorView all = pr->cache_a.view();
    const int64_t shape_c[3] = {P, ps, 512}, shape_k[3] = {P, ps, 64};
    const int64_t strides[3] = {ps * 576, 576, 1};
    ckv = TensorView(all.data(), cache_dtype, 3, shape_c, strides);
    kpe = TensorView(static_cast<char*>(all.data()) + 512 * dtype_size(cache_dtype), cache_dtype, 3,
                     shape_k, strides);
  } else {
    pr->cache_a = HostTensor(cache_dtype, {P, ps, 512});
    pr->cache_b = HostTensor(cache_dtype, {P, ps, 64});
    pr->cache_a.fill_bytes(0xff);
    pr->cache_b.fill_bytes(0xff);
    ckv = pr->cache_a.view();
    kpe = pr->cache_b.view();
  }
  // Only the slots a request owns get values; the rest stays NaN.
  std::uniform_real_distribution<double> u(-range, range);
  for (int b = 0; b < c.batch; ++b) {
    for (int j = 0; j < kv[b]; ++j) {
      const int64_t page = plan.page(b, j), slot = j % ps;
      for (int d = 0; d < 512; ++d) {
        const int64_t off = page * ckv.stride(0) + slot * ckv.stride(1) + d;
        store_element(ckv, off, u(rng));
        pr->vmax = std::max(pr->vmax, std::fabs(load_element(ckv, off)) * pr->args.kv_scale);
      }
      for (int d = 0; d < 64; ++d) {
        store_element(kpe, page * kpe.stride(0) + slot * kpe.stride(1) + d, u(rng));
      }
    }
  }
  pr->cu = int_tensor(cu);
  pr->lens = int_tensor(kv);
  MlaArgs& a = pr->args;  // kv_scale set above
  a.q_nope = pr->q_nope;
  a.q_pe = pr->q_pe;
  a.ckv = ckv;
  a.kpe = kpe;
  a.cu_seqlens_q = pr->cu;
  a.max_seqlen_q = *std::max_element(q_lens.begin(), q_lens.end());
  a.pages.kv_lens = pr->lens;
  if (c.csr) {
    pr->indptr = plan.csr_indptr();
    pr->indices = plan.csr_indices();
    a.pages.indptr = pr->indptr;
    a.pages.indices = pr->indices;
  } else {
    pr->table = plan.block_table();
    a.pages.block_table = pr->table;
  }
  return pr;
}

// The problem's inputs and the outputs `out` / `lse` on the device, as MlaArgs without a workspace.
MlaArgs upload(const MlaCase& c, MlaProblem& pr, DeviceSet& dev, HostTensor& out, HostTensor& lse) {
  MlaArgs gpu = pr.args;
  gpu.q_nope = dev.put(pr.q_nope, pr.q_nope.view());
  gpu.q_pe = dev.put(pr.q_pe, pr.q_pe.view());
  gpu.ckv = dev.put(pr.cache_a, pr.args.ckv);
  gpu.kpe = c.combined_cache ? dev.put(pr.cache_a, pr.args.kpe) : dev.put(pr.cache_b, pr.args.kpe);
  gpu.cu_seqlens_q = dev.put(pr.cu, pr.cu.view());
  gpu.pages.kv_lens = dev.put(pr.lens, pr.lens.view());
  if (c.csr) {
    gpu.pages.indptr = dev.put(pr.indptr, pr.indptr.view());
    gpu.pages.indices = dev.put(pr.indices, pr.indices.view());
  } else {
    gpu.pages.block_table = dev.put(pr.table, pr.table.view());
  }
  gpu.out = dev.put(out, out.view());
  gpu.lse = dev.put(lse, lse.view());
  return gpu;
}

class MlaKernel : public GpuTestWithParam<MlaCase> {};

TEST_P(MlaKernel, MatchesReference) {
  const MlaCase& c = GetParam();
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  auto pr = make_problem(c, rng);
  MlaOptions opts;
  opts.causal = c.causal;
  opts.num_splits = c.num_splits;
  const int64_t T = pr->q_nope.shape()[0], H = c.heads;

  HostTensor want_out(DType::kFP32, {T, H, 512});
  HostTensor want_lse(DType::kFP32, {T, H});
  {
    MlaArgs ref = pr->args;
    ref.out = want_out;
    ref.lse = want_lse;
    reference::mla(ref, opts);
  }

  HostTensor out(c.dtype, {T, H, 512});
  HostTensor lse(DType::kFP32, {T, H});
  DeviceSet dev;
  MlaArgs gpu = upload(c, *pr, dev, out, lse);
  const size_t ws_bytes = mla_workspace_size(gpu, opts);
  DeviceAllocation ws(ws_bytes);
  check_cuda(cudaMemset(ws.data(), 0x5a, ws_bytes > 0 ? ws_bytes : 16), "cudaMemset");
  gpu.workspace = {ws_bytes > 0 ? ws.data() : nullptr, ws_bytes};

  // The schedule the plan picks, and every other one the case can run, forced: the plan takes
  // the seesaw schedule only for compute-bound shapes (long splits of >= 128-row requests over
  // pages of 64) and the narrow one for fp8 caches over requests of <= 32 rows, so each case runs
  // all of its
  // schedules against one reference.
  const plan::mla::Shape shape = plan::mla::shape_of(gpu, opts);
  const plan::mla::Plan planned = plan::mla::make_plan(shape, plan::mla::kHopperMaxSms);
  std::vector<MlaSchedule> schedules = {MlaSchedule::kAuto};
  if (!c.fp8_cache && !planned.seesaw) schedules.push_back(MlaSchedule::kSeesaw);
  if (planned.seesaw || planned.narrow) schedules.push_back(MlaSchedule::kOneConsumer);
  if (!planned.narrow && plan::mla::narrow_fits(shape)) {
    schedules.push_back(MlaSchedule::kNarrow);
  }
  const auto schedule_name = [](MlaSchedule s) {
    return s == MlaSchedule::kSeesaw   ? "seesaw"
           : s == MlaSchedule::kNarrow ? "narrow"
                                       : "one-consumer";
  };
  const MlaSchedule planned_schedule = planned.seesaw   ? MlaSchedule::kSeesaw
                                       : planned.narrow ? MlaSchedule::kNarrow
                                                        : MlaSchedule::kOneConsumer;
  for (const MlaSchedule schedule : schedules) {
    opts.schedule = schedule;
    const char* name = schedule_name(schedule == MlaSchedule::kAuto ? planned_schedule : schedule);
    SCOPED_TRACE(std::string("schedule: ") + name +
                 (schedule == MlaSchedule::kAuto ? " (planned)" : " (forced)"));
    HostTensor got_out[2] = {HostTensor(c.dtype, {T, H, 512}), HostTensor(c.dtype, {T, H, 512})};
    HostTensor got_lse[2] = {HostTensor(DType::kFP32, {T, H}), HostTensor(DType::kFP32, {T, H})};
    for (int run = 0; run < 2; ++run) {
      dev.poison(out);
      dev.poison(lse);
      ::hopattn::mla(gpu, opts, nullptr);
      check_cuda(cudaDeviceSynchronize(), "mla kernel");
      dev.download(out, got_out[run]);
      dev.download(lse, got_lse[run]);
    }

    const double u = c.dtype == DType::kBF16 ? 1.0 / 256 : 1.0 / 2048;
    const double bound = 4 * u * std::max(pr->vmax, 1e-3);
    const std::vector<double> g = got_out[0].to_double(), w = want_out.to_double();
    int64_t failures = 0;
    double worst = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      const double err = std::fabs(g[i] - w[i]);
      if (std::isnan(err) || err > bound) {
        if (failures++ < 3) ADD_FAILURE() << "out[" << i << "]: got " << g[i] << ", want " << w[i];
      }
      if (!std::isnan(err)) worst = std::max(worst, err);
    }
    EXPECT_EQ(failures, 0) << "of " << w.size() << " elements; bound " << bound;
    const double l2 = rel_l2(g, w);
    if (c.fp8_cache) EXPECT_LE(l2, 2e-2) << "relative L2 against the dequantized reference";
    const std::vector<double> gl = got_lse[0].to_double(), wl = want_lse.to_double();
    int64_t lse_failures = 0;
    for (size_t i = 0; i < wl.size(); ++i) {
      const bool same_inf = std::isinf(wl[i]) && gl[i] == wl[i];
      if (!same_inf && !(std::fabs(gl[i] - wl[i]) <= 1e-3)) {
        if (lse_failures++ < 3)
          ADD_FAILURE() << "lse[" << i << "]: got " << gl[i] << ", want " << wl[i];
      }
    }
    EXPECT_EQ(lse_failures, 0);
    EXPECT_EQ(std::memcmp(got_out[0].data(), got_out[1].data(), w.size() * dtype_size(c.dtype)), 0)
        << "two runs differ";
    EXPECT_EQ(std::memcmp(got_lse[0].data(), got_lse[1].data(), wl.size() * 4), 0);
    std::printf("[ mla ] %s (%s): max err %.3g (bound %.3g), rel L2 %.3g\n", c.name.c_str(), name,
                worst, bound, l2);
  }
}

INSTANTIATE_TEST_SUITE_P(Grid, MlaKernel, ::testing::ValuesIn(mla_cases()),
                         [](const auto& info) { return info.param.name; });

// A batch-1, q_len-1 call of case c on the device: the problem, its outputs and their args.
struct OneRowCall {
  std::unique_ptr<MlaProblem> pr;
  HostTensor out, lse;
  DeviceSet dev;
  MlaArgs gpu;
  OneRowCall(const MlaCase& c, std::mt19937_64& rng)
      : pr(make_problem(c, rng)),
        out(c.dtype, {1, c.heads, 512}),
        lse(DType::kFP32, {1, c.heads}),
        gpu(upload(c, *pr, dev, out, lse)) {}
};

// A split call (the kernel, then the merge of its partials as a programmatic dependent launch)
// captured into a CUDA graph on a created stream: each replay, outputs poisoned before it, gives
// bitwise the eager call's result, for forced and planned splits and both schedules.
class MlaGraph : public DeviceStatusTest {};

TEST_F(MlaGraph, SplitCallReplaysTheEagerResult) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  const MlaCase c{"b1_q1_h128_kv4097", 1, 1, 128, 64, {4097}, 4097};
  OneRowCall call(c, rng);
  const int64_t T = 1, H = c.heads;
  HostTensor &out = call.out, &lse = call.lse;
  DeviceSet& dev = call.dev;
  MlaArgs& gpu = call.gpu;
  CudaStream stream;
  for (const int splits : {0, 40}) {
    for (const MlaSchedule schedule : {MlaSchedule::kOneConsumer, MlaSchedule::kSeesaw}) {
      SCOPED_TRACE("splits " + std::to_string(splits) + ", schedule " +
                   std::to_string(static_cast<int>(schedule)));
      MlaOptions opts;
      opts.num_splits = splits;
      opts.schedule = schedule;
      const size_t ws_bytes = mla_workspace_size(gpu, opts);
      ASSERT_GT(ws_bytes, 0u) << "a split call";
      DeviceAllocation ws(ws_bytes);
      gpu.workspace = {ws.data(), ws_bytes};
      HostTensor eager_out(c.dtype, {T, H, 512}), eager_lse(DType::kFP32, {T, H});
      dev.poison(out);
      dev.poison(lse);
      ::hopattn::mla(gpu, opts, stream.api());
      stream.sync("eager mla");
      dev.download(out, eager_out);
      dev.download(lse, eager_lse);
      GraphExec graph;
      graph.capture(stream, [&] { ::hopattn::mla(gpu, opts, stream.api()); });
      for (int replay = 0; replay < 2; ++replay) {
        dev.poison(out);
        dev.poison(lse);
        graph.launch(stream);
        HostTensor got_out(c.dtype, {T, H, 512}), got_lse(DType::kFP32, {T, H});
        dev.download(out, got_out);
        dev.download(lse, got_lse);
        EXPECT_EQ(std::memcmp(got_out.data(), eager_out.data(), T * H * 512 * dtype_size(c.dtype)),
                  0)
            << "replay " << replay;
        EXPECT_EQ(std::memcmp(got_lse.data(), eager_lse.data(), T * H * 4), 0)
            << "replay " << replay;
      }
      const std::vector<double> o = eager_out.to_double();
      EXPECT_TRUE(std::none_of(o.begin(), o.end(), [](double x) { return std::isnan(x); }))
          << "poison left in the eager output";
    }
  }
}

// The mla kernels launch as programmatic dependents of the kernel before them
// (kernels/common/programmatic_launch.cuh). Here that kernel writes q_nope late, after letting
// dependents launch: each schedule's result must be bitwise the one with q_nope in place (a read
// before ptx::wait_for_prior_grids() would see the NaN poison).
class MlaProgrammaticLaunch : public DeviceStatusTest {};

TEST_F(MlaProgrammaticLaunch, WaitsForTheKernelBefore) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  struct Run {
    MlaCase c;
    MlaSchedule schedule;
  };
  const Run runs[] = {
      {{"b1_q1_h128_kv4097", 1, 1, 128, 64, {4097}, 4097}, MlaSchedule::kOneConsumer},
      {{"b1_q1_h128_kv4097", 1, 1, 128, 64, {4097}, 4097}, MlaSchedule::kSeesaw},
      {{"b1_q1_h16_kv4097", 1, 1, 16, 64, {4097}, 4097}, MlaSchedule::kNarrow}};
  for (const Run& run : runs) {
    const MlaCase& c = run.c;
    SCOPED_TRACE(c.name + ", schedule " + std::to_string(static_cast<int>(run.schedule)));
    OneRowCall call(c, rng);
    const int64_t T = 1, H = c.heads;
    HostTensor &out = call.out, &lse = call.lse;
    DeviceSet& dev = call.dev;
    MlaArgs& gpu = call.gpu;
    MlaOptions opts;
    opts.schedule = run.schedule;
    DeviceAllocation ws(mla_workspace_size(gpu, opts));
    gpu.workspace = {ws.data(), ws.bytes()};
    CudaStream stream;
    auto result = [&] {
      ::hopattn::mla(gpu, opts, stream.api());
      stream.sync("mla");
      HostTensor got_out(c.dtype, {T, H, 512}), got_lse(DType::kFP32, {T, H});
      dev.download(out, got_out);
      dev.download(lse, got_lse);
      return std::make_pair(std::move(got_out), std::move(got_lse));
    };
    dev.poison(out);
    dev.poison(lse);
    auto want = result();
    LateInput q(gpu.q_nope.data(), size_t(T * H * 512) * dtype_size(c.dtype));
    dev.poison(out);
    dev.poison(lse);
    q.rewrite_late(stream.get());
    auto got = result();
    expect_as_in_place(want.first, got.first, "mla out");
    expect_as_in_place(want.second, got.second, "mla lse");
  }
}

}  // namespace
}  // namespace hopattn::testing
