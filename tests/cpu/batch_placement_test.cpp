// The concurrent form's placement by SM, the host-and-device parts the kernels run:
// - the claims of a placed launch (kernels/batch/placement_claims.hpp) over host atomics: every
//   prefill list runs exactly once and every CTA past them exits, for any landing of the CTAs on
//   SMs: one CTA an SM in random order, SMs met twice (a decode SM's CTA exits and a later one
//   lands there), SMs the order lacks, and every CTA on one SM; sequentially in random orders
//   and from threads at once;
// - the GPC probe's order (kernels/batch/gpc_order.hpp) on made-up GPC layouts: a permutation of
//   the SMs whose first N are spread over the GPCs as evenly as their sizes allow.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/batch/gpc_order.hpp"
#include "kernels/batch/placement_claims.hpp"

namespace hopattn::kernels::batch {
namespace {

struct HostWords {
  explicit HostWords(int sms) : words(static_cast<size_t>(1 + (sms + 31) / 32)) {}
  uint32_t fetch_add(int i, uint32_t v) { return words[static_cast<size_t>(i)].fetch_add(v); }
  uint32_t fetch_or(int i, uint32_t v) { return words[static_cast<size_t>(i)].fetch_or(v); }
  uint32_t load(int i) { return words[static_cast<size_t>(i)].load(); }
  std::vector<std::atomic<uint32_t>> words;
};

PlacedGrid grid(int sms, int groups, int lists) {
  PlacedGrid g;
  g.sms = sms;
  g.group_ctas = sms / groups;
  g.lists = lists;
  g.decode_sms = sms - groups * lists;
  return g;
}

// What the CTAs claimed: each prefill list (g * group_ctas + l, l < lists) exactly once, nothing
// else, and a CTA for each of the others' -1.
void expect_each_list_once(const PlacedGrid& g, const std::vector<int>& claimed,
                           const std::string& what) {
  std::vector<int> runs(static_cast<size_t>(g.sms), 0);
  int exits = 0;
  for (int list : claimed) {
    if (list < 0) {
      ++exits;
      continue;
    }
    ASSERT_LT(list, g.sms) << what;
    ASSERT_LT(list % g.group_ctas, g.lists) << what << ": list " << list << " holds no prefill";
    ++runs[static_cast<size_t>(list)];
  }
  for (int c = 0; c < g.sms; ++c) {
    const int expected = c % g.group_ctas < g.lists ? 1 : 0;
    EXPECT_EQ(runs[static_cast<size_t>(c)], expected) << what << ": list " << c;
  }
  EXPECT_EQ(exits, g.decode_sms) << what;
}

// The SM each CTA lands on, by the kind of landing.
std::vector<int> landing(int kind, int sms, std::mt19937_64& rng) {
  std::vector<int> sm(static_cast<size_t>(sms));
  std::iota(sm.begin(), sm.end(), 0);
  std::shuffle(sm.begin(), sm.end(), rng);
  std::uniform_int_distribution<int> any(0, sms - 1);
  if (kind == 1) {  // a few SMs met twice, others never
    for (int i = 0; i < sms / 8; ++i) sm[static_cast<size_t>(any(rng))] = sm[0];
  } else if (kind == 2) {  // SMs the order lacks (rank -1)
    for (int i = 0; i < sms / 8; ++i) sm[static_cast<size_t>(any(rng))] = -1;
  } else if (kind == 3) {  // every CTA on one SM, in turn
    std::fill(sm.begin(), sm.end(), any(rng));
  }
  return sm;
}

TEST(BatchPlacementClaims, EachListOnceWhereverTheCtasLand) {
  std::mt19937_64 rng(11);
  for (int sms : {132, 114, 8}) {
    for (int groups : {1, 2, 3, 4}) {
      if (sms % groups != 0) continue;  // the grid is whole groups (batch_plan_layout.hpp)
      for (int lists = 1; lists < sms / groups; lists += std::max(1, sms / groups / 7)) {
        const PlacedGrid g = grid(sms, groups, lists);
        // Ranks: a random order of the SMs (rank of SM s at s).
        std::vector<int> rank(static_cast<size_t>(sms));
        std::iota(rank.begin(), rank.end(), 0);
        std::shuffle(rank.begin(), rank.end(), rng);
        for (int kind = 0; kind < 4; ++kind) {
          const std::vector<int> sm = landing(kind, sms, rng);
          HostWords words(sms);
          std::vector<int> claimed;
          for (int s : sm) {
            claimed.push_back(claim_list(s < 0 ? -1 : rank[static_cast<size_t>(s)], g, words));
          }
          expect_each_list_once(g, claimed,
                                "sms " + std::to_string(sms) + " groups " + std::to_string(groups) +
                                    " lists " + std::to_string(lists) + " landing " +
                                    std::to_string(kind));
        }
      }
    }
  }
}

// All CTAs claim at once (one thread each), every landing kind, many rounds.
TEST(BatchPlacementClaims, EachListOnceFromThreadsAtOnce) {
  std::mt19937_64 rng(12);
  const int sms = 132;
  for (int round = 0; round < 24; ++round) {
    const PlacedGrid g = grid(sms, 4, 20 + round % 12);
    std::vector<int> rank(static_cast<size_t>(sms));
    std::iota(rank.begin(), rank.end(), 0);
    std::shuffle(rank.begin(), rank.end(), rng);
    const std::vector<int> sm = landing(round % 4, sms, rng);
    HostWords words(sms);
    std::vector<int> claimed(static_cast<size_t>(sms), -2);
    std::atomic<bool> go{false};
    std::vector<std::thread> ctas;
    for (int c = 0; c < sms; ++c) {
      ctas.emplace_back([&, c] {
        while (!go.load()) std::this_thread::yield();
        const int s = sm[static_cast<size_t>(c)];
        claimed[static_cast<size_t>(c)] =
            claim_list(s < 0 ? -1 : rank[static_cast<size_t>(s)], g, words);
      });
    }
    go.store(true);
    for (std::thread& t : ctas) t.join();
    expect_each_list_once(g, claimed, "round " + std::to_string(round));
  }
}

// The CTA on the SM of rank decode_sms + k takes slot k: list (k / P) * group_ctas + k % P.
TEST(BatchPlacementClaims, OwnSlotFirst) {
  const PlacedGrid g = grid(132, 4, 26);  // 28 decode SMs, 104 slots
  HostWords words(132);
  EXPECT_EQ(claim_list(28 + 0, g, words), 0);
  EXPECT_EQ(claim_list(28 + 27, g, words), 33 + 1);
  EXPECT_EQ(claim_list(28 + 103, g, words), 3 * 33 + 25);
  EXPECT_EQ(claim_list(28 + 0, g, words), 1);  // its slot taken: the lowest free one
  EXPECT_EQ(claim_list(5, g, words), -1);      // a decode SM: exits
}

// A made-up card: SM s in TPC s / 2, TPC t in GPC t % gpcs (the GPCs' SM ids interleave) or in
// contiguous runs of TPCs (`contiguous`: SM order alone would pack the first SMs into few), and
// the probe's records: clusters of 16, 8, 4 and 2 SMs of one GPC each (random members; the pairs
// chain through every SM of a GPC, so the records join each GPC whole), unless `reach_all` is
// false (then no pairs: SMs the larger clusters leave out stand alone).
struct MadeUpCard {
  std::vector<int> gpc_of;  // by SM
  ProbeLaunches launches{};
  std::vector<uint32_t> records;
};

MadeUpCard made_up_card(int sms, int gpcs, bool reach_all, bool contiguous, std::mt19937_64& rng) {
  MadeUpCard card;
  std::vector<std::vector<int>> members(static_cast<size_t>(gpcs));
  const int tpcs = sms / 2;
  for (int s = 0; s < sms; ++s) {
    const int gpc = contiguous ? s / 2 * gpcs / tpcs : s / 2 % gpcs;
    card.gpc_of.push_back(gpc);
    members[static_cast<size_t>(gpc)].push_back(s);
  }
  const int* const sizes = kGpcProbeClusters;
  for (int k = 0; k < kGpcProbes; ++k) {
    if (!reach_all && sizes[k] == 2) continue;
    card.launches.cluster[k] = sizes[k];
    card.launches.offset[k] = static_cast<int>(card.records.size());
    for (std::vector<int> m : members) {
      std::shuffle(m.begin(), m.end(), rng);
      if (sizes[k] != 2) {  // one cluster of the larger sizes a GPC, where it fits
        for (int j = 0; j < sizes[k] && m.size() >= static_cast<size_t>(sizes[k]); ++j) {
          card.records.push_back(static_cast<uint32_t>(m[static_cast<size_t>(j)]));
        }
        continue;
      }
      // Pairs (0, 1), (2, 3), ... and (1, 2), (3, 4), ...: a chain through the whole GPC.
      for (size_t c = 0; c + 1 < m.size(); ++c) {
        card.records.push_back(static_cast<uint32_t>(m[c]));
        card.records.push_back(static_cast<uint32_t>(m[c + 1]));
      }
    }
    card.launches.ctas[k] = static_cast<int>(card.records.size()) - card.launches.offset[k];
  }
  return card;
}

TEST(BatchPlacementGpcOrder, SpreadsTheFirstSmsOverTheGpcsAndTpcs) {
  std::mt19937_64 rng(13);
  for (int sms : {132, 114}) {
    for (int layout = 0; layout < 4; ++layout) {
      const int gpcs = layout % 2 == 0 ? 8 : 7;
      const MadeUpCard card = made_up_card(sms, gpcs, true, layout >= 2, rng);
      GpcOrderScratch scratch;
      std::vector<int16_t> ranks(static_cast<size_t>(sms), -1);
      gpc_order_ranks(card.launches, card.records.data(), sms, scratch, ranks.data());
      std::vector<int> sm_of_rank(static_cast<size_t>(sms), -1);
      for (int s = 0; s < sms; ++s) {
        const int r = ranks[static_cast<size_t>(s)];
        ASSERT_TRUE(r >= 0 && r < sms) << "SM " << s << " rank " << r;
        ASSERT_EQ(sm_of_rank[static_cast<size_t>(r)], -1) << "rank " << r << " twice";
        sm_of_rank[static_cast<size_t>(r)] = s;
      }
      // The first n SMs: each GPC holds floor or ceil of n / gpcs while n fits the smallest GPC
      // times the GPCs.
      for (int n : {8, 20, 28, 56}) {
        std::vector<int> per_gpc(static_cast<size_t>(gpcs), 0);
        for (int r = 0; r < n; ++r) {
          ++per_gpc[static_cast<size_t>(card.gpc_of[static_cast<size_t>(sm_of_rank[r])])];
        }
        const auto [lo, hi] = std::minmax_element(per_gpc.begin(), per_gpc.end());
        EXPECT_LE(*hi - *lo, 1) << sms << " SMs, layout " << layout << ", first " << n;
        // And one SM a TPC: each GPC here has at least 8 TPCs, so the first 8 x gpcs take no
        // TPC twice.
        std::vector<int> per_tpc(static_cast<size_t>(sms / 2), 0);
        for (int r = 0; r < n; ++r) {
          EXPECT_EQ(++per_tpc[static_cast<size_t>(sm_of_rank[r] / 2)], 1)
              << sms << " SMs, layout " << layout << ", first " << n << ": SM " << sm_of_rank[r];
        }
      }
      // Every GPC's SMs in id order within their TPC halves: the first SMs of its TPCs, then
      // the second ones.
      for (int g = 0; g < gpcs; ++g) {
        std::vector<int> in_order;
        for (int r = 0; r < sms; ++r) {
          if (card.gpc_of[static_cast<size_t>(sm_of_rank[r])] == g)
            in_order.push_back(sm_of_rank[r]);
        }
        std::vector<int> expected;
        for (int half = 0; half < 2; ++half) {
          for (int s = half; s < sms; s += 2) {
            if (card.gpc_of[static_cast<size_t>(s)] == g) expected.push_back(s);
          }
        }
        EXPECT_EQ(in_order, expected) << sms << " SMs, layout " << layout << ", GPC " << g;
      }
    }
  }
}

// SMs no cluster reached stand alone, each a GPC of one: still every SM once.
TEST(BatchPlacementGpcOrder, SmsNoClusterReachedStillRanked) {
  std::mt19937_64 rng(14);
  const MadeUpCard card = made_up_card(132, 8, false, true, rng);
  GpcOrderScratch scratch;
  std::vector<int16_t> ranks(132, -1);
  gpc_order_ranks(card.launches, card.records.data(), 132, scratch, ranks.data());
  std::vector<int16_t> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  for (int r = 0; r < 132; ++r) EXPECT_EQ(sorted[static_cast<size_t>(r)], r);
}

}  // namespace
}  // namespace hopattn::kernels::batch
