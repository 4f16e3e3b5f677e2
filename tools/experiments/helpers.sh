# shellcheck shell=bash
# Sourced by the next_device_run*.sh scripts: their shared steps.

# `logged FILE SECONDS CMD ...` runs CMD from /tmp (so a test binary writes nothing into the
# checkout) under a time limit, with its output and then "rc=<exit status>" in FILE.
logged() {
  local file=$1 limit=$2
  shift 2
  (cd /tmp && timeout "$limit" "$@" > "$file" 2>&1; echo "rc=$?" >> "$file")
}

# `gpu_tests FILE BINARY FILTER`: the GPU tests of FILTER (4 minutes at most) through logged, then
# their summary lines.
gpu_tests() {
  logged "$1" 240 "$2" --gtest_filter="$3"
  grep -E "FAILED|PASSED|rc=" "$1" | tail -12
}

# `us_of < CSV`: the first row's time in us (the time_ms column of `hopattn bench ... --csv`).
us_of() { python3 -c 'import csv,sys; print(float(next(csv.DictReader(sys.stdin))["time_ms"])*1000)'; }

# `side_on_cli CLI SCRIPT`: SCRIPT runs CLI with the batch side lane on, so that tools/ab_bench.sh
# can time one binary's two modes as its CLI A and CLI B.
side_on_cli() {
  printf '#!/usr/bin/env bash\nexec %q "$@" --batch-side on\n' "$1" > "$2"
  chmod +x "$2"
}
