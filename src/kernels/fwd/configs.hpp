// The fwd family's configuration table, in plain C++ (the validators and the CPU build read it):
// one row per head-dim pair the CUDA kernels are built for, bf16 and fp16 each, with its KV tile.
// The traits types and the dispatch (configs.cuh), the "not built" messages (launch.cu,
// batch/launch.cu, bwd/launch.cu), the validator's head-dim rule (src/api/validate_fwd.cpp, hence
// the support matrix), the backward's pairs and the batch family's rows derive from it. Adding a
// head dim: a row here and a launch_hd*.cu file with its instantiation line (one head dim a file,
// so that two cores build them in parallel; batch/launch_hd*.cu likewise for a batch row).
#pragma once

#include <cstdint>
#include <string>

namespace hopattn::kernels::fwd {

struct FwdConfig {
  int dqk, dv;
  // Keys per KV tile: as long as the 227 KB of shared memory allow with `stages` stages.
  int block_n;
  int stages;
  // O staged in Q's buffer: at 256 a separate 64 KB buffer would leave room for 48 keys only.
  bool o_in_q;
  // Run by the batch family too (its work lists over the same kernel).
  bool batch;
  // Consumer warpgroups of 64 query rows: 2, or 3 (192-row tiles; kFwdWideConfigs only).
  int consumers = 2;
  // kFwdWideConfigs: the fewest keys a tile must walk for the row to pay (plan/fwd_tiles.hpp).
  int min_keys = 0;
};

inline constexpr FwdConfig kFwdConfigs[] = {
    {64, 64, 128, 2, false, true},
    {128, 128, 128, 2, false, true},
    {192, 128, 112, 2, false, false},  // DeepSeek prefill: 128 nope + 64 rope, v 128
    {256, 256, 80, 2, true, true},
};
inline constexpr int kNumFwdConfigs = static_cast<int>(sizeof(kFwdConfigs) / sizeof(FwdConfig));

// Second instances with wider tiles, for the attention_fwd calls whose tiles they suit (dense
// and varlen K/V; paged calls and the bwd and batch families keep kFwdConfigs); chosen per call
// by plan/fwd_tiles.hpp (the rule and the walk's part in it), forced by LaunchOptions::kv_tiles.
// - hd64: 192-row tiles of three consumer warpgroups (128 keys). At hd64 the softmax costs as
//   much per key as at hd128 and the GEMMs half, so two consumers leave the tensor cores idle
//   (ncu, run set v: 41% issue, 0.58 eligible warps a scheduler); a third hides it. H100 A/B
//   against the base row: non-causal 512-16k 1.15-1.22x, causal window 1.05x; causal 512-16k
//   1.01-1.21x with the walk plan/fwd_walk_replay.hpp picks, 0.95-0.97x with the wrong one
//   (run set w: paired at 2k-16k, plain for GQA and 512).
// - hd128: 176-key tiles, O staged in Q (at 176 x 128 only that leaves two stages their 176
//   KB). A wider block spreads each block's fixed cost (barriers, the softmax's reductions and
//   rescale, the pipeline hand-offs) over more keys, but its diagonal and last blocks span more
//   keys the mask discards and O in Q delays the next tile's Q: H100, 16k-32k 1.02-1.03x, 8k
//   0.98-1.00x, 4k 0.96-0.99x, 1k 0.81-0.97x. Hence a floor on the keys a tile walks (the longest
//   request's, or the window's span where that is shorter).
inline constexpr FwdConfig kFwdWideConfigs[] = {
    {64, 64, 128, 2, false, false, 3, 0},
    {128, 128, 176, 2, true, false, 2, 16384},
};
inline constexpr int kNumFwdWideConfigs =
    static_cast<int>(sizeof(kFwdWideConfigs) / sizeof(FwdConfig));

// Row of (dqk, dv) in a table of `count` rows, or -1 when the table has none.
constexpr int config_index(const FwdConfig* table, int count, int64_t dqk, int64_t dv) {
  for (int i = 0; i < count; ++i) {
    if (table[i].dqk == dqk && table[i].dv == dv) return i;
  }
  return -1;
}

// Row of (dqk, dv) in kFwdConfigs, or -1 when that pair is not built.
constexpr int fwd_config_index(int64_t dqk, int64_t dv) {
  return config_index(kFwdConfigs, kNumFwdConfigs, dqk, dv);
}

// Row of (dqk, dv) in kFwdWideConfigs, or -1 when that pair has no wide instance.
constexpr int fwd_wide_config_index(int64_t dqk, int64_t dv) {
  return config_index(kFwdWideConfigs, kNumFwdWideConfigs, dqk, dv);
}

// Whether the fwd kernels are built for (dqk, dv) (the bwd kernels are built for the same pairs).
constexpr bool built_head_dims(int64_t dqk, int64_t dv) { return fwd_config_index(dqk, dv) >= 0; }

// Whether the batch family runs (dqk, dv).
constexpr bool built_for_batch(int64_t dqk, int64_t dv) {
  const int i = fwd_config_index(dqk, dv);
  return i >= 0 && kFwdConfigs[i].batch;
}

// "(64, 64), (128, 128), ...": the built pairs (batch_only: the batch family's rows).
inline std::string built_head_dims_string(bool batch_only = false) {
  std::string s;
  for (const FwdConfig& c : kFwdConfigs) {
    if (batch_only && !c.batch) continue;
    s += (s.empty() ? "(" : ", (") + std::to_string(c.dqk) + ", " + std::to_string(c.dv) + ")";
  }
  return s;
}

// "one of 64, 128, 256 or (Dqk 192, Dv 128)": the pairs for a validator's message, the equal
// ones as one number.
inline std::string head_dims_choice() {
  std::string equal, other;
  for (const FwdConfig& c : kFwdConfigs) {
    if (c.dqk == c.dv) {
      equal += (equal.empty() ? "" : ", ") + std::to_string(c.dqk);
    } else {
      other += (other.empty() ? "" : ", ") + std::string("(Dqk ") + std::to_string(c.dqk) +
               ", Dv " + std::to_string(c.dv) + ")";
    }
  }
  return "one of " + equal + (other.empty() ? "" : " or " + other);
}

}  // namespace hopattn::kernels::fwd
