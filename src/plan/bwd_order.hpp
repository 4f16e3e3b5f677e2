// Launch order of the bwd kernel's CTAs: how many (KV head, request) groups one section of the
// grid holds (kernels/bwd/workspace.hpp, CtaOrder, maps the grid onto blocks by it). Pure C++ (no
// CUDA), tested on the CPU.
#pragma once

#include <cstdint>

#include "hopattn/options.hpp"

namespace hopattn::plan {

enum class BwdOrder : uint8_t {
  // The default: sections of several groups where the mask or the mode makes that pay
  // (bwd_launch_section), else group after group.
  kSections,
  // Group after group everywhere (sections of one group): the order before sections, kept as a
  // launch variant to time against the default (hopattn bench bwd --bwd-order heads).
  kHeads,
};

// Groups per section: at most as many as keep their q-side data (`group_bytes`: Q and dO in 16
// bits, dq_accum in fp32, over the group's q heads) within 40 MB of the L2 (50 MB on H100 and
// H200), in sections of equal size (16 groups of which 5 fit: 4 x 4, not 5 + 5 + 5 + 1, whose last
// section of one group would run its long blocks alone at the end).
int bwd_section_groups(int64_t group_bytes, int groups);

// What the section choice reads of a bwd call.
struct BwdOrderShape {
  int q_heads = 0, kv_heads = 0, batch = 0;
  int max_seqlen_q = 0;
  int64_t head_dim_qk = 0, head_dim_v = 0;
};

// Groups per section of a bwd launch (CtaOrder::section, >= 1).
int bwd_launch_section(const BwdOrderShape& shape, const AttentionOptions& opts, BwdOrder order);

}  // namespace hopattn::plan
