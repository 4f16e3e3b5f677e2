#!/usr/bin/env python3
"""Host cost of one eager call of hopattn's torch path at tiny shapes, next to PyTorch SDPA's, to
see what Python adds per call where the kernel is short: the rows of issue 13's targets
(attention with inputs that require grad, attention, decode, mla, merge_states), and
BatchAttention.run (one layer of a planned step; an engine calls it once a layer).

    python bench/peers/host_overhead.py              # CUDA when available, else the CPU backend
    python bench/peers/host_overhead.py --device cpu # the CPU reference (same Python/C++ path)
    python bench/peers/host_overhead.py --profile    # plus cProfile of the hopattn calls
    python bench/peers/host_overhead.py --no-generic # only the rows of the path calls take

Each hopattn row is timed on the path eager calls take (the C++ fast path, hopattn._torch_C, where
it was built) and again on the generic path (the torch.library ops' Python implementation, which
serves where the extension is absent or declines a call), so one run shows both next to SDPA.

For each call it reports the median over rounds of (perf_counter time of N back-to-back calls) / N
without synchronizing inside the round: while the host is slower than the kernel this is the host
cost of a call (the GPU waits on the host); "wall" adds the synchronize at the round's end. On the
CPU backend the numbers include the CPU reference's own work, which at these shapes is a few us.
With OUT set, writes $OUT/host_overhead.md.
"""

import argparse
import cProfile
import io
import itertools
import pstats
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from peer_rows import publish

import hopattn
import hopattn.torch  # noqa: F401  (loads the fast path, when built)
from hopattn._torch import fast

CALLS = 200
ROUNDS = 15


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def per_call_us(fn, device, calls=CALLS, rounds=ROUNDS):
    """(host us per call, wall us per call, fastest round's host us per call) over rounds of
    `calls` eager calls: medians, and the minimum (steadier on a shared, busy host)."""
    for _ in range(20):
        fn()
    sync(device)
    host, wall = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        issued = time.perf_counter()
        sync(device)
        done = time.perf_counter()
        host.append((issued - start) / calls * 1e6)
        wall.append((done - start) / calls * 1e6)
    return statistics.median(host), statistics.median(wall), min(host)


def workloads(device):
    """name -> zero-argument callable, on tiny shapes (one short kernel each)."""
    gen = torch.Generator(device=device).manual_seed(0)
    dtype = torch.bfloat16

    def randn(*shape):
        return torch.randn(shape, generator=gen, device=device, dtype=dtype)

    # CUDA: fwd B=1, 128 tokens, 8 q / 2 kv heads, hd 128; decode B=1, kv 256 tokens in pages of
    # 16, 32 / 8 heads, hd 128. The CPU reference computes in double, so there the shapes shrink
    # (4 tokens, kv 16, 2 / 1 heads, hd 8) until its arithmetic is noise next to the call path.
    cuda = device == "cuda"
    tokens, kv_len, page = (128, 256, 16) if cuda else (4, 16, 16)
    (hq, hkv), (dhq, dhkv), d = ((8, 2), (32, 8), 128) if cuda else ((2, 1), (2, 1), 8)
    q, k, v = randn(1, tokens, hq, d), randn(1, tokens, hkv, d), randn(1, tokens, hkv, d)
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    dq = randn(1, 1, dhq, d)
    k_cache, v_cache = (randn(kv_len // page, page, dhkv, d) for _ in range(2))
    lens = torch.full((1,), kv_len, dtype=torch.int32, device=device)
    table = torch.arange(kv_len // page, dtype=torch.int32, device=device).view(1, -1)
    kd, vd = (c.reshape(1, kv_len, dhkv, d).transpose(1, 2) for c in (k_cache, v_cache))
    dqt = dq.transpose(1, 2)
    out, lse = torch.empty_like(dq), torch.empty(1, 1, dhq, dtype=torch.float32, device=device)
    # Inputs that require grad: the forward call records the autograd graph (no backward run).
    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
    qgt, kgt, vgt = (t.transpose(1, 2) for t in (qg, kg, vg))
    # MLA decode, B=1: 16 heads (CUDA) / 2 heads (CPU), 512 + 64 dims, kv as decode's.
    mh = 16 if cuda else 2
    q_nope, q_pe = randn(1, mh, 512), randn(1, mh, 64)
    ckv, kpe = randn(kv_len // page, page, 512), randn(kv_len // page, page, 64)
    cu = torch.tensor([0, 1], dtype=torch.int32, device=device)
    # merge_states of two [T, H, D] states: decode's output shape.
    o_a, o_b = randn(1, dhq, d), randn(1, dhq, d)
    lse_a = torch.randn(1, dhq, generator=gen, device=device)
    lse_b = torch.randn(1, dhq, generator=gen, device=device)
    # BatchAttention.run, one layer of a planned step: decodes at kv 256 beside one prefill chunk,
    # a short step whose single launch serves it (1 chunk of 64 + 7 decodes), and a longer one
    # whose decodes fill their SMs, which runs the concurrent form on CUDA (1 chunk of 256 + 64
    # decodes: its prefill launch, the decode family's on a second stream, the fork and join).
    # The CPU backend: 2 / 1 heads of 64 (the family's smallest head dim), steps of 4 + 3 and 8 + 8.
    bd = d if cuda else 64

    def batch_step(chunk, decodes):
        q_lens = [chunk] + [1] * decodes
        cu_q = torch.tensor([0] + list(itertools.accumulate(q_lens)), dtype=torch.int32)
        kv = torch.tensor([chunk] + [kv_len] * decodes, dtype=torch.int32)
        pages = -(-max(chunk, kv_len) // page)
        ba = hopattn.BatchAttention(dhq, dhkv, bd, page, device=device)
        ba.plan(cu_q, kv)
        cache = [randn((decodes + 1) * pages, page, dhkv, bd) for _ in range(2)]
        step_table = torch.arange((decodes + 1) * pages, dtype=torch.int32, device=device)
        step_table = step_table.view(decodes + 1, pages)
        step_q = randn(int(cu_q[-1]), dhq, bd)
        args = (step_q, *cache, cu_q.to(device), kv.to(device), step_table)
        form = "concurrent form" if ba._c.planned["concurrent_ctas"] > 0 else "single launch"
        return f"{chunk} + {decodes} decodes, {form}", lambda: ba.run(*args)

    batch_rows = {}
    for chunk, decodes in ((64, 7), (256, 64)) if cuda else ((4, 3), (8, 8)):
        label, fn = batch_step(chunk, decodes)
        batch_rows[f"batch hopattn.BatchAttention.run ({label})"] = fn
    return {
        **batch_rows,
        "fwd hopattn.attention": lambda: hopattn.attention(q, k, v, causal=True),
        "fwd SDPA": lambda: F.scaled_dot_product_attention(
            qt, kt, vt, is_causal=True, enable_gqa=True
        ),
        "fwd hopattn.attention (requires grad)": lambda: hopattn.attention(qg, kg, vg, causal=True),
        "fwd SDPA (requires grad)": lambda: F.scaled_dot_product_attention(
            qgt, kgt, vgt, is_causal=True, enable_gqa=True
        ),
        "decode hopattn.decode": lambda: hopattn.decode(dq, k_cache, v_cache, lens, table),
        "decode hopattn.decode out=": lambda: hopattn.decode(
            dq, k_cache, v_cache, lens, table, out=out, lse_out=lse
        ),
        "decode SDPA (contiguous KV)": lambda: F.scaled_dot_product_attention(
            dqt, kd, vd, enable_gqa=True
        ),
        "mla hopattn.mla": lambda: hopattn.mla(
            q_nope, q_pe, ckv, kpe, cu, lens, table, max_seqlen_q=1
        ),
        "merge hopattn.merge_states": lambda: hopattn.merge_states(o_a, lse_a, o_b, lse_b),
    }


def generic_path(fn):
    """`fn` run with the fast path switched off (hopattn._FAST emptied for the call)."""

    def run():
        saved = hopattn._FAST
        hopattn._FAST = {}
        try:
            return fn()
        finally:
            hopattn._FAST = saved

    return run


def profile(fns, device):
    for name, fn in fns.items():
        if not name.split()[1].startswith("hopattn"):
            continue
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(CALLS):
            fn()
        prof.disable()
        sync(device)
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(15)
        print(f"--- cProfile, {CALLS} calls of {name} (sorted by own time)\n{text.getvalue()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None)
    ap.add_argument("--profile", action="store_true", help="cProfile the hopattn calls")
    ap.add_argument(
        "--no-generic", action="store_true", help="skip the generic-path rows of the hopattn calls"
    )
    args = ap.parse_args()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("host_overhead.py: --device cuda needs a CUDA device")
    fns = workloads(device)
    if not args.no_generic and fast.EXT is not None:
        for name in [n for n in fns if n.split()[1].startswith("hopattn")]:
            fns[f"{name} [generic path]"] = generic_path(fns[name])
    where = torch.cuda.get_device_name(0) if device == "cuda" else "CPU backend"
    lines = [
        f"host cost per eager call, {where}, torch {torch.__version__}, hopattn "
        f"{hopattn.__version__}; {ROUNDS} rounds of {CALLS} calls",
        "",
        "fast path (hopattn._torch_C): "
        + ("active" if fast.EXT is not None else f"not active ({fast.REASON})")
        + (", serving CUDA tensors" if fast.EXT is not None and fast.EXT.built_with_cuda() else ""),
        "",
        "| call | host us / call | wall us / call | fastest round, host us / call |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, fn in fns.items():
        host, wall, fastest = per_call_us(fn, device)
        lines.append(f"| {name} | {host:.1f} | {wall:.1f} | {fastest:.1f} |")
    publish("\n".join(lines) + "\n", "host_overhead.md")
    if args.profile:
        profile(fns, device)


if __name__ == "__main__":
    main()
