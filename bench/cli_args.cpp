#include "cli_args.hpp"

#include <cerrno>
#include <cstdlib>
#include <tuple>
#include <utility>
#include <vector>

namespace hopattn::cli {
namespace {

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

long long parse_integer(std::string_view flag, std::string_view text, long long lo, long long hi) {
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno != 0 || v < lo || v > hi) {
    throw UsageError(std::string(flag) + ": expected an integer in " + std::to_string(lo) + ".." +
                     std::to_string(hi) + ", got " + quoted(text));
  }
  return v;
}

float parse_float(std::string_view flag, std::string_view text, float lo) {
  const std::string s(text);
  char* end = nullptr;
  const float v = std::strtof(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !(v >= lo)) {
    throw UsageError(std::string(flag) + ": expected a number >= " + std::to_string(lo) + ", got " +
                     quoted(text));
  }
  return v;
}

DType parse_dtype(std::string_view flag, std::string_view text, bool allow_8bit) {
  if (text == "bf16") return DType::kBF16;
  if (text == "fp16") return DType::kFP16;
  if (allow_8bit) {
    if (text == "fp8_e4m3" || text == "e4m3") return DType::kFP8E4M3;
    if (text == "fp8_e5m2" || text == "e5m2") return DType::kFP8E5M2;
    if (text == "int8") return DType::kInt8;
  }
  throw UsageError(std::string(flag) + ": expected " +
                   (allow_8bit ? "bf16, fp16, fp8_e4m3, fp8_e5m2 or int8" : "bf16 or fp16") +
                   ", got " + quoted(text));
}

Impl parse_impl(std::string_view text) {
  if (text == "auto") return Impl::kAuto;
  if (text == "kernel") return Impl::kKernel;
  if (text == "naive") return Impl::kNaive;
  if (text == "cpu") return Impl::kCpu;
  throw UsageError("--impl: expected auto, kernel, naive or cpu, got " + quoted(text));
}

// `form` "A[:B]" (--heads HQ[:HKV], --head-dim DQK[:DV]): A, and B where the colon is there, each
// an integer in lo..hi; "192:", ":128" and "0:128" fail naming the whole value.
std::pair<int, std::optional<int>> parse_int_pair(std::string_view flag, std::string_view form,
                                                  std::string_view text, int lo, int hi) {
  const size_t colon = text.find(':');
  try {
    const int first = static_cast<int>(parse_integer(flag, text.substr(0, colon), lo, hi));
    if (colon == std::string_view::npos) return {first, std::nullopt};
    return {first, static_cast<int>(parse_integer(flag, text.substr(colon + 1), lo, hi))};
  } catch (const UsageError&) {
    throw UsageError(std::string(flag) + ": expected " + std::string(form) +
                     ", each an integer in " + std::to_string(lo) + ".." + std::to_string(hi) +
                     ", got " + quoted(text));
  }
}

std::optional<Family> parse_family(std::string_view text) {
  for (Family f : kAllFamilies) {
    if (text == family_name(f)) return f;
  }
  return std::nullopt;
}

// "--name=value" or "--name value": splits off the value, taking the next argument if needed.
struct ArgCursor {
  std::vector<std::string_view> args;
  size_t next = 0;
  bool done() const { return next >= args.size(); }
  std::string_view take() { return args[next++]; }
  std::string_view value(std::string_view flag, std::optional<std::string_view>& inline_value) {
    if (inline_value) return *inline_value;
    if (done()) throw UsageError(std::string(flag) + ": expected a value");
    return take();
  }
};

constexpr int kMaxCount = 1 << 24;

void parse_flag(std::string_view arg, ArgCursor& cur, BenchFlags& f, bool tour) {
  std::string_view name = arg;
  std::optional<std::string_view> inline_value;
  if (const size_t eq = arg.find('='); eq != std::string_view::npos) {
    name = arg.substr(0, eq);
    inline_value = arg.substr(eq + 1);
  }
  auto no_value = [&] {
    if (inline_value) throw UsageError(std::string(name) + ": takes no value");
  };
  auto int_value = [&](long long lo, long long hi) {
    return static_cast<int>(parse_integer(name, cur.value(name, inline_value), lo, hi));
  };
  // Flags the tour understands too.
  if (name == "--csv") {
    no_value();
    f.csv = true;
    return;
  }
  if (name == "--seed") {
    f.seed =
        static_cast<uint64_t>(parse_integer(name, cur.value(name, inline_value), 0, (1LL << 62)));
    return;
  }
  if (name == "--warm-l2") {
    no_value();
    f.warm_l2 = true;
    return;
  }
  if (tour) {
    throw UsageError("unknown option " + quoted(arg) +
                     " for the tour (it takes --csv, --seed and --warm-l2; see hopattn --help)");
  }
  if (name == "--batch") {
    f.batch = int_value(1, kMaxCount);
    return;
  }
  if (name == "--q-len") {
    f.q_len = int_value(1, kMaxCount);
    return;
  }
  if (name == "--kv-len") {
    f.kv_len = int_value(0, kMaxCount);
    return;
  }
  if (name == "--head-dim") {
    std::tie(f.head_dim, f.head_dim_v) =
        parse_int_pair(name, "DQK[:DV]", cur.value(name, inline_value), 1, 1024);
    return;
  }
  if (name == "--page-size") {
    f.page_size = int_value(1, 256);
    return;
  }
  if (name == "--iters") {
    f.iters = int_value(1, 100000);
    return;
  }
  if (name == "--warmup") {
    f.warmup = int_value(0, 100000);
    return;
  }
  if (name == "--heads") {
    const std::string_view v = cur.value(name, inline_value);
    std::tie(f.q_heads, f.kv_heads) = parse_int_pair(name, "HQ[:HKV]", v, 1, 4096);
    if (f.kv_heads && *f.q_heads % *f.kv_heads != 0) {
      throw UsageError("--heads: expected HQ a multiple of HKV, got " + quoted(v));
    }
    return;
  }
  if (name == "--dtype") {
    f.dtype = parse_dtype(name, cur.value(name, inline_value), false);
    return;
  }
  if (name == "--kv-dtype") {
    f.kv_dtype = parse_dtype(name, cur.value(name, inline_value), true);
    return;
  }
  if (name == "--causal") {
    no_value();
    f.causal = true;
    return;
  }
  if (name == "--no-causal") {
    no_value();
    f.causal = false;
    return;
  }
  if (name == "--window") {
    const std::string_view v = cur.value(name, inline_value);
    const size_t comma = v.find(',');
    if (comma == std::string_view::npos) {
      throw UsageError("--window: expected L,R (each >= -1; -1 = unbounded), got " + quoted(v));
    }
    f.window = Window{static_cast<int>(parse_integer(name, v.substr(0, comma), -1, kMaxCount)),
                      static_cast<int>(parse_integer(name, v.substr(comma + 1), -1, kMaxCount))};
    return;
  }
  if (name == "--softcap") {
    f.softcap = parse_float(name, cur.value(name, inline_value), 0.f);
    return;
  }
  if (name == "--pack-gqa") {
    const std::string_view v = cur.value(name, inline_value);
    if (v == "on") {
      f.pack_gqa = std::optional<bool>(true);
    } else if (v == "off") {
      f.pack_gqa = std::optional<bool>(false);
    } else if (v == "auto") {
      f.pack_gqa = std::optional<bool>();
    } else {
      throw UsageError("--pack-gqa: expected on | off | auto, got " + quoted(v));
    }
    return;
  }
  if (name == "--splits") {
    f.splits = static_cast<int>(parse_integer(name, cur.value(name, inline_value), 0, 256));
    return;
  }
  if (name == "--windowed-maps") {
    const std::string_view v = cur.value(name, inline_value);
    if (v != "on" && v != "off") {
      throw UsageError("--windowed-maps: expected on | off, got " + quoted(v));
    }
    f.windowed_maps = v == "on";
    return;
  }
  if (name == "--bwd-order") {
    const std::string_view v = cur.value(name, inline_value);
    if (v == "sections") {
      f.bwd_order = plan::BwdOrder::kSections;
    } else if (v == "heads") {
      f.bwd_order = plan::BwdOrder::kHeads;
    } else {
      throw UsageError("--bwd-order: expected sections | heads, got " + quoted(v));
    }
    return;
  }
  if (name == "--impl") {
    f.impl = parse_impl(cur.value(name, inline_value));
    return;
  }
  if (name == "--no-check") {
    no_value();
    f.check = false;
    return;
  }
  throw UsageError("unknown option " + quoted(arg) + " (see hopattn bench --help)");
}

}  // namespace

const char* family_name(Family f) {
  switch (f) {
    case Family::kFwd:
      return "fwd";
    case Family::kBwd:
      return "bwd";
    case Family::kDecode:
      return "decode";
    case Family::kMla:
      return "mla";
    case Family::kMerge:
      return "merge";
  }
  return "?";
}

const char* impl_name(Impl i) {
  switch (i) {
    case Impl::kAuto:
      return "auto";
    case Impl::kKernel:
      return "kernel";
    case Impl::kNaive:
      return "naive-ref";
    case Impl::kCpu:
      return "cpu-ref";
  }
  return "?";
}

Command parse_command(int argc, const char* const* argv) {
  ArgCursor cur;
  for (int i = 1; i < argc; ++i) cur.args.emplace_back(argv[i]);
  Command cmd;
  if (cur.done()) return cmd;
  const std::string_view first = cur.args[0];
  if (first == "-h" || first == "--help" || first == "help") {
    cmd.kind = Command::Kind::kHelp;
    return cmd;
  }
  if (first != "bench") {
    if (first.substr(0, 2) != "--") {
      throw UsageError("unknown command " + quoted(first) + " (expected none or 'bench')");
    }
    while (!cur.done()) parse_flag(cur.take(), cur, cmd.flags, /*tour=*/true);
    return cmd;
  }
  cur.take();
  cmd.kind = Command::Kind::kBench;
  if (cur.done()) {
    throw UsageError("bench: expected a family: fwd, bwd, decode, mla or merge");
  }
  const std::string_view family = cur.take();
  if (family == "-h" || family == "--help") {
    cmd.kind = Command::Kind::kBenchHelp;
    return cmd;
  }
  const std::optional<Family> f = parse_family(family);
  if (!f) {
    throw UsageError("bench: expected a family (fwd, bwd, decode, mla or merge), got " +
                     quoted(family));
  }
  cmd.family = *f;
  while (!cur.done()) {
    const std::string_view arg = cur.take();
    if (arg == "-h" || arg == "--help") {
      cmd.kind = Command::Kind::kBenchHelp;
      return cmd;
    }
    parse_flag(arg, cur, cmd.flags, /*tour=*/false);
  }
  return cmd;
}

std::string main_help() {
  return R"(hopattn: attention kernels for NVIDIA Hopper (sm_90a), with a CPU reference.

Usage:
  hopattn [--csv] [--seed N] [--warm-l2]
                                tour: run every family (fwd, bwd, decode, mla, merge) on
                                default model shapes, check each result, print a table
  hopattn bench FAMILY [flags]  benchmark one family (see hopattn bench --help)
  hopattn --help                this text

The tour on a GPU runs each family's kernel on model shapes (Llama-3-8B: 32 q heads, 8 KV heads,
head dim 128; DeepSeek-V3 MLA: 128 heads, latent 512 + rope 64) and the naive fp32 GPU reference
for fwd and decode, and checks them against the CPU reference on a subset of rows and heads.
Without a GPU it runs the CPU reference on short sequences and checks each family against an
independent result (GQA == MHA with repeated KV, paged == contiguous, a merge of two halves ==
the whole).

Columns: time is the median over the timed iterations (GPU: CUDA events, L2 flushed before each
unless --warm-l2); rate is TFLOP/s for fwd, bwd and MLA prefill, TB/s of the minimum traffic
(inputs read once, outputs written once) for decode, MLA decode and merge; max err is the largest
absolute error of the output against the check. Exit code: 0 all rows passed (or have no GPU
kernel yet), 1 a check failed, 2 bad command line.

--warm-l2 skips the L2 flush before each timed GPU call (a diagnostic: the difference to a
flushed run is the cost of cold code and data).
)";
}

std::string bench_help() {
  return R"(Usage: hopattn bench FAMILY [flags]

FAMILY: fwd | bwd | decode | mla | merge

Shape (defaults: the tour's shapes; the model shape on a GPU, a short one on the CPU):
  --batch N           requests (merge: token rows are batch * q-len)
  --q-len N           query tokens per request (decode: 1..16)
  --kv-len N          keys per request (includes the q-len new tokens for decode)
  --heads HQ[:HKV]    query heads and KV heads (HKV omitted = HQ); mla and merge take HQ only
  --head-dim D        64, 128 or 256 (fwd, bwd, decode, merge); mla is fixed at 512 + 64
  --head-dim DQK:DV   fwd, bwd: q/k and v/out head dims apart; the GPU kernels take 192:128
                      (DeepSeek prefill), the CPU reference any pair
  --page-size N       paged KV cache, 1..256 (decode, mla: default 16 / 64; fwd: off)
  --dtype T           q/out dtype: bf16 | fp16
  --kv-dtype T        KV cache: decode bf16 | fp16 | fp8_e4m3 | fp8_e5m2 | int8; mla q's or fp8_e4m3
Mask and logits (fwd, bwd, decode; mla takes --causal/--no-causal only):
  --causal | --no-causal   bottom-right aligned causal mask (default: off for fwd/bwd, on for
                           decode and mla)
  --window L,R        sliding window, keys left/right of the diagonal (-1 = unbounded)
  --softcap C         s = C * tanh(s / C) on the scaled logits (0 = off)
  --splits N          decode, mla GPU kernels: key splits per problem (0 = the library's choice)
  --pack-gqa M        fwd GPU kernel: on | off | auto (default) whether the q heads of one KV
                      head share a tile (GQA packing; auto packs short q-len)
Launch variants of the GPU kernels (to time against the default; the library never picks them):
  --windowed-maps M   fwd: on (default) | off: off loads varlen tails through the plain tensor
                      maps and paged KV through the cp.async gather for every page size
  --bwd-order O       bwd: sections (default) | heads: heads launches the CTAs group after
                      group (KV head, request) everywhere instead of in L2-sized sections
Run:
  --impl I            auto | kernel | naive | cpu  (naive: fwd and decode only; bwd kernel:
                      a second row times deterministic mode)
  --iters N           timed iterations (default 20 for GPU kernels, 3 for the references);
                      the median is shown
  --warmup N          untimed iterations first (default 3 for GPU kernels, 1 for references)
  --seed N            seed of the random inputs (default: fixed)
  --no-check          skip the correctness check
  --warm-l2           no L2 flush before each timed GPU call (a diagnostic)
  --csv               print the table as CSV

Examples:
  hopattn bench fwd --batch 2 --q-len 4096 --kv-len 4096 --heads 32:8 --causal
  hopattn bench fwd --batch 8 --q-len 16 --kv-len 8192 --heads 32:8 --causal --pack-gqa off
  hopattn bench bwd --batch 2 --q-len 4096 --kv-len 4096 --heads 128 --head-dim 192:128 --causal
  hopattn bench decode --batch 64 --kv-len 8192 --heads 32:8 --kv-dtype fp8_e4m3 --page-size 16
)";
}

}  // namespace hopattn::cli
