#!/usr/bin/env bash
# The calls the next session makes first (docs/perf/NOTES.md, "Next device runs", item 0):
#
#   tools/experiments/next_device_run.sh MAIN HINTS DEEP HANDOFF OUT [PARTS]
#
# MAIN, HINTS, DEEP, HANDOFF: folders with the `hopattn` CLI and `hopattn_gpu_tests` of main, of
# main + tma_l2_hints.patch, of main + batch_deep_ring.patch, of main + bwd_det_handoff.patch.
# PARTS: any of "rows deep probes ncu tests_hints tests_deep handoff" (default "rows deep
# probes": ~6 minutes on an H100; then "ncu tests_deep", "handoff" (~4 minutes) or
# "tests_hints" for the builds whose rows win). Logs under OUT:
#   rows.txt         main and hints: batch steps a-d, (c) on 16 CTAs, fwd and bwd rows, two
#                    rounds in turned order (us)
#   deep.txt         main and deep: batch steps a-d, (b) in the LPT order, (c) on 16 CTAs, two
#                    rounds in turned order (us)
#   probes.txt       main only: step (c) on 16 CTAs at pages of 16 / 64 / 256 (TMA boxes of 16 /
#                    64 / 128 rows: is a decode tile bound by its box count?), step (c) on 16
#                    and 132 CTAs through the cp.async gather (`--paged-tma off`) and by TMA,
#                    decode-shaped fwd calls by TMA and by the gather, and step (a) in its
#                    default order, partitioned (1.10x slower on the H100; the H200?) and at
#                    side-lane factors 4 and 8 (6 is the H100's optimum)
#   ncu_c16_*.txt    Nsight Compute of step (c) on 16 CTAs (main): where a decode tile's time goes
#   ho_*.txt         the handoff build's bwd tests, racecheck, synccheck, and (192, 128)
#                    deterministic rows (causal, non-causal, window) against main
#   tests_*.txt      GPU tests of the hints build (PtxTma, fwd, paged, batch, bwd, safety) and of
#                    the deep build (batch, paged, safety)
set -u
source "$(dirname "$0")/helpers.sh"
M=$1 H=$2 D=$3 O=$4 R=$5 PARTS=${6:-rows deep probes}
mkdir -p "$R"
has() { [[ " $PARTS " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$R/gpu.txt"
# `bb CLI_DIR FLAGS`: the batch kernel's time of one step (us); `ff CLI_DIR FLAGS` the fwd's.
bb() { $1/hopattn bench batch --impl kernel --no-check --csv --batch-impl batch "${@:2}" | us_of; }
ff() { $1/hopattn bench fwd --impl kernel --no-check --csv "${@:2}" | us_of; }

if has tests_hints; then
  logged $R/tests_hints.txt 420 $H/hopattn_gpu_tests \
    --gtest_filter='PtxTma.*:*Fwd*:*Batch*:*Bwd*:Determinism.*:Safety*'
  grep -H "PASSED\|FAILED\|rc=" $R/tests_hints.txt
fi
if has tests_deep; then
  logged $R/tests_deep.txt 300 $D/hopattn_gpu_tests \
    --gtest_filter='*Batch*:FwdPaged.*:PageSizes/FwdPagedGrid.*:Safety*'
  logged $R/tests_deep_mem.txt 150 compute-sanitizer --tool memcheck $D/hopattn_gpu_tests \
    --gtest_filter='BatchKernel.PureDecode128x8k:BatchKernelPartition.*'
  grep -H "PASSED\|FAILED\|SUMMARY\|rc=" $R/tests_deep.txt $R/tests_deep_mem.txt
fi

if has rows; then
  rows() {
    echo "r$r $2 a $(bb $1 --step a) b $(bb $1 --step b) c $(bb $1 --step c) d $(bb $1 --step d)" \
      "c16 $(bb $1 --step c --batch-ctas 16)" \
      "| fwd hd128 4k c $(ff $1 --head-dim 128 --batch 4 --q-len 4096 --kv-len 4096 --heads 32)" \
      "nc $(ff $1 --head-dim 128 --batch 4 --q-len 4096 --kv-len 4096 --heads 32 --no-causal)" \
      "16k $(ff $1 --head-dim 128 --batch 1 --q-len 16384 --kv-len 16384 --heads 32)" \
      "1k $(ff $1 --head-dim 128 --batch 16 --q-len 1024 --kv-len 1024 --heads 16 --no-causal)" \
      "hd64 $(ff $1 --head-dim 64 --batch 4 --q-len 4096 --kv-len 4096 --heads 32)" \
      "hd256 $(ff $1 --head-dim 256 --batch 1 --q-len 16384 --kv-len 16384 --heads 16)" \
      "paged $(ff $1 --head-dim 128 --batch 4 --q-len 2048 --kv-len 8192 --heads 32:8 --page-size 16)" \
      "| bwd hd128 $(bwd_us $1 '--batch 2 --q-len 4096 --kv-len 4096 --heads 32:8 --head-dim 128')" \
      "hd64 $(bwd_us $1 '--batch 4 --q-len 4096 --kv-len 4096 --heads 32 --head-dim 64')"
  }
  for r in 1 2; do
    if [ $r = 1 ]; then rows $M main; rows $H hints; else rows $H hints; rows $M main; fi
  done > $R/rows.txt 2>&1
  cat $R/rows.txt
fi

if has handoff; then
  logged $R/ho_tests.txt 200 $O/hopattn_gpu_tests --gtest_filter='*Bwd*:Determinism.Bwd*'
  logged $R/ho_race.txt 120 compute-sanitizer --tool racecheck $O/hopattn_gpu_tests \
    --gtest_filter='BwdKernel.N_*'
  logged $R/ho_sync.txt 120 compute-sanitizer --tool synccheck $O/hopattn_gpu_tests \
    --gtest_filter='BwdKernel.N_*'
  grep -H "PASSED\|FAILED\|SUMMARY\|rc=" $R/ho_tests.txt $R/ho_race.txt $R/ho_sync.txt
  for r in 1 2; do
    for s in "--batch 8 --q-len 2048 --kv-len 2048 --heads 10 --head-dim 192:128 --no-causal" \
      "--batch 8 --q-len 2048 --kv-len 2048 --heads 10 --head-dim 192:128" \
      "--batch 2 --q-len 8192 --kv-len 8192 --heads 10 --head-dim 192:128 --no-causal" \
      "--batch 2 --q-len 8192 --kv-len 8192 --heads 10 --head-dim 192:128" \
      "--batch 2 --q-len 4096 --kv-len 4096 --heads 32:8 --head-dim 128 --no-causal"; do
      echo "r$r | $s | main $(bwd_us $M "$s") | handoff $(bwd_us $O "$s")"
    done
  done > $R/ho_ab.txt 2>&1
  cat $R/ho_ab.txt
fi

if has deep; then
  drow() {
    echo "r$r $2 a $(bb $1 --step a) b $(bb $1 --step b) b_lpt $(bb $1 --step b --batch-order lpt)" \
      "c $(bb $1 --step c) d $(bb $1 --step d) c16 $(bb $1 --step c --batch-ctas 16)"
  }
  for r in 1 2; do
    if [ $r = 1 ]; then drow $M main; drow $D deep; else drow $D deep; drow $M main; fi
  done > $R/deep.txt 2>&1
  cat $R/deep.txt
fi

if has probes; then
  b() { bb $M "$@"; }
  f() { ff $M --head-dim 128 --batch 128 --q-len 1 --kv-len 8192 --heads 32:8 "$@"; }
  for r in 1 2; do
    echo "r$r c16 page 16 $(b --step c --batch-ctas 16) 64 $(b --step c --batch-ctas 16 --page-size 64)" \
      "256 $(b --step c --batch-ctas 16 --page-size 256)" \
      "gather: c16 $(b --step c --batch-ctas 16 --paged-tma off) c $(b --step c --paged-tma off)" \
      "tma: c $(b --step c)" \
      "| a $(b --step a) a_partition $(b --step a --batch-order partition)" \
      "a side-cost 4 $(b --step a --batch-side-cost 4) 8 $(b --step a --batch-side-cost 8)" \
      "| fwd 128 x (1 @ 8k) page 16 tma $(f --page-size 16) gather $(f --page-size 16 --paged-tma off)" \
      "page 64 tma $(f --page-size 64) gather $(f --page-size 64 --paged-tma off)"
  done > $R/probes.txt 2>&1
  cat $R/probes.txt
fi

if has ncu; then
  ncu --clock-control none --set full --import-source yes -k regex:fwd_kernel -c 1 \
    -o $R/ncu_c16_main $M/hopattn bench batch --impl kernel --no-check --iters 1 \
    --batch-impl batch --step c --batch-ctas 16 > $R/ncu_c16_main.log 2>&1
  ncu --import $R/ncu_c16_main.ncu-rep --page details > $R/ncu_c16_main.txt 2>&1
  ncu --import $R/ncu_c16_main.ncu-rep --page source --csv --print-source sass \
    > $R/ncu_c16_main.src.csv 2>&1
  rm -f $R/ncu_c16_main.ncu-rep
fi
