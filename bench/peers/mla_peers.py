#!/usr/bin/env python3
"""Peer benchmark of the mla family (issue 10): hopattn.mla against FlashInfer's MLA.

FlashInfer's BatchMLAPagedAttentionWrapper with its fa3 and fa2 backends, measured in the same
process on the same inputs.

Run on the device machine (torch with CUDA, hopattn installed with
``pip install --no-build-isolation .`` from the repository root, FlashInfer from the peer kit of
../shared/peers/README.md):

    source .peers/install_on_device.sh .peers && python bench/peers/mla_peers.py
    python bench/peers/mla_peers.py --quick             # 7 rows
    python bench/peers/mla_peers.py --rows memory,fp8   # some families only
    python bench/peers/mla_peers.py --dry-run           # the rows and their work, no torch, no GPU

Prints one markdown table per family (also written to $OUT/mla_peers.md and $OUT/mla_peers.json
when OUT is set; --md PATH, --json PATH and --csv PATH write copies elsewhere). Without FlashInfer
(it does not import, or a backend refuses a row) the peer cells read n/a and the notes say why.

Shapes (DeepSeek-V3: ckv 512 + kpe 64, pages of 64 tokens, every request kv_len tokens, causal
bottom-right):
  memory   16 heads (TP8 of 128), q_len 1, batch 32/64/128, kv 4k/8k/32k: TB/s of bytes read
  compute  128 heads, q_len 1 and 2, batch 64/128, kv 4k/16k: TFLOP/s
  batch1   128 heads, q_len 1, batch 1, kv 32k: time against its floor
  fp8      the memory shapes with a float8_e4m3fn cache (hopattn kv_scale=, FlashInfer fa3
           ckv_scale= / kpe_scale=) and hopattn's fp8 / bf16 speed on the same shape
  prefill  128 heads, batch 1, q_len 1k/4k/8k new tokens against kv 8k/16k/32k: TFLOP/s

Measurement: random inputs (randn, never zeros), page tables in shuffled order. Each time is the
median over samples of one CUDA-graph replay of R x (L2 overwrite, call) minus a replay of R
overwrites alone, divided by R (peer_torch.time_ms; R makes a sample last >= ~2 ms; eager calls
where capture fails, noted). FlashInfer's plan() runs once per row, untimed (a serving engine plans
once per step for all layers); its first plan per backend may JIT-compile a module the kit's cache
lacks. Work: bytes = batch * kv_len * 576 * cache element bytes + q bytes (576 * 2 per token and
head) + out bytes (512 * 2); FLOPs = 2 * (576 + 512) per causal-visible (query, key) pair and head.
Floor = max(FLOPs / 785 TFLOP/s, bytes / 4.58 TB/s) (docs/perf/NOTES.md ceilings). "vs X" =
X's time / hopattn's (above 1: hopattn faster).

Correctness, once per family before its timing (first row of the family, same inputs): hopattn
against each peer (relative L2 of out, max |difference| of lse with FlashInfer's base-2 lse
converted to natural log) and all against an fp32 reference on sampled queries of the first and
last request. A peer that differs from hopattn by more than 2e-2 is not timed for that family
(noted), unless the reference shows the peer right and hopattn wrong.
"""

import argparse
import csv
import io
import json
import math
import os
import sys
import time
import warnings
from dataclasses import dataclass, field

from peer_rows import flashinfer_with_workspace, publish, ratio, require_cuda, short

CKV, KPE, PAGE = 512, 64, 64
QK = CKV + KPE
SM_SCALE = 1.0 / math.sqrt(128 + 64)  # DeepSeek-V3's softmax scale (qk_nope 128 + rope 64)
KV_SCALE = 0.5  # fp8 cache: real value = stored value * KV_SCALE
READ_TBPS = 4.58  # measured read ceiling (docs/perf/NOTES.md)
GEMM_TFLOPS = 785.0  # measured bf16 GEMM ceiling (docs/perf/NOTES.md)
TOLERANCE = 2e-2
LN2 = math.log(2.0)
FAMILIES = ("memory", "compute", "batch1", "fp8", "prefill")
PEERS = ("fa3", "fa2")


# ------------------------------------------------------------------------------------ rows
@dataclass
class Row:
    family: str
    batch: int
    q_len: int
    heads: int
    kv_len: int
    fp8: bool = False
    results: dict = field(default_factory=dict)  # impl -> (us or None, note)

    @property
    def peers(self):
        # fp8: fa3 only (the kit's JIT cache holds fa3 fp8; fa2 would compile on the device).
        return ("fa3",) if self.fp8 else PEERS

    @property
    def impls(self):
        return ("hopattn", "bf16", *self.peers) if self.fp8 else ("hopattn", *self.peers)

    @property
    def tokens(self):
        return self.batch * self.q_len

    def visible_pairs(self):
        """(query, key) pairs of the batch, causal bottom-right (query i of q sees kv - q + 1 + i
        keys)."""
        q, kv = self.q_len, self.kv_len
        return self.batch * (q * kv - q * (q - 1) // 2)

    def flops(self):
        return 2.0 * (QK + CKV) * self.heads * self.visible_pairs()

    def bytes(self, elt=None):
        elt = elt or (1 if self.fp8 else 2)
        cache = self.batch * self.kv_len * QK * elt
        return cache + self.tokens * self.heads * (QK + CKV) * 2

    def impl_bytes(self, impl):
        return self.bytes(2 if impl == "bf16" else None)

    def floor_us(self, elt=None):
        return max(self.flops() / (GEMM_TFLOPS * 1e12), self.bytes(elt) / (READ_TBPS * 1e12)) * 1e6

    def cache(self):
        return "fp8 e4m3" if self.fp8 else "bf16"

    def describe(self):
        """(label, size, mask) as peer_torch.run_rows prints them."""
        size = f"b{self.batch} q{self.q_len} h{self.heads} kv{self.kv_len}"
        return self.family, size, f"{self.cache()} cache"

    def us(self, impl):
        return self.results.get(impl, (None, ""))[0]

    def tbps(self, impl):
        us = self.us(impl)
        return None if not us else self.impl_bytes(impl) / us / 1e6

    def tflops(self, impl):
        us = self.us(impl)
        return None if not us else self.flops() / us / 1e6


def family_rows(family):
    if family == "memory":
        return [Row("memory", b, 1, 16, kv) for kv in (4096, 8192, 32768) for b in (32, 64, 128)]
    if family == "fp8":
        return [Row("fp8", r.batch, 1, 16, r.kv_len, fp8=True) for r in family_rows("memory")]
    if family == "compute":
        return [
            Row("compute", b, q, 128, kv) for q in (1, 2) for b in (64, 128) for kv in (4096, 16384)
        ]
    if family == "batch1":
        return [Row("batch1", 1, 1, 128, 32768)]
    return [
        Row("prefill", 1, q, 128, kv) for q in (1024, 4096, 8192) for kv in (8192, 16384, 32768)
    ]


def all_rows():
    return [row for family in FAMILIES for row in family_rows(family)]


def quick_rows():
    return [
        Row("memory", 64, 1, 16, 8192),
        Row("compute", 128, 1, 128, 4096),
        Row("compute", 64, 2, 128, 4096),
        Row("batch1", 1, 1, 128, 32768),
        Row("fp8", 64, 1, 16, 8192, fp8=True),
        Row("prefill", 1, 1024, 128, 8192),
        Row("prefill", 1, 4096, 128, 16384),
    ]


def parse_families(text):
    wanted = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in FAMILIES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown families {', '.join(unknown)} (choose from {','.join(FAMILIES)})"
        )
    return set(wanted)


def dry_run(rows):
    """The rows and their work, without torch; checks the counts against the issue's figures."""
    b1 = Row("batch1", 1, 1, 128, 32768)
    assert abs(b1.floor_us() - 11.6) < 0.05, b1.floor_us()  # issue 10: 11.6 us
    for row in rows:
        q, kv = row.q_len, row.kv_len
        want = 2.0 * 1088 * row.heads * row.batch * sum(kv - q + 1 + i for i in range(q))
        assert row.flops() == want, (row, row.flops(), want)
        label, size, cache = row.describe()
        print(
            f"{label:8} {size:28} {cache:15} {row.flops() / 1e9:10.2f} GFLOP "
            f"{row.bytes() / 1e6:9.1f} MB  floor {row.floor_us():9.1f} us  {row.impls}"
        )
    print(f"{len(rows)} rows; FLOP counts checked")


# ------------------------------------------------------------------------------------ report
def fmt(x, spec):
    return "n/a" if x is None else format(x, spec)


def cell_us(impl):
    return (f"{impl} us", lambda r: fmt(r.us(impl), ".1f") if impl in r.results else "-")


def cell_rate(impl, kind, title=None):
    rate = Row.tbps if kind == "TB/s" else Row.tflops
    spec = ".2f" if kind == "TB/s" else ".0f"
    return (title or f"{impl} {kind}", lambda r: fmt(rate(r, impl), spec))


def cell_vs(peer):
    return (f"vs {peer}", lambda r: ratio(r.us(peer), r.us("hopattn")))


def fp8_speedup(r):
    fp8, bf16 = r.us("hopattn"), r.us("bf16")
    return bf16 / fp8 if fp8 and bf16 else None


def short_by(value, goal, higher_is_better=True):
    if value is None:
        return "-"
    if (value >= goal) if higher_is_better else (value <= goal):
        return "met"
    return f"no, {value / goal if higher_is_better else goal / value:.2f}x of it"


TARGETS = {
    "memory": (">= 4.1 TB/s", lambda r: short_by(r.tbps("hopattn"), 4.1)),
    "compute": (">= 660 TFLOP/s", lambda r: short_by(r.tflops("hopattn"), 660.0)),
    "batch1": (
        "<= 1.25x floor",
        lambda r: short_by(r.us("hopattn"), 1.25 * r.floor_us(), higher_is_better=False),
    ),
    "fp8": (">= 1.6x bf16", lambda r: short_by(fp8_speedup(r), 1.6)),
    "prefill": (">= 600 TFLOP/s", lambda r: short_by(r.tflops("hopattn"), 600.0)),
}

SHAPE_CELLS = [
    ("B", lambda r: str(r.batch)),
    ("q_len", lambda r: str(r.q_len)),
    ("heads", lambda r: str(r.heads)),
    ("kv", lambda r: str(r.kv_len)),
]

COLUMNS = {
    "memory": [
        cell_us("hopattn"), cell_rate("hopattn", "TB/s"),
        cell_us("fa3"), cell_rate("fa3", "TB/s"), cell_us("fa2"), cell_rate("fa2", "TB/s"),
        cell_vs("fa3"), cell_vs("fa2"),
    ],
    "fp8": [
        cell_us("hopattn"), cell_rate("hopattn", "TB/s", "hopattn TB/s (fp8 bytes)"),
        cell_us("bf16"), ("fp8 / bf16 speed", lambda r: fmt(fp8_speedup(r), ".2f")),
        cell_us("fa3"), cell_rate("fa3", "TB/s", "fa3 TB/s (fp8 bytes)"), cell_vs("fa3"),
    ],
    "compute": [
        cell_us("hopattn"), cell_rate("hopattn", "TFLOP/s"),
        cell_us("fa3"), cell_rate("fa3", "TFLOP/s"), cell_us("fa2"), cell_rate("fa2", "TFLOP/s"),
        cell_vs("fa3"), cell_vs("fa2"),
    ],
    "batch1": [
        ("floor us", lambda r: f"{r.floor_us():.1f}"), cell_us("hopattn"),
        ("hopattn / floor", lambda r: fmt(r.us("hopattn") and r.us("hopattn") / r.floor_us(),
                                          ".2f")),
        cell_us("fa3"), cell_us("fa2"), cell_vs("fa3"), cell_vs("fa2"),
    ],
}  # fmt: skip
COLUMNS["prefill"] = COLUMNS["compute"]
TITLES = {
    "memory": "memory-bound decode (TB/s of bytes read)",
    "compute": "compute-bound decode and MTP (TFLOP/s)",
    "batch1": "batch 1, long context (time against the floor)",
    "fp8": "fp8 e4m3 cache (TB/s of fp8 bytes read)",
    "prefill": "prefill chunks against the latent cache (TFLOP/s)",
}


def family_table(family, rows):
    target_text, target_of = TARGETS[family]
    columns = [*SHAPE_CELLS, *COLUMNS[family], (f"target {target_text}", target_of)]
    lines = [f"## {family}: {TITLES[family]}", ""]
    lines.append("| " + " | ".join(title for title, _ in columns) + " |")
    lines.append("|" + " ---: |" * len(columns))
    for row in rows:
        lines.append("| " + " | ".join(cell(row) for _, cell in columns) + " |")
    return lines


def row_notes(rows):
    notes = []
    for row in rows:
        label, size, cache = row.describe()
        for impl in row.impls:
            note = row.results.get(impl, (None, ""))[1]
            if note:
                notes.append(f"{label} {size} {cache}: {impl}: {note}")
    return notes


def markdown(header, checks, rows):
    lines = list(header)
    if checks:
        lines += ["Correctness (once per family, before its timing):", ""]
        lines += [f"- {line}" for line in checks]
        lines.append("")
    for family in FAMILIES:
        selected = [r for r in rows if r.family == family]
        if selected:
            lines += family_table(family, selected) + [""]
    notes = row_notes(rows)
    if notes:
        lines += ["Notes (n/a = not run: the reason follows):", ""]
        lines += [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def row_record(row):
    impls = {}
    for impl in row.impls:
        if impl not in row.results:
            continue
        us, note = row.results[impl]
        impls[impl] = dict(
            us=us,
            tbps=row.tbps(impl),
            tflops=row.tflops(impl),
            vs_hopattn=(us / row.us("hopattn")) if us and row.us("hopattn") else None,
            note=note,
        )
    return dict(
        family=row.family,
        batch=row.batch,
        q_len=row.q_len,
        heads=row.heads,
        kv_len=row.kv_len,
        page_size=PAGE,
        cache=row.cache(),
        flops=row.flops(),
        bytes=row.bytes(),
        floor_us=row.floor_us(),
        target=TARGETS[row.family][0],
        target_status=TARGETS[row.family][1](row),
        fp8_over_bf16=fp8_speedup(row) if row.fp8 else None,
        impls=impls,
    )


def json_text(setup, checks, rows):
    return json.dumps(
        dict(setup=setup, checks=checks, rows=[row_record(r) for r in rows]), indent=1
    )


def csv_text(rows):
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(
        ("family", "batch", "q_len", "heads", "kv_len", "cache", "impl", "us", "tbps", "tflops",
         "floor_us", "vs_hopattn", "note")
    )  # fmt: skip
    for row in rows:
        record = row_record(row)
        for impl, r in record["impls"].items():
            writer.writerow(
                (row.family, row.batch, row.q_len, row.heads, row.kv_len, row.cache(), impl,
                 r["us"], r["tbps"], r["tflops"], record["floor_us"], r["vs_hopattn"], r["note"])
            )  # fmt: skip
    return text.getvalue()


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def progress_line(row):
    hop = row.us("hopattn")
    parts = []
    for impl in row.impls:
        us, note = row.results.get(impl, (None, ""))
        if us is None:
            parts.append(f"{impl} n/a")
            continue
        rate = (
            f"{row.tflops(impl):.0f} TFLOP/s"
            if row.family in ("compute", "prefill")
            else f"{row.tbps(impl):.2f} TB/s"
        )
        vs = f", {us / hop:.2f}x" if hop and impl in PEERS else ""
        parts.append(f"{impl} {us:.1f} us ({rate}{vs})")
    label, size, cache = row.describe()
    return f"  {label} {size} {cache}: " + "; ".join(parts)


# ------------------------------------------------------------------------------------ torch side
class Bench:
    """Inputs, the implementations, the correctness check and the timing, on the current GPU."""

    def __init__(self, check):
        import torch

        import hopattn

        self.torch, self.hopattn = torch, hopattn
        from peer_torch import L2Flush

        self.flush = L2Flush()
        self.do_check = check
        self.checks = []  # printed lines
        self.verdicts = {}  # family -> {peer: skip note or ""}
        self.wrappers, self.planned = {}, set()
        self.fi, self.fi_error, self.workspace = flashinfer_with_workspace()

    def version(self):
        return getattr(self.fi, "__version__", "?") if self.fi else "absent"

    # -------------------------------------------------------------------------------- inputs
    def inputs(self, row, fp8):
        torch = self.torch
        gen = torch.Generator(device="cuda").manual_seed(
            1_000_003 * row.batch + 1009 * row.q_len + row.kv_len + row.heads
        )

        def randn(*shape):
            return torch.randn(shape, generator=gen, device="cuda", dtype=torch.bfloat16)

        def cache(pages, width):
            if not fp8:
                return randn(pages, PAGE, width)
            out = torch.empty(pages, PAGE, width, device="cuda", dtype=torch.float8_e4m3fn)
            step = max(1, (64 << 20) // (PAGE * width))  # bf16 staging of <= 128 MB
            for start in range(0, pages, step):
                chunk = randn(min(step, pages - start), PAGE, width).mul_(1.0 / KV_SCALE)
                out[start : start + chunk.shape[0]].copy_(chunk)
            return out

        per_req = -(-row.kv_len // PAGE)
        pages = row.batch * per_req
        x = argparse.Namespace()
        x.q_nope, x.q_pe = randn(row.tokens, row.heads, CKV), randn(row.tokens, row.heads, KPE)
        x.ckv, x.kpe = cache(pages, CKV), cache(pages, KPE)
        perm = torch.randperm(pages, generator=gen, device="cuda")
        x.page_table = perm.to(torch.int32).view(row.batch, per_req)
        ar = torch.arange(row.batch + 1, dtype=torch.int32, device="cuda")
        x.cu_q = ar * row.q_len
        x.kv_lens = torch.full((row.batch,), row.kv_len, dtype=torch.int32, device="cuda")
        x.kv_indptr = ar * per_req  # FlashInfer's CSR form of the same pages
        x.kv_indices = x.page_table.reshape(-1)
        x.kv_scale = KV_SCALE if fp8 else None
        return x

    # -------------------------------------------------------------------------------- impls
    def hop_fn(self, row, x):
        kw = dict(causal=True, scale=SM_SCALE, max_seqlen_q=row.q_len)
        if x.kv_scale is not None:
            kw["kv_scale"] = x.kv_scale
        mla = self.hopattn.mla

        def fn():
            return mla(x.q_nope, x.q_pe, x.ckv, x.kpe, x.cu_q, x.kv_lens, x.page_table, **kw)

        return fn

    def fi_fn(self, backend, row, x, lse=False):
        """fn() = one FlashInfer MLA call on x, planned here (untimed); with lse it returns (out,
        base-2 lse)."""
        if self.fi is None:
            raise RuntimeError(self.fi_error)
        torch = self.torch
        wrapper = self.wrappers.get(backend)
        if wrapper is None:
            wrapper = self.fi.mla.BatchMLAPagedAttentionWrapper(self.workspace, backend=backend)
            self.wrappers[backend] = wrapper
        key = (backend, x.ckv.dtype)
        began = time.time()
        wrapper.plan(
            x.cu_q, x.kv_indptr, x.kv_indices, x.kv_lens, row.heads, CKV, KPE, PAGE, True,
            SM_SCALE, torch.bfloat16, x.ckv.dtype, lse_mode="base2" if lse else "none",
        )  # fmt: skip
        if key not in self.planned:
            self.planned.add(key)
            took = time.time() - began
            if took > 5:
                print(f"  {backend} {x.ckv.dtype}: first plan took {took:.0f} s (JIT compile)")
        scales = {}
        if x.kv_scale is not None:
            scales = dict(ckv_scale=x.kv_scale, kpe_scale=x.kv_scale)
        run = wrapper.run

        def fn():
            return run(x.q_nope, x.q_pe, x.ckv, x.kpe, return_lse=lse, **scales)

        return fn

    # -------------------------------------------------------------------------------- check
    def reference(self, row, x):
        """(token rows, out [n, H, 512], lse [n, H]) in fp32 for sampled queries of the first and
        the last request."""
        torch = self.torch
        per_req = x.page_table.shape[1]
        picks = range(row.q_len) if row.q_len <= 4 else (0, row.q_len // 3, row.q_len - 1)
        tokens, outs, lses = [], [], []
        for b in sorted({0, row.batch - 1}):
            pages = x.page_table[b, :per_req].long()

            def gather(cache):
                raw = cache.view(torch.uint8) if x.kv_scale is not None else cache
                g = raw[pages].view(cache.dtype).reshape(-1, cache.shape[-1])[: row.kv_len]
                return g.float() * (x.kv_scale or 1.0)

            ckv, kpe = gather(x.ckv), gather(x.kpe)
            for i in picks:
                t = b * row.q_len + i
                seen = row.kv_len - row.q_len + 1 + i
                logits = x.q_nope[t].float() @ ckv[:seen].T + x.q_pe[t].float() @ kpe[:seen].T
                logits *= SM_SCALE
                tokens.append(t)
                lses.append(torch.logsumexp(logits, dim=-1))
                outs.append(torch.softmax(logits, dim=-1) @ ckv[:seen])
            del ckv, kpe
        return tokens, torch.stack(outs), torch.stack(lses)

    def check_family(self, row, x):
        """Runs each implementation once on the family's first row; returns {peer: skip note or
        ""} and appends the errors to self.checks."""
        from peer_torch import rel_l2

        torch = self.torch
        got, failed = {}, {}
        try:
            out, lse = self.hop_fn(row, x)()
            got["hopattn"] = (out, lse)
        except Exception as err:
            failed["hopattn"] = short(err)
        for peer in row.peers:
            try:
                out, lse = self.fi_fn(peer, row, x, lse=True)()
                got[peer] = (out, lse * LN2)  # base 2 -> natural log
            except Exception as err:
                failed[peer] = short(err)
        torch.cuda.synchronize()
        tokens, ref_out, ref_lse = self.reference(row, x)
        idx = torch.tensor(tokens, device="cuda")
        off_ref = {}
        parts = []
        for name, (out, lse) in got.items():
            e_out = rel_l2(out.index_select(0, idx), ref_out)
            e_lse = (lse.index_select(0, idx) - ref_lse).abs().max().item()
            off_ref[name] = not (e_out <= TOLERANCE and e_lse <= TOLERANCE)
            parts.append(f"{name} out {e_out:.1e} lse {e_lse:.1e}")
        label, size, cache = row.describe()
        line = f"{label} {size} {cache}: vs fp32 reference ({len(tokens)} queries): "
        line += ", ".join(parts) if parts else "nothing ran"
        verdict = {}
        hop = got.get("hopattn")
        for peer in row.peers:
            if peer in failed:
                line += f"; {peer} failed ({failed[peer]})"
                verdict[peer] = ""  # timed anyway: its own error is the note
                continue
            if hop is None:
                line += f"; {peer} not compared (hopattn failed: {failed.get('hopattn')})"
                verdict[peer] = ""
                continue
            out, lse = got[peer]
            d_out = rel_l2(out, hop[0])
            d_lse = (lse - hop[1]).abs().max().item()
            agree = d_out <= TOLERANCE and d_lse <= TOLERANCE
            line += f"; {peer} vs hopattn: out rel L2 {d_out:.1e}, lse max |diff| {d_lse:.1e}"
            if agree:
                verdict[peer] = ""
            elif off_ref.get("hopattn") and not off_ref.get(peer):
                line += " (hopattn is the one off the reference: peer timed)"
                verdict[peer] = ""
            else:
                line += f" > {TOLERANCE:g}: {peer} not timed"
                verdict[peer] = (
                    f"not timed: differs from hopattn (out rel L2 {d_out:.1e}, lse {d_lse:.1e})"
                )
        print(line, flush=True)
        self.checks.append(line)
        del got
        return verdict

    # -------------------------------------------------------------------------------- timing
    def measure(self, row, name, make):
        from peer_torch import time_ms

        torch = self.torch
        try:
            ms, note = time_ms(make(), flush=self.flush)
            row.results[name] = (ms * 1e3, note)
        except Exception as err:  # a configuration an implementation does not run
            row.results[name] = (None, short(err))
            print(f"  {name}: {short(err)}", file=sys.stderr, flush=True)
        try:
            torch.cuda.synchronize()
        except Exception as err:
            row.results[name] = (None, f"{row.results[name][1]}; sync: {short(err)}")

    def run_row(self, row):
        x = self.inputs(row, row.fp8)
        verdict = self.verdicts.get(row.family)
        if verdict is None and self.do_check:
            try:
                verdict = self.check_family(row, x)
            except Exception as err:  # the check itself failed: time everything, say so
                label, size, cache = row.describe()
                line = f"{label} {size} {cache}: check failed ({short(err)}); peers timed unchecked"
                print(line, flush=True)
                self.checks.append(line)
                verdict = {}
            self.verdicts[row.family] = verdict
        verdict = verdict or {}
        self.measure(row, "hopattn", lambda: self.hop_fn(row, x))
        for peer in row.peers:
            if self.fi is None:
                row.results[peer] = (None, self.fi_error)
            elif verdict.get(peer):
                row.results[peer] = (None, verdict[peer])
            else:
                self.measure(row, peer, lambda p=peer: self.fi_fn(p, row, x))
        if row.fp8:  # the same shape with a bf16 cache, for the fp8 / bf16 speed
            del x
            self.torch.cuda.empty_cache()
            x = self.inputs(row, False)
            self.measure(row, "bf16", lambda: self.hop_fn(row, x))
        print(progress_line(row), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="7 rows, one or two per family")
    parser.add_argument(
        "--rows",
        type=parse_families,
        default=None,
        metavar="FAMILIES",
        help=f"comma-separated families to run (of {','.join(FAMILIES)}; default all)",
    )
    parser.add_argument(
        "--check",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="compare hopattn with FlashInfer and an fp32 reference once per family first",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--md", metavar="PATH", help="also write the markdown report")
    parser.add_argument("--csv", metavar="PATH", help="also write one CSV line per (row, impl)")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the rows and their work (no torch needed)"
    )
    args = parser.parse_args()
    rows = quick_rows() if args.quick else all_rows()
    if args.rows is not None:
        rows = [r for r in rows if r.family in args.rows]
    if args.dry_run:
        dry_run(rows)
        return

    require_cuda("mla_peers.py")
    from peer_torch import run_rows, setup_line

    # FlashInfer 0.7.4 flags the flat plan()/run() arguments of its README form as deprecated.
    warnings.filterwarnings("ignore", category=DeprecationWarning, message=r"(?is).*deprecat")
    bench = Bench(args.check)
    elapsed = run_rows(rows, bench.run_row)
    setup = (
        f"{setup_line(bench.hopattn.__version__, elapsed)} FlashInfer {bench.version()} "
        f"(BatchMLAPagedAttentionWrapper, fa3 / fa2)."
    )
    header = [
        f"# mla peers ({'quick' if args.quick else 'full'})",
        "",
        f"{setup} DeepSeek-V3 MLA: ckv 512 + kpe 64, pages of {PAGE} in shuffled order, causal "
        f"bottom-right, scale 1/sqrt(192); fp8 cache e4m3 with scale {KV_SCALE:g}. CUDA-graph "
        "replays, L2 overwritten before each call, median; times in us. TB/s = (cache + q + out "
        "bytes) / time; TFLOP/s = 2 * 1088 FLOPs per causal-visible (query, key) pair and head; "
        f"floor = max(FLOPs / {GEMM_TFLOPS:.0f} TFLOP/s, bytes / {READ_TBPS} TB/s); vs X = X's "
        "time / hopattn's (above 1: hopattn faster).",
        "",
    ]
    text = markdown(header, bench.checks, rows)
    publish(text, "mla_peers.md")
    record = json_text(setup, bench.checks, rows)
    out_dir = os.environ.get("OUT")
    if out_dir:
        write(os.path.join(out_dir, "mla_peers.json"), record)
    if args.json:
        write(args.json, record)
    if args.md:
        write(args.md, text)
    if args.csv:
        write(args.csv, csv_text(rows))


if __name__ == "__main__":
    main()
