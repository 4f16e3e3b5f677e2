// Host side of the merge kernels: TensorViews -> Params, dtype dispatch, launch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "hopattn/error.hpp"
#include "kernels/common/cuda_host.hpp"
#include "kernels/common/programmatic_launch.cuh"
#include "kernels/merge/kernel.cuh"
#include "kernels/merge/launch.hpp"

namespace hopattn::kernels::merge {
namespace {

constexpr const char* kWhere = "hopattn.merge_states";

void check_cuda(cudaError_t status, const char* what) { throw_if_cuda_error(status, kWhere, what); }

bool aligned(const void* ptr, const int64_t* strides, int count, int64_t elem, int64_t bytes) {
  bool ok = reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
  for (int i = 0; i < count; ++i) ok = ok && (strides[i] * elem) % bytes == 0;
  return ok;
}

// One merge kernel launch, as a programmatic dependent of the kernel before it (its blocks may
// start during that kernel's tail; every merge kernel waits in ptx::wait_for_prior_grids for its
// results first).
void start(void (*kernel)(Params), unsigned blocks, int threads, const Params& p,
           cudaStream_t stream) {
  check_cuda(
      launch_programmatic(kernel, dim3(blocks), dim3(static_cast<unsigned>(threads)), 0, stream, p),
      "kernel launch");
}

// Whether merge_vec_kernel applies: every row of every state starts 16-byte aligned, whole
// 16-byte pieces per row, and output rows aligned for its stores.
template <class In, class Out>
bool vector_rows(const Params& p) {
  constexpr int kN = kVec<In>;
  if (p.dim % kN != 0) return false;
  for (int s = 0; s < p.num_sources; ++s) {
    if (!aligned(p.src[s].o, p.src[s].o_stride, 3, sizeof(In), 16)) return false;
  }
  const int64_t out_bytes = std::min<int64_t>(16, kN * int64_t(sizeof(Out)));
  return aligned(p.out, p.out_stride, 2, sizeof(Out), out_bytes);
}

// merge_few_kernel with kStates slots and kFewPieces<kStates> pieces a thread; rows that do not
// split that way take the 8 slots of one piece.
template <class In, class Out, int kStates, int kSources>
void launch_few(const Params& p, int64_t rows, int pieces, cudaStream_t stream) {
  constexpr int kP = kFewPieces<kStates>;
  static_assert(kFewPieces<8> == 1 && kFewPieces<kFewStates> == 1, "one piece from 8 slots on");
  if constexpr (kP > 1) {
    if (pieces % kP != 0) return launch_few<In, Out, 8, kSources>(p, rows, pieces, stream);
  }
  const int64_t threads = rows * (pieces / kP);
  const auto blocks = static_cast<unsigned>((threads + kVecThreads - 1) / kVecThreads);
  start(merge_few_kernel<In, Out, kP, kStates, kSources>, blocks, kVecThreads, p, stream);
}

template <class In, class Out>
void launch_typed(const Params& p, cudaStream_t stream) {
  const int64_t rows = int64_t(p.tokens) * p.heads;
  if (vector_rows<In, Out>(p)) {
    // Four 16-byte pieces a thread when the row splits that way (every D that is a multiple of
    // 32 bf16 or 16 floats), one otherwise.
    const int pieces = p.dim / kVec<In>;
    const bool four = pieces % 4 == 0;
    const int n = p.src[0].n + (p.num_sources > 1 ? p.src[1].n : 0);
    const int64_t threads = rows * (four ? pieces / 4 : pieces);
    // Many states over few rows (traits.cuh): the states split over a block's thread groups.
    if (n > kWideAboveStates && threads < kWideBelowThreads) {
      constexpr int kLanes = kVecThreads / kWideGroups<In>;
      const auto wide = static_cast<unsigned>((rows * pieces + kLanes - 1) / kLanes);
      start(merge_wide_kernel<In, Out>, wide, kVecThreads, p, stream);
      return;
    }
    if (n >= 1 && n <= kFewStates && p.num_sources == 1) {
      // The fewest state slots that hold n (slots past n reload a state: wasted loads).
      static_assert(kFewStates == 16, "slot counts 2, 4, 8, 16");
      if (n <= 2) return launch_few<In, Out, 2, 1>(p, rows, pieces, stream);
      if (n <= 4) return launch_few<In, Out, 4, 1>(p, rows, pieces, stream);
      if (n <= 8) return launch_few<In, Out, 8, 1>(p, rows, pieces, stream);
      return launch_few<In, Out, 16, 1>(p, rows, pieces, stream);
    }
    if (p.num_sources == 2 && n == 2) {
      return launch_few<In, Out, 2, 2>(p, rows, pieces, stream);  // merge_states
    }
    const auto blocks = static_cast<unsigned>((threads + kVecThreads - 1) / kVecThreads);
    if (four) {
      start(merge_vec_kernel<In, Out, 4>, blocks, kVecThreads, p, stream);
    } else {
      start(merge_vec_kernel<In, Out, 1>, blocks, kVecThreads, p, stream);
    }
    return;
  }
  const auto blocks = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  start(merge_kernel<In, Out>, blocks, kThreads, p, stream);
}

template <class In>
void launch_out(const Params& p, DType out, cudaStream_t stream) {
  switch (out) {
    case DType::kBF16:
      return launch_typed<In, __nv_bfloat16>(p, stream);
    case DType::kFP16:
      return launch_typed<In, __half>(p, stream);
    default:
      return launch_typed<In, float>(p, stream);
  }
}

void launch(const Params& p, DType in, DType out, int device, Stream stream) {
  if (int64_t(p.tokens) * p.heads == 0) return;
  DeviceGuard guard(device, kWhere);
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  switch (in) {
    case DType::kBF16:
      launch_out<__nv_bfloat16>(p, out, s);
      break;
    case DType::kFP16:
      launch_out<__half>(p, out, s);
      break;
    default:
      launch_out<float>(p, out, s);
      break;
  }
  check_cuda(cudaGetLastError(), "kernel launch");
}

// o [T, n, H, D] (or [T, H, D]: one state) and lse [T, n, H] (or [T, H]).
Source source(const TensorView& o, const TensorView& lse, bool has_state_dim) {
  Source s{};
  s.o = o.data();
  s.lse = lse.data_as<const float>();
  if (has_state_dim) {
    s.n = static_cast<int>(o.size(1));
    for (int i = 0; i < 3; ++i) {
      s.o_stride[i] = o.stride(i);
      s.lse_stride[i] = lse.stride(i);
    }
  } else {
    s.n = 1;
    s.o_stride[0] = o.stride(0);
    s.o_stride[2] = o.stride(1);
    s.lse_stride[0] = lse.stride(0);
    s.lse_stride[2] = lse.stride(1);
  }
  return s;
}

void set_output(Params& p, const TensorView& out, const TensorView& lse) {
  p.out = out.data();
  p.out_stride[0] = out.stride(0);
  p.out_stride[1] = out.stride(1);
  if (lse.defined()) {
    p.lse = lse.data_as<float>();
    p.lse_stride[0] = lse.stride(0);
    p.lse_stride[1] = lse.stride(1);
  }
}

}  // namespace

void launch_merge_states(const MergeArgs& a, Stream stream) {
  Params p{};
  p.src[0] = source(a.o_a, a.lse_a, false);
  p.src[1] = source(a.o_b, a.lse_b, false);
  p.num_sources = 2;
  p.tokens = static_cast<int>(a.o_a.size(0));
  p.heads = static_cast<int>(a.o_a.size(1));
  p.dim = static_cast<int>(a.o_a.size(2));
  set_output(p, a.out, a.lse);
  launch(p, a.o_a.dtype(), a.out.dtype(), a.o_a.device().index, stream);
}

void launch_merge_states_n(const MergeNArgs& a, Stream stream) {
  Params p{};
  p.src[0] = source(a.o, a.lse, true);
  p.num_sources = 1;
  p.tokens = static_cast<int>(a.o.size(0));
  p.heads = static_cast<int>(a.o.size(2));
  p.dim = static_cast<int>(a.o.size(3));
  set_output(p, a.out, a.lse_out);
  launch(p, a.o.dtype(), a.out.dtype(), a.o.device().index, stream);
}

}  // namespace hopattn::kernels::merge
