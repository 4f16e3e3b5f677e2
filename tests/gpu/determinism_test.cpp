// Bitwise reruns: the same call on the same device inputs, repeated, gives the same bits. Every
// run's outputs are poisoned (0xff bytes) first, so a run that leaves an element unwritten differs
// too. The deterministic backward (AttentionOptions::deterministic) 100 times: dq, dk, dv,
// dsinks (and the forward before it: out, lse); fwd (dense, varlen, paged) and decode (forced
// splits and the heuristic's) 1000 times: out and lse (FlashAttention-3's count); mla and
// BatchAttention 200 times. Small shapes (fwd: B 2, S 512, Hq 8, D 128, ~20 us a call): the whole
// suite takes a few seconds on an H200.
//
//   hopattn_gpu_tests --gtest_filter='Determinism.*'
//   HOPATTN_DETERMINISM_SCALE=10 hopattn_gpu_tests --gtest_filter='Determinism.*'   10x the runs
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "args_mirror.hpp"
#include "batch_kernel_check.hpp"
#include "cpu/decode_case.hpp"
#include "cpu/fwd_bwd_problem.hpp"
#include "cpu/mla_case.hpp"
#include "hopattn/api.hpp"
#include "hopper_test_util.hpp"

namespace hopattn::testing {
namespace {

#define SKIP_WITHOUT_HOPPER() \
  if (auto why = hopper::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why

constexpr int kBwdRuns = 100;
constexpr int kFwdRuns = 1000;   // fwd and decode
constexpr int kOtherRuns = 200;  // mla, BatchAttention

// `base` runs times HOPATTN_DETERMINISM_SCALE (default 1), at least 2.
int runs(int base) {
  double scale = 1.0;
  if (const char* v = std::getenv("HOPATTN_DETERMINISM_SCALE")) scale = std::atof(v);
  return std::max(2, static_cast<int>(base * scale));
}

// Runs `call` n times on the mirror's device tensors, outputs poisoned before each run, and
// expects every run's output bytes to equal the first run's.
void expect_bitwise_reruns(const ViewMirror& m, int n, const std::function<void()>& call,
                           const std::string& what) {
  std::vector<std::vector<uint8_t>> first;
  for (int i = 0; i < n; ++i) {
    m.poison_outputs();
    call();
    hopper::sync_or_die(nullptr, what.c_str());
    hopper::cuda_check(cudaGetLastError(), what.c_str());
    std::vector<std::vector<uint8_t>> now = m.snapshot();
    if (i == 0) {
      first = std::move(now);
      continue;
    }
    for (size_t r = 0; r < first.size(); ++r) {
      if (now[r] == first[r]) continue;
      const auto diff = std::mismatch(first[r].begin(), first[r].end(), now[r].begin());
      ADD_FAILURE() << what << ": run " << i << " of " << n << " differs from run 0 in output " << r
                    << " (in host address order) at byte " << (diff.first - first[r].begin())
                    << " of " << first[r].size();
      return;
    }
  }
  check_errors();
  std::printf("[ determinism ] %s: %d runs bitwise equal\n", what.c_str(), n);
}

// ---------------------------------------------------------------------------- fwd / bwd

struct AttnRun {
  fwd_bwd::Problem problem;
  fwd_bwd::Bundle bundle;
  ViewMirror m;
  FwdArgs fwd;
  BwdArgs bwd;
  std::unique_ptr<DeviceScratch> workspace;

  AttnRun(const fwd_bwd::Spec& spec, const fwd_bwd::BuildOptions& build, bool with_bwd,
          const AttentionOptions& opts, std::mt19937_64& rng)
      : problem(fwd_bwd::make_problem(spec, rng)), bundle(problem, build) {
    add(m, bundle.fwd);
    if (with_bwd) add(m, bundle.bwd);
    m.upload();
    fwd = map(m, bundle.fwd);
    if (bundle.fwd.q.rank() == 3) {  // varlen / paged: CUDA's host bounds
      fwd.max_seqlen_q = int(*std::max_element(spec.q_lens.begin(), spec.q_lens.end()));
      fwd.max_seqlen_k = int(*std::max_element(spec.kv_lens.begin(), spec.kv_lens.end()));
    }
    if (!with_bwd) return;
    bwd = map(m, bundle.bwd, fwd);
    workspace = std::make_unique<DeviceScratch>(attention_bwd_workspace_size(bwd, opts));
    bwd.workspace = workspace->ws;
  }
};

AttentionOptions attn_options(bool causal, bool deterministic = false) {
  AttentionOptions o;
  o.causal = causal;
  o.deterministic = deterministic;
  return o;
}

void expect_fwd_reruns(const fwd_bwd::Spec& spec, fwd_bwd::Layout layout, const std::string& what,
                       int page_size = 16) {
  std::mt19937_64 rng(1234);
  fwd_bwd::BuildOptions build;
  build.layout = layout;
  build.page_size = page_size;
  const AttentionOptions opts = attn_options(true);
  AttnRun r(spec, build, false, opts, rng);
  expect_bitwise_reruns(
      r.m, runs(kFwdRuns), [&] { attention_fwd(r.fwd, opts); }, what);
}

TEST(Determinism, FwdDense) {
  SKIP_WITHOUT_HOPPER();
  expect_fwd_reruns(fwd_bwd::spec(8, 2, 128, 128, {512, 512}, {512, 512}), fwd_bwd::Layout::kDense,
                    "fwd dense B 2 S 512 Hq 8 Hkv 2 D 128 causal");
}

TEST(Determinism, FwdVarlen) {
  SKIP_WITHOUT_HOPPER();
  expect_fwd_reruns(fwd_bwd::spec(8, 2, 128, 128, {512, 1, 300, 0, 77}, {512, 700, 300, 40, 1000}),
                    fwd_bwd::Layout::kVarlen,
                    "fwd varlen q 512,1,300,0,77 Hq 8 Hkv 2 D 128 causal");
}

TEST(Determinism, FwdPaged) {
  SKIP_WITHOUT_HOPPER();
  expect_fwd_reruns(fwd_bwd::spec(8, 2, 128, 128, {256, 1, 64}, {512, 900, 64}),
                    fwd_bwd::Layout::kPaged, "fwd paged (16-token pages) Hq 8 Hkv 2 D 128 causal");
}

void expect_bwd_reruns(const fwd_bwd::Spec& spec, fwd_bwd::Layout layout, bool causal,
                       const std::string& what) {
  std::mt19937_64 rng(4321);
  fwd_bwd::BuildOptions build;
  build.layout = layout;
  const AttentionOptions opts = attn_options(causal, true);
  AttnRun r(spec, build, true, opts, rng);
  expect_bitwise_reruns(
      r.m, runs(kBwdRuns),
      [&] {
        attention_fwd(r.fwd, opts);
        attention_bwd(r.bwd, opts);
      },
      what);
}

TEST(Determinism, BwdDeterministicDense) {
  SKIP_WITHOUT_HOPPER();
  expect_bwd_reruns(fwd_bwd::spec(8, 2, 128, 128, {512, 512}, {512, 512}, DType::kBF16, true),
                    fwd_bwd::Layout::kDense, false,
                    "bwd deterministic dense B 2 S 512 Hq 8 Hkv 2 D 128 sinks");
}

TEST(Determinism, BwdDeterministicVarlenCausal) {
  SKIP_WITHOUT_HOPPER();
  expect_bwd_reruns(
      fwd_bwd::spec(8, 1, 64, 64, {300, 1, 0, 513}, {300, 600, 17, 513}, DType::kFP16, true),
      fwd_bwd::Layout::kVarlen, true, "bwd deterministic varlen fp16 Hq 8 Hkv 1 D 64 causal sinks");
}

// ---------------------------------------------------------------------------- decode

void expect_decode_reruns(const decode_case::DecodeCase& c, int num_splits,
                          const std::string& what) {
  std::mt19937_64 rng(99);
  auto run = decode_case::random_run(c, rng);
  decode_case::assemble(*run, rng);
  run->opts.num_splits = num_splits;
  ViewMirror m;
  add(m, run->args);
  m.upload();
  DecodeArgs d = map(m, run->args);
  const DeviceScratch ws(decode_workspace_size(d, run->opts));
  d.workspace = ws.ws;
  expect_bitwise_reruns(
      m, runs(kFwdRuns), [&] { decode(d, run->opts); }, what);
}

decode_case::DecodeCase decode_shape(int q_len, DType cache) {
  decode_case::DecodeCase c;
  c.batch = 4;
  c.q_len = q_len;
  c.kv_heads = 4;
  c.group = 4;
  c.head_dim = 128;
  c.kv_lens = {4096, 1, 2000, 777};
  c.cache.dtype = cache;
  c.sinks = true;
  return c;
}

TEST(Determinism, DecodeForcedSplits) {
  SKIP_WITHOUT_HOPPER();
  expect_decode_reruns(decode_shape(1, DType::kBF16), 8,
                       "decode B 4 q_len 1 Hq 16 Hkv 4 D 128 bf16 cache, 8 splits");
}

TEST(Determinism, DecodeHeuristicSplitsFp8) {
  SKIP_WITHOUT_HOPPER();
  expect_decode_reruns(decode_shape(4, DType::kFP8E4M3), 0,
                       "decode B 4 q_len 4 Hq 16 Hkv 4 D 128 fp8 e4m3 cache, heuristic splits");
}

// ---------------------------------------------------------------------------- mla

TEST(Determinism, MlaSplits) {
  SKIP_WITHOUT_HOPPER();
  mla_case::MlaCase c;
  c.q_lens = {1, 1, 4, 2};
  c.kv_lens = {3000, 1, 1500, 64};
  c.heads = 16;
  c.page_size = 64;
  std::mt19937_64 rng(7);
  auto run = mla_case::build(c, rng);
  run->opts.num_splits = 4;
  ViewMirror m;
  add(m, run->args);
  m.upload();
  MlaArgs d = map(m, run->args);
  const DeviceScratch ws(mla_workspace_size(d, run->opts));
  d.workspace = ws.ws;
  expect_bitwise_reruns(
      m, runs(kOtherRuns), [&] { mla(d, run->opts); }, "mla B 4 H 16 pages 64, 4 splits");
}

// ---------------------------------------------------------------------------- BatchAttention

TEST(Determinism, BatchAttention) {
  SKIP_WITHOUT_HOPPER();
  using namespace batch_check;  // NOLINT: the batch test helpers
  StepSpec s;
  s.name = "determinism";
  s.q_lens = {1, 77, 3, 300, 0};
  s.kv_lens = {900, 400, 40, 2000, 5};
  s.sinks = true;
  std::mt19937_64 rng(11);
  const auto h = make_host_step(s, geometry_of(s), rng);
  DeviceStep dev(*h);
  const CudaStream stream;
  BatchAttention ba(config_of(s, cuda_device()));
  const DeviceWorkspace ws(ba.workspace_size());
  plan_step(ba, *h, PlanMode::kUploadArrays, ws.ws, stream);
  const batch_check::Outputs first = run_once(ba, dev, *h, ws.ws, stream);
  const int n = runs(kOtherRuns);
  for (int i = 1; i < n; ++i) {
    if (!bitwise_equal(first, run_once(ba, dev, *h, ws.ws, stream))) {
      ADD_FAILURE() << "BatchAttention: run " << i << " of " << n << " differs from run 0";
      return;
    }
  }
  std::printf("[ determinism ] BatchAttention %s: %d runs bitwise equal\n", describe(s).c_str(), n);
}

}  // namespace
}  // namespace hopattn::testing
