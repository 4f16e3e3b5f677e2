"""Context-parallel scaling of hopattn.distributed.ring_attention on one host's GPUs (NCCL).

Run under torchrun, one process per GPU:

    torchrun --nproc-per-node 8 bench/peers/cp_scaling.py                 # the issue's sweep
    torchrun --nproc-per-node 2 bench/peers/cp_scaling.py --check --tokens 8192

Llama-3-8B attention by default: 32 q heads, 8 KV heads, head dim 128, bf16, causal, zigzag. For
each per-GPU token count T the group runs one sequence of N * T tokens; rank 0 also runs that
sequence alone with hopattn.attention (one GPU). Efficiency = t(1 GPU) / (N * t(N GPUs)), fwd and
fwd + bwd, CUDA-event medians. --check compares the ring's out, lse and gradients with the
one-GPU results (bf16 tolerance) before timing. Results go to stdout as a table (rank 0).
"""

import argparse
import os
import statistics

import torch
import torch.distributed as dist

import hopattn
import hopattn.distributed as hd


def timed(fn, iters, warmup=2, together=True):
    """Median CUDA-event time of fn in us; together: every rank starts each call at a barrier."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if together:
            dist.barrier()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[8192, 16384, 32768, 65536, 131072])
    ap.add_argument("--heads", default="32:8")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--no-causal", action="store_true")
    ap.add_argument("--layout", default="zigzag", choices=["zigzag", "contiguous"])
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    hq, hkv = (int(x) for x in args.heads.split(":"))
    d, causal = args.head_dim, not args.no_causal
    rows = []
    for t in args.tokens:
        total = t * world
        g = torch.Generator(device="cuda").manual_seed(1234)
        q, k, v, dout = (
            torch.randn(total, h, d, device="cuda", dtype=torch.bfloat16, generator=g)
            for h in (hq, hkv, hkv, hq)
        )
        cu = [0, total]
        local = [hd.shard(x, cu_seqlens=cu, layout=args.layout) for x in (q, k, v, dout)]
        ql, kl, vl, dl = (x.clone().requires_grad_(i < 3) for i, x in enumerate(local))

        def ring_fwd():
            return hd.ring_attention(ql, kl, vl, causal=causal, cu_seqlens=cu, layout=args.layout)

        def ring_fwd_bwd():
            out, _ = ring_fwd()
            out.backward(dl)

        cu_t = torch.tensor(cu, dtype=torch.int32, device="cuda")
        qs, ks, vs = (x.clone().requires_grad_() for x in (q, k, v))

        def one_fwd():
            return hopattn.attention(qs, ks, vs, causal=causal, cu_seqlens_q=cu_t,
                                     cu_seqlens_k=cu_t, max_seqlen_q=total,
                                     max_seqlen_k=total)  # fmt: skip

        def one_fwd_bwd():
            out, _ = one_fwd()
            out.backward(dout)

        if args.check:
            out, lse = ring_fwd()
            out.backward(dl)
            want_out, want_lse = one_fwd()
            want_out.backward(dout)
            pairs = [
                ("out", out, hd.shard(want_out.detach(), cu_seqlens=cu, layout=args.layout)),
                ("lse", lse, hd.shard(want_lse, cu_seqlens=cu, layout=args.layout)),
            ]
            for name, mine, ref in zip("qkv", (ql, kl, vl), (qs, ks, vs)):
                pairs.append(
                    ("d" + name, mine.grad, hd.shard(ref.grad, cu_seqlens=cu, layout=args.layout))
                )
            for name, a, b in pairs:
                err = (a.float() - b.float()).abs().max().item()
                scale = max(1.0, b.float().abs().max().item())
                ok = err <= 3e-2 * scale
                print(
                    f"rank {rank} T={t}: {name} max err {err:.3g} {'ok' if ok else 'FAILED'}",
                    flush=True,
                )
            for x in (ql, kl, vl, qs, ks, vs):
                x.grad = None

        t_ring_f = timed(lambda: ring_fwd(), args.iters)
        t_ring_fb = timed(ring_fwd_bwd, args.iters)
        t_one_f = t_one_fb = float("nan")
        # Rank 0 runs the whole sequence alone while the others wait at the barrier.
        if rank == 0:
            t_one_f = timed(one_fwd, args.iters, warmup=1, together=False)
            t_one_fb = timed(one_fwd_bwd, args.iters, warmup=1, together=False)
        dist.barrier()
        rows.append((t, total, t_ring_f, t_ring_fb, t_one_f, t_one_fb))
        q = k = v = dout = local = ql = kl = vl = dl = qs = ks = vs = None  # free before the next
        torch.cuda.empty_cache()
    if rank == 0:
        print(f"\n{world} GPUs, {hq}/{hkv} heads, hd{d}, {'causal' if causal else 'non-causal'}, "
              f"{args.layout}")  # fmt: skip
        print(
            "| tokens/GPU | sequence | ring fwd us | 1-GPU fwd us | fwd eff | ring fwd+bwd us "
            "| 1-GPU fwd+bwd us | fwd+bwd eff |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for t, total, rf, rfb, of, ofb in rows:
            print(
                f"| {t} | {total} | {rf:.0f} | {of:.0f} | {of / (world * rf):.2f} | {rfb:.0f} | "
                f"{ofb:.0f} | {ofb / (world * rfb):.2f} |"
            )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
