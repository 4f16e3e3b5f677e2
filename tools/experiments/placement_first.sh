#!/usr/bin/env bash
# `tools/experiments/placement_first.sh TARBALL OUT` (TARBALL: main's `hopattn`,
# `hopattn_gpu_tests`, `stream_rate`, `sm_gpcs`, optionally `hopattn_ring6`; ~5 minutes): the
# concurrent form placed by an SM order (--decode-sm-order, kernels/batch/placement.cuh), rows
# printed as measured: its GPU tests (and the decode kernels' and the concurrent form's); the GPC
# map; (a) and (b) against the separate launches with the hardware's placement, the decodes' SMs
# spread over the GPCs, packed into few (orders from sm_gpcs), and the library's own GPC probe
# (gpc); the six-stage build; the decodes and the plain stream on 28 / 20 SMs spread against
# packed (--free-sms); the held decodes and (a) over pages in pool order; (a) and (b) at other
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
