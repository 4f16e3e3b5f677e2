#!/usr/bin/env bash
# `tools/experiments/decode_rate_short.sh TARBALL OUT` (TARBALL as decode_rate_first.sh's): why
# the decode kernels stream ~70 GB/s an SM alone on few SMs, the rows in the order of what they
# decide, each printed as measured (~2 minutes): the GPU tests of the kernels the review after
# run set as refactored (WarpRing, keys_softmax_lazy, head_scales: SASS-equal, not yet run); the
# GPC map; the decodes and the plain stream on 28 / 20 SMs spread over the GPCs against packed
# into few (--free-sms); the stream by CTA shape on the first SMs, and on the SMs a hold leaves;
# the held decodes (small over NHD / HND, the one-CTA six-stage build, a read flush) at 112 and
# 0 held SMs; then (a) as the concurrent form from both builds.
set -u
TARBALL=$1 R=$2 M=/tmp/decode_rate_short
mkdir -p $M && tar -xJf "$TARBALL" -C $M || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
source "$(dirname "$0")/helpers.sh"
logged "$R/tests.txt" 100 $M/hopattn_gpu_tests \
  --gtest_filter='*DecodeKernel*:*Decode*Small*:*narrow*:*Side*:BatchKernelConcurrent.*:Safety.*Decode*'
tail -3 "$R/tests.txt"
grep -E "^\[  FAILED|Failure" -A3 "$R/tests.txt" | head -20
timeout 20 $M/sm_gpcs | tee "$R/sm_gpcs.txt"
# The decodes and the plain stream on N SMs spread over the GPCs against N in as few GPCs as
# hold them (sm_sets.py from the GPC map; --free-sms parks every other SM).
for n in 28 20; do
  python3 "$(dirname "$0")/sm_sets.py" "$R/sm_gpcs.txt" $n > "$R/sets$n.txt"
  for set in spread packed; do
    list=$(sed -n "s/^$set //p" "$R/sets$n.txt")
    echo "n$n $set [$list] decodes small $(timeout 30 $M/hopattn bench decode --heads 32:8 --batch 124 \
      --kv-len 4096 --free-sms "$list" --impl kernel --no-check --csv | us_of)"
    timeout 40 $M/stream_rate sms "$list" | tail -3
  done
done
timeout 40 $M/stream_rate ctas | tee "$R/stream_ctas.txt"
# The plain stream on exactly the SMs a hold leaves the decodes (stream_rate sms LIST): near
# the decodes' ~70 GB/s an SM, where those SMs sit caps them; near 95-116, the kernels do.
for k in 112 104; do
  free=$(timeout 30 $M/hopattn bench decode --heads 32:8 --batch 124 --kv-len 4096 --hold-sms $k \
    --impl kernel --no-check --csv 2>&1 >/dev/null | sed -n 's/.*run on SMs //p' | head -1)
  echo "held $k leaves SMs $free"
  [ -n "$free" ] && timeout 40 $M/stream_rate sms "$free" | tee -a "$R/stream_held_sms.txt"
done
dh() { timeout 30 $1 bench decode --heads 32:8 --batch 124 --kv-len 4096 "${@:2}" --impl kernel --no-check --csv | us_of; }
for k in 112 0; do
  echo "held $k small nhd $(dh $M/hopattn --hold-sms $k) hnd $(dh $M/hopattn --hold-sms $k --kv-layout hnd)" \
    "ring6 $(dh $M/hopattn_ring6 --hold-sms $k) read-flush $(dh $M/hopattn --hold-sms $k --l2-flush read)"
done
ab() { timeout 30 $1 bench batch --batch-impl batch --step a --batch-concurrent-ctas $2 --impl kernel --no-check --csv | us_of; }
for c in 26 28; do
  echo "a c$c main $(ab $M/hopattn $c) ring6 $(ab $M/hopattn_ring6 $c)"
done
