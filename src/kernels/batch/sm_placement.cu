// SmPlacement (sm_placement.hpp): the order's ranks on the device, written by the first reset,
// and the claim words each reset zeroes.
#include <cuda_runtime.h>

#include "hopattn/error.hpp"
#include "kernels/batch/gpc_order.hpp"
#include "kernels/batch/gpc_probe.cuh"
#include "kernels/batch/sm_placement.hpp"
#include "kernels/common/cuda_host.hpp"

namespace hopattn::kernels::batch {
namespace {

constexpr const char* kWhere = "hopattn.BatchAttention (SM order)";
// The decode SMs' exit count, then a bit a slot (placement_claims.hpp).
constexpr int kClaimWords = 1 + kMaxPlacedSms / 32;

void cuda_ok(cudaError_t err, const char* what) { throw_if_cuda_error(err, kWhere, what); }

struct RankTable {
  int16_t rank[kMaxPlacedSms];
};

// A given order's ranks, passed by value (no host copy).
__global__ void write_ranks(const __grid_constant__ RankTable table, int sms, int16_t* ranks) {
  const int t = static_cast<int>(threadIdx.x);
  if (t < sms) ranks[t] = table.rank[t];
}

// One thread: the order from the probe's records (gpc_order.hpp).
__global__ void ranks_from_clusters(const __grid_constant__ ProbeLaunches l,
                                    const uint32_t* records, int sms, int16_t* ranks) {
  __shared__ GpcOrderScratch scratch;
  if (threadIdx.x == 0) gpc_order_ranks(l, records, sms, scratch, ranks);
}

}  // namespace

SmPlacement::SmPlacement(int device, const std::vector<int>& order) : SmPlacement(device, false) {
  if (static_cast<int>(order.size()) != sms_) {
    throw Error(ErrorKind::kValue, detail::concat(kWhere, ": expected each of the card's ", sms_,
                                                  " SM ids once, got ", order.size(), " ids"));
  }
  for (int i = 0; i < kMaxPlacedSms; ++i) host_ranks_[i] = -1;
  for (int r = 0; r < sms_; ++r) {
    const int sm = order[static_cast<size_t>(r)];
    if (sm < 0 || sm >= sms_ || host_ranks_[sm] >= 0) {
      throw Error(ErrorKind::kValue,
                  detail::concat(kWhere, ": expected each of the SM ids 0..", sms_ - 1,
                                 " once, got ", sm, " at position ", r));
    }
    host_ranks_[sm] = static_cast<int16_t>(r);
  }
  allocate();
}

SmPlacement::SmPlacement(int device) : SmPlacement(device, true) { allocate(); }

SmPlacement::SmPlacement(int device, bool probe) : device_(device), probe_(probe) {
  sms_ = sm_count(device, kWhere);
  if (sms_ > kMaxPlacedSms) {
    throw Error(ErrorKind::kNotImplemented, detail::concat(kWhere, ": expected a card of at most ",
                                                           kMaxPlacedSms, " SMs, got ", sms_));
  }
}

void SmPlacement::allocate() {
  DeviceGuard guard(device_, kWhere);
  const size_t rank_bytes = sizeof(int16_t) * kMaxPlacedSms;
  const size_t claim_bytes = sizeof(uint32_t) * kClaimWords;
  const size_t record_bytes = probe_ ? sizeof(uint32_t) * kGpcProbes * kMaxPlacedSms : 0;
  cuda_ok(cudaMalloc(&buffer_, rank_bytes + claim_bytes + record_bytes), "cudaMalloc");
  ranks_ = static_cast<int16_t*>(buffer_);
  claims_ = reinterpret_cast<uint32_t*>(static_cast<char*>(buffer_) + rank_bytes);
  records_ = reinterpret_cast<uint32_t*>(static_cast<char*>(buffer_) + rank_bytes + claim_bytes);
}

SmPlacement::~SmPlacement() {
  if (buffer_ != nullptr) (void)cudaFree(buffer_);
}

void SmPlacement::reset(Stream stream) {
  DeviceGuard guard(device_, kWhere);
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  if (!ranks_written_) {
    if (probe_) {
      const ProbeLaunches l = launch_gpc_probe(device_, sms_, records_, s, kWhere);
      ranks_from_clusters<<<1, 32, 0, s>>>(l, records_, sms_, ranks_);
    } else {
      RankTable table;
      for (int i = 0; i < kMaxPlacedSms; ++i) table.rank[i] = host_ranks_[i];
      write_ranks<<<1, kMaxPlacedSms, 0, s>>>(table, sms_, ranks_);
    }
    cuda_ok(cudaGetLastError(), "ranks launch");
    ranks_written_ = true;
  }
  cuda_ok(cudaMemsetAsync(claims_, 0, sizeof(uint32_t) * kClaimWords, s), "cudaMemsetAsync");
}

}  // namespace hopattn::kernels::batch
