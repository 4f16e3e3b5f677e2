#!/usr/bin/env bash
# `tools/experiments/narrow_first.sh TARBALL OUT`: the first call after the narrow decode kernel
# (docs/perf/NOTES.md, "Built ... the narrow decode kernel"), any card. TARBALL holds main's
# `hopattn`, `hopattn_gpu_tests` and `stream_rate` (tools/stream_rate.cu). In order of value, so
# that a short window still answers the first questions: the narrow kernel's GPU tests (decode,
# the concurrent form, safety), then (a) / (b) with the concurrent form's decodes by the small
# (auto) and the narrow kernel at several prefill CTA counts against the separate launches, the
# concurrent form's tail (--batch-concurrent-tail), (c) through both kernels, the stream ceilings
# an SM, a second round, memcheck and racecheck last (~5 minutes).
set -u
TARBALL=$1 R=$2 M=/tmp/narrow_first
mkdir -p $M && tar -xJf "$TARBALL" -C $M || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,memory.total --format=csv | tee "$R/gpu0.txt"
source "$(dirname "$0")/helpers.sh"
bb() { $M/hopattn bench batch --batch-impl ${BI:-batch} "$@" --impl kernel --no-check --csv | us_of; }
dd() { $M/hopattn bench decode --batch 128 --kv-len 8192 --heads 32:8 "$@" --impl kernel --no-check --csv | us_of; }
logged "$R/tests_narrow.txt" 120 $M/hopattn_gpu_tests \
  --gtest_filter='*narrow*:BatchKernelConcurrent.*:Safety.*Narrow*'
tail -3 "$R/tests_narrow.txt"
grep -E "^\[  FAILED|Failure" -A3 "$R/tests_narrow.txt" | head -30
$M/hopattn bench batch --step a --batch-impl batch --impl kernel --decode-kernel narrow 2>&1 |
  grep -iE "max err|rows:|concurrent form" | cut -c1-200 | head -4
a_row() {
  echo "r$1 a auto $(bb --step a) narrow $(bb --step a --decode-kernel narrow)" \
    "n27 $(bb --step a --decode-kernel narrow --batch-concurrent-ctas 27)" \
    "n28 $(bb --step a --decode-kernel narrow --batch-concurrent-ctas 28)" \
    "n29 $(bb --step a --decode-kernel narrow --batch-concurrent-ctas 29) sep $(BI=separate bb --step a)"
}
b_row() {
  echo "r$1 b auto $(bb --step b) narrow $(bb --step b --decode-kernel narrow)" \
    "n14 $(bb --step b --decode-kernel narrow --batch-concurrent-ctas 14)" \
    "n16 $(bb --step b --decode-kernel narrow --batch-concurrent-ctas 16)" \
    "n18 $(bb --step b --decode-kernel narrow --batch-concurrent-ctas 18)" \
    "n21 $(bb --step b --decode-kernel narrow --batch-concurrent-ctas 21) sep $(BI=separate bb --step b)"
}
t_row() {
  echo "r$1 a tail1.0 $(bb --step a --batch-concurrent-tail 1.0)" \
    "narrow+tail1.0 $(bb --step a --decode-kernel narrow --batch-concurrent-tail 1.0)" \
    "narrow+tail1.2 $(bb --step a --decode-kernel narrow --batch-concurrent-tail 1.2)" \
    "narrow+tail0.8 $(bb --step a --decode-kernel narrow --batch-concurrent-tail 0.8)" \
    "narrow+tail1.0+c27 $(bb --step a --decode-kernel narrow --batch-concurrent-tail 1.0 --batch-concurrent-ctas 27)"
}
a_row 1
b_row 1
t_row 1
echo "c decode 128x8k small $(dd) narrow $(dd --decode-kernel narrow)"
timeout 40 $M/stream_rate > "$R/stream.txt" 2>&1
cat "$R/stream.txt"
a_row 2
b_row 2
t_row 2
timeout 80 compute-sanitizer --tool memcheck $M/hopattn_gpu_tests \
  --gtest_filter='*gqa1_mha_long_narrow*:*q2_gqa4_window37*narrow*' > "$R/memcheck.txt" 2>&1
tail -2 "$R/memcheck.txt"
timeout 80 compute-sanitizer --tool racecheck $M/hopattn_gpu_tests \
  --gtest_filter='*q2_gqa4_window37*narrow*' > "$R/racecheck.txt" 2>&1
tail -2 "$R/racecheck.txt"
