// The MLA split choice and schedule. One CTA a SM (either schedule holds 64 rows of Q and 144 KB
// of the 576-wide cache: four 32-key stages or two 64-key buffers). A problem is one (request,
// row tile); its keys are split so that the grid fills the SMs without a tail wave that costs
// more than it saves.
#include "plan/mla_plan.hpp"

#include <algorithm>

#include "plan/mla_tiles.hpp"
#include "plan/split_cost.hpp"

namespace hopattn::plan::mla {
namespace {

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

// A CTA's fixed cost is about six KV tiles of 32 keys: Q (72 KB, two tiles' bytes) is read
// before the first key, the first tile's latency is exposed, and the epilogue stores 64 rows of
// 512. The merge is a separate memory-bound launch over the partials.
constexpr SplitCostModel kCost{/*cta_fixed_tiles=*/6, /*split_merge_tiles=*/4,
                               /*max_splits=*/kMaxSplits, /*min_tiles_per_split=*/4};

int auto_splits(int64_t problems, int64_t max_kv_len, int num_sms) {
  const int64_t tiles = (max_kv_len + kBlockKeys - 1) / kBlockKeys;
  const int bound = kCost.choose(problems, tiles, kHopperMaxSms);
  return num_sms >= kHopperMaxSms ? bound : std::min(bound, kCost.choose(problems, tiles, num_sms));
}

}  // namespace

bool seesaw_schedule(const Shape& s, int num_splits) {
  constexpr int64_t kMinKeysPerSplit = 1024;
  const int64_t splits = std::max(num_splits, 1);
  const int64_t keys_per_split = (std::max<int64_t>(s.max_kv_len, 0) + splits - 1) / splits;
  return !s.fp8_cache && s.page_size > 0 && s.page_size % kSeesawBlockKeys == 0 &&
         std::max<int64_t>(s.max_seqlen_q, 0) * s.heads >= 2 * kTileRows &&
         keys_per_split >= kMinKeysPerSplit;
}

bool narrow_fits(int64_t max_seqlen_q, int64_t heads, bool fp8_cache) {
  return std::max<int64_t>(max_seqlen_q, 0) * heads <= narrow_rows(fp8_cache);
}

bool narrow_fits(const Shape& s) { return narrow_fits(s.max_seqlen_q, s.heads, s.fp8_cache); }

bool narrow_schedule(const Shape& s) { return s.fp8_cache && narrow_fits(s); }

Plan make_plan(const Shape& s, int num_sms) {
  Plan p;
  const int64_t rows = std::max<int64_t>(s.max_seqlen_q, 0) * s.heads;
  p.row_tiles = static_cast<int>(std::max<int64_t>((rows + kTileRows - 1) / kTileRows, 1));
  const int64_t problems = s.batch * p.row_tiles;
  p.num_splits = s.num_splits > 0 ? std::min(s.num_splits, kMaxSplits)
                                  : auto_splits(problems, s.max_kv_len, std::max(num_sms, 1));
  switch (s.schedule) {
    case MlaSchedule::kAuto:
      p.seesaw = seesaw_schedule(s, p.num_splits);
      p.narrow = !p.seesaw && narrow_schedule(s);
      break;
    case MlaSchedule::kSeesaw:
      p.seesaw = true;
      break;
    case MlaSchedule::kNarrow:
      p.narrow = true;
      break;
    case MlaSchedule::kOneConsumer:
      break;
  }
  p.narrow_cols = rows <= kNarrowRows ? kNarrowRows : kNarrowRowsFp8;
  if (p.num_splits > 1) {
    const size_t states = size_t(p.num_splits) * size_t(std::max<int64_t>(s.total_q, 0)) *
                          size_t(std::max<int64_t>(s.heads, 0));
    p.partial_o_offset = 0;
    p.partial_lse_offset = align256(states * kLatentDim * sizeof(float));
    p.workspace_bytes = p.partial_lse_offset + align256(states * sizeof(float));
  }
  return p;
}

Shape shape_of(const MlaArgs& a, const MlaOptions& o) {
  Shape s;
  s.batch = a.cu_seqlens_q.size(0) - 1;
  s.heads = a.q_nope.size(1);
  s.total_q = a.q_nope.size(0);
  s.max_seqlen_q = a.max_seqlen_q;
  const PageTable& pt = a.pages;
  const int64_t capacity = pt.block_table.defined() ? pt.block_table.size(1) : pt.indices.size(0);
  s.max_kv_len = capacity * a.ckv.size(1);
  s.num_splits = o.num_splits;
  s.page_size = a.ckv.size(1);
  s.fp8_cache = a.ckv.dtype() == DType::kFP8E4M3;
  s.schedule = o.schedule;
  return s;
}

}  // namespace hopattn::plan::mla
