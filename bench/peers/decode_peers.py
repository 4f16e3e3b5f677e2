#!/usr/bin/env python3
"""Decode peers: hopattn.decode (paged KV) against PyTorch SDPA on its cuDNN backend (contiguous
KV, enable_gqa), q_len 1, head dim 128, on the shapes of issue 5.

For each (model, batch, kv_len) it times, on fresh random data (never zeros):
  cudnn      SDPA, cuDNN backend, K/V [B, Hkv, S, D] contiguous, bf16
  p16, p64   hopattn.decode, bf16 KV, NHD pages of 16 / 64 tokens in shuffled order
  p16_hnd    the same as p16 in the HND layout (a page of one head is contiguous)
  fp8_p16    hopattn.decode, fp8 e4m3 KV (scale 1), NHD pages of 16

Time: median over samples, each one CUDA-graph replay of 8 x (L2 overwrite, call) minus a replay
of the 8 overwrites alone: GPU time only, as a serving engine replaying graphs sees it (hopattn's
semaphore reset included; Python's per-call cost excluded).
Rate: KV bytes read / time (B * kv_len * Hkv * D * 2 tensors * bytes per element).

Usage (from the repository root, after `pip install --no-build-isolation .`):
  python bench/peers/decode_peers.py            # full grid, < 3 minutes on an H200
  python bench/peers/decode_peers.py --quick    # a subset, < 40 seconds
  python bench/peers/decode_peers.py --models Llama-3-8B   # the full grid of one model
  python bench/peers/decode_peers.py --batches 1,8 --kv-lens 8192   # any sub-grid
With OUT set, writes $OUT/decode_peers.md and $OUT/decode_tbps.png.
"""

import argparse
import os
import sys
import time
from functools import partial

import torch
import torch.nn.functional as F
from peer_torch import median_ms, rel_l2

import hopattn

MODELS = {"Llama-3-8B": (32, 8), "Llama-3-70B/TP8": (64, 8)}  # (Hq, Hkv)
HEAD_DIM = 128
IMPLS = ("cudnn", "p16", "p64", "p16_hnd", "fp8_p16")


def ints(text):
    """A comma-separated list of positive integers (--batches, --kv-lens)."""
    try:
        values = [int(v) for v in text.split(",") if v]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def model_names(text):
    """A comma-separated subset of MODELS (--models)."""
    names = [m for m in text.split(",") if m]
    unknown = [m for m in names if m not in MODELS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"expected a subset of {list(MODELS)}, got {text!r}")
    return names


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="batch 1/32/128, kv 8k, Llama-3-8B")
    ap.add_argument("--reps", type=int, default=None, help="timed calls per point")
    ap.add_argument(
        "--batches", type=ints, default=[1, 8, 32, 64, 128], help="the full grid's batch sizes"
    )
    ap.add_argument(
        "--kv-lens", type=ints, default=[1024, 8192, 32768], help="the full grid's kv lengths"
    )
    ap.add_argument(
        "--models",
        type=model_names,
        default=list(MODELS),
        help=f"comma-separated subset of the full grid's models ({', '.join(MODELS)})",
    )
    ap.add_argument(
        "--check",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="compare hopattn with SDPA on one small shape first",
    )
    return ap.parse_args()


class Timer:
    """Median GPU time of fn() in microseconds, with the L2 overwritten before every call.

    Each sample replays one CUDA graph of `GROUP` x (L2 flush, fn) and subtracts a replay of
    `GROUP` flushes alone, so neither Python's per-call cost (serving engines replay graphs) nor
    launch gaps nor the flush itself are counted. Where capture fails it times eagerly (noted)."""

    GROUP = 8

    def __init__(self):
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        self.flush = torch.empty(4 * l2, dtype=torch.uint8, device="cuda")
        self.eager_notes = []
        self._flush_us = None

    def _graph(self, body):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            body()  # warm-up outside capture (allocator, lazy init)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(self.GROUP):
                body()
        return graph.replay

    def _median_us(self, run, reps):
        run()
        torch.cuda.synchronize()
        return median_ms(run, self.GROUP, reps) * 1e3

    def __call__(self, fn, reps, warmup=3):
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        if self._flush_us is None:
            self._flush_us = self._median_us(self._graph(lambda: self.flush.fill_(1)), 20)

        def body():
            self.flush.fill_(1)
            fn()

        try:
            run = self._graph(body)
        except Exception as err:  # capture refused: time eagerly, and say so
            torch.cuda.synchronize()
            self.eager_notes.append(f"{getattr(fn, 'func', fn)}: {type(err).__name__}")

            def run():
                for _ in range(self.GROUP):
                    body()

        return max(self._median_us(run, reps) - self._flush_us, 0.0)


def paged(k, v, page, layout, dtype):
    """Contiguous [B, S, Hkv, D] k/v -> shuffled pages (NHD or HND) and a block table."""
    b, s, hkv, d = k.shape
    per_req = s // page
    perm = torch.randperm(b * per_req, device=k.device)
    table = perm.view(b, per_req).to(torch.int32)
    caches = []
    for x in (k, v):
        pages = x.reshape(b * per_req, page, hkv, d)
        cache = torch.empty_like(pages)
        cache[perm] = pages
        if layout == "HND":
            cache = cache.transpose(1, 2).contiguous()
        caches.append(cache.to(dtype) if dtype != x.dtype else cache)
    return caches[0], caches[1], table


def sdpa_cudnn(q, k, v):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def check(timer):
    """hopattn vs SDPA on the same values: bf16 pages of 16, and fp8 against SDPA on the
    dequantized cache. Prints the relative L2 errors."""
    torch.manual_seed(1)
    b, s, hq, hkv = 4, 1000 // 16 * 16, 32, 8
    q = torch.randn(b, 1, hq, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, s, hkv, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, s, hkv, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    lens = torch.full((b,), s, dtype=torch.int32, device="cuda")
    out = []
    for dtype in (torch.bfloat16, torch.float8_e4m3fn):
        kc, vc, table = paged(k, v, 16, "NHD", dtype)
        got = hopattn.decode(q, kc, vc, lens, table)
        got = got[0] if isinstance(got, tuple) else got
        kr, vr = (
            (k, v) if dtype == torch.bfloat16 else (k.to(dtype).bfloat16(), v.to(dtype).bfloat16())
        )
        want = F.scaled_dot_product_attention(
            q.transpose(1, 2).float(),
            kr.transpose(1, 2).float(),
            vr.transpose(1, 2).float(),
            enable_gqa=True,
        ).transpose(1, 2)
        out.append(rel_l2(got, want))
    print(f"check (B=4, kv {s}, 32/8 heads): rel L2 bf16 {out[0]:.2e}, fp8 e4m3 {out[1]:.2e}")
    return out


def run_shape(timer, hq, hkv, b, s, reps):
    """Times every implementation on one shape; returns {impl: microseconds or None}."""
    torch.manual_seed(b * 1000003 + s + hq)
    q = torch.randn(b, 1, hq, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    lens = torch.full((b,), s, dtype=torch.int32, device="cuda")
    times = {}
    # cuDNN on contiguous K/V [B, Hkv, S, D]; q [B, Hq, 1, D] as a view.
    k = torch.randn(b, hkv, s, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    qt = q.transpose(1, 2)
    try:
        times["cudnn"] = timer(partial(sdpa_cudnn, qt, k, v), reps)
    except RuntimeError as e:  # backend refused the shape: recorded, not fatal
        print(f"  cudnn B={b} kv={s}: {str(e).splitlines()[0][:100]}", file=sys.stderr)
        times["cudnn"] = None
    # The paged caches hold the same values, [B, S, Hkv, D] order before paging.
    kn, vn = k.transpose(1, 2), v.transpose(1, 2)
    for impl, page, layout, dtype in (
        ("p16", 16, "NHD", torch.bfloat16),
        ("p64", 64, "NHD", torch.bfloat16),
        ("p16_hnd", 16, "HND", torch.bfloat16),
        ("fp8_p16", 16, "NHD", torch.float8_e4m3fn),
    ):
        kc, vc, table = paged(kn, vn, page, layout, dtype)
        times[impl] = timer(partial(hopattn.decode, q, kc, vc, lens, table, kv_layout=layout), reps)
        del kc, vc, table
    del k, v, kn, vn
    torch.cuda.empty_cache()
    return times


def kv_bytes(b, s, hkv, elem):
    return b * s * hkv * HEAD_DIM * 2 * elem


def fmt(x, spec):
    return "n/a" if x is None else format(x, spec)


def table(rows):
    head = (
        "| model | B | kv | cuDNN us | cuDNN TB/s | p16 us | p16 TB/s | p16 / cuDNN | "
        "p64 TB/s | p16 HND TB/s | fp8 p16 us | fp8 TB/s (fp8 bytes) | fp8 speedup vs p16 |"
    )
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for r in rows:
        t = r["t"]
        bf = kv_bytes(r["b"], r["s"], r["hkv"], 2)
        tb = {
            k: (None if t[k] is None else (bf if k != "fp8_p16" else bf / 2) / t[k] / 1e6)
            for k in IMPLS
        }
        ratio = None if t["cudnn"] is None else t["cudnn"] / t["p16"]
        lines.append(
            f"| {r['model']} | {r['b']} | {r['s'] // 1024}k | {fmt(t['cudnn'], '.1f')} | "
            f"{fmt(tb['cudnn'], '.2f')} | {t['p16']:.1f} | {tb['p16']:.2f} | "
            f"{fmt(ratio, '.2f')} | {tb['p64']:.2f} | {tb['p16_hnd']:.2f} | "
            f"{t['fp8_p16']:.1f} | {tb['fp8_p16']:.2f} | {t['p16'] / t['fp8_p16']:.2f}x |"
        )
    return "\n".join(lines)


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(1, len(models), figsize=(6.5 * len(models), 4.5), squeeze=False)
    styles = {1024: ":", 8192: "--", 32768: "-"}
    colors = {
        "cudnn": "black",
        "p16": "tab:blue",
        "p64": "tab:green",
        "p16_hnd": "tab:purple",
        "fp8_p16": "tab:red",
    }
    for ax, model in zip(axes[0], models):
        for s in sorted({r["s"] for r in rows}):
            sel = sorted(
                (r for r in rows if r["model"] == model and r["s"] == s), key=lambda r: r["b"]
            )
            for impl in IMPLS:
                pts = [
                    (
                        r["b"],
                        kv_bytes(r["b"], s, r["hkv"], 1 if impl == "fp8_p16" else 2)
                        / r["t"][impl]
                        / 1e6,
                    )
                    for r in sel
                    if r["t"][impl] is not None
                ]
                if pts:
                    ax.plot(
                        *zip(*pts),
                        styles.get(s, "-"),
                        color=colors[impl],
                        marker="o",
                        markersize=3,
                        label=f"{impl} kv {s // 1024}k",
                    )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch")
        ax.set_ylabel("KV bytes read / time (TB/s)")
        ax.set_title(f"decode, {model}, hd128, q_len 1")
        ax.grid(True, alpha=0.3)
    axes[0][-1].legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    args = parse_args()
    if args.quick:
        grid, models, reps = ([1, 32, 128], [8192]), ["Llama-3-8B"], args.reps or 10
    else:
        grid, models, reps = (
            (args.batches, args.kv_lens),
            args.models,
            args.reps or 20,
        )
    dev = torch.cuda.get_device_properties(0)
    print(
        f"{dev.name}, {dev.multi_processor_count} SMs, torch {torch.__version__}, "
        f"cuDNN {torch.backends.cudnn.version()}"
    )
    timer = Timer()
    started = time.time()
    errors = check(timer) if args.check else None
    rows = []
    for model in models:
        hq, hkv = MODELS[model]
        for s in grid[1]:
            for b in grid[0]:
                t = run_shape(timer, hq, hkv, b, s, reps)
                rows.append(dict(model=model, b=b, s=s, hkv=hkv, t=t))
                print(
                    f"  {model} B={b} kv={s}: "
                    + ", ".join(f"{k} {fmt(v, '.1f')} us" for k, v in t.items()),
                    flush=True,
                )
    md = table(rows)
    print()
    print(md)
    print(f"\n{len(rows)} shapes in {time.time() - started:.0f} s")
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "decode_peers.md"), "w") as f:
            f.write(
                f"{dev.name}, torch {torch.__version__}, cuDNN "
                f"{torch.backends.cudnn.version()}, median of {reps} graph replays of 8 calls, "
                "L2 flushed\n\n"
            )
            if errors:
                f.write(f"check rel L2: bf16 {errors[0]:.2e}, fp8 e4m3 {errors[1]:.2e}\n\n")
            f.write(md + "\n")
        try:
            plot(rows, os.path.join(out, "decode_tbps.png"))
        except Exception as e:  # the table is already written
            print(f"plot failed: {e}", file=sys.stderr)


if __name__ == "__main__":
    main()
