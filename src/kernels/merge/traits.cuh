// The merge family's configuration: block shapes, the register budgets they imply, and the
// kernel parameters (the states of one or two sources, the output), read by the kernels and by
// the host launch. README.md beside this file says why these numbers.
#pragma once

#include <cstdint>

namespace hopattn::kernels::merge {

inline constexpr int kThreads = 128;
inline constexpr int kRowsPerBlock = kThreads / 32;  // one warp a row
inline constexpr int kFeaturesPerLane = 4;           // per pass: 128 features a warp
inline constexpr int kVecThreads = 256;
inline constexpr int kVecPrefetch = 2;  // states whose o loads are issued before the lse math
// 1536 threads an SM (<= 40 registers): merge_states keeps 2 x 16 B a thread, ~48 KB an SM, in
// flight, above the ~35 KB that hides ~1 us of DRAM latency at 4.6 TB/s over 132 SMs.
inline constexpr int kVecBlocksPerSm = 6;

// States of one source: o [T, n, H, D] (n = 1 for merge_states' o_a / o_b), lse [T, n, H].
struct Source {
  const void* o;
  int64_t o_stride[3];  // token, state, head (elements; features contiguous)
  const float* lse;
  int64_t lse_stride[3];
  int n;
};

struct Params {
  Source src[2];  // merge_states: a and b (n = 1 each); merge_states_n: src[0] only
  int num_sources;
  int tokens, heads, dim;
  void* out;  // [T, H, D]
  int64_t out_stride[2];
  float* lse;  // optional [T, H]
  int64_t lse_stride[2];
};

// Elements of one 16-byte load of In.
template <class In>
inline constexpr int kVec = 16 / static_cast<int>(sizeof(In));

// Blocks per SM that merge_vec_kernel's register budget is sized for, by pieces per thread: a
// thread keeps kVecPrefetch x kP 16-byte loads in flight. kP = 1: 1536 threads an SM (<= 40
// registers), 48 KB in flight; kP = 4: at least 512 threads an SM (<= 128 registers; 16-bit
// inputs hold 32 fp32 sums a thread and spill at 80), at least 64 KB in flight, with a quarter
// of the lse loads, weight computations and threads per byte.
template <int kP>
inline constexpr int kVecBlocksPerSmFor = kP == 1 ? kVecBlocksPerSm : 2;

// merge_few_kernel: up to kFewStates states whose lse is kept in registers, in 2, 4, 8 or 16
// state slots (launch.cu takes the fewest that hold n) of kFewPieces 16-byte pieces a thread
// (rows that do not split that way take 8 slots of one piece), with the blocks an SM its
// register budget is sized for and the o of kStates / kFewRounds states in flight at once. The
// fastest shapes of tools/merge_few_sweep.cu on the H200 (2026-12-03, docs/perf/NOTES.md merge;
// measured before SourceRows and the one-source form, kernel.cuh):
// 2 slots x 2 pieces at 4 blocks of 256 (<= 64 registers; 1.04-1.07x the 2 x 4 at 2 blocks
// before, 1.24x 2 x 1 at 8), 4 x 2 at 2 (<= 128), 8 x 1 at 4 (<= 64; 1.11x 2 blocks). 16 slots:
// 1 piece at 4 blocks (<= 64 registers) in 4 rounds of 4 states: in the sweep of 2026-12-03
// (run set m) 1.01-1.11x the 3 blocks in 2 rounds of 8 first picked by register budget (16384 x
// 32 x 128: 16 states 541.5 -> 537.8 us, 12 states 475.1 -> 428.4 us; 1024 x 32 x 128, 16 states
// 45.4 -> 44.6 us) and 1.17x merge_vec_kernel (16384 x 32 x 128, 16 states). Two pieces at 2
// blocks in 2 rounds ran 1-3% faster at 16384 tokens but would need a one-piece fallback for
// rows that do not split in two.
inline constexpr int kFewStates = 16;
template <int kStates>
inline constexpr int kFewPieces = kStates <= 4 ? 2 : 1;
template <int kStates>
inline constexpr int kFewBlocksPerSm = kStates == 4 ? 2 : 4;
template <int kStates>
inline constexpr int kFewRounds = kStates == 16 ? 4 : 1;

// merge_wide_kernel: past kWideAboveStates states, when merge_vec_kernel would run fewer than
// kWideBelowThreads threads (at 128 B in flight a thread, under the ~5 MB that hides a DRAM
// latency at 4.6 TB/s), the states split over kWideGroups groups of a block instead, each thread
// one 16-byte piece and kWideBatch states' loads in flight. Up to kWideAboveStates states
// merge_few_kernel takes every row count; from there to kFewStates, few rows come here instead:
// its thread per row piece would leave most SMs idle (16 states of 128 rows x 512 bf16: 32
// blocks of 256 for 132 SMs).
inline constexpr int kWideAboveStates = 8;
inline constexpr int64_t kWideBelowThreads = 65536;
// fp32 partials (mla's splits): 4 groups of 64 lanes, each thread 16 states' 16-byte pieces in
// flight, 2 blocks an SM (128 registers): the 256 blocks of 64 partials of 128 x 512 are all
// resident at once, so the merge waits for one DRAM latency (8 groups of 8 states at 3 blocks an
// SM left 116 of 512 blocks for a second wave: 9.0 us, run set o). 16-bit partials: 8 groups of 8
// at 2 blocks an SM (102 registers; 16 states a thread spill).
template <class In>
inline constexpr int kWideGroups = sizeof(In) == 4 ? 4 : 8;
template <class In>
inline constexpr int kWideBatch = sizeof(In) == 4 ? 16 : 8;
inline constexpr int kWideBlocksPerSm = 2;

}  // namespace hopattn::kernels::merge
