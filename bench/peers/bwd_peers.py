#!/usr/bin/env python3
"""Peer benchmark of the bwd family (issue 6): hopattn.attention_backward, normal and
deterministic, against the backward of PyTorch SDPA with the cuDNN and the flash backends, all
measured in the same process on the same inputs.

Run on the device machine (torch with CUDA and cuDNN, hopattn installed with
``pip install --no-build-isolation .`` from the repository root):

    python bench/peers/bwd_peers.py             # the whole sweep (about 2 minutes on an H200)
    python bench/peers/bwd_peers.py --quick     # 6 rows
    python bench/peers/bwd_peers.py --dry-run   # the rows and their FLOPs, no torch, no GPU

First checks hopattn's gradients against SDPA's (fp32 math backend) on small shapes and prints the
relative L2 errors (and that deterministic mode repeats bitwise). Then prints a markdown table
(also written to $OUT/bwd_peers.md when OUT is set).

Shapes: the issue's sweep, batch * seqlen = 16k tokens and heads * head_dim = 2048 for seqlen
512..16k, head dims 64/128/256 and (Dqk, Dv) = (192, 128) (hopattn only: SDPA's flash backend
needs equal head dims), causal and not; Llama-3.1-8B GQA (32 q / 8 kv heads, hd128) at 8k and
32k. Head dims the kernel does not build show n/a with hopattn's message (bwd README: 64 and 128
are built).

Measurement: the backward only. The forward runs once, untimed: hopattn.attention gives out and
lse; SDPA runs on leaves that require grad and keeps its autograd graph. Timed: for hopattn,
hopattn.attention_backward(dout, q, k, v, out, lse, ...) (its outputs and workspace allocated
inside, as an eager caller would); for SDPA, torch.autograd.grad(out, (q, k, v), dout,
retain_graph=True), the forward having run on the capture stream so that its backward is captured
too. Each sample is one replay of a CUDA graph of R x (L2 overwrite, backward) minus a replay of R
overwrites alone (peer_torch.time_ms); where capture fails the call is timed eagerly and the
notes say so. TFLOP/s count 2.5x the forward's useful FLOPs (causal halves them). "det" is
hopattn with deterministic=True; "det / normal" is its speed over the normal mode's (target
>= 0.85).
"""

import argparse

from peer_rows import (
    Row,
    add_head_dims_arg,
    keep_head_dims,
    llama_rows,
    publish,
    ratio,
    require_cuda,
    short,
    sweep_rows,
    table,
)

BWD_FLOP_FACTOR = 2.5  # backward work over the forward's (5 GEMMs against 2)
IMPLS = ("hopattn", "det", "cudnn", "flash")


def bwd_flops(row):
    return BWD_FLOP_FACTOR * row.flops()


def all_rows():
    dims = ((64, 64), (128, 128), (256, 256), (192, 128))
    # SDPA's flash backend needs Dqk == Dv; cuDNN is tried (it refuses or runs).
    peers = lambda d, dv: ("cudnn", "flash") if d == dv else ("cudnn",)  # noqa: E731
    return sweep_rows(dims, peers_for=peers) + llama_rows()


def quick_rows():
    return [
        Row("sweep", 4, 4096, 16, 16, 128, False),
        Row("sweep", 4, 4096, 16, 16, 128, True),
        Row("sweep", 4, 4096, 32, 32, 64, True),
        Row("sweep", 4, 4096, 8, 8, 256, True),
        Row("sweep", 4, 4096, 10, 10, 192, True, peers=("cudnn",), dv=128),
        Row("llama3.1-8b", 2, 8192, 32, 8, 128, True),
    ]


def dry_run(rows):
    """The rows and their work, without torch; checks the FLOP counts against closed forms."""
    for row in rows:
        s, d, dv = row.seqlen, row.d, row.d_v
        pairs = s * s if not row.causal else s * (s + 1) // 2
        want = BWD_FLOP_FACTOR * 2 * (d + dv) * pairs * row.hq * row.batch
        assert bwd_flops(row) == want, (row, bwd_flops(row), want)
        assert row.hq == 2048 // row.d or row.label != "sweep"
        assert row.batch * row.seqlen == 16384 or row.label != "sweep"
        label, size, mask = row.describe()
        print(f"{label:12} {size:28} {mask:7} bwd {bwd_flops(row) / 1e12:7.3f} TFLOP  {row.peers}")
    print(f"{len(rows)} rows; FLOP counts checked")


# ------------------------------------------------------------------------------------ torch side
def check(torch, hopattn, F):
    """hopattn's gradients (normal and deterministic) against SDPA's math backend in fp32 on the
    same bf16 values; prints the relative L2 errors. Deterministic mode must repeat bitwise."""
    from peer_torch import rel_l2

    worst = 0.0
    for b, s, hq, hkv, d, causal in ((2, 333, 8, 2, 128, True), (1, 200, 4, 4, 64, False)):
        gen = torch.Generator(device="cuda").manual_seed(7)
        q, k, v, dout = (
            torch.randn(b, s, h, d, generator=gen, device="cuda", dtype=torch.bfloat16)
            for h in (hq, hkv, hkv, hq)
        )
        leaves = [t.float().transpose(1, 2).requires_grad_() for t in (q, k, v)]
        ref_out = F.scaled_dot_product_attention(*leaves, is_causal=causal, enable_gqa=hq != hkv)
        want = torch.autograd.grad(ref_out, leaves, dout.float().transpose(1, 2))
        want = [g.transpose(1, 2) for g in want]
        out, lse = hopattn.attention(q, k, v, causal=causal)
        errors = {}
        for det in (False, True):
            got = hopattn.attention_backward(
                dout, q, k, v, out, lse, causal=causal, deterministic=det
            )
            errors[det] = [rel_l2(g, w) for g, w in zip(got[:3], want)]
            if det:
                again = hopattn.attention_backward(
                    dout, q, k, v, out, lse, causal=causal, deterministic=True
                )
                same = all(torch.equal(x, y) for x, y in zip(got[:3], again[:3]))
        worst = max(worst, *errors[False], *errors[True])
        print(
            f"check b{b} s{s} h{hq}/{hkv} d{d} {'causal' if causal else 'full'}: rel L2 "
            f"dq/dk/dv {'/'.join(f'{e:.1e}' for e in errors[False])}, deterministic "
            f"{'/'.join(f'{e:.1e}' for e in errors[True])} (repeats bitwise: {same})",
            flush=True,
        )
        if not same:
            worst = float("inf")
    return worst


def run_row(row, torch, hopattn):
    from peer_torch import Inputs, L2Flush, sdpa_fn, time_ms

    flush = L2Flush()
    x = Inputs(row, grads=True)

    def measure(name, make):
        try:
            fn, note, stream = make()
            ms, timing_note = time_ms(fn, flush=flush, stream=stream)
            row.results[name] = (ms, "; ".join(n for n in (note, timing_note) if n))
        except Exception as err:  # a configuration an implementation does not run
            row.results[name] = (None, short(err))
        torch.cuda.synchronize()

    def hop(deterministic):
        out, lse = hopattn.attention(x.q, x.k, x.v, causal=row.causal)  # untimed forward

        def fn():
            return hopattn.attention_backward(
                x.dout, x.q, x.k, x.v, out, lse, causal=row.causal, deterministic=deterministic
            )

        return fn, "", None

    def sdpa(backend):
        stream = torch.cuda.Stream()  # forward here, so autograd runs (and is captured) here
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fwd, note, inputs = sdpa_fn(row, x, backend)
            out = fwd()
            dout = torch.empty_like(out).copy_(x.dout.transpose(1, 2))  # out's strides

        def fn():
            return torch.autograd.grad(out, inputs, dout, retain_graph=True)

        return fn, note, stream

    measure("hopattn", lambda: hop(False))
    measure("det", lambda: hop(True))
    for backend in row.peers:
        measure(backend, lambda b=backend: sdpa(b))


TITLES = (
    "shape", "size", "mask", "hopattn TFLOP/s", "det", "det / normal", "cuDNN", "flash",
    "vs cuDNN", "vs flash",
)  # fmt: skip


def row_cells(rates, cells):
    hop = rates["hopattn"]
    return [
        cells[0], cells[1], ratio(rates["det"], hop), cells[2], cells[3],
        ratio(hop, rates["cudnn"]), ratio(hop, rates["flash"]),
    ]  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="6 rows, under a minute")
    add_head_dims_arg(parser)
    parser.add_argument(
        "--dry-run", action="store_true", help="print the rows and their FLOPs (no torch needed)"
    )
    parser.add_argument(
        "--check",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="compare hopattn's gradients with SDPA's on small shapes first",
    )
    args = parser.parse_args()
    rows = keep_head_dims(quick_rows() if args.quick else all_rows(), args.head_dims)
    if args.dry_run:
        dry_run(rows)
        return

    import torch
    import torch.nn.functional as F

    import hopattn

    require_cuda("bwd_peers.py")
    from peer_torch import run_rows, setup_line

    worst = check(torch, hopattn, F) if args.check else None
    elapsed = run_rows(rows, lambda row: run_row(row, torch, hopattn))
    header = [
        f"# bwd peers ({'quick' if args.quick else 'sweep'})",
        "",
        f"{setup_line(hopattn.__version__, elapsed)} Backward only, CUDA-graph "
        "replays, L2 overwritten before each call. TFLOP/s = 2.5x the forward's useful FLOPs "
        "(causal halves them); det = hopattn deterministic=True; det / normal = its speed over "
        "the normal mode's (target >= 0.85); vs X = hopattn time advantage (X's time / "
        "hopattn's).",
        "",
    ]
    if worst is not None:
        header += [f"Gradient check against SDPA fp32 math: worst rel L2 {worst:.1e}.", ""]
    publish(table(header, TITLES, rows, IMPLS, bwd_flops, row_cells), "bwd_peers.md")


if __name__ == "__main__":
    main()
