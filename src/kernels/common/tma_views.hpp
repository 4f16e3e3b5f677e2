// Host side, shared by the kernel families' launchers: a q/k/v/o tensor as TMA sees it ([B, S, H,
// D], varlen [total, H, D] as B = 1) and its tiled tensor map. CUDA builds only
// (ptx/tensor_map.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "hopattn/tensor_view.hpp"
#include "ptx/tensor_map.hpp"

namespace hopattn::kernels {

struct HeadMajorView {
  int64_t b, s, h, d;
  int64_t stride_b, stride_s, stride_h, stride_d;
};

// Strides of size-1 dims are never used for addressing and frameworks leave them arbitrary;
// TMA still wants multiples of 16 bytes, so they are replaced by the span of the inner dims.
inline HeadMajorView head_major_view(const TensorView& t, bool varlen) {
  HeadMajorView v = varlen ? HeadMajorView{1, t.size(0),   t.size(1),   t.size(2),
                                           0, t.stride(0), t.stride(1), t.stride(2)}
                           : HeadMajorView{t.size(0),   t.size(1),   t.size(2),   t.size(3),
                                           t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
  if (v.d == 1) v.stride_d = 1;
  if (v.h == 1) v.stride_h = v.d;
  if (v.s == 1) v.stride_s = v.h * v.stride_h;
  if (v.b == 1) v.stride_b = v.s * v.stride_s;
  return v;
}

// Why `t` cannot be mapped by tma_spec below, or null when it can: a contiguous last dim, the
// other strides multiples of 16 bytes and not negative (a map's strides are unsigned byte
// counts: a reversed batch or sequence dim, a numpy stride trick, would read other rows), and a
// 16-byte aligned base. Strides of size-1 dims do not count (head_major_view).
inline const char* tma_layout_reason(const TensorView& t, bool varlen) {
  const HeadMajorView v = head_major_view(t, varlen);
  if (v.stride_d != 1) return "must have a contiguous last dim";
  for (int64_t stride : {v.stride_s, v.stride_h, v.stride_b}) {
    if (stride < 0) return "strides must not be negative for TMA";
    if (stride % 8 != 0) return "strides must be multiples of 8 elements (16 bytes) for TMA";
  }
  if (reinterpret_cast<uintptr_t>(t.data()) % 16 != 0) return "must be 16-byte aligned";
  return nullptr;
}

// tma_layout_reason as a launcher's kNotImplemented message about argument `name`, or "".
inline std::string tma_layout_problem(const TensorView& t, const char* name, bool varlen) {
  const char* why = tma_layout_reason(t, varlen);
  return why == nullptr ? "" : std::string(name) + " " + why + " (shape " + t.shape_string() + ")";
}

// Boxes of (64 columns, box_heads heads, box_rows rows) of a 16-bit head-major tensor:
// box_heads > 1 for GQA-packed Q and O (a box of pack heads x positions lands as rows
// q_pos * pack + h).
inline ptx::TensorMapSpec tma_spec(const TensorView& t, bool varlen, uint32_t box_rows,
                                   uint32_t box_heads = 1) {
  const HeadMajorView v = head_major_view(t, varlen);
  ptx::TensorMapSpec s = ptx::tensor_map_spec_16bit(t.data(), t.dtype(), 4);
  s.dims = {static_cast<uint64_t>(v.d), static_cast<uint64_t>(v.h), static_cast<uint64_t>(v.s),
            static_cast<uint64_t>(v.b)};
  s.strides = {0, static_cast<uint64_t>(v.stride_h) * 2, static_cast<uint64_t>(v.stride_s) * 2,
               static_cast<uint64_t>(std::max<int64_t>(v.stride_b, 8)) * 2};
  s.box = {64, box_heads, box_rows, 1};
  return s;
}

}  // namespace hopattn::kernels
