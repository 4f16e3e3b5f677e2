#!/usr/bin/env bash
# Runs `hopattn bench batch` over a list of steps, one process each, printing the status line.
#   tools/batch_bisect.sh CLI "ARGS" STEP...
cli=$1 args=$2; shift 2
for s in "$@"; do
  out=$(timeout 120 "$cli" bench batch --step "$s" $args --batch-impl batch --iters 1 2>&1); rc=$?
  line=$(grep -E "^batch " <<<"$out" | head -1 | awk '{print $NF, $(NF-1)}')
  det=$(grep -E "work items" <<<"$out" | sed 's/.*plan()//' | cut -c1-90)
  echo "rc=$rc [$s] $line |$det| $(grep -iE "illegal|error" <<<"$out" | head -1 | cut -c1-100)"
done
