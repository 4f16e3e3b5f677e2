#!/usr/bin/env bash
# The calls the next session makes first (docs/perf/NOTES.md, "Next device runs", item 0):
#
#   tools/experiments/next_device_run.sh MAIN GATHER SPLIT OUT [PARTS]
#
# MAIN, GATHER, SPLIT: folders with the `hopattn` CLI and `hopattn_gpu_tests` of main, of main +
# gather_page_ids.patch and of main + decode_split.patch. PARTS: any of "steps order gather
# split tests_split tests_gather peers" (default "steps order split": ~6 minutes on an H100).
# Logs under OUT:
#   gpu.txt          the card
#   steps.txt        main: batch steps a-d as batch / separate / varlen, two rounds
#   order.txt        main: (a) and (b) at decode CTA rates 1.0 .. 2.0 and (a) in the spread
#                    order; (d) and 16 x 1024 with and without the prefill sections
#   gather.txt       main against GATHER: the cp.async gather (--paged-tma off) on step (c) at
#                    132 and 16 CTAs, fwd paged rows with pages of 1 (the gather's page size)
#                    and of 16 by the gather; TMA rows as controls
#   split.txt        main against SPLIT: a decode tile's rate (step (c) on 16 CTAs), steps a-d,
#                    (a) and (b) at decode CTA rates 1.25 / 1.5 / 2 (faster decode CTAs move the
#                    partition's best split), decode-shaped fwd calls
#   tests_split.txt  SPLIT's GPU tests (fwd, paged, batch, safety); split_memcheck.txt,
#                    split_racecheck.txt, split_synccheck.txt on decode-shaped steps
#   tests_gather.txt GATHER's GPU tests of every paged path; gather_memcheck.txt,
#                    gather_racecheck.txt
#   fi_peers.txt     FlashInfer 0.7.4's batch rows (batch_peers.py --peers-only), when the peer
#                    kit is carried (.peers)
set -u
source "$(dirname "$0")/helpers.sh"
M=$1 G=$2 S=$3 R=$4 PARTS=${5:-steps order split}
mkdir -p "$R"
has() { [[ " $PARTS " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$R/gpu.txt"
# `bb CLI_DIR FLAGS`: the batch kernel's time of one step (us); `ff CLI_DIR FLAGS` the fwd's.
bb() { $1/hopattn bench batch --impl kernel --no-check --csv --batch-impl ${BI:-batch} "${@:2}" | us_of; }
ff() { $1/hopattn bench fwd --impl kernel --no-check --csv "${@:2}" | us_of; }
# `ab ROW DIR NAME`: ROW (a function of a build's folder and label, reading $r) for main and for
# the build in DIR, two rounds in turned order.
ab() {
  for r in 1 2; do
    if [ $r = 1 ]; then $1 $M main; $1 $2 $3; else $1 $2 $3; $1 $M main; fi
  done
}
# `checked DIR NAME SECONDS TESTS MEMCHECK RACECHECK [SYNCCHECK]`: the build's GPU tests, then
# compute-sanitizer's tools on the given filters, into tests_NAME.txt and NAME_TOOL.txt.
checked() {
  local d=$1 n=$2 files=()
  logged $R/tests_$n.txt $3 $d/hopattn_gpu_tests --gtest_filter="$4"
  files+=($R/tests_$n.txt)
  local tool filter
  for tool in memcheck racecheck synccheck; do
    case $tool in memcheck) filter=$5 ;; racecheck) filter=$6 ;; synccheck) filter=${7:-} ;; esac
    [ -n "$filter" ] || continue
    logged $R/${n}_$tool.txt 150 compute-sanitizer --tool $tool $d/hopattn_gpu_tests \
      --gtest_filter="$filter"
    files+=($R/${n}_$tool.txt)
  done
  grep -H "PASSED\|FAILED\|SUMMARY\|rc=" "${files[@]}"
}

if has steps; then
  for r in 1 2; do
    for s in a b c d; do
      echo "r$r $s batch $(bb $M --step $s) separate $(BI=separate bb $M --step $s)" \
        "varlen $(BI=varlen bb $M --step $s)"
    done
  done > $R/steps.txt 2>&1
  cat $R/steps.txt
fi

if has order; then
  for r in 1 2; do
    for s in a b; do
      echo "r$r $s r1.0 $(bb $M --step $s --batch-decode-rate 1) r1.1 $(bb $M --step $s --batch-decode-rate 1.1)" \
        "r1.25 $(bb $M --step $s) r1.5 $(bb $M --step $s --batch-decode-rate 1.5)" \
        "r2 $(bb $M --step $s --batch-decode-rate 2) spread $(bb $M --step $s --batch-order spread)"
    done
    for s in d 16x1024 2x8192; do
      echo "r$r $s sections $(bb $M --step $s) plain $(bb $M --step $s --batch-sections off)"
    done
  done > $R/order.txt 2>&1
  cat $R/order.txt
fi

if has gather; then
  gr() {
    echo "r$r $2 c_gather $(bb $1 --step c --paged-tma off) c16_gather $(bb $1 --step c --batch-ctas 16 --paged-tma off)" \
      "c_tma $(bb $1 --step c) d_gather $(bb $1 --step d --paged-tma off)" \
      "| fwd p1 $(ff $1 --head-dim 128 --batch 4 --q-len 2048 --kv-len 8192 --heads 32:8 --page-size 1)" \
      "p16_gather $(ff $1 --head-dim 128 --batch 4 --q-len 2048 --kv-len 8192 --heads 32:8 --page-size 16 --paged-tma off)" \
      "p16_tma $(ff $1 --head-dim 128 --batch 4 --q-len 2048 --kv-len 8192 --heads 32:8 --page-size 16)" \
      "dec_p1 $(ff $1 --head-dim 128 --batch 128 --q-len 1 --kv-len 8192 --heads 32:8 --page-size 1)"
  }
  ab gr $G gather > $R/gather.txt 2>&1
  cat $R/gather.txt
fi

if has split; then
  sr() {
    echo "r$r $2 c16 $(bb $1 --step c --batch-ctas 16) c16_p64 $(bb $1 --step c --batch-ctas 16 --page-size 64)" \
      "a $(bb $1 --step a) a_r1.5 $(bb $1 --step a --batch-decode-rate 1.5) a_r2 $(bb $1 --step a --batch-decode-rate 2)" \
      "b $(bb $1 --step b) b_r2 $(bb $1 --step b --batch-decode-rate 2) c $(bb $1 --step c) d $(bb $1 --step d)" \
      "| fwd dec128 $(ff $1 --head-dim 128 --batch 128 --q-len 1 --kv-len 8192 --heads 32:8 --page-size 16)" \
      "dec8 $(ff $1 --head-dim 128 --batch 8 --q-len 1 --kv-len 8192 --heads 32:8 --page-size 16)" \
      "hd64_dec $(ff $1 --head-dim 64 --batch 64 --q-len 4 --kv-len 4096 --heads 32:8 --page-size 16)"
  }
  ab sr $S split > $R/split.txt 2>&1
  cat $R/split.txt
fi

if has tests_split; then
  checked $S split 360 '*Fwd*:*Batch*:*Paged*:PageSizes/*:Safety*' \
    'BatchKernel.PureDecode128x8k:BatchKernelPartition.*:FwdPaged.*' 'BatchKernelPartition.*' \
    'BatchKernelPartition.*'
fi

if has tests_gather; then
  checked $G gather 300 'FwdPaged.*:PageSizes/*:FwdKVLoadPath.*:*Batch*:Safety*:*Paged*' \
    'FwdKVLoadPath.*:FwdPaged.*' 'FwdKVLoadPath.PagedTmaTurnedOff'
fi

if has peers; then
  (source .peers/install_on_device.sh .peers &&
    OUT=$R timeout 200 python3 bench/peers/batch_peers.py --peers-only --flush-l2) \
    > $R/fi_peers.txt 2>&1
  tail -15 $R/fi_peers.txt
fi
