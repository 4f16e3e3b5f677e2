// Command line of the hopattn CLI: `hopattn` (the tour), `hopattn bench FAMILY [flags]`, and the
// help texts. Bad input raises UsageError, which main() reports with exit code 2.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "hopattn/dtype.hpp"
#include "hopattn/options.hpp"
#include "kernels/fwd/launch.hpp"
#include "l2_flush.hpp"
#include "plan/batch_plan.hpp"
#include "plan/bwd_order.hpp"
#include "sm_hold_spec.hpp"

namespace hopattn::cli {

enum class Family { kFwd, kBwd, kDecode, kMla, kMerge, kBatch };
inline constexpr Family kAllFamilies[] = {Family::kFwd, Family::kBwd,   Family::kDecode,
                                          Family::kMla, Family::kMerge, Family::kBatch};
const char* family_name(Family f);

// How `bench batch` computes its step: BatchAttention (one plan, one launch), the fwd family
// over the prefill chunks plus the decode family over the decodes (separate launches), or one
// paged varlen fwd launch over every request.
enum class BatchImpl { kBatch, kSeparate, kVarlen };
inline constexpr BatchImpl kAllBatchImpls[] = {BatchImpl::kBatch, BatchImpl::kSeparate,
                                               BatchImpl::kVarlen};
// "batch", "separate", "varlen" (the --batch-impl names).
const char* batch_impl_name(BatchImpl i);

// Who computes: the library's GPU kernel, the naive fp32 GPU reference (fwd and decode only),
// or the CPU reference. kAuto: the kernel (and the naive reference) on a GPU, else the CPU.
enum class Impl { kAuto, kKernel, kNaive, kCpu };
const char* impl_name(Impl i);

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What the user gave on the command line; unset fields take the family's defaults.
struct BenchFlags {
  std::optional<int> batch, q_len, kv_len, q_heads, kv_heads, head_dim, page_size;
  std::optional<int> head_dim_v;  // --head-dim DQK:DV's DV (unset: the one-value form, Dv = Dqk)
  std::optional<DType> dtype, kv_dtype;
  std::optional<bool> causal;
  std::optional<Window> window;
  std::optional<float> softcap;
  std::optional<std::optional<bool>> pack_gqa;  // fwd: --pack-gqa on | off | auto (= unset)
  // Launch variants of the GPU kernels, timed against the default (kernels/*/launch.hpp).
  std::optional<bool> paged_tma;                                 // fwd: --paged-tma on | off
  std::optional<kernels::fwd::LaunchOptions::KVTiles> kv_tiles;  // fwd: --kv-tiles
  std::optional<kernels::fwd::LaunchOptions::Walk> walk;         // fwd: --fwd-walk
  std::optional<int> l2_section_kb;                              // fwd: --l2-section-kb
  std::optional<int> splits;                  // decode, mla: --splits N (0 = the library's choice)
  std::optional<MlaSchedule> mla_schedule;    // mla: --mla-schedule M (auto, seesaw, ..., narrow)
  std::optional<KVLayout> kv_layout;          // decode: --kv-layout nhd | hnd
  std::optional<bool> pages_in_order;         // paged pools: --page-order shuffled | in-order
  std::optional<DecodeKernel> decode_kernel;  // decode, batch (its concurrent form's decodes):
                                              // --decode-kernel K (auto, tiles, small, narrow)
  std::optional<plan::BwdOrder> bwd_order;    // bwd: --bwd-order sections | heads
  std::optional<std::string> step;            // batch: --step (validated by the parser)
  std::vector<BatchImpl> batch_impls;         // batch: --batch-impl (empty: all three)
  std::optional<int> batch_ctas;  // batch: --batch-ctas N (BatchAttentionConfig::num_ctas)
  std::optional<plan::BatchOverlap> batch_spread;      // batch: --batch-order auto | lpt | spread
  std::optional<plan::BatchOverlap> batch_partition;   // batch: --batch-order partition
  std::optional<int> batch_decode_rate_milli;          // batch: --batch-decode-rate R (x1000)
  std::optional<int> batch_partition_ctas;             // batch: --batch-partition-ctas P
  std::optional<plan::BatchOverlap> batch_side;        // batch: --batch-side auto | off | on
  std::optional<plan::BatchOverlap> batch_concurrent;  // batch: --batch-concurrent auto|off|on
  std::optional<int> batch_concurrent_rate_milli;      // --batch-concurrent-rate R (x1000)
  std::optional<int> batch_concurrent_ctas;            // --batch-concurrent-ctas P
  std::optional<int> batch_concurrent_tail_milli;      // --batch-concurrent-tail T (x1000)
  std::vector<int> decode_sm_order;        // batch: --decode-sm-order LIST (empty: the hardware's)
  bool decode_sm_gpc = false;              // batch: --decode-sm-order gpc (the GPC probe's order)
  std::optional<int64_t> batch_side_cost;  // batch: --batch-side-cost N (the planner's factor)
  std::optional<bool> batch_sections;      // batch: --batch-sections on | off
  std::optional<int> iters, warmup;
  int chain = 1;    // --chain N: GPU calls a timed iteration, back to back (time / N)
  SmHoldSpec hold;  // --hold-sms K / --free-sms LIST: GPU calls on the SMs held ones leave
  std::optional<uint64_t> seed;
  Impl impl = Impl::kAuto;
  bool check = true;
  bool csv = false;
  // --l2-flush write | read | none (bench; --warm-l2 = none, bench and tour): before each timed
  // GPU call.
  L2Flush l2_flush = L2Flush::kWrite;
};

struct Command {
  enum class Kind { kTour, kBench, kHelp, kBenchHelp, kScript };
  Kind kind = Kind::kTour;
  Family family = Family::kFwd;
  BenchFlags flags;    // bench; the tour reads csv and seed only
  std::string script;  // kScript: the file of bench lines ("-": standard input)
};

Command parse_command(int argc, const char* const* argv);
std::string main_help();
std::string bench_help();

}  // namespace hopattn::cli
