// A fuzz case: a family, a seed and a small struct of shapes and options. The seed fixes the
// random data (drawn when the case's tensors are built), the struct everything else, so that the
// one-line text form (describe / parse) replays a case exactly, and a shrunk case (a smaller
// struct, the same seed) is just another line.
//
// Text form: "<family> seed=<n> key=value ... [corrupt=<rule>]", e.g.
//   decode seed=7 batch=2 q_len=3 kv_heads=1 group=5 head_dim=32 kv_lens=40,0 kv_dtype=int8
// Keys left out keep their defaults (the struct's initializers), so a hand-written short line is
// a valid case too; an unknown key or a malformed value is an error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cpu/batch_case.hpp"
#include "cpu/decode_case.hpp"
#include "cpu/fwd_bwd_problem.hpp"
#include "cpu/mla_case.hpp"
#include "hopattn/options.hpp"

namespace hopattn::fuzz {

enum class Family { kFwd, kBwd, kDecode, kMla, kMerge, kBatch };
inline constexpr Family kFamilies[] = {Family::kFwd, Family::kBwd,   Family::kDecode,
                                       Family::kMla, Family::kMerge, Family::kBatch};
const char* family_name(Family f);

// fwd and bwd: the test-side problem description of fwd_bwd_problem.hpp plus the call's options.
struct AttnCase {
  testing::fwd_bwd::Spec spec;
  testing::fwd_bwd::BuildOptions build;
  AttentionOptions opts;
  bool no_sink_head0 = false;  // with sinks: head 0's sink is -inf (that head has none)
};

struct DecodeFuzzCase {
  testing::decode_case::DecodeCase c;
  int num_splits = 0;  // no effect on the CPU reference; the GPU kernels split by it
  bool no_sink_head0 = false;
};

struct MlaFuzzCase {
  testing::mla_case::MlaCase c;
  int num_splits = 0;  // as for decode
};

// merge_states (n == 2 and !n_way) or merge_states_n: T tokens x H heads of n states of D
// features. Each state is empty (lse = -inf, o = 0) with probability empty_percent / 100; the
// others have lse spread `lse_spread` around `lse_center` (large centers stress the shift that
// keeps e^lse from overflowing).
struct MergeCase {
  int n = 2;
  bool n_way = false;
  int tokens = 3, heads = 2, dim = 8;
  DType dtype = DType::kFP32;      // o of the states
  DType out_dtype = DType::kFP32;  // out
  int empty_percent = 10;
  double lse_center = 0.0, lse_spread = 4.0;
  int pad = 0;  // extra elements after every row of every tensor (strided views)
};

// BatchAttention: one serving step (batch_case.hpp's description: heads, head dims, pages,
// dtypes, mask and logit options, the grid the plan is cut for, the limits, the step's q and kv
// lengths).
struct BatchFuzzCase {
  testing::batch_case::BatchCase c;
};

struct Case {
  Family family = Family::kFwd;
  uint64_t seed = 0;
  // Empty for a valid case; else the rule broken after building it (invalid.hpp), and the case
  // passes when the API rejects it and writes nothing.
  std::string corrupt;
  AttnCase attn;  // kFwd, kBwd
  DecodeFuzzCase decode;
  MlaFuzzCase mla;
  MergeCase merge;
  BatchFuzzCase batch;
};

// The one-line text form; parse(describe(c)) == c field by field.
std::string describe(const Case& c);
// Throws std::invalid_argument naming the bad token.
Case parse(const std::string& line);

}  // namespace hopattn::fuzz
