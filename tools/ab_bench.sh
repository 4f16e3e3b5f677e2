#!/usr/bin/env bash
# A/B timing of two builds of the hopattn CLI on the same shapes, in one run on one card:
#
#   tools/ab_bench.sh CLI_A CLI_B ROUNDS FAMILY "ARGS" ["ARGS" ...]
#
# For each ARGS line (flags of `hopattn bench FAMILY`), runs A and B alternately ROUNDS times
# (A B A B ...: slow drifts of clock or temperature hit both alike) and prints one line per
# shape: A's and B's medians over the rounds and B / A. Each call prints the median of its own
# timed iterations; the check is skipped (both builds pass their tests separately).
set -euo pipefail
[[ $# -ge 5 ]] || { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
a=$1 b=$2 rounds=$3 family=$4
shift 4

time_of() {  # time_of CLI ARGS: the first row's time in us (the CSV's time_ms column x 1000)
  # shellcheck disable=SC2086  # ARGS is a list of flags
  # --impl kernel: the library's kernel only (the naive reference row of fwd and decode would
  # fill and time a second copy of the inputs each call).
  "$1" bench "$family" $2 --csv --no-check --impl kernel | python3 -c '
import csv, sys
row = next(csv.DictReader(sys.stdin))  # quoted fields (batch shapes) hold commas
print(float(row["time_ms"]) * 1000)'
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

printf '%-70s %10s %10s %7s\n' "shape ($family)" "A us" "B us" "B/A"
for args in "$@"; do
  ta=() tb=()
  for ((r = 0; r < rounds; ++r)); do
    ta+=("$(time_of "$a" "$args")")
    tb+=("$(time_of "$b" "$args")")
  done
  ma=$(printf '%s\n' "${ta[@]}" | median)
  mb=$(printf '%s\n' "${tb[@]}" | median)
  printf '%-70s %10.1f %10.1f %7.3f\n' "$args" "$ma" "$mb" "$(awk -v a="$ma" -v b="$mb" 'BEGIN { print b / a }')"
done
