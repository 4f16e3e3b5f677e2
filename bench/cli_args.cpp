#include "cli_args.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "step.hpp"

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

// The value of a flag that names one of `choices` (by the first of each pair); any other text is a
// UsageError that lists them: "--flag: expected a | b, got 'x'".
template <class T>
T parse_choice(std::string_view flag, std::string_view text,
               std::initializer_list<std::pair<std::string_view, T>> choices) {
  std::string names;
  for (const auto& [name, value] : choices) {
    if (text == name) return value;
    names += (names.empty() ? "" : " | ") + std::string(name);
  }
  throw UsageError(std::string(flag) + ": expected " + names + ", got " + quoted(text));
}

// "on" | "off" (--paged-tma, --batch-sections).
bool parse_on_off(std::string_view flag, std::string_view text) {
  return parse_choice<bool>(flag, text, {{"on", true}, {"off", false}});
}

// A batch planner switch (plan::BatchOverlap): "auto", or the words for off and on.
plan::BatchOverlap parse_overlap(std::string_view flag, std::string_view text, std::string_view off,
                                 std::string_view on) {
  return parse_choice<plan::BatchOverlap>(flag, text,
                                          {{"auto", plan::BatchOverlap::kAuto},
                                           {off, plan::BatchOverlap::kOff},
                                           {on, plan::BatchOverlap::kOn}});
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

// A batch planner rate (lo..64; lo 1 unless given) in thousandths, as plan::BatchPlanLimits
// holds it.
int parse_rate_milli(std::string_view flag, std::string_view text, float lo = 1.f) {
  const float r = parse_float(flag, text, lo);
  if (r > 64.f) {
    throw UsageError(std::string(flag) + ": expected at most 64, got " + std::to_string(r));
  }
  return static_cast<int>(r * 1000.f + 0.5f);
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

// "A,B,..." (--free-sms, --decode-sm-order): each an integer in lo..hi.
std::vector<int> parse_int_list(std::string_view flag, std::string_view text, int lo, int hi) {
  std::vector<int> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const size_t end = comma == std::string_view::npos ? text.size() : comma;
    out.push_back(static_cast<int>(parse_integer(flag, text.substr(start, end - start), lo, hi)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
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

// --batch-impl: "all" or a comma-separated list of batch | separate | varlen.
std::vector<BatchImpl> parse_batch_impls(std::string_view text) {
  std::vector<BatchImpl> out;
  if (text == "all") return {std::begin(kAllBatchImpls), std::end(kAllBatchImpls)};
  size_t begin = 0;
  while (true) {
    const size_t end = text.find(',', begin);
    const std::string_view item =
        text.substr(begin, end == std::string_view::npos ? end : end - begin);
    bool found = false;
    for (BatchImpl i : kAllBatchImpls) {
      if (item == batch_impl_name(i)) {
        if (std::find(out.begin(), out.end(), i) == out.end()) out.push_back(i);
        found = true;
      }
    }
    if (!found) {
      throw UsageError("--batch-impl: expected all or a list of batch, separate, varlen, got " +
                       quoted(text));
    }
    if (end == std::string_view::npos) return out;
    begin = end + 1;
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
    f.l2_flush = L2Flush::kNone;
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
  if (name == "--l2-flush") {
    f.l2_flush = parse_choice<L2Flush>(
        name, cur.value(name, inline_value),
        {{"write", L2Flush::kWrite}, {"read", L2Flush::kRead}, {"none", L2Flush::kNone}});
    return;
  }
  if (name == "--chain") {
    f.chain = int_value(1, 1000);
    return;
  }
  if (name == "--hold-sms" || name == "--free-sms") {
    if (name == "--hold-sms") {
      f.hold.sms = int_value(0, 1024);
    } else {
      f.hold.free = parse_int_list(name, cur.value(name, inline_value), 0, 1023);
    }
    if (f.hold.sms != 0 && !f.hold.free.empty()) {
      throw UsageError("--hold-sms and --free-sms: one or the other");
    }
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
    f.pack_gqa = parse_choice<std::optional<bool>>(
        name, cur.value(name, inline_value),
        {{"on", std::optional<bool>(true)}, {"off", std::optional<bool>(false)}, {"auto", {}}});
    return;
  }
  if (name == "--mla-schedule") {
    f.mla_schedule = parse_choice<MlaSchedule>(name, cur.value(name, inline_value),
                                               {{"auto", MlaSchedule::kAuto},
                                                {"seesaw", MlaSchedule::kSeesaw},
                                                {"one-consumer", MlaSchedule::kOneConsumer},
                                                {"narrow", MlaSchedule::kNarrow}});
    return;
  }
  if (name == "--kv-layout") {
    f.kv_layout = parse_choice<KVLayout>(name, cur.value(name, inline_value),
                                         {{"nhd", KVLayout::kNHD}, {"hnd", KVLayout::kHND}});
    return;
  }
  if (name == "--page-order") {
    f.pages_in_order = parse_choice<bool>(name, cur.value(name, inline_value),
                                          {{"shuffled", false}, {"in-order", true}});
    return;
  }
  if (name == "--decode-kernel") {
    f.decode_kernel = parse_choice<DecodeKernel>(name, cur.value(name, inline_value),
                                                 {{"auto", DecodeKernel::kAuto},
                                                  {"tiles", DecodeKernel::kTiles},
                                                  {"small", DecodeKernel::kSmall},
                                                  {"narrow", DecodeKernel::kNarrow}});
    return;
  }
  if (name == "--splits") {
    f.splits = static_cast<int>(parse_integer(name, cur.value(name, inline_value), 0, 256));
    return;
  }
  if (name == "--paged-tma") {
    f.paged_tma = parse_on_off(name, cur.value(name, inline_value));
    return;
  }
  if (name == "--kv-tiles") {
    using T = kernels::fwd::LaunchOptions::KVTiles;
    f.kv_tiles = parse_choice<T>(name, cur.value(name, inline_value),
                                 {{"auto", T::kAuto}, {"base", T::kBase}, {"wide", T::kWide}});
    return;
  }
  if (name == "--fwd-walk") {
    using W = kernels::fwd::LaunchOptions::Walk;
    f.walk = parse_choice<W>(name, cur.value(name, inline_value),
                             {{"auto", W::kAuto}, {"plain", W::kPlain}, {"paired", W::kPaired}});
    return;
  }
  if (name == "--l2-section-kb") {
    f.l2_section_kb =
        static_cast<int>(parse_integer(name, cur.value(name, inline_value), 1, 1 << 20));
    return;
  }
  if (name == "--bwd-order") {
    f.bwd_order = parse_choice<plan::BwdOrder>(
        name, cur.value(name, inline_value),
        {{"sections", plan::BwdOrder::kSections}, {"heads", plan::BwdOrder::kHeads}});
    return;
  }
  if (name == "--step") {
    const std::string_view v = cur.value(name, inline_value);
    parse_step(v);  // a bad composition fails here, naming the term
    f.step = std::string(v);
    return;
  }
  if (name == "--batch-order") {
    const std::string_view v = cur.value(name, inline_value);
    // auto leaves both orders to the planner; an order named turns the other off.
    if (v == "partition") {
      f.batch_partition = plan::BatchOverlap::kOn;
      f.batch_spread = plan::BatchOverlap::kOff;
    } else {
      f.batch_spread = parse_overlap(name, v, "lpt", "spread");
      f.batch_partition = *f.batch_spread == plan::BatchOverlap::kAuto ? plan::BatchOverlap::kAuto
                                                                       : plan::BatchOverlap::kOff;
    }
    return;
  }
  if (name == "--batch-decode-rate") {
    f.batch_decode_rate_milli = parse_rate_milli(name, cur.value(name, inline_value));
    return;
  }
  if (name == "--batch-partition-ctas") {
    f.batch_partition_ctas =
        static_cast<int>(parse_integer(name, cur.value(name, inline_value), 1, 1 << 16));
    return;
  }
  if (name == "--batch-concurrent") {
    f.batch_concurrent = parse_overlap(name, cur.value(name, inline_value), "off", "on");
    return;
  }
  if (name == "--batch-concurrent-rate") {
    f.batch_concurrent_rate_milli = parse_rate_milli(name, cur.value(name, inline_value));
    return;
  }
  if (name == "--batch-concurrent-tail") {
    // Below 1: the decodes' CTAs take prefill work from before the modelled decode end.
    f.batch_concurrent_tail_milli = parse_rate_milli(name, cur.value(name, inline_value), 0.1f);
    return;
  }
  if (name == "--decode-sm-order") {
    const std::string_view value = cur.value(name, inline_value);
    f.decode_sm_gpc = value == "gpc";
    f.decode_sm_order.clear();
    if (!f.decode_sm_gpc) f.decode_sm_order = parse_int_list(name, value, 0, 1023);
    return;
  }
  if (name == "--batch-concurrent-ctas") {
    f.batch_concurrent_ctas =
        static_cast<int>(parse_integer(name, cur.value(name, inline_value), 1, 1 << 16));
    return;
  }
  if (name == "--batch-side") {
    f.batch_side = parse_overlap(name, cur.value(name, inline_value), "off", "on");
    return;
  }
  if (name == "--batch-sections") {
    f.batch_sections = parse_on_off(name, cur.value(name, inline_value));
    return;
  }
  if (name == "--batch-side-cost") {
    f.batch_side_cost = parse_integer(name, cur.value(name, inline_value), 1, 1024);
    return;
  }
  if (name == "--batch-ctas") {
    f.batch_ctas = static_cast<int>(parse_integer(name, cur.value(name, inline_value), 1, 1 << 16));
    return;
  }
  if (name == "--batch-impl") {
    f.batch_impls = parse_batch_impls(cur.value(name, inline_value));
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
    case Family::kBatch:
      return "batch";
  }
  return "?";
}

const char* batch_impl_name(BatchImpl i) {
  switch (i) {
    case BatchImpl::kBatch:
      return "batch";
    case BatchImpl::kSeparate:
      return "separate";
    case BatchImpl::kVarlen:
      return "varlen";
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
  if (first == "script") {
    cur.take();
    if (cur.done()) throw UsageError("script: expected a file of bench lines (or - for stdin)");
    cmd.kind = Command::Kind::kScript;
    cmd.script = std::string(cur.take());
    if (!cur.done()) throw UsageError("script: takes one file, got " + quoted(cur.take()) + " too");
    return cmd;
  }
  if (first != "bench") {
    if (first.substr(0, 2) != "--") {
      throw UsageError("unknown command " + quoted(first) +
                       " (expected none, 'bench' or 'script')");
    }
    while (!cur.done()) parse_flag(cur.take(), cur, cmd.flags, /*tour=*/true);
    return cmd;
  }
  cur.take();
  cmd.kind = Command::Kind::kBench;
  if (cur.done()) {
    throw UsageError("bench: expected a family: fwd, bwd, decode, mla, merge or batch");
  }
  const std::string_view family = cur.take();
  if (family == "-h" || family == "--help") {
    cmd.kind = Command::Kind::kBenchHelp;
    return cmd;
  }
  const std::optional<Family> f = parse_family(family);
  if (!f) {
    throw UsageError("bench: expected a family (fwd, bwd, decode, mla, merge or batch), got " +
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

}  // namespace hopattn::cli
