#!/usr/bin/env bash
# Build, test, sanitize and benchmark hopattn on the GPU machine, from the repository root.
#
#   tools/device.sh prepare                  on the development machine, before the first device
#                                            run: copies GoogleTest's sources to .third_party/
#                                            (the device has no GoogleTest and no network; carry
#                                            .third_party with the run)
#   tools/device.sh wheel                    on the development machine: build the Python
#                                            package with its GPU kernels as a wheel in .whl/
#                                            for the device's Python (WHEEL_PYTHON, default
#                                            python3.12; it needs scikit-build-core and nanobind),
#                                            ccache-launched where ccache is installed; carry .whl
#                                            and the python step installs it in seconds instead
#                                            of building for minutes of device time
#   tools/device.sh [STEP ...]               on the device; STEP is one of
#     build      configure (cmake --preset default, CUDA required, GPU tests registered with
#                ctest) and build on every core
#     test       ctest -L gpu: every GPU test, with its output
#     sanitize   compute-sanitizer memcheck, racecheck, initcheck and synccheck over subsets of
#                the GPU tests
#     bench      the CLI tour, then per-family benchmarks
#     ceilings   copy/read/write bandwidth and bf16/fp8 GEMM rate of this GPU
#     fuzz       the seeded fuzzer's cases on CUDA against the CPU reference
#                (hopattn_gpu_fuzz_tests --seconds=$FUZZ_SECONDS, default 60; tests/fuzz/README.md)
#     python     pip install the package with its GPU kernels (the wheel in .whl/ built for
#                this Python when there is one, else from the sources), then the Python suite
#                on CUDA (PYTHON_SUITE=off: the install only)
#     peers      the peer benchmarks (PyTorch SDPA cuDNN/flash, flex): bench/peers/*_peers.py
#                (fwd, bwd, decode), then bench/peers/host_overhead.py (host cost of eager
#                calls); PEERS_ARGS (e.g. --quick) is passed to each *_peers.py;
#                PEERS_SCRIPTS="decode merge" runs only those *_peers.py (no host_overhead.py);
#                needs the python step's install
#     all        build test sanitize fuzz bench ceilings (default)
#
# Every step after `build` builds first when it has not run yet (a no-op on a built tree). A
# failed build stops the run; any other failing step is recorded and the next one runs. Each step
# writes $OUT/<step>.log (OUT defaults to out/device); a summary table (step, status, seconds) is
# printed last and written to $OUT/summary.txt. Exit code: 0 when every step passed.
#
# Environment: OUT, JOBS (default nproc), BUILD_TARGETS (default: the GPU tests, the GPU fuzz
# run, the CLI and the ceilings program), FUZZ_SECONDS, MEMCHECK_FILTER / RACECHECK_FILTER /
# INITCHECK_FILTER / SYNCCHECK_FILTER (gtest filters), <STEP>_TIMEOUT in seconds (BUILD_TIMEOUT,
# TEST_TIMEOUT, SANITIZE_TIMEOUT, FUZZ_TIMEOUT, BENCH_TIMEOUT, CEILINGS_TIMEOUT, PYTHON_TIMEOUT,
# PEERS_TIMEOUT), GTEST_SRC (prepare: default /usr/src/googletest).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT_DIR=${OUT:-$ROOT/out/device}
BUILD_DIR=$ROOT/build  # the binaryDir of CMakePresets.json's "default" preset
JOBS=${JOBS:-$(nproc)}
GPU_TESTS=$BUILD_DIR/tests/hopattn_gpu_tests
CLI=$BUILD_DIR/bench/hopattn

# Small enough to finish under the sanitizers in a few minutes (the first device run took 14 s
# and 6 s for the first versions of these): the naive reference's grid, the single-shape kernel
# tests, the kernel grids of decode and merge and the PTX unit tests under memcheck; the naive
# grid and a few single-tile tests of each kernel under racecheck.
MEMCHECK_FILTER=${MEMCHECK_FILTER:-'Safety*:Grid/Naive*:FwdKernel.*:BwdKernel.*:FwdPaged.*:FwdOutOfRangeRows.*:Ptx*:Grid/DecodeKernel.*:Grid/MergeKernel.*:Grid/MlaKernel.*/b1_q1*:Grid/MlaKernel.*/b17_*:Grid/MlaKernel.*/fp8_b17_*:Cases/BatchKernelFeatures.*/fp8:Cases/BatchKernelFeatures.*/fp8_hnd_ps1-BwdKernel.M_*:BwdKernel.N_*:BwdKernel.O_*'}
RACECHECK_FILTER=${RACECHECK_FILTER:-'Grid/Naive*:FwdKernel.SingleTile:FwdKernel.Sinks:BwdKernel.A_SingleTile:BwdKernel.C_SingleTileCausalAndShort:BwdKernel.L_SingleTileWideHeadDims:FwdPaged.OtherPageSizes:PtxPipeline.*:Grid/MergeKernel.*:Grid/MlaKernel.*/b1_q1_h16_kv113_p16:Grid/MlaKernel.*/b17_q1_h16_p16_split7:Grid/MlaKernel.*/fp8_b17_q1_h16_p16:Cases/BatchKernelFeatures.*/fp8_hd256_sinks:Cases/BatchKernelFeatures.*/fp8_ps64_hd64_gqa5:Cases/BatchKernelFeatures.*/fp8_decodes_only_ctas2'}

# initcheck (reads of uninitialized global memory) and synccheck (barrier misuse) on one or two
# small cases of every kernel: both tools slow a kernel down more than memcheck does.
INITCHECK_FILTER=${INITCHECK_FILTER:-'FwdKernel.SingleTile:FwdOutOfRangeRows.VarlenNeighbourNaNInf:FwdPaged.OtherPageSizes:BwdKernel.A_SingleTile:BwdKernel.I_VarlenOddLengths:Grid/DecodeKernel.MatchesReference/q_bf16_kv_bf16_per_tensor:Grid/DecodeKernel.MatchesReference/q_bf16_kv_fp8_e4m3_per_tensor:Grid/MlaKernel.*/b17_q1_h16_p16_split7:Grid/MlaKernel.*/fp8_b17_q1_h16_p16:Grid/MergeKernel.*:BatchKernel.MixedPrefillAndDecodesBf16:Cases/BatchKernelFeatures.*/fp8:SafetyBwd.*'}
# synccheck also on a 16-bit batch step and a decode-only fp8 one: consumer warpgroups without rows
# there meet their partners on named barriers from another instantiation (kVTail, run set i).
SYNCCHECK_FILTER=${SYNCCHECK_FILTER:-"$INITCHECK_FILTER:Cases/BatchKernelFeatures.*/baseline:Cases/BatchKernelFeatures.*/fp8_decodes_only_ctas2"}

SUMMARY=()
BUILD_STATUS=""  # "", ok or failed

usage() {
  sed -n '2,34p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

print_summary() {
  [[ ${#SUMMARY[@]} -gt 0 ]] || return 0
  mkdir -p "$OUT_DIR"
  {
    printf '\n%-20s %-32s %8s\n' step status seconds
    printf '%-20s %-32s %8s\n' -------------------- -------------------------------- --------
    local row
    for row in "${SUMMARY[@]}"; do
      IFS='|' read -r name status secs <<<"$row"
      printf '%-20s %-32s %8s\n' "$name" "$status" "$secs"
    done
  } | tee "$OUT_DIR/summary.txt"
}
trap print_summary EXIT

record() { SUMMARY+=("$1|$2|$3"); }

status_of() {  # exit code -> status word (timeout(1) exits 124 on expiry, 137 after KILL)
  case $1 in
    0) echo ok ;;
    124 | 137) echo "TIMEOUT" ;;
    *) echo "FAILED (exit $1)" ;;
  esac
}

# run_part NAME LOG TIMEOUT CMD...: runs one command with a time limit, appending its output to
# LOG and to the terminal, and records it in the summary. Returns the command's exit code.
run_part() {
  local name=$1 log=$2 limit=$3
  shift 3
  local start=$SECONDS rc=0
  echo "=== $name: $*" | tee -a "$log"
  set +e
  timeout --kill-after=15 "$limit" "$@" 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  set -e
  record "$name" "$(status_of "$rc")" $((SECONDS - start))
  return "$rc"
}

find_tool() {  # find_tool NAME: on PATH, else in the CUDA toolkit
  local name=$1 dir
  if command -v "$name" >/dev/null 2>&1; then
    command -v "$name"
    return 0
  fi
  for dir in /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer /usr/local/cuda-13.0/bin; do
    if [[ -x $dir/$name ]]; then
      echo "$dir/$name"
      return 0
    fi
  done
  return 1
}

step_prepare() {
  local src=${GTEST_SRC:-/usr/src/googletest}
  if [[ ! -f $src/CMakeLists.txt ]]; then
    echo "prepare: no GoogleTest sources at $src (install googletest, or set GTEST_SRC)" >&2
    return 1
  fi
  rm -rf .third_party/googletest
  mkdir -p .third_party
  cp -r "$src" .third_party/googletest
  echo "prepare: copied $src to .third_party/googletest ($(du -sh .third_party | cut -f1))."
  echo "prepare: .third_party is git-ignored: carry it with the device run (carry: [\".third_party\"])."
}

# WHEEL_PYTHON, else a Python 3.12 that runs (a pyenv shim on PATH may name a version that is
# not selected).
wheel_python() {
  if [[ -n ${WHEEL_PYTHON:-} ]]; then
    echo "$WHEEL_PYTHON"
    return 0
  fi
  local py
  for py in python3.12 "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12; do
    if "$py" -c 'import sys' >/dev/null 2>&1; then
      echo "$py"
      return 0
    fi
  done
  echo "wheel: no python3.12 found; set WHEEL_PYTHON" >&2
  return 1
}

step_wheel() {
  local py args=()
  py=$(wheel_python) || return 1
  if command -v ccache >/dev/null 2>&1; then
    args+=(-C cmake.define.CMAKE_CUDA_COMPILER_LAUNCHER=ccache
      -C cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
  fi
  rm -f .whl/hopattn-*.whl
  "$py" -m pip wheel --no-build-isolation --no-deps -w .whl "${args[@]}" . || return $?
  echo "wheel: $(ls .whl/hopattn-*.whl): git-ignored, carry it with the device run (carry: [\".whl\"])."
  # The eager fast path (hopattn._torch_C) is built only where the wheel's Python imports torch,
  # against that torch: install the device's torch version there (e.g. torch==2.11.0) for it.
  if ! "$py" -c 'import torch' >/dev/null 2>&1; then
    echo "wheel: $py does not import torch, so the wheel has no hopattn._torch_C (the torch" \
      "fast path); install the device's torch for that Python to build it"
  fi
}

# The wheel in .whl/ built for this machine's python3 (its cpXY tag), if any.
matching_wheel() {
  local tag
  tag=$(python3 -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
  compgen -G ".whl/hopattn-*-$tag-$tag-*.whl" | head -n 1
}

step_build() {
  local log=$OUT_DIR/build.log
  : >"$log"
  if ! command -v nvcc >/dev/null 2>&1; then
    local nvcc
    if nvcc=$(find_tool nvcc); then
      PATH="$(dirname "$nvcc"):$PATH"
      export PATH
    fi
  fi
  {
    echo "=== machine"
    date -u
    nvidia-smi || echo "(nvidia-smi failed)"
    nvcc --version || echo "(no nvcc on PATH)"
    cmake --version | head -1
    echo "cores: $(nproc), jobs: $JOBS"
  } 2>&1 | tee -a "$log"
  # The carried GoogleTest sources when present, even where a package exists: one path everywhere.
  local gtest=()
  if [[ -f .third_party/googletest/CMakeLists.txt ]]; then
    gtest=(-DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON
      -DHOPATTN_GTEST_SOURCE_DIR="$ROOT/.third_party/googletest")
  fi
  local rc=0
  run_part configure "$log" "${BUILD_TIMEOUT:-900}" \
    cmake --preset default -DHOPATTN_CUDA=ON -DHOPATTN_GPU_TESTS=ON "${gtest[@]}" || rc=$?
  if [[ $rc -eq 0 ]]; then
    # Only what the device steps run (the CPU tests are CI's): a shorter build on a cold machine.
    local wanted=${BUILD_TARGETS:-hopattn_gpu_tests hopattn_gpu_fuzz_tests hopattn_cli hopattn_ceilings}
    local targets=() t
    local available
    available=$(cmake --build "$BUILD_DIR" --target help 2>/dev/null || true)
    for t in $wanted; do
      if grep -q "^$t:" <<<"$available"; then targets+=("$t"); fi
    done
    [[ ${#targets[@]} -gt 0 ]] || targets=(all)
    run_part build "$log" "${BUILD_TIMEOUT:-900}" \
      cmake --build "$BUILD_DIR" -j"$JOBS" --target "${targets[@]}" || rc=$?
  fi
  BUILD_STATUS=$([[ $rc -eq 0 ]] && echo ok || echo failed)
  return "$rc"
}

ensure_built() {
  [[ -z $BUILD_STATUS ]] && { step_build || true; }
  [[ $BUILD_STATUS == ok ]]
}

step_test() {
  local log=$OUT_DIR/test.log
  : >"$log"
  # Several test processes share the GPU; each one's CPU reference uses every core anyway.
  run_part test "$log" "${TEST_TIMEOUT:-420}" \
    ctest --test-dir "$BUILD_DIR" -L gpu -j 8 -V --timeout 300 --no-tests=error
}

step_sanitize() {
  local log=$OUT_DIR/sanitize.log rc=0 sanitizer
  : >"$log"
  if ! sanitizer=$(find_tool compute-sanitizer); then
    echo "sanitize: compute-sanitizer not found" | tee -a "$log"
    record sanitize "FAILED (no compute-sanitizer)" 0
    return 1
  fi
  local tool filter
  for tool in memcheck racecheck initcheck synccheck; do
    filter=${tool^^}_FILTER  # MEMCHECK_FILTER, ...
    filter=${!filter}
    run_part "sanitize:$tool" "$log" "${SANITIZE_TIMEOUT:-300}" \
      "$sanitizer" --tool "$tool" --error-exitcode 99 --print-limit 20 \
      "$GPU_TESTS" --gtest_filter="$filter" || rc=$?
  done
  return "$rc"
}

step_bench() {
  local log=$OUT_DIR/bench.log rc=0
  : >"$log"
  local limit=${BENCH_TIMEOUT:-240}
  run_part bench:tour "$log" "$limit" "$CLI" || rc=$?
  run_part bench:fwd-8k "$log" "$limit" \
    "$CLI" bench fwd --batch 1 --q-len 8192 --kv-len 8192 --heads 32:8 --causal || rc=$?
  run_part bench:fwd-paged "$log" "$limit" \
    "$CLI" bench fwd --batch 4 --q-len 2048 --kv-len 2048 --heads 32:8 --causal --page-size 64 ||
    rc=$?
  run_part bench:decode-fp8 "$log" "$limit" \
    "$CLI" bench decode --batch 64 --kv-len 8192 --heads 32:8 --kv-dtype fp8_e4m3 || rc=$?
  run_part bench:decode-spec "$log" "$limit" \
    "$CLI" bench decode --batch 32 --q-len 4 --kv-len 4096 --heads 32:8 --page-size 64 || rc=$?
  run_part bench:mla "$log" "$limit" "$CLI" bench mla || rc=$?
  run_part bench:merge "$log" "$limit" "$CLI" bench merge || rc=$?
  return "$rc"
}

step_python() {
  local log=$OUT_DIR/python.log rc=0
  : >"$log"
  local wheel install=(-v --no-build-isolation .)  # -v: build progress
  if wheel=$(matching_wheel) && [[ -n $wheel ]]; then install=(--force-reinstall "$wheel"); fi
  run_part python:install "$log" "${PYTHON_TIMEOUT:-300}" \
    python3 -m pip install --no-deps "${install[@]}" || return $?
  [[ ${PYTHON_SUITE:-on} == off ]] && return 0
  run_part python:tests "$log" "${PYTHON_TIMEOUT:-300}" \
    env PYTHONUNBUFFERED=1 python3 tests/python/run.py --min-passed 300 --require-gpu || rc=$?
  return "$rc"
}

step_peers() {
  local log=$OUT_DIR/peers.log rc=0 script scripts=(bench/peers/*_peers.py) name
  : >"$log"
  if [[ -n ${PEERS_SCRIPTS:-} ]]; then
    scripts=()
    for name in $PEERS_SCRIPTS; do scripts+=("bench/peers/${name}_peers.py"); done
  fi
  for script in "${scripts[@]}"; do
    # shellcheck disable=SC2086  # PEERS_ARGS is a list of flags
    run_part "peers:$(basename "$script" .py)" "$log" "${PEERS_TIMEOUT:-300}" \
      env PYTHONUNBUFFERED=1 OUT="$OUT_DIR" python3 "$script" ${PEERS_ARGS:-} || rc=$?
  done
  [[ -n ${PEERS_SCRIPTS:-} ]] && return "$rc"
  run_part peers:host_overhead "$log" "${PEERS_TIMEOUT:-300}" \
    env PYTHONUNBUFFERED=1 OUT="$OUT_DIR" python3 bench/peers/host_overhead.py --profile || rc=$?
  return "$rc"
}

step_fuzz() {
  local log=$OUT_DIR/fuzz.log
  : >"$log"
  run_part fuzz "$log" "${FUZZ_TIMEOUT:-300}" \
    "$BUILD_DIR/tests/hopattn_gpu_fuzz_tests" --seconds="${FUZZ_SECONDS:-60}"
}

step_ceilings() {
  local log=$OUT_DIR/ceilings.log
  : >"$log"
  run_part ceilings "$log" "${CEILINGS_TIMEOUT:-180}" "$BUILD_DIR/bench/hopattn_ceilings"
}

main() {
  local steps=("$@") failed=0 step
  [[ ${#steps[@]} -gt 0 ]] || steps=(all)
  if [[ " ${steps[*]} " == *" all "* ]]; then steps=(build test sanitize fuzz bench ceilings); fi
  for step in "${steps[@]}"; do
    case $step in
      prepare | wheel | build | test | sanitize | fuzz | bench | ceilings | python | peers) ;;
      -h | --help | help)
        usage
        exit 0
        ;;
      *)
        echo "device.sh: unknown step '$step' (expected prepare, wheel, build, test, sanitize, fuzz," \
          "bench, ceilings, python, peers or all)" >&2
        exit 2
        ;;
    esac
  done
  mkdir -p "$OUT_DIR"
  for step in "${steps[@]}"; do
    if [[ $step == prepare || $step == wheel ]]; then
      "step_$step" || failed=1
      continue
    fi
    if [[ $step == build ]]; then
      step_build || failed=1
    elif [[ $step == python || $step == peers ]]; then
      "step_$step" || failed=1  # pip builds the package itself: no CMake tree needed
    elif ! ensure_built; then
      record "$step" "skipped (build failed)" 0
      failed=1
      continue
    else
      "step_$step" || failed=1
    fi
  done
  if [[ $BUILD_STATUS == failed ]]; then
    echo "device.sh: the build failed, so nothing ran on the GPU (see $OUT_DIR/build.log)" >&2
  fi
  return "$failed"
}

main "$@"
