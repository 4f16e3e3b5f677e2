// The decode kernels are launched as programmatic dependents of the kernel before them
// (kernels/common/programmatic_launch.cuh), so their CTAs may start while that kernel still runs.
// Here the kernel before writes q late, after letting dependents launch: a decode that read q (or
// anything) before ptx::wait_for_prior_grids() would read the poison still in place.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "cpu/decode_case.hpp"
#include "cuda_stream.hpp"
#include "decode_upload.hpp"
#include "gpu_test_support.hpp"
#include "hopattn/api.hpp"
#include "late_write.hpp"

namespace hopattn::testing {
namespace {

struct PdlCase {
  const char* name;
  DecodeKernel kernel;
  int batch, kv_len;
};

class DecodeProgrammaticLaunch : public GpuTestWithParam<PdlCase> {};

TEST_P(DecodeProgrammaticLaunch, WaitsForTheKernelBefore) {
  const PdlCase& pc = GetParam();
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  decode_case::DecodeCase c;
  c.batch = pc.batch;
  c.kv_heads = 8;
  c.group = 4;
  c.head_dim = 128;
  c.kv_lens.assign(static_cast<size_t>(pc.batch), pc.kv_len);
  auto r = decode_case::random_run(c, rng);
  decode_case::assemble(*r, rng);
  DecodeOptions opts = r->opts;
  opts.kernel = pc.kernel;
  DeviceSet dev;
  DecodeArgs gpu = upload_decode_args(dev, *r, r->args);
  DeviceAllocation ws(decode_workspace_size(gpu, opts));
  check_cuda(cudaMemset(ws.data(), 0, ws.bytes()), "cudaMemset(workspace)");
  gpu.workspace = {ws.data(), ws.bytes()};
  CudaStream stream;

  auto download_out = [&] {
    HostTensor out(r->out_buf.dtype(), r->out_buf.shape());
    dev.download(r->out_buf, out);
    return out;
  };
  // The result with q in place before the call.
  decode(gpu, opts, stream.api());
  stream.sync("decode, q in place");
  HostTensor want = download_out();

  // q poisoned (NaN) and written back by the kernel right before the decode.
  const size_t q_bytes = static_cast<size_t>(r->q_buf.numel()) * dtype_size(r->q_buf.dtype());
  LateInput q(gpu.q.data(), q_bytes);
  dev.poison(r->out_buf);
  q.rewrite_late(stream.get());
  decode(gpu, opts, stream.api());
  stream.sync("decode behind the late copy");
  HostTensor got = download_out();

  expect_as_in_place(want, got, "decode out");
}

INSTANTIATE_TEST_SUITE_P(Kernels, DecodeProgrammaticLaunch,
                         ::testing::Values(PdlCase{"small_b1_kv8k", DecodeKernel::kSmall, 1, 8192},
                                           PdlCase{"tiles_b4_kv1k", DecodeKernel::kTiles, 4, 1000}),
                         [](const ::testing::TestParamInfo<PdlCase>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace hopattn::testing
