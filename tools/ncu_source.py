#!/usr/bin/env python3
"""Summaries of an Nsight Compute source page (SASS), for comparing two kernels' instruction mix
and where their warps stall, without the GUI.

Export the page on the device machine (this machine has no ncu):

    ncu --import X.ncu-rep --page source --csv --print-source sass > X.src.csv

then, anywhere:

    tools/ncu_source.py mix X.src.csv [Y.src.csv ...]   executed instructions by opcode, with
                                                        each opcode's share of the stall samples
    tools/ncu_source.py stalls X.src.csv [N]            stall reasons over the kernel, then the N
                                                        instructions with the most samples
    tools/ncu_source.py regions X.src.csv [N]           the N heaviest runs of instructions that
                                                        execute equally often (a loop body, a
                                                        tile's prologue), with their opcode mix
    tools/ncu_source.py waits X.src.csv [N]             the mbarrier try-wait loops with the most
                                                        samples, with the barrier's shared address

A report holding several kernels (ncu -c 2 ...) repeats the header; only the first kernel's rows
are read. Used in docs/perf/NOTES.md (run set x) to compare the fwd kernel with cuDNN's.
"""
import collections
import csv
import re
import sys

STALLS = [
    "stall_barrier", "stall_branch_resolving", "stall_dispatch", "stall_drain", "stall_imc",
    "stall_lg", "stall_long_sb", "stall_math", "stall_membar", "stall_mio", "stall_misc",
    "stall_no_inst", "stall_not_selected", "stall_selected", "stall_short_sb", "stall_sleep",
    "stall_tex", "stall_wait",
]


def read(path):
    """Rows of the first kernel: dicts with address, source, executed, samples, stalls."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header_at = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    hdr = rows[header_at]
    col = {name: hdr.index(name) for name in hdr}
    out = []
    for r in rows[header_at + 1:]:
        if not r or r[0] == "Address" or r[0] == "Kernel Name":
            break
        try:
            executed = int(r[col["Instructions Executed"]] or 0)
            samples = int(r[col["Warp Stall Sampling (All Samples)"]] or 0)
        except ValueError:
            continue
        stalls = {}
        for s in STALLS:
            if s in col and r[col[s]] not in ("", "0"):
                stalls[s[len("stall_"):]] = int(r[col[s]])
        out.append({"address": r[col["Address"]], "source": r[col["Source"]].strip(),
                    "executed": executed, "samples": samples, "stalls": stalls})
    return out


def opcode(source):
    s = re.sub(r"^@!?U?P\w+\s+", "", source)
    return s.split()[0].split(".")[0] if s.split() else "?"


def cmd_mix(paths, top=28):
    for path in paths:
        rows = read(path)
        total = sum(r["executed"] for r in rows) or 1
        samples = sum(r["samples"] for r in rows) or 1
        count, stall = collections.Counter(), collections.Counter()
        for r in rows:
            count[opcode(r["source"])] += r["executed"]
            stall[opcode(r["source"])] += r["samples"]
        print(f"== {path}: {total} instructions executed, {samples} samples, {len(rows)} static")
        for op, n in count.most_common(top):
            print(f"  {op:10s} {n:12d} {100 * n / total:5.1f}%   samples {100 * stall[op] / samples:5.1f}%")


def cmd_stalls(path, top=20):
    rows = read(path)
    total = collections.Counter()
    for r in rows:
        total.update(r["stalls"])
    n = sum(total.values()) or 1
    print(f"== {path}: {n} samples: " +
          " ".join(f"{k}:{100 * v / n:.1f}%" for k, v in total.most_common(12)))
    for r in sorted(rows, key=lambda r: -r["samples"])[:top]:
        reasons = " ".join(f"{k}:{v}" for k, v in sorted(r["stalls"].items(), key=lambda x: -x[1])[:3])
        print(f"  {r['samples']:6d} {r['address'][-5:]} {r['source'][:64]:64s} {reasons}")


def cmd_regions(path, top=25):
    rows = read(path)
    groups = []
    for r in rows:
        if groups and groups[-1]["executed"] == r["executed"]:
            g = groups[-1]
        else:
            g = {"address": r["address"], "executed": r["executed"], "ops": [], "samples": 0}
            groups.append(g)
        g["ops"].append(opcode(r["source"]))
        g["samples"] += r["samples"]
    total = sum(len(g["ops"]) * g["executed"] for g in groups) or 1
    heavy = sorted(groups, key=lambda g: -len(g["ops"]) * g["executed"])[:top]
    for g in sorted(heavy, key=lambda g: int(g["address"], 16)):
        mix = collections.Counter(g["ops"]).most_common(8)
        share = 100 * len(g["ops"]) * g["executed"] / total
        print(f"  {g['address'][-5:]} {len(g['ops']):4d} instructions x {g['executed']:9d} = "
              f"{share:5.1f}%  samples {g['samples']:6d} | " + " ".join(f"{k}:{v}" for k, v in mix))


def cmd_waits(path, top=12):
    rows = read(path)
    waits = []
    for i, r in enumerate(rows):
        if "TRYWAIT" not in r["source"]:
            continue
        # The wait loop's first branch after the try-wait holds the samples of the wait.
        branch = next((b for b in rows[i + 1:i + 32] if "BRA" in b["source"]), r)
        m = re.search(r"\[([^\]]+)\]", r["source"])
        waits.append((r["samples"] + branch["samples"], r["address"][-5:], m.group(1) if m else "?",
                      r["executed"]))
    for samples, address, barrier, executed in sorted(waits, reverse=True)[:top]:
        print(f"  {samples:6d} samples  {address}  barrier [{barrier}]  executed {executed}")


def main(argv):
    if len(argv) < 3 or argv[1] not in ("mix", "stalls", "regions", "waits"):
        print(__doc__)
        return 2
    cmd, args = argv[1], argv[2:]
    if cmd == "mix":
        cmd_mix(args)
    else:
        top = int(args[1]) if len(args) > 1 else {"stalls": 20, "regions": 25, "waits": 12}[cmd]
        {"stalls": cmd_stalls, "regions": cmd_regions, "waits": cmd_waits}[cmd](args[0], top)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
