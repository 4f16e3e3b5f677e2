#include "shape.hpp"

#include <algorithm>
#include <sstream>

namespace hopattn::cli {
namespace {

constexpr int kMlaQkDim = kMlaLatentDim + kMlaRopeDim;

void reject(bool given, Family f, const char* flag) {
  if (given) {
    throw UsageError(std::string(flag) + ": not an option of " + family_name(f) +
                     " (see hopattn bench --help)");
  }
}

}  // namespace

std::string Shape::describe() const {
  std::ostringstream os;
  if (family == Family::kMerge) {
    os << "T=" << int64_t{batch} * q_len << " H=" << q_heads << " D=" << head_dim;
  } else if (family == Family::kBatch) {
    os << "step " << step.describe() << " H=" << q_heads << "/" << kv_heads << " D=" << head_dim
       << " page=" << page_size;
    if (causal) os << " causal";
    if (window.left >= 0 || window.right >= 0) {
      os << " win=" << window.left << "," << window.right;
    }
    if (softcap > 0) os << " cap=" << softcap;
    if (batch_ctas > 0) os << " ctas=" << batch_ctas;
    if (batch_partition == plan::BatchOverlap::kOn) {
      os << " partition";
    } else if (batch_spread != plan::BatchOverlap::kAuto) {
      os << (batch_spread == plan::BatchOverlap::kOn ? " spread" : " lpt");
    }
    if (batch_decode_rate_milli != plan::BatchPlanLimits{}.decode_cta_rate_milli) {
      os << " decode-rate=" << batch_decode_rate_milli / 1000.0;
    }
    if (batch_partition_ctas > 0) os << " partition-ctas=" << batch_partition_ctas;
    if (batch_concurrent == plan::BatchOverlap::kOff) os << " no-concurrent";
    if (batch_concurrent_rate_milli != plan::BatchPlanLimits{}.concurrent_rate_milli) {
      os << " concurrent-rate=" << batch_concurrent_rate_milli / 1000.0;
    }
    if (batch_concurrent_ctas > 0) os << " concurrent-ctas=" << batch_concurrent_ctas;
    if (batch_concurrent_tail_milli > 0) {
      os << " concurrent-tail=" << batch_concurrent_tail_milli / 1000.0;
    }
    if (decode_sm_gpc) os << " sm-order=gpc";
    if (!decode_sm_order.empty()) {
      os << " sm-order=" << decode_sm_order.front() << ",...(" << decode_sm_order.size() << ")";
    }
    if (batch_side != plan::BatchOverlap::kAuto) {
      os << (batch_side == plan::BatchOverlap::kOn ? " side" : " no-side");
    }
    if (batch_side_cost != plan::kSideLaneCost) os << " side-cost=" << batch_side_cost;
    if (!batch_sections) os << " no-sections";
    if (!fwd_launch.paged_tma) os << " paged-gather";
  } else {
    os << "B=" << batch << " Sq=" << q_len << " Sk=" << kv_len << " H=" << q_heads;
    if (family != Family::kMla) os << "/" << kv_heads;
    os << " D=" << (family == Family::kMla ? "512+64" : std::to_string(head_dim));
    if (family != Family::kMla && dv() != head_dim) os << "/" << dv();
    if (page_size > 0) os << " page=" << page_size;
    if (causal) os << " causal";
    if (window.left >= 0 || window.right >= 0) {
      os << " win=" << window.left << "," << window.right;
    }
    if (softcap > 0) os << " cap=" << softcap;
    if (deterministic) os << " deterministic";
    if (pack_gqa) os << (*pack_gqa ? " pack" : " nopack");
    if (!fwd_launch.paged_tma) os << " paged-gather";
    if (fwd_launch.kv_tiles == kernels::fwd::LaunchOptions::KVTiles::kBase) os << " base-tiles";
    if (fwd_launch.kv_tiles == kernels::fwd::LaunchOptions::KVTiles::kWide) os << " wide-tiles";
    if (fwd_launch.walk == kernels::fwd::LaunchOptions::Walk::kPlain) os << " plain-walk";
    if (fwd_launch.walk == kernels::fwd::LaunchOptions::Walk::kPaired) os << " paired-walk";
    if (fwd_launch.l2_section_kb > 0) os << " section-" << fwd_launch.l2_section_kb << "KiB";
    if (num_splits > 0) os << " splits=" << num_splits;
    if (mla_schedule == MlaSchedule::kSeesaw) os << " seesaw";
    if (mla_schedule == MlaSchedule::kOneConsumer) os << " one-consumer";
    if (mla_schedule == MlaSchedule::kNarrow) os << " narrow";
    if (decode_kernel == DecodeKernel::kTiles) os << " tiles";
    if (decode_kernel == DecodeKernel::kSmall) os << " small";
    if (decode_kernel == DecodeKernel::kNarrow) os << " narrow";
    if (kv_layout == KVLayout::kHND) os << " hnd";
    if (bwd_launch.order == plan::BwdOrder::kHeads) os << " order=heads";
  }
  if (pages_in_order) os << " pages-in-order";
  os << " " << dtype_name(dtype);
  if ((family == Family::kDecode || family == Family::kMla || family == Family::kBatch) &&
      kv_dtype != dtype) {
    os << "/kv:" << dtype_name(kv_dtype);
  }
  return os.str();
}

Shape model_shape(Family f) {
  Shape s;
  s.family = f;
  switch (f) {
    case Family::kFwd:
    case Family::kBwd:  // Llama-3-8B prefill / training step, 2 x 4096 tokens
      s.batch = 2;
      s.q_len = s.kv_len = 4096;
      s.causal = true;
      break;
    case Family::kDecode:  // 32 requests generating one token over 4096 cached
      s.batch = 32;
      s.q_len = 1;
      s.kv_len = 4096;
      s.page_size = 16;
      s.causal = true;
      break;
    case Family::kMla:  // DeepSeek-V3 decode
      s.batch = 32;
      s.q_len = 1;
      s.kv_len = 4096;
      s.q_heads = 128;
      s.kv_heads = 1;
      s.head_dim = kMlaLatentDim;
      s.page_size = 64;
      s.causal = true;
      break;
    case Family::kMerge:  // two split-KV states of 16384 query rows
      s.batch = 16;
      s.q_len = 1024;
      s.kv_len = 0;
      s.q_heads = 32;
      break;
    case Family::kBatch:  // Llama-3.1-8B serving step: 4 prefill chunks and 124 decodes
      s.step = preset_step('a');
      s.page_size = 16;
      s.causal = true;
      break;
  }
  return s;
}

Shape cpu_shape(Family f) {
  Shape s = model_shape(f);
  switch (f) {
    case Family::kFwd:
      s.batch = 1;
      s.q_len = s.kv_len = 256;
      break;
    case Family::kBwd:
      s.batch = 1;
      s.q_len = s.kv_len = 128;
      break;
    case Family::kDecode:
      s.batch = 4;
      s.kv_len = 1024;
      break;
    case Family::kMla:
      s.batch = 2;
      s.kv_len = 256;
      break;
    case Family::kMerge:  // states of 64 rows over two halves of 256 keys
      s.batch = 1;
      s.q_len = 64;
      s.kv_len = 256;
      break;
    case Family::kBatch:
      s.step = small_step();
      break;
  }
  return s;
}

Shape apply_flags(Shape s, const BenchFlags& f) {
  const Family fam = s.family;
  const bool attention =
      fam == Family::kFwd || fam == Family::kBwd || fam == Family::kDecode || fam == Family::kBatch;
  const bool batch = fam == Family::kBatch;
  reject(f.kv_len && (fam == Family::kMerge || batch), fam, "--kv-len");
  reject(f.batch && batch, fam, "--batch");
  reject(f.q_len && batch, fam, "--q-len");
  reject(f.step.has_value() && !batch, fam, "--step");
  reject(!f.batch_impls.empty() && !batch, fam, "--batch-impl");
  reject(f.batch_ctas.has_value() && !batch, fam, "--batch-ctas");
  reject(f.batch_spread.has_value() && !batch, fam, "--batch-order");
  reject(f.batch_side.has_value() && !batch, fam, "--batch-side");
  reject(f.batch_concurrent.has_value() && !batch, fam, "--batch-concurrent");
  reject(f.batch_concurrent_rate_milli.has_value() && !batch, fam, "--batch-concurrent-rate");
  reject(f.batch_concurrent_ctas.has_value() && !batch, fam, "--batch-concurrent-ctas");
  reject(f.batch_concurrent_tail_milli.has_value() && !batch, fam, "--batch-concurrent-tail");
  reject((!f.decode_sm_order.empty() || f.decode_sm_gpc) && !batch, fam, "--decode-sm-order");
  reject(f.batch_side_cost.has_value() && !batch, fam, "--batch-side-cost");
  reject(f.batch_sections.has_value() && !batch, fam, "--batch-sections");
  reject(f.batch_decode_rate_milli.has_value() && !batch, fam, "--batch-decode-rate");
  reject(f.batch_partition_ctas.has_value() && !batch, fam, "--batch-partition-ctas");
  reject(f.head_dim && fam == Family::kMla, fam, "--head-dim");
  if (f.head_dim_v && fam != Family::kFwd && fam != Family::kBwd) {
    throw UsageError(std::string("--head-dim: ") + family_name(fam) +
                     " takes one head dim D (Dqk = Dv), got " + std::to_string(*f.head_dim) + ":" +
                     std::to_string(*f.head_dim_v));
  }
  reject(f.page_size && (fam == Family::kBwd || fam == Family::kMerge), fam, "--page-size");
  reject(
      f.kv_dtype && fam != Family::kDecode && fam != Family::kFwd && fam != Family::kMla && !batch,
      fam, "--kv-dtype");
  reject(f.causal.has_value() && fam == Family::kMerge, fam, "--causal");
  reject(f.window && !attention, fam, "--window");
  reject(f.softcap && !attention, fam, "--softcap");
  reject(f.pack_gqa.has_value() && fam != Family::kFwd, fam, "--pack-gqa");
  reject(f.paged_tma.has_value() && fam != Family::kFwd && !batch, fam, "--paged-tma");
  reject(f.kv_tiles.has_value() && fam != Family::kFwd, fam, "--kv-tiles");
  reject(f.walk.has_value() && fam != Family::kFwd, fam, "--fwd-walk");
  reject(f.l2_section_kb.has_value() && fam != Family::kFwd, fam, "--l2-section-kb");
  reject(f.splits.has_value() && fam != Family::kDecode && fam != Family::kMla, fam, "--splits");
  reject(f.mla_schedule.has_value() && fam != Family::kMla, fam, "--mla-schedule");
  reject(f.decode_kernel.has_value() && fam != Family::kDecode && !batch, fam, "--decode-kernel");
  reject(f.kv_layout.has_value() && fam != Family::kDecode, fam, "--kv-layout");
  reject(f.pages_in_order.has_value() && (fam == Family::kBwd || fam == Family::kMerge), fam,
         "--page-order");
  reject(f.bwd_order.has_value() && fam != Family::kBwd, fam, "--bwd-order");
  if (f.kv_heads && (fam == Family::kMla || fam == Family::kMerge) &&
      !(fam == Family::kMla && *f.kv_heads == 1)) {
    throw UsageError(std::string("--heads: ") + family_name(fam) + " takes HQ only");
  }
  if (f.batch) s.batch = *f.batch;
  if (f.q_len) s.q_len = *f.q_len;
  if (f.kv_len) s.kv_len = *f.kv_len;
  if (f.q_heads) {
    s.q_heads = *f.q_heads;
    if (fam != Family::kMla) s.kv_heads = f.kv_heads.value_or(*f.q_heads);
  }
  if (f.head_dim) {
    s.head_dim = *f.head_dim;
    s.head_dim_v = f.head_dim_v.value_or(0);
  }
  if (f.page_size) s.page_size = *f.page_size;
  if (f.pages_in_order && fam == Family::kFwd && s.page_size == 0) {
    throw UsageError("--page-order: fwd takes it with --page-size (a paged cache), got none");
  }
  if (f.dtype) s.dtype = *f.dtype;
  s.kv_dtype = f.kv_dtype.value_or(s.dtype);
  if (batch && s.kv_dtype != s.dtype && s.kv_dtype != DType::kFP8E4M3) {
    throw UsageError("--kv-dtype: batch takes q's dtype (" + std::string(dtype_name(s.dtype)) +
                     ") or fp8_e4m3, got " + dtype_name(s.kv_dtype));
  }
  if (fam == Family::kFwd && s.kv_dtype != s.dtype) {
    throw UsageError("--kv-dtype: fwd takes K/V in q's dtype (" + std::string(dtype_name(s.dtype)) +
                     "), got " + dtype_name(s.kv_dtype));
  }
  if (f.causal) s.causal = *f.causal;
  if (f.window) s.window = *f.window;
  if (f.softcap) s.softcap = *f.softcap;
  if (f.pack_gqa) s.pack_gqa = *f.pack_gqa;
  if (f.paged_tma) s.fwd_launch.paged_tma = *f.paged_tma;
  if (f.kv_tiles) s.fwd_launch.kv_tiles = *f.kv_tiles;
  if (f.walk) s.fwd_launch.walk = *f.walk;
  if (f.l2_section_kb) s.fwd_launch.l2_section_kb = *f.l2_section_kb;
  if (f.splits) s.num_splits = *f.splits;
  if (f.mla_schedule) s.mla_schedule = *f.mla_schedule;
  if (f.decode_kernel) s.decode_kernel = *f.decode_kernel;
  if (f.kv_layout) s.kv_layout = *f.kv_layout;
  if (f.pages_in_order) s.pages_in_order = *f.pages_in_order;
  if (f.bwd_order) s.bwd_launch.order = *f.bwd_order;
  if (f.step) s.step = parse_step(*f.step);
  if (f.batch_ctas) s.batch_ctas = *f.batch_ctas;
  if (f.batch_spread) s.batch_spread = *f.batch_spread;
  if (f.batch_side) s.batch_side = *f.batch_side;
  if (f.batch_concurrent) s.batch_concurrent = *f.batch_concurrent;
  if (f.batch_concurrent_rate_milli) s.batch_concurrent_rate_milli = *f.batch_concurrent_rate_milli;
  if (f.batch_concurrent_ctas) s.batch_concurrent_ctas = *f.batch_concurrent_ctas;
  if (f.batch_concurrent_tail_milli) s.batch_concurrent_tail_milli = *f.batch_concurrent_tail_milli;
  s.decode_sm_order = f.decode_sm_order;
  s.decode_sm_gpc = f.decode_sm_gpc;
  if (f.batch_side_cost) s.batch_side_cost = *f.batch_side_cost;
  if (f.batch_sections) s.batch_sections = *f.batch_sections;
  if (f.batch_partition) s.batch_partition = *f.batch_partition;
  if (f.batch_decode_rate_milli) s.batch_decode_rate_milli = *f.batch_decode_rate_milli;
  if (f.batch_partition_ctas) s.batch_partition_ctas = *f.batch_partition_ctas;
  if (fam == Family::kDecode && s.q_len > 16) {
    throw UsageError("--q-len: decode takes 1..16 query tokens, got " + std::to_string(s.q_len));
  }
  if (fam == Family::kDecode && s.kv_len < s.q_len) {
    throw UsageError("--kv-len: decode counts the q-len new tokens in kv-len, so expected >= " +
                     std::to_string(s.q_len) + ", got " + std::to_string(s.kv_len));
  }
  return s;
}

double visible_pairs(const Shape& s) {
  if (s.family == Family::kBatch) return step_visible_pairs(s.step, s.causal, s.window);
  const int64_t kv_len = s.family == Family::kMerge ? 0 : s.kv_len;
  return request_visible_pairs(s.q_len, kv_len, s.causal, s.window) * s.batch;
}

Metric metric(const Shape& s) {
  switch (s.family) {
    case Family::kFwd:
    case Family::kBwd:
      return Metric::kFlops;
    case Family::kMla:
      return s.q_len > 16 ? Metric::kFlops : Metric::kBytes;
    case Family::kBatch:
      return s.step.prefills() > 0 ? Metric::kFlops : Metric::kBytes;
    default:
      return Metric::kBytes;
  }
}

double flops(const Shape& s) {
  const double pairs = visible_pairs(s);
  const double dqk = s.head_dim, dv = s.dv();
  switch (s.family) {
    case Family::kFwd:
    case Family::kDecode:
    case Family::kBatch:  // q.k and p.v: 2 * (Dqk + Dv) per pair and head
      return 2.0 * pairs * s.q_heads * (dqk + dv);
    case Family::kBwd:  // recomputed q.k (Dqk), dO.v (Dv), then dV (Dv), dQ and dK (Dqk each):
      // 2 * (3 Dqk + 2 Dv), the work done; = 2.5x the forward's when Dqk = Dv (the peer
      // scripts' count, which is 4% lower at (192, 128))
      return 2.0 * pairs * s.q_heads * (3 * dqk + 2 * dv);
    case Family::kMla:
      return 2.0 * pairs * s.q_heads * (kMlaQkDim + kMlaLatentDim);
    case Family::kMerge:
      return 0.0;
  }
  return 0.0;
}

double bytes(const Shape& s) {
  const double elt = dtype_size(s.dtype), kv_elt = dtype_size(s.kv_dtype);
  const double q_rows = double(s.batch) * s.q_len;
  const double kv_rows = double(s.batch) * s.kv_len;
  const double d = s.head_dim, dv = s.dv();
  switch (s.family) {
    case Family::kFwd:  // q, k (Dqk), v, out (Dv), lse
      return q_rows * s.q_heads * ((d + dv) * elt + 4) + kv_rows * s.kv_heads * (d + dv) * elt;
    case Family::kBwd:  // q, out, dout, lse, k, v in; dq, dk (Dqk), dv (Dv) out
      return 2 * q_rows * s.q_heads * ((d + dv) * elt + 2) +
             2 * kv_rows * s.kv_heads * (d + dv) * elt;
    case Family::kDecode: {
      const double pages =
          s.page_size > 0 ? double(s.batch) * ((s.kv_len + s.page_size - 1) / s.page_size) : 0.0;
      return q_rows * s.q_heads * (2 * d * elt + 4) + kv_rows * s.kv_heads * 2 * d * kv_elt +
             4 * pages + 4 * double(s.batch);
    }
    case Family::kMla:  // q_nope + q_pe, out, lse; one latent row (ckv + kpe) per cached token
      return q_rows * s.q_heads * ((kMlaQkDim + kMlaLatentDim) * elt + 4) +
             kv_rows * kMlaQkDim * kv_elt;
    case Family::kMerge:  // two states in, one out
      return 3 * q_rows * s.q_heads * (d * elt + 4);
    case Family::kBatch: {  // q, out, lse; each request's cache once; page table and lengths
      double pages = 0;
      for (const StepRequest& r : s.step.requests) {
        pages += double((r.kv_len() + s.page_size - 1) / s.page_size);
      }
      const double requests = double(s.step.requests.size());
      return double(s.step.total_q()) * s.q_heads * ((d + dv) * elt + 4) +
             double(s.step.total_kv()) * s.kv_heads * (d + dv) * kv_elt + 4 * pages +
             4 * (2 * requests + 1);
    }
  }
  return 0.0;
}

}  // namespace hopattn::cli
