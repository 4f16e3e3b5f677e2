// Replays the batch planner's plans for the mixed steps (a) and (b) with per-key rates
// measured on the device, and prints each step's modelled makespan and balance (the CPU replay in
// docs/perf/NOTES.md, "batch"). Build against a CPU build of the library:
//   g++ -std=c++17 -O1 -Iinclude -Isrc tools/batch_plan_replay.cpp build-cpu/libhopattn.a \
//       -lpthread -o /tmp/replay && /tmp/replay 28.4 25.5 1000
// Arguments: ns per prefill tile-key, ns per decode key, ns per work item.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "plan/batch_plan.hpp"

using namespace hopattn::plan;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s NS_PER_PREFILL_KEY NS_PER_DECODE_KEY NS_PER_ITEM\n", argv[0]);
    return 2;
  }
  const double pre_ns = std::atof(argv[1]), dec_ns = std::atof(argv[2]);
  const double item_ns = std::atof(argv[3]);
  for (int step = 0; step < 2; ++step) {
    std::vector<int> q, kv;
    if (step == 0) {  // (a): 4 chunks of 2048 over 0, 0, 4096, 8192 cached + 124 decodes at 4096
      for (int cached : {0, 0, 4096, 8192}) q.push_back(2048), kv.push_back(2048 + cached);
      for (int i = 0; i < 124; ++i) q.push_back(1), kv.push_back(4097);
    } else {  // (b): 1 chunk of 8192 + 255 decodes at 2k..16k cached
      q.push_back(8192), kv.push_back(8192);
      for (int i = 0; i < 255; ++i) q.push_back(1), kv.push_back(2048 + 14336 * i / 254 + 1);
    }
    const int B = static_cast<int>(q.size());
    std::vector<int> cu(B + 1, 0);
    for (int i = 0; i < B; ++i) cu[i + 1] = cu[i] + q[i];
    BatchPlanLimits l;
    l.max_batch = B;
    l.max_tokens = cu[B];
    l.num_qo_heads = 32;
    l.num_kv_heads = 8;
    l.head_dim = 128;
    l.page_size = 16;
    l.num_ctas = 132;
    BatchPlanner planner(l);
    std::vector<unsigned char> buf(BatchPlanner::workspace_bytes(l) + 16);
    planner.plan(cu.data(), kv.data(), B, buf.data(), buf.size());
    const auto* h = reinterpret_cast<const BatchPlanHeader*>(buf.data());
    const auto* off = reinterpret_cast<const int*>(buf.data() + h->cta_offsets_offset);
    const auto* items = reinterpret_cast<const BatchWorkItem*>(buf.data() + h->items_offset);
    double busiest = 0, total = 0;
    for (int c = 0; c < h->num_ctas; ++c) {
      double t = 0;
      for (int i = off[c]; i < off[c + 1]; ++i) {
        const double keys = items[i].kv_end - items[i].kv_begin;
        t += keys * (items[i].kind == 0 ? pre_ns : dec_ns) + item_ns;
      }
      busiest = std::max(busiest, t);
      total += t;
    }
    const double mean = total / h->num_ctas;
    std::printf("step %c: %d items, %d merges; busiest CTA %.0f us, mean %.0f us (%.2fx)\n",
                'a' + step, h->num_items, h->num_merges, busiest / 1e3, mean / 1e3, busiest / mean);
  }
  return 0;
}
