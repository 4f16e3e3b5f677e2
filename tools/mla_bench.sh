#!/usr/bin/env bash
# The MLA benchmark rows of docs/perf/mla.md through the CLI (hopattn bench mla), on the device:
# DeepSeek-V3 latent attention, page 64, L2 flushed before each timed call. Usage:
#   tools/mla_bench.sh [CLI]     (CLI defaults to build/bench/hopattn)
set -uo pipefail
CLI=${1:-build/bench/hopattn}
row() { "$CLI" bench mla --page-size 64 --iters 20 "$@"; }
echo "== memory-bound: 16 heads, q_len 1"
for b in 32 64 128; do
  for kv in 4096 8192 32768; do
    row --batch $b --kv-len $kv --heads 16
    row --batch $b --kv-len $kv --heads 16 --kv-dtype fp8_e4m3
  done
done
echo "== compute-bound: 128 heads, q_len 1 and 2"
for q in 1 2; do
  for b in 64 128; do
    for kv in 4096 16384; do row --batch $b --q-len $q --kv-len $kv --heads 128; done
  done
done
echo "== batch 1, kv 32k, 128 heads"
row --batch 1 --kv-len 32768 --heads 128
row --batch 1 --kv-len 32768 --heads 128 --kv-dtype fp8_e4m3
echo "== prefill chunks: 128 heads"
row --batch 1 --q-len 1024 --kv-len 8192 --heads 128 --iters 5 --no-check
row --batch 1 --q-len 4096 --kv-len 16384 --heads 128 --iters 5 --no-check
row --batch 1 --q-len 8192 --kv-len 32768 --heads 128 --iters 3 --no-check
