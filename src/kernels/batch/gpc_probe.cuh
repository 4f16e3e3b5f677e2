// The GPC probe's launches (SmPlacement's probe, sm_placement.cu; and tools/sm_gpcs.cu, which
// prints what they find): thread-block clusters, which the hardware keeps inside one GPC, record
// the %smid of each CTA; gpc_order.hpp joins the records into GPCs. One CTA an SM (most of the
// shared memory), clusters of 16 (non-portable: a whole GPC where one holds it), then 8, 4 and
// 2 for the SMs a GPC's larger clusters leave out; each launch one wave of its clusters, so that
// a cluster's CTAs sit on distinct SMs. Stream-ordered: nothing is read back.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/batch/gpc_order.hpp"
#include "kernels/common/cuda_host.hpp"

namespace hopattn::kernels::batch {

__global__ void record_smid(uint32_t* smid_of_cta) {
  extern __shared__ char smem[];
  smem[threadIdx.x] = 0;  // the shared memory keeps one CTA an SM
  uint32_t smid;
  asm volatile("mov.u32 %0, %%smid;\n" : "=r"(smid));
  if (threadIdx.x == 0) smid_of_cta[blockIdx.x] = smid;
}

// The probe's launches on `stream` into `records` (room for kGpcProbes * sms entries); returns
// where each launch's records lie (a cluster size the card cannot place is left out). Throws
// hopattn::Error (kRuntime, naming `where`) for a failed CUDA call.
inline ProbeLaunches launch_gpc_probe(int device, int sms, uint32_t* records, cudaStream_t stream,
                                      const char* where) {
  const int shared = cached_device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>(
      device, where, "cudaDeviceGetAttribute(maxSharedMemoryPerBlockOptin)");
  throw_if_cuda_error(
      cudaFuncSetAttribute(record_smid, cudaFuncAttributeMaxDynamicSharedMemorySize, shared), where,
      "cudaFuncSetAttribute (probe shared memory)");
  throw_if_cuda_error(
      cudaFuncSetAttribute(record_smid, cudaFuncAttributeNonPortableClusterSizeAllowed, 1), where,
      "cudaFuncSetAttribute (probe clusters)");
  ProbeLaunches l{};
  int offset = 0;
  for (int k = 0; k < kGpcProbes; ++k) {
    const int cluster = kGpcProbeClusters[k];
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = static_cast<unsigned>(cluster);
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    cfg.blockDim = dim3(32);
    cfg.dynamicSmemBytes = static_cast<size_t>(shared);
    cfg.gridDim = dim3(static_cast<unsigned>(cluster));
    cfg.stream = stream;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, record_smid, &cfg) != cudaSuccess ||
        clusters == 0) {
      (void)cudaGetLastError();  // a size the card cannot place: the others still join
      continue;
    }
    const int ctas = std::min(cluster * clusters, sms / cluster * cluster);
    if (ctas == 0) continue;
    cfg.gridDim = dim3(static_cast<unsigned>(ctas));
    throw_if_cuda_error(cudaLaunchKernelEx(&cfg, record_smid, records + offset), where,
                        "probe launch");
    l.cluster[k] = cluster;
    l.ctas[k] = ctas;
    l.offset[k] = offset;
    offset += ctas;
  }
  return l;
}

}  // namespace hopattn::kernels::batch
