#!/usr/bin/env bash
# The calls the next session makes first (docs/perf/NOTES.md, "Next device runs", item 0):
#
#   tools/experiments/next_device_run.sh MAIN OUT [PARTS]
#
# MAIN: a folder with main's `hopattn` CLI. PARTS: any of "steps order peers" (default "steps
# order": ~4 minutes on an H100). Logs under OUT:
#   gpu.txt          the card
#   steps.txt        batch steps a-d as batch / separate / varlen, two rounds
#   order.txt        (a) and (b) at decode CTA rates 1.0 .. 2.0 and (a) in the spread order;
#                    (d), 16 x 1024 and 2 x 8192 with and without the prefill sections
#   fi_peers.txt     FlashInfer 0.7.4's batch rows (batch_peers.py --peers-only), when the peer
#                    kit is carried (.peers)
set -u
source "$(dirname "$0")/helpers.sh"
M=$1 R=$2 PARTS=${3:-steps order}
mkdir -p "$R"
has() { [[ " $PARTS " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$R/gpu.txt"
# `bb CLI_DIR FLAGS`: the batch kernel's time of one step (us).
bb() { $1/hopattn bench batch --impl kernel --no-check --csv --batch-impl ${BI:-batch} "${@:2}" | us_of; }
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
        "r1.25 $(bb $M --step $s --batch-decode-rate 1.25) r1.5 $(bb $M --step $s)" \
        "r2 $(bb $M --step $s --batch-decode-rate 2) spread $(bb $M --step $s --batch-order spread)"
    done
    for s in d 16x1024 2x8192; do
      echo "r$r $s sections $(bb $M --step $s) plain $(bb $M --step $s --batch-sections off)"
    done
  done > $R/order.txt 2>&1
  cat $R/order.txt
fi

if has peers; then
  (source .peers/install_on_device.sh .peers &&
    OUT=$R timeout 200 python3 bench/peers/batch_peers.py --peers-only --flush-l2) \
    > $R/fi_peers.txt 2>&1
  tail -15 $R/fi_peers.txt
fi
