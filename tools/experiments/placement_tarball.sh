#!/usr/bin/env bash
# `tools/experiments/placement_tarball.sh TARBALL` (build machine, from a configured `build`
# directory and a clean tree; ~5 minutes with ccache warm): the binaries placement_first.sh
# runs, packed into TARBALL: main's `hopattn` and `hopattn_gpu_tests`, `stream_rate` and `sm_gpcs`
# (tools/*.cu), and `bench/hopattn` built once with each experiment patch applied (and taken
# back after each): hopattn_ring6, hopattn_stamps, hopattn_s2, hopattn_nomath,
# hopattn_nocopies.
set -eu
TARBALL=$(realpath -m "$1")
cd "$(dirname "$0")/../.."
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "placement_tarball.sh: the tree has changes; commit or stash them first" >&2
  exit 1
fi
PK=$(mktemp -d)
applied=""  # the patch on the tree, taken back by variant() or, on an early exit, by the trap
trap 'rm -rf "$PK"; [ -z "$applied" ] || git apply -R "$applied"' EXIT
NVCC="nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc -Iinclude"
$NVCC --expt-relaxed-constexpr tools/stream_rate.cu -o "$PK/stream_rate"
$NVCC --expt-relaxed-constexpr tools/sm_gpcs.cu -o "$PK/sm_gpcs"
ninja -C build bench/hopattn tests/hopattn_gpu_tests > /dev/null
cp build/bench/hopattn build/tests/hopattn_gpu_tests "$PK/"
variant() {  # NAME PATCH
  git apply "$2"
  applied=$2
  ninja -C build bench/hopattn > /dev/null
  cp build/bench/hopattn "$PK/$1"
  git apply -R "$2"
  applied=""
}
variant hopattn_ring6 tools/experiments/decode_small_ring6.patch
variant hopattn_stamps tools/timeline/ring_stamps.patch
variant hopattn_s2 tools/experiments/decode_s_two_chains.patch
variant hopattn_nomath tools/experiments/decode_small_no_math.patch
variant hopattn_nocopies tools/experiments/decode_small_no_copies.patch
ninja -C build bench/hopattn > /dev/null  # main's again
cmp -s build/bench/hopattn "$PK/hopattn" || echo "placement_tarball.sh: main's rebuild differs" >&2
mkdir -p "$(dirname "$TARBALL")"
tar -cJf "$TARBALL" -C "$PK" .
ls -la "$TARBALL"
