#!/usr/bin/env bash
# Runs every gtest of a GPU-test filter in a process of its own (a fault in one test then cannot
# poison the CUDA context of the next) and prints one line per test: PASS, FAIL or CRASH.
#   tools/each_test.sh BINARY FILTER [LOG]
set -u
bin=$1 filter=$2 log=${3:-/dev/null}
suite=""
"$bin" --gtest_list_tests --gtest_filter="$filter" | while IFS= read -r line; do
  if [[ $line != " "* ]]; then suite=${line%%#*}; suite=${suite// /}; continue; fi
  name=${line#  }; name=${name%%#*}; name=${name// /}
  full="$suite$name"
  out=$("$bin" --gtest_filter="$full" 2>&1); rc=$?
  echo "$out" >> "$log"
  if [[ $rc -eq 0 ]]; then echo "PASS $full"
  elif grep -q "IllegalAddress\|illegal\|unspecified launch" <<<"$out"; then echo "CRASH $full"
  else echo "FAIL $full"; fi
done
