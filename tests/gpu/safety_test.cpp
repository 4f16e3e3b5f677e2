// The safety contract on the device (README, "Safety contract"): decode and mla handed a bad
// device-resident index (a page id past the pool, CSR offsets past page_indices, a kv_len past
// its pages, cu_seqlens past q) run without reading out of bounds (unused pages hold NaN, so a
// read through a wrong page would show up in the output), hopattn::check_errors then throws
// naming the family, request, value and bound (and clears the record), and debug mode throws
// before the launch, leaving the outputs untouched. Run: hopattn_gpu_tests --gtest_filter='Safety*'
// (ideally under compute-sanitizer --tool memcheck, which must report nothing).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cpu/decode_case.hpp"
#include "cpu/validate_testing.hpp"
#include "decode_upload.hpp"
#include "gpu_test_support.hpp"
#include "hopattn/api.hpp"

namespace hopattn::testing {
namespace {

class Safety : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = cuda_device_problem();
    if (!why.empty()) GTEST_SKIP() << why;
    set_debug(false);
    try {
      check_errors();  // a record left by an earlier test is not this test's
    } catch (const Error&) {
    }
  }
  void TearDown() override { set_debug(false); }
};

// Every byte of a downloaded tensor is the poison pattern (nothing was written).
bool all_poison(const HostTensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.view().data());
  for (int64_t i = 0; i < t.numel() * dtype_size(t.dtype()); ++i) {
    if (p[i] != 0xff) return false;
  }
  return true;
}

bool all_finite(const HostTensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (!std::isfinite(t.get(i))) return false;
  }
  return true;
}

// ------------------------------------------------------------------------------ decode

// Three requests (40, 70 and 20 tokens in pages of 16), GQA 4 on 2 KV heads, D = 128.
struct DecodeSetup {
  std::unique_ptr<decode_case::DecodeRun> r;
  DeviceSet dev;
  DecodeArgs gpu;
  DeviceAllocation ws;
  int64_t num_pages = 0;

  explicit DecodeSetup(bool csr, int num_splits = 0, DecodeKernel kernel = DecodeKernel::kAuto) {
    decode_case::DecodeCase c;
    c.batch = 3;
    c.kv_heads = 2;
    c.group = 4;
    c.head_dim = 128;
    c.kv_lens = {40, 70, 20};
    c.cache.csr = csr;
    std::mt19937_64 rng(12);
    r = decode_case::random_run(c, rng);
    decode_case::assemble(*r, rng);
    r->opts.num_splits = num_splits;
    r->opts.kernel = kernel;
    num_pages = r->kv->k.size(0);
  }
  // Page slot `slot` of request `b` set to `page` in the host page table (before upload()).
  void set_page(int b, int slot, int32_t page) {
    if (r->kv->spec.csr) {
      r->kv->indices.set(static_cast<int64_t>(r->kv->indptr.get(b)) + slot, page);
    } else {
      const int64_t row = r->kv->table.shape()[1];
      r->kv->table.set(b * row + slot, page);
    }
  }
  void upload() {
    gpu = upload_decode_args(dev, *r, r->args);
    const size_t bytes = decode_workspace_size(gpu, r->opts);
    ws = DeviceAllocation(bytes);
    check_cuda(cudaMemset(ws.data(), 0, bytes > 0 ? bytes : 16), "cudaMemset(workspace)");
    gpu.workspace = {bytes > 0 ? ws.data() : nullptr, bytes};
    dev.poison(r->out_buf);
    dev.poison(r->lse_buf);
  }
  void run() { hopattn::decode(gpu, r->opts, nullptr); }
  HostTensor out() {
    HostTensor o(r->out_buf.dtype(), r->out_buf.shape());
    dev.download(r->out_buf, o);
    return o;
  }
};

TEST_F(Safety, GoodDecodeLeavesNoRecord) {
  DecodeSetup s(false);
  s.upload();
  s.run();
  EXPECT_TRUE(passes([] { check_errors(); }));
  EXPECT_TRUE(all_finite(s.out()));
}

void expect_bad_page_reported(bool csr, int num_splits, DecodeKernel kernel = DecodeKernel::kAuto) {
  DecodeSetup s(csr, num_splits, kernel);
  const int32_t bad = static_cast<int32_t>(s.num_pages + 5);
  s.set_page(1, 2, bad);  // request 1's third page (tokens 32..47 of 70)
  s.upload();
  EXPECT_TRUE(passes([&] { s.run(); }));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "the kernel faulted";
  // The bad page's keys were read as zeros: no poisoned (NaN) page was touched.
  EXPECT_TRUE(all_finite(s.out()));
  EXPECT_TRUE(
      throws_error([] { check_errors(); }, ErrorKind::kDeviceIndex,
                   detail::concat("hopattn.check_errors: decode: request 1: page table = ", bad,
                                  ": expected a page index in [0, ", s.num_pages, ")")));
  EXPECT_TRUE(passes([] { check_errors(); })) << "the record is cleared once reported";
}

TEST_F(Safety, DecodeBadPageIdIsNotReadAndIsReported) { expect_bad_page_reported(false, 1); }
TEST_F(Safety, DecodeBadCsrPageIdIsNotReadAndIsReported) { expect_bad_page_reported(true, 1); }
TEST_F(Safety, DecodeBadPageIdWithSplitsIsReported) { expect_bad_page_reported(false, 4); }
void expect_kv_len_past_pages_reported(DecodeKernel kernel) {
  DecodeSetup s(false, kernel == DecodeKernel::kNarrow ? 1 : 0, kernel);
  s.r->kv->lens.set(0, 100000);  // clamped to its row's pages (poisoned slots: NaN, in bounds)
  s.upload();
  s.run();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(throws_error([] { check_errors(); }, ErrorKind::kDeviceIndex,
                           "decode: request 0: kv_lens = 100000: expected 0.."));
}

// The narrow kernel (one split, pages of 16): the same zero-filled keys and the same record.
TEST_F(Safety, NarrowDecodeBadPageIdIsNotReadAndIsReported) {
  expect_bad_page_reported(false, 1, DecodeKernel::kNarrow);
  expect_bad_page_reported(true, 0, DecodeKernel::kNarrow);
}
TEST_F(Safety, NarrowDecodeKvLenPastItsPagesIsReported) {
  expect_kv_len_past_pages_reported(DecodeKernel::kNarrow);
}
TEST_F(Safety, DecodeNegativePageIdIsReported) {
  DecodeSetup s(false);
  s.set_page(2, 0, -3);
  s.upload();
  s.run();
  EXPECT_TRUE(all_finite(s.out()));
  EXPECT_TRUE(throws_error([] { check_errors(); }, ErrorKind::kDeviceIndex,
                           "decode: request 2: page table = -3"));
}

TEST_F(Safety, DecodeCsrOffsetPastPageIndicesIsReported) {
  DecodeSetup s(true);
  s.r->kv->indptr.set(2, 1000000);
  s.upload();
  s.run();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(all_finite(s.out()));
  // Requests 1 and 2 both see the bad entry; either may be recorded first.
  EXPECT_TRUE(
      throws_error([] { check_errors(); }, ErrorKind::kDeviceIndex,
                   "page_indptr entry 2 = 1000000: expected non-decreasing offsets in 0.."));
}

TEST_F(Safety, DecodeKvLenPastItsPagesIsReported) {
  expect_kv_len_past_pages_reported(DecodeKernel::kAuto);
}

TEST_F(Safety, DecodeDebugModeThrowsBeforeLaunch) {
  for (bool csr : {false, true}) {
    DecodeSetup s(csr);
    const int32_t bad = static_cast<int32_t>(s.num_pages + 5);
    s.set_page(1, 2, bad);
    s.upload();
    set_debug(true);
    const std::string where = csr ? "page_indices[" : "page_table[1][2]";
    EXPECT_TRUE(throws_error([&] { s.run(); }, ErrorKind::kValue, where)) << csr;
    EXPECT_TRUE(throws_error([&] { s.run(); }, ErrorKind::kValue,
                             detail::concat("expected a page index in [0, ", s.num_pages, ")")))
        << csr;
    set_debug(false);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_TRUE(all_poison(s.out())) << "debug mode wrote the output of a rejected call";
    EXPECT_TRUE(passes([] { check_errors(); })) << "nothing was launched";
  }
}

TEST_F(Safety, DebugModePassesGoodCalls) {
  DecodeSetup s(true);
  s.upload();
  set_debug(true);
  EXPECT_TRUE(passes([&] { s.run(); }));
  set_debug(false);
  EXPECT_TRUE(passes([] { check_errors(); }));
  EXPECT_TRUE(all_finite(s.out()));
}

TEST_F(Safety, CheckErrorsAndDebugModeRefuseACapture) {
  DecodeSetup s(false);
  s.upload();
  s.run();  // the first launch (the status word's address is known from here on)
  check_cuda(cudaDeviceSynchronize(), "decode");
  cudaStream_t stream = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "BeginCapture");
  const auto hs = reinterpret_cast<Stream>(stream);
  EXPECT_TRUE(throws_error([&] { check_errors(hs); }, ErrorKind::kValue,
                           "expected a stream that is not capturing a CUDA graph"));
  set_debug(true);
  EXPECT_TRUE(throws_error([&] { hopattn::decode(s.gpu, s.r->opts, hs); }, ErrorKind::kValue,
                           "not capturing a CUDA graph (debug mode synchronizes it)"));
  set_debug(false);
  cudaGraph_t graph = nullptr;
  check_cuda(cudaStreamEndCapture(stream, &graph), "EndCapture");
  if (graph != nullptr) cudaGraphDestroy(graph);
  check_cuda(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

// ------------------------------------------------------------------------------ mla

// Two requests of one q token, 16 heads, kv_lens 20 and 40 in pages of 16 (pages 0-1 and 2-4
// of a pool of 6; page 5 unused, NaN like every unused slot), bf16.
struct MlaSetup {
  HostTensor qn, qp, ckv, kpe, cu, lens, table, out, lse;
  DeviceSet dev;
  MlaArgs host, gpu;
  MlaOptions opts;
  DeviceAllocation ws;
  static constexpr int64_t kPages = 6, kPageSize = 16, kHeads = 16;

  MlaSetup() {
    std::mt19937_64 rng(5);
    qn = HostTensor(DType::kBF16, {2, kHeads, kMlaLatentDim});
    qp = HostTensor(DType::kBF16, {2, kHeads, kMlaRopeDim});
    qn.fill_uniform(rng, -1, 1);
    qp.fill_uniform(rng, -1, 1);
    ckv = HostTensor(DType::kBF16, {kPages, kPageSize, kMlaLatentDim});
    kpe = HostTensor(DType::kBF16, {kPages, kPageSize, kMlaRopeDim});
    ckv.fill_bytes(0xff);
    kpe.fill_bytes(0xff);
    const int32_t used_slots[2] = {20, 40};
    const int32_t first_page[2] = {0, 2};
    std::uniform_real_distribution<double> u(-1, 1);
    for (int b = 0; b < 2; ++b) {
      for (int j = 0; j < used_slots[b]; ++j) {
        const int64_t row = (first_page[b] + j / kPageSize) * kPageSize + j % kPageSize;
        for (int d = 0; d < kMlaLatentDim; ++d) ckv.set(row * kMlaLatentDim + d, u(rng));
        for (int d = 0; d < kMlaRopeDim; ++d) kpe.set(row * kMlaRopeDim + d, u(rng));
      }
    }
    cu = int_tensor({0, 1, 2});
    lens = int_tensor({20, 40});
    table = int_tensor({0, 1, 5, 2, 3, 4}, {2, 3});
    out = HostTensor(DType::kBF16, {2, kHeads, kMlaLatentDim});
    lse = HostTensor(DType::kFP32, {2, kHeads});
  }
  void upload() {
    host.q_nope = qn;
    host.q_pe = qp;
    host.ckv = ckv;
    host.kpe = kpe;
    host.cu_seqlens_q = cu;
    host.max_seqlen_q = 1;
    host.pages.block_table = table;
    host.pages.kv_lens = lens;
    host.out = out;
    host.lse = lse;
    gpu = host;
    gpu.q_nope = dev.put(qn, qn.view());
    gpu.q_pe = dev.put(qp, qp.view());
    gpu.ckv = dev.put(ckv, ckv.view());
    gpu.kpe = dev.put(kpe, kpe.view());
    gpu.cu_seqlens_q = dev.put(cu, cu.view());
    gpu.pages.block_table = dev.put(table, table.view());
    gpu.pages.kv_lens = dev.put(lens, lens.view());
    gpu.out = dev.put(out, out.view());
    gpu.lse = dev.put(lse, lse.view());
    const size_t bytes = mla_workspace_size(gpu, opts);
    ws = DeviceAllocation(bytes);
    gpu.workspace = {bytes > 0 ? ws.data() : nullptr, bytes};
    dev.poison(out);
    dev.poison(lse);
  }
  void run() { hopattn::mla(gpu, opts, nullptr); }
  HostTensor downloaded_out() {
    HostTensor o(out.dtype(), out.shape());
    dev.download(out, o);
    return o;
  }
};

TEST_F(Safety, GoodMlaLeavesNoRecord) {
  MlaSetup s;
  s.upload();
  s.run();
  EXPECT_TRUE(passes([] { check_errors(); }));
  EXPECT_TRUE(all_finite(s.downloaded_out()));
}

TEST_F(Safety, MlaBadPageIdIsNotReadAndIsReported) {
  MlaSetup s;
  s.table.set(4, 1000);  // request 1, page slot 1
  s.upload();
  EXPECT_TRUE(passes([&] { s.run(); }));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "the kernel faulted";
  EXPECT_TRUE(all_finite(s.downloaded_out()));
  EXPECT_TRUE(throws_error([] { check_errors(); }, ErrorKind::kDeviceIndex,
                           "hopattn.check_errors: mla: request 1: page table entry 1 = 1000: "
                           "expected a page index in [0, 6)"));
  EXPECT_TRUE(passes([] { check_errors(); }));
}

TEST_F(Safety, MlaCuSeqlensPastQIsReported) {
  MlaSetup s;
  s.cu.set(2, 50);  // request 1 would read q rows 1..49 of 2
  s.upload();
  s.run();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(throws_error([] { check_errors(); }, ErrorKind::kDeviceIndex,
                           "mla: request 1: cu_seqlens_q entry 2 = 50: expected non-decreasing "
                           "offsets in 0..2"));
}

TEST_F(Safety, MlaKvLenPastItsPagesIsReported) {
  MlaSetup s;
  s.lens.set(0, 1000);  // 3 pages of 16 hold 48 tokens (past 20 they are NaN, in bounds)
  s.upload();
  s.run();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(throws_error([] { check_errors(); }, ErrorKind::kDeviceIndex,
                           "mla: request 0: kv_lens = 1000: expected 0..48"));
}

TEST_F(Safety, MlaDebugModeThrowsBeforeLaunch) {
  MlaSetup s;
  s.table.set(4, 1000);
  s.upload();
  set_debug(true);
  EXPECT_TRUE(throws_error([&] { s.run(); }, ErrorKind::kValue,
                           "hopattn.mla: page_table[1][1]: expected a page index in [0, 6), got "
                           "1000"));
  set_debug(false);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(all_poison(s.downloaded_out()));
  EXPECT_TRUE(passes([] { check_errors(); }));
}

}  // namespace
}  // namespace hopattn::testing
