// Host side of the fwd kernel: support checks, tensor maps, parameters, grid and the choice of
// the configuration (a row of configs.hpp's table). The kernels themselves are instantiated in
// launch_hd*.cu.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <string>

#include "hopattn/error.hpp"
#include "kernels/common/cuda_host.hpp"
#include "kernels/common/device_status_host.hpp"
#include "kernels/common/math_constants.hpp"
#include "kernels/common/tma_views.hpp"
#include "kernels/fwd/configs.cuh"
#include "kernels/fwd/launch.hpp"
#include "kernels/fwd/pack_gqa.hpp"
#include "kernels/fwd/prepare.hpp"
#include "plan/fwd_order.hpp"
#include "plan/fwd_tiles.hpp"
#include "plan/fwd_walk_replay.hpp"
#include "ptx/tensor_map.hpp"

namespace hopattn::kernels::fwd {
namespace {

[[noreturn]] void unsupported(const std::string& what) {
  throw Error(ErrorKind::kNotImplemented, "hopattn.attention_fwd on CUDA: " + what);
}

constexpr const char* kWhere = "hopattn.attention_fwd";
// Every configuration's consumers take 64 query rows each (traits.cuh): tiles of 128 rows, or
// 192 with three consumers (kFwdWideConfigs).
constexpr int kBlockM = FwdConfigTraits<__nv_bfloat16, 0>::kBlockM;
constexpr int kRowsPerConsumer = FwdConfigTraits<__nv_bfloat16, 0>::kRowsPerConsumer;

void cuda_ok(cudaError_t err, const char* what) { throw_if_cuda_error(err, kWhere, what); }

// q, out (and k, v unless paged) are [total, H, D] with cu_seqlens: varlen and paged calls.
bool is_varlen(const FwdArgs& a) { return a.cu_seqlens_q.defined(); }
bool is_paged(const FwdArgs& a) { return a.pages.defined(); }

void check_tma_layout(const TensorView& t, const char* name, bool varlen) {
  const std::string why = tma_layout_problem(t, name, varlen);
  if (!why.empty()) unsupported(why);
}

// A page pool [P, page_size, H, D] (NHD) or [P, H, page_size, D] (HND) by (page, slot, head)
// strides in elements. Strides of size-1 dims are never used for addressing and may be anything;
// they are replaced by multiples of 16 bytes so that TMA accepts them.
struct PoolView {
  int64_t pages, page_size, heads, d;
  int64_t stride_page, stride_slot, stride_head;
};

PoolView pool_view(const TensorView& t, KVLayout layout) {
  const bool nhd = layout == KVLayout::kNHD;
  PoolView v{
      t.size(0),   nhd ? t.size(1) : t.size(2),     nhd ? t.size(2) : t.size(1),    t.size(3),
      t.stride(0), nhd ? t.stride(1) : t.stride(2), nhd ? t.stride(2) : t.stride(1)};
  if (v.heads == 1) v.stride_head = v.d;
  if (v.page_size == 1) v.stride_slot = v.d;
  if (v.pages == 1) v.stride_page = v.page_size * v.heads * v.d;
  return v;
}

// Map of a page pool (kv_loader.cuh) for boxes of `box` slots, based at the pool itself: dims
// (D, H, r, w, page) (NHD) or (D, r, w, H, page) (HND) with r in [0, box) and w in
// [0, page_size) one slot apart, so that a box at (r = 0, w = slot) holds slots slot ..
// slot + box - 1 (box divides page_size: never past the page) and a box at r = box lies out of
// bounds and arrives as zeros. (One slot dimension would serve as well; this shape keeps the
// producer's coordinate arithmetic within its 24 registers.)
// An 8-bit pool (fp8 codes, KVSource::kPagedTmaWiden): boxes of 128 codes a row, unswizzled, so
// that a box's rows land 128 bytes apart, each in the bytes its widened row will occupy.
ptx::TensorMapSpec paged_spec(const TensorView& t, KVLayout layout, uint32_t box) {
  const PoolView v = pool_view(t, layout);
  const auto u = [](int64_t x) { return static_cast<uint64_t>(x); };
  const bool codes = dtype_size(t.dtype()) == 1;
  ptx::TensorMapSpec s = ptx::tensor_map_spec_16bit(t.data(), t.dtype(), 5);
  if (codes) {
    s.dtype = CU_TENSOR_MAP_DATA_TYPE_UINT8;
    s.element_bytes = 1;
    s.swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
  }
  const uint64_t e = static_cast<uint64_t>(s.element_bytes);
  const uint32_t row = codes ? 128 : 64;  // elements a box row: 128 bytes either way
  const uint64_t slot_bytes = u(v.stride_slot) * e, head_bytes = u(v.stride_head) * e;
  if (layout == KVLayout::kNHD) {
    s.dims = {u(v.d), u(v.heads), box, u(v.page_size), u(v.pages)};
    s.strides = {0, head_bytes, slot_bytes, slot_bytes, u(v.stride_page) * e};
    s.box = {row, 1, box, 1, 1};
  } else {
    s.dims = {u(v.d), box, u(v.page_size), u(v.heads), u(v.pages)};
    s.strides = {0, slot_bytes, slot_bytes, head_bytes, u(v.stride_page) * e};
    s.box = {row, box, 1, 1, 1};
  }
  return s;
}

// check_pool_layout has bounded the strides to 32 bits.
PoolParams pool_params(const TensorView& t, KVLayout layout) {
  const PoolView v = pool_view(t, layout);
  const auto u32 = [](int64_t x) { return static_cast<uint32_t>(x); };
  return PoolParams{t.data(), u32(v.stride_page), u32(v.stride_slot), u32(v.stride_head)};
}

// Index tensors (cu_seqlens, kv_lens, page tables) are read by the kernel on the device, with a
// unit stride along their last dimension (a block table's rows may be any distance apart).
void check_index_tensor(const TensorView& t, const char* name) {
  if (!t.is_cuda()) {
    unsupported(detail::concat(name, " must be a device int32 tensor with CUDA q/k/v"));
  }
  if (t.size(-1) > 1 && t.stride(-1) != 1) {
    unsupported(detail::concat(name, " must have a unit stride along its last dim (stride ",
                               t.stride(-1), ")"));
  }
}

// Page pools are read by TMA or by 16-byte cp.async: a contiguous last dim, 16-byte aligned base
// and strides; the gather also keeps the offset within a page below 2^31 elements and the page
// stride below 2^32 (kv_loader.cuh).
void check_pool_layout(const TensorView& t, KVLayout layout, const char* name) {
  const auto fail = [&](const std::string& what) {
    unsupported(detail::concat(name, " (page pool) ", what, " (shape ", t.shape_string(), ")"));
  };
  if (t.size(3) > 1 && t.stride(3) != 1) fail("must have a contiguous last dim");
  const int64_t per16 = 16 / static_cast<int64_t>(dtype_size(t.dtype()));  // elements a 16 B
  for (int i = 0; i < 3; ++i) {
    if (t.size(i) > 1 && t.stride(i) % per16 != 0) {
      fail(detail::concat("strides must be multiples of ", per16, " elements (16 bytes)"));
    }
  }
  if (reinterpret_cast<uintptr_t>(t.data()) % 16 != 0) fail("must be 16-byte aligned");
  const PoolView v = pool_view(t, layout);
  const int64_t page_span = (v.page_size - 1) * v.stride_slot + (v.heads - 1) * v.stride_head + v.d;
  if (v.stride_page < 0 || v.stride_page >= (int64_t{1} << 32) || page_span >= (int64_t{1} << 31)) {
    fail("must span fewer than 2^31 elements per page, pages fewer than 2^32 elements apart");
  }
}

// (batch, head) pairs whose K/V fit in one L2 section (plan::fwd_section_bytes, or section_kb
// KiB), rounded to whole GQA groups.
int l2_section_size(int device, int64_t kv_bytes_per_head, int group, int bh_total, bool growing,
                    int section_kb) {
  const int64_t bytes = section_kb > 0
                            ? int64_t{section_kb} << 10
                            : plan::fwd_section_bytes(l2_cache_bytes(device, kWhere), growing);
  const int64_t kv_heads = std::max<int64_t>(1, bytes / std::max<int64_t>(1, kv_bytes_per_head));
  return static_cast<int>(std::min<int64_t>(kv_heads * group, bh_total));
}

// GQA packing (traits.cuh PackParams; the rule in pack_gqa.hpp).
void set_packing(const AttentionOptions& opts, int max_seqlen_q, int block_m, int qk_panels,
                 FwdParams& p) {
  const bool pack = should_pack_gqa(p.group, max_seqlen_q, block_m, opts.pack_gqa);
  p.pack.pack = pack ? p.group : 1;
  p.pack.positions = block_m / p.pack.pack;
  p.pack.pack_div = FastDivisor::of(static_cast<uint32_t>(p.pack.pack));
  p.pack.q_bytes = static_cast<uint32_t>(p.pack.pack * p.pack.positions * 128 * qk_panels);
  p.pack.o_by_tma = packed_o_by_tma(p.pack.pack);
  p.kv_head_divisor = pack ? 1 : p.group;
}

// The mask's right bound: the diagonal for causal calls, else the window's (-1: none).
int mask_window_right(const AttentionOptions& opts) { return opts.causal ? 0 : opts.window.right; }

// Fills everything but the tensor maps, for tiles of block_m rows and block_n keys (the maps
// take the configuration's tile sizes; block_n is the walk replay's block here).
FwdParams make_params(const FwdArgs& args, const AttentionOptions& opts,
                      const LaunchOptions& launch, bool varlen, int block_m, int block_n,
                      int device) {
  FwdParams p{};
  const bool paged = is_paged(args);
  const HeadMajorView q = head_major_view(args.q, varlen);
  p.heads_q = static_cast<int>(q.h);
  p.heads_kv = static_cast<int>(paged ? pool_view(args.k, args.pages.layout).heads
                                      : head_major_view(args.k, varlen).h);
  p.group = p.heads_q / p.heads_kv;
  p.status = device_status(device, kWhere);  // the batch family's launch sets its own family
  if (varlen) {
    p.seq.batch = static_cast<int>(args.cu_seqlens_q.size(0) - 1);
    p.seq.cu_seqlens_q = args.cu_seqlens_q.data_as<const int>();
    if (!paged) p.seq.cu_seqlens_k = args.cu_seqlens_k.data_as<const int>();
    // The bounds of the device-resident entries (mask.cuh clamps into them).
    p.seq.total_q = static_cast<int>(q.s);
    if (!paged) p.seq.total_k = static_cast<int>(head_major_view(args.k, varlen).s);
  } else {
    const HeadMajorView k = head_major_view(args.k, varlen);
    p.seq.batch = static_cast<int>(q.b);
    p.seq.seqlen_q = static_cast<int>(q.s);
    p.seq.seqlen_k = static_cast<int>(k.s);
  }
  // No query row at all (varlen total_q = 0 with any max_seqlen_q): no tile, nothing to write,
  // and no map over Q's zero rows to encode (a tensor map refuses a dimension of 0).
  const int max_seqlen_q = q.s == 0 ? 0 : varlen ? args.max_seqlen_q : p.seq.seqlen_q;
  const int max_seqlen_k = varlen ? args.max_seqlen_k : p.seq.seqlen_k;

  if (paged) {
    const PageTable& pt = args.pages;
    p.kv.kv_lens = pt.kv_lens.data_as<const int>();
    if (pt.block_table.defined()) {
      p.kv.block_table = pt.block_table.data_as<const int>();
      p.kv.block_table_stride = pt.block_table.stride(0);
      p.kv.pages_per_row = static_cast<int>(pt.block_table.size(1));
    } else {
      p.kv.page_indptr = pt.indptr.data_as<const int>();
      p.kv.page_indices = pt.indices.data_as<const int>();
      p.kv.num_page_indices = static_cast<int>(pt.indices.size(0));
    }
    p.kv.num_pages = static_cast<int>(pool_view(args.k, pt.layout).pages);
    p.kv.page_size = static_cast<int>(pool_view(args.k, pt.layout).page_size);
    p.kv.page_div = FastDivisor::of(static_cast<uint32_t>(p.kv.page_size));
    p.kv.hnd = pt.layout == KVLayout::kHND;
  }

  p.mask.window_left = opts.window.left;
  p.mask.window_right = mask_window_right(opts);

  const float scale = opts.scale ? *opts.scale : 1.0f / std::sqrt(static_cast<float>(q.d));
  // A softcap is on where softcap_scale != 0: with scale 0 every logit is 0, softcap or not.
  if (opts.softcap > 0.f && scale != 0.f) {
    p.softmax.softcap_scale = scale / opts.softcap;
    p.softmax.scale_log2 = opts.softcap * kLog2e;
  } else {
    p.softmax.scale_log2 = scale * kLog2e;
  }
  p.softmax.sinks = args.sinks.defined() ? args.sinks.data_as<const float>() : nullptr;
  if (args.sinks.defined()) p.softmax.sinks_stride = args.sinks.stride(0);

  p.out.o = args.out.data();
  p.out.lse = args.lse.data_as<float>();
  if (varlen) {
    p.out.o_row_stride = args.out.stride(0);
    p.out.o_head_stride = args.out.stride(1);
    p.out.lse_row_stride = args.lse.stride(0);
    p.out.lse_head_stride = args.lse.stride(1);
  } else {
    p.out.o_batch_stride = args.out.stride(0);
    p.out.o_row_stride = args.out.stride(1);
    p.out.o_head_stride = args.out.stride(2);
    p.out.lse_batch_stride = args.lse.stride(0);
    p.out.lse_row_stride = args.lse.stride(1);
    p.out.lse_head_stride = args.lse.stride(2);
  }

  set_packing(opts, max_seqlen_q, block_m, static_cast<int>(q.d / 64), p);
  const int m_blocks = (max_seqlen_q + p.pack.positions - 1) / p.pack.positions;
  p.sched.num_heads = p.pack.pack > 1 ? p.heads_kv : p.heads_q;
  p.sched.batch = p.seq.batch;
  const int64_t bh = static_cast<int64_t>(p.sched.num_heads) * p.seq.batch;
  // Without a growing diagonal (a left bound makes every tile past the first few equal) there is
  // nothing to pair.
  const bool growing = plan::fwd_growing_diagonal(p.mask.window_left, p.mask.window_right);
  const bool dense = !varlen && !paged;
  if (bh > 0 && m_blocks > 0) {
    const int64_t kv_bytes_per_head =
        static_cast<int64_t>(std::max(max_seqlen_k, 1)) * (args.k.size(-1) + args.v.size(-1)) * 2;
    p.sched.section_bh = l2_section_size(device, kv_bytes_per_head, p.pack.pack > 1 ? 1 : p.group,
                                         static_cast<int>(bh), growing, launch.l2_section_kb);
  }
  switch (launch.walk) {
    case LaunchOptions::Walk::kAuto:
      if (block_m > kBlockM) {  // 192-row tiles: the walk the replay balances better
        p.sched.paired = growing && dense &&
                         plan::fwd_pair_by_replay(plan::FwdWalkShape{
                             p.pack.positions, p.seq.seqlen_q, p.seq.seqlen_k, p.mask.window_right,
                             block_n, bh, p.sched.section_bh, sm_count(device, kWhere)});
      } else {
        p.sched.paired =
            plan::fwd_pair_tiles(growing, dense, m_blocks, bh, sm_count(device, kWhere));
      }
      break;
    case LaunchOptions::Walk::kPlain:
      p.sched.paired = false;
      break;
    case LaunchOptions::Walk::kPaired:
      p.sched.paired = dense && m_blocks > 0;
      break;
  }
  p.sched.num_m_blocks = plan::fwd_walk_m_blocks(m_blocks, p.sched.paired);
  const int64_t total_tiles = static_cast<int64_t>(p.sched.num_m_blocks) * bh;
  if (total_tiles > INT32_MAX) unsupported("more than 2^31 work tiles");
  p.sched.total_tiles = static_cast<int>(total_tiles);
  if (total_tiles > 0) p.sched.set_divisors();
  return p;
}

// Dense or varlen K and V by TMA. Varlen: a tile's last KV block arrives with the next
// sequence's rows past its end, which the consumers zero in V (kv.zero_v_tail).
void set_contiguous_source(const FwdArgs& args, bool varlen, int block_n, FwdParams& p) {
  // With no key anywhere (dense Sk = 0 or varlen total_k = 0) no K/V box is ever loaded; the maps
  // then view q only so that they can be encoded.
  const bool no_keys = head_major_view(args.k, varlen).s == 0;
  const uint32_t rows = static_cast<uint32_t>(block_n);
  p.kv.source = KVSource::kContiguous;
  p.kv.zero_v_tail = varlen;
  p.tm_k = ptx::encode_tensor_map(tma_spec(no_keys ? args.q : args.k, varlen, rows));
  p.tm_v = ptx::encode_tensor_map(tma_spec(no_keys ? args.q : args.v, varlen, rows));
}

// Paged K and V: TMA boxes of gcd(page_size, kBlockN) slots when that is a multiple of 8 rows
// (every box then starts on a 1024-byte swizzle atom and never crosses a page), else the
// cp.async gather. The gather is also the fallback should the driver refuse the maps (or the
// launch options turn TMA off). The maps are based at the pools themselves: an earlier windowed
// map based `box` slots before each pool faulted on an H200 for pools at the start of their
// device allocation (kv_loader.cuh), which is where a framework's allocator puts a cache.
// An 8-bit cache (the batch family's fp8 instances): its codes by TMA when its rows fill whole
// 128-byte rows (head dims >= 128, FwdTraits::kTmaCodes) and the boxes fit, widened by the
// producer's warps 1..3 (kPagedTmaWiden); else the gather, which widens them too.
void set_paged_source(const FwdArgs& args, int block_n, const LaunchOptions& launch, FwdParams& p) {
  const KVLayout layout = args.pages.layout;
  const PoolView k = pool_view(args.k, layout);
  const int box = std::gcd(static_cast<int>(k.page_size), block_n);
  const bool codes = dtype_size(args.k.dtype()) == 1;
  const bool rows_fit = !codes || (args.k.size(-1) >= 128 && args.v.size(-1) >= 128);
  // The gather's addressing, also read by the batch family's side lane on the TMA path.
  p.kv.k_pool = pool_params(args.k, layout);
  p.kv.v_pool = pool_params(args.v, layout);
  if (box % 8 == 0 && k.pages > 0 && launch.paged_tma && rows_fit) {
    try {
      p.tm_k = ptx::encode_tensor_map(paged_spec(args.k, layout, static_cast<uint32_t>(box)));
      p.tm_v = ptx::encode_tensor_map(paged_spec(args.v, layout, static_cast<uint32_t>(box)));
      p.kv.source = codes ? KVSource::kPagedTmaWiden : KVSource::kPagedTma;
      p.kv.box_rows = box;
      p.kv.zero_v_tail = true;
      return;
    } catch (const Error&) {
    }
  }
  p.kv.source = KVSource::kPagedGather;
  p.tm_k = p.tm_q;  // never used by the gather: valid maps all the same
  p.tm_v = p.tm_q;
}

// The tensor maps of q, out, K and V and the KV source, for KV tiles of `block_n` keys.
void add_tensor_maps(const FwdArgs& args, const LaunchOptions& launch, int block_n, FwdParams& p) {
  const bool varlen = is_varlen(args);
  // Boxes of pack heads x positions, so that a tile's rows arrive as q_pos * pack + h (pack 1:
  // the tile's rows of one head). O's map is used only when pack divides 64
  // (PackParams::o_by_tma).
  const auto pack = static_cast<uint32_t>(p.pack.pack);
  p.tm_q = ptx::encode_tensor_map(
      tma_spec(args.q, varlen, static_cast<uint32_t>(p.pack.positions), pack));
  p.tm_o = ptx::encode_tensor_map(tma_spec(
      args.out, varlen, p.pack.o_by_tma ? kRowsPerConsumer / pack : 1, p.pack.o_by_tma ? pack : 1));
  if (is_paged(args)) {
    set_paged_source(args, block_n, launch, p);
  } else {
    set_contiguous_source(args, varlen, block_n, p);
  }
}

// Launches configuration Traits over p, which make_params built for Traits::kBlockM rows.
template <class Traits>
void run_config(const FwdArgs& args, const LaunchOptions& launch, FwdParams p, int device,
                cudaStream_t stream) {
  if (p.sched.total_tiles == 0) return;
  add_tensor_maps(args, launch, Traits::kBlockN, p);
  // Paired, a CTA takes two tiles at a time (the rule pairs only where the units fill the grid).
  const int units = p.sched.paired ? p.sched.total_tiles / 2 : p.sched.total_tiles;
  const int grid = std::min(units, sm_count(device, kWhere));
  cuda_ok(launch_kernel<Traits>(p, grid, stream), "fwd kernel launch");
}

// Keys per KV tile of the built pair (dqk, dv).
int block_n_for(int64_t dqk, int64_t dv) { return kFwdConfigs[fwd_config_index(dqk, dv)].block_n; }

}  // namespace

FwdParams prepare_params(const FwdArgs& args, const AttentionOptions& opts,
                         const LaunchOptions& launch, int device, int block_n, int block_m) {
  FwdParams p = make_params(args, opts, launch, is_varlen(args), block_m, block_n, device);
  if (p.sched.total_tiles > 0) add_tensor_maps(args, launch, block_n, p);
  return p;
}

std::string kv_load_path(const FwdArgs& args, const LaunchOptions& launch) {
  check_supported(args, AttentionOptions{});
  DeviceGuard guard(args.q.device().index, kWhere);
  FwdParams p{};
  const int block_n = block_n_for(args.q.size(-1), args.v.size(-1));
  if (is_paged(args)) {
    set_paged_source(args, block_n, launch, p);
  } else {
    set_contiguous_source(args, is_varlen(args), block_n, p);
  }
  switch (p.kv.source) {
    case KVSource::kContiguous:
      return "contiguous";
    case KVSource::kPagedTma:
      return detail::concat("paged TMA, boxes of ", p.kv.box_rows, " slots");
    case KVSource::kPagedTmaWiden:
      return detail::concat("paged TMA of fp8 codes, boxes of ", p.kv.box_rows, " slots");
    case KVSource::kPagedGather:
      break;
  }
  return "paged gather";
}

void check_supported(const FwdArgs& args, const AttentionOptions& opts) {
  const int64_t dqk = args.q.size(-1), dv = args.v.size(-1);
  // The online softmax keeps the running max of the raw logits, the right reference only for a
  // positive scale (softmax.cuh); with a softcap the logits are tanh-bounded and any scale works.
  if (opts.scale && *opts.scale < 0.f && !(opts.softcap > 0.f)) {
    unsupported(detail::concat("scale ", *opts.scale,
                               " without a softcap (the kernel takes a positive scale; the CPU "
                               "reference any)"));
  }
  if (!built_head_dims(dqk, dv)) {
    unsupported(detail::concat("head dims (Dqk ", dqk, ", Dv ", dv,
                               ") are not built; built: ", built_head_dims_string()));
  }
  if (args.q.dtype() != DType::kBF16 && args.q.dtype() != DType::kFP16) {
    unsupported(detail::concat("dtype ", args.q.dtype(), "; built: bf16, fp16"));
  }
  const bool varlen = is_varlen(args);
  const bool paged = is_paged(args);
  if (varlen) {
    check_index_tensor(args.cu_seqlens_q, "cu_seqlens_q");
    if (!paged) check_index_tensor(args.cu_seqlens_k, "cu_seqlens_k");
    if (args.max_seqlen_q <= 0 && args.q.size(0) > 0) {
      unsupported("varlen needs max_seqlen_q > 0 on the host (no device sync)");
    }
  }
  if (paged) {
    const PageTable& pt = args.pages;
    check_index_tensor(pt.kv_lens, "kv_lens");
    if (pt.block_table.defined()) {
      check_index_tensor(pt.block_table, "page_table");
    } else {
      check_index_tensor(pt.indptr, "page_indptr");
      check_index_tensor(pt.indices, "page_indices");
    }
    check_pool_layout(args.k, pt.layout, "k");
    check_pool_layout(args.v, pt.layout, "v");
  } else {
    check_tma_layout(args.k, "k", varlen);
    check_tma_layout(args.v, "v", varlen);
  }
  if (args.sinks.defined() && !args.sinks.is_cuda()) unsupported("sinks must be a device tensor");
  check_tma_layout(args.q, "q", varlen);
  check_tma_layout(args.out, "out", varlen);
}

namespace {

// The wide instance's parameters when the call runs it (LaunchOptions::kv_tiles, the row's key
// floor and, for 192-row tiles under a growing diagonal, a dense call: plan/fwd_tiles.hpp), else
// nothing.
std::optional<FwdParams> wide_params(const FwdArgs& args, const AttentionOptions& opts,
                                     const LaunchOptions& launch, int device) {
  const int row = fwd_wide_config_index(args.q.size(-1), args.v.size(-1));
  if (row < 0 || is_paged(args) || launch.kv_tiles == LaunchOptions::KVTiles::kBase) return {};
  const FwdConfig& c = kFwdWideConfigs[row];
  const int block_m = c.consumers * kRowsPerConsumer;
  const bool varlen = is_varlen(args);
  if (launch.kv_tiles != LaunchOptions::KVTiles::kWide) {
    // Decided before any parameters are built (host time).
    const int64_t max_keys = varlen ? args.max_seqlen_k : head_major_view(args.k, false).s;
    const int window_right = mask_window_right(opts);
    const int64_t keys = plan::fwd_keys_per_tile(max_keys, opts.window.left, window_right, block_m);
    const bool growing = plan::fwd_growing_diagonal(opts.window.left, window_right);
    if (!plan::fwd_wide_tiles(keys, c.min_keys, block_m > kBlockM, growing, !varlen)) return {};
  }
  return make_params(args, opts, launch, varlen, block_m, c.block_n, device);
}

}  // namespace

bool runs_wide_tiles(const FwdArgs& args, const AttentionOptions& opts,
                     const LaunchOptions& launch) {
  check_supported(args, opts);
  DeviceGuard guard(args.q.device().index, kWhere);
  return wide_params(args, opts, launch, args.q.device().index).has_value();
}

void run(const FwdArgs& args, const AttentionOptions& opts, Stream stream,
         const LaunchOptions& launch) {
  check_supported(args, opts);
  const int device = args.q.device().index;
  DeviceGuard guard(device, kWhere);
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  const int64_t dqk = args.q.size(-1), dv = args.v.size(-1);
  if (std::optional<FwdParams> wide = wide_params(args, opts, launch, device)) {
    visit_wide_config(dqk, dv, args.q.dtype(), [&](auto config) {
      run_config<typename decltype(config)::type>(args, launch, *wide, device, s);
    });
    return;
  }
  visit_config(dqk, dv, args.q.dtype(), [&](auto config) {
    using Traits = typename decltype(config)::type;
    run_config<Traits>(
        args, launch,
        make_params(args, opts, launch, is_varlen(args), Traits::kBlockM, Traits::kBlockN, device),
        device, s);
  });
}

}  // namespace hopattn::kernels::fwd
