#!/usr/bin/env python3
"""A/B rows of CLI timings, each build's rows in one `hopattn script` process.

    ab_rows.py [--rounds N] [--suffix=FLAGS] ROWS NAME=DIR [NAME=DIR ...]

ROWS: a file of lines "LABEL FAMILY [flags]" (blank and # lines skipped), e.g.
"c16 batch --step c --batch-ctas 16 --batch-impl batch". Each row runs as
"bench FAMILY [flags] SUFFIX" (SUFFIX default "--impl kernel --no-check --csv") in every build's
`DIR/hopattn script`, round r taking the builds in the given order when r is odd and reversed when
even (so neither side always runs first). Prints one line a round and build:
"r1 NAME LABEL US LABEL US ...", US the row's time in microseconds (several CSV rows, e.g. the
bwd's normal and deterministic ones: joined by "/"; a failed row: "err").
"""
import argparse
import csv
import io
import os
import subprocess
import sys
import tempfile


def parse_rows(path):
    rows = []
    with open(path) as f:
        for line in f:
            words = line.split()
            if not words or words[0].startswith("#"):
                continue
            if len(words) < 2:
                sys.exit(f"ab_rows.py: row {line.strip()!r}: expected LABEL FAMILY [flags]")
            rows.append((words[0], " ".join(words[1:])))
    return rows


def times_by_line(output):
    """{script line number: "US[/US..]" or "err"} from `hopattn script`'s output."""
    blocks, number, body = {}, None, []

    def close():
        if number is None:
            return
        text = "\n".join(l for l in body if not l.startswith("#"))
        us = []
        if not any(l.startswith("# error") for l in body):
            for r in csv.DictReader(io.StringIO(text)):
                try:
                    us.append(str(round(float(r["time_ms"]) * 1000, 1)))
                except (KeyError, TypeError, ValueError):
                    pass
        blocks[number] = "/".join(us) if us else "err"

    for line in output.splitlines():
        if line.startswith("# line "):
            close()
            number, body = int(line[len("# line "):].split(":", 1)[0]), []
        elif number is not None:
            body.append(line)
    close()
    return blocks


def run_build(directory, rows, suffix):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        for _, command in rows:
            f.write(f"bench {command} {suffix}\n")
        script = f.name
    try:
        done = subprocess.run([os.path.join(directory, "hopattn"), "script", script],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    finally:
        os.unlink(script)
    times = times_by_line(done.stdout)
    return [times.get(i + 1, "err") for i in range(len(rows))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--suffix", default="--impl kernel --no-check --csv")
    ap.add_argument("rows")
    ap.add_argument("builds", nargs="+", metavar="NAME=DIR")
    a = ap.parse_args()
    rows = parse_rows(a.rows)
    builds = [b.split("=", 1) for b in a.builds]
    for r in range(1, a.rounds + 1):
        for name, directory in builds if r % 2 else reversed(builds):
            values = run_build(directory, rows, a.suffix)
            cells = " ".join(f"{label} {v}" for (label, _), v in zip(rows, values))
            print(f"r{r} {name} {cells}", flush=True)


if __name__ == "__main__":
    main()
