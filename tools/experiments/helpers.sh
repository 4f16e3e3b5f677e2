# shellcheck shell=bash
# Sourced by device scripts (docs/perf/NOTES.md run sets): shared steps.

# `logged FILE SECONDS CMD ...` runs CMD from /tmp (so a test binary writes nothing into the
# checkout) under a time limit, with its output and then "rc=<exit status>" in FILE.
logged() {
  local file=$1 limit=$2
  shift 2
  (cd /tmp && timeout "$limit" "$@" > "$file" 2>&1; echo "rc=$?" >> "$file")
}

# `us_of < CSV`: the first row's time in us (the time_ms column of `hopattn bench ... --csv`).
us_of() { python3 -c 'import csv,sys; print(float(next(csv.DictReader(sys.stdin))["time_ms"])*1000)'; }

# `bwd_us CLI_DIR "SHAPE FLAGS"`: every row's time in us (the bwd bench prints normal, then
# deterministic), space-separated.
bwd_us() {
  $1/hopattn bench bwd $2 --impl kernel --no-check --csv |
    python3 -c 'import csv,sys; print(" ".join(str(round(float(r["time_ms"])*1000,1)) for r in csv.DictReader(sys.stdin)))'
}

# `wall_s CMD ...`: CMD's wall time in seconds (its output dropped).
wall_s() {
  python3 -c 'import subprocess, sys, time
t = time.time()
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(round(time.time() - t, 2))' "$@"
}

# `unpack TARBALL DIR`: the binaries into DIR, and the card's name, clock and power limit.
unpack() {
  mkdir -p "$2" && tar -xJf "$1" -C "$2" || exit 1
  nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
}

# `gpu_tests FILE SECONDS BIN FILTER`: BIN's GPU tests matching FILTER, logged to FILE; prints the
# summary and the first failures.
gpu_tests() {
  logged "$1" "$2" "$3" --gtest_filter="$4"
  tail -3 "$1"
  grep -E "^\[  FAILED|Failure" -A3 "$1" | head -20
}

# `batch_us BIN STEP FLAGS...`: BIN's time in us for the serving step STEP (a preset or a
# composition) with FLAGS (an implementation, a split, an SM order).
batch_us() {
  timeout 60 "$1" bench batch --step "$2" "${@:3}" --impl kernel --no-check --csv | us_of
}

# `decode_run_start TARBALL R M`: the start of the decode-rate and placement scripts: the
# binaries into M (unpack), the GPU tests of the decode kernels and the concurrent form into
# R/tests.txt, the GPC map (sm_gpcs) into R/sm_gpcs.txt.
decode_run_start() {
  unpack "$1" "$3"
  gpu_tests "$2/tests.txt" 150 "$3/hopattn_gpu_tests" \
    'BatchKernelConcurrent.*:*DecodeKernel*:*Decode*Small*:*narrow*:*Side*:Safety.*Decode*'
  timeout 20 "$3/sm_gpcs" | tee "$2/sm_gpcs.txt"
}

# `decode_us BIN FLAGS...`: BIN's time in us for Llama (a)'s decodes (124 at 4096, 32:8 heads,
# the small kernel) with FLAGS (a hold, a layout, a flush).
decode_us() {
  timeout 30 "$1" bench decode --heads 32:8 --batch 124 --kv-len 4096 "${@:2}" --impl kernel \
    --no-check --csv | us_of
}

# `decodes_on_sm_sets M R`: the decodes (small kernel, Llama (a)'s 124 at 4096) and the plain
# stream on 28 and 20 SMs spread over the GPCs against packed into as few as hold them
# (sm_sets.py from R/sm_gpcs.txt; --free-sms parks every other SM).
decodes_on_sm_sets() {
  local m=$1 r=$2 n set list
  for n in 28 20; do
    python3 "$(dirname "${BASH_SOURCE[0]}")/sm_sets.py" "$r/sm_gpcs.txt" $n > "$r/sets$n.txt"
    for set in spread packed; do
      list=$(sed -n "s/^$set //p" "$r/sets$n.txt")
      echo "n$n $set [$list] decodes small $(decode_us $m/hopattn --free-sms "$list")"
      timeout 40 $m/stream_rate sms "$list" | tail -3
    done
  done
}
