// The bwd kernels (hopattn::attention_bwd on CUDA tensors) against the CPU reference
// (hopattn::reference::attention_bwd, double accumulation) on fresh seeded random data.
//
// Error bound, per gradient tensor t in {dq, dk, dv} (FlashAttention's rule):
//   max |t - ref| <= 2 * max |emul - ref| + u * max(max |ref_t|, 0.01 * G)
// where `emul` is the backward as a plain 16-bit PyTorch program computes it (bwd_kernel_test.hpp:
// every op rounded to the dtype, matmuls accumulated in fp32), u is the dtype's unit roundoff
// (2^-8 bf16, 2^-11 fp16) and G the largest |ref| over all three gradients. The absolute term
// covers the final rounding of each output, and elements whose exact value is 0 where the
// emulation is exact too (kv_len 1: P = 1, dS = 0, while the kernel's dP - D differs from 0 by
// fp32 rounding). dsinks: against the value implied by the stored out and lse the kernel reads,
// within its fp32 arithmetic, and against the reference within that plus out's rounding to 16
// bits (check_dsinks derives both bounds). NaN never passes.
// Outputs and the workspace are poisoned (0xff) before every run. Every case runs twice: dk, dv
// and dsinks must be bitwise identical (no atomics touch them); with deterministic = true, dq too.
//
// Run order: the host-only geometry checks, then the single-tile cases (which also check the
// workspace stages: delta/lse from the preprocess, the fp32 dQ accumulator of the main kernel),
// then growing problems. Filters: --gtest_filter='BwdGeometry*:BwdKernel*'.
#include "bwd_kernel_test.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <tuple>

#include "hopattn/api.hpp"
#include "hopattn/error.hpp"
#include "kernels/bwd/workspace.hpp"
#include "odd_shape_grid.hpp"

namespace hopattn::testing::bwd {
namespace {

namespace kb = hopattn::kernels::bwd;
constexpr double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------------------- host-only checks
// The block geometry the kernels schedule by (workspace.hpp) against brute force over elements.
TEST(BwdGeometry, BlockRangesMatchBruteForce) {
  const int lens[] = {0, 1, 5, 63, 64, 65, 113, 128, 129, 239, 300};
  const int windows[][2] = {{-1, -1}, {-1, 0}, {0, 0}, {10, 0}, {64, 16}, {100, -1}, {-1, 7}};
  int checked = 0;
  for (int sq : lens) {
    for (int sk : lens) {
      for (const auto& w : windows) {
        const kb::BlockGeometry g{sq, sk, w[0], w[1], kb::kBlockM, kb::kBlockN};
        for (int n = 0; n < g.num_n_blocks(); ++n) {
          const kb::BlockGeometry::MRange r = g.m_range(n);
          for (int m = 0; m < g.num_m_blocks(); ++m) {
            bool meet = false, all = true;
            for (int i = m * kb::kBlockM; i < std::min(sq, (m + 1) * kb::kBlockM); ++i) {
              for (int j = n * kb::kBlockN; j < (n + 1) * kb::kBlockN; ++j) {
                // (causal is window right = 0 here, as the kernels see it)
                const bool vis =
                    j < sk && reference::key_visible(i, j, sq, sk, false, Window{w[0], w[1]});
                meet |= vis;
                all &= vis;
              }
            }
            const bool in_range = m >= r.begin && m < r.end;
            ASSERT_EQ(in_range, meet) << "sq " << sq << " sk " << sk << " window " << w[0] << ","
                                      << w[1] << " m " << m << " n " << n;
            // Deterministic order (dq_turn): the blocks meeting tile m are first..last_n_block(m)
            // (tests/cpu/bwd_order_test.cpp checks the order itself).
            ASSERT_EQ(meet, n >= g.first_n_block(m) && n <= g.last_n_block(m)) << "m " << m;
            if (!g.needs_mask(m, n)) {
              ASSERT_TRUE(all) << "m " << m << " n " << n;
            }
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

TEST(BwdGeometry, FragmentOrderIsAPermutation) {
  for (int d : {64, 128, 192, 256}) {
    std::vector<int> seen(kb::kBlockM * d, 0);
    for (int r = 0; r < kb::kBlockM; ++r) {
      for (int c = 0; c < d; ++c) ++seen[kb::dq_accum_index(r, c)];
    }
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int x) { return x == 1; })) << d;
  }
}

// ---------------------------------------------------------------------------- the check
std::string skip_reason() { return hopper::gpu_skip_reason(); }
#define SKIP_WITHOUT_HOPPER() \
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why

struct Run {
  std::vector<uint8_t> dq, dk, dv, dsinks;
};

struct Gpu {
  Problem& pb;
  DeviceBuffer<uint8_t> workspace;
  size_t workspace_bytes = 0;

  BwdArgs args(bool device) { return pb.bwd_args(device); }

  explicit Gpu(Problem& p) : pb(p) {
    workspace_bytes = attention_bwd_workspace_size(args(true), pb.c.opts);
    workspace = DeviceBuffer<uint8_t>(std::max<size_t>(workspace_bytes, 16));
  }

  Run run() {
    for (Mirrored* m : {pb.dq.get(), pb.dk.get(), pb.dv.get(), pb.dsinks.get()}) {
      if (m != nullptr) m->poison();
    }
    workspace.fill_bytes(0xFF);
    BwdArgs a = args(true);
    a.workspace = {workspace.get(), workspace_bytes};
    attention_bwd(a, pb.c.opts, nullptr);
    hopper::sync_or_die(nullptr, "hopattn bwd kernels");
    Run r;
    for (auto [m, dst] : {std::pair{pb.dq.get(), &r.dq}, std::pair{pb.dk.get(), &r.dk},
                          std::pair{pb.dv.get(), &r.dv}, std::pair{pb.dsinks.get(), &r.dsinks}}) {
      if (m == nullptr) continue;
      m->download();
      *dst = m->raw();
    }
    return r;
  }
};

struct TensorCheck {
  const char* name;
  const Mirrored* got;
  const std::vector<double>* want;
  const std::vector<float>* emul;
  bool kv;  // key-side tensor (rows = keys, heads = Hkv)
  int dim;  // columns (Dqk or Dv)
};

// Unit roundoff of a 16-bit dtype (round to nearest: half the spacing at 1).
double unit_roundoff(DType dtype) {
  return dtype == DType::kBF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
}

// Compares one gradient tensor; on failure prints where the bad elements sit: per request, head
// and 64-row tile for dq, per request, KV head and 64 keys for dk/dv (one MMA warpgroup's keys at
// head dims up to 128, one KV block above).
void check_tensor(const Problem& pb, const TensorCheck& t, double g_max) {
  const BwdCase& c = pb.c;
  const int heads = t.kv ? c.hkv : c.hq;
  double err = 0, err_emul = 0, ref_max = 0;
  int64_t nan_count = 0;
  struct Worst {
    double err = -1;
    int b = 0, i = 0, h = 0, d = 0;
    double got = 0, want = 0;
  } worst;
  for (int b = 0; b < c.batch(); ++b) {
    const int len = t.kv ? c.kv_lens[b] : c.q_lens[b];
    for (int i = 0; i < len; ++i) {
      for (int h = 0; h < heads; ++h) {
        for (int d = 0; d < t.dim; ++d) {
          const int64_t off = pb.offset(t.kv, b, i, h, d, heads, t.dim);
          const double g = t.got->host.get(off), w = (*t.want)[off];
          const double e = std::fabs(g - w);
          if (!std::isfinite(g)) ++nan_count;
          if (!(e <= worst.err)) worst = {std::isnan(e) ? kInf : e, b, i, h, d, g, w};
          err = std::isnan(e) ? kInf : std::max(err, e);
          err_emul = std::max(err_emul, std::fabs((*t.emul)[off] - w));
          ref_max = std::max(ref_max, std::fabs(w));
        }
      }
    }
  }
  const double u = unit_roundoff(c.dtype);
  const double bound = 2 * err_emul + u * std::max(ref_max, 0.01 * g_max);
  std::printf("  %s: max err %.3g, bound %.3g (emulation err %.3g, max |ref| %.3g)\n", t.name, err,
              bound, err_emul, ref_max);
  EXPECT_EQ(nan_count, 0) << t.name << ": non-finite values (unwritten elements stay 0xff = NaN)";
  EXPECT_LE(err, bound) << t.name << ": worst at request " << worst.b << (t.kv ? " key " : " row ")
                        << worst.i << " head " << worst.h << " dim " << worst.d << ": got "
                        << worst.got << ", want " << worst.want;
  if (err <= bound && nan_count == 0) return;
  std::map<std::tuple<int, int, int>, int> bad;
  for (int b = 0; b < c.batch(); ++b) {
    const int len = t.kv ? c.kv_lens[b] : c.q_lens[b];
    for (int i = 0; i < len; ++i) {
      for (int h = 0; h < heads; ++h) {
        for (int d = 0; d < t.dim; ++d) {
          const int64_t off = pb.offset(t.kv, b, i, h, d, heads, t.dim);
          const double e = std::fabs(t.got->host.get(off) - (*t.want)[off]);
          if (!(e <= bound)) ++bad[{b, h, i / 64}];
        }
      }
    }
  }
  int shown = 0;
  for (const auto& [key, n] : bad) {
    if (++shown > 12) break;
    const int lo = 64 * std::get<2>(key);
    std::printf("    %s bad elements: request %d head %d %s %d..%d: %d\n", t.name, std::get<0>(key),
                std::get<1>(key), t.kv ? "keys" : "rows", lo, lo + 63, n);
  }
}

std::vector<double> as_doubles(const Mirrored& m) { return m.host.to_double(); }

// The workspace after a run: the preprocess's delta and lse_log2 of request 0, head 0 against the
// host, and the main kernel's fp32 dQ accumulator (unscaled) against ref dq / scale.
void check_workspace(Gpu& gpu, const std::vector<double>& ref_dq) {
  const Problem& pb = gpu.pb;
  const BwdCase& c = pb.c;
  const kb::WorkspaceLayout lay = kb::workspace_layout(gpu.args(true));
  std::vector<uint8_t> ws(gpu.workspace_bytes);
  cuda_check(cudaMemcpy(ws.data(), gpu.workspace.get(), ws.size(), cudaMemcpyDeviceToHost),
             "workspace download");
  const auto* lse2 = reinterpret_cast<const float*>(ws.data() + lay.lse_offset);
  const auto* delta = reinterpret_cast<const float*>(ws.data() + lay.delta_offset);
  const auto* acc = reinterpret_cast<const float*>(ws.data() + lay.dq_accum_offset);
  const double scale = reference::default_scale(c.opts.scale, c.d);
  double delta_err = 0, lse_err = 0, acc_err = 0, acc_max = 0;
  const int rows = std::min(c.q_lens[0], kb::kBlockM);
  for (int i = 0; i < kb::kBlockM; ++i) {
    double want_delta = 0, want_lse = kInf;
    if (i < rows) {
      want_delta = pb.stored_row_dot(0, i, 0).dot;
      const double l = pb.stored_lse(0, i, 0);
      want_lse = l == -kInf ? kInf : l * 1.4426950408889634;
    }
    delta_err = std::max(delta_err, std::fabs(delta[i] - want_delta));
    lse_err = std::max(
        lse_err, want_lse == kInf ? (lse2[i] == kInf ? 0 : kInf) : std::fabs(lse2[i] - want_lse));
    for (int d = 0; i < rows && d < c.d; ++d) {
      const double want = ref_dq[pb.offset(false, 0, i, 0, d, c.hq)] / scale;
      const double got = acc[kb::dq_accum_index(i, d)];
      acc_err = std::isnan(got) ? kInf : std::max(acc_err, std::fabs(got - want));
      acc_max = std::max(acc_max, std::fabs(want));
    }
  }
  std::printf(
      "  workspace (request 0, head 0, tile 0): delta max err %.3g, lse_log2 max err %.3g, "
      "dq_accum max err %.3g (max |ref dq / scale| %.3g)\n",
      delta_err, lse_err, acc_err, acc_max);
  EXPECT_LE(delta_err, 1e-3 * c.d) << "preprocess: delta = rowsum(dO * O)";
  EXPECT_LE(lse_err, 1e-3) << "preprocess: lse_log2 (rows past the end must be +inf)";
  EXPECT_LE(acc_err, 0.05 * acc_max + 1e-3) << "main kernel: fp32 dQ accumulator (fragment order)";
}

// dsinks_h = -sum_r p_r D_r over the rows r of head h, p_r = exp(sink_h - lse_r). The kernel takes
// D_r = sum_d dO_rd O_rd from the stored 16-bit O and p_r from the stored fp32 lse; the reference
// recomputes both exactly. The terms cancel (D_r has either sign), so the 16-bit rounding of O,
// harmless per element, dominates the difference to the reference, and a 16-bit emulation that
// forms D as sum P dP (as PyTorch's autograd does) does not reproduce it. Two checks instead, with
// A_r = sum_d |dO_rd O_rd| and B_r = sum_d |dO_rd| over the stored O, u32 = 2^-24 and
// gamma(n) = n u32 / (1 - n u32):
//
// 1. Against G_h = -sum_r p_r D_r in double from the inputs the kernel got (stored O, lse): only
//    the kernel's fp32 arithmetic differs. Each term passes through at most
//      n_r = Dv (fp32 dot: 8 fmas per lane + log2(Dv / 8) shuffle adds)
//          + |sink - lse_r| + 4 (the argument's rounding scaled by exp; expf within 2 ulp)
//          + 1 (p * D) + kBlockM (the tile's ordered sum) + T (a lane's ordered sum over tiles,
//            T <= all q tiles of the head) + 5 (the warp butterfly)
//    roundings, so |got - G| <= sum_r gamma(n_r) p_r A_r + 2^-120 sum_r (1 + A_r), the last term
//    for values under fp32's normal range (p_r underflows where lse_r is far above the sink).
// 2. Against the reference w: |G - w| <= sum_r p_r sum_d |dO_rd| |O_rd - O*_rd|
//    + sum_r |p_r - p*_r| |D*_r| + |w - w*|. O* -> fp32 -> 16 bits gives |O - O*| <= u_s |O| + eta
//    with u_s = (u + 2 u32) / (1 - u - 2 u32) (u the dtype's unit roundoff) and eta covering 16-bit
//    subnormals (fp16 2^-24, bf16 2^-133); the fp32 lse gives |p - p*| <= 2 u32 |lse| p; and
//    |D*| <= (1 + u_s) A + eta B, |w - w*| <= 2 u32 |w| (w stored as fp32). So
//      |got - w| <= check 1's bound + sum_r p_r (u_s A_r + eta B_r)
//                   + sum_r 2 u32 |lse_r| p_r ((1 + u_s) A_r + eta B_r) + 2 u32 |w|.
//    (The reference's double arithmetic errs by ~2^-50 sum_r p_r A_r, far inside check 1's
//    gamma(n_r) >= 2^-17.)
// The 16-bit emulation's dsinks error is printed for comparison only.
void check_dsinks(const Problem& pb, const Mirrored& ref_dsinks, const Emulated& em) {
  const BwdCase& c = pb.c;
  const double u32 = std::ldexp(1.0, -24), u = unit_roundoff(c.dtype);
  const double u_s = (u + 2 * u32) / (1 - u - 2 * u32);
  const double eta = c.dtype == DType::kFP16 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -133);
  const auto gamma = [&](double n) { return n * u32 / (1 - n * u32); };
  int tiles = 0;
  for (int b = 0; b < c.batch(); ++b) tiles += (c.q_lens[b] + kb::kBlockM - 1) / kb::kBlockM;
  const double chain = c.d_v() + 4 + 1 + kb::kBlockM + tiles + 5;
  double worst_given = 0, worst_ref = 0, worst_emul = 0;
  for (int h = 0; h < c.hq; ++h) {
    const double sink = pb.sinks->host.get(h);
    double given = 0, fp32_bound = 0, rounding_bound = 0;
    for (int b = 0; b < c.batch(); ++b) {
      for (int i = 0; i < c.q_lens[b]; ++i) {
        const double lse = pb.stored_lse(b, i, h);
        if (lse == -kInf) continue;  // no key and no sink: the kernel skips the row (p would be 0)
        const double p = std::exp(sink - lse);
        const Problem::RowDot r = pb.stored_row_dot(b, i, h);
        given -= p * r.dot;
        fp32_bound +=
            gamma(chain + std::fabs(sink - lse)) * p * r.abs + std::ldexp(1 + r.abs, -120);
        rounding_bound += p * (u_s * r.abs + eta * r.abs_dout) +
                          2 * u32 * std::fabs(lse) * p * ((1 + u_s) * r.abs + eta * r.abs_dout);
      }
    }
    const double got = pb.dsinks->host.get(h), want = ref_dsinks.host.get(h);
    const double ref_bound = fp32_bound + rounding_bound + 2 * u32 * std::fabs(want);
    const double err_given = std::fabs(got - given), err_ref = std::fabs(got - want);
    worst_given = std::max(worst_given, std::isnan(err_given) ? kInf : err_given / fp32_bound);
    worst_ref = std::max(worst_ref, std::isnan(err_ref) ? kInf : err_ref / ref_bound);
    worst_emul = std::max(worst_emul, std::fabs(em.dsinks[h] - want));
    EXPECT_LE(err_given, fp32_bound)
        << "dsinks[" << h << "]: got " << got << ", want " << given
        << " (from the stored out and lse the kernel read; reference " << want << ")";
    EXPECT_LE(err_ref, ref_bound) << "dsinks[" << h << "]: got " << got << ", reference " << want
                                  << " (from the stored out and lse: " << given << ")";
  }
  std::printf(
      "  dsinks: max err / bound %.3g against the stored out and lse, %.3g against the reference "
      "(16-bit emulation err %.3g)\n",
      worst_given, worst_ref, worst_emul);
}

void check_case(const BwdCase& c, uint64_t seed, bool inspect_workspace = false) {
  SCOPED_TRACE(c.describe());
  SCOPED_TRACE(seed_trace(seed));
  std::printf("[ case ] %s\n", c.describe().c_str());
  std::mt19937_64 rng(seed);
  Problem pb(c, rng);

  // Reference gradients in fp32 storage (double math inside).
  Mirrored ref_dq(DType::kFP32, pb.dq->host.shape()), ref_dk(DType::kFP32, pb.dk->host.shape()),
      ref_dv(DType::kFP32, pb.dv->host.shape());
  std::unique_ptr<Mirrored> ref_dsinks;
  BwdArgs ra;
  ra.fwd = pb.fwd_args(false);
  ra.dout = pb.dout->view(false);
  ra.dq = ref_dq.view(false);
  ra.dk = ref_dk.view(false);
  ra.dv = ref_dv.view(false);
  if (c.sinks) {
    ref_dsinks = std::make_unique<Mirrored>(DType::kFP32, std::vector<int64_t>{c.hq});
    ra.dsinks = ref_dsinks->view(false);
  }
  reference::attention_bwd(ra, c.opts);
  const Emulated em = emulate_16bit(pb);

  Gpu gpu(pb);
  const Run first = gpu.run();
  const std::vector<double> want_dq = as_doubles(ref_dq), want_dk = as_doubles(ref_dk),
                            want_dv = as_doubles(ref_dv);
  double g_max = 0;
  for (const auto* v : {&want_dq, &want_dk, &want_dv}) {
    for (double x : *v) g_max = std::max(g_max, std::fabs(x));
  }
  check_tensor(pb, {"dv", pb.dv.get(), &want_dv, &em.dv, true, c.d_v()}, g_max);
  check_tensor(pb, {"dk", pb.dk.get(), &want_dk, &em.dk, true, c.d}, g_max);
  check_tensor(pb, {"dq", pb.dq.get(), &want_dq, &em.dq, false, c.d}, g_max);
  if (c.sinks) check_dsinks(pb, *ref_dsinks, em);
  if (inspect_workspace && c.batch() > 0 && c.q_lens[0] > 0) check_workspace(gpu, want_dq);

  const Run second = gpu.run();
  EXPECT_TRUE(first.dk == second.dk && first.dv == second.dv && first.dsinks == second.dsinks)
      << "two runs gave different dk/dv/dsinks bits (they use no atomics)";
  if (c.opts.deterministic) {
    EXPECT_TRUE(first.dq == second.dq) << "deterministic mode: two runs gave different dq bits";
  }
}

// ---------------------------------------------------------------------------- single tiles first
// One KV block, one q tile, one head: the smallest complete path through the three stages.
TEST(BwdKernel, A_SingleTile) {
  SKIP_WITHOUT_HOPPER();
  check_case(dense_case(DType::kBF16, 1, 64, 128, 1, 1, false), test_seed(), true);
}

TEST(BwdKernel, B_SingleTileHeadDim64AndFp16) {
  SKIP_WITHOUT_HOPPER();
  check_case(dense_case(DType::kBF16, 1, 64, 128, 1, 1, false, 64), test_seed(), true);
  check_case(dense_case(DType::kFP16, 1, 64, 128, 1, 1, false), test_seed(), true);
}

TEST(BwdKernel, C_SingleTileCausalAndShort) {
  SKIP_WITHOUT_HOPPER();
  check_case(dense_case(DType::kBF16, 1, 64, 64, 1, 1, true), test_seed(), true);
  check_case(dense_case(DType::kBF16, 1, 37, 101, 1, 1, false), test_seed(), true);
}

// Several q tiles and KV blocks: the Q/dO ring wraps, dQ tiles get several KV blocks' sums.
TEST(BwdKernel, D_ManyBlocks) {
  SKIP_WITHOUT_HOPPER();
  for (bool causal : {false, true}) {
    check_case(dense_case(DType::kBF16, 1, 517, 517, 1, 1, causal), test_seed(), true);
    check_case(dense_case(DType::kBF16, 2, 300, 700, 2, 2, causal, 64), test_seed());
  }
  check_case(dense_case(DType::kFP16, 2, 1031, 1031, 1, 2, true), test_seed());
}

TEST(BwdKernel, E_Deterministic) {
  SKIP_WITHOUT_HOPPER();
  for (int d : {128, 64}) {
    BwdCase c = dense_case(DType::kBF16, 2, 700, 900, 2, 3, false, d);
    c.opts.deterministic = true;
    check_case(c, test_seed());
    c.opts.causal = true;
    check_case(c, test_seed());
  }
  BwdCase w = varlen_case(DType::kBF16, {1, 239, 64, 300}, {113, 0, 500, 257}, 1, 5, false);
  w.opts.window = {100, 20};
  w.opts.deterministic = true;
  check_case(w, test_seed());
}

// The deterministic order across CTAs (descending KV blocks, higher blocks launched first,
// workspace.hpp): causal with a left window, causal with q_len > kv_len (rows that see no key),
// varlen causal with GQA, and one KV head whose single q tile meets more KV blocks than an H200
// runs at once (133 CTAs of 128 or 64 keys, one per SM: the first ones must not wait for ones that
// have not started).
TEST(BwdKernel, E_DeterministicOrder) {
  SKIP_WITHOUT_HOPPER();
  BwdCase c = dense_case(DType::kBF16, 2, 700, 700, 2, 2, true);
  c.opts.window = {150, -1};
  c.opts.deterministic = true;
  check_case(c, test_seed());
  BwdCase rows = dense_case(DType::kFP16, 2, 900, 333, 1, 3, true, 64);
  rows.opts.deterministic = true;
  check_case(rows, test_seed());
  BwdCase v = varlen_case(DType::kBF16, {1, 239, 64, 600}, {113, 0, 500, 640}, 2, 4, true);
  v.opts.deterministic = true;
  check_case(v, test_seed());
  for (auto [d, kv_len] : {std::pair{128, 133 * 128}, std::pair{256, 133 * 64 + 5}}) {
    BwdCase wide = dense_case(DType::kBF16, 1, 64, kv_len, 1, 1, true, d);
    wide.opts.deterministic = true;
    check_case(wide, test_seed());
    wide.opts.causal = false;
    wide.q_lens = {100};
    check_case(wide, test_seed());
  }
}

TEST(BwdKernel, F_SlidingWindow) {
  SKIP_WITHOUT_HOPPER();
  BwdCase c = dense_case(DType::kBF16, 2, 700, 700, 1, 4, false);
  c.opts.window = {64, 16};
  check_case(c, test_seed());
  c.opts.causal = true;
  c.opts.window = {100, -1};
  check_case(c, test_seed());
  BwdCase shifted = dense_case(DType::kFP16, 1, 200, 600, 2, 1, false, 64);
  shifted.opts.window = {130, 0};
  check_case(shifted, test_seed());
}

TEST(BwdKernel, G_Softcap) {
  SKIP_WITHOUT_HOPPER();
  BwdCase c = dense_case(DType::kBF16, 2, 333, 333, 2, 3, true);
  c.opts.softcap = 30.f;
  check_case(c, test_seed());
  c.opts.causal = false;
  c.opts.softcap = 5.f;
  c.qk_range = 4.0;  // logits well into the tanh's saturation
  c.d = 64;
  check_case(c, test_seed());
}

TEST(BwdKernel, H_Sinks) {
  SKIP_WITHOUT_HOPPER();
  BwdCase c = dense_case(DType::kBF16, 2, 239, 113, 1, 4, true);  // some rows see no key
  c.sinks = true;
  check_case(c, test_seed());
  BwdCase v = varlen_case(DType::kFP16, {5, 130, 64}, {300, 7, 0}, 2, 2, false, 64);
  v.sinks = true;
  v.opts.deterministic = true;
  check_case(v, test_seed());
}

TEST(BwdKernel, I_VarlenOddLengths) {
  SKIP_WITHOUT_HOPPER();
  // Lengths ending inside a 64-row tile, on it, empty KV, q > kv.
  const std::vector<int> q_lens{1, 239, 64, 128, 17, 300, 5, 130};
  const std::vector<int> kv_lens{113, 1, 0, 128, 500, 300, 0, 257};
  for (bool causal : {false, true}) {
    check_case(varlen_case(DType::kBF16, q_lens, kv_lens, 1, 5, causal), test_seed());
    check_case(varlen_case(DType::kFP16, q_lens, kv_lens, 2, 1, causal, 64), test_seed());
  }
}

TEST(BwdKernel, J_VarlenRandomBatch17) {
  SKIP_WITHOUT_HOPPER();
  const uint64_t seed = test_seed();
  std::mt19937_64 rng(seed ^ 0x5eed);
  std::uniform_int_distribution<int> q_len(1, 400), kv_len(0, 600);
  std::vector<int> q_lens(17), kv_lens(17);
  for (int b = 0; b < 17; ++b) {
    q_lens[b] = q_len(rng);
    kv_lens[b] = kv_len(rng) < 60 ? 0 : kv_len(rng);
  }
  BwdCase c = varlen_case(DType::kBF16, q_lens, kv_lens, 2, 8, true);
  c.sinks = true;
  check_case(c, seed);
  c.sinks = false;
  c.opts.causal = false;
  c.opts.window = {200, 50};
  check_case(c, seed);
}

// ---------------------------------------------------------------------------- head dims > 128
// (256, 256) and (192, 128): 64-key blocks split by columns between the MMA warpgroups, P^T through
// shared memory, spare slots at 192 (traits.cuh). Head dim 256 runs with one Q/dO stage.
TEST(BwdKernel, L_SingleTileWideHeadDims) {
  SKIP_WITHOUT_HOPPER();
  for (DType t : {DType::kBF16, DType::kFP16}) {
    check_case(dense_case(t, 1, 64, 64, 1, 1, false, 256), test_seed(), true);
    check_case(dense_case(t, 1, 64, 64, 1, 1, false, 192, 128), test_seed(), true);
  }
  check_case(dense_case(DType::kBF16, 1, 37, 101, 1, 1, true, 256), test_seed(), true);
  check_case(dense_case(DType::kBF16, 1, 37, 101, 1, 1, true, 192, 128), test_seed(), true);
}

// Several blocks each way (the one-stage ring at 256 wraps every step), causal with
// q_len > kv_len (rows that see no key), GQA 5 and 8.
TEST(BwdKernel, M_WideHeadDimsManyBlocksAndGqa) {
  SKIP_WITHOUT_HOPPER();
  for (auto [d, dv] : {std::pair{256, 0}, std::pair{192, 128}}) {
    check_case(dense_case(DType::kBF16, 1, 300, 200, 1, 5, true, d, dv), test_seed(), true);
    check_case(dense_case(DType::kFP16, 2, 150, 260, 2, 8, false, d, dv), test_seed());
  }
}

// Deterministic mode at 256: two runs bitwise equal in dq too (check_case reruns), with several
// KV blocks adding to every dQ tile, causal and windowed, GQA.
TEST(BwdKernel, N_WideHeadDimsDeterministic) {
  SKIP_WITHOUT_HOPPER();
  BwdCase c = dense_case(DType::kBF16, 2, 260, 330, 1, 5, false, 256);
  c.opts.deterministic = true;
  check_case(c, test_seed());
  c.opts.causal = true;
  check_case(c, test_seed());
  BwdCase w =
      varlen_case(DType::kFP16, {1, 239, 64, 300}, {113, 0, 200, 257}, 2, 2, false, 192, 128);
  w.opts.window = {100, 20};
  w.opts.deterministic = true;
  check_case(w, test_seed());
  // (192, 128): two dQ writers share one staging set (mainloop.cuh, hand_over); many steps a CTA
  // (GQA 3 over 11 q tiles), so that the writers hand steps over to each other many times.
  BwdCase h = dense_case(DType::kBF16, 2, 700, 900, 2, 3, false, 192, 128);
  h.opts.deterministic = true;
  check_case(h, test_seed());
  h.opts.causal = true;
  check_case(h, test_seed());
}

// Varlen, softcap, sinks with dsinks, sliding window at both wide head dims.
TEST(BwdKernel, O_WideHeadDimsFeatures) {
  SKIP_WITHOUT_HOPPER();
  const std::vector<int> q_lens{1, 239, 64, 17, 130};
  const std::vector<int> kv_lens{113, 1, 0, 200, 257};
  for (auto [d, dv] : {std::pair{256, 0}, std::pair{192, 128}}) {
    check_case(varlen_case(DType::kBF16, q_lens, kv_lens, 1, 5, true, d, dv), test_seed());
    BwdCase s = dense_case(DType::kBF16, 2, 150, 150, 2, 2, true, d, dv);
    s.opts.softcap = 30.f;
    check_case(s, test_seed());
    s.opts.causal = false;
    s.opts.softcap = 5.f;
    s.qk_range = 4.0;  // logits well into the tanh's saturation
    check_case(s, test_seed());
    BwdCase k = dense_case(DType::kFP16, 2, 239, 113, 1, 4, true, d, dv);  // rows see no key
    k.sinks = true;
    check_case(k, test_seed());
    BwdCase w = dense_case(DType::kBF16, 1, 300, 300, 1, 2, false, d, dv);
    w.opts.window = {64, 16};
    w.sinks = true;
    check_case(w, test_seed());
  }
}

// ---------------------------------------------------------------------------- odd-shape grid
// (dtype, batch, q_len, kv_len, causal, GQA variant): GQA 0 = 2 kv heads x 1, 1 = 1 x 5, 2 = 2 x 8.
void check_grid_case(const OddShapeParam& param, int d, int dv = 0) {
  const auto [dtype, batch, q_len, kv_len, causal, gqa] = param;
  check_case(dense_case(dtype, batch, q_len, kv_len, kOddGridKvHeads[gqa], kOddGridGroup[gqa],
                        causal, d, dv),
             test_seed());
}

class BwdKernelGrid : public ::testing::TestWithParam<OddShapeParam> {};
TEST_P(BwdKernelGrid, MatchesReference) {
  SKIP_WITHOUT_HOPPER();
  check_grid_case(GetParam(), 128);
}
INSTANTIATE_TEST_SUITE_P(OddShapes, BwdKernelGrid, odd_shape_values(), odd_shape_name);

// The wide head dims run the grid in one dtype each (their CPU reference is 2x-4x slower).
class BwdKernelGridHd256 : public ::testing::TestWithParam<OddShapeParam> {};
TEST_P(BwdKernelGridHd256, MatchesReference) {
  SKIP_WITHOUT_HOPPER();
  check_grid_case(GetParam(), 256);
}
INSTANTIATE_TEST_SUITE_P(OddShapes, BwdKernelGridHd256, odd_shape_values(DType::kBF16),
                         odd_shape_name);

class BwdKernelGridHd192x128 : public ::testing::TestWithParam<OddShapeParam> {};
TEST_P(BwdKernelGridHd192x128, MatchesReference) {
  SKIP_WITHOUT_HOPPER();
  check_grid_case(GetParam(), 192, 128);
}
INSTANTIATE_TEST_SUITE_P(OddShapes, BwdKernelGridHd192x128, odd_shape_values(DType::kFP16),
                         odd_shape_name);

// ---------------------------------------------------------------------------- unsupported
TEST(BwdKernel, K_UnsupportedIsNotImplemented) {
  SKIP_WITHOUT_HOPPER();
  BwdCase c = dense_case(DType::kBF16, 1, 8, 8, 1, 1, false, 256, 128);
  std::mt19937_64 rng(1);
  Problem pb(c, rng);
  Gpu gpu(pb);
  BwdArgs a = gpu.args(true);
  a.workspace = {gpu.workspace.get(), gpu.workspace_bytes};
  try {
    attention_bwd(a, c.opts, nullptr);
    ADD_FAILURE() << "head dims (256, 128) backward on CUDA did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotImplemented) << e.what();
    EXPECT_NE(std::string(e.what()).find("head_dim"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hopattn::testing::bwd
