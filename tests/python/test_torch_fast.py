"""hopattn._torch.fast: the optional C++ eager path (hopattn._torch_C). Where it is built, each
family's fast path gives bit-identical results to the generic path (the torch.library ops), raises
the same errors, hands every call it does not take to the generic path, and records the same
autograd; where it is not built (or hopattn.torch.set_fast_path(False)), the generic path serves alone."""

import pathlib

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

import hopattn  # noqa: E402
import hopattn.torch  # noqa: E402, F401
from hopattn._torch import _compat, fast  # noqa: E402

EXT = fast.EXT
needs_ext = pytest.mark.skipif(EXT is None, reason=f"no fast path: {fast.REASON}")


def _built():
    return any(pathlib.Path(hopattn.__file__).parent.glob("_torch_C*"))


def test_extension_loads_where_built():
    assert (EXT is not None) == _built(), fast.REASON
    assert (torch.Tensor in hopattn._FAST) == (EXT is not None)


def test_set_fast_path_turns_it_off_and_on():
    try:
        assert hopattn.torch.set_fast_path(False) is False
        assert not hopattn._FAST
        q = torch.randn(1, 3, 2, 8)
        out, lse = hopattn.attention(q, q, q, causal=True)
        assert out.shape == q.shape and lse.shape == q.shape[:-1]
    finally:
        assert hopattn.torch.set_fast_path(True) == (EXT is not None)


@pytest.fixture
def generic(monkeypatch):
    """A function running a call through the generic path (no fast path)."""

    def run(fn, *args, **kwargs):
        with monkeypatch.context() as m:
            m.setattr(hopattn, "_FAST", {})
            return fn(*args, **kwargs)

    return run


def _g(seed=0):
    return torch.Generator().manual_seed(seed)


def _attention_cases():
    g = _g(1)
    q, k, v = (torch.randn(2, 5, 4, 16, generator=g) for _ in range(3))
    k, v = k[:, :, :2], v[:, :, :2]
    sinks = torch.randn(4, generator=g)
    qv, kv = torch.randn(9, 4, 16, generator=g), torch.randn(11, 2, 16, generator=g)
    cu_q = torch.tensor([0, 4, 9], dtype=torch.int32)
    cu_k = torch.tensor([0, 5, 11], dtype=torch.int32)
    pages = torch.randn(6, 4, 2, 16, generator=g)
    table = torch.tensor([[2, 0, 5], [1, 3, 4]], dtype=torch.int32)
    lens = torch.tensor([9, 12], dtype=torch.int32)
    indptr = torch.tensor([0, 3, 6], dtype=torch.int32)
    indices = table.flatten()
    return {
        "dense": ((q, k, v), dict(causal=True)),
        "options": (
            (q.bfloat16(), k.bfloat16(), v.bfloat16()),
            dict(window=(3, 0), softcap=2.0, scale=0.3, sinks=sinks),
        ),
        "varlen": ((qv, kv, kv), dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=5)),
        "paged": ((qv, pages, pages), dict(cu_seqlens_q=cu_q, page_table=table, kv_lens=lens)),
        "paged csr": (
            (qv, pages, pages),
            dict(cu_seqlens_q=cu_q, page_table=(indptr, indices), kv_lens=lens, causal=True),
        ),
    }


@needs_ext
@pytest.mark.parametrize("case", list(_attention_cases()))
def test_attention_matches_the_generic_path(generic, case):
    tensors, kw = _attention_cases()[case]
    got = hopattn.attention(*tensors, **kw)
    expected = generic(hopattn.attention, *tensors, **kw)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert got[0].dtype == tensors[0].dtype and got[1].dtype == torch.float32


@needs_ext
def test_attention_out_buffers(generic):
    (q, k, v), kw = _attention_cases()["dense"]
    out, lse = torch.empty_like(q), torch.empty(q.shape[:-1])
    versions = out._version, lse._version
    got = hopattn.attention(q, k, v, out=out, lse_out=lse, **kw)
    assert got[0] is out and got[1] is lse
    assert out._version > versions[0] and lse._version > versions[1]
    expected = generic(hopattn.attention, q, k, v, **kw)
    torch.testing.assert_close(out, expected[0], rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="do not support automatic differentiation"):
        hopattn.attention(q.requires_grad_(), k, v, out=out)


def _decode_inputs():
    g = _g(2)
    q = torch.randn(3, 2, 4, 16, generator=g)
    k, v = torch.randn(8, 16, 2, 16, generator=g), torch.randn(8, 16, 2, 16, generator=g)
    kv_lens = torch.tensor([9, 2, 20], dtype=torch.int32)
    table = torch.tensor([[3, 5], [0, 0], [7, 2]], dtype=torch.int32)
    return q, k, v, kv_lens, table


@needs_ext
@pytest.mark.parametrize(
    "kw",
    [
        {},
        dict(window=(6, -1), softcap=5.0, scale=0.2, causal=False),
        dict(k_scale=0.5, v_scale=2.0, num_splits=2),
        dict(tree_mask=torch.tensor([[[True, False], [True, True]]] * 3)),
    ],
    ids=["defaults", "options", "scales", "tree"],
)
def test_decode_matches_the_generic_path(generic, kw):
    q, k, v, kv_lens, table = _decode_inputs()
    got = hopattn.decode(q, k, v, kv_lens, table, **kw)
    expected = generic(hopattn.decode, q, k, v, kv_lens, table, **kw)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    out, lse = torch.empty_like(got[0]), torch.empty_like(got[1])
    version = out._version
    r = hopattn.decode(q, k, v, kv_lens, table, out=out, lse_out=lse, **kw)
    assert r[0] is out and r[1] is lse and out._version > version
    torch.testing.assert_close(out, expected[0], rtol=0, atol=0)


@needs_ext
def test_mla_and_merge_match_the_generic_path(generic):
    g = _g(3)
    q_nope, q_pe = torch.randn(3, 2, 512, generator=g), torch.randn(3, 2, 64, generator=g)
    ckv, kpe = torch.randn(4, 8, 512, generator=g), torch.randn(4, 8, 64, generator=g)
    cu = torch.tensor([0, 1, 3], dtype=torch.int32)
    lens = torch.tensor([5, 12], dtype=torch.int32)
    table = torch.tensor([[1, 0], [3, 2]], dtype=torch.int32)
    args = (q_nope, q_pe, ckv, kpe, cu, lens, table)
    o, lse = torch.randn(4, 3, 2, 8, generator=g), torch.randn(4, 3, 2, generator=g)
    calls = [
        (hopattn.mla, args, {}),
        (hopattn.mla, args, dict(causal=False, scale=0.1, max_seqlen_q=2)),
        (hopattn.mla, args, dict(schedule="seesaw", num_splits=2)),
        (hopattn.merge_states, (o[:, 0], lse[:, 0], o[:, 1], lse[:, 1]), {}),
        (hopattn.merge_states_n, (o, lse), {}),
    ]
    for fn, a, kw in calls:
        for x, y in zip(fn(*a, **kw), generic(fn, *a, **kw)):
            torch.testing.assert_close(x, y, rtol=0, atol=0)
    # The fast path itself takes every schedule name (not only a fallback to the generic path).
    fast = hopattn._FAST[type(q_nope)]
    for schedule in ("auto", "seesaw", "one-consumer"):
        r = fast.mla(*args, True, None, None, None, None, schedule, None, None)
        assert r is not NotImplemented, schedule


@needs_ext
def test_autograd_matches_the_generic_path(generic):
    def grads(call):
        (q, k, v), _ = _attention_cases()["dense"]
        q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
        sinks = torch.nn.Parameter(torch.randn(4, generator=_g(5)))
        out, lse = call(hopattn.attention, q, k, v, causal=True, softcap=3.0, sinks=sinks)
        assert out.requires_grad and not lse.requires_grad
        (out * torch.arange(out.numel()).view(out.shape).sin()).sum().backward()
        return out.detach(), lse, q.grad, k.grad, v.grad, sinks.grad

    fast_grads = grads(lambda fn, *a, **kw: fn(*a, **kw))
    generic_grads = grads(generic)
    for a, b in zip(fast_grads, generic_grads):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@needs_ext
@pytest.mark.filterwarnings("ignore:Input #:UserWarning")  # float32: hopattn has no float64
def test_gradcheck_through_the_fast_path():
    g = _g(6)
    q = torch.randn(1, 3, 2, 8, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 4, 1, 8, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 4, 1, 8, generator=g, dtype=torch.float64, requires_grad=True)
    # float64 is not one of hopattn's dtypes: the fast path declines, the generic path raises.
    with pytest.raises(TypeError):
        hopattn.attention(q, k, v)
    q, k, v = (t.detach().float().requires_grad_() for t in (q, k, v))
    out, _ = hopattn.attention(q, k, v, causal=True)
    assert "attention_fwd" in out.grad_fn.name()
    torch.autograd.gradcheck(
        lambda *t: hopattn.attention(*t, causal=True)[0], (q, k, v), eps=1e-3, atol=1e-2, rtol=1e-2
    )


@needs_ext
@pytest.mark.parametrize(
    "kw, error",
    [
        (dict(causal="yes"), TypeError),
        (dict(window=(1, 2, 3)), TypeError),
        (dict(window=(-2, 0)), ValueError),
        (dict(kv_layout="NDH"), ValueError),
        (dict(max_seqlen_q=-1), ValueError),
        (dict(scale="0.5"), TypeError),
        (dict(cu_seqlens_q=torch.tensor([0, 5], dtype=torch.int64)), TypeError),
    ],
)
def test_errors_are_the_generic_paths(generic, kw, error):
    (q, k, v), _ = _attention_cases()["dense"]
    with pytest.raises(error) as fast_error:
        hopattn.attention(q, k, v, **kw)
    with pytest.raises(error) as generic_error:
        generic(hopattn.attention, q, k, v, **kw)
    assert str(fast_error.value) == str(generic_error.value)


@needs_ext
def test_validator_errors_are_raised_alike(generic):
    (q, k, v), _ = _attention_cases()["dense"]
    bad = [
        (hopattn.attention, (q, k[..., :8], v), ValueError),  # head dims differ
        (hopattn.attention, (q, k.bfloat16(), v), TypeError),  # dtypes differ
        (hopattn.decode, (*_decode_inputs()[:3], _decode_inputs()[3][:2], _decode_inputs()[4]),
         ValueError),
    ]  # fmt: skip
    for fn, args, error in bad:
        with pytest.raises(error) as fast_error:
            fn(*args)
        with pytest.raises(error) as generic_error:
            generic(fn, *args)
        assert str(fast_error.value) == str(generic_error.value)


@needs_ext
def test_declines_what_it_does_not_take():
    (q, k, v), _ = _attention_cases()["dense"]
    flat = (q, k, v, True, (-1, -1), 0.0, None, None, None, None, None, None, False, None, None,
            "NHD", None, None)  # fmt: skip
    assert isinstance(EXT.attention(*flat), tuple)
    nope = NotImplemented

    class Sub(torch.Tensor):
        pass

    assert EXT.attention(q.as_subclass(Sub), *flat[1:]) is nope
    assert EXT.attention(*flat[:3], 1, *flat[4:]) is nope  # causal not a bool: generic checks
    assert EXT.attention(*flat[:4], [-1, -1], *flat[5:]) is nope
    assert EXT.attention(*flat[:5], 0, *flat[6:]) is nope  # softcap an int
    assert EXT.attention(q.to("meta"), *flat[1:]) is nope
    assert EXT.attention(*flat[:-1]) is nope  # wrong arity
    from torch.utils._python_dispatch import TorchDispatchMode

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Mode():
        assert EXT.attention(*flat) is nope
    with torch.overrides.TorchFunctionMode():
        assert EXT.attention(*flat) is nope
    import torch.autograd.forward_ad as fwad

    with fwad.dual_level():
        assert EXT.attention(*flat) is nope
    seen = []

    def batched(x):
        seen.append(EXT.attention(x, *flat[1:]))
        return x

    torch.func.vmap(batched)(q[None])
    assert seen == [nope]
    # The generic path serves them all (here: the list window and the int softcap).
    out, _ = hopattn.attention(q, k, v, window=[-1, -1], softcap=0)
    torch.testing.assert_close(out, hopattn.attention(q, k, v)[0], rtol=0, atol=0)


def _batch_step(kv_dtype=None):
    """A planned CPU step (a decode, an idle slot, a 32-token chunk) and run()'s arguments."""
    g = _g(5)
    ba = hopattn.BatchAttention(8, 2, 64, 16, device="cpu", window=(40, -1), softcap=3.0)
    cu = torch.tensor([0, 1, 1, 33], dtype=torch.int32)
    kv = torch.tensor([70, 0, 96], dtype=torch.int32)
    ba.plan(cu, kv)
    k, v = (torch.randn(18, 16, 2, 64, generator=g) for _ in range(2))
    if kv_dtype is not None:
        k, v = k.to(kv_dtype), v.to(kv_dtype)
    else:
        k, v = k.bfloat16(), v.bfloat16()
    table = torch.randperm(18, generator=g).int().reshape(3, 6)
    q = torch.randn(33, 8, 64, generator=g).bfloat16()
    return ba, (q, k, v, cu, kv, table)


@needs_ext
@pytest.mark.parametrize(
    "kw",
    [
        {},
        dict(sinks=torch.linspace(-1, 1, 8)),
        dict(k_scale=0.5, v_scale=torch.tensor([0.25, 2.0])),
    ],
    ids=["plain", "sinks", "fp8 scales"],
)
def test_batch_run_matches_the_generic_path(generic, kw):
    ba, args = _batch_step(torch.float8_e4m3fn if "k_scale" in kw else None)
    calls = []
    real = EXT.batch_run

    def counted(*a):
        calls.append(1)
        return real(*a)

    fast_ext = hopattn._FAST[torch.Tensor]
    try:
        hopattn._FAST[torch.Tensor] = type("Counted", (), {"batch_run": staticmethod(counted)})
        got = ba.run(*args, **kw)
    finally:
        hopattn._FAST[torch.Tensor] = fast_ext
    assert calls, "the fast path was not taken"
    expected = generic(ba.run, *args, **kw)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    out, lse = torch.empty_like(got[0]), torch.empty_like(got[1])
    version = out._version
    r = ba.run(*args, out=out, lse_out=lse, **kw)
    assert r[0] is out and r[1] is lse and out._version > version
    torch.testing.assert_close(out, expected[0], rtol=0, atol=0)


@needs_ext
def test_batch_run_errors_and_declines(generic):
    ba, (q, k, v, cu, kv, table) = _batch_step()
    for bad in ((q[:, :4], k, v, cu, kv, table), (q, k, v, cu, kv.long(), table)):
        with pytest.raises(Exception) as fast_error:
            ba.run(*bad)
        with pytest.raises(Exception) as generic_error:
            generic(ba.run, *bad)
        assert type(fast_error.value) is type(generic_error.value)
        assert str(fast_error.value) == str(generic_error.value)
    flat = (ba._c, ba._held, q, k, v, cu, kv, table, None, None, None, None, None)
    assert isinstance(EXT.batch_run(*flat), tuple)
    nope = NotImplemented
    assert EXT.batch_run(object(), *flat[1:]) is nope  # not a _C.BatchAttention
    assert EXT.batch_run(ba._c, object(), *flat[2:]) is nope  # not a _C.Workspace
    assert EXT.batch_run(*flat[:9], 1, *flat[10:]) is nope  # k_scale an int: generic converts
    assert EXT.batch_run(*flat[:2], q.to("meta"), *flat[3:]) is nope
    assert EXT.batch_run(*flat[:-1]) is nope  # wrong arity
    # The generic path serves the int scale.
    torch.testing.assert_close(ba.run(q, k, v, cu, kv, table, k_scale=1)[0],
                               ba.run(q, k, v, cu, kv, table)[0], rtol=0, atol=0)  # fmt: skip


@needs_ext
def test_compile_traces_the_generic_path():
    (q, k, v), _ = _attention_cases()["dense"]
    seen = []

    def backend(gm, example_inputs):
        seen.append([n.target for n in gm.graph.nodes if n.op == "call_function"])
        return gm

    fn = torch.compile(lambda q, k, v: hopattn.attention(q, k, v, causal=True), backend=backend,
                       fullgraph=True)  # fmt: skip
    torch.testing.assert_close(fn(q, k, v)[0], hopattn.attention(q, k, v, causal=True)[0])
    assert torch.ops.hopattn.attention_fwd.default in seen[0]
