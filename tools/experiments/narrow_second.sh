#!/usr/bin/env bash
# `tools/experiments/narrow_second.sh TARBALL OUT`: after run set as (docs/perf/NOTES.md), any
# card. TARBALL holds main's `hopattn` (the narrow kernel's copies with the .L2::256B hint),
# `hopattn0` (the same without it), `hopattn_gpu_tests` and `stream_rate`. Asks: does the L2
# hint move the narrow kernel; is the small kernel or the narrow one faster on the concurrent
# form's few SMs at the same split; what do bulk copies carry an SM against cp.async; what does
# each decode kernel stream on 20 / 28 SMs alone (--hold-sms: the rest held), (a)'s decodes
# (124 x 4096) (~2 minutes).
set -u
TARBALL=$1 R=$2 M=/tmp/narrow_second
mkdir -p $M && tar -xJf "$TARBALL" -C $M || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,memory.total --format=csv | tee "$R/gpu0.txt"
source "$(dirname "$0")/helpers.sh"
bb() { $M/${H:-hopattn} bench batch --batch-impl ${BI:-batch} "$@" --impl kernel --no-check --csv | us_of; }
dd() { $M/${H:-hopattn} bench decode --batch 128 --kv-len 8192 --heads 32:8 "$@" --impl kernel --no-check --csv | us_of; }
logged "$R/tests_narrow.txt" 120 $M/hopattn_gpu_tests --gtest_filter='*narrow*:Safety.*Narrow*'
tail -2 "$R/tests_narrow.txt"
grep -E "^\[  FAILED|Failure" -A3 "$R/tests_narrow.txt" | head -20
timeout 60 $M/stream_rate > "$R/stream.txt" 2>&1
cat "$R/stream.txt"
dh() { $M/${H:-hopattn} bench decode --batch 124 --kv-len 4096 --heads 32:8 "$@" --impl kernel --no-check --csv | us_of; }
held() {
  for k in 0 104 112; do
    echo "r$1 held $k small $(dh --hold-sms $k) narrowL2 $(dh --hold-sms $k --decode-kernel narrow)" \
      "narrow0 $(H=hopattn0 dh --hold-sms $k --decode-kernel narrow)"
  done
}
held 1
row() {
  echo "r$1 c small $(dd) narrowL2 $(dd --decode-kernel narrow) narrow0 $(H=hopattn0 dd --decode-kernel narrow)"
  for c in 24 26 28; do
    echo "r$1 a c$c small $(bb --step a --batch-concurrent-ctas $c)" \
      "narrowL2 $(bb --step a --batch-concurrent-ctas $c --decode-kernel narrow)" \
      "narrow0 $(H=hopattn0 bb --step a --batch-concurrent-ctas $c --decode-kernel narrow)"
  done
  for c in 18 21; do
    echo "r$1 b c$c small $(bb --step b --batch-concurrent-ctas $c)" \
      "narrowL2 $(bb --step b --batch-concurrent-ctas $c --decode-kernel narrow)"
  done
  echo "r$1 sep a $(BI=separate bb --step a) b $(BI=separate bb --step b)"
}
row 1
held 2
row 2
