"""torch integration: custom ops (opcheck), autograd against the textbook backward, gradcheck,
torch.compile(fullgraph=True), CUDA graphs, streams and devices."""

import numpy as np
import pytest

import hopattn
import naive
from conftest import HAS_CUDA, call

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

gpu = pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device visible")
two_gpus = pytest.mark.skipif(
    not HAS_CUDA or torch.cuda.device_count() < 2, reason="needs two CUDA devices"
)


class _On:
    """What conftest's `call` needs to know of a device (CUDA: missing kernels are xfails)."""

    def __init__(self, device):
        self.is_cuda = str(device).startswith("cuda")


def _qkv(shape_q, shape_k, dtype=torch.float32, device="cpu", seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    make = lambda s: torch.randn(s, generator=g).to(device=device, dtype=dtype)  # noqa: E731
    q, k, v = make(shape_q), make(shape_k), make(shape_k)
    for t in (q, k, v):
        t.requires_grad_(requires_grad)
    return q, k, v


def _decode_inputs(device="cpu", dtype=torch.float32, d=16):
    g = torch.Generator().manual_seed(1)
    kv_lens = torch.tensor([9, 1, 20], dtype=torch.int32)
    table = torch.tensor([[3, 5], [0, 0], [7, 2]], dtype=torch.int32)
    q = torch.randn(3, 1, 4, d, generator=g).to(device=device, dtype=dtype)
    k = torch.randn(8, 16, 2, d, generator=g).to(device=device, dtype=dtype)
    v = torch.randn(8, 16, 2, d, generator=g).to(device=device, dtype=dtype)
    return q, k, v, kv_lens.to(device), table.to(device)


# ---------------------------------------------------------------------------- ops
# opcheck's AOT-dispatch test recompiles each op several times (slow); the torch.compile tests
# below cover that path.
OPCHECKS = ("test_schema", "test_autograd_registration", "test_faketensor")


def test_ops_registered():
    import hopattn.torch  # noqa: F401

    for name in (
        "attention_fwd",
        "attention_bwd",
        "decode",
        "mla",
        "merge_states",
        "merge_states_n",
        "attention_fwd_out",
        "decode_out",
    ):
        assert hasattr(torch.ops.hopattn, name), name


def test_opcheck_attention():
    from hopattn._torch.attention import FWD

    q, k, v = _qkv((1, 5, 4, 16), (1, 7, 2, 16), requires_grad=True)
    a = hopattn._attention_flat(
        True, (-1, -1), 0.0, None, None, None, None, None, None, None, None, "NHD", False
    )
    args = FWD.flat((q, k, v), a)
    torch.library.opcheck(torch.ops.hopattn.attention_fwd.default, args, test_utils=OPCHECKS)


def _decode_options(table, **kw):
    """hopattn.decode's normalized options (the flat form the backends take)."""
    from hopattn._torch.decode import DECODE

    options = {name: None for name in DECODE.names[4:]}
    options.update(
        page_table=table,
        kv_layout="NHD",
        causal=True,
        window_left=-1,
        window_right=-1,
        softcap=0.0,
        k_scale=1.0,
        v_scale=1.0,
        beam_width=1,
        num_splits=0,
    )
    options.update(kw)
    return options


def test_opcheck_decode_and_merge():
    from hopattn._torch.decode import DECODE

    q, k, v, kv_lens, table = _decode_inputs()
    args = DECODE.flat((q, k, v, kv_lens), _decode_options(table))
    torch.library.opcheck(torch.ops.hopattn.decode.default, args, test_utils=OPCHECKS)
    o, lse = torch.randn(4, 3, 2, 8), torch.randn(4, 3, 2)
    torch.library.opcheck(torch.ops.hopattn.merge_states_n.default, (o, lse))
    torch.library.opcheck(
        torch.ops.hopattn.merge_states.default, (o[:, 0], lse[:, 0], o[:, 1], lse[:, 1])
    )


# ---------------------------------------------------------------------------- autograd
GRAD_OPTIONS = {
    "plain": {},
    "causal": dict(causal=True),
    "window-softcap": dict(window=(3, 1), softcap=2.0),
    "sinks": dict(sinks=True, causal=True),
    "scale": dict(scale=0.4),
}


@pytest.mark.parametrize("opt", GRAD_OPTIONS)
def test_autograd_matches_textbook_backward(opt):
    q, k, v = _qkv((2, 5, 6, 16), (2, 8, 2, 16), requires_grad=True)
    kw, ref_kw = dict(GRAD_OPTIONS[opt]), dict(GRAD_OPTIONS[opt])
    if kw.pop("sinks", None):
        sinks = torch.randn(6).requires_grad_()
        kw["sinks"], ref_kw["sinks"] = sinks, sinks.detach().numpy()
    out, lse = hopattn.attention(q, k, v, **kw)
    assert out.requires_grad and not lse.requires_grad
    dout = torch.randn_like(out)
    out.backward(dout)
    dq, dk, dv, dsinks = naive.attention_dense_backward(
        *(t.detach().numpy() for t in (q, k, v, dout)), **ref_kw
    )
    for got, expected, name in ((q.grad, dq, "dq"), (k.grad, dk, "dk"), (v.grad, dv, "dv")):
        np.testing.assert_allclose(got.numpy(), expected, atol=2e-5, rtol=1e-4, err_msg=name)
    if "sinks" in kw:
        np.testing.assert_allclose(kw["sinks"].grad.numpy(), dsinks, atol=2e-5, rtol=1e-4)


def test_gradcheck():
    """Finite differences through the whole op (float32: the library has no float64)."""
    q, k, v = _qkv((1, 3, 2, 8), (1, 4, 1, 8), requires_grad=True, seed=3)
    sinks = torch.randn(2).requires_grad_()

    def fn(q, k, v, sinks):
        return hopattn.attention(q, k, v, causal=True, softcap=3.0, sinks=sinks)[0]

    with pytest.warns(UserWarning):  # gradcheck's note that the inputs are not float64
        assert torch.autograd.gradcheck(fn, (q, k, v, sinks), eps=1e-2, atol=2e-3, rtol=2e-2)


def test_autograd_varlen_gqa():
    cu = torch.tensor([0, 3, 3, 8], dtype=torch.int32)
    cu_k = torch.tensor([0, 2, 6, 13], dtype=torch.int32)
    q, k, v = _qkv((8, 6, 16), (13, 3, 16), requires_grad=True, seed=5)
    out, _ = hopattn.attention(q, k, v, causal=True, cu_seqlens_q=cu, cu_seqlens_k=cu_k)
    out.square().sum().backward()
    for b in range(3):
        qs, qe, ks, ke = cu[b], cu[b + 1], cu_k[b], cu_k[b + 1]
        o = out[qs:qe].detach().numpy().astype(np.float64)
        mask = naive.visibility(int(qe - qs), int(ke - ks), causal=True)
        dq, dk, dv, _ = naive.attend_backward(
            q[qs:qe].detach().numpy(),
            k[ks:ke].detach().numpy(),
            v[ks:ke].detach().numpy(),
            2 * o,
            mask,
        )
        np.testing.assert_allclose(q.grad[qs:qe].numpy(), dq, atol=5e-5, rtol=1e-4)
        np.testing.assert_allclose(k.grad[ks:ke].numpy(), dk, atol=5e-5, rtol=1e-4)
        np.testing.assert_allclose(v.grad[ks:ke].numpy(), dv, atol=5e-5, rtol=1e-4)


def test_attention_backward_function():
    q, k, v = _qkv((1, 4, 2, 16), (1, 6, 2, 16), seed=7)
    out, lse = hopattn.attention(q, k, v, causal=True)
    dout = torch.randn_like(out)
    dq, dk, dv, dsinks = hopattn.attention_backward(dout, q, k, v, out, lse, causal=True)
    assert dsinks is None
    ref = naive.attention_dense_backward(q.numpy(), k.numpy(), v.numpy(), dout.numpy(), causal=True)
    for got, expected in zip((dq, dk, dv), ref):
        np.testing.assert_allclose(got.numpy(), expected, atol=2e-5, rtol=1e-4)
    bufs = [torch.zeros_like(t) for t in (q, k, v)]
    got = hopattn.attention_backward(
        dout, q, k, v, out, lse, causal=True, dq=bufs[0], dk=bufs[1], dv=bufs[2]
    )
    assert all(a is b for a, b in zip(got[:3], bufs))
    np.testing.assert_array_equal(bufs[0].numpy(), dq.numpy())


def test_out_buffers_refuse_autograd():
    q, k, v = _qkv((1, 4, 2, 16), (1, 6, 2, 16), requires_grad=True)
    with pytest.raises(RuntimeError, match="out="):
        hopattn.attention(q, k, v, out=torch.empty(1, 4, 2, 16))


# ---------------------------------------------------------------------------- torch.compile
def _compiled(fn, device):
    # aot_eager on CPU traces the same graph (Dynamo + fake tensors + functionalization) without
    # compiling C++ for inductor, which keeps the CPU suite fast; inductor on the GPU.
    return torch.compile(
        fn, fullgraph=True, backend="inductor" if device == "cuda" else "aot_eager"
    )


DEVICES = ["cpu", pytest.param("cuda", marks=[gpu, pytest.mark.gpu])]


def _attention_step(device, requires_grad):
    dtype = torch.float16 if device == "cuda" else torch.float32
    d = 128 if device == "cuda" else 16
    q, k, v = _qkv(
        (2, 5, 4, d), (2, 9, 2, d), dtype=dtype, device=device, requires_grad=requires_grad
    )

    def step(q, k, v):
        out, lse = hopattn.attention(q, k, v, causal=True, window=(4, -1))
        return (out.float() * out.float()).sum() + lse.sum().detach()

    return step, (q, k, v)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_forward(device):
    torch._dynamo.reset()
    step, args = _attention_step(device, requires_grad=False)
    eager = call(_On(device), step, *args)
    torch.testing.assert_close(_compiled(step, device)(*args), eager)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_forward_backward(device):
    torch._dynamo.reset()
    step, args = _attention_step(device, requires_grad=True)
    eager = call(_On(device), step, *args)
    grads = call(_On(device), torch.autograd.grad, eager, args)
    compiled = _compiled(step, device)(*args)
    torch.testing.assert_close(compiled, eager)
    for a, b in zip(torch.autograd.grad(compiled, args), grads):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_decode_merge(device):
    torch._dynamo.reset()
    dtype = torch.float16 if device == "cuda" else torch.float32
    q, k, v, kv_lens, table = _decode_inputs(device, dtype, d=128 if device == "cuda" else 16)

    def serve(q, k, v, kv_lens, table):
        a = hopattn.decode(q, k, v, kv_lens, table, k_scale=0.5, window=(8, -1))
        b = hopattn.decode(q, k, v, kv_lens, table)
        o = torch.stack([a[0], b[0]], dim=1).flatten(2, 3).reshape(3, 2, 4, -1)
        lse = torch.stack([a[1], b[1]], dim=1).reshape(3, 2, 4)
        return hopattn.merge_states_n(o, lse)

    eager = call(_On(device), serve, q, k, v, kv_lens, table)
    compiled = _compiled(serve, device)(q, k, v, kv_lens, table)
    for a, b in zip(compiled, eager):
        torch.testing.assert_close(a, b)


def test_compile_out_variant():
    torch._dynamo.reset()
    q, k, v = _qkv((1, 4, 2, 16), (1, 6, 2, 16))

    def fn(q, k, v, out):
        hopattn.attention(q, k, v, causal=True, out=out)
        return out * 2

    out = torch.zeros(1, 4, 2, 16)
    got = _compiled(fn, "cpu")(q, k, v, out)
    expected, _ = hopattn.attention(q, k, v, causal=True)
    torch.testing.assert_close(got, expected * 2)
    torch.testing.assert_close(out, expected)


def _mla_inputs(device, dtype, fp8=False):
    g = torch.Generator().manual_seed(11)
    batch, heads, page, pages_each = 3, 16, 16, 5
    ckv = torch.randn(batch * pages_each, page, 512, generator=g)
    kpe = torch.randn(batch * pages_each, page, 64, generator=g)
    cache_dtype = torch.float8_e4m3fn if fp8 else dtype
    ckv, kpe = (x.to(dtype=cache_dtype, device=device) for x in (ckv, kpe))
    table = torch.randperm(batch * pages_each, generator=g).int().view(batch, pages_each)
    kv_lens = torch.tensor([70, 1, 33], dtype=torch.int32)
    cu = torch.tensor([0, 2, 3, 5], dtype=torch.int32)  # q_len 2, 1, 2
    q_nope = torch.randn(5, heads, 512, generator=g).to(device=device, dtype=dtype)
    q_pe = torch.randn(5, heads, 64, generator=g).to(device=device, dtype=dtype)
    return q_nope, q_pe, ckv, kpe, cu.to(device), kv_lens.to(device), table.to(device)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_mla(device):
    torch._dynamo.reset()
    dtype = torch.float16 if device == "cuda" else torch.float32
    args = _mla_inputs(device, dtype)

    def layer(q_nope, q_pe, ckv, kpe, cu, kv_lens, table):
        out, lse = hopattn.mla(q_nope, q_pe, ckv, kpe, cu, kv_lens, table, max_seqlen_q=2)
        return out * 2, lse

    eager = call(_On(device), layer, *args)
    compiled = _compiled(layer, device)(*args)
    for a, b in zip(compiled, eager):
        torch.testing.assert_close(a, b)


# ---------------------------------------------------------------------------- CUDA
def _graph_case(family):
    if family in ("mla", "mla_fp8_split"):
        fp8 = family == "mla_fp8_split"
        q_nope, q_pe, ckv, kpe, cu, kv_lens, table = _mla_inputs("cuda", torch.bfloat16, fp8)
        # Forced splits: the call needs a workspace, which a captured graph allocates itself.
        kw = dict(max_seqlen_q=2, kv_scale=0.5, num_splits=3) if fp8 else dict(max_seqlen_q=2)
        return q_nope, lambda: hopattn.mla(q_nope, q_pe, ckv, kpe, cu, kv_lens, table, **kw)
    if family == "attention":
        q, k, v = _qkv((2, 33, 4, 128), (2, 70, 2, 128), dtype=torch.float16, device="cuda")
        return q, lambda: hopattn.attention(q, k, v, causal=True)
    q, k, v, kv_lens, table = _decode_inputs("cuda", torch.float16, d=128)
    return q, lambda: hopattn.decode(q, k, v, kv_lens, table)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("family", ["attention", "decode", "mla", "mla_fp8_split"])
def test_cuda_graph_capture_and_replay(family):
    """Captured once, replayed on new inputs: the outputs come from the graph's memory pool and
    the call allocates and synchronizes nothing (either would break capture)."""
    q, run = _graph_case(family)
    call(_On("cuda"), run)  # warm-up outside capture (and xfail where no kernel exists yet)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = run()
    q.mul_(0.5)
    graph.replay()
    expected = run()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, expected[0])
    torch.testing.assert_close(lse, expected[1])


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("num_splits", [None, 3])
def test_decode_workspace_cache_per_stream_and_not_in_graphs(num_splits):
    """Eager decodes reuse a workspace per (device, stream), a second stream gets its own, a
    captured graph allocates its own (it must never hold memory the cache may free or reuse), and
    release_workspaces frees them. num_splits=3 forces a call that needs a workspace (None: the
    library's choice, which may need none)."""
    from hopattn._torch.decode import WORKSPACES

    def pointers():
        return {
            key: None if w.buffer is None else w.buffer.data_ptr()
            for key, w in WORKSPACES.entries().items()
        }

    q, k, v, kv_lens, table = _decode_inputs("cuda", torch.float16, d=128)
    run = lambda: hopattn.decode(q, k, v, kv_lens, table, num_splits=num_splits)  # noqa: E731
    hopattn.torch.release_workspaces()
    want = call(_On("cuda"), run)
    first = pointers()
    assert len(first) == 1
    if num_splits is not None:
        assert None not in first.values()
    again = run()
    assert pointers() == first
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        other = run()
    stream.synchronize()
    assert len(WORKSPACES) == 2
    before = pointers()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = run()
    graph.replay()
    torch.cuda.synchronize()
    assert pointers() == before
    for got in (again, other, captured):
        torch.testing.assert_close(got[0], want[0])
        torch.testing.assert_close(got[1], want[1])
    freed = hopattn.torch.release_workspaces()
    assert len(WORKSPACES) == 0
    if num_splits is not None:
        assert freed > 0
    graph.replay()  # the graph's own workspace is unaffected
    torch.cuda.synchronize()
    torch.testing.assert_close(captured[0], want[0])


@gpu
@pytest.mark.gpu
def test_runs_on_current_stream():
    q, k, v = _qkv((2, 64, 4, 128), (2, 128, 2, 128), dtype=torch.float16, device="cuda")
    expected = call(_On("cuda"), hopattn.attention, q, k, v, causal=True)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        got = hopattn.attention(q, k, v, causal=True)
    stream.synchronize()
    torch.testing.assert_close(got[0], expected[0])


@two_gpus
@pytest.mark.gpu
def test_second_device():
    q, k, v = _qkv((1, 16, 4, 128), (1, 32, 2, 128), dtype=torch.float16, device="cuda:1")
    with torch.cuda.device(0):
        out, lse = call(_On("cuda"), hopattn.attention, q, k, v)
    assert out.device == q.device and lse.device == q.device
    ref, _ = hopattn.attention(q.cpu().float(), k.cpu().float(), v.cpu().float())
    torch.testing.assert_close(out.cpu().float(), ref, atol=4e-3, rtol=4e-3)


@gpu
@pytest.mark.gpu
def test_cuda_against_cpu_reference_decode_fp8():
    q, k, v, kv_lens, table = _decode_inputs("cuda", torch.bfloat16, d=128)
    k8, v8 = k.to(torch.float8_e4m3fn), v.to(torch.float8_e4m3fn)
    out, lse = call(
        _On("cuda"), hopattn.decode, q, k8, v8, kv_lens, table, k_scale=0.5, v_scale=2.0
    )
    ref, ref_lse = hopattn.decode(
        q.cpu(), k8.cpu(), v8.cpu(), kv_lens.cpu(), table.cpu(), k_scale=0.5, v_scale=2.0
    )
    err = (out.cpu().float() - ref.float()).norm() / ref.float().norm()
    assert err <= 2e-2
    torch.testing.assert_close(lse.cpu(), ref_lse, atol=1e-3, rtol=1e-3)
