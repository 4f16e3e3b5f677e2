"""Shapes, FLOP counts and table cells shared by the peer benchmarks (fwd_peers.py, bwd_peers.py).

Plain Python (no torch), so the shape lists and FLOP counts can be printed and checked on a machine
without a GPU (bwd_peers.py --dry-run).
"""

import os
import sys
from dataclasses import dataclass, field

TOKENS = 16 * 1024  # batch * seqlen of the sweep
WIDTH = 2048  # heads * head_dim
SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
LLAMA_SEQLENS = (8192, 32768)


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
    dv: int = 0  # value head dim, 0: d
    results: dict = field(default_factory=dict)  # impl -> (ms or None, note)

    @property
    def d_v(self):
        return self.dv or self.d

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
        """Forward FLOPs: 2 * Dqk (QK^T) + 2 * Dv (PV) per visible pair and q head."""
        return 2.0 * (self.d + self.d_v) * self.visible_pairs() * self.hq * self.batch

    def describe(self):
        dims = f"d{self.d}" if self.d_v == self.d else f"d{self.d}/{self.d_v}"
        size = f"b{self.batch} s{self.seqlen} h{self.hq}/{self.hkv} {dims}"
        flags = ["causal" if self.causal else "full"]
        if self.softcap > 0:
            flags.append(f"softcap {self.softcap:g}")
        if self.window >= 0:
            flags.append(f"window {self.window}")
        return self.label, size, ", ".join(flags)


def add_head_dims_arg(parser):
    """--head-dims D[,D...]: keep only the rows whose Dqk is listed (e.g. a rerun of the rows of
    one head dim after a change to its kernel)."""
    parser.add_argument(
        "--head-dims",
        type=lambda text: {int(d) for d in text.split(",")},
        default=None,
        help="comma-separated Dqk values: run only those rows",
    )


def keep_head_dims(rows, dims):
    return rows if dims is None else [r for r in rows if r.d in dims]


def sweep_rows(head_dims=((64, 64), (128, 128), (256, 256)), peers_for=None):
    """The issue's sweep: batch * seqlen = 16k tokens, heads * Dqk = 2048, seqlen 512..16k, causal
    and not, for each (Dqk, Dv); peers_for(dqk, dv) -> the SDPA backends to time (default both)."""
    rows = []
    for d, dv in head_dims:
        peers = peers_for(d, dv) if peers_for else ("cudnn", "flash")
        for seqlen in SEQLENS:
            for causal in (False, True):
                h = WIDTH // d
                rows.append(
                    Row("sweep", TOKENS // seqlen, seqlen, h, h, d, causal, peers=peers, dv=dv)
                )
    return rows


def llama_rows():
    """Llama-3.1-8B attention (32 q / 8 kv heads, hd128) at 8k and 32k: 16k tokens, or one
    request where that is longer."""
    return [
        Row("llama3.1-8b", max(1, TOKENS // seqlen), seqlen, 32, 8, 128, causal)
        for seqlen in LLAMA_SEQLENS
        for causal in (False, True)
    ]


def short(err):
    text = f"{type(err).__name__}: {err}".splitlines()[0]
    return text if len(text) <= 90 else text[:87] + "..."


def require_cuda(script):
    """Exits with "`script`: needs a CUDA device" unless torch sees one. torch is imported here,
    at the call, so that a script's --dry-run, which returns before it, runs without torch."""
    import torch

    if not torch.cuda.is_available():
        sys.exit(f"{script}: needs a CUDA device")


def import_flashinfer():
    """(flashinfer, "") when the peer kit imports, else (None, why), with a note on stderr that
    the FlashInfer rows are skipped."""
    try:
        import flashinfer
    except Exception as err:  # no peer kit: hopattn rows only
        why = f"flashinfer does not import ({short(err)})"
        print(f"note: {why}; FlashInfer rows skipped", file=sys.stderr, flush=True)
        return None, why
    return flashinfer, ""


def flashinfer_with_workspace():
    """(flashinfer, "", workspace) when the peer kit imports, else (None, why, None): one zeroed
    256 MB uint8 device buffer serves every FlashInfer wrapper (../shared/peers/README.md)."""
    fi, why = import_flashinfer()
    if fi is None:
        return None, why, None
    import torch

    return fi, "", torch.zeros(256 << 20, dtype=torch.uint8, device="cuda")


def rate_cells(row, impls, flops):
    """({impl: TFLOP/s or None}, [cell text per impl], [notes]) of a measured row; `flops` is the
    work of one call. A refused implementation shows n/a with its reason among the notes."""
    label, size, mask = row.describe()
    rates, cells, notes = {}, [], []
    for name in impls:
        ms, note = row.results.get(name, (None, ""))
        rates[name] = None if ms is None else flops / (ms * 1e-3) / 1e12
        if name not in row.results:
            cells.append("-")
        elif rates[name] is None:
            cells.append("n/a")
        else:
            cells.append(f"{rates[name]:.0f}")
        if note:
            notes.append(f"{label} {size} {mask}: {name}: {note}")
    return rates, cells, notes


def ratio(a, b):
    """a / b as '1.23x', '-' where either is missing."""
    return f"{a / b:.2f}x" if a and b else "-"


def table(header_lines, titles, rows, impls, flops_of, cells_of):
    """Markdown: the header lines, then one line per row (shape, size, mask, then
    cells_of(rates, cells) from rate_cells over `impls` with flops_of(row)), then the notes."""
    out = list(header_lines)
    out.append("| " + " | ".join(titles) + " |")
    out.append("| --- | --- | --- |" + " ---: |" * (len(titles) - 3))
    notes = []
    for row in rows:
        rates, cells, row_notes = rate_cells(row, impls, flops_of(row))
        notes += row_notes
        out.append("| " + " | ".join([*row.describe(), *cells_of(rates, cells)]) + " |")
    if notes:
        out += ["", "Notes (n/a = the implementation refused the configuration):"]
        out += [f"- {n}" for n in notes]
    return "\n".join(out) + "\n"


def publish(text, filename):
    """Prints the report and writes it to $OUT/filename when OUT is set."""
    print(text)
    out_dir = os.environ.get("OUT")
    if out_dir:
        with open(os.path.join(out_dir, filename), "w") as f:
            f.write(text)
