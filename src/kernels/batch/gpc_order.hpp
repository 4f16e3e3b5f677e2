// The SM order of the GPC probe (SmPlacement's probe: sm_placement.hpp), as host-and-device code
// so that the CPU tests run it on made-up GPC layouts (tests/cpu/batch_placement_test.cpp).
// The probe's cluster launches (gpc_probe.cuh) record the %smid of every CTA; the CTAs of one
// cluster share a GPC. Joined (union-find), those records give the GPCs (an SM no cluster reached
// stands alone); the GPCs are ordered by size, largest first (a stable sort: equal sizes by their
// roots' ids), and the ranks dealt round-robin over them: each GPC's first SM, then each one's
// second, and so on, so that the order's first N SMs are spread over the GPCs. Within a GPC the
// SMs go in id order, except that the second SM of a TPC (%smid 2k + 1 where 2k shares its GPC;
// the hardware numbers a TPC's two SMs so, as far as is known) waits until every first one has
// come: the order's first N SMs then take one SM a TPC while they can, so that each decode SM
// shares its TPC (and whatever path to the L2 the two SMs share) with a prefill SM, not another
// decode SM (docs/perf/NOTES.md, "Next device runs": the TPC suspect). Where no
// cluster larger than two reaches some SMs of a GPC (its last TPC, say, where larger clusters
// always take the same SMs), those SMs count as a GPC of their own and come early in the order; it
// is a permutation of the SMs whatever the records.
#pragma once

#include <cstdint>

#include "kernels/batch/sm_placement.hpp"
#include "kernels/common/host_device.hpp"

namespace hopattn::kernels::batch {

// The cluster sizes the probe launches (gpc_probe.cuh), largest first.
inline constexpr int kGpcProbes = 4;
inline constexpr int kGpcProbeClusters[kGpcProbes] = {16, 8, 4, 2};

struct ProbeLaunches {
  int cluster[kGpcProbes];  // CTAs a cluster; 0: not launched
  int ctas[kGpcProbes];     // CTAs of the launch (whole clusters)
  int offset[kGpcProbes];   // of its records
};

struct GpcOrderScratch {
  int16_t parent[kMaxPlacedSms], size[kMaxPlacedSms], depth[kMaxPlacedSms];
  int16_t root[kMaxPlacedSms], roots[kMaxPlacedSms];
};

HOPATTN_HOST_DEVICE int gpc_root(int16_t* parent, int i) {
  while (parent[i] != i) i = parent[i] = parent[parent[i]];
  return i;
}

// ranks[i]: SM i's place in the order, for SMs 0 .. sms - 1 (sms <= kMaxPlacedSms).
HOPATTN_HOST_DEVICE void gpc_order_ranks(const ProbeLaunches& l, const uint32_t* records, int sms,
                                         GpcOrderScratch& s, int16_t* ranks) {
  for (int i = 0; i < sms; ++i) s.parent[i] = static_cast<int16_t>(i), s.size[i] = 0;
  for (int k = 0; k < kGpcProbes; ++k) {
    for (int c = 0; l.cluster[k] > 0 && c + l.cluster[k] <= l.ctas[k]; c += l.cluster[k]) {
      const uint32_t a = records[l.offset[k] + c];
      for (int j = 1; j < l.cluster[k]; ++j) {
        const uint32_t b = records[l.offset[k] + c + j];
        if (a < static_cast<uint32_t>(sms) && b < static_cast<uint32_t>(sms)) {
          s.parent[gpc_root(s.parent, static_cast<int>(a))] =
              static_cast<int16_t>(gpc_root(s.parent, static_cast<int>(b)));
        }
      }
    }
  }
  int groups = 0;
  for (int i = 0; i < sms; ++i) s.root[i] = static_cast<int16_t>(gpc_root(s.parent, i));
  // The SM's place in its GPC: the first SMs of its TPCs in id order, then the second ones.
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < sms; ++i) {
      const bool second = (i & 1) != 0 && s.root[i - 1] == s.root[i];
      if (second == (pass == 1)) s.depth[i] = s.size[s.root[i]]++;
    }
  }
  for (int i = 0; i < sms; ++i) {
    if (s.root[i] == i) s.roots[groups++] = static_cast<int16_t>(i);
  }
  for (int a = 1; a < groups; ++a) {  // insertion sort, largest first, stable
    const int16_t v = s.roots[a];
    int b = a;
    while (b > 0 && s.size[s.roots[b - 1]] < s.size[v]) s.roots[b] = s.roots[b - 1], --b;
    s.roots[b] = v;
  }
  int16_t next = 0;
  for (int d = 0; next < sms; ++d) {
    for (int g = 0; g < groups; ++g) {
      if (s.size[s.roots[g]] <= d) continue;
      for (int i = 0; i < sms; ++i) {
        if (s.depth[i] == d && s.root[i] == s.roots[g]) ranks[i] = next++;
      }
    }
  }
}

}  // namespace hopattn::kernels::batch
