#!/usr/bin/env bash
# The calls the next session makes first (docs/perf/NOTES.md, "Next device runs", item 0):
#
#   [F8=DIR] [DEEP=DIR] [DEEPK=DIR] [HALF=DIR] [RING6=DIR] [NOGEMM=DIR] [NOWAIT=DIR] [STAGE=DIR] [PRO=DIR] [PF=DIR] [CL=DIR] [EF=DIR] [OV=DIR] [OV192=DIR] tools/experiments/next_device_run.sh MAIN OUT [PARTS]
#
# MAIN, F8, DEEP: folders with the `hopattn` CLI and `hopattn_gpu_tests` of main, of main +
# fp8_split.patch and of main + batch_deep_ring.patch (DEEPK: of main + batch_deep_k.patch).
# PARTS: any of "quick cclock table concurrent pypeers l2flush decodeab pro cl ef ov stagetime pdlcheck stage decode half ring6 clock cli paged fp8 deep deepp deepk split tests steps order peers" (default
# "decode steps order": ~5 minutes on an H100). Logs under OUT:
#   tests_pdl.txt    main's programmatic-launch tests (`*ProgrammaticLaunch*`: decode, mla and
#                    merge with an input written late by the kernel before);
#                    tests_nowait.txt: the same tests of NOWAIT (main without the
#                    mla and merge kernels' waits), whose mla and merge cases must fail
#   stage.txt        (part stagetime) main against STAGE (main + decode_merge_in_ring.patch: the
#                    small decode kernel's last CTA merges through its ring) on 64/8-head, q_len 4
#                    and 32-split batch-1 rows, 32/8-head rows as the control
#   tests_stage.txt  (part stage) STAGE's decode tests, stage_racecheck.txt, stage_memcheck.txt
#   decode_ab.txt    (part decodeab) main against PRO / PF / CL / EF, those set (the decode
#                    patches of tools/experiments/README.md), on decode_ab_rows.txt;
#                    tests_pro.txt, tests_cl.txt, tests_ef.txt (parts pro, cl, ef): their decode
#                    (EF: and merge) tests with racecheck / memcheck logs
#   tests_decode.txt main's decode GPU tests and decode_memcheck.txt, decode_racecheck.txt: the
#                    small kernel's three-CTA instance landed (run set ak) with its plan rule
#                    rewritten after the measured build
#   ov_ab.txt        (part ov) main against OV / OV192 (fwd_o_in_v*.patch), those set, on
#                    fwd_o_in_v_rows.txt; tests_ov.txt with ov_racecheck.txt / ov_memcheck.txt,
#                    tests_ov192.txt
#   concurrent.txt   (part concurrent) tests_concurrent.txt with its sanitizer logs, then (a) / (b)
#                    as the concurrent form, the single plan, the separate launches and at 20 /
#                    22 / 26 prefill CTAs a group, with plan()'s host time
#   quick.txt        (part quick: issue 11 on a short budget, ~3 minutes with part peers after
#                    it) the `*Batch*` GPU tests (tests_quick.txt), then one round of (a) / (b)
#                    as the library's form, `--batch-concurrent off`, separate and varlen, (b)'s
#                    parts alone, (b) at 14-27 prefill CTAs a group, (c) / (d), plan() times
#   cclock.txt       (part cclock) (b) as the concurrent form, the single plan, its decodes alone
#                    and its chunk alone at a warm L2 with nvidia-smi's SM clock and power
#                    (smi_NAME.txt): what holds the form from its bound on this card
#   table.txt        (part table) issue 11's batch table: steps a-d as batch / single plan /
#                    separate / varlen, (b)'s parts alone, (b) longest decodes first, prefill CTA
#                    counts around the model's picks, plan() times (with part peers: FlashInfer)
#   pypeers.txt      (part pypeers) tools/device.sh python peers over decode_peers.py and
#                    merge_peers.py from the wheel in .whl (PEERS_ARGS); their logs and
#                    decode_peers.md, merge_peers.md
#   l2_flush.txt     (part l2flush) main's decode / merge rows behind a write and a read flush
#   gpu.txt          the card
#   cli.txt          main's CLI: checked rows (inputs written on the device must match the
#                    host's), the wall time of two timing-only calls, `hopattn script` rows
#                    (ab_rows.py) against one process a row
#   tests_main.txt   main's GPU tests (fwd, batch, paged, page sizes, safety); main_racecheck.txt,
#                    main_synccheck.txt, main_memcheck.txt
#   paged.txt        main's tests added after run set af: paged fwd with pages of 3, 5, 7 (the
#                    staged gather page ids), FwdKernel.SplitTiles
#   fp8.txt          main against F8: fp8 steps (c) on 16 CTAs, (a), (b), (c), (d), bf16 (a);
#                    tests_fp8.txt, fp8_memcheck.txt, fp8_racecheck.txt, fp8_synccheck.txt
#   deep.txt         main against DEEP: (c) on 16 CTAs, (b), (c), (a), (d); tests_deep.txt,
#                    deep_racecheck.txt, deep_synccheck.txt
#   deepp.txt        main against DEEP on (b) at 9..12 prefill CTAs a group, decodes alone
#   half.txt         main against HALF (main + batch_half_kv_reads.patch: prefill tiles load half
#                    of each K / V block's page boxes, results wrong): (b) at fixed splits, the
#                    chunk alone, (d), (a): the most item 8's multicast can gain
#   ring6.txt        main against RING6 (main + decode_small_ring6.patch: the small decode
#                    kernel's ring 48 KB a warp, six 16-bit stages, one CTA an SM): decode rows
#   clock.txt        nvidia-smi's SM clock and power (20 ms samples) while main and NOGEMM (main +
#                    batch_decode_nogemm.patch: decode tiles without GEMMs, results wrong) run
#                    (b) at 14 and 10 prefill CTAs a group, (a), the decodes alone on 76 CTAs,
#                    (c); main's chunk alone on 56 / 40 CTAs and (d) (warm L2, 300 iterations)
#   deepk.txt        DEEPK (main + batch_deep_k.patch): tests_deepk.txt and its sanitizers, then
#                    --batch-k-stages 3 against 2 in that binary on (b), (a), (c), (d)
#   split.txt        main: (b) and (a) at fixed splits (--batch-partition-ctas), parts alone
#   steps.txt        main: batch steps a-d as batch / separate / varlen, two rounds
#   order.txt        main: (a) and (b) at decode CTA rates 1.0 .. 2.0 and (a) in the spread
#                    order; (d), 16 x 1024 and 2 x 8192 with and without the prefill sections
#   fi_peers.txt     FlashInfer 0.7.4's batch rows (batch_peers.py --peers-only), when the peer
#                    kit is carried (.peers)
set -u
source "$(dirname "$0")/helpers.sh"
M=$1 R=$2 PARTS=${3:-decode steps order}
mkdir -p "$R"
has() { [[ " $PARTS " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$R/gpu.txt"
# `bb CLI_DIR FLAGS`: the batch kernel's time of one step (us).
# `us CLI_DIR FAMILY FLAGS`: the GPU kernel's time of one row (us); bb for a batch step, dd for a
# Llama-3-8B decode (32/8 heads, D 128).
us() { $1/hopattn bench "${@:2}" --impl kernel --no-check --csv | us_of; }
bb() { us $1 batch --batch-impl ${BI:-batch} "${@:2}"; }
dd() { us $1 decode --heads 32:8 --head-dim 128 "${@:2}"; }
# `alternate ROW "A ARGS" "B ARGS"`: ROW (a function reading $r) with A's and B's arguments, two
# rounds in turned order.
alternate() {
  for r in 1 2; do
    if [ $r = 1 ]; then $1 $2; $1 $3; else $1 $3; $1 $2; fi
  done
}
# `timing_ab ROW "A_DIR A_NAME" "B_DIR B_NAME" FLAGS...`: ROW (of a build's folder, label and
# timing flags) for A and B under each FLAGS, two rounds in turned order.
timing_ab() {
  local row=$1 a=$2 b=$3 x
  shift 3
  for r in 1 2; do
    for x in "$@"; do
      if [ $r = 1 ]; then $row $a "$x"; $row $b "$x"; else $row $b "$x"; $row $a "$x"; fi
    done
  done
}
# `ab ROW DIR NAME`: ROW (of a build's folder and label) for main and for the build in DIR.
ab() { alternate $1 "$M main" "$2 $3"; }
# `checked DIR NAME SECONDS TESTS RACECHECK SYNCCHECK [MEMCHECK]`: the build's GPU tests, then
# compute-sanitizer's tools on the given filters, into tests_NAME.txt and NAME_TOOL.txt.
checked() {
  local d=$1 n=$2 files=()
  logged $R/tests_$n.txt $3 $d/hopattn_gpu_tests --gtest_filter="$4"
  files+=($R/tests_$n.txt)
  local tool filter
  for tool in racecheck synccheck memcheck; do
    case $tool in racecheck) filter=$5 ;; synccheck) filter=$6 ;; memcheck) filter=${7:-} ;; esac
    [ -n "$filter" ] || continue
    logged $R/${n}_$tool.txt 150 compute-sanitizer --tool $tool $d/hopattn_gpu_tests \
      --gtest_filter="$filter"
    files+=($R/${n}_$tool.txt)
  done
  grep -H "PASSED\|FAILED\|SUMMARY\|rc=" "${files[@]}"
}

# `rows_ab ROWS LOG VAR...`: ab_rows.py over tools/experiments/ROWS for main and each build
# folder VAR names that is set (labelled by VAR in lower case), two rounds, into $R/LOG.
rows_ab() {
  local rows=$1 log=$2 b builds=("main=$M")
  shift 2
  for b in "$@"; do
    if [ -n "${!b:-}" ] && [ -d "${!b}" ]; then builds+=("$(echo $b | tr 'A-Z' 'a-z')=${!b}"); fi
  done
  python3 "$(dirname "$0")/ab_rows.py" --rounds 2 "$(dirname "$0")/$rows" "${builds[@]}" \
    > $R/$log 2>&1
  cat $R/$log
}

if has cli; then
  # The CLI's inputs written on the device (bench/device_fill.cu) must be the host fill's bytes:
  # checked rows (the GPU check reads the host copy), then the wall time of timing-only calls.
  for f in "batch --step a" "batch --step b --batch-impl batch" "fwd" "decode" "bwd"; do
    echo "== $f: $($M/hopattn bench $f --impl kernel --csv 2>&1 | tail -n +2 | cut -c1-200)"
  done > $R/cli.txt 2>&1
  for f in "batch --step b --batch-impl batch" "batch --step c --batch-impl batch"; do
    echo "== wall of '$f --no-check': $(wall_s $M/hopattn bench $f --impl kernel --no-check) s"
  done >> $R/cli.txt 2>&1
  # `hopattn script` (every row in one process, ab_rows.py) against one process a row.
  printf 'c batch --step c --batch-impl batch\na batch --step a --batch-impl batch\n' > $R/rows.txt
  for r in 1 2; do
    echo "r$r one process a row: c $(bb $M --step c) a $(bb $M --step a)"
  done >> $R/cli.txt 2>&1
  echo "== wall of ab_rows.py, 2 rounds: $(wall_s python3 "$(dirname "$0")/ab_rows.py" $R/rows.txt main=$M) s" \
    >> $R/cli.txt 2>&1
  python3 "$(dirname "$0")/ab_rows.py" $R/rows.txt main=$M >> $R/cli.txt 2>&1
  cat $R/cli.txt
fi

if has stagetime; then
  # Part stage's timing (below), first when the call is short.
  st() {
    local h8="--heads 64:8 --head-dim 128"
    echo "r$r $2 h64_b1k1 $(us $1 decode $h8 --batch 1 --kv-len 1024) h64_b1k8 $(us $1 decode $h8 --batch 1 --kv-len 8192)" \
      "h64_b1k32 $(us $1 decode $h8 --batch 1 --kv-len 32768) h64_b4k8 $(us $1 decode $h8 --batch 4 --kv-len 8192)" \
      "q4_b1k8 $(dd $1 --q-len 4 --batch 1 --kv-len 8192) b1k8_s32 $(dd $1 --batch 1 --kv-len 8192 --splits 32)" \
      "b1k8 $(dd $1 --batch 1 --kv-len 8192) b1k1 $(dd $1 --batch 1 --kv-len 1024)" \
      "f8_h64_b1k8 $(us $1 decode $h8 --batch 1 --kv-len 8192 --kv-dtype fp8_e4m3)"
  }
  timing_ab st "$M main" "$STAGE stage" "--iters 20" > $R/stage.txt 2>&1
  cat $R/stage.txt
fi

if has decodeab; then
  # Main against each of PRO, PF, CL and EF that is set (the decode patches of
  # tools/experiments/README.md) on decode_ab_rows.txt: issue 14's decode rows (batch 1..128,
  # fp8, a warm L2, chained calls, batch-1 split counts) and the merge's two rows, each build's
  # rows in one process, two rounds in turned order. Predictions: NOTES.md, "Next device runs".
  rows_ab decode_ab_rows.txt decode_ab.txt PRO PF CL EF
fi

if has pro; then
  prom='Grid/DecodeKernel.MatchesReference/page1_nhd:Grid/DecodeKernel.MatchesReference/splits_auto_batch1_long'
  prom+=':Grid/DecodeKernel.MatchesReference/q_bf16_kv_fp8_e4m3_per_head_small'
  prom+=':Grid/DecodeKernel.MatchesReference/q_bf16_kv_fp8_e4m3_per_head_small_ctas3'
  checked $PRO pro 200 '*Decode*' "$prom" '' "$prom"
fi

if has cl; then
  # CL (PRO + decode_cluster_merge.patch): the small kernel's splits merged in a cluster. Its
  # decode tests (every small split case of <= 16 splits takes the cluster), then racecheck and
  # memcheck on split cases (the DSMEM reads, the two cluster meetings).
  clm='Grid/DecodeKernel.MatchesReference/splits7:Grid/DecodeKernel.MatchesReference/splits_auto_batch1_long'
  clm+=':Grid/DecodeKernel.MatchesReference/q_bf16_kv_fp8_e4m3_per_head_small'
  checked $CL cl 200 '*Decode*' "$clm" '' "$clm"
fi

if has ef; then
  efm='Grid/DecodeKernel.MatchesReference/page1_nhd:Grid/DecodeKernel.MatchesReference/splits7'
  efm+=':Grid/MergeKernel.*'
  checked $EF ef 200 '*Decode*:*Merge*' '' '' "$efm"
fi

if has ov; then
  # OV (main + fwd_o_in_v.patch: hd128's wide tiles stage O in the last V stage) and OV192 (+
  # fwd_o_in_v_192.patch: 192-key wide tiles), those set: OV's fwd tests with racecheck / memcheck
  # on the wide tiles, OV192's wide-tile tests, then main against both on fwd_o_in_v_rows.txt
  # (forced wide rows, base rows as the control).
  ovm='FwdWideTiles.*'
  if [ -n "${OV:-}" ]; then checked $OV ov 200 '*FwdWide*:FwdKernel*' "$ovm" '' "$ovm"; fi
  if [ -n "${OV192:-}" ]; then checked $OV192 ov192 150 '*FwdWide*' '' '' ''; fi
  rows_ab fwd_o_in_v_rows.txt ov_ab.txt OV OV192
fi

if has l2flush; then
  # Main's decode and merge rows behind the write flush (the tables' method: dirty lines) and a
  # read flush (--l2-flush read: clean lines), two rounds: what the dirty lines cost a call.
  rows_ab l2_flush_rows.txt l2_flush.txt
fi

if has concurrent; then
  # Issue 11's concurrent form (BatchAttention outside graph captures): its GPU tests and the batch
  # family's, then (a) / (b) against the single plan (--batch-concurrent off), the separate
  # launches and other prefill CTA counts, two rounds, with plan()'s host time.
  checked $M concurrent 200 'BatchKernelConcurrent.*:*Batch*' \
    'BatchKernelConcurrent.Bf16AndHd256' 'BatchKernelConcurrent.Fp8PerHeadScales' \
    'BatchKernelConcurrent.GraphReplaysTheSinglePlan'
  for r in 1 2; do
    for st in a b; do
      echo "r$r $st auto $(bb $M --step $st) off $(bb $M --step $st --batch-concurrent off)" \
        "sep $(BI=separate bb $M --step $st) c20 $(bb $M --step $st --batch-concurrent-ctas 20)" \
        "c22 $(bb $M --step $st --batch-concurrent-ctas 22) c26 $(bb $M --step $st --batch-concurrent-ctas 26)"
    done
  done > $R/concurrent.txt 2>&1
  for st in a b; do
    $M/hopattn bench batch --step $st --batch-impl batch --impl kernel 2>&1 | grep "plan()" >> $R/concurrent.txt
  done
  cat $R/concurrent.txt
fi

if has quick; then
  # Issue 11's rows on a short budget (the first H200 lent: the concurrent form has not run there).
  logged $R/tests_quick.txt 90 $M/hopattn_gpu_tests --gtest_filter='BatchKernelConcurrent.*:*Batch*'
  tail -2 $R/tests_quick.txt
  bc() { bb $M --step b --batch-concurrent-ctas $1; }
  {
    for st in b a; do
      echo "$st batch $(bb $M --step $st) off $(bb $M --step $st --batch-concurrent off)" \
        "sep $(BI=separate bb $M --step $st) varlen $(BI=varlen bb $M --step $st)"
    done
    echo "parts decodes-alone $(BI=separate bb $M --step 255x1@2048..16384)" \
      "chunk-alone $(BI=separate bb $M --step 8192@0)"
    echo "b sweep c14 $(bc 14) c16 $(bc 16) c18 $(bc 18) c19 $(bc 19) c20 $(bc 20) c22 $(bc 22) c23 $(bc 23) c25 $(bc 25) c27 $(bc 27)"
    for st in c d; do echo "$st batch $(bb $M --step $st) sep $(BI=separate bb $M --step $st)"; done
    for st in a b; do
      $M/hopattn bench batch --step $st --batch-impl batch --impl kernel 2>&1 |
        grep -o 'plan() [0-9.]* us.*upload; [0-9.]* us without\|concurrent form: prefill on [0-9]*'
    done
  } > $R/quick.txt 2>&1
  cat $R/quick.txt
fi

if has table; then
  # Issue 11's batch table in one call: steps a-d as the library's form (concurrent on (a), (b)),
  # the single plan, the separate launches and one varlen launch; (b)'s parts alone (its bound:
  # the decodes' own read), (b) with its decodes longest first, prefill CTA counts around the
  # model's picks (21 on (b), 26 on (a) for 132 SMs), plan() times. Run part peers after it for
  # FlashInfer's rows of the same call.
  dec="255x1@2048..16384"
  desc="8192@0,51x1@13562..16384,51x1@10683..13506,51x1@7805..10627,51x1@4926..7749,51x1@2048..4870"
  for r in 1 2; do
    for st in a b c d; do
      echo "r$r $st batch $(bb $M --step $st) off $(bb $M --step $st --batch-concurrent off)" \
        "sep $(BI=separate bb $M --step $st) varlen $(BI=varlen bb $M --step $st)"
    done
    echo "r$r parts decodes-alone sep $(BI=separate bb $M --step $dec)" \
      "chunk-alone sep $(BI=separate bb $M --step 8192@0) batch $(bb $M --step 8192@0)"
    echo "r$r b-desc batch $(bb $M --step $desc) sep $(BI=separate bb $M --step $desc)"
    echo "r$r sweep b c19 $(bb $M --step b --batch-concurrent-ctas 19)" \
      "c23 $(bb $M --step b --batch-concurrent-ctas 23) a c25 $(bb $M --step a --batch-concurrent-ctas 25)" \
      "c27 $(bb $M --step a --batch-concurrent-ctas 27)"
  done > $R/table.txt 2>&1
  for st in a b c d; do
    $M/hopattn bench batch --step $st --batch-impl batch --impl kernel 2>&1 | grep "plan()" | cut -c1-200 >> $R/table.txt
  done
  cat $R/table.txt
fi

if has pypeers; then
  # issue 14's Python peer tables: tools/device.sh's python step (the install only) of main's wheel
  # (`tools/device.sh wheel` on the host; carry .whl and .peers), then its peers step over
  # decode_peers.py (PEERS_ARGS, e.g. "--models Llama-3-8B") and merge_peers.py.
  (source .peers/install_on_device.sh .peers &&
    OUT=$R PYTHON_SUITE=off PEERS_SCRIPTS="decode merge" tools/device.sh python peers) \
    > $R/pypeers.txt 2>&1
  tail -40 $R/pypeers.txt
fi

if has pdlcheck; then
  # The programmatic-launch tests (decode, mla, merge: an input written late by the kernel
  # before); then in NOWAIT (main without the mla and merge kernels' waits)
  # the mla and merge cases must fail.
  checked $M pdl 200 '*ProgrammaticLaunch*' '' '' ''
  logged $R/tests_nowait.txt 120 $NOWAIT/hopattn_gpu_tests --gtest_filter='*ProgrammaticLaunch*'
  grep -H "PASSED\|FAILED\|rc=" $R/tests_nowait.txt
fi

if has stage; then
  # STAGE (main + decode_merge_in_ring.patch): the small decode kernel's last CTA merges the
  # splits of 8 / 16 rows or > 16 splits from its ring (one round trip a round) instead of one
  # L2 round trip a (row, 4 features) item of each thread. Its decode tests, then racecheck and
  # memcheck on ring-merge cases (16 rows in two rounds, D = 64, 8 rows); timing: part stagetime.
  ring='Grid/DecodeKernel.MatchesReference/small_q4_gqa4_split20'
  ring+=':Grid/DecodeKernel.MatchesReference/small_d64_split20:Grid/DecodeKernel.MatchesReference/splits7'
  checked $STAGE stage 200 '*Decode*' "$ring" '' "$ring"
fi

if has decode; then
  # Main's decode tests and sanitizers (run set ak landed the small kernel's three-CTA instance
  # over e4m3 / int8 with a wave-counting plan rule; the `_small_ctas3` cases force it).
  small='Grid/DecodeKernel.MatchesReference/page1_nhd:Grid/DecodeKernel.MatchesReference/page37_hnd'
  small+=':Grid/DecodeKernel.MatchesReference/splits_auto_batch1_long'
  small+=':Grid/DecodeKernel.MatchesReference/q_bf16_kv_fp8_e4m3_per_head_small'
  small+=':Grid/DecodeKernel.MatchesReference/q_fp16_kv_fp8_e5m2_per_head_small'
  small+=':Grid/DecodeKernel.MatchesReference/page16_padded_pool_int8_small'
  small+=':Grid/DecodeKernel.MatchesReference/q_bf16_kv_fp8_e4m3_per_head_small_ctas3'
  checked $M decode 200 '*Decode*' "$small" '' "$small"
fi

if has tests; then
  # main since run set af: the mainloop's split path refactored (TileOperands, gemm_and_wait;
  # SASS as before), the staged gather ids, the new tests.
  checked $M main 300 '*Fwd*:*Batch*:*Paged*:PageSizes/*:Safety*' \
    'BatchKernelPartition.MixedStepBf16AndFp16Hnd:FwdKernel.SplitTiles' \
    'BatchKernelPartition.MixedStepBf16AndFp16Hnd' 'BatchKernel.PureDecode128x8k:FwdPaged.*'
fi

if has paged; then
  logged $R/paged.txt 150 $M/hopattn_gpu_tests --gtest_filter='FwdPaged.*:PageSizes/*:FwdKernel.SplitTiles'
  grep -H "PASSED\|FAILED\|rc=" $R/paged.txt
fi

if has fp8; then
  fp8_partition='BatchKernelPartition.Fp8PerHeadScalesGqa5'
  checked $F8 fp8 200 '*Batch*:*Fp8*:FwdPaged.*' "$fp8_partition" "$fp8_partition" \
    "$fp8_partition:BatchKernel.MixedPrefillAndDecodesFp8PerHeadScales"
  fr() {
    local f8='--kv-dtype fp8_e4m3'
    echo "r$r $2 f8_c16 $(bb $1 --step c --batch-ctas 16 $f8) f8_a $(bb $1 --step a $f8)" \
      "f8_b $(bb $1 --step b $f8) f8_c $(bb $1 --step c $f8) f8_d $(bb $1 --step d $f8)" \
      "bf16_a $(bb $1 --step a)"
  }
  ab fr $F8 f8 > $R/fp8.txt 2>&1
  cat $R/fp8.txt
fi

if has deep; then
  # The patch's split-with-O-in-Q rule reaches the deep instance only (the 176-key and hd256
  # instances stay unsplit), so the batch and paged tests cover it.
  checked $DEEP deep 300 '*Batch*:FwdPaged.*' 'BatchKernelPartition.*' \
    'BatchKernelPartition.*'
  dr() {
    echo "r$r $2 c16 $(bb $1 --step c --batch-ctas 16) b $(bb $1 --step b) c $(bb $1 --step c)" \
      "a $(bb $1 --step a) d $(bb $1 --step d)"
  }
  ab dr $DEEP deep > $R/deep.txt 2>&1
  cat $R/deep.txt
fi

if has deepp; then
  # Run set ag: beside the decode stream (b)'s prefill CTAs wait on K / V arrival (ncu); the deep
  # ring's third stage where the prefill bounds (b) (P = 9..11 through the decode rate; the DEEP
  # build predates --batch-partition-ctas), and the decodes alone on 92 and 132 CTAs.
  dp() {
    echo "r$r $2 P9 $(bb $1 --step b --batch-decode-rate 1.0) P10 $(bb $1 --step b --batch-decode-rate 1.1)" \
      "P11 $(bb $1 --step b --batch-decode-rate 1.2) P12 $(bb $1 --step b)" \
      "dec92 $(bb $1 --step 255x1@2048..16384 --batch-ctas 92) dec132 $(bb $1 --step 255x1@2048..16384)"
  }
  ab dp $DEEP deep > $R/deepp.txt 2>&1
  cat $R/deepp.txt
fi

if has half; then
  # Run set ah: (b)'s prefill beside the decode stream is bound by L2 throughput, not latency.
  # HALF's prefill tiles read half of each block's K / V from L2: the bound on a multicast's gain.
  hf() {
    echo "r$r $2 b $(for q in 10 12 14; do echo -n "P$q $(bb $1 --step b --batch-partition-ctas $q) "; done)" \
      "default $(bb $1 --step b) pre40 $(bb $1 --step 8192@0 --batch-ctas 40) d $(bb $1 --step d)" \
      "a $(bb $1 --step a)"
  }
  ab hf $HALF half > $R/half.txt 2>&1
  cat $R/half.txt
fi

if has ring6; then
  # Batch 1 kv 8k: a warp streams 8 blocks with two in flight (four latency rounds); RING6 keeps
  # five in flight. Predicted: B=1 kv 8k 1.05-1.12x faster if the rounds bind; larger batches
  # lose the second CTA an SM.
  r6() {
    echo "r$r $2 b1k1 $(dd $1 --batch 1 --kv-len 1024) b1k8 $(dd $1 --batch 1 --kv-len 8192)" \
      "b1k32 $(dd $1 --batch 1 --kv-len 32768) b4k8 $(dd $1 --batch 4 --kv-len 8192) b8k4 $(dd $1 --batch 8 --kv-len 4096)" \
      "b32k8 $(dd $1 --batch 32 --kv-len 8192) f8b1k8 $(dd $1 --batch 1 --kv-len 8192 --kv-dtype fp8_e4m3)" \
      "p1b1k8 $(dd $1 --batch 1 --kv-len 8192 --page-size 1)"
  }
  ab r6 $RING6 ring6 > $R/ring6.txt 2>&1
  cat $R/ring6.txt
fi

# `probe BUILD_DIR NAME ARGS...`: the row at a warm L2 (300 calls) while nvidia-smi samples the SM
# clock and power every 20 ms into smi_NAME.txt; prints the row's time, then the busier half's
# samples.
probe() {
  local d=$1 n=$2 pid t
  shift 2
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv,noheader,nounits -lms 20 > "$R/smi_$n.txt" 2>&1 &
  pid=$!
  sleep 0.3
  t=$(bb $d --iters 300 --warm-l2 "$@")
  kill $pid
  wait $pid 2>/dev/null
  python3 "$(dirname "$0")/smi_summary.py" "$R/smi_$n.txt" "$n" "$t"
}

if has cclock; then
  # (b) as the library's concurrent form against its parts alone, with the card's clock and
  # power: what keeps the form from its bound (the decodes' own read) on this card.
  {
    probe $M conc_b --step b
    probe $M single_b --step b --batch-concurrent off
    BI=separate probe $M dec_alone --step 255x1@2048..16384
    probe $M chunk_alone --step 8192@0
  } > $R/cclock.txt 2>&1
  cat $R/cclock.txt
fi

if has clock; then
  # Is (b)'s prefill beside the decode stream slowed by the SM clock (power)? smi_BUILD_ROW.txt
  # keep the samples; each line of clock.txt: the row's time, then the busier half's samples.
  for r in 1 2; do
    for b in main nogemm; do
      d=$M; [ $b = nogemm ] && d=$NOGEMM
      probe $d ${b}_bP14_$r --step b --batch-partition-ctas 14
      probe $d ${b}_bP10_$r --step b --batch-partition-ctas 10
      probe $d ${b}_a_$r --step a
      probe $d ${b}_dec76_$r --step 255x1@2048..16384 --batch-ctas 76
      probe $d ${b}_c_$r --step c
    done
    probe $M main_pre56_$r --step 8192@0 --batch-ctas 56
    probe $M main_pre40_$r --step 8192@0 --batch-ctas 40
    probe $M main_d_$r --step d
  done > $R/clock.txt 2>&1
  cat $R/clock.txt
fi

if has deepk; then
  # batch_deep_k.patch (DEEPK: its build): the third K stage's tests and sanitizers, then the
  # instance against the default one of the same binary (--batch-k-stages 3 / 2).
  checked $DEEPK deepk 300 '*Batch*:FwdPaged.*' 'BatchKernelDeepK.*' 'BatchKernelDeepK.*' \
    'BatchKernelDeepK.*'
  kr() {
    local k="--batch-k-stages $1"
    echo "r$r k$1 b $(bb $DEEPK --step b $k) b10 $(bb $DEEPK --step b --batch-partition-ctas 10 $k)" \
      "b15 $(bb $DEEPK --step b --batch-partition-ctas 15 $k) a $(bb $DEEPK --step a $k)" \
      "c $(bb $DEEPK --step c $k) d $(bb $DEEPK --step d $k) c16 $(bb $DEEPK --step c --batch-ctas 16 $k)"
  }
  alternate kr 2 3 > $R/deepk.txt 2>&1
  cat $R/deepk.txt
fi

if has split; then
  # (b)'s split fixed (--batch-partition-ctas) and each part alone (run set ag's table).
  for r in 1 2; do
    echo "r$r b $(for q in 10 12 13 14 15 16 17 18; do echo -n "P$q $(bb $M --step b --batch-partition-ctas $q) "; done)"
    echo "r$r a $(for q in 22 23 24 25; do echo -n "P$q $(bb $M --step a --batch-partition-ctas $q) "; done)"
    echo "r$r alone pre40 $(bb $M --step 8192@0 --batch-ctas 40) pre60 $(bb $M --step 8192@0 --batch-ctas 60)" \
      "dec72 $(bb $M --step 255x1@2048..16384 --batch-ctas 72) dec92 $(bb $M --step 255x1@2048..16384 --batch-ctas 92)"
  done > $R/split.txt 2>&1
  cat $R/split.txt
fi

if has steps; then
  for r in 1 2; do
    for s in a b c d; do
      echo "r$r $s batch $(bb $M --step $s) separate $(BI=separate bb $M --step $s)" \
        "varlen $(BI=varlen bb $M --step $s)"
    done
  done > $R/steps.txt 2>&1
  cat $R/steps.txt
fi

if has peers; then
  (source .peers/install_on_device.sh .peers &&
    OUT=$R timeout 200 python3 bench/peers/batch_peers.py --peers-only --flush-l2) \
    > $R/fi_peers.txt 2>&1
  tail -15 $R/fi_peers.txt
fi

if has order; then
  for r in 1 2; do
    for s in a b; do
      echo "r$r $s r1.0 $(bb $M --step $s --batch-decode-rate 1) r1.1 $(bb $M --step $s --batch-decode-rate 1.1)" \
        "r1.25 $(bb $M --step $s --batch-decode-rate 1.25) r1.5 $(bb $M --step $s)" \
        "r2 $(bb $M --step $s --batch-decode-rate 2) spread $(bb $M --step $s --batch-order spread)"
    done
    for s in d 16x1024 2x8192; do
      echo "r$r $s sections $(bb $M --step $s) plain $(bb $M --step $s --batch-sections off)"
    done
  done > $R/order.txt 2>&1
  cat $R/order.txt
fi
