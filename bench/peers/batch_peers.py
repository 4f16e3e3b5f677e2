#!/usr/bin/env python3
"""Peer benchmark of the batch family: hopattn.BatchAttention against hopattn's own separate
launches and FlashInfer's persistent BatchAttention and separate wrappers, on serving steps of
Llama-3.1-8B attention (32 q heads / 8 kv heads, head dim 128, pages of 16, bf16, causal).

Workloads (a request's kv_len = its cached tokens + its new q tokens):
  mixed       4 prefill chunks of 2048 new tokens (cached 0, 0, 4096, 8192) + 124 decodes at 4096
  long-chunk  1 chunk of 8192 new tokens (cached 0) + 255 decodes at 2k..16k cached (evenly spread)
  decode      128 decodes at 8192 cached
  prefill     8 prefill chunks of 2048 new tokens (cached 0)

Implementations (same inputs, same process):
  batch       hopattn.BatchAttention.run (plan() excluded; its host time reported separately)
  separate    hopattn.attention (varlen paged) for the prefill requests + hopattn.decode for the
              decode requests: two launches
  varlen      one hopattn.attention varlen paged launch over the whole step
  fi_batch    flashinfer.BatchAttention (persistent; plan untimed, it synchronizes)
  fi_separate FlashInfer BatchPrefillWithPagedKVCacheWrapper (fa3) + BatchDecodeWithPagedKVCache
              Wrapper (fa2): two launches
FlashInfer rows are skipped with a note where flashinfer does not import (peer kit:
../shared/peers/README.md).

Timing: CUDA events around R back-to-back calls (by default one CUDA-graph replay of R calls,
peer_torch.time_ms, where capture works, else eager, noted; --eager times eager calls), after
warm-up calls, median of 7 samples, divided by R. The L2 cache is NOT flushed between calls
(--flush-l2 overwrites it before each call and subtracts the overwrite's time). "batch vs X" =
X's time / batch's time (above 1: hopattn batch faster).

Correctness, before timing, on each workload: max |difference| of out (and lse) of hopattn batch
against the separate hopattn launches, the single varlen launch and FlashInfer's persistent
kernel (out only).

Run on the device machine from the repository root (hopattn installed with
``pip install --no-build-isolation .``):

    source .peers/install_on_device.sh .peers && python bench/peers/batch_peers.py
    python bench/peers/batch_peers.py --workloads mixed,decode --json /tmp/batch.json
    python bench/peers/batch_peers.py --dry-run     # the workloads and their work, no torch

--peers-only times FlashInfer's rows alone, without importing hopattn (no package install on the
device: hopattn's rows of the same call then come from the CLI, `hopattn bench batch --step a..d
--impl kernel`, whose presets are these workloads; use --flush-l2 to match the CLI's flushed L2).

With OUT set the markdown goes to $OUT/batch_peers.md and the JSON to $OUT/batch_peers.json too.
"""

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from dataclasses import dataclass, field

from peer_rows import flashinfer_with_workspace, publish, ratio, require_cuda, short

HQ, HKV, D, PAGE = 32, 8, 128, 16
SCALE = D**-0.5
IMPLS = ("batch", "separate", "varlen", "fi_batch", "fi_separate")
FI_IMPLS = ("fi_batch", "fi_separate")


# ------------------------------------------------------------------------------------ workloads
@dataclass
class Workload:
    name: str
    requests: list  # (q_len, cached) per request, prefill chunks first, then decodes
    results: dict = field(default_factory=dict)  # impl -> (us or None, note)
    checks: dict = field(default_factory=dict)  # impl -> (max |d out|, max |d lse| or None)
    plan_us: float = None
    fi_plan_us: float = None
    planned: dict = None

    @property
    def q_lens(self):
        return [q for q, _ in self.requests]

    @property
    def kv_lens(self):
        return [q + c for q, c in self.requests]

    @property
    def prefill(self):
        """Indices of the requests with more than one new token (the prefill chunks)."""
        return [i for i, (q, _) in enumerate(self.requests) if q > 1]

    @property
    def decodes(self):
        return [i for i, (q, _) in enumerate(self.requests) if q == 1]

    def tokens(self):
        return sum(self.q_lens)

    def flops(self):
        """2 * (Dqk + Dv) per causal-visible (query, key) pair and q head (bottom-right)."""
        pairs = sum(q * (q + c) - q * (q - 1) // 2 for q, c in self.requests)
        return 2.0 * 2 * D * HQ * pairs

    def kv_bytes(self):
        return sum(self.kv_lens) * HKV * D * 2 * 2

    def describe(self):
        p, d = len(self.prefill), len(self.decodes)
        return self.name, f"{p} prefill + {d} decode, {self.tokens()} q tokens", "causal"

    def us(self, impl):
        return self.results.get(impl, (None, ""))[0]


def workloads():
    mixed = [(2048, c) for c in (0, 0, 4096, 8192)] + [(1, 4096)] * 124
    spread = [2048 + round(i * (16384 - 2048) / 254) for i in range(255)]
    long_chunk = [(8192, 0)] + [(1, c) for c in spread]
    return [
        Workload("mixed", mixed),
        Workload("long-chunk", long_chunk),
        Workload("decode", [(1, 8192)] * 128),
        Workload("prefill", [(2048, 0)] * 8),
    ]


def dry_run(rows):
    for w in rows:
        label, size, mask = w.describe()
        print(
            f"{label:11} {size:42} {w.flops() / 1e12:7.2f} TFLOP  {w.kv_bytes() / 1e9:6.2f} GB KV"
            f"  max kv {max(w.kv_lens)}"
        )
    a = rows[0]
    assert a.tokens() == 4 * 2048 + 124 and len(a.requests) == 128
    print(f"{len(rows)} workloads")


# ------------------------------------------------------------------------------------ report
def fmt(x, spec):
    return "n/a" if x is None else format(x, spec)


def markdown(header, rows):
    lines = list(header)
    lines += ["Correctness (max |difference| against hopattn batch, out / lse):", ""]
    for w in rows:
        parts = [
            f"{impl} {fmt(d_out, '.2e')} / {fmt(d_lse, '.2e')}"
            for impl, (d_out, d_lse) in w.checks.items()
        ]
        lines.append(f"- {w.name}: " + (", ".join(parts) if parts else "not checked"))
    lines.append("")
    titles = ["workload", "step", "plan us (host)"]
    titles += [f"{impl} us" for impl in IMPLS]
    titles += [f"batch vs {impl}" for impl in IMPLS[1:]]
    titles += ["batch TFLOP/s", "fi plan us"]
    lines.append("| " + " | ".join(titles) + " |")
    lines.append("| --- | --- |" + " ---: |" * (len(titles) - 2))
    notes = []
    for w in rows:
        label, size, _ = w.describe()
        cells = [label, size, fmt(w.plan_us, ".1f")]
        cells += [fmt(w.us(i), ".1f") if i in w.results else "-" for i in IMPLS]
        cells += [ratio(w.us(i), w.us("batch")) for i in IMPLS[1:]]
        hop = w.us("batch")
        cells += [fmt(hop and w.flops() / hop / 1e6, ".0f"), fmt(w.fi_plan_us, ".0f")]
        lines.append("| " + " | ".join(cells) + " |")
        for impl in IMPLS:
            note = w.results.get(impl, (None, ""))[1]
            if note:
                notes.append(f"{label}: {impl}: {note}")
    if notes:
        lines += ["", "Notes (n/a = not run: the reason follows):", ""]
        lines += [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def record(setup, rows):
    out = []
    for w in rows:
        hop = w.us("batch")
        out.append(
            dict(
                workload=w.name,
                requests=[dict(q_len=q, cached=c) for q, c in w.requests],
                tokens=w.tokens(),
                flops=w.flops(),
                kv_bytes=w.kv_bytes(),
                plan_us_host=w.plan_us,
                fi_plan_us_host=w.fi_plan_us,
                planned=w.planned,
                impls={
                    impl: dict(
                        us=us,
                        note=note,
                        batch_speedup=(us / hop) if us and hop else None,
                    )
                    for impl, (us, note) in w.results.items()
                },
                max_abs_diff={i: dict(out=o, lse=s) for i, (o, s) in w.checks.items()},
            )
        )
    return json.dumps(dict(setup=setup, workloads=out), indent=1)


# ------------------------------------------------------------------------------------ torch side
class Bench:
    def __init__(self, args):
        import torch

        hopattn = None
        if not args.peers_only:
            import hopattn

        self.torch, self.hopattn, self.args = torch, hopattn, args
        self.flush = None
        if args.flush_l2:
            from peer_torch import L2Flush

            self.flush = L2Flush()
        self.fi, self.fi_error, self.fi_workspace = flashinfer_with_workspace()

    def version(self):
        return getattr(self.fi, "__version__", "?") if self.fi else "absent"

    # -------------------------------------------------------------------------------- inputs
    def inputs(self, w):
        torch = self.torch
        gen = torch.Generator(device="cuda").manual_seed(len(w.requests) * 7919 + w.tokens())
        x = argparse.Namespace()
        x.q_lens, x.kv_lens = w.q_lens, w.kv_lens
        pages_per = [-(-n // PAGE) for n in x.kv_lens]
        num_pages = sum(pages_per)
        perm = torch.randperm(num_pages, generator=gen, device="cuda").to(torch.int32)
        x.max_pages = max(pages_per)
        table = torch.zeros(len(pages_per), x.max_pages, dtype=torch.int32, device="cuda")
        starts = [0]
        for n in pages_per:
            starts.append(starts[-1] + n)
        for b, n in enumerate(pages_per):
            table[b, :n] = perm[starts[b] : starts[b] + n]
        x.page_table = table
        x.kv_indptr = torch.tensor(starts, dtype=torch.int32, device="cuda")
        x.kv_indices = perm  # request b's pages are perm[starts[b]:starts[b+1]], in order
        x.last_page_len = torch.tensor(
            [n - (p - 1) * PAGE for n, p in zip(x.kv_lens, pages_per)],
            dtype=torch.int32,
            device="cuda",
        )
        cu = [0]
        for q in x.q_lens:
            cu.append(cu[-1] + q)
        x.cu_host = torch.tensor(cu, dtype=torch.int32)
        x.kv_host = torch.tensor(x.kv_lens, dtype=torch.int32)
        x.cu, x.kv = x.cu_host.cuda(), x.kv_host.cuda()

        def randn(*shape):
            return torch.randn(shape, generator=gen, device="cuda", dtype=torch.bfloat16)

        x.q = randn(w.tokens(), HQ, D)
        x.k, x.v = randn(num_pages, PAGE, HKV, D), randn(num_pages, PAGE, HKV, D)
        x.out = torch.empty_like(x.q)
        x.lse = torch.empty(w.tokens(), HQ, dtype=torch.float32, device="cuda")
        # The prefill requests come first: their rows are q[:n_prefill_rows].
        p, d = w.prefill, w.decodes
        assert p == list(range(len(p))), "prefill requests first"
        x.n_prefill, x.n_decode = len(p), len(d)
        x.prefill_rows = cu[len(p)]
        return x

    # -------------------------------------------------------------------------------- hopattn
    def hop_batch(self, w, x):
        ba = self.hopattn.BatchAttention(
            HQ, HKV, D, PAGE, causal=True, max_batch=max(256, len(w.requests)),
            max_tokens=max(16384, w.tokens()), device="cuda",
        )  # fmt: skip
        ba.plan(x.cu_host, x.kv_host)
        took = []
        for _ in range(20):
            # An idle stream: plan() reuses its pinned staging buffer of two plans ago once that
            # upload has left, which back-to-back calls behind queued GPU work would wait for (an
            # engine plans once a step, so its uploads are long done); the host cost is timed.
            self.torch.cuda.synchronize()
            began = time.perf_counter()
            ba.plan(x.cu_host, x.kv_host)
            took.append((time.perf_counter() - began) * 1e6)
        w.plan_us = statistics.median(took)
        w.planned = dict(ba._c.planned)
        run = ba.run
        args = (x.q, x.k, x.v, x.cu, x.kv, x.page_table)

        def fn():
            return run(*args, out=x.out, lse_out=x.lse)

        fn.keep = ba  # alive as long as fn
        return fn

    def hop_separate(self, w, x):
        hop, torch = self.hopattn, self.torch
        np_, nd, rows = x.n_prefill, x.n_decode, x.prefill_rows
        out, lse = torch.empty_like(x.out), torch.empty_like(x.lse)
        calls = []
        if np_:
            pkw = dict(
                causal=True, cu_seqlens_q=x.cu[: np_ + 1], max_seqlen_q=max(x.q_lens[:np_]),
                max_seqlen_k=max(x.kv_lens[:np_]), page_table=x.page_table[:np_],
                kv_lens=x.kv[:np_], out=out[:rows], lse_out=lse[:rows],
            )  # fmt: skip
            qp = x.q[:rows]
            calls.append(lambda: hop.attention(qp, x.k, x.v, **pkw))
        if nd:
            qd = x.q[rows:].view(nd, 1, HQ, D)
            od, ld = out[rows:].view(nd, 1, HQ, D), lse[rows:].view(nd, 1, HQ)
            kvd, ptd = x.kv[np_:], x.page_table[np_:]
            calls.append(lambda: hop.decode(qd, x.k, x.v, kvd, ptd, out=od, lse_out=ld))

        def fn():
            for c in calls:
                c()
            return out, lse

        return fn

    def hop_varlen(self, w, x):
        out, lse = self.torch.empty_like(x.out), self.torch.empty_like(x.lse)
        kw = dict(
            causal=True, cu_seqlens_q=x.cu, max_seqlen_q=max(x.q_lens),
            max_seqlen_k=max(x.kv_lens), page_table=x.page_table, kv_lens=x.kv, out=out,
            lse_out=lse,
        )  # fmt: skip
        attention = self.hopattn.attention

        def fn():
            return attention(x.q, x.k, x.v, **kw)

        return fn

    # -------------------------------------------------------------------------------- FlashInfer
    def fi_batch(self, w, x):
        if self.fi is None:
            raise RuntimeError(self.fi_error)
        torch = self.torch
        wrapper = self.fi.BatchAttention(kv_layout="NHD")
        began = time.perf_counter()
        wrapper.plan(
            x.cu, x.kv_indptr, x.kv_indices, x.kv, HQ, HKV, D, D, PAGE, causal=True,
            sm_scale=SCALE, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16,
        )  # fmt: skip
        w.fi_plan_us = (time.perf_counter() - began) * 1e6
        out = torch.empty_like(x.out)

        def fn():
            return wrapper.run(x.q, (x.k, x.v), out=out)

        fn.keep = wrapper
        return fn

    def fi_separate(self, w, x):
        if self.fi is None:
            raise RuntimeError(self.fi_error)
        torch, fi = self.torch, self.fi
        np_, nd, rows = x.n_prefill, x.n_decode, x.prefill_rows
        calls, keep = [], []
        if np_:
            pre = fi.BatchPrefillWithPagedKVCacheWrapper(self.fi_workspace, "NHD", backend="fa3")
            pre.plan(
                x.cu[: np_ + 1], x.kv_indptr[: np_ + 1], x.kv_indices, x.last_page_len[:np_],
                HQ, HKV, D, PAGE, causal=True, sm_scale=SCALE, q_data_type=torch.bfloat16,
                kv_data_type=torch.bfloat16,
            )  # fmt: skip
            qp = x.q[:rows]
            calls.append(lambda: pre.run(qp, (x.k, x.v)))
            keep.append(pre)
        if nd:
            # A second workspace: the two wrappers' plans must not overwrite each other.
            if getattr(self, "fi_workspace2", None) is None:
                self.fi_workspace2 = torch.zeros_like(self.fi_workspace)
            dec = fi.BatchDecodeWithPagedKVCacheWrapper(self.fi_workspace2, "NHD", backend="fa2")
            indptr = x.kv_indptr[np_:] - x.kv_indptr[np_]
            indices = x.kv_indices[int(x.kv_indptr[np_]) :]
            dec.plan(
                indptr, indices, x.last_page_len[np_:], HQ, HKV, D, PAGE, sm_scale=SCALE,
                q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16,
                o_data_type=torch.bfloat16,
            )  # fmt: skip
            qd = x.q[rows:]
            calls.append(lambda: dec.run(qd, (x.k, x.v)))
            keep.append(dec)

        def fn():
            return [c() for c in calls]

        fn.keep = keep
        return fn

    # -------------------------------------------------------------------------------- check, time
    def check(self, w, fns):
        torch = self.torch
        ref_out, ref_lse = (t.clone() for t in fns["batch"]())
        for impl in ("separate", "varlen", "fi_batch"):
            if impl not in fns:
                continue
            try:
                got = fns[impl]()
                out, lse = (got[0], got[1]) if impl != "fi_batch" else (got[0], None)
                torch.cuda.synchronize()
                d_out = (out.float() - ref_out.float()).abs().max().item()
                d_lse = None
                if lse is not None:
                    finite = torch.isfinite(ref_lse)
                    d_lse = (lse[finite] - ref_lse[finite]).abs().max().item()
                w.checks[impl] = (d_out, d_lse)
            except Exception as err:
                w.checks[impl] = (None, None)
                print(f"  check {impl}: {short(err)}", file=sys.stderr, flush=True)
        parts = [f"{i} {fmt(o, '.2e')}/{fmt(s, '.2e')}" for i, (o, s) in w.checks.items()]
        print(f"  {w.name}: max |diff| vs batch (out/lse): " + ", ".join(parts), flush=True)

    def time_us(self, fn):
        from peer_torch import median_ms, time_ms

        torch = self.torch
        if not self.args.eager:
            ms, note = time_ms(fn, flush=self.flush)
            return ms * 1e3, note
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        reps = self.args.reps

        def run():
            for _ in range(reps):
                if self.flush is not None:
                    self.flush()
                fn()

        return median_ms(run, reps, self.args.samples) * 1e3, "eager" + (
            " (flush time included)" if self.flush is not None else ""
        )

    def run_row(self, w):
        torch = self.torch
        x = self.inputs(w)
        fns = {}
        makers = dict(
            batch=self.hop_batch, separate=self.hop_separate, varlen=self.hop_varlen,
            fi_batch=self.fi_batch, fi_separate=self.fi_separate,
        )  # fmt: skip
        for impl in IMPLS:
            if self.args.peers_only and impl not in FI_IMPLS:
                w.results[impl] = (None, "--peers-only")
                continue
            try:
                fns[impl] = makers[impl](w, x)
            except Exception as err:
                w.results[impl] = (None, short(err))
                if impl not in FI_IMPLS or self.fi is not None:
                    print(f"  {impl}: {short(err)}", file=sys.stderr, flush=True)
        torch.cuda.synchronize()
        if "batch" in fns and self.args.check:
            try:
                self.check(w, fns)
            except Exception as err:
                print(f"  check failed: {short(err)}", file=sys.stderr, flush=True)
        for impl, fn in fns.items():
            try:
                w.results[impl] = self.time_us(fn)
            except Exception as err:
                w.results[impl] = (None, short(err))
                print(f"  {impl}: {short(err)}", file=sys.stderr, flush=True)
            torch.cuda.synchronize()
        hop = w.us("batch")
        parts = [
            f"{i} {fmt(w.us(i), '.1f')} us"
            + (f" ({w.us(i) / hop:.2f}x)" if hop and w.us(i) else "")
            for i in IMPLS
        ]
        print(f"  {w.name}: plan {fmt(w.plan_us, '.1f')} us host; " + "; ".join(parts), flush=True)
        del fns, x


def main():
    names = [w.name for w in workloads()]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--workloads", default=",".join(names), help=f"comma-separated, of {','.join(names)}"
    )
    ap.add_argument("--eager", action="store_true", help="time eager calls, not graph replays")
    ap.add_argument("--reps", type=int, default=10, help="calls per sample with --eager")
    ap.add_argument("--samples", type=int, default=7, help="samples (median) with --eager")
    ap.add_argument("--flush-l2", action="store_true", help="overwrite L2 before each call")
    ap.add_argument(
        "--check", action=argparse.BooleanOptionalAction, default=True, help="compare first"
    )
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    ap.add_argument("--dry-run", action="store_true", help="print the workloads (no torch)")
    ap.add_argument(
        "--peers-only", action="store_true", help="FlashInfer's rows alone (no hopattn import)"
    )
    args = ap.parse_args()
    wanted = [n.strip() for n in args.workloads.split(",") if n.strip()]
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        ap.error(f"unknown workloads {', '.join(unknown)} (choose from {','.join(names)})")
    rows = [w for w in workloads() if w.name in wanted]
    if args.dry_run:
        dry_run(rows)
        return

    require_cuda("batch_peers.py")
    from peer_torch import run_rows, setup_line

    warnings.filterwarnings("ignore", category=DeprecationWarning, message=r"(?is).*deprecat")
    bench = Bench(args)
    elapsed = run_rows(rows, bench.run_row)
    timing = "eager calls" if args.eager else "CUDA-graph replays (eager where capture fails)"
    setup = (
        f"{setup_line(bench.hopattn.__version__ if bench.hopattn else 'not imported', elapsed)} "
        f"FlashInfer {bench.version()}. "
        f"Llama-3.1-8B attention: {HQ}/{HKV} heads, hd{D}, pages of {PAGE} in shuffled order, "
        f"bf16, causal; {timing}, CUDA events, median of 7 samples; L2 "
        f"{'overwritten before each call' if args.flush_l2 else 'not flushed'}."
    )
    header = [
        "# batch peers",
        "",
        f"{setup} Times in us; plan us = host time of hopattn BatchAttention.plan() (median of "
        "20 on an idle stream, the upload enqueue included), fi plan us = one FlashInfer "
        "BatchAttention.plan() (synchronizes); batch vs X = X's time / batch's (above 1: hopattn "
        "batch faster).",
        "",
    ]
    text = markdown(header, rows)
    publish(text, "batch_peers.md")
    data = record(setup, rows)
    out_dir = os.environ.get("OUT")
    if out_dir:
        with open(os.path.join(out_dir, "batch_peers.json"), "w") as f:
            f.write(data)
    if args.json:
        with open(args.json, "w") as f:
            f.write(data)


if __name__ == "__main__":
    main()
