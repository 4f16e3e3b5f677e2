// When the fwd kernel packs the q heads of one KV head into a work tile (GQA packing, traits.cuh
// PackParams). Plain C++: the host launcher uses it and a CPU test checks it.
#pragma once

#include <cstdint>
#include <optional>

namespace hopattn::kernels::fwd {

// Work tiles of `block_m` rows over (max_seqlen_q positions x group heads) of one KV head:
// unpacked, each q head has its own ceil(Sq / block_m) tiles; packed, a tile holds
// floor(block_m / group) positions of all `group` heads, and the group shares
// ceil(Sq / floor(block_m / group)) tiles. The rule packs when that saves at least a tenth of
// the tiles, i.e. when short or ragged q lengths leave many tile rows empty (q_len 1..64 of
// chunked prefill and speculative verification: up to `group` times fewer tiles, each K/V block
// read once per KV head instead of once per q head). Long q lengths near a multiple of block_m
// gain nothing and keep the plain layout (whole-head TMA boxes, no rows lost to a group that does
// not divide block_m). Varlen uses max_seqlen_q, the bound the tile grid is sized by. `force`
// (AttentionOptions::pack_gqa) overrides the rule; a group of 1 (or above block_m) never packs.
inline bool should_pack_gqa(int group, int64_t max_seqlen_q, int block_m,
                            std::optional<bool> force = std::nullopt) {
  if (group <= 1 || group > block_m || max_seqlen_q <= 0) return false;
  if (force.has_value()) return *force;
  const int64_t positions = block_m / group;
  const int64_t unpacked = (max_seqlen_q + block_m - 1) / block_m * group;
  const int64_t packed = (max_seqlen_q + positions - 1) / positions;
  return packed * 10 <= unpacked * 9;
}

// Whether a consumer warpgroup's 64 output rows of a packed tile are whole positions, so that
// one TMA box of (D, pack heads, 64 / pack positions) stores them; otherwise O goes out with
// plain 16-byte stores.
inline bool packed_o_by_tma(int pack) { return pack >= 1 && 64 % pack == 0; }

}  // namespace hopattn::kernels::fwd
