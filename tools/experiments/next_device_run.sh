#!/usr/bin/env bash
# The device call run set ac left for the next session (docs/perf/NOTES.md, "Next device runs",
# items 0 and 7; about 8 minutes on an H100, in two parts that each fit the 10-minute limit):
#
#   tools/experiments/next_device_run.sh MAIN PAGE_AHEAD THREE_STAGES BWDX EARLY_DV PARTITION OVERLAP OUT [PARTS]
#
# PARTS: any of "page bwdexp bwd pagetests ncu peers" (default all but ncu; page ~4 minutes,
# bwdexp ~3, bwd ~3, pagetests ~4, ncu ~2: three calls of the 10-minute limit). Each *_DIR holds the `hopattn` CLI and
# `hopattn_gpu_tests` of main, of main with paged_tma_page_ids_ahead.patch, of that with
# batch_hd128_three_stages.patch too, and of main with bwd_det_handoff.patch and
# bwd_hd256_turn_poll.patch (independent code paths: (192, 128) and 256, deterministic), and of
# main with bwd_early_dv.patch; PARTITION holds only the CLI of main + page ids ahead +
# batch_partition_order.patch (the same kernels as PAGE_AHEAD, the planner's partition order);
# OVERLAP: main + bwd_early_dv.patch + bwd_step_overlap.patch. Logs under OUT:
#   pa_tests.txt, pt_tests.txt, pt_fwd.txt, pa_mem.txt   paged fwd / batch tests of both paged
#                              builds, the three-stage build's fwd tests, memcheck on some
#   pa_ab.txt                  batch steps a-d, (c) on 16 CTAs (a decode tile's rate an SM), (a)
#                              with an fp8 cache, a paged fwd row and three dense hd128 fwd rows:
#                              main, page-ahead, three stages, two rounds in turned order
#   pa_side.txt                step (a) on page-ahead at side-lane factors 4, 5, 8, 10 and off
#   pa_part.txt                steps (b), (a) in the partition order at decode rates 1.25-2
#   ho_tests.txt, ho_race.txt, ho_sync.txt, ho_ab.txt   that bwd build's tests, sanitizers,
#                              (192, 128) and 256 rows against main
#   ev_*.txt, ov_*.txt, ev_ab.txt   the early-dV and overlap builds' bwd tests, sanitizers,
#                              and rows at every head dim (both modes) against main
#   ncu_c16_*.txt, ncu_c16_*.src.csv   Nsight Compute of step (c) on 16 CTAs, main and page-ahead
#   fi_peers.txt, batch_peers.md   FlashInfer's batch rows (with the peer kit as .peers)
set -u
source "$(dirname "$0")/helpers.sh"
M=$1 P=$2 T=$3 H=$4 E=$5 Q=$6 W=$7 R=$8 PARTS=${9:-page bwdexp bwd pagetests peers}
mkdir -p "$R"
has() { [[ " $PARTS " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$R/gpu.txt"

if has pagetests; then
for bin in "$P" "$T"; do
  n=$([ "$bin" = "$P" ] && echo pa || echo pt)
  logged $R/${n}_tests.txt 240 $bin/hopattn_gpu_tests \
    --gtest_filter='FwdPaged.*:PageSizes/FwdPagedGrid.*:FwdKVLoadPath.*:*Batch*:SafetyFwd.*:Safety.*'
done
logged $R/pt_fwd.txt 240 $T/hopattn_gpu_tests --gtest_filter='*Fwd*:Determinism.Fwd*'
logged $R/pa_mem.txt 150 compute-sanitizer --tool memcheck $P/hopattn_gpu_tests \
  --gtest_filter='FwdPaged.*:BatchKernelSide.*'
fi

if has page; then
b() { $1/hopattn bench batch --impl kernel --no-check --csv --batch-impl batch "${@:2}" | us_of; }
f() { $1/hopattn bench fwd --impl kernel --no-check --csv --head-dim 128 "${@:2}" | us_of; }
rows() {
  echo "r$r $2 a $(b $1 --step a) b $(b $1 --step b) c $(b $1 --step c) d $(b $1 --step d)" \
    "c16 $(b $1 --step c --batch-ctas 16) a_fp8 $(b $1 --step a --kv-dtype fp8_e4m3)" \
    "fwd_paged $(f $1 --batch 4 --q-len 2048 --kv-len 8192 --heads 32:8 --page-size 16)" \
    "fwd_4k $(f $1 --batch 4 --q-len 4096 --kv-len 4096 --heads 32)" \
    "fwd_4k_nc $(f $1 --batch 4 --q-len 4096 --kv-len 4096 --heads 32 --no-causal)" \
    "fwd_1k $(f $1 --batch 16 --q-len 1024 --kv-len 1024 --heads 16 --no-causal)"
}
for r in 1 2; do
  if [ $r = 1 ]; then
    rows $M main; rows $P ahead; rows $T ahead3
  else
    rows $T ahead3; rows $P ahead; rows $M main
  fi
done > $R/pa_ab.txt 2>&1
# With faster decode tiles the side lane's best factor may move (run set ab: 5-6 on main).
for r in 1 2; do
  echo "r$r ahead a side-cost 4 $(b $P --step a --batch-side-cost 4)" \
    "5 $(b $P --step a --batch-side-cost 5) 8 $(b $P --step a --batch-side-cost 8)" \
    "10 $(b $P --step a --batch-side-cost 10) spread-only $(b $P --step a --batch-side off)"
done > $R/pa_side.txt 2>&1
# The partition order (prefill and decode works on separate CTAs) at modelled decode rates,
# against the same kernels' default order (pa_ab.txt's "ahead" rows).
for r in 1 2; do
  echo "r$r partition b 1.25 $(b $Q --step b --batch-order partition --batch-decode-rate 1.25)" \
    "1.5 $(b $Q --step b --batch-order partition) 2 $(b $Q --step b --batch-order partition --batch-decode-rate 2)" \
    "| a 1.5 $(b $Q --step a --batch-order partition) 2 $(b $Q --step a --batch-order partition --batch-decode-rate 2)" \
    "| b default $(b $Q --step b) a default $(b $Q --step a)"
done > $R/pa_part.txt 2>&1
fi

if has bwdexp; then
for bin in "$E" "$W"; do
  n=$([ "$bin" = "$E" ] && echo ev || echo ov)
  logged $R/${n}_tests.txt 200 $bin/hopattn_gpu_tests --gtest_filter='*Bwd*:Determinism.Bwd*'
  logged $R/${n}_race.txt 120 compute-sanitizer --tool racecheck $bin/hopattn_gpu_tests \
    --gtest_filter='BwdKernel.E_Deterministic:BwdKernel.B_SingleTileHeadDim64AndFp16:BwdKernel.N_*'
  logged $R/${n}_sync.txt 120 compute-sanitizer --tool synccheck $bin/hopattn_gpu_tests \
    --gtest_filter='BwdKernel.E_Deterministic:BwdKernel.B_SingleTileHeadDim64AndFp16:BwdKernel.N_*'
done
for r in 1 2; do
  for s in "--batch 2 --q-len 4096 --kv-len 4096 --heads 32:8 --head-dim 128" \
    "--batch 1 --q-len 8192 --kv-len 8192 --heads 16 --head-dim 128 --no-causal" \
    "--batch 1 --q-len 8192 --kv-len 8192 --heads 32:8 --head-dim 128" \
    "--batch 16 --q-len 1024 --kv-len 1024 --heads 16 --head-dim 128" \
    "--batch 4 --q-len 4096 --kv-len 4096 --heads 32 --head-dim 64" \
    "--batch 4 --q-len 4096 --kv-len 4096 --heads 32 --head-dim 64 --no-causal" \
    "--batch 16 --q-len 1024 --kv-len 1024 --heads 32 --head-dim 64" \
    "--batch 2 --q-len 4096 --kv-len 4096 --heads 32:8 --head-dim 256" \
    "--batch 8 --q-len 2048 --kv-len 2048 --heads 10 --head-dim 192:128"; do
    if [ $r = 1 ]; then
      echo "r$r | $s | main $(bwd_us $M/hopattn "$s") | early_dv $(bwd_us $E/hopattn "$s")" \
        "| overlap $(bwd_us $W/hopattn "$s")"
    else
      echo "r$r | $s | overlap $(bwd_us $W/hopattn "$s") | early_dv $(bwd_us $E/hopattn "$s")" \
        "| main $(bwd_us $M/hopattn "$s")"
    fi
  done
done > $R/ev_ab.txt 2>&1
fi

if has bwd; then
logged $R/ho_tests.txt 200 $H/hopattn_gpu_tests --gtest_filter='*Bwd*:Determinism.Bwd*'
logged $R/ho_race.txt 120 compute-sanitizer --tool racecheck $H/hopattn_gpu_tests \
  --gtest_filter='BwdKernel.N_*:BwdKernel.E_Deterministic'
logged $R/ho_sync.txt 120 compute-sanitizer --tool synccheck $H/hopattn_gpu_tests \
  --gtest_filter='BwdKernel.N_*'
for r in 1 2; do
  for s in "--batch 8 --q-len 2048 --kv-len 2048 --heads 10 --head-dim 192:128 --no-causal" \
    "--batch 8 --q-len 2048 --kv-len 2048 --heads 10 --head-dim 192:128" \
    "--batch 2 --q-len 8192 --kv-len 8192 --heads 10 --head-dim 192:128" \
    "--batch 2 --q-len 4096 --kv-len 4096 --heads 32:8 --head-dim 128" \
    "--batch 2 --q-len 4096 --kv-len 4096 --heads 32:8 --head-dim 256" \
    "--batch 1 --q-len 8192 --kv-len 8192 --heads 16 --head-dim 256 --no-causal"; do
    echo "r$r | $s | main $(bwd_us $M/hopattn "$s") | bwdx $(bwd_us $H/hopattn "$s")"
  done
done > $R/ho_ab.txt 2>&1
fi

# Where a decode tile's time goes: Nsight Compute on step (c) over 16 CTAs (decode tiles only,
# not HBM-bound), main and page-ahead; the source page (SASS with stall samples) for
# tools/ncu_source.py (stalls, waits) and the details page.
if has ncu; then
  for bin in "$M" "$P"; do
    n=$([ "$bin" = "$M" ] && echo main || echo ahead)
    ncu --clock-control none --set full --import-source yes -k regex:fwd_kernel -c 1 \
      -o $R/ncu_c16_$n $bin/hopattn bench batch --impl kernel --no-check --iters 1 \
      --batch-impl batch --step c --batch-ctas 16 > $R/ncu_c16_$n.log 2>&1
    ncu --import $R/ncu_c16_$n.ncu-rep --page details > $R/ncu_c16_$n.txt 2>&1
    ncu --import $R/ncu_c16_$n.ncu-rep --page source --csv --print-source sass \
      > $R/ncu_c16_$n.src.csv 2>&1
    rm -f $R/ncu_c16_$n.ncu-rep
  done
fi

if has peers && [ -d .peers ]; then
  (source .peers/install_on_device.sh .peers &&
    OUT=$R timeout 240 python3 bench/peers/batch_peers.py --peers-only --flush-l2) \
    > $R/fi_peers.txt 2>&1
fi
grep -H "PASSED\|FAILED\|SUMMARY" $R/*.txt 2>/dev/null
cat $R/gpu.txt $R/*_ab.txt $R/pa_side.txt $R/pa_part.txt 2>/dev/null
