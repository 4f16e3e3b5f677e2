// Tile shape of the MLA kernel: read by the kernel's traits (src/kernels/mla/traits.cuh) and by
// its host planner (mla_plan.hpp), so both agree without a second copy. Plain C++.
#pragma once

namespace hopattn::plan::mla {

inline constexpr int kLatentDim = 512;  // ckv: keys and values
inline constexpr int kRopeDim = 64;     // kpe: keys only
inline constexpr int kQkDim = kLatentDim + kRopeDim;
// Rows of one work tile: (q token, head) pairs of one request, token-major (row = i * H + h),
// so that a tensor-parallel shard of 16 heads with 4 MTP tokens fills the 64 rows of the MMA.
inline constexpr int kTileRows = 64;
inline constexpr int kBlockKeys = 32;  // keys per KV tile (pipeline stage)
// Keys per KV block of the two-block ("seesaw") schedule (src/kernels/mla/seesaw.cuh).
inline constexpr int kSeesawBlockKeys = 64;
// Rows (q token, head pairs) of a request up to which the narrow schedule runs it
// (src/kernels/mla/narrow.cuh): S^T = K Q^T and O^T += V^T P^T put the 64 keys of a block on the
// MMA's M side and the rows on N, so 16 rows cost a quarter of a 64-row tile's MMA work. With an
// fp8 cache the consumers keep no 16-bit copy of the cache, which leaves shared memory for the
// Q and P^T of 32 rows (N = 32: a tensor-parallel shard of 16 heads with one MTP token).
inline constexpr int kNarrowRows = 16;
inline constexpr int kNarrowRowsFp8 = 32;
constexpr int narrow_rows(bool fp8_cache) { return fp8_cache ? kNarrowRowsFp8 : kNarrowRows; }
inline constexpr int kMaxSplits = 128;

}  // namespace hopattn::plan::mla
