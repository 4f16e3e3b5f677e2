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
source "$(dirname "$0")/helpers.sh"
decode_run_start "$TARBALL" "$R" $M
# The decodes and the plain stream on N SMs spread over the GPCs against N in as few GPCs as
# hold them (sm_sets.py from the GPC map; --free-sms parks every other SM).
decodes_on_sm_sets $M "$R"
timeout 40 $M/stream_rate ctas | tee "$R/stream_ctas.txt"
# The plain stream on exactly the SMs a hold leaves the decodes (stream_rate sms LIST): near
# the decodes' ~70 GB/s an SM, where those SMs sit caps them; near 95-116, the kernels do.
for k in 112 104; do
  free=$(timeout 30 $M/hopattn bench decode --heads 32:8 --batch 124 --kv-len 4096 --hold-sms $k \
    --impl kernel --no-check --csv 2>&1 >/dev/null | sed -n 's/.*run on SMs //p' | head -1)
  echo "held $k leaves SMs $free"
  [ -n "$free" ] && timeout 40 $M/stream_rate sms "$free" | tee -a "$R/stream_held_sms.txt"
done
for k in 112 0; do
  echo "held $k small nhd $(decode_us $M/hopattn --hold-sms $k) hnd $(decode_us $M/hopattn --hold-sms $k --kv-layout hnd)" \
    "ring6 $(decode_us $M/hopattn_ring6 --hold-sms $k) read-flush $(decode_us $M/hopattn --hold-sms $k --l2-flush read)"
done
ab() { batch_us $1 a --batch-impl batch --batch-concurrent-ctas $2; }
for c in 26 28; do
  echo "a c$c main $(ab $M/hopattn $c) ring6 $(ab $M/hopattn_ring6 $c)"
done
