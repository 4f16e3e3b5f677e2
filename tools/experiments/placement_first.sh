#!/usr/bin/env bash
# `tools/experiments/placement_first.sh TARBALL OUT` (TARBALL: main's `hopattn`,
# `hopattn_gpu_tests`, `stream_rate`, `sm_gpcs`, optionally `hopattn_ring6`, `hopattn_stamps`,
# `hopattn_s2`, `hopattn_nomath`, `hopattn_nocopies`; ~7 minutes; the log also in OUT/log.txt):
# rows printed as measured: the GPU tests of the decode kernels and the concurrent form; the GPC
# map; the small decode kernel's halves apart (no math, no copies) and its CTAs' cycles by phase
# (ring stamps); whole TPCs against one SM a TPC (stream and decodes); the concurrent form placed
# by an SM order (--decode-sm-order, kernels/batch/placement.cuh): (a) and (b) against the
# separate launches with the hardware's placement, the decodes' SMs spread over the GPCs (whole
# TPCs), packed into few (orders from sm_gpcs), and the library's own GPC probe (gpc: spread,
# one SM a TPC first); the six-stage build; S in two MMA chains; the decodes and the plain stream
# on 28 / 20 SMs spread against packed (--free-sms); the held decodes and (a) over pages in pool
# order; one decode CTA's own rate (one CTA an SM, far from the HBM's rate); (a) and (b) at
# other splits; memcheck of the placed launches.
set -u
TARBALL=$1 R=$2 M=/tmp/placement_first
mkdir -p "$R"
exec > >(tee "$R/log.txt") 2>&1  # the whole log comes back, not only the output's tail
source "$(dirname "$0")/helpers.sh"
decode_run_start "$TARBALL" "$R" $M
python3 "$(dirname "$0")/sm_sets.py" "$R/sm_gpcs.txt" 1024 > "$R/orders.txt"
spread=$(sed -n 's/^spread //p' "$R/orders.txt")
packed=$(sed -n 's/^packed //p' "$R/orders.txt")
echo "orders: spread $spread"
echo "orders: packed $packed"
b() { batch_us $M/hopattn "$@"; }
# Where a decode CTA spends its cycles (hopattn_stamps in TARBALL, where present: main with
# tools/timeline/ring_stamps.patch): after each row, the last call's GB/s an SM, CTAs resident an
# SM, the CTA's phases, and each warp's cycles a block waiting for it, issuing the next copies
# and attending it. On 28 held SMs, wait small and issue + attend ~1,800 cycles a block: the
# warps' own work a block caps the SM (more warps, or two blocks' math interleaved); wait most
# of it: the memory side (placement, bytes in flight).
stamps_row() {
  local label=$1 out
  shift
  out=$(timeout 60 $M/hopattn_stamps bench "$@" --impl kernel --no-check --csv)
  echo "stamps row $label: $(echo "$out" | grep -v '^stamps\|^  ' | us_of) us"
  echo "$out" | grep '^stamps\|^  '
}
# main's decodes on 28 / 20 held SMs and on the full card, timed once for every row that
# compares a build or a page order with them.
held=$(decode_us $M/hopattn --hold-sms 104)
held112=$(decode_us $M/hopattn --hold-sms 112)
full=$(decode_us $M/hopattn)
# The decodes' two halves apart (hopattn_nomath: decode_small_no_math.patch, every block
# streamed, none attended; hopattn_nocopies: decode_small_no_copies.patch, every block attended,
# none copied; both results wrong, timing only), on the held SMs and the full card: the held row
# near the stream's ~95-116 GB/s an SM without the math says the math (with the ring's latency)
# holds the SMs back; near main's time without it, the memory side does.
if [ -x $M/hopattn_nomath ]; then
  for k in 104 112; do
    main=$held
    [ $k = 112 ] && main=$held112
    echo "held $k decodes main $main nomath $(decode_us $M/hopattn_nomath --hold-sms $k)" \
      "nocopies $(decode_us $M/hopattn_nocopies --hold-sms $k)"
  done
  echo "full-card decodes main $full nomath $(decode_us $M/hopattn_nomath)" \
    "nocopies $(decode_us $M/hopattn_nocopies)"
fi
if [ -x $M/hopattn_stamps ]; then
  dec="decode --heads 32:8 --batch 124 --kv-len 4096"
  stamps_row "held 104 decodes" $dec --hold-sms 104
  stamps_row "held 112 decodes" $dec --hold-sms 112
  stamps_row "full-card decodes" $dec
  stamps_row "one-problem CTAs 56" decode --heads 32:8 --batch 7 --kv-len 32768 --splits 1
  stamps_row "(a) as the concurrent form" batch --step a --batch-impl batch
fi
# The two SMs of a TPC (%smid 2k and 2k + 1, if the hardware numbers them so; sm_gpcs shows
# whether each GPC holds whole pairs) may share one port to the L2: 16 SMs of two GPCs as whole
# pairs against one SM of each of 16 pairs there, the plain stream and the decodes. Predicted,
# if they share it: singles ~1.3-1.8x the pairs' GB/s an SM, the held SMs' ~70 the pairs' rate;
# then the library's order (gpc below: one SM a TPC, each decode SM beside a prefill SM) beats
# spread (the same GPCs, whole pairs).
python3 "$(dirname "$0")/sm_sets.py" "$R/sm_gpcs.txt" 16 tpc > "$R/tpc16.txt"
for set in pairs singles; do
  list=$(sed -n "s/^$set //p" "$R/tpc16.txt")
  echo "tpc16 $set [$list] decodes small $(decode_us $M/hopattn --free-sms "$list")"
  timeout 40 $M/stream_rate sms "$list" | tail -3
done
for step in a b; do
  hw=$(b $step --batch-impl batch)
  [ $step = a ] && abatch=$hw  # (a) as the library runs it, for the builds' rows below
  echo "$step separate $(b $step --batch-impl separate) batch $hw" \
    "spread $(b $step --batch-impl batch --decode-sm-order "$spread")" \
    "packed $(b $step --batch-impl batch --decode-sm-order "$packed")" \
    "gpc $(b $step --batch-impl batch --decode-sm-order gpc)"
done
# The other suspect, the warps' latency: the one-CTA six-stage build (hopattn_ring6 in TARBALL,
# where present: main with SmallTraits's 24 KB a warp raised to 48, its two-CTA assert dropped)
# as the form's decodes, and the held decodes of both builds.
if [ -x $M/hopattn_ring6 ]; then
  r6() { batch_us $M/hopattn_ring6 "$@"; }
  echo "a ring6 hw $(r6 a --batch-impl batch) (main $abatch)" \
    "gpc $(r6 a --batch-impl batch --decode-sm-order gpc)"
  echo "held 104 decodes main $held ring6 $(decode_us $M/hopattn_ring6 --hold-sms 104)"
fi
# The block math's chain (hopattn_s2 in TARBALL, where present: main with
# tools/experiments/decode_s_two_chains.patch, S's MMAs in two chains of four instead of one of
# eight): faster on the held SMs only if each warp's own chain a block caps them (the stamps'
# attend share says whether it can).
if [ -x $M/hopattn_s2 ]; then
  timeout 60 $M/hopattn_s2 bench decode --heads 32:8 --batch 5 --kv-len 1000 --impl kernel |
    grep -E "OK|FAIL|ERROR" | head -2
  echo "held 104 decodes main $held s2 $(decode_us $M/hopattn_s2 --hold-sms 104)" \
    "full card main $full s2 $(decode_us $M/hopattn_s2)"
  echo "a batch main $abatch s2 $(batch_us $M/hopattn_s2 a --batch-impl batch)"
fi
decodes_on_sm_sets $M "$R"
# The pages' placement over the pool (NOTES, run set as: "left to test"): the held decodes and
# (a) with each request's pages one run of the pool (--page-order in-order) against shuffled.
echo "held 104 decodes shuffled $held" \
  "in-order $(decode_us $M/hopattn --hold-sms 104 --page-order in-order)"
echo "a in-order pages separate $(b a --batch-impl separate --page-order in-order)" \
  "batch $(b a --batch-impl batch --page-order in-order)"
# One decode CTA's own rate (the small kernel, one problem a CTA, --splits 1): 7 / 14 requests of
# 32k keys at 8 KV heads are 56 / 112 CTAs, one an SM wherever the hardware puts them, far from
# the HBM's rate. GB/s a CTA = 16 MB over the time. About 35: the CTA's four warps of three
# stages cap the decodes at ~70 an SM; near 48 or more: two CTAs an SM, or where the SMs sit, do.
one_cta_rate() {
  local t
  t=$(timeout 60 "$1" bench decode --heads 32:8 --batch $2 --kv-len 32768 --splits 1 --impl kernel \
    --no-check --csv | us_of)
  python3 -c "import sys; t = float(sys.argv[1])
print(f'{t:.1f} us, {16 * 2**20 / t / 1e3:.1f} GB/s a CTA')" "$t"
}
for n in 7 14; do
  echo "one-problem CTAs $((n * 8)): main $(one_cta_rate $M/hopattn $n)" \
    "ring6 $([ -x $M/hopattn_ring6 ] && one_cta_rate $M/hopattn_ring6 $n)"
done
for split in "a 28" "a 30" "b 14" "b 18"; do
  set -- $split
  f="--batch-impl batch --batch-concurrent-ctas $2"
  echo "$1 c$2 hw $(b $1 $f) spread $(b $1 $f --decode-sm-order "$spread")" \
    "packed $(b $1 $f --decode-sm-order "$packed")"
done
logged "$R/memcheck.txt" 90 compute-sanitizer --tool memcheck $M/hopattn_gpu_tests \
  --gtest_filter='BatchKernelConcurrent.PlacedBySmOrder'
tail -4 "$R/memcheck.txt"
