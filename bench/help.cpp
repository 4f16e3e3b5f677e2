// The help texts of the hopattn CLI (hopattn --help, hopattn bench --help).
#include "cli_args.hpp"

namespace hopattn::cli {

std::string main_help() {
  return R"(hopattn: attention kernels for NVIDIA Hopper (sm_90a), with a CPU reference.

Usage:
  hopattn [--csv] [--seed N] [--warm-l2]
                                tour: run every family (fwd, bwd, decode, mla, merge, batch) on
                                default model shapes, check each result, print a table
  hopattn bench FAMILY [flags]  benchmark one family (see hopattn bench --help)
  hopattn script FILE           run each line of FILE ("-": standard input) as a bench command
                                (`bench FAMILY [flags]`, words split at spaces, no quoting;
                                blank and # lines skipped) in one process, each line's output
                                after a "# line N: ..." header; the exit code is the worst line's
  hopattn --help                this text

The tour on a GPU runs each family's kernel on model shapes (Llama-3-8B: 32 q heads, 8 KV heads,
head dim 128; DeepSeek-V3 MLA: 128 heads, latent 512 + rope 64) and the naive fp32 GPU reference
for fwd and decode, and checks them against the CPU reference on a subset of rows and heads
(batch: one serving step of prefill chunks and decodes, hopattn bench batch --step a).
Without a GPU it runs the CPU reference on short sequences and checks each family against an
independent result (GQA == MHA with repeated KV, paged == contiguous, a merge of two halves ==
the whole, a batch step == the forward over each request's dense KV).

Columns: time is the median over the timed iterations (GPU: CUDA events, L2 flushed before each
unless --warm-l2); rate is TFLOP/s for fwd, bwd, MLA prefill and batch steps with prefill, TB/s
of the minimum traffic (inputs read once, outputs written once) for decode, MLA decode, merge and
decode-only batch steps (a batch row's details give both); max err is the largest
absolute error of the output against the check. Exit code: 0 all rows passed (or have no GPU
kernel yet), 1 a check failed, 2 bad command line.

--warm-l2 skips the L2 flush before each timed GPU call (a diagnostic: the difference to a
flushed run is the cost of cold code and data).
)";
}

std::string bench_help() {
  return R"(Usage: hopattn bench FAMILY [flags]

FAMILY: fwd | bwd | decode | mla | merge | batch

Shape (defaults: the tour's shapes; the model shape on a GPU, a short one on the CPU):
  --batch N           requests (merge: token rows are batch * q-len)
  --q-len N           query tokens per request (decode: 1..16)
  --kv-len N          keys per request (includes the q-len new tokens for decode)
  --heads HQ[:HKV]    query heads and KV heads (HKV omitted = HQ); mla and merge take HQ only
  --head-dim D        64, 128 or 256 (fwd, bwd, decode, merge); mla is fixed at 512 + 64
  --head-dim DQK:DV   fwd, bwd: q/k and v/out head dims apart; the GPU kernels take 192:128
                      (DeepSeek prefill), the CPU reference any pair
  --page-size N       paged KV cache, 1..256 (decode, mla, batch: default 16 / 64 / 16; fwd: off)
  --dtype T           q/out dtype: bf16 | fp16
  --kv-dtype T        KV cache: decode bf16 | fp16 | fp8_e4m3 | fp8_e5m2 | int8; mla and batch
                      q's or fp8_e4m3
Mask and logits (fwd, bwd, decode; mla takes --causal/--no-causal only):
  --causal | --no-causal   bottom-right aligned causal mask (default: on, as in the model
                           shapes; --no-causal for the full mask)
  --window L,R        sliding window, keys left/right of the diagonal (-1 = unbounded)
  --softcap C         s = C * tanh(s / C) on the scaled logits (0 = off)
  --splits N          decode, mla GPU kernels: key splits per problem (0 = the library's choice)
  --pack-gqa M        fwd GPU kernel: on | off | auto (default) whether the q heads of one KV
                      head share a tile (GQA packing; auto packs short q-len)
  --mla-schedule M    mla GPU kernel: auto (default) | seesaw (16-bit caches) | one-consumer |
                      narrow (requests of <= 16 rows)
  --decode-kernel K   decode GPU kernel: auto (default) | tiles | small (one beam, no tree
                      mask, q-len * HQ / HKV <= 16, head dim 64 or 128) | narrow (as small
                      with <= 8 rows, a 16-bit cache, pages of 16k keys, one split); batch:
                      the concurrent form's decodes (narrow where a run takes it)
  --kv-layout L       decode: the cache's pages nhd (default: [pages, page, HKV, D]) | hnd
                      ([pages, HKV, page, D]: a head's rows of a page contiguous)
  --page-order O      paged pools (decode, mla, batch, paged fwd): shuffled (default: every
                      page of the pool once, in random order) | in-order (each request's pages
                      one run of the pool, the requests one after another)
Launch variants of the GPU kernels (to time against the default; the library never picks them):
  --paged-tma M       fwd, batch: on (default) | off: off loads paged KV through the cp.async
                      gather for every page size (batch: the batch kernel's rows)
  --kv-tiles T        fwd: auto (default: D 64 as 192-row tiles of three consumer
                      warpgroups, causal on dense calls only; D 128 as 176-key tiles
                      from 16k keys) | base (128 x 128) | wide (either forced; dense and
                      varlen only)
  --fwd-walk W        fwd: auto (default: pairs dense causal tiles where plan/fwd_order.hpp
                      says, or at 192 rows where the walk's replay balances better) | plain |
                      paired (heavy + light m-blocks back to back; dense only)
  --l2-section-kb N   fwd: K/V KiB of one L2 section of the walk (default: half the L2 under
                      a causal diagonal, a 32nd of it otherwise)
  --bwd-order O       bwd: sections (default) | heads: heads launches the CTAs group after
                      group (KV head, request) everywhere instead of in L2-sized sections
Serving step (batch; takes --heads, --head-dim D, --page-size, --dtype, --causal/--no-causal,
--window, --softcap; not --batch, --q-len, --kv-len). Llama-3.1-8B attention by default: 32:8
heads, D 128, pages of 16, bf16, causal. kv_len of a request = cached + new.
  --step S            a preset or a composition (default: a on a GPU; on the CPU a short
                      step, "96@0,64@160,6x1@32..256,2x4@300"):
                        a  4 prefill chunks of 2048 new tokens over 0, 0, 4096, 8192 cached
                           + 124 decodes (q_len 1) over 4096 cached
                        b  1 chunk of 8192 (0 cached) + 255 decodes over 2048..16384 cached
                        c  128 decodes over 8192 cached        d  8 chunks of 2048 (0 cached)
                      or terms joined by ',' or '+', each [Nx]NEW[@CACHED] (N requests of NEW
                      tokens over CACHED, default 0) or [Nx]NEW@LO..HI (N cached lengths spread
                      evenly over LO..HI). NEW <= 16 is a decode, longer a prefill chunk; the
                      step runs its prefill chunks first, then its decodes by q_len.
                      a = "2048@0,2048@0,2048@4096,2048@8192+124x1@4096"
  --batch-impl L      all (default) or a list of: batch (hopattn::BatchAttention: plan on the
                      host in prepare, timed run() only; the details give plan() time),
                      separate (attention_fwd paged varlen over the prefill chunks + one decode
                      call per decode q_len), varlen (one paged varlen attention_fwd over the
                      whole step). One row each, on the same inputs; the lines under the table
                      give each alternative's time over the first row's.
  --batch-ctas N      batch: the persistent grid, N CTAs (BatchAttentionConfig::num_ctas;
                      default: the largest Hopper part's), e.g. to read one SM's rate
  --batch-order O     batch: auto (default: a mixed step partitioned, unless --batch-side on) |
                      lpt (each CTA's items largest first, so its decodes last) | spread (each
                      CTA's decodes between its prefill items) | partition (prefill and decode
                      items on separate CTAs, side by side)
  --batch-decode-rate R  batch, partition: a CTA that alone streams decodes goes R times its
                      share of HBM (default 1.5; the planner's split follows it)
  --batch-partition-ctas P  batch, partition: P prefill CTAs in each group of CTAs (one group
                      a KV head's share of the grid, 33 of 132 at 8 KV heads) instead of the
                      split the decode rate models
  --batch-concurrent C  batch: auto (default) | off | on: a mixed step whose decodes form
                      <= 4 runs of one q_len <= 16 also gets a concurrent form, its prefill
                      items alone on part of each group's CTAs and its decodes by the decode
                      family on a second stream at the same time (run() takes it outside CUDA
                      graph captures); off: the single plan only
  --batch-concurrent-rate R  batch, concurrent: the decode family's rate in the split model
                      (default 2.25)
  --batch-concurrent-ctas P  batch, concurrent: P prefill CTAs in each group of CTAs instead of
                      the modelled split
  --batch-concurrent-tail T  batch, concurrent: the prefill works also on the decodes' CTAs,
                      after the decodes (a second launch), from T x the modelled decode time
                      (0.1..64; default off)
  --decode-sm-order LIST  batch, concurrent: the card's SM ids (%smid), each once, the
                      decodes' SMs first: the prefill CTAs take their lists by SM and leave the
                      first SMs to the decodes (default: wherever the hardware puts them); gpc:
                      the order from the card's GPCs, the decodes' SMs spread over them
  --batch-side S      batch: auto (default: on where the order is spread and the decodes cost
                      no more than the prefill) | off | on (decodes of <= 8 rows on two producer
                      warps beside the prefill tiles: the side-lane kernel; 16-bit caches, D
                      64/128, TMA page boxes)
  --batch-sections S  batch: on (default: the prefill works in sections of requests whose K/V
                      fits half the L2) | off (plain LPT over them)
  --batch-side-cost N batch: the planner's side-lane factor (default 6: a CTA's side lane
                      takes decodes of at most 1/N of its prefill cost)
Run:
  --impl I            auto | kernel | naive | cpu  (naive: fwd and decode only; bwd kernel:
                      a second row times deterministic mode)
  --iters N           timed iterations (default 20 for GPU kernels, 3 for the references);
                      the median is shown
  --warmup N          untimed iterations first (default 3 for GPU kernels, 1 for references)
  --seed N            seed of the random inputs (default: fixed)
  --no-check          skip the correctness check
  --warm-l2           no L2 flush before each timed GPU call (a diagnostic; = --l2-flush none)
  --l2-flush F        write | read | none: how the L2 is emptied before each timed GPU call
                      (default write: a buffer twice its size overwritten, which leaves dirty
                      lines for the call's misses to write back; read leaves clean ones)
  --chain N           GPU: N calls back to back in each timed iteration, its time / N (as a
                      serving step's kernels follow one another: a launch overlaps the tail of
                      the call before; the L2 is flushed before the first call only)
  --hold-sms K        GPU: every call runs on the SMs that K parked CTAs leave it (a
                      diagnostic: a kernel's rate on few SMs, as the batch family's
                      concurrent form gives its decodes)
  --free-sms LIST     GPU: every call runs on exactly the SMs LIST names by %smid (0,2,4,..):
                      all others are parked as --hold-sms parks them
  --csv               print the table as CSV

Examples:
  hopattn bench fwd --batch 2 --q-len 4096 --kv-len 4096 --heads 32:8 --causal
  hopattn bench fwd --batch 8 --q-len 16 --kv-len 8192 --heads 32:8 --causal --pack-gqa off
  hopattn bench bwd --batch 2 --q-len 4096 --kv-len 4096 --heads 128 --head-dim 192:128 --causal
  hopattn bench decode --batch 64 --kv-len 8192 --heads 32:8 --kv-dtype fp8_e4m3 --page-size 16
  hopattn bench batch --step a
  hopattn bench batch --step "2x256@0,256@512+8x1@300..900" --batch-impl batch,varlen
)";
}

}  // namespace hopattn::cli
