"""The torch side shared by the peer benchmarks: inputs, SDPA calls, and GPU timing (CUDA-graph
replays of a call timed with CUDA events, optionally with the L2 cache overwritten before every
call, the overwrite's own time subtracted).
"""

import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from peer_rows import short
from torch.nn.attention import SDPBackend, sdpa_kernel

MIN_SAMPLE_MS = 2.0
SAMPLES = 7
WARMUP = 2


def run_rows(rows, run_row):
    """Runs run_row on each row (progress on stderr), freeing each row's memory after it;
    returns the seconds taken."""
    began = time.time()
    for i, row in enumerate(rows):
        label, size, mask = row.describe()
        print(f"[{i + 1}/{len(rows)}] {label} {size} {mask}", file=sys.stderr, flush=True)
        run_row(row)
        torch.cuda.empty_cache()  # the row's inputs are gone: give their memory back
    return time.time() - began


def setup_line(version, seconds):
    """GPU, torch, cuDNN and hopattn versions, and the run's duration, for a report header."""
    props = torch.cuda.get_device_properties(0)
    return (
        f"{props.name}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
        f"hopattn {version}; bf16; {seconds:.0f} s."
    )


def rel_l2(a, b):
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm()).item()


class L2Flush:
    """Overwrites 4x the L2 cache (a memset kernel) before a timed call."""

    def __init__(self):
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        self.buffer = torch.empty(4 * l2, dtype=torch.uint8, device="cuda")

    def __call__(self):
        self.buffer.fill_(1)


def time_ms(fn, flush=None, stream=None):
    """(median milliseconds of one call of fn, note).

    Each sample is one replay of a CUDA graph of R calls between two CUDA events (R chosen so that
    a sample lasts at least ~2 ms; the graph keeps Python launch gaps out; eager calls where capture
    fails, noted), divided by R, after warm-up calls. With `flush` (an L2Flush) every call is
    preceded by it and a replay of R flushes alone is subtracted. `stream`: the stream to capture
    on (a backward through autograd must run on its forward's stream)."""
    body = fn if flush is None else (lambda: (flush(), fn()))
    run, reps, note = _graph_run(body, stream)
    ms = median_ms(run, reps)
    if flush is not None:
        flush_run, _, _ = _graph_run(flush, stream, reps)
        ms = max(ms - median_ms(flush_run, reps), 0.0)
    return ms, note


def _graph_run(body, stream, reps=None):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream or torch.cuda.current_stream()):
        for _ in range(WARMUP):
            body()
        if reps is None:
            start.record()
            body()
            end.record()
            end.synchronize()
            one = max(start.elapsed_time(end), 1e-3)
            reps = max(1, min(50, math.ceil(MIN_SAMPLE_MS / one)))
    run, note = graph_of(body, reps, stream)
    return run, reps, note


def median_ms(run, reps, samples_count=SAMPLES):
    """Median over samples of the CUDA-event time of run() divided by the reps calls it makes."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(samples_count):
        start.record()
        run()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / reps)
    return statistics.median(samples)


def graph_of(fn, reps, stream=None):
    """(run, note): run() = reps calls of fn as one CUDA graph replay (no launch gaps between
    them), or eagerly where capture fails (then the note says why)."""
    try:
        side = stream or torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(reps):
                fn()
        graph.replay()
        torch.cuda.synchronize()
        return graph.replay, ""
    except Exception as err:
        torch.cuda.synchronize()

        def eager():
            with torch.cuda.stream(stream or torch.cuda.current_stream()):
                for _ in range(reps):
                    fn()

        return eager, f"timed eagerly (graph capture failed: {short(err)})"


# ------------------------------------------------------------------------------------ inputs
class Inputs:
    """bf16 randn inputs of a row in the [B, S, H, D] layout (q, k, v; with `grads` also dout),
    and [B, H, S, D] transposed views of the same memory for the peers (qt, kt, vt; with `grads`
    leaves that require grad, for SDPA's backward)."""

    def __init__(self, row, grads=False):
        gen = torch.Generator(device="cuda").manual_seed(1234)

        def randn(*shape):
            return torch.randn(shape, generator=gen, device="cuda", dtype=torch.bfloat16)

        b, s = row.batch, row.seqlen
        self.q, self.k = randn(b, s, row.hq, row.d), randn(b, s, row.hkv, row.d)
        self.v = randn(b, s, row.hkv, row.d_v)
        self.dout = randn(b, s, row.hq, row.d_v) if grads else None
        self.grads = grads
        self.qt, self.kt, self.vt = (
            self._peer(t.transpose(1, 2)) for t in (self.q, self.k, self.v)
        )
        self._expanded = None

    def _peer(self, t):
        return t.detach().requires_grad_() if self.grads else t

    def expanded_kv(self, group):
        if self._expanded is None:
            self._expanded = tuple(
                self._peer(t.detach().repeat_interleave(group, dim=1)) for t in (self.kt, self.vt)
            )
        return self._expanded


SDPA_BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}


def sdpa_fn(row, x, backend):
    """(fn, note, (q, k, v)): fn() = SDPA on one backend over x's peer views (q, k, v as used).
    With GQA, enable_gqa where the backend takes it, else K/V heads expanded beforehand (untimed,
    noted)."""
    group = row.hq // row.hkv

    def make(k, v, gqa):
        def fn():
            with sdpa_kernel(SDPA_BACKENDS[backend]):
                return F.scaled_dot_product_attention(
                    x.qt, k, v, is_causal=row.causal, enable_gqa=gqa
                )

        return fn

    if group == 1:
        return make(x.kt, x.vt, False), "", (x.qt, x.kt, x.vt)
    fn = make(x.kt, x.vt, True)
    try:
        fn()
        return fn, "", (x.qt, x.kt, x.vt)
    except Exception:  # backend without GQA
        k, v = x.expanded_kv(group)
        return make(k, v, False), "kv heads expanded", (x.qt, k, v)
