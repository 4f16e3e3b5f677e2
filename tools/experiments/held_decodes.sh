#!/usr/bin/env bash
# `tools/experiments/held_decodes.sh TARBALL OUT`: after run set as (docs/perf/NOTES.md), any
# card. TARBALL holds main's `hopattn`. Each decode kernel alone on the SMs that --hold-sms
# leaves it, on (a)'s decodes (124 x 4096) and (c) (128 x 8192), against the concurrent form's
# (a) at the same SM counts (~1 minute).
set -u
TARBALL=$1 R=$2 M=/tmp/held_decodes
mkdir -p $M && tar -xJf "$TARBALL" -C $M || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,memory.total --format=csv | tee "$R/gpu0.txt"
source "$(dirname "$0")/helpers.sh"
bb() { timeout 60 $M/hopattn bench batch --batch-impl batch "$@" --impl kernel --no-check --csv | us_of; }
dh() { timeout 60 $M/hopattn bench decode --heads 32:8 "$@" --impl kernel --no-check --csv | us_of; }
for r in ${ROUNDS:-1 2}; do
  for k in 0 104 112 116; do
    $M/hopattn bench decode --heads 32:8 --batch 124 --kv-len 4096 --hold-sms $k --impl kernel \
      --no-check --csv 2>&1 | grep -i error | cut -c1-300
    echo "r$r held $k a-decodes small $(dh --batch 124 --kv-len 4096 --hold-sms $k)" \
      "narrow $(dh --batch 124 --kv-len 4096 --hold-sms $k --decode-kernel narrow)"
  done
  [ -n "${HELD_ONLY:-}" ] && continue
  for c in 26 27 28; do
    echo "r$r a c$c small $(bb --step a --batch-concurrent-ctas $c)" \
      "narrow $(bb --step a --batch-concurrent-ctas $c --decode-kernel narrow)"
  done
done
