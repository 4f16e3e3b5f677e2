// Per-SM streaming rate from HBM into shared memory on N SMs (one CTA an SM), by copy mechanism
// and bytes in flight: the question behind the batch family's concurrent form, where a mixed
// step's decodes stream from the few SMs the prefill leaves them (issue 11, step (a): 2.08 GB
// from ~20-28 SMs), and behind a decode kernel that should carry ~100 GB/s an SM.
//
// Each warp streams its own contiguous region through its own ring of kStages stages of 8 KB (a
// 16-key block of K and V at head dim 128, bf16) and touches one word of each stage:
//   cpasync  16-byte cp.async.cg pieces, 16 a lane a stage, commit / wait_group per warp
//   cpasyncL2  the same with the .L2::256B prefetch hint (the L2 fetches 256-byte spans)
//   bulk8k   one cp.async.bulk of 8 KB a stage by lane 0, completing on the stage's mbarrier
//   rows256  32 cp.async.bulk of 256 B a stage, one a lane (a paged K / V row each)
//   paged    cp.async of 32 rows of 256 B, 2 KB apart (an NHD page of 8 KV heads at D = 128)
// Prints GB/s in all and per SM (median of 5 timed runs after 2 warm-ups). `ctas`: one CTA of
// eight warps against two of four an SM, on the first N SMs; `sms LIST`: the same on the SMs a
// comma-separated list of %smid values names.
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc tools/stream_rate.cu \
//        -o stream_rate && ./stream_rate [paged | ctas | sms LIST]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "event_median.cuh"
#include "ptx/bulk_copy.cuh"
#include "ptx/cp_async.cuh"
#include "ptx/mbarrier.cuh"

namespace {

constexpr uint32_t kStageBytes = 8192;
constexpr size_t kBytesPerCta = size_t{24} << 20;
enum Mode { kCpAsync = 0, kBulk8k = 1, kRows256 = 2, kCpAsyncL2 = 3, kPaged = 4 };
const char* const kModeNames[] = {"cpasync", "bulk8k", "rows256", "cpasyncL2", "paged"};
// Modes whose stages complete by cp.async groups (the others by the stage's mbarrier).
constexpr bool by_cp_async(int mode) {
  return mode == kCpAsync || mode == kCpAsyncL2 || mode == kPaged;
}

void check(cudaError_t s, const char* what) {
  if (s != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(s));
    std::exit(1);
  }
}

template <int kMode>
__device__ __forceinline__ void issue(uint8_t* dst, const uint8_t* src, uint64_t* bar, int lane) {
  if constexpr (kMode == kCpAsync) {
#pragma unroll
    for (int j = 0; j < 16; ++j)
      hopattn::ptx::cp_async_16(dst + j * 512 + lane * 16, src + j * 512 + lane * 16, 16);
    hopattn::ptx::cp_async_commit();
  } else if constexpr (kMode == kPaged) {
    // 32 rows of 256 B, 2 KB apart (an NHD page of 8 KV heads at D = 128: `src` is the warp's
    // head in a 64 KB span); 16 lanes a row, two rows a copy.
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int row = 2 * j + lane / 16;
      hopattn::ptx::cp_async_16(dst + row * 256 + (lane % 16) * 16,
                                src + row * 2048 + (lane % 16) * 16, 16);
    }
    hopattn::ptx::cp_async_commit();
  } else if constexpr (kMode == kCpAsyncL2) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const auto d = static_cast<uint32_t>(__cvta_generic_to_shared(dst + j * 512 + lane * 16));
      asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(d),
                   "l"(src + j * 512 + lane * 16)
                   : "memory");
    }
    hopattn::ptx::cp_async_commit();
  } else if constexpr (kMode == kBulk8k) {
    if (lane == 0) {
      hopattn::ptx::mbarrier_arrive_expect_tx(bar, kStageBytes);
      hopattn::ptx::bulk_load(dst, src, kStageBytes, bar);
    }
  } else {
    if (lane == 0) hopattn::ptx::mbarrier_arrive_expect_tx(bar, kStageBytes);
    hopattn::ptx::bulk_load(dst + lane * 256, src + lane * 256, 256, bar);
  }
}

constexpr int kMaxSms = 256;

// on_sm (device, kMaxSms flags) non-null: only CTAs on SMs whose flag is set stream (the rest
// exit at once), each the region of a ticket, so that a grid of every SM's CTAs times kCtas
// streams from kCtas CTAs an SM on exactly those SMs.
template <int kMode, int kWarps, int kStages, int kCtas = 1>
__global__ void __launch_bounds__(kWarps * 32, kCtas)
    stream_kernel(const uint8_t* src, uint32_t* sink, const uint8_t* on_sm, unsigned* ticket) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __shared__ unsigned region;
  if (on_sm != nullptr) {
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    if (smid >= static_cast<unsigned>(kMaxSms) || on_sm[smid] == 0) return;
    if (threadIdx.x == 0) region = atomicAdd(ticket, 1u);
    __syncthreads();
  } else if (threadIdx.x == 0) {
    region = blockIdx.x;
  }
  __syncthreads();
  constexpr size_t kPerWarp = kBytesPerCta / kWarps;
  constexpr int kBlocks = static_cast<int>(kPerWarp / kStageBytes);
  // kPaged: the CTA's warps read the 8 heads of consecutive 64 KB spans (8 warps cover them).
  const uint8_t* base = kMode == kPaged ? src + region * kBytesPerCta + (warp % 8) * 256
                                        : src + region * kBytesPerCta + warp * kPerWarp;
  constexpr size_t kBlockStride = kMode == kPaged ? 65536 : kStageBytes;
  uint8_t* ring = smem + warp * kStages * kStageBytes;
  uint64_t* bars =
      reinterpret_cast<uint64_t*>(smem + kWarps * kStages * kStageBytes) + warp * kStages;
  if (!by_cp_async(kMode) && lane == 0) {
    for (int s = 0; s < kStages; ++s) hopattn::ptx::mbarrier_init(bars + s, 1);
    hopattn::ptx::fence_mbarrier_init();
  }
  __syncwarp();
  uint32_t acc = 0;
  for (int s = 0; s < kStages - 1; ++s)
    issue<kMode>(ring + s * kStageBytes, base + s * kBlockStride, bars + s, lane);
#pragma unroll 1
  for (int b = 0; b < kBlocks; ++b) {
    const int n = b + kStages - 1, s = b % kStages;
    if (n < kBlocks) {
      issue<kMode>(ring + (n % kStages) * kStageBytes, base + n * kBlockStride, bars + n % kStages,
                   lane);
    } else if (by_cp_async(kMode)) {
      hopattn::ptx::cp_async_commit();
    }
    if constexpr (by_cp_async(kMode)) {
      hopattn::ptx::cp_async_wait<kStages - 1>();
    } else {
      hopattn::ptx::mbarrier_wait_parity(bars + s, static_cast<uint32_t>(b / kStages) & 1u);
    }
    __syncwarp();
    acc ^= reinterpret_cast<const uint32_t*>(ring + s * kStageBytes)[lane * 64];
    __syncwarp();
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}

// The median of 5 timed calls of `launch` (after 2 warm-ups), in ms.
template <class Launch>
double median_ms(const Launch& launch) {
  return hopattn::tools::event_median_ms(launch, 2, 5);
}

void print_row(const char* mode, int ctas, int warps, int stages, int sms, double ms) {
  const double gbs = double(kBytesPerCta) * ctas * sms / (ms * 1e-3) / 1e9;
  std::printf("| %s x%d CTAs | %d | %d | %zu | %d | %.0f | %.1f |\n", mode, ctas, warps, stages,
              size_t(ctas) * warps * (stages - 1) * kStageBytes / 1024, sms, gbs, gbs / sms);
}

// One CTA an SM on n SMs (a grid of n).
template <int kMode, int kWarps, int kStages>
void measure(const uint8_t* src, uint32_t* sink, const std::vector<int>& grids, int num_sms) {
  auto kernel = stream_kernel<kMode, kWarps, kStages>;
  const size_t ring = size_t{kWarps} * kStages * kStageBytes + kWarps * kStages * 8;
  const size_t smem = std::max(ring, size_t{120} << 10);  // one CTA an SM
  if (smem > size_t{227} << 10) return;                   // does not fit an SM
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
        "attr");
  for (int n : grids) {
    if (n > num_sms) continue;
    const double ms =
        median_ms([&] { kernel<<<n, kWarps * 32, smem>>>(src, sink, nullptr, nullptr); });
    print_row(kModeNames[kMode], 1, kWarps, kStages, n, ms);
  }
}

// kCtas CTAs an SM on the SMs a set lists (the %smid filter of stream_kernel): the decode
// kernels' shape (two CTAs of four warps an SM) against one CTA of eight.
struct SmSets {
  uint8_t* on_sm;  // device, kMaxSms flags
  unsigned* ticket;
  std::vector<std::vector<int>> sets;  // each a list of %smid values
};

template <int kMode, int kWarps, int kStages, int kCtas>
void measure_on(const uint8_t* src, uint32_t* sink, const SmSets& on, int num_sms) {
  auto kernel = stream_kernel<kMode, kWarps, kStages, kCtas>;
  const size_t ring = size_t{kWarps} * kStages * kStageBytes + kWarps * kStages * 8;
  // Exactly kCtas fit an SM: one takes more than half of its 228 KB (less the 1 KB a CTA).
  const size_t smem = std::max(ring, size_t{kCtas == 1 ? 120 : 80} << 10);
  if (smem * kCtas + kCtas * 1024 > size_t{228} << 10) return;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
        "attr");
  for (const std::vector<int>& set : on.sets) {
    uint8_t flags[kMaxSms] = {};
    for (int sm : set) flags[sm] = 1;
    int sms = 0;  // distinct SMs of the set
    for (uint8_t f : flags) sms += f;
    check(cudaMemcpy(on.on_sm, flags, sizeof(flags), cudaMemcpyHostToDevice), "flags");
    const double ms = median_ms([&] {
      check(cudaMemsetAsync(on.ticket, 0, sizeof(unsigned)), "memset");
      kernel<<<kCtas * num_sms, kWarps * 32, smem>>>(src, sink, on.on_sm, on.ticket);
    });
    print_row(kModeNames[kMode], kCtas, kWarps, kStages, sms, ms);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int num_sms = 0;
  check(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, 0), "sms");
  uint8_t* src = nullptr;
  uint32_t* sink = nullptr;
  check(cudaMalloc(&src, 2 * kBytesPerCta * num_sms), "malloc");  // two CTAs an SM: ctas
  check(cudaMalloc(&sink, 4), "malloc");
  check(cudaMemset(src, 1, 2 * kBytesPerCta * num_sms), "memset");
  unsigned* ticket = nullptr;
  check(cudaMalloc(&ticket, sizeof(unsigned)), "malloc");
  const std::vector<int> grids = {8, 16, 20, 24, 28, 32, 64, num_sms};
  std::printf("| mode | warps | stages | KB in flight an SM | SMs | GB/s | GB/s an SM |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  SmSets on{nullptr, ticket, {}};
  check(cudaMalloc(&on.on_sm, kMaxSms), "malloc");
  if (argc > 1 && std::strcmp(argv[1], "sms") == 0) {  // on the SMs of a list: 3,5,8,...
    // The SMs a decode call ran on under `hopattn bench decode --hold-sms K`, which prints them:
    // the plain stream on exactly those SMs against the decode kernels there.
    std::vector<int> set;
    bool ok = argc > 2;
    for (const char* c = ok ? argv[2] : ""; ok && *c != '\0';) {
      char* end = nullptr;
      const long sm = std::strtol(c, &end, 10);
      ok = end != c && sm >= 0 && sm < std::min(num_sms, kMaxSms);
      set.push_back(static_cast<int>(sm));
      c = *end == ',' ? end + 1 : end;
    }
    if (!ok || set.empty()) {
      std::fprintf(stderr, "sms: a comma-separated list of SM ids below %d\n", num_sms);
      return 1;
    }
    on.sets = {set};
    measure_on<kCpAsync, 8, 3, 1>(src, sink, on, num_sms);
    measure_on<kCpAsync, 4, 3, 2>(src, sink, on, num_sms);
    measure_on<kPaged, 8, 3, 1>(src, sink, on, num_sms);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "ctas") == 0) {  // CTAs an SM, on the first SMs
    // A grid of n spreads its CTAs over the GPCs; SMs 0 .. n - 1 may share a few of them (a
    // GPC's own port to the L2 would then cap the stream of the second but not the first).
    const std::vector<int> few = {8, 16, 20, 28};
    for (int n : few) {
      on.sets.emplace_back();
      for (int sm = 0; sm < n && sm < num_sms; ++sm) on.sets.back().push_back(sm);
    }
    measure<kCpAsync, 8, 3>(src, sink, few, num_sms);
    measure_on<kCpAsync, 8, 3, 1>(src, sink, on, num_sms);
    measure_on<kCpAsync, 4, 3, 2>(src, sink, on, num_sms);
    measure_on<kPaged, 8, 3, 1>(src, sink, on, num_sms);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "paged") == 0) {  // the two rows that compare layouts
    measure<kCpAsync, 8, 3>(src, sink, grids, num_sms);
    measure<kPaged, 8, 3>(src, sink, grids, num_sms);
    return 0;
  }
  measure<kCpAsync, 4, 4>(src, sink, grids, num_sms);
  measure<kCpAsync, 8, 3>(src, sink, grids, num_sms);
  measure<kCpAsync, 4, 6>(src, sink, grids, num_sms);
  measure<kCpAsyncL2, 4, 4>(src, sink, grids, num_sms);
  measure<kCpAsyncL2, 8, 3>(src, sink, grids, num_sms);
  measure<kBulk8k, 4, 4>(src, sink, grids, num_sms);
  measure<kBulk8k, 4, 6>(src, sink, grids, num_sms);
  measure<kBulk8k, 8, 3>(src, sink, grids, num_sms);
  measure<kBulk8k, 2, 12>(src, sink, grids, num_sms);
  measure<kRows256, 4, 6>(src, sink, grids, num_sms);
  measure<kRows256, 8, 3>(src, sink, grids, num_sms);
  check(cudaDeviceSynchronize(), "sync");
  return 0;
}
