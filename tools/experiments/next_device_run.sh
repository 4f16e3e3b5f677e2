#!/usr/bin/env bash
# The device call run set ac left for the next session (docs/perf/NOTES.md, "Next device runs",
# items 0 and 7; about 8 minutes on an H100, in two parts that each fit the 10-minute limit):
#
#   tools/experiments/next_device_run.sh MAIN_DIR PAGE_AHEAD_DIR HANDOFF_DIR OUT_DIR [PARTS]
#
# PARTS: any of "page bwd peers" (default all). Each *_DIR holds the `hopattn` CLI and
# `hopattn_gpu_tests` of main, of main with paged_tma_page_ids_ahead.patch, and of main with
# bwd_det_handoff.patch. Logs under OUT_DIR:
#   pa_tests.txt, pa_mem.txt   the page-ahead build's paged fwd / batch tests, memcheck on some
#   pa_ab.txt                  batch steps a-d, (c) on 16 CTAs (a decode tile's rate an SM), (a)
#                              with an fp8 cache, a paged fwd row: main against page-ahead, two
#                              rounds in alternating order
#   ho_tests.txt, ho_race.txt, ho_sync.txt, ho_ab.txt   the handoff build's bwd tests,
#                              sanitizers, (192, 128) rows against main
#   fi_peers.txt, batch_peers.md   FlashInfer's batch rows (with the peer kit as .peers)
set -u
source "$(dirname "$0")/helpers.sh"
M=$1 P=$2 H=$3 R=$4 PARTS=${5:-page bwd peers}
mkdir -p "$R"
has() { [[ " $PARTS " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$R/gpu.txt"

if has page; then
logged $R/pa_tests.txt 240 $P/hopattn_gpu_tests \
  --gtest_filter='FwdPaged.*:PageSizes/FwdPagedGrid.*:FwdKVLoadPath.*:*Batch*:SafetyFwd.*:Safety.*'
logged $R/pa_mem.txt 150 compute-sanitizer --tool memcheck $P/hopattn_gpu_tests \
  --gtest_filter='FwdPaged.*:BatchKernelSide.*'
b() { $1 bench batch --impl kernel --no-check --csv --batch-impl batch "${@:2}" | us_of; }
f() { $1 bench fwd --impl kernel --no-check --csv "${@:2}" | us_of; }
for r in 1 2; do
  for bin in "$M" "$P"; do
    [ $r = 2 ] && bin=$([ "$bin" = "$M" ] && echo "$P" || echo "$M")
    name=$([ "$bin" = "$M" ] && echo main || echo ahead)
    echo "r$r $name a $(b $bin --step a) b $(b $bin --step b) c $(b $bin --step c)" \
      "d $(b $bin --step d) c16 $(b $bin --step c --batch-ctas 16)" \
      "a_fp8 $(b $bin --step a --kv-dtype fp8_e4m3)" \
      "fwd_paged $(f $bin --batch 4 --q-len 2048 --kv-len 8192 --heads 32:8 --head-dim 128 --page-size 16)"
  done
done > $R/pa_ab.txt 2>&1
fi

if has bwd; then
logged $R/ho_tests.txt 200 $H/hopattn_gpu_tests --gtest_filter='*Bwd*:Determinism.Bwd*'
logged $R/ho_race.txt 120 compute-sanitizer --tool racecheck $H/hopattn_gpu_tests \
  --gtest_filter='BwdKernel.N_*:BwdKernel.E_Deterministic'
logged $R/ho_sync.txt 120 compute-sanitizer --tool synccheck $H/hopattn_gpu_tests \
  --gtest_filter='BwdKernel.N_*'
row() {
  $1 bench bwd $2 --impl kernel --no-check --csv |
    python3 -c 'import csv,sys; print(" ".join(str(round(float(r["time_ms"])*1000,1)) for r in csv.DictReader(sys.stdin)))'
}
for r in 1 2; do
  for s in "--batch 8 --q-len 2048 --kv-len 2048 --heads 10 --head-dim 192:128 --no-causal" \
    "--batch 8 --q-len 2048 --kv-len 2048 --heads 10 --head-dim 192:128" \
    "--batch 2 --q-len 8192 --kv-len 8192 --heads 10 --head-dim 192:128" \
    "--batch 2 --q-len 4096 --kv-len 4096 --heads 32:8 --head-dim 128"; do
    echo "r$r | $s | main $(row $M/hopattn "$s") | handoff $(row $H/hopattn "$s")"
  done
done > $R/ho_ab.txt 2>&1
fi

if has peers && [ -d .peers ]; then
  (source .peers/install_on_device.sh .peers &&
    OUT=$R timeout 240 python3 bench/peers/batch_peers.py --peers-only --flush-l2) \
    > $R/fi_peers.txt 2>&1
fi
grep -H "PASSED\|FAILED\|SUMMARY" $R/*.txt 2>/dev/null
cat $R/gpu.txt $R/*_ab.txt 2>/dev/null
