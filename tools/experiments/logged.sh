# Sourced by the next_device_run*.sh scripts. `logged FILE SECONDS CMD ...` runs CMD from /tmp
# (so a test binary writes nothing into the checkout) under a time limit, with its output and
# then "rc=<exit status>" in FILE.
logged() {
  local file=$1 limit=$2
  shift 2
  (cd /tmp && timeout "$limit" "$@" > "$file" 2>&1; echo "rc=$?" >> "$file")
}

# `gpu_tests FILE BINARY FILTER`: the GPU tests of FILTER (4 minutes at most) through logged, then
# their summary lines.
gpu_tests() {
  logged "$1" 240 "$2" --gtest_filter="$3"
  grep -E "FAILED|PASSED|rc=" "$1" | tail -12
}
