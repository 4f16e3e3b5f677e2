#!/usr/bin/env bash
# Issue 11's next device call: split-row tiles (fwd_split_rows.patch) and the spread decode order
# (main: hopattn bench batch --batch-order spread), correctness first, then the A/B.
#
#   tools/experiments/next_device_run_batch.sh MAIN_DIR SPLIT_DIR OUT_DIR [tests|ab|all]
#
# Each part fits one device call (tests and sanitizers ~7 minutes, the A/B ~5); default all.
# MAIN_DIR holds main's `hopattn` CLI; SPLIT_DIR the CLI and `hopattn_gpu_tests` of main with
# fwd_split_rows.patch applied. Logs under OUT_DIR:
#   tests.txt, race*.txt, sync.txt  the split build's fwd / batch / Determinism GPU tests and the
#                                   sanitizers on the split-row tests and a batch case
#   ab_batch.txt                    steps a-d, lpt and spread orders: main against split
#   ab_fwd.txt                      fwd tiles of <= 64 rows over long caches: main against split
#   ctas.txt                        step c on 16 / 33 CTAs (one CTA's decode rate): both builds
#   c33_{main,split}.{stalls,waits}.txt  ncu source-page summaries of step c on 33 CTAs
set -u
source "$(dirname "$0")/helpers.sh"
H=$1 S=$2 R=$3 PART=${4:-all}
mkdir -p "$R"
if [[ $PART != ab ]]; then
gpu_tests "$R/tests.txt" "$S/hopattn_gpu_tests" '*Fwd*:*Batch*:Determinism.*'
logged "$R/race.txt" 90 compute-sanitizer --tool racecheck "$S/hopattn_gpu_tests" \
  --gtest_filter='FwdSplitRows.VarlenShortRowsPoisonedNeighbours:*BatchKernelFeatures.MatchesCpuReference/baseline'
logged "$R/sync.txt" 60 compute-sanitizer --tool synccheck "$S/hopattn_gpu_tests" \
  --gtest_filter='FwdSplitRows.VarlenShortRowsPoisonedNeighbours'
logged "$R/memcheck.txt" 60 compute-sanitizer --tool memcheck "$S/hopattn_gpu_tests" \
  --gtest_filter='*BatchKernelFeatures.MatchesCpuReference/baseline'
tail -2 "$R/race.txt" "$R/sync.txt" "$R/memcheck.txt"
fi
[[ $PART == tests ]] && exit 0

bash tools/ab_bench.sh "$H/hopattn" "$S/hopattn" 3 batch \
  "--step a --batch-impl batch" "--step a --batch-impl batch --batch-order spread" \
  "--step b --batch-impl batch" "--step b --batch-impl batch --batch-order spread" \
  "--step c --batch-impl batch" "--step d --batch-impl batch" > "$R/ab_batch.txt" 2>&1
bash tools/ab_bench.sh "$H/hopattn" "$S/hopattn" 3 fwd \
  "--batch 64 --q-len 16 --kv-len 4096 --heads 32:8 --head-dim 128" \
  "--batch 64 --q-len 4 --kv-len 8192 --heads 32:8 --head-dim 128 --page-size 16" \
  "--batch 32 --q-len 48 --kv-len 2048 --heads 16 --head-dim 64 --no-causal" > "$R/ab_fwd.txt" 2>&1
for n in 16 33; do
  bash tools/ab_bench.sh "$H/hopattn" "$S/hopattn" 2 batch "--step c --batch-impl batch --batch-ctas $n"
done > "$R/ctas.txt" 2>&1
cat "$R/ab_batch.txt" "$R/ab_fwd.txt" "$R/ctas.txt"
# Where a decode item waits on 33 CTAs (step c): the consumers' full-barrier waits (the ring) or
# their wgmma waits (the GEMM rate), in each build.
for n in main split; do
  b=$H
  [[ $n == split ]] && b=$S
  timeout 120 ncu --clock-control none --set full -k regex:fwd_kernel -c 1 -o "$R/c33_$n" \
    "$b/hopattn" bench batch --step c --batch-impl batch --batch-ctas 33 --impl kernel --no-check \
    --iters 1 --warmup 0 > "$R/c33_$n.log" 2>&1
  ncu --import "$R/c33_$n.ncu-rep" --page source --csv --print-source sass > "$R/c33_$n.src.csv" 2>&1
  python3 tools/ncu_source.py stalls "$R/c33_$n.src.csv" > "$R/c33_$n.stalls.txt" 2>&1
  python3 tools/ncu_source.py waits "$R/c33_$n.src.csv" > "$R/c33_$n.waits.txt" 2>&1
  rm -f "$R/c33_$n.ncu-rep" "$R/c33_$n.src.csv"
done
