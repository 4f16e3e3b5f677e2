// The bwd kernel's deterministic dQ order and launch order (src/kernels/bwd/workspace.hpp, plain
// C++; the section sizes come from src/plan/bwd_order.hpp, tested in plan_bwd_order_test.cpp): on
// many geometries (q and kv lengths, causal, sliding windows, both KV block sizes) and on
// simulated launches (varlen requests, GQA groups, sections, any number of resident CTAs), it
// checks that
//   - the semaphore targets (dq_turn) of the KV blocks meeting a q tile are 0..k-1, a permutation:
//     one fixed order per tile, independent of timing;
//   - with a bounded right window (causal), a higher block reaches each tile no later than a
//     lower one, so CTAs that start together never wait for each other;
//   - CtaOrder maps the grid one to one onto (KV block, group), blocks ascending or descending
//     within each group;
//   - a launch that starts CTAs in grid order, at most `slots` at a time, and runs each CTA's
//     dQ writer exactly as the kernel does (per q head, per tile, wait for the tile's turn) never
//     deadlocks, and every tile receives its blocks' sums in descending block order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/bwd/workspace.hpp"

namespace hopattn::kernels::bwd {
namespace {

struct Shape {
  int sq, sk, left, right;
  std::string describe(int block_n) const {
    return "sq " + std::to_string(sq) + " sk " + std::to_string(sk) + " window " +
           std::to_string(left) + "," + std::to_string(right) + " block_n " +
           std::to_string(block_n);
  }
};

std::vector<Shape> shapes() {
  const int lens[] = {0, 1, 5, 63, 64, 65, 127, 128, 129, 300, 517, 1031};
  const int windows[][2] = {{-1, -1},  {-1, 0}, {0, 0},   {10, 0},   {64, 16},
                            {100, -1}, {-1, 7}, {130, 0}, {100, 20}, {1000, 3}};
  std::vector<Shape> out;
  for (int sq : lens) {
    for (int sk : lens) {
      for (const auto& w : windows) out.push_back({sq, sk, w[0], w[1]});
    }
  }
  return out;
}

bool meets(const BlockGeometry& g, int m, int n) {
  const BlockGeometry::MRange r = g.m_range(n);
  return int64_t{n} * g.block_n < g.seqlen_k && m >= r.begin && m < r.end;
}

TEST(BwdOrder, TurnsOfATileArePermutations) {
  int tiles = 0;
  for (int block_n : {128, 64}) {
    for (const Shape& s : shapes()) {
      const BlockGeometry g{s.sq, s.sk, s.left, s.right, kBlockM, block_n};
      for (int m = 0; m < g.num_m_blocks(); ++m) {
        std::vector<int> turns;
        for (int n = 0; n < g.num_n_blocks(); ++n) {
          const bool in_span = n >= g.first_n_block(m) && n <= g.last_n_block(m);
          ASSERT_EQ(meets(g, m, n), in_span) << s.describe(block_n) << " m " << m << " n " << n;
          if (in_span) turns.push_back(g.dq_turn(m, n));
        }
        std::sort(turns.begin(), turns.end());
        for (int i = 0; i < static_cast<int>(turns.size()); ++i) {
          ASSERT_EQ(turns[i], i) << s.describe(block_n) << " m " << m;
        }
        ++tiles;
      }
    }
  }
  EXPECT_GT(tiles, 10000);
}

// The step at which block n's walk (first q head) reaches tile m.
int reach_step(const BlockGeometry& g, int m, int n) { return m - g.m_range(n).begin; }

TEST(BwdOrder, HigherBlocksReachATileFirst) {
  for (int block_n : {128, 64}) {
    for (const Shape& s : shapes()) {
      if (s.right < 0) continue;  // every block starts at tile 0: ties, and no wait either way
      const BlockGeometry g{s.sq, s.sk, s.left, s.right, kBlockM, block_n};
      for (int m = 0; m < g.num_m_blocks(); ++m) {
        for (int n = g.first_n_block(m); n < g.last_n_block(m); ++n) {
          ASSERT_GE(reach_step(g, m, n), reach_step(g, m, n + 1))
              << s.describe(block_n) << " m " << m << " n " << n;
        }
      }
    }
  }
}

TEST(BwdOrder, CtaOrderIsABijection) {
  for (int num_n : {1, 2, 7, 64}) {
    for (int groups : {1, 3, 16, 17}) {
      for (int section : {1, 2, 4, 5, 16, 40}) {
        for (bool descending : {false, true}) {
          const CtaOrder o{num_n, groups, std::min(section, groups), descending};
          std::vector<int> seen(num_n * groups, 0);
          std::vector<int> last(groups, -1);  // the group's previous block in grid order
          for (int i = 0; i < num_n * groups; ++i) {
            const CtaOrder::Coord c = o.at(i);
            ASSERT_TRUE(c.n_block >= 0 && c.n_block < num_n && c.group >= 0 && c.group < groups)
                << "linear " << i;
            ++seen[c.group * num_n + c.n_block];
            if (last[c.group] >= 0) {
              ASSERT_EQ(c.n_block, last[c.group] + (descending ? -1 : 1)) << "linear " << i;
            }
            last[c.group] = c.n_block;
          }
          EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int x) { return x == 1; }));
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------- simulated launch
struct Launch {
  std::vector<int> q_lens, kv_lens;  // per request (varlen; dense: all equal)
  int hkv = 1, group = 1, left = -1, right = -1, block_n = 128, section = 1;
};

struct Cta {
  int q_tile0 = 0;  // first semaphore of q head 0 (tile index of m = 0)
  int group = 1, tiles_per_head = 0;
  BlockGeometry geo{};
  int n = 0;
  BlockGeometry::MRange r{0, 0};
  int step = 0, steps = 0;  // next step of the writer; steps in all
};

// Runs the writers of every CTA of `l`, starting CTAs in grid order with at most `slots` running.
// Each round, every running writer adds to as many tiles in a row as its turns allow. Returns
// false on a deadlock (a round where nothing moved).
bool simulate(const Launch& l, int slots, std::string* why) {
  const int batch = static_cast<int>(l.q_lens.size());
  const int max_k = *std::max_element(l.kv_lens.begin(), l.kv_lens.end());
  const int max_q = *std::max_element(l.q_lens.begin(), l.q_lens.end());
  const int num_n = std::max(1, (max_k + l.block_n - 1) / l.block_n);
  const int tiles_per_head = batch * ((max_q + kBlockM - 1) / kBlockM);
  const int groups = l.hkv * batch;
  const CtaOrder order{num_n, groups, std::min(l.section, groups), true};
  const int hq = l.hkv * l.group;
  std::vector<int> sem(static_cast<size_t>(hq) * tiles_per_head, 0);
  std::vector<int> last_adder(sem.size(), INT32_MAX);  // descending: each add below the previous
  std::vector<Cta> pending;
  for (int i = 0; i < num_n * groups; ++i) {
    const CtaOrder::Coord c = order.at(i);
    const int kv_head = c.group % l.hkv, b = c.group / l.hkv;
    Cta cta;
    cta.geo = BlockGeometry{l.q_lens[b], l.kv_lens[b], l.left, l.right, kBlockM, l.block_n};
    cta.n = c.n_block;
    if (int64_t{cta.n} * l.block_n < l.kv_lens[b]) cta.r = cta.geo.m_range(cta.n);
    cta.group = l.group;
    cta.tiles_per_head = tiles_per_head;
    cta.q_tile0 = kv_head * l.group * tiles_per_head + b * ((max_q + kBlockM - 1) / kBlockM);
    cta.steps = std::max(0, cta.r.end - cta.r.begin) * l.group;
    pending.push_back(cta);
  }
  std::vector<Cta> running;
  size_t next = 0;
  while (next < pending.size() || !running.empty()) {
    bool moved = false;
    while (static_cast<int>(running.size()) < slots && next < pending.size()) {
      running.push_back(pending[next++]);
      moved = true;
    }
    for (Cta& c : running) {
      while (c.step < c.steps) {
        const int len = c.r.end - c.r.begin;
        const int head = c.step / len, m = c.r.begin + c.step % len;
        const size_t tile = c.q_tile0 + head * c.tiles_per_head + m;
        if (sem[tile] != c.geo.dq_turn(m, c.n)) break;
        if (c.n >= last_adder[tile]) {
          *why = "tile " + std::to_string(tile) + ": block " + std::to_string(c.n) +
                 " added after block " + std::to_string(last_adder[tile]);
          return false;
        }
        last_adder[tile] = c.n;
        ++sem[tile];
        ++c.step;
        moved = true;
      }
    }
    const size_t before = running.size();
    running.erase(std::remove_if(running.begin(), running.end(),
                                 [](const Cta& c) { return c.step == c.steps; }),
                  running.end());
    moved |= running.size() != before;
    if (!moved) {
      *why = "deadlock with " + std::to_string(running.size()) + " CTAs running, " +
             std::to_string(pending.size() - next) + " not started";
      return false;
    }
  }
  return true;
}

std::string describe(const Launch& l, int slots) {
  std::string s = "lens";
  for (size_t b = 0; b < l.q_lens.size(); ++b) {
    s += " " + std::to_string(l.q_lens[b]) + "x" + std::to_string(l.kv_lens[b]);
  }
  return s + " hkv " + std::to_string(l.hkv) + " group " + std::to_string(l.group) + " window " +
         std::to_string(l.left) + "," + std::to_string(l.right) + " block_n " +
         std::to_string(l.block_n) + " section " + std::to_string(l.section) + " slots " +
         std::to_string(slots);
}

TEST(BwdOrder, SimulatedLaunchesFinishInOrder) {
  std::mt19937_64 rng(0xb3d0);
  std::uniform_int_distribution<int> len(0, 1200), requests(1, 4), small(1, 3), pick(0, 5);
  const int windows[][2] = {{-1, -1}, {-1, 0}, {64, 16}, {100, -1}, {-1, 7}, {300, 0}};
  int runs = 0;
  for (int it = 0; it < 300; ++it) {
    Launch l;
    const int batch = requests(rng);
    for (int b = 0; b < batch; ++b) {
      l.q_lens.push_back(len(rng));
      l.kv_lens.push_back(it % 3 == 0 ? l.q_lens.back() : len(rng));
    }
    if (*std::max_element(l.kv_lens.begin(), l.kv_lens.end()) == 0) l.kv_lens[0] = 1;
    l.hkv = small(rng);
    l.group = small(rng);
    const auto& w = windows[pick(rng)];
    l.left = w[0];
    l.right = w[1];
    l.block_n = it % 2 == 0 ? 128 : 64;
    l.section = small(rng) * 2 - 1;
    for (int slots : {1, 2, 5, 1000}) {
      std::string why;
      ASSERT_TRUE(simulate(l, slots, &why)) << describe(l, slots) << ": " << why;
      ++runs;
    }
  }
  EXPECT_EQ(runs, 1200);
}

}  // namespace
}  // namespace hopattn::kernels::bwd
