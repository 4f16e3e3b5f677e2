// SmPlacement (sm_placement.hpp): the order's ranks on the device, their reset kernel, and the GPC
// probe.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "hopattn/error.hpp"
#include "kernels/batch/gpc_order.hpp"
#include "kernels/batch/sm_placement.hpp"
#include "kernels/common/cuda_host.hpp"

namespace hopattn::kernels::batch {
namespace {

constexpr const char* kWhere = "hopattn.BatchAttention (SM order)";
// The decode SMs' exit count, then a bit a slot.
constexpr int kClaimWords = 1 + kMaxPlacedSms / 32;
// The probe's cluster sizes: 16 (non-portable) joins a whole GPC where one holds it; the smaller
// ones reach the SMs a GPC's largest cluster leaves out.
constexpr int kProbeClusters[kGpcProbes] = {16, 8, 4, 2};

void cuda_ok(cudaError_t err, const char* what) { throw_if_cuda_error(err, kWhere, what); }

struct RankTable {
  int16_t rank[kMaxPlacedSms];
};

__global__ void reset_placement(const __grid_constant__ RankTable table, int sms, int16_t* ranks,
                                uint32_t* claims) {
  const int t = static_cast<int>(threadIdx.x);
  if (t < sms) ranks[t] = table.rank[t];
  if (t < kClaimWords) claims[t] = 0u;
}

// %smid of each CTA of a cluster launch; most of the shared memory keeps one CTA an SM, so the
// CTAs of a cluster sit on distinct SMs of one GPC.
__global__ void record_smid(uint32_t* smid_of_cta) {
  extern __shared__ char smem[];
  smem[threadIdx.x] = 0;
  uint32_t smid;
  asm volatile("mov.u32 %0, %%smid;\n" : "=r"(smid));
  if (threadIdx.x == 0) smid_of_cta[blockIdx.x] = smid;
}

// One thread: the order from the probe's records (gpc_order.hpp).
__global__ void ranks_from_clusters(const __grid_constant__ ProbeLaunches l,
                                    const uint32_t* records, int sms, int16_t* ranks) {
  __shared__ GpcOrderScratch scratch;
  if (threadIdx.x == 0) gpc_order_ranks(l, records, sms, scratch, ranks);
}

// The probe's cluster launches on `stream`; returns where their records lie.
ProbeLaunches launch_probe(int device, int sms, uint32_t* records, cudaStream_t stream) {
  int shared = 0;
  cuda_ok(cudaDeviceGetAttribute(&shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
          "cudaDeviceGetAttribute (shared memory)");
  cuda_ok(cudaFuncSetAttribute(record_smid, cudaFuncAttributeMaxDynamicSharedMemorySize, shared),
          "cudaFuncSetAttribute (probe shared memory)");
  cuda_ok(cudaFuncSetAttribute(record_smid, cudaFuncAttributeNonPortableClusterSizeAllowed, 1),
          "cudaFuncSetAttribute (probe clusters)");
  ProbeLaunches l{};
  int offset = 0;
  for (int k = 0; k < kGpcProbes; ++k) {
    const int cluster = kProbeClusters[k];
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = static_cast<unsigned>(cluster);
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
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
    if (ctas == 0 || offset + ctas > kGpcProbes * kMaxPlacedSms) continue;
    cfg.gridDim = dim3(static_cast<unsigned>(ctas));
    cuda_ok(cudaLaunchKernelEx(&cfg, record_smid, records + offset), "probe launch");
    l.cluster[k] = cluster;
    l.ctas[k] = ctas;
    l.offset[k] = offset;
    offset += ctas;
  }
  return l;
}

}  // namespace

void SmPlacement::allocate(int device) {
  DeviceGuard guard(device, kWhere);
  device_ = device;
  cuda_ok(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, device),
          "cudaDeviceGetAttribute (SMs)");
  const size_t rank_bytes = sizeof(int16_t) * kMaxPlacedSms;
  const size_t claim_bytes = sizeof(uint32_t) * kClaimWords;
  const size_t record_bytes = sizeof(uint32_t) * kGpcProbes * kMaxPlacedSms;
  cuda_ok(cudaMalloc(&buffer_, rank_bytes + claim_bytes + record_bytes), "cudaMalloc");
  ranks_ = static_cast<int16_t*>(buffer_);
  claims_ = reinterpret_cast<uint32_t*>(static_cast<char*>(buffer_) + rank_bytes);
  records_ = reinterpret_cast<uint32_t*>(static_cast<char*>(buffer_) + rank_bytes + claim_bytes);
}

SmPlacement::SmPlacement(int device, const std::vector<int>& order) {
  DeviceGuard guard(device, kWhere);
  int sms = 0;
  cuda_ok(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
          "cudaDeviceGetAttribute (SMs)");
  if (static_cast<int>(order.size()) != sms || sms > kMaxPlacedSms) {
    throw Error(ErrorKind::kValue, detail::concat(kWhere, ": expected each of the card's ", sms,
                                                  " SM ids once, got ", order.size(), " ids"));
  }
  for (int i = 0; i < kMaxPlacedSms; ++i) host_ranks_[i] = -1;
  for (int r = 0; r < sms; ++r) {
    const int sm = order[static_cast<size_t>(r)];
    if (sm < 0 || sm >= sms || host_ranks_[sm] >= 0) {
      throw Error(ErrorKind::kValue,
                  detail::concat(kWhere, ": expected each of the SM ids 0..", sms - 1,
                                 " once, got ", sm, " at position ", r));
    }
    host_ranks_[sm] = static_cast<int16_t>(r);
  }
  allocate(device);
}

SmPlacement::SmPlacement(int device) {
  allocate(device);
  if (sms_ > kMaxPlacedSms) {
    (void)cudaFree(buffer_);
    throw Error(ErrorKind::kNotImplemented, detail::concat(kWhere, ": expected a card of at most ",
                                                           kMaxPlacedSms, " SMs, got ", sms_));
  }
  probe_ = true;
}

SmPlacement::~SmPlacement() {
  if (buffer_ != nullptr) (void)cudaFree(buffer_);
}

void SmPlacement::reset(Stream stream) {
  DeviceGuard guard(device_, kWhere);
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  RankTable table{};
  int written = ranks_written_ ? 0 : sms_;
  if (probe_ && !ranks_written_) {
    const ProbeLaunches l = launch_probe(device_, sms_, records_, s);
    ranks_from_clusters<<<1, 32, 0, s>>>(l, records_, sms_, ranks_);
    cuda_ok(cudaGetLastError(), "probe ranks launch");
    written = 0;
  } else {
    for (int i = 0; i < kMaxPlacedSms; ++i) table.rank[i] = host_ranks_[i];
  }
  reset_placement<<<1, kMaxPlacedSms, 0, s>>>(table, written, ranks_, claims_);
  cuda_ok(cudaGetLastError(), "placement reset launch");
  ranks_written_ = true;
}

}  // namespace hopattn::kernels::batch
