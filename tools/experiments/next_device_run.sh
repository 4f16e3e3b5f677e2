#!/usr/bin/env bash
# The device call that run set ab left for the next session (docs/perf/NOTES.md, "Next device
# runs", items 0 and 7; about 5 minutes on an H100):
#
#   tools/experiments/next_device_run.sh MAIN_DIR PREFETCH_DIR TWO_WRITERS_DIR SMALL_DIR OUT_DIR [PARTS]
#
# PARTS: any of "batch bwd decode" (default all three; batch alone takes ~5 minutes, bwd and
# decode together ~5, so two calls of the 10-minute limit).
# Each *_DIR holds the `hopattn` CLI and `hopattn_gpu_tests` of main, of main with
# batch_decode_prefetch.patch, with bwd_det_two_writers.patch and with decode_small_prefetch.patch.
# Logs under OUT_DIR:
#   main_side.txt          main's BatchKernelSide.* (PagesSmallerThanABlock first ran on a patch)
#   pf_tests.txt, pf_mem.txt   the prefetch build's *Batch* tests, memcheck on DecodePrefetch
#   pf_sweep.txt           steps a-d at --batch-prefetch 0..6, (b) in the spread order, small grids
#   fi_peers.txt, batch_peers.md   FlashInfer's BatchAttention and separate wrappers on a-d (with
#                          the peer kit as .peers in the checkout: carry it)
#   tw_*.txt               the two-writer build's bwd tests, sanitizers and hd64 rows against main
#   sp_*.txt               the small decode kernel's prefetch: decode tests, memcheck, rows vs main
set -u
source "$(dirname "$0")/helpers.sh"
M=$1 P=$2 W=$3 S=$4 R=$5 PARTS=${6:-batch bwd decode}
mkdir -p "$R"
has() { [[ " $PARTS " == *" $1 "* ]]; }

if has batch; then

logged $R/main_side.txt 60 $M/hopattn_gpu_tests --gtest_filter='BatchKernelSide.*'
logged $R/pf_tests.txt 120 $P/hopattn_gpu_tests --gtest_filter='*Batch*'
logged $R/pf_mem.txt 90 compute-sanitizer --tool memcheck $P/hopattn_gpu_tests \
  --gtest_filter='BatchKernel.DecodePrefetch'
t() { $P/hopattn bench batch --impl kernel --no-check --csv "$@" | us_of; }
for r in 1 2; do
  for st in a b c d; do
    line="r$r $st sep $(t --step $st --batch-impl separate)"
    for n in 0 1 2 3 4 6; do line="$line pf$n $(t --step $st --batch-impl batch --batch-prefetch $n)"; done
    echo "$line"
  done
  echo "r$r b spread pf0 $(t --step b --batch-impl batch --batch-order spread)" \
    "pf2 $(t --step b --batch-impl batch --batch-order spread --batch-prefetch 2)" \
    "pf4 $(t --step b --batch-impl batch --batch-order spread --batch-prefetch 4)"
  echo "r$r a 33ctas pf0 $(t --step a --batch-impl batch --batch-ctas 33)" \
    "pf3 $(t --step a --batch-impl batch --batch-ctas 33 --batch-prefetch 3)"
  echo "r$r c 16ctas pf0 $(t --step c --batch-impl batch --batch-ctas 16)" \
    "pf3 $(t --step c --batch-impl batch --batch-ctas 16 --batch-prefetch 3)"
done > $R/pf_sweep.txt 2>&1
# FlashInfer's rows of the same steps in the same call (the peer kit carried as .peers; no
# hopattn install: batch_peers.py --peers-only), L2 flushed as the CLI's rows are.
if [ -d .peers ]; then
  (source .peers/install_on_device.sh .peers &&
    OUT=$R timeout 240 python3 bench/peers/batch_peers.py --peers-only --flush-l2) \
    > $R/fi_peers.txt 2>&1
fi
fi

if has bwd; then
logged $R/tw_tests.txt 150 $W/hopattn_gpu_tests --gtest_filter='*Bwd*:Determinism.Bwd*'
logged $R/tw_race.txt 120 compute-sanitizer --tool racecheck $W/hopattn_gpu_tests \
  --gtest_filter='BwdKernel.E_Deterministic'
logged $R/tw_sync.txt 120 compute-sanitizer --tool synccheck $W/hopattn_gpu_tests \
  --gtest_filter='BwdKernel.E_Deterministic'
row() {
  $1 bench bwd $2 --impl kernel --no-check --csv |
    python3 -c 'import csv,sys; print(" ".join(str(round(float(r["time_ms"])*1000,1)) for r in csv.DictReader(sys.stdin)))'
}
for r in 1 2; do
  for s in "--batch 4 --q-len 4096 --kv-len 4096 --heads 32 --head-dim 64" \
    "--batch 4 --q-len 4096 --kv-len 4096 --heads 32 --head-dim 64 --no-causal" \
    "--batch 16 --q-len 1024 --kv-len 1024 --heads 32 --head-dim 64" \
    "--batch 1 --q-len 16384 --kv-len 16384 --heads 32 --head-dim 64"; do
    echo "r$r | $s | main $(row $M/hopattn "$s") | two writers $(row $W/hopattn "$s")"
  done
done > $R/tw_ab.txt 2>&1
fi

if has decode; then
logged $R/sp_tests.txt 150 $S/hopattn_gpu_tests --gtest_filter='*Decode*'
logged $R/sp_mem.txt 120 compute-sanitizer --tool memcheck $S/hopattn_gpu_tests \
  --gtest_filter='Grid/DecodeKernel.*'
d() { $1 bench decode $2 --heads 32:8 --head-dim 128 --impl kernel --no-check --csv | us_of; }
for r in 1 2; do
  for s in "--batch 1 --kv-len 1024" "--batch 1 --kv-len 8192" "--batch 1 --kv-len 32768" \
    "--batch 4 --kv-len 8192" "--batch 8 --kv-len 4096" "--batch 32 --kv-len 8192" \
    "--batch 1 --kv-len 8192 --kv-dtype fp8_e4m3"; do
    echo "r$r | $s | main $(d $M/hopattn "$s") | prefetch $(d $S/hopattn "$s")"
  done
done > $R/sp_ab.txt 2>&1
fi
grep -H "PASSED\|FAILED\|SUMMARY" $R/*.txt 2>/dev/null
cat $R/*_sweep.txt $R/*_ab.txt 2>/dev/null
