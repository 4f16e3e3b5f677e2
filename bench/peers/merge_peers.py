#!/usr/bin/env python3
"""Merge peers: hopattn.merge_states (two states) and merge_states_n (n stacked states) against
FlashInfer's merge_state / merge_states, bf16 o, fp32 lse, on fresh random states.

FlashInfer's lse is base 2 and hopattn's natural log: each side gets its own lse tensor of the same
states (lse2 = lse / ln 2), and the outputs are compared (relative L2) to check that both merged the
same thing. Time: peer_torch.time_ms (CUDA-graph replays, L2 overwritten before every call, the
overwrite's time subtracted). Rate: bytes the merge must move (every state's o and lse read once,
out and lse written once) / time; the copy ceiling of the H200 is 4.22 TB/s (docs/perf/NOTES.md).

Usage (from the repository root, after `pip install --no-build-isolation .`; the FlashInfer rows
need the peer kit, ../shared/peers/README.md): python bench/peers/merge_peers.py
With OUT set, writes $OUT/merge_peers.md.
"""

import math
import sys

from peer_rows import import_flashinfer, publish, require_cuda, short

# (tokens, states, heads, head dim): the two rows and their neighbours.
SHAPES = [
    (16384, 2, 32, 128),
    (4096, 2, 32, 128),
    (16384, 2, 8, 512),
    (4096, 8, 32, 128),
    (4096, 4, 32, 128),
    (1024, 16, 32, 128),
]


def bytes_moved(t, n, h, d):
    return t * h * (n * (2 * d + 4) + 2 * d + 4)


def main():
    require_cuda("merge_peers.py")
    import torch
    from peer_torch import L2Flush, rel_l2, time_ms

    import hopattn

    fi, fi_why = import_flashinfer()
    flush = L2Flush()
    gen = torch.Generator(device="cuda").manual_seed(0)
    lines = [
        "# merge_states peers",
        "",
        f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, bf16 o, fp32 lse; TB/s of "
        "the bytes a merge must move; L2 overwritten before every call.",
        "",
        "| tokens | states | heads | dim | hopattn us | TB/s | FlashInfer us | TB/s | hopattn / FI "
        "| rel L2 (out) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    notes = []
    for t, n, h, d in SHAPES:
        print(f"merge t={t} n={n} h={h} d={d}", file=sys.stderr, flush=True)
        o = torch.randn(t, n, h, d, device="cuda", generator=gen).to(torch.bfloat16)
        lse = torch.randn(t, n, h, device="cuda", generator=gen) * 4
        lse2 = lse / math.log(2)
        if n == 2:
            a, b = o[:, 0].contiguous(), o[:, 1].contiguous()
            la, lb = lse[:, 0].contiguous(), lse[:, 1].contiguous()
            l2a, l2b = lse2[:, 0].contiguous(), lse2[:, 1].contiguous()
            out, lse_out = hopattn.merge_states(a, la, b, lb)

            def ours():
                hopattn.merge_states(a, la, b, lb, out=out, lse_out=lse_out)

            def theirs():
                return fi.merge_state(a, l2a, b, l2b)
        else:
            out, lse_out = hopattn.merge_states_n(o, lse)

            def ours():
                hopattn.merge_states_n(o, lse, out=out, lse_out=lse_out)

            def theirs():
                return fi.merge_states(o, lse2)

        ours()
        ms, note = time_ms(ours, flush)
        if note:
            notes.append(f"hopattn t={t} n={n}: {note}")
        nbytes = bytes_moved(t, n, h, d)
        cells = [f"{ms * 1e3:.1f}", f"{nbytes / (ms * 1e-3) / 1e12:.2f}"]
        if fi is None:
            cells += ["-", "-", "-", "-"]
        else:
            try:
                ref, _ = theirs()
                fms, fnote = time_ms(theirs, flush)
                if fnote:
                    notes.append(f"FlashInfer t={t} n={n}: {fnote}")
                cells += [
                    f"{fms * 1e3:.1f}",
                    f"{nbytes / (fms * 1e-3) / 1e12:.2f}",
                    f"{fms / ms:.2f}x",
                    f"{rel_l2(out, ref):.1e}",
                ]
            except Exception as err:  # a peer that refuses the shape: its row says why
                notes.append(f"FlashInfer t={t} n={n}: {short(err)}")
                cells += ["n/a", "-", "-", "-"]
        lines.append(f"| {t} | {n} | {h} | {d} | " + " | ".join(cells) + " |")
    if fi_why:
        notes.append(fi_why)
    if notes:
        lines += ["", "Notes:"] + [f"- {x}" for x in notes]
    publish("\n".join(lines) + "\n", "merge_peers.md")


if __name__ == "__main__":
    main()
