#!/usr/bin/env bash
# `tools/experiments/h200_first.sh TARBALL OUT [PARTS]`: the first call of a session that wants
# an H200 (issue 11's (b) row has not run on one). On any other card it exits at once, so that an
# H100 lent for nvidia-h200 costs only its start; on an H200 it unpacks TARBALL (the `hopattn`
# CLI and `hopattn_gpu_tests` of main) and runs next_device_run.sh PARTS (default "quick peers
# cclock", ~4 minutes with .peers carried; part quick ends with plan()'s host times).
set -u
TARBALL=$1 R=$2 PARTS=${3:-quick peers cclock}
M=/tmp/h200_first
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,memory.total --format=csv | tee "$R/gpu0.txt"
lscpu | grep "Model name" >>"$R/gpu0.txt"
grep -q H200 "$R/gpu0.txt" || { echo "not an H200: nothing run"; exit 0; }
mkdir -p $M && tar -xJf "$TARBALL" -C $M || exit 1
timeout 500 bash "$(dirname "$0")/next_device_run.sh" $M "$R" "$PARTS" >"$R/main.txt" 2>&1
tail -40 "$R/main.txt"
