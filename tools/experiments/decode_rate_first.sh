#!/usr/bin/env bash
# `tools/experiments/decode_rate_first.sh TARBALL OUT`: after run set as (docs/perf/NOTES.md,
# "Next device runs" item 0), any card. TARBALL holds main's `hopattn`, `hopattn_gpu_tests`,
# `stream_rate` (tools/stream_rate.cu), `sm_gpcs` (tools/sm_gpcs.cu: which SMs share a GPC) and
# `hopattn_ring6` (main with SmallTraits's 24 KB a warp raised to 48 and its two-CTA assert
# dropped: one CTA an SM, six stages a warp). Why the decode kernels stream ~70 GB/s an SM alone
# on 16-28 SMs where one CTA an SM streams 95-116: decode_rate_short.sh's rows (the refactored
# kernels' GPU tests, then where the SMs sit, the CTA shape, the layout, the flush, the ring
# depth), then the rest in two rounds: the narrow kernel beside the small one at 0 / 104 / 112
# held SMs over NHD and HND, and the flush rows at 104 (~3 minutes in all).
set -u
TARBALL=$1 R=$2 M=/tmp/decode_rate_short  # where decode_rate_short.sh unpacked the binaries
bash "$(dirname "$0")/decode_rate_short.sh" "$TARBALL" "$R"
source "$(dirname "$0")/helpers.sh"
dh() { decode_us $M/hopattn "$@"; }
for r in ${ROUNDS:-1 2}; do
  for k in 0 104 112; do
    echo "r$r held $k nhd small $(dh --hold-sms $k) narrow $(dh --hold-sms $k --decode-kernel narrow)" \
      "hnd small $(dh --hold-sms $k --kv-layout hnd) narrow $(dh --hold-sms $k --kv-layout hnd --decode-kernel narrow)"
  done
done
echo "held 104 small read-flush $(dh --hold-sms 104 --l2-flush read) warm-l2 $(dh --hold-sms 104 --warm-l2)"
