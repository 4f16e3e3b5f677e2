"""Plots of the peer benchmarks' JSON output (the files `mla_peers.py --json` and
`batch_peers.py --json` write), for docs/perf/mla.md and docs/perf/batch.md.

    python bench/peers/plot_peers.py mla mla_peers.json docs/perf/mla.png
    python bench/peers/plot_peers.py batch batch_peers.json docs/perf/batch.png

Needs matplotlib (on the development machine; the GPU machine does not need it). The numbers are
the JSON's, nothing is recomputed but the per-row rates the scripts already report.
"""

import argparse
import json

MLA_PANELS = (
    ("memory", "tbps", "TB/s of cache bytes", "16 heads, q_len 1 (memory-bound)"),
    ("compute", "tflops", "TFLOP/s", "128 heads, q_len 1-2 (compute-bound)"),
    ("fp8", "tbps", "TB/s of fp8 cache bytes", "fp8 e4m3 cache, 16 heads"),
    ("prefill", "tflops", "TFLOP/s", "prefill chunks, 128 heads"),
)
MLA_IMPLS = (("hopattn", "hopattn"), ("fa3", "FlashInfer fa3"), ("fa2", "FlashInfer fa2"))
BATCH_IMPLS = (
    ("batch", "hopattn BatchAttention"),
    ("separate", "hopattn fwd + decode"),
    ("varlen", "hopattn one varlen fwd"),
    ("fi_batch", "FlashInfer BatchAttention"),
    ("fi_separate", "FlashInfer fa3 prefill + fa2 decode"),
)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _bars(ax, labels, series, ylabel, title):
    """Grouped bars: one group per label, one bar per (name, values) of series (None: absent)."""
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series):
        xs = [x + (i - (len(series) - 1) / 2) * width for x in range(len(labels))]
        ys = [v if v is not None else 0.0 for v in values]
        ax.bar(xs, ys, width, label=name)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=7)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", alpha=0.3)


def plot_mla(data, path):
    plt = _pyplot()
    rows = data["rows"]
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5))
    for ax, (family, key, ylabel, title) in zip(axes.flat, MLA_PANELS):
        mine = [r for r in rows if r["family"] == family]
        labels = [f"B{r['batch']} q{r['q_len']} kv{r['kv_len'] // 1024}k" for r in mine]
        series = []
        for impl, name in MLA_IMPLS:
            values = [r["impls"].get(impl, {}).get(key) for r in mine]
            if any(v is not None for v in values):
                series.append((name, values))
        _bars(ax, labels, series, ylabel, title)
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(data["setup"], fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def plot_batch(data, path):
    plt = _pyplot()
    workloads = data["workloads"]
    labels = [w["workload"] for w in workloads]
    series = []
    for impl, name in BATCH_IMPLS:
        # Each alternative's time over hopattn's BatchAttention on the same step.
        values = [
            w["impls"][impl]["us"] / w["impls"]["batch"]["us"]
            if w["impls"].get(impl, {}).get("us") and w["impls"].get("batch", {}).get("us")
            else None
            for w in workloads
        ]
        if any(v is not None for v in values):
            series.append((name, values))
    fig, ax = plt.subplots(figsize=(9, 4.8))
    _bars(ax, labels, series, "time / hopattn BatchAttention's", "Llama-3.1-8B serving steps")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_ylim(0, 2.5)  # one varlen fwd launch runs 2.2-3.5x longer on the mixed steps: clipped
    ax.legend(fontsize=8)
    setup = data["setup"]
    fig.suptitle(setup[: len(setup) // 2] + "\n" + setup[len(setup) // 2 :], fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("family", choices=("mla", "batch"))
    ap.add_argument("json", help="the peer script's --json output")
    ap.add_argument("png", help="where to write the plot")
    args = ap.parse_args()
    with open(args.json) as f:
        data = json.load(f)
    (plot_mla if args.family == "mla" else plot_batch)(data, args.png)
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
