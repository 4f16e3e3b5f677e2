#!/usr/bin/env python3
"""Generates src/ptx/wgmma_generated.cuh: one wrapper per wgmma.mma_async shape hopattn uses.

Each wrapper is a single inline-asm statement whose operand list is N/2 accumulator registers,
which is why it is generated rather than written by hand. Regenerate after editing SHAPES:

    python3 tools/gen_wgmma.py > src/ptx/wgmma_generated.cuh && clang-format -i <that file>

PTX ISA: "Asynchronous Warpgroup Level Matrix Multiply-Accumulate: wgmma.mma_async".
  SS: wgmma.mma_async.sync.aligned.m64nNk16.f32.T.T d, a-desc, b-desc, scale-d, imm-scale-a,
      imm-scale-b, imm-trans-a, imm-trans-b;
  RS: wgmma.mma_async.sync.aligned.m64nNk16.f32.T.T d, {a0..a3}, b-desc, scale-d, imm-scale-a,
      imm-scale-b, imm-trans-b;
"""

import sys

# N values of m64nNk16 with f32 accumulators. N = 8: tools/wgmma_rate.cu's narrow rows (a decode
# tile's packed rows as N). QK^T uses N = kBlockN, PV uses N = head dim V,
# the bwd S^T of head dims above 128 N = 32 (half a q tile per MMA warpgroup), the MLA narrow
# schedule N = 16 (S^T = K Q^T and O^T += V^T P^T for up to 16 rows), the fwd's wide KV tiles
# (configs.hpp kFwdWideConfigs) N = 176 and 192.
SHAPES = [8, 16, 32, 48, 64, 80, 96, 112, 128, 176, 192, 256]
TYPES = [("bf16", "__nv_bfloat16"), ("f16", "__half")]


def operand_list(first, count, per_line=8):
    names = [f"%{first + i}" for i in range(count)]
    lines = [", ".join(names[i:i + per_line]) for i in range(0, count, per_line)]
    return (",\\n\"\n      \"".join(lines))


def accum_constraints(n_regs):
    items = [f'"+f"(d[{i}])' for i in range(n_regs)]
    lines = [", ".join(items[i:i + 8]) for i in range(0, n_regs, 8)]
    return ",\n        ".join(lines)


def emit_ss(n, ptx_type):
    regs = n // 2
    a, b, s, ta, tb = regs, regs + 1, regs + 2, regs + 3, regs + 4
    return f"""
template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64n{n}k16_ss_{ptx_type}(float (&d)[{regs}], uint64_t desc_a,
                                                          uint64_t desc_b, uint32_t scale_d) {{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{{\\n"
      ".reg .pred p;\\n"
      "setp.ne.b32 p, %{s}, 0;\\n"
      "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx_type}.{ptx_type}\\n"
      "{{{operand_list(0, regs)}}},\\n"
      "%{a}, %{b}, p, 1, 1, %{ta}, %{tb};\\n"
      "}}\\n"
      : {accum_constraints(regs)}
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA), "n"(kTransB));
#else
  __trap();
#endif
}}
"""


def emit_rs(n, ptx_type):
    regs = n // 2
    a0, b, s, tb = regs, regs + 4, regs + 5, regs + 6
    return f"""
template <int kTransB>
__device__ __forceinline__ void wgmma_m64n{n}k16_rs_{ptx_type}(float (&d)[{regs}], const uint32_t (&a)[4],
                                                          uint64_t desc_b, uint32_t scale_d) {{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{{\\n"
      ".reg .pred p;\\n"
      "setp.ne.b32 p, %{s}, 0;\\n"
      "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx_type}.{ptx_type}\\n"
      "{{{operand_list(0, regs)}}},\\n"
      "{{%{a0}, %{a0 + 1}, %{a0 + 2}, %{a0 + 3}}}, %{b}, p, 1, 1, %{tb};\\n"
      "}}\\n"
      : {accum_constraints(regs)}
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(kTransB));
#else
  __trap();
#endif
}}
"""


def emit_dispatch():
    out = ["""
// Dispatch on (N, element type) at compile time: wgmma_ss<N, Elt, kTransA, kTransB>(d, ...).
template <int N, class Elt, int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b,
                                         uint32_t scale_d) {
  constexpr bool kBf16 = std::is_same_v<Elt, __nv_bfloat16>;
  static_assert(kBf16 || std::is_same_v<Elt, __half>, "wgmma: bf16 or fp16 operands");"""]
    for i, n in enumerate(SHAPES):
        kw = "if constexpr" if i == 0 else "} else if constexpr"
        out.append(f"""  {kw} (N == {n}) {{
    if constexpr (kBf16) {{
      wgmma_m64n{n}k16_ss_bf16<kTransA, kTransB>(d, desc_a, desc_b, scale_d);
    }} else {{
      wgmma_m64n{n}k16_ss_f16<kTransA, kTransB>(d, desc_a, desc_b, scale_d);
    }}""")
    out.append("""  } else {
    static_assert(N < 0, "wgmma_ss: N not generated; add it to SHAPES in tools/gen_wgmma.py");
  }
}

template <int N, class Elt, int kTransB>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b,
                                         uint32_t scale_d) {
  constexpr bool kBf16 = std::is_same_v<Elt, __nv_bfloat16>;
  static_assert(kBf16 || std::is_same_v<Elt, __half>, "wgmma: bf16 or fp16 operands");""")
    for i, n in enumerate(SHAPES):
        kw = "if constexpr" if i == 0 else "} else if constexpr"
        out.append(f"""  {kw} (N == {n}) {{
    if constexpr (kBf16) {{
      wgmma_m64n{n}k16_rs_bf16<kTransB>(d, a, desc_b, scale_d);
    }} else {{
      wgmma_m64n{n}k16_rs_f16<kTransB>(d, a, desc_b, scale_d);
    }}""")
    out.append("""  } else {
    static_assert(N < 0, "wgmma_rs: N not generated; add it to SHAPES in tools/gen_wgmma.py");
  }
}
""")
    return "\n".join(out)


def main():
    w = sys.stdout.write
    w("// Generated by tools/gen_wgmma.py: do not edit; change the script and regenerate.\n")
    w("// wgmma.mma_async m64nNk16 with f32 accumulators, bf16/fp16 operands, A from shared memory\n")
    w("// (SS) or registers (RS). PTX ISA: \"wgmma.mma_async\" (asynchronous warpgroup level\n")
    w("// matrix multiply-accumulate). Ordering (wgmma.fence / commit / wait) is in wgmma.cuh.\n")
    w("#pragma once\n\n#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n\n#include <cstdint>\n")
    w("#include <type_traits>\n\nnamespace hopattn::ptx {\n")
    for n in SHAPES:
        for ptx_type, _ in TYPES:
            w(emit_ss(n, ptx_type))
            w(emit_rs(n, ptx_type))
    w(emit_dispatch())
    w("\n}  // namespace hopattn::ptx\n")


if __name__ == "__main__":
    main()
