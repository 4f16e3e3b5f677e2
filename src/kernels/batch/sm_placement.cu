// SmPlacement (sm_placement.hpp): the order's ranks on the device, and their reset kernel.
#include <cuda_runtime.h>

#include <string>

#include "hopattn/error.hpp"
#include "kernels/batch/sm_placement.hpp"
#include "kernels/common/cuda_host.hpp"

namespace hopattn::kernels::batch {
namespace {

constexpr const char* kWhere = "hopattn.BatchAttention (SM order)";
// The decode SMs' exit count, then a bit a slot.
constexpr int kClaimWords = 1 + kMaxPlacedSms / 32;

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

}  // namespace

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
  sms_ = sms;
  const size_t rank_bytes = sizeof(int16_t) * kMaxPlacedSms;
  cuda_ok(cudaMalloc(&buffer_, rank_bytes + sizeof(uint32_t) * kClaimWords), "cudaMalloc");
  ranks_ = static_cast<int16_t*>(buffer_);
  claims_ = reinterpret_cast<uint32_t*>(static_cast<char*>(buffer_) + rank_bytes);
}

SmPlacement::~SmPlacement() {
  if (buffer_ != nullptr) (void)cudaFree(buffer_);
}

void SmPlacement::reset(Stream stream) const {
  RankTable table;
  for (int i = 0; i < kMaxPlacedSms; ++i) table.rank[i] = host_ranks_[i];
  reset_placement<<<1, kMaxPlacedSms, 0, reinterpret_cast<cudaStream_t>(stream)>>>(table, sms_,
                                                                                   ranks_, claims_);
  cuda_ok(cudaGetLastError(), "placement reset launch");
}

}  // namespace hopattn::kernels::batch
