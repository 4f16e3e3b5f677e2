// BatchAttention's checks: each rule of the configuration, of plan()'s host lengths and of run()'s
// arguments, broken alone, raises hopattn::Error of the right kind with a message naming the
// argument; a rejected run() writes nothing, and a rejected plan() keeps the previous plan. CUDA
// tensors are validated against the host-side plan, then raise kNotImplemented (no GPU kernel).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "batch_case.hpp"
#include "hopattn/api.hpp"
#include "hopattn/batch.hpp"
#include "validate_testing.hpp"

namespace hopattn::testing {
namespace {

using batch_case::BatchCase;
using batch_case::BatchStep;
using batch_case::config_of;

constexpr DType kFP32 = DType::kFP32;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Hq 4 over Hkv 2, D 64, pages of 4 tokens; a decode of 2, an empty slot and a prefill of 20.
BatchCase small_case(DType dtype = kFP32) {
  BatchCase c;
  c.kv_heads = 2;
  c.group = 2;
  c.page_size = 4;
  c.q_dtype = c.cache_dtype = dtype;
  c.sinks = true;
  c.q_lens = {2, 0, 20};
  c.kv_lens = {10, 4, 30};
  return c;
}

struct Fixture {
  BatchCase c = small_case();
  std::mt19937_64 rng{7};
  std::unique_ptr<BatchStep> step = batch_case::make_step(c, rng);
  BatchAttention ba{config_of(c)};
  TensorKeeper keep;
  Fixture() { ba.plan(step->cu_t, step->kv_t); }
};

struct RunRejection {
  const char* name;
  void (*mutate)(TensorKeeper& keep, BatchArgs& a);
  ErrorKind kind;
  const char* fragment;
};

TensorView floats_shaped(TensorKeeper& keep, DType dtype, std::vector<int64_t> shape) {
  return keep.make(dtype, std::move(shape));
}

const RunRejection kRunRejections[] = {
    {"q int8", [](TensorKeeper&, BatchArgs& a) { a.q = with_dtype(a.q, DType::kInt8); },
     ErrorKind::kType, "q: expected bf16, fp16 or fp32"},
    {"q rank 4",
     [](TensorKeeper& k, BatchArgs& a) {
       a.q = floats_shaped(k, kFP32, {1, 25, 4, 64});
     },
     ErrorKind::kValue, "rank 3 [total_q, Hq, D]"},
    {"q heads",
     [](TensorKeeper& k, BatchArgs& a) {
       a.q = floats_shaped(k, kFP32, {25, 8, 64});
     },
     ErrorKind::kValue, "[total_q, num_qo_heads, head_dim]"},
    {"q head dim",
     [](TensorKeeper& k, BatchArgs& a) {
       a.q = floats_shaped(k, kFP32, {25, 4, 128});
     },
     ErrorKind::kValue, "q: expected shape [25, 4, 64]"},
    {"q rows",
     [](TensorKeeper& k, BatchArgs& a) {
       a.q = floats_shaped(k, kFP32, {21, 4, 64});
     },
     ErrorKind::kValue, "q: expected at least 22 rows"},
    {"q on CUDA", [](TensorKeeper&, BatchArgs& a) { a.q = on_cuda(a.q); }, ErrorKind::kType,
     "the device the BatchAttention was made for"},
    {"k_cache dtype",
     [](TensorKeeper&, BatchArgs& a) { a.k_cache = with_dtype(a.k_cache, DType::kBF16); },
     ErrorKind::kType, "k_cache: expected fp32, fp8_e4m3, fp8_e5m2 or int8"},
    {"k_cache page size",
     [](TensorKeeper&, BatchArgs& a) {
       a.k_cache = with_shape(a.k_cache, {2 * a.k_cache.size(0), 2, 2, 64});
     },
     ErrorKind::kValue, "k_cache: expected shape"},
    {"k_cache HND for an NHD config",
     [](TensorKeeper& k, BatchArgs& a) {
       a.k_cache = floats_shaped(k, kFP32, {a.k_cache.size(0), 2, 4, 64});
     },
     ErrorKind::kValue, "(NHD) of the BatchAttention"},
    {"v_cache dtype",
     [](TensorKeeper&, BatchArgs& a) { a.v_cache = with_dtype(a.v_cache, DType::kInt8); },
     ErrorKind::kType, "v_cache: expected fp32 (k_cache's dtype)"},
    {"v_cache head dim",
     [](TensorKeeper& k, BatchArgs& a) {
       a.v_cache = floats_shaped(k, kFP32, {a.v_cache.size(0), 4, 2, 128});
     },
     ErrorKind::kValue, "head_dim_v last"},
    {"out dtype",
     [](TensorKeeper& k, BatchArgs& a) {
       a.out = k.make(DType::kBF16, {25, 4, 64});
     },
     ErrorKind::kType, "out: expected fp32 (q's dtype)"},
    {"out shape",
     [](TensorKeeper& k, BatchArgs& a) {
       a.out = k.make(kFP32, {24, 4, 64});
     },
     ErrorKind::kValue, "out: expected shape [25, 4, 64]"},
    {"lse dtype",
     [](TensorKeeper& k, BatchArgs& a) {
       a.lse = k.make(DType::kBF16, {25, 4});
     },
     ErrorKind::kType, "lse: expected fp32"},
    {"lse missing", [](TensorKeeper&, BatchArgs& a) { a.lse = {}; }, ErrorKind::kValue,
     "lse: expected a tensor"},
    {"sinks shape",
     [](TensorKeeper& k, BatchArgs& a) {
       a.sinks = k.floats({0, 0});
     },
     ErrorKind::kValue, "sinks: expected shape [4]"},
    {"sinks NaN",
     [](TensorKeeper& k, BatchArgs& a) {
       a.sinks = k.floats({0, kNaN, 0, 0});
     },
     ErrorKind::kValue, "sinks[1]"},
    {"k_scale zero", [](TensorKeeper&, BatchArgs& a) { a.k_scale.value = 0.f; }, ErrorKind::kValue,
     "k_scale: expected a finite value > 0"},
    {"v_scale per head shape",
     [](TensorKeeper& k, BatchArgs& a) {
       a.v_scale.per_head = k.floats({1, 1, 1});
     },
     ErrorKind::kValue, "v_scale: expected shape [2]"},
    {"v_scale per head negative",
     [](TensorKeeper& k, BatchArgs& a) {
       a.v_scale.per_head = k.floats({1, -1});
     },
     ErrorKind::kValue, "v_scale[1]"},
    {"cu_seqlens_q batch",
     [](TensorKeeper& k, BatchArgs& a) {
       a.cu_seqlens_q = k.ints({0, 2, 22});
     },
     ErrorKind::kValue, "cu_seqlens_q: expected shape [4] ([B + 1] with B = 3 from plan())"},
    {"cu_seqlens_q values",
     [](TensorKeeper& k, BatchArgs& a) {
       a.cu_seqlens_q = k.ints({0, 1, 2, 22});
     },
     ErrorKind::kValue, "cu_seqlens_q[1]: expected 2 (what plan() was given"},
    {"kv_lens values",
     [](TensorKeeper& k, BatchArgs& a) {
       a.kv_lens = k.ints({10, 4, 29});
     },
     ErrorKind::kValue, "kv_lens[2]: expected 30 (what plan() was given"},
    {"kv_lens batch",
     [](TensorKeeper& k, BatchArgs& a) {
       a.kv_lens = k.ints({10, 4});
     },
     ErrorKind::kValue, "kv_lens: expected shape [3] ([B] from plan())"},
    {"page_table narrow",
     [](TensorKeeper&, BatchArgs& a) {
       a.page_table = remade(a.page_table, a.page_table.data(), DType::kInt32, {3, 7},
                             strides_of(a.page_table), a.page_table.device());
     },
     ErrorKind::kValue, "page_table: expected at least 8 pages a row"},
    {"page_table out of range",
     [](TensorKeeper& k, BatchArgs& a) {
       a.page_table =
           k.ints({0, 99, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
                  {3, 8});
     },
     ErrorKind::kValue, "page_table[0][1]: expected a page index in [0, "},
    {"page_table dtype",
     [](TensorKeeper&, BatchArgs& a) { a.page_table = with_dtype(a.page_table, kFP32); },
     ErrorKind::kType, "page_table: expected int32"},
    {"page_table missing", [](TensorKeeper&, BatchArgs& a) { a.page_table = {}; },
     ErrorKind::kValue, "page_table: expected a tensor"},
    {"out aliases q", [](TensorKeeper&, BatchArgs& a) { a.out = a.q; }, ErrorKind::kValue,
     "out: expected memory disjoint from the input q"},
    {"lse inside out",
     [](TensorKeeper&, BatchArgs& a) {
       a.lse = with_shape(a.out, {25, 4});
     },
     ErrorKind::kValue, "lse: expected memory disjoint from out"},
};

TEST(BatchApiErrors, EachRunRuleRejectsAndWritesNothing) {
  Fixture f;
  ASSERT_TRUE(passes([&] { f.ba.run(f.step->args); }));  // the valid call
  for (const RunRejection& r : kRunRejections) {
    SCOPED_TRACE(r.name);
    f.step->out.fill_bytes(0xff);
    f.step->lse.fill_bytes(0xff);
    const std::vector<uint8_t> out_before = bytes_of(f.step->out),
                               lse_before = bytes_of(f.step->lse);
    BatchArgs a = f.step->args;
    r.mutate(f.keep, a);
    EXPECT_TRUE(throws_error([&] { f.ba.run(a); }, r.kind, r.fragment));
    EXPECT_EQ(bytes_of(f.step->out), out_before) << "a rejected call wrote out";
    EXPECT_EQ(bytes_of(f.step->lse), lse_before) << "a rejected call wrote lse";
  }
}

TEST(BatchApiErrors, MessagesNameTheEntryPoint) {
  Fixture f;
  BatchArgs a = f.step->args;
  a.k_scale.value = -1.f;
  EXPECT_TRUE(throws_error([&] { f.ba.run(a); }, ErrorKind::kValue,
                           "hopattn.BatchAttention.run: k_scale: expected a finite value > 0, "
                           "got -1"));
}

TEST(BatchApiErrors, RunBeforePlan) {
  const BatchCase c = small_case();
  std::mt19937_64 rng(1);
  const auto step = batch_case::make_step(c, rng);
  const BatchAttention ba(config_of(c));
  EXPECT_EQ(ba.planned().batch, -1);
  EXPECT_TRUE(throws_error([&] { ba.run(step->args); }, ErrorKind::kValue,
                           "plan: expected a plan of the step (call plan() before run())"));
}

struct PlanRejection {
  const char* name;
  std::vector<int32_t> cu, kv;
  ErrorKind kind;
  const char* fragment;
};

// After each rejected plan() the object still holds the previous plan: run() with the previous
// step's arguments succeeds and matches the per-request reference.
TEST(BatchApiErrors, RejectedPlanKeepsThePreviousPlan) {
  Fixture f;
  const batch_case::Expected want = batch_case::per_request_reference(f.c, *f.step);
  std::vector<int32_t> too_many(18, 0), zeros(17, 0);
  const PlanRejection rows[] = {
      {"offsets start", {1, 2}, {5}, ErrorKind::kValue, "cu_seqlens_q[0]: expected 0, got 1"},
      {"offsets decrease", {0, 5, 3}, {5, 5}, ErrorKind::kValue, "non-decreasing offsets"},
      {"kv_len below q_len",
       {0, 2, 9},
       {2, 6},
       ErrorKind::kValue,
       "kv_lens[1]: expected >= q_len = 7"},
      {"batch above max_batch", too_many, zeros, ErrorKind::kValue, "0..max_batch = 16"},
      {"tokens above max_tokens",
       {0, 1000, 1100},
       {1000, 1100},
       ErrorKind::kValue,
       "max_tokens = 1024"},
      {"kv_lens shape", {0, 1, 2}, {1}, ErrorKind::kValue, "kv_lens: expected shape [2]"},
  };
  for (const PlanRejection& r : rows) {
    SCOPED_TRACE(r.name);
    const HostTensor cu = int_tensor(r.cu), kv = int_tensor(r.kv);
    EXPECT_TRUE(throws_error([&] { f.ba.plan(cu, kv); }, r.kind, r.fragment));
    EXPECT_EQ(f.ba.planned().batch, 3);
    f.step->out.fill_bytes(0xff);
    ASSERT_TRUE(passes([&] { f.ba.run(f.step->args); }));
    EXPECT_EQ(batch_case::compare(f.c, *f.step, want), "");
  }
  const HostTensor cu = int_tensor({0, 1}), kv = int_tensor({1});
  EXPECT_TRUE(throws_error([&] { f.ba.plan(on_cuda(cu), kv); }, ErrorKind::kType,
                           "cu_seqlens_q: expected a host (CPU) tensor"));
  EXPECT_TRUE(throws_error([&] { f.ba.plan(cu, on_cuda(kv)); }, ErrorKind::kType,
                           "kv_lens: expected a host (CPU) tensor"));
  EXPECT_TRUE(throws_error([&] { f.ba.plan(with_dtype(cu, kFP32), kv); }, ErrorKind::kType,
                           "cu_seqlens_q: expected int32"));
  EXPECT_TRUE(throws_error(
      [&] {
        f.ba.plan(with_shape(cu, {1, 2}), kv);
      },
      ErrorKind::kValue, "cu_seqlens_q: expected rank 1"));
  EXPECT_TRUE(throws_error([&] { f.ba.plan(nullptr, nullptr, 1); }, ErrorKind::kValue,
                           "cu_seqlens_q: expected int32 [2], got null"));
  std::vector<unsigned char> small(f.ba.plan_buffer_size() + 32);
  unsigned char* aligned =
      small.data() + (16 - reinterpret_cast<uintptr_t>(small.data()) % 16) % 16;
  EXPECT_TRUE(throws_error([&] { f.ba.plan(cu, kv, aligned + 4, f.ba.plan_buffer_size()); },
                           ErrorKind::kValue, "workspace: expected a 16-byte aligned buffer"));
  EXPECT_TRUE(throws_error([&] { f.ba.plan(cu, kv, aligned, f.ba.plan_buffer_size() - 16); },
                           ErrorKind::kValue, "bytes (BatchPlanner::workspace_bytes)"));
  EXPECT_EQ(f.ba.planned().batch, 3);
  ASSERT_TRUE(passes([&] { f.ba.run(f.step->args); }));
  EXPECT_EQ(batch_case::compare(f.c, *f.step, want), "");
}

struct ConfigRejection {
  const char* name;
  void (*mutate)(BatchAttentionConfig& c);
  ErrorKind kind;
  const char* fragment;
};

const ConfigRejection kConfigRejections[] = {
    {"head_dim", [](BatchAttentionConfig& c) { c.head_dim = 100; }, ErrorKind::kNotImplemented,
     "head_dim: expected 64, 128 or 256, got 100"},
    {"head_dim_v", [](BatchAttentionConfig& c) { c.head_dim_v = 96; }, ErrorKind::kNotImplemented,
     "head_dim_v"},
    {"num_kv_heads", [](BatchAttentionConfig& c) { c.num_kv_heads = 3; }, ErrorKind::kValue,
     "num_kv_heads: expected a KV head count >= 1 that divides num_qo_heads = 4"},
    {"num_qo_heads", [](BatchAttentionConfig& c) { c.num_qo_heads = 0; }, ErrorKind::kValue,
     "num_qo_heads: expected >= 1"},
    {"group above 128",
     [](BatchAttentionConfig& c) {
       c.num_qo_heads = 256;
       c.num_kv_heads = 1;
     },
     ErrorKind::kNotImplemented, "at most 128 q heads per KV head"},
    {"page_size 0", [](BatchAttentionConfig& c) { c.page_size = 0; }, ErrorKind::kValue,
     "page_size: expected 1..256"},
    {"page_size 257", [](BatchAttentionConfig& c) { c.page_size = 257; }, ErrorKind::kValue,
     "page_size: expected 1..256"},
    {"window",
     [](BatchAttentionConfig& c) {
       c.window = {-2, 0};
     },
     ErrorKind::kValue, "window: expected left and right >= -1"},
    {"softcap", [](BatchAttentionConfig& c) { c.softcap = -1.f; }, ErrorKind::kValue,
     "softcap: expected a finite value >= 0"},
    {"softcap NaN", [](BatchAttentionConfig& c) { c.softcap = float(kNaN); }, ErrorKind::kValue,
     "softcap"},
    {"scale", [](BatchAttentionConfig& c) { c.scale = 0.f; }, ErrorKind::kValue,
     "scale: expected a finite nonzero value"},
    {"max_batch", [](BatchAttentionConfig& c) { c.max_batch = 0; }, ErrorKind::kValue,
     "max_batch: expected >= 1"},
    {"max_tokens", [](BatchAttentionConfig& c) { c.max_tokens = 0; }, ErrorKind::kValue,
     "max_tokens: expected >= 1"},
    {"num_ctas", [](BatchAttentionConfig& c) { c.num_ctas = -1; }, ErrorKind::kValue,
     "num_ctas: expected >= 0"},
    {"device index",
     [](BatchAttentionConfig& c) {
       c.device = {DeviceType::kCUDA, -1};
     },
     ErrorKind::kValue, "device: expected a device index >= 0"},
};

TEST(BatchApiErrors, EachConfigRuleRejects) {
  for (const ConfigRejection& r : kConfigRejections) {
    SCOPED_TRACE(r.name);
    BatchAttentionConfig cfg = config_of(small_case());
    r.mutate(cfg);
    EXPECT_TRUE(throws_error([&] { BatchAttention ba(cfg); }, r.kind, r.fragment));
    EXPECT_TRUE(throws_error([&] { BatchAttention::workspace_size(cfg); }, r.kind, r.fragment));
    EXPECT_TRUE(throws_error([&] { BatchAttention::plan_buffer_size(cfg); }, r.kind, r.fragment));
  }
}

// CUDA tensors: the shapes, dtypes and the plan's host-side lengths are checked (index values
// on the device are not read), then the call stops before touching anything.
TEST(BatchApiErrors, CudaTensorsAreValidatedThenNotImplemented) {
  const BatchCase c = small_case(DType::kBF16);
  std::mt19937_64 rng(3);
  const auto step = batch_case::make_step(c, rng);
  BatchAttentionConfig cfg = config_of(c);
  cfg.device = {DeviceType::kCUDA, 0};
  BatchAttention ba(cfg);
  ba.plan(step->cu_t, step->kv_t);
  // Never dereferenced: the call stops before touching device memory.
  unsigned char device_memory = 0;
  const Workspace workspace{&device_memory, ba.workspace_size()};
  BatchArgs a = step->args;
  for (TensorView* t : {&a.q, &a.k_cache, &a.v_cache, &a.cu_seqlens_q, &a.kv_lens, &a.page_table,
                        &a.sinks, &a.out, &a.lse}) {
    *t = on_cuda(*t);
  }
  a.workspace = workspace;
  const std::vector<uint8_t> out_before = bytes_of(step->out);
  TensorKeeper keep;
  BatchArgs other = a;
  if (!built_with_cuda()) {
    // Calls that pass every check reach the kernel: without kernels, a clear refusal. (With
    // kernels they would launch on these host addresses: the GPU tests cover them.)
    EXPECT_TRUE(throws_error([&] { ba.run(a); }, ErrorKind::kNotImplemented,
                             "hopattn.BatchAttention.run: expected CPU tensors (no GPU kernel for "
                             "the batch family yet), got CUDA tensors"));
    EXPECT_EQ(bytes_of(step->out), out_before);
    other.kv_lens = on_cuda(keep.ints({1, 1, 1}));  // device values are not compared: no sync
    EXPECT_TRUE(throws_error([&] { ba.run(other); }, ErrorKind::kNotImplemented, "no GPU kernel"));
  }
  other = a;
  other.workspace = {workspace.data, workspace.bytes - 1};
  EXPECT_TRUE(throws_error([&] { ba.run(other); }, ErrorKind::kValue, "workspace: expected >= "));
  other = a;
  other.page_table = remade(a.page_table, a.page_table.data(), DType::kInt32, {3, 7},
                            strides_of(a.page_table), a.page_table.device());
  EXPECT_TRUE(throws_error([&] { ba.run(other); }, ErrorKind::kValue,
                           "page_table: expected at least 8 pages a row"));
  other = a;
  other.q = on_cuda(keep.make(DType::kBF16, {21, 4, 64}));
  EXPECT_TRUE(throws_error([&] { ba.run(other); }, ErrorKind::kValue, "q: expected at least 22"));
  other = a;
  other.k_cache = with_dtype(a.k_cache, DType::kInt8);
  other.v_cache = with_dtype(a.v_cache, DType::kInt8);
  EXPECT_TRUE(throws_error([&] { ba.run(other); }, ErrorKind::kType, "fp8_e4m3 on CUDA"));
  other = a;
  other.q = with_dtype(a.q, kFP32);
  EXPECT_TRUE(throws_error([&] { ba.run(other); }, ErrorKind::kType, "q: expected bf16 or fp16"));
  other = a;
  other.q = step->args.q;  // a CPU tensor for a CUDA BatchAttention
  EXPECT_TRUE(throws_error([&] { ba.run(other); }, ErrorKind::kType,
                           "a tensor on cuda:0 (the device the BatchAttention was made for)"));
}

}  // namespace
}  // namespace hopattn::testing
