"""hopattn.distributed: the ring's block plan (pure Python) and ring_attention over 1, 2 and 4
gloo ranks (spawned processes, CPU tensors) against one-process hopattn.attention and its
backward: causal, sliding window, varlen, GQA, sinks, softcap, both layouts."""

import itertools
import os
import random
import tempfile

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import hopattn  # noqa: E402
from hopattn.distributed import blocks, layout  # noqa: E402

INF = float("inf")


# ------------------------------------------------------------------------------ the block plan
def _visible(lo, hi, i, j):
    return lo <= j - i <= hi


def _window_mask(q_len, k_len, left, right):
    """hopattn's mask of a non-causal call: bottom-right diagonal j - i = k_len - q_len."""
    diag = k_len - q_len
    return {
        (i, j)
        for i in range(q_len)
        for j in range(k_len)
        if (left < 0 or j - i >= diag - left) and (right < 0 or j - i <= diag + right)
    }


def test_sub_problem_is_the_band():
    rng = random.Random(7)
    for _ in range(3000):
        q_len, k_len = rng.randint(0, 9), rng.randint(0, 9)
        lo = rng.choice([-INF, rng.randint(-12, 12)])
        hi = rng.choice([INF, rng.randint(-12, 12)])
        want = {(i, j) for i in range(q_len) for j in range(k_len) if _visible(lo, hi, i, j)}
        sub = blocks.sub_problem(q_len, k_len, lo, hi)
        if sub is None:
            assert not want, (q_len, k_len, lo, hi)
            continue
        i0, ql, j0, kl, (left, right) = sub
        assert left >= -1 and right >= -1
        got = {(i0 + i, j0 + j) for i, j in _window_mask(ql, kl, left, right)}
        assert got == want, (q_len, k_len, lo, hi, sub)
        # Trimmed: every row and every key of the sub-rectangle takes part.
        assert {i for i, _ in want} == set(range(i0, i0 + ql))
        assert {j for _, j in want} == set(range(j0, j0 + kl))


@pytest.mark.parametrize("layout_name", layout.LAYOUTS)
def test_step_plans_cover_every_pair_once(layout_name):
    rng = random.Random(11)
    for _ in range(60):
        world = rng.choice([1, 2, 3, 4])
        n = layout.pieces(world, layout_name)
        seq_lens = [n * rng.randint(0, 4) for _ in range(rng.randint(1, 3))]
        causal = rng.random() < 0.5
        window = (rng.choice([-1, 0, 3, 9]), rng.choice([-1, 0, 2]))
        lo, hi = blocks.band(causal, window)
        steps = blocks.steps_needed(seq_lens, world, causal, window, layout_name)
        for rank in range(world):
            q_rows = layout.global_rows(seq_lens, rank, world, layout_name)
            starts = list(itertools.accumulate([0] + seq_lens))
            seq_of = {}
            for b, length in enumerate(seq_lens):
                for r in range(starts[b], starts[b] + length):
                    seq_of[r] = b
            want = {
                (qr, kr)
                for qr in q_rows
                for kr in range(starts[seq_of[qr]], starts[seq_of[qr] + 1])
                if _visible(lo, hi, qr, kr)
            }
            got, sink_rows = [], []
            for step in range(world):
                src = (rank - step) % world
                k_rows = layout.global_rows(seq_lens, src, world, layout_name)
                plans = blocks.step_plan(seq_lens, rank, world, step, causal, window,
                                         layout_name)  # fmt: skip
                assert step < steps or not plans
                for plan in plans:
                    rows_in_call = []
                    for part in plan.parts:
                        mask = _window_mask(part.q_len, part.k_len, *plan.window)
                        got.extend(
                            (q_rows[part.q_row + i], k_rows[part.k_row + j]) for i, j in mask
                        )
                        rows_in_call.extend(range(part.q_row, part.q_row + part.q_len))
                        if plan.sinks:
                            sink_rows.extend(range(part.q_row, part.q_row + part.q_len))
                    assert len(rows_in_call) == len(set(rows_in_call)), "a row twice in a call"
            assert sorted(got) == sorted(want)
            assert sorted(sink_rows) == list(range(len(q_rows))), "sinks once per row"


def test_layout_errors():
    with pytest.raises(ValueError, match="multiple of 4"):
        layout.check_lengths([8, 6], 2, "zigzag")
    with pytest.raises(ValueError, match="layout"):
        layout.check_layout("ring")


def test_ring_attention_needs_a_process_group():
    if dist.is_initialized():
        pytest.skip("a process group is already initialized")
    q = torch.zeros(1, 4, 1, 8)
    with pytest.raises(ValueError, match="process group"):
        hopattn.distributed.ring_attention(q, q, q)


# ------------------------------------------------------------------------------ gloo ranks
# (causal, window, layout, per-sequence lengths in units of 2 * world (None: dense B = 2),
#  hq, hkv, sinks, softcap, dtype)
CASES = [
    (True, (-1, -1), "zigzag", [2, 4], 2, 1, False, 0.0, "float32"),
    (False, (-1, -1), "zigzag", None, 4, 2, True, 0.0, "float32"),
    (True, (5, -1), "contiguous", [2, 1], 4, 2, False, 0.0, "float32"),
    (True, (5, -1), "zigzag", [2, 1, 0], 4, 2, True, 10.0, "float32"),
    (False, (3, 2), "zigzag", [2], 2, 1, False, 0.0, "float32"),
    (False, (3, 2), "contiguous", [3], 2, 2, True, 0.0, "float32"),
    (True, (-1, -1), "zigzag", [3, 2], 4, 1, True, 0.0, "bfloat16"),
]


def _case_tensors(case, world, seed):
    causal, window, lay, units, hq, hkv, sinks_on, softcap, dtype = case
    g = torch.Generator().manual_seed(seed)
    d = 16
    dt = getattr(torch, dtype)
    dense = units is None
    lens = [2 * world * 3] * 2 if dense else [2 * world * u for u in units]
    total = sum(lens)

    def rand(*shape):
        return torch.randn(*shape, generator=g).to(dt)

    t = dict(q=rand(total, hq, d), k=rand(total, hkv, d), v=rand(total, hkv, d),
             dout=rand(total, hq, d))  # fmt: skip
    t["sinks"] = torch.randn(hq, generator=g) if sinks_on else None
    return lens, dense, t


def _reference(case, lens, t):
    causal, window, _, _, _, _, _, softcap, _ = case
    cu = torch.tensor([0] + list(itertools.accumulate(lens)), dtype=torch.int32)
    leaves = {n: t[n].clone().requires_grad_() for n in ("q", "k", "v")}
    sinks = t["sinks"].clone().requires_grad_() if t["sinks"] is not None else None
    out, lse = hopattn.attention(
        leaves["q"], leaves["k"], leaves["v"], causal=causal, window=window, softcap=softcap,
        sinks=sinks, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=max(lens),
        max_seqlen_k=max(lens),
    )  # fmt: skip
    (out.float() * t["dout"].float()).sum().backward()
    grads = {n: leaves[n].grad for n in leaves}
    if sinks is not None:
        grads["sinks"] = sinks.grad
    return out.detach(), lse, grads


def _sharded(case, lens, dense, t, world):
    causal, window, lay, _, _, _, _, softcap, _ = case
    hd = hopattn.distributed
    cu = [0] + list(itertools.accumulate(lens))
    if dense:  # [B, S, H, D]: the same rows as the varlen tensors, B = 2 equal sequences

        def to_local(x):
            return hd.shard(x.reshape(2, lens[0], *x.shape[1:]), layout=lay)

        def to_global(x):
            return hd.unshard(x, layout=lay).reshape(-1, *x.shape[2:])
    else:

        def to_local(x):
            return hd.shard(x, cu_seqlens=cu, layout=lay)

        def to_global(x):
            return hd.unshard(x, cu_seqlens=cu, layout=lay)

    leaves = {n: to_local(t[n]).clone().requires_grad_() for n in ("q", "k", "v")}
    sinks = t["sinks"].clone().requires_grad_() if t["sinks"] is not None else None
    out, lse = hd.ring_attention(
        leaves["q"], leaves["k"], leaves["v"], causal=causal, window=window, softcap=softcap,
        sinks=sinks, cu_seqlens=None if dense else cu, layout=lay,
    )  # fmt: skip
    (out.float() * to_local(t["dout"]).float()).sum().backward()
    grads = {n: to_global(leaves[n].grad) for n in leaves}
    if sinks is not None:
        ds = sinks.grad.clone()
        dist.all_reduce(ds)  # each rank's dsinks is its queries' part
        grads["sinks"] = ds
    return to_global(out.detach()), to_global(lse), grads


def _worker(rank, world, init_file, results):
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank,
                            world_size=world)  # fmt: skip
    try:
        failures = []
        for i, case in enumerate(CASES):
            lens, dense, t = _case_tensors(case, world, seed=100 + i)
            want_out, want_lse, want_grads = _reference(case, lens, t)
            out, lse, grads = _sharded(case, lens, dense, t, world)
            tol = 1e-5 if case[-1] == "float32" else 2e-2
            checks = [("out", out.float(), want_out.float()), ("lse", lse, want_lse)]
            checks += [(n, grads[n].float(), want_grads[n].float()) for n in want_grads]
            for name, got, want in checks:
                scale = max(1.0, want.abs().max().item())
                err = (got - want).abs().max().item() / scale
                if not err <= tol:  # NaN fails too
                    failures.append(f"case {i} {case}: {name} off by {err:.3g} (tol {tol})")
        if rank == 0:
            results.put(failures)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [1, 2, 4])
def test_ring_attention_matches_one_process(world):
    mp = torch.multiprocessing.get_context("spawn")
    results = mp.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "init")
        procs = [mp.Process(target=_worker, args=(r, world, init_file, results))
                 for r in range(world)]  # fmt: skip
        for p in procs:
            p.start()
        failures = results.get(timeout=600)
        for p in procs:
            p.join(timeout=60)
        assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    assert not failures, "\n".join(failures)
