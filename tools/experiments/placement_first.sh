#!/usr/bin/env bash
# `tools/experiments/placement_first.sh TARBALL OUT` (TARBALL: main's `hopattn`,
# `hopattn_gpu_tests`, `stream_rate`, `sm_gpcs`, optionally `hopattn_ring6`; ~5 minutes): the
# concurrent form placed by an SM order (--decode-sm-order, kernels/batch/placement.cuh), rows
# printed as measured: its GPU tests (and the decode kernels' and the concurrent form's); the GPC
# map; (a) and (b) against the separate launches with the hardware's placement, the decodes' SMs
# spread over the GPCs, packed into few (orders from sm_gpcs), and the library's own GPC probe
# (gpc); the six-stage build; the decodes and the plain stream on 28 / 20 SMs spread against
# packed (--free-sms); the held decodes and (a) over pages in pool order; one decode CTA's own
# rate (one CTA an SM, far from the HBM's rate); (a) and (b) at other
# splits; memcheck of the placed launches.
set -u
TARBALL=$1 R=$2 M=/tmp/placement_first
source "$(dirname "$0")/helpers.sh"
unpack "$TARBALL" $M
gpu_tests "$R/tests.txt" 150 $M/hopattn_gpu_tests \
  'BatchKernelConcurrent.*:*DecodeKernel*:*Decode*Small*:*narrow*:*Side*:Safety.*Decode*'
timeout 20 $M/sm_gpcs | tee "$R/sm_gpcs.txt"
python3 "$(dirname "$0")/sm_sets.py" "$R/sm_gpcs.txt" 1024 > "$R/orders.txt"
spread=$(sed -n 's/^spread //p' "$R/orders.txt")
packed=$(sed -n 's/^packed //p' "$R/orders.txt")
echo "orders: spread $spread"
echo "orders: packed $packed"
b() { timeout 60 $M/hopattn bench batch --step $1 --impl kernel --no-check --csv "${@:2}" | us_of; }
for step in a b; do
  echo "$step separate $(b $step --batch-impl separate) batch $(b $step --batch-impl batch)" \
    "spread $(b $step --batch-impl batch --decode-sm-order "$spread")" \
    "packed $(b $step --batch-impl batch --decode-sm-order "$packed")" \
    "gpc $(b $step --batch-impl batch --decode-sm-order gpc)"
done
# The other suspect, the warps' latency: the one-CTA six-stage build (hopattn_ring6 in TARBALL,
# where present: main with SmallTraits's 24 KB a warp raised to 48, its two-CTA assert dropped)
# as the form's decodes, and the held decodes of both builds.
if [ -x $M/hopattn_ring6 ]; then
  r6() { timeout 60 $M/hopattn_ring6 bench batch --step $1 --impl kernel --no-check --csv "${@:2}" | us_of; }
  echo "a ring6 hw $(r6 a --batch-impl batch) gpc $(r6 a --batch-impl batch --decode-sm-order gpc)"
  echo "held 104 decodes main $(decode_us $M/hopattn --hold-sms 104)" \
    "ring6 $(decode_us $M/hopattn_ring6 --hold-sms 104)"
fi
decodes_on_sm_sets $M "$R"
# The pages' placement over the pool (NOTES, run set as: "left to test"): the held decodes and
# (a) with each request's pages one run of the pool (--page-order in-order) against shuffled.
echo "held 104 decodes shuffled $(decode_us $M/hopattn --hold-sms 104)" \
  "in-order $(decode_us $M/hopattn --hold-sms 104 --page-order in-order)"
echo "a in-order pages separate $(b a --batch-impl separate --page-order in-order)" \
  "batch $(b a --batch-impl batch --page-order in-order)"
# One decode CTA's own rate (the small kernel, one problem a CTA, --splits 1): 7 / 14 requests of
# 32k keys at 8 KV heads are 56 / 112 CTAs, one an SM wherever the hardware puts them, far from
# the HBM's rate. GB/s a CTA = 16 MB over the time. About 35: the CTA's four warps of three stages are what caps the decodes at ~70 an
# SM; near 48 or more: two CTAs an SM, or where the SMs sit, do.
for n in 7 14; do
  t=$(timeout 60 $M/hopattn bench decode --heads 32:8 --batch $n --kv-len 32768 --splits 1 \
    --impl kernel --no-check --csv | us_of)
  t6=""
  [ -x $M/hopattn_ring6 ] && t6=$(timeout 60 $M/hopattn_ring6 bench decode --heads 32:8 --batch $n \
    --kv-len 32768 --splits 1 --impl kernel --no-check --csv | us_of)
  python3 -c "import sys; n=int(sys.argv[1]); t=float(sys.argv[2]); r=sys.argv[3]
print(f'one-problem CTAs {n*8}: {t:.1f} us, {16*2**20/t/1e3:.1f} GB/s a CTA' +
      (f'; ring6 {float(r):.1f} us, {16*2**20/float(r)/1e3:.1f} GB/s a CTA' if r else ''))" $n "$t" "$t6"
done
for c in 28 30; do
  f="--batch-impl batch --batch-concurrent-ctas $c"
  echo "a c$c hw $(b a $f) spread $(b a $f --decode-sm-order "$spread") packed $(b a $f --decode-sm-order "$packed")"
done
for c in 14 18; do
  f="--batch-impl batch --batch-concurrent-ctas $c"
  echo "b c$c hw $(b b $f) spread $(b b $f --decode-sm-order "$spread") packed $(b b $f --decode-sm-order "$packed")"
done
logged "$R/memcheck.txt" 90 compute-sanitizer --tool memcheck $M/hopattn_gpu_tests \
  --gtest_filter='BatchKernelConcurrent.PlacedBySmOrder'
tail -4 "$R/memcheck.txt"
