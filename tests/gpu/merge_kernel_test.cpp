// The merge_states / merge_states_n kernels (src/kernels/merge) through the public API against
// the CPU reference (double, fp32 outputs) on fresh seeded random states: every input/output
// float type, strided (row-padded) views, empty states (lse = -inf, their o NaN: never read),
// rows where every state is empty (out 0, lse -inf) and, in the `nan` cases, rows with a NaN lse
// (out and lse NaN). Outputs are poisoned first.
//
// Error bound: inputs are exact on both sides; the kernel's weights e^(lse_k - lse) come from
// fp32 expf/logf (relative error ~1e-7 each) and it accumulates in fp32, so before the final
// rounding |err| <= ~1e-6 * max|o|; the bound is one unit in the last place of the output dtype
// at the result's magnitude plus 1e-5 * max|o|. lse: |err| <= 1e-5 (the DESIGN bound is 1e-3).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/element_access.hpp"
#include "cuda_stream.hpp"
#include "gpu_test_support.hpp"
#include "hopattn/api.hpp"
#include "late_write.hpp"
#include "reference/reference.hpp"

namespace hopattn::testing {
namespace {

struct MergeCase {
  std::string name;
  DType in = DType::kBF16, out = DType::kBF16;
  int tokens = 37, heads = 5, dim = 128;
  int states = 2;  // 2 with n_way = false: merge_states(a, b)
  bool n_way = false;
  bool nan = false;  // a NaN lse in some rows
};

void PrintTo(const MergeCase& c, std::ostream* os) { *os << c.name; }

std::vector<MergeCase> merge_cases() {
  std::vector<MergeCase> cases;
  auto add = [&](std::string name, DType in, DType out, int dim, int states, bool n_way,
                 int tokens = 37, int heads = 5, bool nan = false) {
    MergeCase c;
    c.tokens = tokens;
    c.heads = heads;
    c.nan = nan;
    c.name = std::move(name);
    c.in = in;
    c.out = out;
    c.dim = dim;
    c.states = states;
    c.n_way = n_way;
    cases.push_back(c);
  };
  add("pair_bf16", DType::kBF16, DType::kBF16, 128, 2, false);
  add("pair_fp16_d64", DType::kFP16, DType::kFP16, 64, 2, false);
  add("pair_fp32_to_bf16_d512", DType::kFP32, DType::kBF16, 512, 2, false);
  add("pair_fp32_d96", DType::kFP32, DType::kFP32, 96, 2, false);
  // 5 16-byte pieces a row: merge_few_kernel's 8 slots of one piece, with two sources.
  add("pair_bf16_d40", DType::kBF16, DType::kBF16, 40, 2, false);
  add("pair_nan_fp16", DType::kFP16, DType::kFP16, 128, 2, false, 37, 5, true);
  add("n1_bf16_to_fp32", DType::kBF16, DType::kFP32, 128, 1, true);
  add("n2_fp16", DType::kFP16, DType::kFP16, 256, 2, true);
  add("n7_fp32_to_fp16", DType::kFP32, DType::kFP16, 128, 7, true);
  // merge_few_kernel's 4-slot form (one slot past n reloads a state) and its 8-slot bound,
  // then merge_wide_kernel just past it (few rows: under launch.cu's thread bound), with state
  // counts that leave its groups and batches uneven.
  add("n3_bf16", DType::kBF16, DType::kBF16, 128, 3, true);
  add("n4_fp32_d64", DType::kFP32, DType::kFP32, 64, 4, true);
  add("n8_bf16", DType::kBF16, DType::kBF16, 128, 8, true);
  add("n9_fp16_d64", DType::kFP16, DType::kBF16, 64, 9, true);
  add("n40_bf16_d576", DType::kBF16, DType::kBF16, 576, 40, true);
  // The mla family's split partials of one request: 64 fp32 states of 128 heads x 512.
  add("wide_n64_fp32_to_bf16_t1_h128_d512", DType::kFP32, DType::kBF16, 512, 64, true, 1, 128);
  add("wide_n77_fp16_d8", DType::kFP16, DType::kFP16, 8, 77, true);
  add("wide_n16_bf16_nan", DType::kBF16, DType::kBF16, 128, 16, true, 37, 5, true);
  // fp32 partials past one batch of the 4 x 16 state geometry (states 64..99 in later batches),
  // uneven over the groups, and NaN rows.
  add("wide_n100_fp32_d128_nan", DType::kFP32, DType::kFP32, 128, 100, true, 7, 3, true);
  add("wide_n23_fp32_to_bf16_d64", DType::kFP32, DType::kBF16, 64, 23, true, 5, 4);
  // 9 to 16 states over enough rows to pass launch.cu's merge_wide_kernel bound (>= 65536
  // threads of merge_vec_kernel's four pieces, or one where the row does not split into fours):
  // merge_few_kernel's 16 slots, in two rounds, with slots past n for all but 16; one piece a
  // row (D = 8 fp16), five (D = 40 bf16) and six fp32 fours (D = 96).
  add("few_n9_bf16_t600_h32", DType::kBF16, DType::kBF16, 128, 9, true, 600, 32);
  add("few_n13_fp16_to_fp32_t600_h32_nan", DType::kFP16, DType::kFP32, 128, 13, true, 600, 32,
      true);
  add("few_n16_fp32_d64_t600_h32", DType::kFP32, DType::kFP32, 64, 16, true, 600, 32);
  add("few_n16_bf16_t600_h32_nan", DType::kBF16, DType::kBF16, 128, 16, true, 600, 32, true);
  add("few_n11_bf16_d40_t420_h32", DType::kBF16, DType::kBF16, 40, 11, true, 420, 32);
  add("few_n15_fp32_to_bf16_d96_t400_h32", DType::kFP32, DType::kBF16, 96, 15, true, 400, 32);
  add("few_n10_fp16_d8_t2048_h32_nan", DType::kFP16, DType::kFP16, 8, 10, true, 2048, 32, true);
  // The 8 slots of one source over as many rows, with NaN rows.
  add("few_n7_bf16_t600_h32_nan", DType::kBF16, DType::kBF16, 128, 7, true, 600, 32, true);
  // Past 16 states over as many rows: merge_vec_kernel, four pieces (76800 threads) and one
  // (D = 40: 67200).
  add("vec_n20_bf16_t600_h32", DType::kBF16, DType::kBF16, 128, 20, true, 600, 32);
  add("vec_n17_bf16_d40_t420_h32_nan", DType::kBF16, DType::kBF16, 40, 17, true, 420, 32, true);
  return cases;
}

// Spacing of `dtype` at |x| (fp32 included).
double ulp(DType dtype, double x) {
  const int man = dtype == DType::kBF16 ? 7 : (dtype == DType::kFP16 ? 10 : 23);
  const int min_exp = dtype == DType::kFP16 ? -14 : -126;
  int e = 0;
  std::frexp(std::fabs(x), &e);
  return std::ldexp(1.0, std::max(e - 1, min_exp) - man);
}

// lse values: mostly finite, some empty states, whole rows of empty states and, with `nan`, a
// NaN lse in every 13th row (state row % states, empty or not otherwise).
void fill_lse(const TensorView& lse, std::mt19937_64& rng, int64_t rows_per_state, int states,
              bool nan) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int64_t row = 0; row < rows_per_state; ++row) {
    const bool all_empty = row % 11 == 3;
    for (int k = 0; k < states; ++k) {
      double v =
          all_empty || u(rng) < 0.2 ? -std::numeric_limits<double>::infinity() : 8.0 * u(rng) - 4.0;
      if (nan && row % 13 == 5 && k == row % states) v = std::numeric_limits<double>::quiet_NaN();
      // row = t * heads + h; element (t, k, h) or (t, h) for a single state.
      store_element(lse, row * states + k, v);
    }
  }
}

class MergeKernel : public GpuTestWithParam<MergeCase> {};

TEST_P(MergeKernel, MatchesReference) {
  const MergeCase& c = GetParam();
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  const int64_t T = c.tokens, H = c.heads, D = c.dim, n = c.states;
  const int64_t pad = 16;  // 16-byte aligned row gaps in every dtype

  std::vector<TestTensor> o, lse;  // n_way: one [T, n, H, D]; pair: a and b [T, H, D]
  if (c.n_way) {
    o.push_back(padded_tensor(c.in, {T, n, H, D}, pad));
    lse.emplace_back(HostTensor(DType::kFP32, {T, n, H}));
  } else {
    for (int k = 0; k < 2; ++k) {
      o.push_back(padded_tensor(c.in, {T, H, D}, pad));
      lse.emplace_back(HostTensor(DType::kFP32, {T, H}));
    }
  }
  for (auto& t : o) fill_uniform(t.view, rng, -1.0, 1.0);
  if (c.n_way) {
    // lse [T, n, H] contiguous: element (t, k, h) at (t * n + k) * H + h.
    HostTensor tmp(DType::kFP32, {T * H, n});
    fill_lse(tmp, rng, T * H, static_cast<int>(n), c.nan);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t k = 0; k < n; ++k) {
          lse[0].storage.set((t * n + k) * H + h, tmp.get((t * H + h) * n + k));
        }
      }
    }
  } else {
    HostTensor tmp(DType::kFP32, {T * H, 2});
    fill_lse(tmp, rng, T * H, 2, c.nan);
    for (int64_t i = 0; i < T * H; ++i) {
      lse[0].storage.set(i, tmp.get(i * 2));
      lse[1].storage.set(i, tmp.get(i * 2 + 1));
    }
  }
  // An empty state's o is never read: NaN there would poison any kernel that read it.
  const double kNaN = std::numeric_limits<double>::quiet_NaN();
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < n; ++k) {
      for (int64_t h = 0; h < H; ++h) {
        const TensorView& ov = o[c.n_way ? 0 : k].view;
        const TensorView& lv = lse[c.n_way ? 0 : k].view;
        const int64_t o_row = c.n_way ? t * ov.stride(0) + k * ov.stride(1) + h * ov.stride(2)
                                      : t * ov.stride(0) + h * ov.stride(1);
        const int64_t l_at = c.n_way ? t * lv.stride(0) + k * lv.stride(1) + h * lv.stride(2)
                                     : t * lv.stride(0) + h * lv.stride(1);
        if (load_element(lv, l_at) != -std::numeric_limits<double>::infinity()) continue;
        for (int64_t d = 0; d < D; ++d)
          store_element(ov, o_row + d * ov.stride(c.n_way ? 3 : 2), kNaN);
      }
    }
  }
  TestTensor out = padded_tensor(c.out, {T, H, D}, pad);
  TestTensor out_lse(HostTensor(DType::kFP32, {T, H}));
  HostTensor want(DType::kFP32, {T, H, D});
  HostTensor want_lse(DType::kFP32, {T, H});

  DeviceSet dev;
  const TensorView d_out = dev.put(out);
  const TensorView d_lse = dev.put(out_lse);
  dev.poison(out.storage);
  dev.poison(out_lse.storage);
  if (c.n_way) {
    MergeNArgs ref{o[0].view, lse[0].view, want, want_lse};
    reference::merge_states_n(ref);
    MergeNArgs gpu{dev.put(o[0]), dev.put(lse[0]), d_out, d_lse};
    ::hopattn::merge_states_n(gpu, nullptr);
  } else {
    MergeArgs ref{o[0].view, lse[0].view, o[1].view, lse[1].view, want, want_lse};
    reference::merge_states(ref);
    MergeArgs gpu{dev.put(o[0]), dev.put(lse[0]), dev.put(o[1]), dev.put(lse[1]), d_out, d_lse};
    ::hopattn::merge_states(gpu, nullptr);
  }
  check_cuda(cudaDeviceSynchronize(), "merge kernel");
  HostTensor got_out(out.storage.dtype(), out.storage.shape());
  HostTensor got_lse(DType::kFP32, {T, H});
  dev.download(out.storage, got_out);
  dev.download(out_lse.storage, got_lse);

  const std::vector<double> g = gather(rebase(out.view, out.storage, got_out));
  const std::vector<double> w = gather(want);
  const std::vector<double> gl = gather(got_lse);
  const std::vector<double> wl = gather(want_lse);
  int64_t bad = 0;
  double max_err = 0;
  std::string first;
  for (size_t i = 0; i < w.size(); ++i) {
    // A row with a NaN lse is NaN throughout.
    const bool want_nan = std::isnan(w[i]);
    const double err = want_nan ? (std::isnan(g[i]) ? 0.0 : INFINITY) : std::fabs(g[i] - w[i]);
    if (!(err <= (want_nan ? 0.0 : ulp(c.out, w[i]) + 1e-5))) {
      if (bad++ == 0) first = "out[" + std::to_string(i) + "] = " + std::to_string(g[i]);
    }
    if (std::isnan(err) || err > max_err) max_err = err;
  }
  for (size_t i = 0; i < wl.size(); ++i) {
    const bool ok = std::isnan(wl[i])    ? std::isnan(gl[i])
                    : wl[i] == -INFINITY ? gl[i] == -INFINITY
                                         : std::fabs(gl[i] - wl[i]) <= 1e-5;
    if (!ok && bad++ == 0) {
      first = "lse[" + std::to_string(i) + "] = " + std::to_string(gl[i]) + ", want " +
              std::to_string(wl[i]);
    }
  }
  std::printf("[ %s ] seed %llu: max out err %.3g\n", c.name.c_str(),
              static_cast<unsigned long long>(seed), max_err);
  EXPECT_EQ(bad, 0) << "first: " << first;
}

INSTANTIATE_TEST_SUITE_P(Grid, MergeKernel, ::testing::ValuesIn(merge_cases()),
                         [](const ::testing::TestParamInfo<MergeCase>& info) {
                           return info.param.name;
                         });

// merge_states and merge_states_n launch as programmatic dependents of the kernel before them
// (the states are usually its output). Here that kernel writes the first state's o late, after
// letting dependents launch: the result must be bitwise the one with the states in place (a read
// before ptx::wait_for_prior_grids() would see the NaN poison).
class MergeProgrammaticLaunch : public DeviceStatusTest {};

TEST_F(MergeProgrammaticLaunch, WaitsForTheKernelBefore) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  const int64_t T = 4096, H = 8, D = 128, n = 4;
  for (const bool n_way : {false, true}) {
    SCOPED_TRACE(n_way ? "merge_states_n" : "merge_states");
    std::vector<HostTensor> o, lse;
    if (n_way) {
      o.emplace_back(DType::kBF16, std::vector<int64_t>{T, n, H, D});
      lse.emplace_back(DType::kFP32, std::vector<int64_t>{T, n, H});
    } else {
      for (int k = 0; k < 2; ++k) {
        o.emplace_back(DType::kBF16, std::vector<int64_t>{T, H, D});
        lse.emplace_back(DType::kFP32, std::vector<int64_t>{T, H});
      }
    }
    for (auto& t : o) t.fill_uniform(rng, -1.0, 1.0);
    for (auto& t : lse) t.fill_uniform(rng, -4.0, 4.0);
    HostTensor out(DType::kBF16, {T, H, D}), out_lse(DType::kFP32, {T, H});
    DeviceSet dev;
    const TensorView d_out = dev.put(out, out.view()), d_lse = dev.put(out_lse, out_lse.view());
    std::vector<TensorView> d_o, d_l;
    for (size_t k = 0; k < o.size(); ++k) {
      d_o.push_back(dev.put(o[k], o[k].view()));
      d_l.push_back(dev.put(lse[k], lse[k].view()));
    }
    CudaStream stream;
    auto result = [&] {
      if (n_way) {
        ::hopattn::merge_states_n(MergeNArgs{d_o[0], d_l[0], d_out, d_lse}, stream.api());
      } else {
        ::hopattn::merge_states(MergeArgs{d_o[0], d_l[0], d_o[1], d_l[1], d_out, d_lse},
                                stream.api());
      }
      stream.sync("merge");
      HostTensor got(DType::kBF16, {T, H, D}), got_lse(DType::kFP32, {T, H});
      dev.download(out, got);
      dev.download(out_lse, got_lse);
      return std::make_pair(std::move(got), std::move(got_lse));
    };
    dev.poison(out);
    dev.poison(out_lse);
    auto want = result();
    LateInput first(d_o[0].data(), size_t(o[0].numel()) * dtype_size(DType::kBF16));
    dev.poison(out);
    dev.poison(out_lse);
    first.rewrite_late(stream.get());
    auto got = result();
    expect_as_in_place(want.first, got.first, "merge out");
    expect_as_in_place(want.second, got.second, "merge lse");
  }
}

}  // namespace
}  // namespace hopattn::testing
