// Random fuzz cases: generate(family, seed) draws every shape and option of the family from the
// seed alone, so case i of a run is the same case on every machine. legalize() makes a hand-edited
// or shrunk case one the API must accept (e.g. Hq a multiple of Hkv, decode kv_lens >= q_len).
#pragma once

#include <cstdint>

#include "case.hpp"

namespace hopattn::fuzz {

// What the implementations under test support. The CPU reference takes everything; a run
// against the CUDA kernels narrows this to what they are built for (head dims, 16-bit q, unit
// innermost strides, no paged backward) and draws from the same generator.
struct Space {
  bool fp32_io = true;       // q / out in fp32 (CPU only)
  bool any_head_dim = true;  // head dims off the kernels' list (1, 3, 40, ...)
  bool strided = true;       // views with innermost stride != 1
  bool paged_bwd = true;     // bwd over a paged KV cache
  double work_scale = 1.0;   // multiplies the per-case work bound (bigger cases when > 1)
  static Space cpu_reference() { return {}; }
};

Case generate(Family family, uint64_t seed, const Space& space = Space::cpu_reference());

// Multiply-adds of the case's attention (the unit of the work bounds): lengths x heads x dims.
double case_work(const Case& c);

// Brings every field into its valid range and the fields into agreement; a generated case is
// left unchanged.
void legalize(Case& c);

}  // namespace hopattn::fuzz
