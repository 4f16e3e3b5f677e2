#include "plan/decode_plan.hpp"

#include <algorithm>
#include <string>

#include "hopattn/error.hpp"
#include "kernels/decode/traits.hpp"
#include "plan/decode_splits.hpp"

namespace hopattn::plan {
namespace {

using kernels::decode::KvFormat;
using kernels::decode::Traits;

[[noreturn]] void not_supported(const std::string& what, const std::string& given) {
  throw Error(ErrorKind::kNotImplemented,
              detail::concat("hopattn.decode (GPU): expected ", what, ", got ", given));
}

// CTAs of one instantiation that share an SM: as many as its shared memory allows, up to the
// register bound of 128 threads a CTA (ptxas -v: 128-135 registers at D = 64, 191-214 at
// D = 128, 185-190 at D = 256; <= 168 in the three-CTA configuration).
template <int kHeadDim, int kKvBytes, int kCtas = 2>
int ctas_per_sm(int rows_per_cta) {
  const int smem = Traits<kHeadDim, kKvBytes, kCtas>::smem_bytes(rows_per_cta);
  const int by_registers = kCtas >= 3 || kHeadDim <= 64 ? 3 : 2;
  int n = 1;
  while (n < by_registers && kernels::decode::smem_fits(smem, n + 1)) ++n;
  return n;
}

int ctas_per_sm(int head_dim, int kv_bytes, int rows_per_cta, int config) {
  int n = 1;
  kernels::decode::visit_head_dim(head_dim, [&](auto d) {
    constexpr int kD = decltype(d)::value;
    // The three-CTA geometry of either KV width; only called with config 3 where it is built.
    if (config == 3) {
      n = kv_bytes == 2 ? ctas_per_sm<kD, 2, 3>(rows_per_cta) : ctas_per_sm<kD, 1, 3>(rows_per_cta);
      return;
    }
    n = kv_bytes == 2 ? ctas_per_sm<kD, 2>(rows_per_cta) : ctas_per_sm<kD, 1>(rows_per_cta);
  });
  return n;
}

// The instantiation's configuration: 3 where it exists and three CTAs of this row count fit an
// SM's shared memory (64-row CTAs do not), else 2.
int kernel_config(int head_dim, bool bf16, KvFormat format, int rows_per_cta) {
  if (!kernels::decode::has_three_cta_variant(head_dim, bf16, format)) return 2;
  return ctas_per_sm(head_dim, kernels::decode::kv_format_bytes(format), rows_per_cta, 3) == 3 ? 3
                                                                                               : 2;
}

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

int beam_width_of(const DecodeArgs& a, const DecodeOptions& o) {
  return a.shared_kv_lens.defined() ? std::max(1, o.beam_width) : 1;
}

}  // namespace

bool small_three_ctas_take_fewer_waves(int64_t ctas, int num_sms) {
  const auto waves = [&](int64_t slots) { return (ctas + slots - 1) / slots; };
  return num_sms > 0 && waves(int64_t(num_sms) * 3) < waves(int64_t(num_sms) * 2);
}

bool small_kernel_takes(const DecodeArgs& a, const DecodeOptions& o) {
  if (a.q.rank() != 4 || a.k_cache.rank() != 4) return false;
  const int64_t hkv = a.pages.layout == KVLayout::kNHD ? a.k_cache.size(2) : a.k_cache.size(1);
  if (hkv < 1) return false;
  const int64_t rows = a.q.size(1) * (a.q.size(2) / hkv);
  return beam_width_of(a, o) == 1 && !a.tree_mask.defined() && rows <= kernels::decode::kMmaRows &&
         kernels::decode::small_kernel_head_dim(static_cast<int>(a.q.size(3)));
}

const char* forced_kernel_scope(DecodeKernel kernel) {
  return kernel == DecodeKernel::kNarrow
             ? "one beam, no tree mask, q_len * Hq / Hkv <= 8, D = 64 or 128, a 16-bit cache of "
               "q's dtype in pages of a multiple of 16 keys and at most one split"
             : "one beam, no tree mask, q_len * Hq / Hkv <= 16 and D = 64 or 128";
}

bool narrow_kernel_takes(const DecodeArgs& a, const DecodeOptions& o) {
  if (a.q.rank() != 4 || a.k_cache.rank() != 4 || o.num_splits > 1) return false;
  const bool nhd = a.pages.layout == KVLayout::kNHD;
  const int64_t hkv = nhd ? a.k_cache.size(2) : a.k_cache.size(1);
  const int64_t page_size = nhd ? a.k_cache.size(1) : a.k_cache.size(2);
  if (hkv < 1 || page_size % kernels::decode::kBlockTokens != 0) return false;
  const int64_t rows = a.q.size(1) * (a.q.size(2) / hkv);
  const DType q = a.q.dtype();
  const bool same_16bit =
      (q == DType::kBF16 || q == DType::kFP16) && a.k_cache.dtype() == q && a.v_cache.dtype() == q;
  return beam_width_of(a, o) == 1 && !a.tree_mask.defined() && same_16bit &&
         rows <= kernels::decode::kNarrowRows &&
         kernels::decode::narrow_kernel_head_dim(static_cast<int>(a.q.size(3)));
}

DecodePlan plan_decode(const DecodeArgs& a, const DecodeOptions& o, int num_sms) {
  namespace tile = kernels::decode;
  if (a.q.rank() != 4 || a.k_cache.rank() != 4) {
    throw Error(ErrorKind::kValue,
                detail::concat("hopattn.decode: expected q [B, q_len, Hq, D] and 4-d pages, got q ",
                               a.q.shape_string(), ", k_cache ", a.k_cache.shape_string()));
  }
  const bool nhd = a.pages.layout == KVLayout::kNHD;
  const int64_t batch = a.q.size(0), q_len = a.q.size(1), hq = a.q.size(2), d = a.q.size(3);
  const int64_t hkv = nhd ? a.k_cache.size(2) : a.k_cache.size(1);
  const int64_t page_size = nhd ? a.k_cache.size(1) : a.k_cache.size(2);
  if (hkv < 1 || hq % hkv != 0) {
    throw Error(ErrorKind::kValue,
                detail::concat("hopattn.decode: expected Hq a multiple of Hkv, got Hq = ", hq,
                               ", Hkv = ", hkv));
  }
  if (!tile::built_head_dim(d)) {
    not_supported("head_dim " + tile::built_head_dims_string(" or "), std::to_string(d));
  }

  DecodePlan pl;
  pl.beam_width = beam_width_of(a, o);
  if (pl.beam_width > tile::kMaxBeams) {
    not_supported(detail::concat("beam_width <= ", tile::kMaxBeams, " with shared_kv_lens"),
                  std::to_string(pl.beam_width));
  }
  pl.requests = static_cast<int>(batch / pl.beam_width);
  pl.rows_per_request = static_cast<int>(pl.beam_width * q_len * (hq / hkv));
  pl.rows_per_cta = tile::rows_per_cta_for(static_cast<int>(d), pl.rows_per_request);
  pl.row_tiles = (pl.rows_per_request + pl.rows_per_cta - 1) / pl.rows_per_cta;
  pl.problems = int64_t(pl.requests) * hkv * pl.row_tiles;

  const KvFormat format = tile::kv_format_of(a.k_cache.dtype());
  const int kv_bytes = tile::kv_format_bytes(format);
  pl.config =
      kernel_config(static_cast<int>(d), a.q.dtype() == DType::kBF16, format, pl.rows_per_cta);
  // The small-grid kernel (two CTAs an SM, config 2's slots) wherever it takes the call: at
  // batch 1 it removes the tile kernel's fixed steps (0.73-0.88x the time), and at B = 32..128 it
  // measured 0.98x over bf16 and 0.88-0.90x over fp8 caches (docs/perf/decode.md, 2026-12-05).
  // Decided before the splits, which it counts by its slots.
  const bool takes_small = small_kernel_takes(a, o);
  if (o.kernel == DecodeKernel::kSmall && !takes_small) {
    not_supported(
        detail::concat("a call the small-grid kernel takes (",
                       forced_kernel_scope(DecodeKernel::kSmall), ") for DecodeKernel::kSmall"),
        a.q.shape_string());
  }
  pl.small = o.kernel == DecodeKernel::kSmall || (o.kernel == DecodeKernel::kAuto && takes_small);
  if (o.kernel == DecodeKernel::kNarrow && !narrow_kernel_takes(a, o)) {
    not_supported(
        detail::concat("a call the narrow kernel takes (",
                       forced_kernel_scope(DecodeKernel::kNarrow), ") for DecodeKernel::kNarrow"),
        a.q.shape_string());
  }
  pl.narrow = o.kernel == DecodeKernel::kNarrow;
  if (pl.small || pl.narrow) pl.config = 2;
  if (pl.narrow) {
    pl.num_splits = 1;  // one split: the narrow kernel has no split merge
  } else if (o.num_splits > 0) {
    pl.num_splits = std::min(o.num_splits, tile::kMaxSplits);
  } else {
    const int64_t max_kv_len =
        (a.pages.block_table.defined() ? a.pages.block_table.size(1) : a.pages.indices.size(0)) *
        page_size;
    // The kernel (and its slots an SM) does not depend on the SM count, so the bound is the split
    // count of the plan for kHopperMaxSms SMs, which sizes the workspace.
    const int per_sm = ctas_per_sm(static_cast<int>(d), kv_bytes, pl.rows_per_cta, pl.config);
    const int bound =
        choose_decode_splits(pl.problems, max_kv_len, int64_t(kHopperMaxSms) * per_sm);
    pl.num_splits =
        std::min(bound, choose_decode_splits(pl.problems, max_kv_len, int64_t(num_sms) * per_sm));
    // Over a 16-bit cache the small kernel's second CTA an SM adds no read bandwidth (it has no
    // conversions to overlap with another CTA's loads) but doubles the partials the last CTA
    // merges: where one CTA an SM still gives every problem 16 splits or more (batch 1 at 8 KV
    // heads), that many. Split sweep (docs/perf/NOTES.md, run set s, H200, B = 1): kv 8k 32 -> 16
    // splits 21.5 -> 20.5 us, kv 32k 49.5 -> 48.9; over fp8 16 splits were 1.04-1.14x slower than
    // 32. With this rule (run set u, H100): kv 8k 1.05x, kv 32k 1.03x, 64 q heads 1.10x faster.
    // Decided by kHopperMaxSms's count (a shape-only rule), so that no device's plan takes more
    // splits than the workspace's.
    if (pl.small && kv_bytes == 2 && pl.problems > 0 && kHopperMaxSms / pl.problems >= 16) {
      pl.num_splits = static_cast<int>(
          std::clamp<int64_t>(std::min(num_sms, kHopperMaxSms) / pl.problems, 1, pl.num_splits));
    }
  }
  // The third CTA an SM pays only where the grid fills the third slots: a grid of at most two
  // CTAs an SM runs the two-CTA kernel (its 96 KB ring keeps two tiles in flight a CTA where the
  // three-CTA kernel keeps one), as batch 1 does.
  if (pl.config == 3 &&
      pl.problems * pl.num_splits <=
          int64_t(num_sms) * ctas_per_sm(static_cast<int>(d), kv_bytes, pl.rows_per_cta, 2)) {
    pl.config = 2;
  }
  // The small kernel over an e4m3 or int8 cache has a three-CTA instance as well (its
  // conversions overlap the other CTAs' loads): taken where it runs the grid in fewer waves than
  // two CTAs an SM. Measured (docs/perf/decode.md, run set ak, H200, fp8 e4m3, 8 KV heads): B =
  // 40 .. 256 1.06-1.11x faster, but B = 64 (512 CTAs: two waves either way) 0.96x and int8
  // there 0.86x, so the rule counts waves, not CTAs. The splits stay those of two CTAs an SM
  // (batch 1 over fp8 at 48 splits, one wave of three, measured 1.11x slower than the plan's
  // 32), so the workspace is unchanged.
  if (pl.small && kernels::decode::small_kernel_max_ctas(format) == 3 &&
      small_three_ctas_take_fewer_waves(pl.problems * pl.num_splits, num_sms)) {
    pl.config = 3;
  }
  if (pl.num_splits > 1) {
    const size_t rows = size_t(pl.problems) * pl.num_splits * pl.rows_per_cta;
    pl.semaphore_bytes = align256(size_t(pl.problems) * sizeof(uint32_t));
    pl.partial_o_offset = pl.semaphore_bytes;
    pl.partial_lse_offset = pl.partial_o_offset + align256(rows * d * sizeof(float));
    pl.workspace_bytes = pl.partial_lse_offset + align256(rows * sizeof(float));
  }
  return pl;
}

}  // namespace hopattn::plan
