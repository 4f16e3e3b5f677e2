# shellcheck shell=bash
# Sourced by device scripts (docs/perf/NOTES.md run sets): shared steps.

# `logged FILE SECONDS CMD ...` runs CMD from /tmp (so a test binary writes nothing into the
# checkout) under a time limit, with its output and then "rc=<exit status>" in FILE.
logged() {
  local file=$1 limit=$2
  shift 2
  (cd /tmp && timeout "$limit" "$@" > "$file" 2>&1; echo "rc=$?" >> "$file")
}

# `us_of < CSV`: the first row's time in us (the time_ms column of `hopattn bench ... --csv`).
us_of() { python3 -c 'import csv,sys; print(float(next(csv.DictReader(sys.stdin))["time_ms"])*1000)'; }

# `bwd_us CLI_DIR "SHAPE FLAGS"`: every row's time in us (the bwd bench prints normal, then
# deterministic), space-separated.
bwd_us() {
  $1/hopattn bench bwd $2 --impl kernel --no-check --csv |
    python3 -c 'import csv,sys; print(" ".join(str(round(float(r["time_ms"])*1000,1)) for r in csv.DictReader(sys.stdin)))'
}

# `wall_s CMD ...`: CMD's wall time in seconds (its output dropped).
wall_s() {
  python3 -c 'import subprocess, sys, time
t = time.time()
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(round(time.time() - t, 2))' "$@"
}
