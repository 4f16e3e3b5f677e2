#!/usr/bin/env bash
# Issue 11's side-lane try (tools/experiments/batch_side_lane.patch, branch x-side-lane): decodes
# of <= 8 rows on producer warps 2 and 3 beside the prefill tiles. Correctness first, then the A/B.
#
#   tools/experiments/next_device_run_side.sh MAIN_DIR SIDE_DIR OUT_DIR [tests|ab|all]
#
# MAIN_DIR holds main's `hopattn` CLI; SIDE_DIR the CLI and `hopattn_gpu_tests` of main with the
# patch applied. Each part fits one device call (tests ~6 minutes, A/B ~5). Logs under OUT_DIR:
#   tests.txt, race.txt, sync.txt, memcheck.txt  the side build's batch GPU tests (BatchKernelSide
#                                                runs the side lane; the rest the plain kernel)
#   ab_mode.txt   steps a-d in the side build: --batch-side off (A) against on (B)
#   ab_main.txt   steps a-d: main (A) against the side build with the side lane off (B): the
#                 plain kernel's scheduler became a template and the pools are always set
#   sep.txt       steps a, b with the side lane and the separate launches, ratios in one row each
set -u
source "$(dirname "$0")/helpers.sh"
H=$1 S=$2 R=$3 PART=${4:-all}
mkdir -p "$R"
if [[ $PART != ab ]]; then
gpu_tests "$R/tests.txt" "$S/hopattn_gpu_tests" '*Batch*'
for tool in racecheck synccheck memcheck; do
  logged "$R/$tool.txt" 100 compute-sanitizer --tool $tool "$S/hopattn_gpu_tests" \
    --gtest_filter='BatchKernelSide.DecodesBesidePrefillBf16:BatchKernelSide.Hd64Gqa8'
  tail -2 "$R/$tool.txt"
done
fi
[[ $PART == tests ]] && exit 0

on=$R/side_on.sh
side_on_cli "$S/hopattn" "$on"
steps=("--step a --batch-impl batch" "--step b --batch-impl batch" "--step c --batch-impl batch"
  "--step d --batch-impl batch" "--step a --batch-impl batch --batch-ctas 33")
bash tools/ab_bench.sh "$S/hopattn" "$on" 3 batch "${steps[@]}" > "$R/ab_mode.txt" 2>&1
bash tools/ab_bench.sh "$H/hopattn" "$S/hopattn" 2 batch "${steps[@]:0:4}" > "$R/ab_main.txt" 2>&1
for st in a b; do
  "$S/hopattn" bench batch --step $st --batch-impl batch,separate --batch-side on --impl kernel
done > "$R/sep.txt" 2>&1
cat "$R/ab_mode.txt" "$R/ab_main.txt" "$R/sep.txt"
