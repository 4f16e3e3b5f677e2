"""hopattn.BatchAttention through torch: the custom op torch.ops.hopattn.batch_run (opcheck,
torch.compile(fullgraph=True), the handle registry) and the CUDA path: random mixed steps against
the CPU BatchAttention on the same data, the device workspace made once and the plan uploaded on
the current stream, CUDA-graph capture replayed after re-planning another step, and the errors.

The CUDA cases skip without a GPU and end as expected failures (conftest.call) while the batch
family has no GPU kernel in the build."""

import gc

import numpy as np
import pytest

import hopattn
from conftest import HAS_CUDA, LSE_ATOL, call

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

gpu = pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device visible")


class _On:
    """What conftest's `call` needs to know of a device (CUDA: a missing kernel is an xfail)."""

    def __init__(self, device):
        self.is_cuda = str(device).startswith("cuda")


# DESIGN.md / conftest tolerances against a float64-accumulated reference.
_ATOL = {torch.bfloat16: 3e-2, torch.float16: 4e-3}


def _lengths(rng, batch, max_tokens, long_kv=3000):
    """A random mixed step of `batch` slots: decodes, speculative decodes, prefill chunks over a
    cache or from scratch, and empty slots; returns (q_lens, kv_lens) with sum(q_lens) <= max."""
    q_lens, kv_lens = [], []
    for _ in range(batch):
        kind = rng.choice(["decode", "decode", "decode", "spec", "chunk", "first", "empty"])
        if kind == "decode":
            q, cached = 1, int(rng.integers(0, long_kv))
        elif kind == "spec":
            q, cached = int(rng.integers(2, 9)), int(rng.integers(0, long_kv))
        elif kind == "chunk":
            q, cached = int(rng.integers(16, 300)), int(rng.integers(1, 1200))
        elif kind == "first":
            q, cached = int(rng.integers(1, 300)), 0
        else:
            q, cached = 0, int(rng.integers(0, 50))
        q = min(q, max_tokens - sum(q_lens))
        q_lens.append(q)
        kv_lens.append(q + cached)
    return q_lens, kv_lens


class _Step:
    """One step's tensors on `device`, the host lengths for plan(), and the float32 copies of the
    same (rounded) values for the CPU BatchAttention."""

    def __init__(
        self,
        rng,
        q_lens,
        kv_lens,
        hq,
        hkv,
        d,
        page_size,
        layout,
        device,
        dtype,
        cache_dtype=None,
        rows=None,
        max_pages=None,
        num_pages=None,
    ):
        cache_dtype = cache_dtype or dtype
        self.cu = torch.tensor(np.concatenate([[0], np.cumsum(q_lens)]), dtype=torch.int32)
        self.kv = torch.tensor(kv_lens, dtype=torch.int32)
        pages_per = [max(1, -(-n // page_size)) for n in kv_lens]
        max_pages = max_pages or max(pages_per + [1])
        num_pages = num_pages or sum(pages_per) + 3
        order = torch.from_numpy(rng.permutation(num_pages).astype(np.int32))
        table = torch.full((len(kv_lens), max_pages), int(order[-1]), dtype=torch.int32)
        used = 0
        for b, n in enumerate(pages_per):
            table[b, :n] = order[used : used + n]
            used += n
        rows = rows or int(self.cu[-1])
        g = torch.Generator().manual_seed(int(rng.integers(1 << 31)))
        shape = (
            (num_pages, page_size, hkv, d) if layout == "NHD" else (num_pages, hkv, page_size, d)
        )
        q = torch.randn(rows, hq, d, generator=g).to(dtype)
        k = torch.randn(shape, generator=g).to(cache_dtype)
        v = torch.randn(shape, generator=g).to(cache_dtype)
        self.host = (self.cu, self.kv)
        self.cpu = (q.float(), k.float(), v.float(), self.cu, self.kv, table)
        self.tensors = tuple(t.to(device) for t in (q, k, v, self.cu, self.kv, table))


def _config(hq=8, hkv=2, d=128, page_size=16, **kw):
    return dict(num_qo_heads=hq, num_kv_heads=hkv, head_dim=d, page_size=page_size, **kw)


def _pair(device, max_batch, max_tokens, cfg):
    """The BatchAttention under test on `device` and its CPU twin (the oracle)."""
    limits = dict(max_batch=max_batch, max_tokens=max_tokens)
    kw = dict(cfg)
    args = [kw.pop(n) for n in ("num_qo_heads", "num_kv_heads", "head_dim", "page_size")]
    ba = hopattn.BatchAttention(*args, device=device, **limits, **kw)
    ref = hopattn.BatchAttention(*args, device="cpu", **limits, **kw)
    return ba, ref


def _reference(ref, step, run_kw=None, cpu_kw=None):
    ref.plan(*step.host)
    return ref.run(*step.cpu, **(cpu_kw or run_kw or {}))


def _compare(got, expected, dtype, rows, rel_l2=None):
    out, lse = (t.detach().cpu()[:rows] for t in got)
    ref_out, ref_lse = (t[:rows] for t in expected)
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    if rel_l2 is None:
        torch.testing.assert_close(out.float(), ref_out, atol=_ATOL[dtype], rtol=_ATOL[dtype])
    else:
        err = (out.float() - ref_out).norm() / ref_out.norm().clamp_min(1e-30)
        assert err <= rel_l2, f"relative L2 error {err:.3g} > {rel_l2}"
    assert torch.equal(torch.isneginf(lse), torch.isneginf(ref_lse)), "lse -inf rows differ"
    finite = torch.isfinite(ref_lse)
    torch.testing.assert_close(lse[finite], ref_lse[finite], atol=LSE_ATOL, rtol=LSE_ATOL)


# ---------------------------------------------------------------------------- the op (any device)
def _cpu_case(seed=0):
    rng = np.random.default_rng(seed)
    q_lens, kv_lens = [1, 0, 5, 24, 9, 1], [37, 6, 21, 60, 9, 1]
    step = _Step(rng, q_lens, kv_lens, 4, 2, 64, 16, "NHD", "cpu", torch.float32)
    ba = hopattn.BatchAttention(4, 2, 64, 16, device="cpu", max_batch=8)
    ba.plan(*step.host)
    return ba, step


def test_batch_run_op_registered_and_opcheck():
    ba, step = _cpu_case()
    from hopattn._torch.batch import BATCH

    assert hasattr(torch.ops.hopattn, "batch_run") and hasattr(torch.ops.hopattn, "batch_run_out")
    options = dict(
        handle=ba.handle,
        sinks=None,
        k_scale=1.0,
        k_scale_per_head=None,
        v_scale=1.0,
        v_scale_per_head=None,
    )
    args = BATCH.flat(step.tensors, options)
    torch.library.opcheck(
        torch.ops.hopattn.batch_run.default,
        args,
        test_utils=("test_schema", "test_autograd_registration", "test_faketensor"),
    )
    out, lse = torch.ops.hopattn.batch_run(*args)
    eager = ba.run(*step.tensors)
    torch.testing.assert_close(out, eager[0])
    torch.testing.assert_close(lse, eager[1])


def test_batch_handles_are_unique_and_weak():
    a = hopattn.BatchAttention(4, 2, 64, 16, device="cpu")
    b = hopattn.BatchAttention(4, 2, 64, 16, device="cpu")
    assert a.handle != b.handle
    assert hopattn.batch.lookup(a.handle) is a
    handle = b.handle
    del b
    gc.collect()
    with pytest.raises(RuntimeError, match=f"handle {handle}: expected a live BatchAttention"):
        hopattn.batch.lookup(handle)


def _compiled(fn, device):
    # aot_eager on CPU (Dynamo, fake tensors, functionalization, no C++ compile); inductor on GPU.
    return torch.compile(
        fn, fullgraph=True, backend="inductor" if device == "cuda" else "aot_eager"
    )


def test_batch_compile_fullgraph_cpu():
    torch._dynamo.reset()
    ba, step = _cpu_case(1)
    sinks = torch.randn(4)

    def layer(q, k, v, cu, kv, table):
        out, lse = ba.run(q, k, v, cu, kv, table, sinks=sinks, k_scale=0.5)
        return out * 2, lse

    eager = layer(*step.tensors)
    compiled = _compiled(layer, "cpu")(*step.tensors)
    for a, b in zip(compiled, eager):
        torch.testing.assert_close(a, b)


def test_batch_compile_out_variant_cpu():
    torch._dynamo.reset()
    ba, step = _cpu_case(2)
    rows = step.tensors[0].shape[0]
    out, lse = torch.zeros(rows, 4, 64), torch.zeros(rows, 4)

    def layer(q, k, v, cu, kv, table, out, lse):
        ba.run(q, k, v, cu, kv, table, out=out, lse_out=lse)
        return out + 1

    got = _compiled(layer, "cpu")(*step.tensors, out, lse)
    expected = ba.run(*step.tensors)
    torch.testing.assert_close(got, expected[0] + 1)
    torch.testing.assert_close(lse, expected[1])


def test_batch_torch_cpu_tensors_for_a_cuda_object():
    """The CUDA-configured object refuses CPU tensors (through the torch op, on any machine)."""
    _, step = _cpu_case(3)
    ba = hopattn.BatchAttention(4, 2, 64, 16, device="cuda:0", max_batch=8)
    ba.plan(*step.host)
    with pytest.raises(TypeError, match="the device the BatchAttention was made for"):
        ba.run(*step.tensors)


# ---------------------------------------------------------------------------- CUDA
@gpu
@pytest.mark.gpu
def test_batch_cuda_workspace_made_once():
    ba = hopattn.BatchAttention(8, 2, 128, 16, device="cuda", max_batch=16, max_tokens=2048)
    ws = ba._workspace
    if not hopattn.built_with_cuda():
        pytest.skip("this build has no GPU kernels")
    assert ws is not None and ws.is_cuda and ws.dtype == torch.uint8
    assert ws.numel() == ba._c.workspace_size > 0
    assert ba._held.nbytes == ws.numel()  # imported once, at allocation
    rng = np.random.default_rng(0)
    step = _Step(rng, *_lengths(rng, 16, 2048), 8, 2, 128, 16, "NHD", "cuda", torch.bfloat16)
    ba.plan(*step.host)
    call(_On("cuda"), ba.run, *step.tensors)
    ba.plan(*step.host)
    assert ba._workspace is ws  # plan() and run() reuse it


CUDA_CASES = {
    "nhd": dict(layout="NHD"),
    "hnd": dict(layout="HND"),
    "gqa8-window": dict(layout="NHD", hq=16, hkv=2, window=(256, -1)),
    "softcap-scale": dict(layout="NHD", softcap=30.0, scale=0.05),
    "non-causal": dict(layout="HND", causal=False),
    "page1": dict(layout="NHD", page_size=1),
    "sinks": dict(layout="NHD", sinks=True),
    "fp8": dict(layout="NHD", fp8=True),
    "fp16": dict(layout="NHD", dtype=torch.float16),
}


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("case", CUDA_CASES)
def test_batch_cuda_random_steps_vs_cpu(case, seed):
    """Random mixed steps (decodes, speculative decodes, prefill chunks, empty slots) on CUDA
    against the CPU BatchAttention on the same values; several steps re-planned on one object."""
    c = dict(CUDA_CASES[case])
    layout, dtype = c.pop("layout"), c.pop("dtype", torch.bfloat16)
    fp8, with_sinks = c.pop("fp8", False), c.pop("sinks", False)
    hq, hkv, page_size = c.pop("hq", 8), c.pop("hkv", 2), c.pop("page_size", 16)
    cfg = _config(hq, hkv, 128, page_size, kv_layout=layout, **c)
    ba, ref = _pair("cuda", 24, 4096, cfg)
    rng = np.random.default_rng(1000 * seed + sum(map(ord, case)))
    for _ in range(3):
        q_lens, kv_lens = _lengths(rng, int(rng.integers(1, 25)), 4096)
        step = _Step(
            rng,
            q_lens,
            kv_lens,
            hq,
            hkv,
            128,
            page_size,
            layout,
            "cuda",
            dtype,
            cache_dtype=torch.float8_e4m3fn if fp8 else None,
        )
        run_kw, cpu_kw = {}, {}
        if fp8:
            run_kw = cpu_kw = dict(k_scale=0.5, v_scale=2.0)
        if with_sinks:
            sinks = torch.randn(hq)
            sinks[0] = -float("inf")
            run_kw, cpu_kw = dict(sinks=sinks.cuda()), dict(sinks=sinks)
        ba.plan(*step.host)
        got = call(_On("cuda"), ba.run, *step.tensors, **run_kw)
        assert got[0].dtype == dtype and got[0].is_cuda
        expected = _reference(ref, step, cpu_kw=cpu_kw)
        _compare(got, expected, dtype, int(step.cu[-1]), rel_l2=2e-2 if fp8 else None)


@gpu
@pytest.mark.gpu
def test_batch_cuda_plan_and_run_on_a_side_stream():
    cfg = _config()
    ba, ref = _pair("cuda", 16, 2048, cfg)
    rng = np.random.default_rng(7)
    step = _Step(rng, *_lengths(rng, 16, 2048), 8, 2, 128, 16, "NHD", "cuda", torch.bfloat16)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        ba.plan(*step.host)  # the upload is ordered on `stream`, before the run
        got = call(_On("cuda"), ba.run, *step.tensors)
    stream.synchronize()
    _compare(got, _reference(ref, step), torch.bfloat16, int(step.cu[-1]))


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("given_outputs", [True, False])
def test_batch_cuda_graph_replays_the_latest_plan(given_outputs):
    """run() captured once (with out= / lse_out=, or allocating from the graph's pool), then
    another step of the same batch size planned into the same buffers and replayed: the graph
    reads the plan that plan() uploaded last."""
    batch, rows, hq, hkv, d, page = 12, 1024, 8, 2, 128, 16
    max_pages = -(-4096 // page)
    num_pages = batch * max_pages
    cfg = _config(hq, hkv, d, page)
    ba, ref = _pair("cuda", batch, rows, cfg)
    rng = np.random.default_rng(11)

    def step():
        q_lens, kv_lens = _lengths(rng, batch, rows, long_kv=4096 - 300)
        return _Step(
            rng,
            q_lens,
            kv_lens,
            hq,
            hkv,
            d,
            page,
            "NHD",
            "cuda",
            torch.bfloat16,
            rows=rows,
            max_pages=max_pages,
            num_pages=num_pages,
        )

    first, second = step(), step()
    static = tuple(t.clone() for t in first.tensors)  # q, caches, cu, kv, table: fixed buffers
    out = torch.full((rows, hq, d), float("nan"), dtype=torch.bfloat16, device="cuda")
    lse = torch.full((rows, hq), float("nan"), device="cuda")
    outputs = dict(out=out, lse_out=lse) if given_outputs else {}

    ba.plan(*first.host)
    call(_On("cuda"), ba.run, *static, **outputs)  # warm-up (and the xfail without a kernel)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = ba.run(*static, **outputs)
    if given_outputs:
        assert got[0] is out and got[1] is lse

    graph.replay()  # the first step
    torch.cuda.synchronize()
    _compare(got, _reference(ref, first), torch.bfloat16, int(first.cu[-1]))

    for buffer, new in zip(static, second.tensors):
        buffer.copy_(new)
    ba.plan(*second.host)  # uploaded on the current stream, before the replay
    graph.replay()
    torch.cuda.synchronize()
    _compare(got, _reference(ref, second), torch.bfloat16, int(second.cu[-1]))


@gpu
@pytest.mark.gpu
def test_batch_cuda_compile_fullgraph():
    torch._dynamo.reset()
    cfg = _config()
    ba, ref = _pair("cuda", 16, 2048, cfg)
    rng = np.random.default_rng(5)
    step = _Step(rng, *_lengths(rng, 16, 2048), 8, 2, 128, 16, "NHD", "cuda", torch.bfloat16)
    ba.plan(*step.host)

    def layer(q, k, v, cu, kv, table):
        out, lse = ba.run(q, k, v, cu, kv, table)
        return out.float() * 2, lse

    eager = call(_On("cuda"), layer, *step.tensors)
    compiled = _compiled(layer, "cuda")(*step.tensors)
    for a, b in zip(compiled, eager):
        torch.testing.assert_close(a, b)
    rows = int(step.cu[-1])
    _compare((compiled[0] / 2, compiled[1]), _reference(ref, step), torch.bfloat16, rows)


@gpu
@pytest.mark.gpu
def test_batch_cuda_object_refuses_cpu_tensors():
    rng = np.random.default_rng(3)
    step = _Step(rng, [1, 7], [40, 7], 8, 2, 128, 16, "NHD", "cpu", torch.bfloat16)
    ba = hopattn.BatchAttention(8, 2, 128, 16, device="cuda", max_batch=8)
    ba.plan(*step.host)
    with pytest.raises(TypeError, match="the device the BatchAttention was made for"):
        ba.run(*step.tensors)
    # and a CPU object refuses CUDA tensors
    cpu = hopattn.BatchAttention(8, 2, 128, 16, device="cpu", max_batch=8)
    cpu.plan(*step.host)
    with pytest.raises((TypeError, NotImplementedError), match="BatchAttention|GPU kernels"):
        cpu.run(*(t.cuda() for t in step.tensors))


@gpu
@pytest.mark.gpu
def test_batch_cuda_plan_rejects_device_lengths():
    ba = hopattn.BatchAttention(8, 2, 128, 16, device="cuda", max_batch=8)
    cu = torch.tensor([0, 1], dtype=torch.int32, device="cuda")
    kv = torch.tensor([5], dtype=torch.int32, device="cuda")
    with pytest.raises(TypeError, match="a host \\(CPU\\) tensor"):
        ba.plan(cu, kv)
