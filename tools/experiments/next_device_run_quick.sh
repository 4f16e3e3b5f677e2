#!/usr/bin/env bash
# Issue 11's experiments in one short device call (about 5 minutes), for sessions whose device
# time goes on refused starts: the side lane's two forms and the split-row tiles, each checked
# on its own GPU tests before it is timed.
#
#   tools/experiments/next_device_run_quick.sh MAIN_DIR V2_DIR V3_DIR SPLIT_DIR OUT_DIR
#
# Each *_DIR holds a build's `hopattn` CLI (and, but for MAIN_DIR, its `hopattn_gpu_tests`):
# main; main + batch_side_lane.patch (v2); v2 + batch_side_lane_tma.patch (v3); main +
# fwd_split_rows.patch. Logs under OUT_DIR:
#   side{2,3}_tests.txt, ab_side{2,3}.txt  BatchKernelSide.*; steps (a), (a) on 33 CTAs and (b)
#                                          with --batch-side off (A) against on (B), one binary
#   split_tests.txt, split_race.txt        FwdSplitRows.* and *BatchKernel*; racecheck
#   ab_split.txt                           steps (a) and (b), lpt and spread orders: main / split
#   ctas.txt                               step (c) on 8..132 CTAs, both builds (a CTA's decode rate)
set -u
source "$(dirname "$0")/helpers.sh"
[[ $# -eq 5 ]] || { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
H=$1 S=$4 R=$5
mkdir -p "$R"

# side_form V DIR: side lane form V's tests, then its (a), (a) on 33 CTAs and (b) off against on.
side_form() {
  local v=$1 d=$2
  gpu_tests "$R/side${v}_tests.txt" "$d/hopattn_gpu_tests" 'BatchKernelSide.*'
  grep -q 'rc=0' "$R/side${v}_tests.txt" || return 0
  side_on_cli "$d/hopattn" "$R/side${v}_on.sh"
  bash tools/ab_bench.sh "$d/hopattn" "$R/side${v}_on.sh" 2 batch "--step a --batch-impl batch" \
    "--step a --batch-impl batch --batch-ctas 33" "--step b --batch-impl batch" \
    > "$R/ab_side$v.txt" 2>&1
  cat "$R/ab_side$v.txt"
}
side_form 2 "$2"
side_form 3 "$3"

gpu_tests "$R/split_tests.txt" "$S/hopattn_gpu_tests" 'FwdSplitRows.*:*BatchKernel*'
logged "$R/split_race.txt" 60 compute-sanitizer --tool racecheck "$S/hopattn_gpu_tests" \
  --gtest_filter='FwdSplitRows.VarlenShortRowsPoisonedNeighbours'
tail -2 "$R/split_race.txt"
grep -q 'rc=0' "$R/split_tests.txt" || exit 0
bash tools/ab_bench.sh "$H/hopattn" "$S/hopattn" 2 batch \
  "--step a --batch-impl batch" "--step a --batch-impl batch --batch-order spread" \
  "--step b --batch-impl batch" "--step b --batch-impl batch --batch-order spread" \
  > "$R/ab_split.txt" 2>&1
cat "$R/ab_split.txt"
for n in 8 16 33 66 132; do
  args="bench batch --step c --batch-impl batch --batch-ctas $n --impl kernel --no-check --csv"
  # shellcheck disable=SC2086  # args is a list of flags
  echo "step c ctas $n us main $("$H/hopattn" $args | us_of) split $("$S/hopattn" $args | us_of)"
done > "$R/ctas.txt" 2>&1
cat "$R/ctas.txt"
