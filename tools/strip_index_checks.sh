#!/usr/bin/env bash
# Removes the device index checks (issue 12, item 5) from a COPY of the sources, so that
# tools/ab_bench.sh can time the checks' cost: A = the stripped copy, B = the library as it is.
#
#   tools/strip_index_checks.sh DIR     DIR: a source tree (e.g. `git archive HEAD | tar -x -C DIR`)
#
# Each check becomes a constant the compiler folds away: the range compare returns true, a page
# id is taken as inside the pool, so neither the compare, the masking of a bad index nor the
# report is left. Offsets are still clamped (offset_range's min/max), so this is a lower bound
# of the checks' cost. Fails when a pattern no longer matches (the sources moved on).
set -euo pipefail
[[ $# -eq 1 && -d $1/src/kernels ]] || { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
dir=$1/src/kernels

# strip FILE PERL_SUBSTITUTION: applies it, failing unless it changed the file.
strip() {
  local file=$dir/$1 before
  before=$(md5sum "$file")
  perl -0pi -e "$2" "$file"
  [[ $(md5sum "$file") != "$before" ]] || { echo "strip_index_checks: no match in $1" >&2; exit 1; }
}

strip common/device_status.cuh \
  's/return static_cast<uint64_t>\(value\) <= static_cast<uint64_t>\(bound\);/(void)value; (void)bound; return true;/'
# (tma_block's note on the fp8 path, audit_pages' on the 16-bit one)
strip fwd/kv_loader.cuh \
  's/static_cast<uint32_t>\(page\) >= static_cast<uint32_t>\(p\.kv\.num_pages\)/false/g'
strip fwd/kv_loader.cuh 's/if \(page >= static_cast<uint32_t>\(p\.kv\.num_pages\)\) \{/if (false) {/'
strip decode/mainloop.cuh \
  's/const bool own = static_cast<uint32_t>\(ref\.page\) < static_cast<uint32_t>\(p\.num_pages\);/const bool own = ref.page != kNoKey;/'
strip mla/loader.cuh \
  's/const bool ok = static_cast<uint32_t>\(page\) < static_cast<uint32_t>\(p\.num_pages\);/const bool ok = page != kNoKey;/'
echo "strip_index_checks: the checks removed under $dir"
