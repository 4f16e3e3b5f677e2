#!/usr/bin/env bash
# `tools/experiments/decode_rate_first.sh TARBALL OUT`: after run set as (docs/perf/NOTES.md,
# "Next device runs" item 0), any card. TARBALL holds main's `hopattn`, `hopattn_gpu_tests`,
# `stream_rate` (tools/stream_rate.cu) and `sm_gpcs` (tools/sm_gpcs.cu: which SMs share a GPC).
# First the GPU tests of the kernels the review after run set as refactored (WarpRing,
# keys_softmax_lazy, head_scales: SASS-equal in instruction counts, not yet run). Why the decode kernels stream ~70 GB/s an SM alone on 16-28 SMs where
# one CTA an SM streams 95-116: the stream at two CTAs of four warps an SM (the decode kernels'
# shape) against one of eight, and the decodes over an HND cache (a head's page rows contiguous)
# against NHD, on the SMs --hold-sms leaves them, and behind a read flush or none (~1 minute).
set -u
TARBALL=$1 R=$2 M=/tmp/decode_rate_first
mkdir -p $M && tar -xJf "$TARBALL" -C $M || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,memory.total --format=csv | tee "$R/gpu0.txt"
source "$(dirname "$0")/helpers.sh"
logged "$R/tests.txt" 240 $M/hopattn_gpu_tests \
  --gtest_filter='*DecodeKernel*:*Decode*Small*:*narrow*:*Side*:BatchKernelConcurrent.*:Safety.*Decode*'
tail -3 "$R/tests.txt"
grep -E "^\[  FAILED|Failure" -A3 "$R/tests.txt" | head -20
timeout 30 $M/sm_gpcs | tee "$R/sm_gpcs.txt"
timeout 60 $M/stream_rate ctas | tee "$R/stream_ctas.txt"
# The plain stream on exactly the SMs a hold leaves the decodes (stream_rate sms LIST): near
# the decodes' ~70 GB/s an SM, where those SMs sit caps them; near 95-116, the kernels do.
for k in 112 104; do
  free=$(timeout 30 $M/hopattn bench decode --heads 32:8 --batch 124 --kv-len 4096 --hold-sms $k \
    --impl kernel --no-check --csv 2>&1 >/dev/null | sed -n 's/.*run on SMs //p' | head -1)
  echo "held $k leaves SMs $free"
  [ -n "$free" ] && timeout 40 $M/stream_rate sms "$free" | tee -a "$R/stream_held_sms.txt"
done
dh() { timeout 60 $M/hopattn bench decode --heads 32:8 --batch 124 --kv-len 4096 "$@" --impl kernel --no-check --csv | us_of; }
for r in ${ROUNDS:-1}; do
  for k in 0 104 112; do
    echo "r$r held $k nhd small $(dh --hold-sms $k) narrow $(dh --hold-sms $k --decode-kernel narrow)" \
      "hnd small $(dh --hold-sms $k --kv-layout hnd) narrow $(dh --hold-sms $k --kv-layout hnd --decode-kernel narrow)"
  done
done
# The bench's write flush leaves the L2 full of dirty lines (stream_rate flushes nothing).
for k in 0 104 112; do
  echo "held $k small read-flush $(dh --hold-sms $k --l2-flush read) warm-l2 $(dh --hold-sms $k --warm-l2)"
done
# With a binary built at one CTA an SM and six stages a warp (TARBALL's optional hopattn_ring6:
# SmallTraits's 24 KB a warp raised to 48, its two-CTA assert dropped): four warps of five
# blocks in flight (160 KB an SM) against eight of two (128 KB). Faster: the warps wait on
# latency; slower: on their own compute between blocks.
if [ -x $M/hopattn_ring6 ]; then
  for k in 0 104 112; do
    echo "held $k ring6 $(timeout 60 $M/hopattn_ring6 bench decode --heads 32:8 --batch 124 --kv-len 4096 --hold-sms $k --impl kernel --no-check --csv | us_of)" \
      "warm-l2 $(timeout 60 $M/hopattn_ring6 bench decode --heads 32:8 --batch 124 --kv-len 4096 --hold-sms $k --warm-l2 --impl kernel --no-check --csv | us_of)"
  done
  # (a) as the concurrent form (its decodes by the small kernel of each build) at 26-28
  # prefill CTAs a group.
  for c in 26 27 28; do
    echo "a c$c main $(timeout 60 $M/hopattn bench batch --batch-impl batch --step a --batch-concurrent-ctas $c --impl kernel --no-check --csv | us_of)" \
      "ring6 $(timeout 60 $M/hopattn_ring6 bench batch --batch-impl batch --step a --batch-concurrent-ctas $c --impl kernel --no-check --csv | us_of)"
  done
fi
$M/hopattn bench decode --heads 32:8 --batch 124 --kv-len 4096 --kv-layout hnd --impl kernel 2>&1 | tail -2
