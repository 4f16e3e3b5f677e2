// Which SMs share a GPC: %smid of the CTAs of thread-block clusters, which the hardware places
// within one GPC. One CTA an SM (most of the shared memory), clusters of 16 (non-portable) then
// of 8, 4 and 2, each launch's clusters joined into groups (union-find over %smid); prints one
// line a group. For the batch family's concurrent form, whose decodes stream from the SMs its
// prefill leaves them: a GPC's own port to the L2 would cap SMs that share few GPCs
// (docs/perf/NOTES.md, "Next device runs").
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a tools/sm_gpcs.cu -o sm_gpcs
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <numeric>
#include <vector>

namespace {

void check(cudaError_t s, const char* what) {
  if (s != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(s));
    std::exit(1);
  }
}

__global__ void record_smid(unsigned* smid_of_cta) {
  extern __shared__ char smem[];
  smem[threadIdx.x] = 0;  // the shared memory keeps one CTA an SM
  unsigned smid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  if (threadIdx.x == 0) smid_of_cta[blockIdx.x] = smid;
}

int find(std::vector<int>& parent, int i) {
  while (parent[i] != i) i = parent[i] = parent[parent[i]];
  return i;
}

}  // namespace

int main() {
  int sms = 0, shared = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "sms");
  check(cudaDeviceGetAttribute(&shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), "shared");
  check(cudaFuncSetAttribute(record_smid, cudaFuncAttributeMaxDynamicSharedMemorySize, shared),
        "shared attr");
  check(cudaFuncSetAttribute(record_smid, cudaFuncAttributeNonPortableClusterSizeAllowed, 1),
        "cluster attr");
  unsigned* d = nullptr;
  check(cudaMalloc(&d, sizeof(unsigned) * sms), "malloc");
  std::vector<int> parent(sms);
  std::iota(parent.begin(), parent.end(), 0);
  for (int cluster : {16, 8, 4, 2}) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = cluster;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    cfg.blockDim = dim3(32);
    cfg.dynamicSmemBytes = shared;
    int max_clusters = 0;
    cfg.gridDim = dim3(cluster);
    if (cudaOccupancyMaxActiveClusters(&max_clusters, record_smid, &cfg) != cudaSuccess ||
        max_clusters == 0) {
      cudaGetLastError();
      std::printf("clusters of %d: not placeable\n", cluster);
      continue;
    }
    // Every cluster resident at once (one wave), so the CTAs of a cluster are on distinct SMs.
    cfg.gridDim = dim3(cluster * max_clusters);
    check(cudaMemset(d, 0xff, sizeof(unsigned) * sms), "memset");
    check(cudaLaunchKernelEx(&cfg, record_smid, d), "launch");
    check(cudaDeviceSynchronize(), "sync");
    std::vector<unsigned> h(cluster * max_clusters);
    check(cudaMemcpy(h.data(), d, sizeof(unsigned) * h.size(), cudaMemcpyDeviceToHost), "copy");
    for (int c = 0; c < max_clusters; ++c) {
      for (int j = 1; j < cluster; ++j) {
        const unsigned a = h[c * cluster], b = h[c * cluster + j];
        if (a < unsigned(sms) && b < unsigned(sms)) parent[find(parent, a)] = find(parent, b);
      }
    }
    std::printf("clusters of %d: %d placed at once\n", cluster, max_clusters);
  }
  std::map<int, std::vector<int>> groups;
  for (int i = 0; i < sms; ++i) groups[find(parent, i)].push_back(i);
  std::printf("%zu groups of SMs that share a GPC (an SM alone: no cluster reached it)\n",
              groups.size());
  for (const auto& [root, members] : groups) {
    std::printf("%zu SMs:", members.size());
    for (int m : members) std::printf(" %d", m);
    std::printf("\n");
  }
  return 0;
}
