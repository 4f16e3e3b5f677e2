#!/usr/bin/env python3
"""Peer benchmark of the fwd family (issue 4): hopattn.attention against PyTorch SDPA with the
cuDNN and the flash backends, FlashInfer's fa3 prefill (FlashAttention-3's kernels, through
BatchPrefillWithRaggedKVCacheWrapper; skipped with a note where flashinfer does not import: peer
kit ../shared/peers), and flex_attention (torch.compile) where SDPA has no equivalent (softcap,
sliding window), all measured in the same process on the same inputs.

Run on the device machine (torch with CUDA and cuDNN, hopattn installed with
``pip install --no-build-isolation .`` from the repository root):

    python bench/peers/fwd_peers.py            # the whole sweep (under 4 minutes on an H200)
    python bench/peers/fwd_peers.py --quick    # 6 rows (under a minute)

Prints a markdown table (also written to $OUT/fwd_peers.md when OUT is set).

Shapes: the issue's sweep, batch * seqlen = 16k tokens and heads * head_dim = 2048 for seqlen
512..16k, head dims 64/128/256, causal and not; Llama-3.1-8B GQA (32 q / 8 kv heads, hd128) at
8k and 32k; a Llama-3.1-70B-like shape (64 / 8, hd128, 16k) plain, causal, causal + softcap 30
and causal + a 1024-key sliding window.

Measurement: bf16 inputs from randn (never zeros) in the [B, S, H, D] layout, viewed as
[B, H, S, D] for the peers (the same memory). Each sample is one replay of a CUDA graph of R calls
between two CUDA events (R chosen so that a sample lasts at least ~2 ms; the graph keeps Python
launch gaps out; eager calls where capture fails, noted); the time of a call is the median over
samples divided by R, after warm-up calls. TFLOP/s count
useful FLOPs only: 4 * D * (visible query/key pairs) per head, so causal halves the work and a
window counts the pairs inside it. "of floor" is the rate over 790 TFLOP/s, the measured dense
bf16 GEMM rate of the H200 this was written for.
"""

import argparse

import torch
from peer_rows import (
    Row,
    add_head_dims_arg,
    flashinfer_with_workspace,
    keep_head_dims,
    llama_rows,
    publish,
    ratio,
    require_cuda,
    short,
    sweep_rows,
    table,
)
from peer_torch import Inputs, run_rows, sdpa_fn, setup_line, time_ms

import hopattn

FLOOR_TFLOPS = 790.0  # measured dense bf16 GEMM rate (docs/perf/NOTES.md)


def all_rows():
    rows = sweep_rows() + llama_rows()
    big = dict(batch=1, seqlen=16384, hq=64, hkv=8, d=128)
    rows.append(Row("70b-like", causal=False, **big))
    rows.append(Row("70b-like", causal=True, flex=True, **big))
    rows.append(Row("70b-like", causal=True, softcap=30.0, peers=(), flex=True, **big))
    rows.append(Row("70b-like", causal=True, window=1024, peers=(), flex=True, **big))
    return rows


def quick_rows():
    big = dict(batch=1, seqlen=16384, hq=64, hkv=8, d=128)
    return [
        Row("sweep", 4, 4096, 16, 16, 128, False),
        Row("sweep", 4, 4096, 16, 16, 128, True),
        Row("sweep", 4, 4096, 32, 32, 64, True),
        Row("sweep", 4, 4096, 8, 8, 256, True),
        Row("llama3.1-8b", 2, 8192, 32, 8, 128, True),
        Row("70b-like", causal=True, softcap=30.0, peers=(), flex=True, **big),
    ]


# ------------------------------------------------------------------------------------ impls
def hopattn_fn(row, x):
    window = (row.window, 0) if row.window >= 0 else (-1, -1)

    def fn():
        return hopattn.attention(
            x.q, x.k, x.v, causal=row.causal, window=window, softcap=row.softcap
        )

    return fn


_fi = None  # flashinfer_with_workspace()'s (module or None, why not, workspace), once


def fa3_fn(row, x):
    """FlashInfer's fa3 prefill over the row's q, k, v as ragged [B * S, H, D] (the same memory);
    plan untimed. Windows and softcap as the row asks (its JIT cache holds hd 64/128/256 and hd128
    with softcap or a window; other combinations compile on first use)."""
    global _fi
    if _fi is None:
        _fi = flashinfer_with_workspace()
    fi, why, ws = _fi
    if fi is None:
        raise RuntimeError(why)
    b, s = row.batch, row.seqlen
    cu = torch.arange(0, (b + 1) * s, s, dtype=torch.int32, device="cuda")
    wrapper = fi.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD", backend="fa3")
    wrapper.plan(
        cu, cu, row.hq, row.hkv, row.d, head_dim_vo=row.d_v, causal=row.causal,
        window_left=row.window, logits_soft_cap=row.softcap if row.softcap > 0 else None,
        q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16,
    )  # fmt: skip
    q, k, v = (t.reshape(b * s, *t.shape[2:]) for t in (x.q, x.k, x.v))

    def fn():
        return wrapper.run(q, k, v)

    fn.keep = wrapper
    return fn


_flex_compiled = None


def flex_fn(row, x):
    global _flex_compiled
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    if _flex_compiled is None:
        _flex_compiled = torch.compile(flex_attention, dynamic=False)
    score_mod = None
    if row.softcap > 0:
        cap = row.softcap

        def score_mod(score, b, h, q_idx, kv_idx):
            return cap * torch.tanh(score / cap)

    block_mask = None
    if row.causal:
        w = row.window

        def mask_mod(b, h, q_idx, kv_idx):
            visible = q_idx >= kv_idx
            if w >= 0:
                visible = visible & (q_idx - kv_idx <= w)
            return visible

        block_mask = create_block_mask(mask_mod, None, None, row.seqlen, row.seqlen)
    gqa = row.hq != row.hkv

    def fn():
        return _flex_compiled(
            x.qt, x.kt, x.vt, score_mod=score_mod, block_mask=block_mask, enable_gqa=gqa
        )

    return fn


def measure(row, name, make):
    try:
        made = make()
        fn, note = made if isinstance(made, tuple) else (made, "")
        ms, timing_note = time_ms(fn)
        row.results[name] = (ms, "; ".join(n for n in (note, timing_note) if n))
    except Exception as err:  # a configuration an implementation does not run
        row.results[name] = (None, short(err))
    torch.cuda.synchronize()


def run_row(row):
    x = Inputs(row)
    measure(row, "hopattn", lambda: hopattn_fn(row, x))
    for backend in row.peers:
        measure(row, backend, lambda b=backend: sdpa_fn(row, x, b)[:2])
    if row.d == row.d_v:  # fa3's hd192 x 128 is not in the kit's cache
        measure(row, "fa3", lambda: fa3_fn(row, x))
    if row.flex:
        measure(row, "flex", lambda: flex_fn(row, x))


# ------------------------------------------------------------------------------------ report
IMPLS = ("hopattn", "cudnn", "flash", "fa3", "flex")


TITLES = (
    "shape", "size", "mask", "hopattn TFLOP/s", "of floor", "cuDNN", "flash", "fa3", "flex",
    "vs cuDNN", "vs flash", "vs fa3", "vs flex",
)  # fmt: skip


def row_cells(rates, cells):
    hop = rates["hopattn"]
    floor = f"{hop / FLOOR_TFLOPS:.0%}" if hop else "-"
    return [cells[0], floor, *cells[1:], *(ratio(hop, rates[name]) for name in IMPLS[1:])]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="6 rows, under a minute")
    add_head_dims_arg(parser)
    args = parser.parse_args()
    require_cuda("fwd_peers.py")

    rows = keep_head_dims(quick_rows() if args.quick else all_rows(), args.head_dims)
    elapsed = run_rows(rows, run_row)
    header = [
        f"# fwd peers ({'quick' if args.quick else 'sweep'})",
        "",
        f"{setup_line(hopattn.__version__, elapsed)} TFLOP/s of useful FLOPs "
        f"(causal halves, a window counts its pairs); of floor = hopattn / {FLOOR_TFLOPS:.0f}; "
        "vs X = hopattn time advantage (X's time / hopattn's).",
        "",
    ]
    publish(table(header, TITLES, rows, IMPLS, Row.flops, row_cells), "fwd_peers.md")


if __name__ == "__main__":
    main()
