# Sourced by the next_device_run*.sh scripts. `logged FILE SECONDS CMD ...` runs CMD from /tmp
# (so a test binary writes nothing into the checkout) under a time limit, with its output and
# then "rc=<exit status>" in FILE.
logged() {
  local file=$1 limit=$2
  shift 2
  (cd /tmp && timeout "$limit" "$@" > "$file" 2>&1; echo "rc=$?" >> "$file")
}
