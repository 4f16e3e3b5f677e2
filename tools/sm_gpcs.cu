// Which SMs share a GPC, as the batch family's GPC probe finds them (src/kernels/batch/
// gpc_probe.cuh: cluster launches, whose CTAs the hardware keeps in one GPC; gpc_order.hpp joins
// their %smid records): prints one line a group, "K SMs: a b c ...", then the order the library
// takes for the concurrent form's decodes (hopattn bench batch --decode-sm-order gpc), "order
// a,b,...". For docs/perf/NOTES.md, "Next device runs": a GPC's own port to the L2 would cap SMs
// that share few GPCs.
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc -Iinclude \
//     --expt-relaxed-constexpr tools/sm_gpcs.cu -o sm_gpcs
#include <cuda_runtime.h>

#include <cstdio>
#include <exception>
#include <map>
#include <vector>

#include "kernels/batch/gpc_order.hpp"
#include "kernels/batch/gpc_probe.cuh"

using namespace hopattn::kernels;
using namespace hopattn::kernels::batch;

int main() {
  try {
    constexpr const char* kWhere = "sm_gpcs";
    const int sms = sm_count(0, kWhere);
    if (sms > kMaxPlacedSms) {
      std::fprintf(stderr, "sm_gpcs: %d SMs, more than the probe's %d\n", sms, kMaxPlacedSms);
      return 1;
    }
    std::vector<uint32_t> records(static_cast<size_t>(kGpcProbes * sms), ~0u);
    uint32_t* d = nullptr;
    throw_if_cuda_error(cudaMalloc(&d, sizeof(uint32_t) * records.size()), kWhere, "cudaMalloc");
    const ProbeLaunches l = launch_gpc_probe(0, sms, d, nullptr, kWhere);
    throw_if_cuda_error(
        cudaMemcpy(records.data(), d, sizeof(uint32_t) * records.size(), cudaMemcpyDeviceToHost),
        kWhere, "cudaMemcpy");
    for (int k = 0; k < kGpcProbes; ++k) {
      if (l.cluster[k] == 0) {
        std::printf("clusters of %d: not placeable\n", kGpcProbeClusters[k]);
      } else {
        std::printf("clusters of %d: %d placed at once\n", l.cluster[k], l.ctas[k] / l.cluster[k]);
      }
    }
    GpcOrderScratch scratch;
    std::vector<int16_t> ranks(static_cast<size_t>(sms));
    gpc_order_ranks(l, records.data(), sms, scratch, ranks.data());
    std::map<int, std::vector<int>> groups;
    for (int i = 0; i < sms; ++i) groups[scratch.root[i]].push_back(i);
    std::printf("%zu groups of SMs that share a GPC (an SM alone: no cluster reached it)\n",
                groups.size());
    for (const auto& [root, members] : groups) {
      std::printf("%zu SMs:", members.size());
      for (int m : members) std::printf(" %d", m);
      std::printf("\n");
    }
    std::vector<int> order(static_cast<size_t>(sms));
    for (int i = 0; i < sms; ++i) order[static_cast<size_t>(ranks[static_cast<size_t>(i)])] = i;
    std::printf("order");
    for (int i = 0; i < sms; ++i)
      std::printf("%s%d", i == 0 ? " " : ",", order[static_cast<size_t>(i)]);
    std::printf("\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
