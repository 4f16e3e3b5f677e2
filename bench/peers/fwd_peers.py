#!/usr/bin/env python3
"""Peer benchmark of the fwd family (issue 4): hopattn.attention against PyTorch SDPA with the
cuDNN and the flash backends, and flex_attention (torch.compile) where SDPA has no equivalent
(softcap, sliding window), all measured in the same process on the same inputs.

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
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import hopattn

FLOOR_TFLOPS = 790.0  # measured dense bf16 GEMM rate (docs/perf/NOTES.md)
TOKENS = 16 * 1024
WIDTH = 2048  # heads * head_dim
MIN_SAMPLE_MS = 2.0
SAMPLES = 7
WARMUP = 2


@dataclass
class Row:
    label: str
    batch: int
    seqlen: int
    hq: int
    hkv: int
    d: int
    causal: bool
    softcap: float = 0.0
    window: int = -1  # keys left of the diagonal, -1: unbounded (always causal when set)
    peers: tuple = ("cudnn", "flash")  # SDPA backends that can express the row
    flex: bool = False
    results: dict = field(default_factory=dict)  # impl -> (ms or None, note)

    def visible_pairs(self):
        s = self.seqlen
        if not self.causal:
            return s * s
        if self.window < 0:
            return s * (s + 1) // 2
        w = self.window
        # Row i sees keys max(0, i - w) .. i: min(i, w) + 1 of them.
        full = max(0, s - w)  # rows with i >= w see w + 1 keys
        return full * (w + 1) + sum(i + 1 for i in range(min(s, w)))

    def flops(self):
        return 4.0 * self.d * self.visible_pairs() * self.hq * self.batch

    def describe(self):
        parts = [self.label, f"b{self.batch} s{self.seqlen} h{self.hq}/{self.hkv} d{self.d}"]
        flags = ["causal" if self.causal else "full"]
        if self.softcap > 0:
            flags.append(f"softcap {self.softcap:g}")
        if self.window >= 0:
            flags.append(f"window {self.window}")
        return parts[0], parts[1], ", ".join(flags)


def sweep_rows():
    rows = []
    for d in (64, 128, 256):
        for seqlen in (512, 1024, 2048, 4096, 8192, 16384):
            for causal in (False, True):
                h = WIDTH // d
                rows.append(Row("sweep", TOKENS // seqlen, seqlen, h, h, d, causal))
    for seqlen in (8192, 32768):
        for causal in (False, True):
            rows.append(Row("llama3.1-8b", max(1, TOKENS // seqlen), seqlen, 32, 8, 128, causal))
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


# ------------------------------------------------------------------------------------ timing
def time_ms(fn):
    """(median milliseconds of one call of fn, note); see the module docstring."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(WARMUP):
        fn()
    start.record()
    fn()
    end.record()
    end.synchronize()
    one = max(start.elapsed_time(end), 1e-3)
    reps = max(1, min(50, math.ceil(MIN_SAMPLE_MS / one)))
    run, note = graph_of(fn, reps)
    samples = []
    for _ in range(SAMPLES):
        start.record()
        run()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / reps)
    return statistics.median(samples), note


def graph_of(fn, reps):
    """reps calls of fn as one CUDA graph replay (no launch gaps between them), or eagerly where
    capture fails."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(reps):
                fn()
        graph.replay()
        torch.cuda.synchronize()
        return graph.replay, ""
    except Exception as err:
        torch.cuda.synchronize()

        def eager():
            for _ in range(reps):
                fn()

        return eager, f"timed eagerly (graph capture failed: {short(err)})"


def short(err):
    text = f"{type(err).__name__}: {err}".splitlines()[0]
    return text if len(text) <= 90 else text[:87] + "..."


# ------------------------------------------------------------------------------------ impls
class Inputs:
    def __init__(self, row):
        gen = torch.Generator(device="cuda").manual_seed(1234)
        shape_q = (row.batch, row.seqlen, row.hq, row.d)
        shape_kv = (row.batch, row.seqlen, row.hkv, row.d)

        def randn(shape):
            return torch.randn(shape, generator=gen, device="cuda", dtype=torch.bfloat16)

        self.q, self.k, self.v = randn(shape_q), randn(shape_kv), randn(shape_kv)
        # Peers take [B, H, S, D]: the same memory, transposed views.
        self.qt, self.kt, self.vt = (t.transpose(1, 2) for t in (self.q, self.k, self.v))
        self._expanded = None

    def expanded_kv(self, group):
        if self._expanded is None:
            self._expanded = tuple(t.repeat_interleave(group, dim=1) for t in (self.kt, self.vt))
        return self._expanded


def hopattn_fn(row, x):
    window = (row.window, 0) if row.window >= 0 else (-1, -1)

    def fn():
        return hopattn.attention(
            x.q, x.k, x.v, causal=row.causal, window=window, softcap=row.softcap
        )

    return fn


def sdpa_fn(row, x, backend):
    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
    group = row.hq // row.hkv

    def make(k, v, gqa):
        def fn():
            with sdpa_kernel(backends[backend]):
                return F.scaled_dot_product_attention(
                    x.qt, k, v, is_causal=row.causal, enable_gqa=gqa
                )

        return fn

    if group == 1:
        return make(x.kt, x.vt, False), ""
    fn = make(x.kt, x.vt, True)
    try:
        fn()
        return fn, ""
    except Exception:  # backend without GQA: K/V heads expanded beforehand (not timed)
        k, v = x.expanded_kv(group)
        return make(k, v, False), "kv heads expanded"


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
        measure(row, backend, lambda b=backend: sdpa_fn(row, x, b))
    if row.flex:
        measure(row, "flex", lambda: flex_fn(row, x))


# ------------------------------------------------------------------------------------ report
IMPLS = ("hopattn", "cudnn", "flash", "flex")


def rate(row, name):
    ms = row.results.get(name, (None, ""))[0]
    return None if ms is None else row.flops() / (ms * 1e-3) / 1e12


def table(rows, header_lines):
    out = list(header_lines)
    out.append(
        "| shape | size | mask | hopattn TFLOP/s | of floor | cuDNN | flash | flex "
        "| vs cuDNN | vs flash | vs flex |"
    )
    out.append("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    notes = []
    for row in rows:
        label, size, mask = row.describe()
        rates = {name: rate(row, name) for name in IMPLS}
        cells = []
        for name in IMPLS:
            if name not in row.results:
                cells.append("-")
            elif rates[name] is None:
                cells.append("n/a")
                notes.append(f"{label} {size} {mask}: {name}: {row.results[name][1]}")
            else:
                cells.append(f"{rates[name]:.0f}")
                if row.results[name][1]:
                    notes.append(f"{label} {size} {mask}: {name}: {row.results[name][1]}")
        hop = rates["hopattn"]
        floor = f"{hop / FLOOR_TFLOPS:.0%}" if hop else "-"
        ratios = []
        for name in IMPLS[1:]:
            peer = rates[name]
            ratios.append(f"{hop / peer:.2f}x" if hop and peer else "-")
        out.append(
            f"| {label} | {size} | {mask} | {cells[0]} | {floor} | "
            + " | ".join(cells[1:])
            + " | "
            + " | ".join(ratios)
            + " |"
        )
    if notes:
        out.append("")
        out.append("Notes (n/a = the implementation refused the configuration):")
        out.extend(f"- {n}" for n in notes)
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="6 rows, under a minute")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("fwd_peers.py: needs a CUDA device")

    rows = quick_rows() if args.quick else sweep_rows()
    began = time.time()
    for i, row in enumerate(rows):
        label, size, mask = row.describe()
        print(f"[{i + 1}/{len(rows)}] {label} {size} {mask}", file=sys.stderr, flush=True)
        run_row(row)
        torch.cuda.empty_cache()  # the row's inputs are gone: give their memory back
    elapsed = time.time() - began

    props = torch.cuda.get_device_properties(0)
    header = [
        f"# fwd peers ({'quick' if args.quick else 'sweep'})",
        "",
        f"{props.name}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
        f"hopattn {hopattn.__version__}; bf16; {elapsed:.0f} s. TFLOP/s of useful FLOPs "
        f"(causal halves, a window counts its pairs); of floor = hopattn / {FLOOR_TFLOPS:.0f}; "
        "vs X = hopattn time advantage (X's time / hopattn's).",
        "",
    ]
    text = table(rows, header)
    print(text)
    out_dir = os.environ.get("OUT")
    if out_dir:
        with open(os.path.join(out_dir, "fwd_peers.md"), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
