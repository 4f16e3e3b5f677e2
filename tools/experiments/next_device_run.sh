#!/usr/bin/env bash
# The device run run set y could not make (the device was withdrawn after its first call):
#
#   tools/experiments/next_device_run.sh MAIN_DIR PATCHED_DIR OUT_DIR
#
# MAIN_DIR holds main's `hopattn` CLI; PATCHED_DIR the CLI and `hopattn_gpu_tests` of main with
# fwd_two_q_buffers.patch and fwd_o_from_registers.patch applied. Writes its logs under OUT_DIR:
#   ab_main.txt     main against the patched build (tools/ab_bench.sh, 3 rounds)
#   ostore*.txt     --o-store registers against staged, same binary
#   persm.txt       the decode family's read rate on 8..128 CTAs (B=1 kv 64k, --splits)
#   batch_ctas.txt  the batch kernel's pure decode (c) and pure prefill (d) steps on 16..132 CTAs:
#                   one CTA's decode rate when HBM is not the limit (issue 11: can decode items
#                   spread between prefill tiles run faster than their share of HBM?)
set -u
source "$(dirname "$0")/helpers.sh"
H=$1 Q=$2 R=$3
mkdir -p "$R"

logged $R/race_batch.txt 60 compute-sanitizer --tool racecheck $Q/hopattn_gpu_tests \
  --gtest_filter='*BatchKernelFeatures.MatchesCpuReference/baseline:*BatchKernelFeatures.MatchesCpuReference/ctas1'

bash tools/ab_bench.sh $H/hopattn $Q/hopattn 3 fwd \
  "--batch 32 --q-len 512 --kv-len 512 --heads 32 --head-dim 64" \
  "--batch 16 --q-len 1024 --kv-len 1024 --heads 32 --head-dim 64" \
  "--batch 32 --q-len 512 --kv-len 512 --heads 16 --head-dim 128" \
  "--batch 16 --q-len 1024 --kv-len 1024 --heads 16 --head-dim 128" \
  "--batch 16 --q-len 1024 --kv-len 1024 --heads 16 --head-dim 128 --no-causal" \
  "--batch 4 --q-len 4096 --kv-len 4096 --heads 16 --head-dim 128" \
  "--batch 1 --q-len 16384 --kv-len 16384 --heads 16 --head-dim 128" \
  "--batch 32 --q-len 512 --kv-len 512 --heads 16 --head-dim 256" > $R/ab_main.txt 2>&1

for row in "--batch 32 --q-len 512 --kv-len 512 --heads 16 --head-dim 256" \
  "--batch 16 --q-len 1024 --kv-len 1024 --heads 16 --head-dim 256" \
  "--batch 4 --q-len 4096 --kv-len 4096 --heads 16 --head-dim 256" \
  "--batch 1 --q-len 16384 --kv-len 16384 --heads 16 --head-dim 256" \
  "--batch 1 --q-len 16384 --kv-len 16384 --heads 16 --head-dim 256 --no-causal" \
  "--batch 1 --q-len 16384 --kv-len 16384 --heads 16 --head-dim 128 --kv-tiles wide --no-causal"; do
  for r in 1 2; do
    for m in staged registers; do
      echo "$row | $m | $($Q/hopattn bench fwd $row --o-store $m --impl kernel --no-check --csv | us_of)"
    done
  done
done > $R/ostore.txt 2>&1

for sp in 1 2 4 8 16; do
  t=$($H/hopattn bench decode --batch 1 --kv-len 65536 --heads 32:8 --head-dim 128 --splits $sp --impl kernel --no-check --csv | us_of)
  echo "splits $sp ctas $((sp * 8)) us $t GB/s $(python3 -c "print(round(268435456 / $t / 1e3, 1))")"
done > $R/persm.txt 2>&1

for st in c d; do
  for n in 16 33 66 132; do
    echo "step $st ctas $n us $($H/hopattn bench batch --step $st --batch-impl batch --batch-ctas $n --impl kernel --no-check --csv | us_of)"
  done
done > $R/batch_ctas.txt 2>&1
cat $R/ab_main.txt $R/persm.txt $R/batch_ctas.txt
