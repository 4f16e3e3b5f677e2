// Synchronization primitives in the shape the fwd kernel uses them: 384 threads, warpgroup 0 a
// producer (setmaxnreg.dec) and warpgroups 1-2 consumers (setmaxnreg.inc); full/empty mbarrier
// rings with ordinary stores and with TMA (expect_tx), and the named-barrier ping-pong between
// the two consumer warpgroups. A broken parity or count shows as a timeout flag, not a hang.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "hopper_test_util.hpp"
#include "ptx/mbarrier.cuh"
#include "ptx/named_barrier.cuh"
#include "ptx/setmaxnreg.cuh"
#include "ptx/tensor_map.hpp"
#include "ptx/tma.cuh"
#include "ptx/warpgroup.cuh"

namespace hopattn::testing {
namespace {

using namespace hopattn::testing::hopper;  // NOLINT: test helpers

constexpr uint64_t kTimeoutNs = 2'000'000'000ull;
constexpr int kConsumerThreads = 256;

// Status words: 0 ok; otherwise which wait timed out.
enum Status : int { kOk = 0, kProducerEmptyTimeout = 1, kConsumerFullTimeout = 2 };

// Ring of kStages slots of 256 words written by one producer warp with ordinary stores.
template <int kStages>
__global__ void __launch_bounds__(384, 1)
    store_ring_kernel(int iterations, int* errors, int* status) {
  __shared__ uint32_t slots[kStages][kConsumerThreads];
  __shared__ uint64_t full[kStages], empty[kStages];
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbarrier_init(&full[s], ptx::kWarpSize);     // every producer lane arrives
      ptx::mbarrier_init(&empty[s], kConsumerThreads);  // every consumer thread arrives
    }
  }
  __syncthreads();
  const int wg = ptx::warpgroup_index();
  if (wg == 0) {
    ptx::setmaxnreg_dec<40>();
    if (ptx::warp_index_in_warpgroup() != 0) return;
    const int lane = threadIdx.x % 32;
    ptx::PipelineState<kStages> st;
    for (int it = 0; it < iterations; ++it, st.advance()) {
      if (!ptx::mbarrier_wait_parity_for(&empty[st.stage()], st.phase() ^ 1, kTimeoutNs)) {
        atomicExch(status, kProducerEmptyTimeout);
        return;
      }
      for (int i = lane; i < kConsumerThreads; i += 32) slots[st.stage()][i] = it * 7 + i;
      ptx::mbarrier_arrive(&full[st.stage()]);
    }
    return;
  }
  ptx::setmaxnreg_inc<232>();
  const int t = threadIdx.x - 128;
  int bad = 0;
  ptx::PipelineState<kStages> st;
  for (int it = 0; it < iterations; ++it, st.advance()) {
    if (!ptx::mbarrier_wait_parity_for(&full[st.stage()], st.phase(), kTimeoutNs)) {
      atomicExch(status, kConsumerFullTimeout);
      return;
    }
    bad += slots[st.stage()][t] != static_cast<uint32_t>(it * 7 + t);
    ptx::mbarrier_arrive(&empty[st.stage()]);
  }
  errors[t] = bad;
}

// Ring of kStages 64x64 16-bit boxes loaded by TMA from a [rows][64] tensor; consumers check
// every element of every box through the 128B swizzle formula.
template <int kStages>
__global__ void __launch_bounds__(384, 1)
    tma_ring_kernel(const __grid_constant__ CUtensorMap tm, int rows, int iterations, int* errors,
                    int* status) {
  extern __shared__ uint8_t dyn_smem[];
  uint8_t* smem =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(dyn_smem) + 1023) & ~uintptr_t{1023});
  __shared__ uint64_t full[kStages], empty[kStages];
  constexpr uint32_t kBoxBytes = 64 * 64 * 2;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbarrier_init(&full[s], 1);
      ptx::mbarrier_init(&empty[s], kConsumerThreads);
    }
  }
  __syncthreads();
  const int wg = ptx::warpgroup_index();
  const int boxes = rows / 64;
  if (wg == 0) {
    ptx::setmaxnreg_dec<24>();
    if (threadIdx.x != 0) return;
    ptx::PipelineState<kStages> st;
    for (int it = 0; it < iterations; ++it, st.advance()) {
      if (!ptx::mbarrier_wait_parity_for(&empty[st.stage()], st.phase() ^ 1, kTimeoutNs)) {
        atomicExch(status, kProducerEmptyTimeout);
        return;
      }
      ptx::mbarrier_arrive_expect_tx(&full[st.stage()], kBoxBytes);
      ptx::tma_load_2d(smem + st.stage() * kBoxBytes, &tm, &full[st.stage()], 0, (it % boxes) * 64);
    }
    return;
  }
  ptx::setmaxnreg_inc<240>();
  const int t = threadIdx.x - 128;
  int bad = 0;
  ptx::PipelineState<kStages> st;
  for (int it = 0; it < iterations; ++it, st.advance()) {
    if (!ptx::mbarrier_wait_parity_for(&full[st.stage()], st.phase(), kTimeoutNs)) {
      atomicExch(status, kConsumerFullTimeout);
      return;
    }
    const uint16_t* box = reinterpret_cast<const uint16_t*>(smem + st.stage() * kBoxBytes);
    for (int e = t; e < 64 * 64; e += kConsumerThreads) {
      const int r = e / 64, c = e % 64;
      const int global_row = (it % boxes) * 64 + r;
      const uint16_t want = static_cast<uint16_t>(global_row * 64 + c);
      bad += box[ptx::swizzle_128b_offset(r, 2 * c) / 2] != want;
    }
    ptx::mbarrier_arrive(&empty[st.stage()]);
  }
  errors[t] = bad;
}

// FA3-style ping-pong: warpgroup i waits on barrier kFirst + i, works, then arrives on the other
// warpgroup's barrier; warpgroup 1 arrives once up front so warpgroup 0 goes first.
__global__ void __launch_bounds__(384, 1) ping_pong_kernel(int rounds, int* log_out) {
  constexpr uint32_t kFirst = 1;
  __shared__ int log[512];
  __shared__ int next;
  if (threadIdx.x == 0) next = 0;
  __syncthreads();
  const int wg = ptx::warpgroup_index();
  if (wg == 0) {
    ptx::setmaxnreg_dec<24>();
    return;  // the producer leaves; the consumers' barriers count only their own threads
  }
  ptx::setmaxnreg_inc<240>();
  const int me = wg - 1;
  if (me == 1) ptx::named_barrier_arrive(kFirst + 0, kConsumerThreads);
  for (int r = 0; r < rounds; ++r) {
    ptx::named_barrier_sync(kFirst + me, kConsumerThreads);
    if (threadIdx.x % 128 == 0) log[atomicAdd(&next, 1)] = me;
    __threadfence_block();
    ptx::named_barrier_arrive(kFirst + (1 - me), kConsumerThreads);
  }
  ptx::named_barrier_sync(kFirst + 2, kConsumerThreads);
  for (int i = threadIdx.x - 128; i < 2 * rounds; i += kConsumerThreads) log_out[i] = log[i];
}

template <int kStages>
void check_store_ring(int iterations) {
  DeviceBuffer<int> errors(kConsumerThreads), status(1);
  errors.fill_bytes(0xFF);  // -1: a consumer that never finished
  status.fill_bytes(0);
  store_ring_kernel<kStages><<<1, 384>>>(iterations, errors.get(), status.get());
  cuda_check(cudaGetLastError(), "store_ring_kernel launch");
  sync_or_die(nullptr, "store_ring_kernel");
  ASSERT_EQ(status.download()[0], kOk) << "1: producer timed out on empty (consumer release or "
                                          "empty count wrong); 2: consumer timed out on full";
  const std::vector<int> e = errors.download();
  for (int t = 0; t < kConsumerThreads; ++t) {
    ASSERT_EQ(e[t], 0) << "consumer thread " << t << " read stale or wrong slot values";
  }
}

TEST(PtxPipeline, StoreRingTwoStages) {
  if (auto why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  check_store_ring<2>(1000);
}

TEST(PtxPipeline, StoreRingThreeStages) {
  if (auto why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  check_store_ring<3>(1001);
}

template <int kStages>
void check_tma_ring(int rows, int iterations) {
  std::vector<uint16_t> host(rows * 64);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint16_t>(i);
  auto in = to_device(host);
  ptx::TensorMapSpec spec;
  spec.base = in.get();
  spec.dtype = CU_TENSOR_MAP_DATA_TYPE_UINT16;
  spec.rank = 2;
  spec.dims = {64, static_cast<uint64_t>(rows)};
  spec.strides = {0, 128};
  spec.box = {64, 64};
  const CUtensorMap tm = ptx::encode_tensor_map(spec);
  DeviceBuffer<int> errors(kConsumerThreads), status(1);
  errors.fill_bytes(0xFF);
  status.fill_bytes(0);
  const int smem = kStages * 8192 + 1024;
  auto kernel = tma_ring_kernel<kStages>;
  cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
             "smem attribute");
  kernel<<<1, 384, smem>>>(tm, rows, iterations, errors.get(), status.get());
  cuda_check(cudaGetLastError(), "tma_ring_kernel launch");
  sync_or_die(nullptr, "tma_ring_kernel");
  ASSERT_EQ(status.download()[0], kOk) << "1: producer timed out on empty; 2: consumer timed out "
                                          "on full (expect_tx bytes or parity wrong)";
  const std::vector<int> e = errors.download();
  for (int t = 0; t < kConsumerThreads; ++t) {
    ASSERT_EQ(e[t], 0) << "consumer thread " << t << " saw wrong box contents";
  }
}

TEST(PtxPipeline, TmaRingTwoStages) {
  if (auto why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  check_tma_ring<2>(64 * 37, 3 * 37);
}

TEST(PtxPipeline, TmaRingFourStages) {
  if (auto why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  check_tma_ring<4>(64 * 5, 101);
}

TEST(PtxPipeline, NamedBarrierPingPongAlternates) {
  if (auto why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  constexpr int kRounds = 200;
  DeviceBuffer<int> log(2 * kRounds);
  log.fill_bytes(0xFF);
  ping_pong_kernel<<<1, 384>>>(kRounds, log.get());
  cuda_check(cudaGetLastError(), "ping_pong_kernel launch");
  sync_or_die(nullptr, "ping_pong_kernel");
  const std::vector<int> got = log.download();
  for (int i = 0; i < 2 * kRounds; ++i) {
    ASSERT_EQ(got[i], i % 2) << "turn " << i << ": warpgroups did not alternate";
  }
}

}  // namespace
}  // namespace hopattn::testing
