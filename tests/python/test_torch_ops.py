"""hopattn._torch's structure: every op derived from its family's one schema, the three call
routes (plain eager, eager with autograd, the dispatcher) agreeing with each other, and the
per-stream workspaces' lifetimes (their CUDA behaviour is in test_torch.py)."""

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

import hopattn  # noqa: E402
import hopattn.torch  # noqa: E402, F401
from hopattn._torch import _compat, ops  # noqa: E402
from hopattn._torch.attention import BWD, FWD  # noqa: E402
from hopattn._torch.decode import DECODE  # noqa: E402
from hopattn._torch.merge import MERGE, MERGE_N  # noqa: E402
from hopattn._torch.mla import MLA  # noqa: E402
from hopattn._torch.workspace import Workspace, WorkspaceCache  # noqa: E402

FAMILIES = {f.name: f for f in (FWD, BWD, DECODE, MLA, MERGE, MERGE_N)}


def _qkv(requires_grad=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 5, 4, 16, generator=g)
    k, v = torch.randn(1, 7, 2, 16, generator=g), torch.randn(1, 7, 2, 16, generator=g)
    return tuple(t.requires_grad_(requires_grad) for t in (q, k, v))


def _decode_inputs():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(3, 1, 4, 16, generator=g)
    k, v = torch.randn(8, 16, 2, 16, generator=g), torch.randn(8, 16, 2, 16, generator=g)
    kv_lens = torch.tensor([9, 1, 20], dtype=torch.int32)
    table = torch.tensor([[3, 5], [0, 0], [7, 2]], dtype=torch.int32)
    return q, k, v, kv_lens, table


def _through_dispatcher(monkeypatch):
    """Every call through the dispatcher (what the shim's fallback does): no fast path either."""
    monkeypatch.setattr(_compat, "plain_context", lambda: False)
    monkeypatch.setattr(hopattn, "_FAST", {})


@pytest.fixture
def dispatcher_only(monkeypatch):
    _through_dispatcher(monkeypatch)


# ---------------------------------------------------------------------------- one schema
@pytest.mark.parametrize("name", FAMILIES)
def test_op_and_out_variant_come_from_one_schema(name):
    family = FAMILIES[name]
    op = getattr(torch.ops.hopattn, name).default._schema
    out = getattr(torch.ops.hopattn, f"{name}_out").default._schema
    assert [a.name for a in op.arguments] == list(family.names)
    assert len(op.returns) == len(family.outputs)
    assert [a.name for a in out.arguments] == [*family.names, *family.outputs]
    assert [str(a.type) for a in out.arguments[: len(family.names)]] == [
        str(a.type) for a in op.arguments
    ]
    assert len(out.returns) == 0
    mutated = [a.name for a in out.arguments if a.alias_info is not None and a.alias_info.is_write]
    assert mutated == list(family.outputs)


def test_ops_take_the_flat_defaults():
    q, k, v = _qkv()
    direct = torch.ops.hopattn.attention_fwd(q, k, v, causal=True)
    for got, want in zip(direct, hopattn.attention(q, k, v, causal=True)):
        torch.testing.assert_close(got, want)


def test_backward_and_forward_share_their_options():
    assert BWD.names[6:] == FWD.names[3:]
    assert BWD.args[6:] == FWD.args[3:]


OPCHECKS = ("test_schema", "test_faketensor")


def test_opcheck_mla_bwd_and_out_variants():
    g = torch.Generator().manual_seed(2)
    mla_args = MLA.flat(
        (
            torch.randn(3, 2, 512, generator=g),
            torch.randn(3, 2, 64, generator=g),
            torch.randn(4, 8, 512, generator=g),
            torch.randn(4, 8, 64, generator=g),
            torch.tensor([0, 2, 3], dtype=torch.int32),
            torch.tensor([9, 20], dtype=torch.int32),
        ),
        dict(
            page_table=torch.tensor([[0, 1, 0], [2, 3, 1]], dtype=torch.int32),
            page_indptr=None,
            page_indices=None,
            max_seqlen_q=2,
            causal=True,
            scale=None,
            kv_scale=1.0,
            num_splits=0,
            schedule="auto",
        ),
    )
    torch.library.opcheck(torch.ops.hopattn.mla.default, mla_args, test_utils=OPCHECKS)
    q, k, v = _qkv()
    a = hopattn._attention_flat(
        True, (-1, -1), 0.0, None, None, None, None, None, None, None, None, "NHD", False
    )
    out, lse = hopattn.attention(q, k, v, causal=True)
    bwd_args = BWD.flat((torch.randn_like(out), q, k, v, out, lse), a)
    torch.library.opcheck(torch.ops.hopattn.attention_bwd.default, bwd_args, test_utils=OPCHECKS)
    o, lse = torch.randn(4, 3, 2, 8), torch.randn(4, 3, 2)
    outs = (torch.empty(4, 2, 8), torch.empty(4, 2))
    torch.library.opcheck(
        torch.ops.hopattn.merge_states_n_out.default, (o, lse, *outs), test_utils=OPCHECKS
    )


# ---------------------------------------------------------------------------- routes
def test_routes():
    q, k, v = _qkv()
    args = FWD.flat((q, k, v), hopattn._attention_flat(*_FLAT_DEFAULTS))
    assert FWD.route(args) == ops.PLAIN
    with torch.no_grad():
        assert (
            FWD.route(FWD.flat(_qkv(True), hopattn._attention_flat(*_FLAT_DEFAULTS))) == ops.PLAIN
        )
    assert FWD.route(FWD.flat(_qkv(True), hopattn._attention_flat(*_FLAT_DEFAULTS))) == ops.GRAD
    sinks = torch.nn.Parameter(torch.zeros(4))  # a Parameter is a plain tensor to dispatch
    a = hopattn._attention_flat(*_FLAT_DEFAULTS)
    a["sinks"] = sinks
    assert FWD.route(FWD.flat((q, k, v), a)) == ops.GRAD

    class Sub(torch.Tensor):
        pass

    assert FWD.route((q.as_subclass(Sub), *args[1:])) == ops.OP
    assert FWD.route((q.to("meta"), *args[1:])) == ops.OP
    from torch.utils._python_dispatch import TorchDispatchMode

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Mode():
        assert FWD.route(args) == ops.OP


_FLAT_DEFAULTS = (True, (-1, -1), 0.0, None, None, None, None, None, None, None, None, "NHD", False)


def _grads(requires_sinks_grad=True):
    q, k, v = _qkv(True, seed=4)
    sinks = torch.nn.Parameter(torch.randn(4, generator=_g())).requires_grad_(requires_sinks_grad)
    out, lse = hopattn.attention(q, k, v, causal=True, softcap=3.0, sinks=sinks)
    assert out.requires_grad and not lse.requires_grad
    out.backward(torch.ones_like(out))
    return out.detach(), lse, q.grad, k.grad, v.grad, sinks.grad


@pytest.mark.parametrize("sinks_grad", [True, False])
def test_eager_autograd_equals_the_registered_formula(monkeypatch, sinks_grad):
    eager = _grads(sinks_grad)
    _through_dispatcher(monkeypatch)
    registered = _grads(sinks_grad)
    for a, b in zip(eager, registered):
        if a is None or b is None:
            assert a is b
        else:
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert (eager[-1] is None) == (not sinks_grad)


def test_eager_autograd_records_its_own_node():
    q, k, v = _qkv(True)
    out, _ = hopattn.attention(q, k, v)
    # The fast path's C++ node, or the generic path's torch.autograd.Function: not the op's.
    assert "attention_fwd" in out.grad_fn.name()


def _g():
    return torch.Generator().manual_seed(3)


def test_routes_give_identical_results(monkeypatch):
    q, k, v, kv_lens, table = _decode_inputs()
    o, lse = torch.randn(4, 3, 2, 8, generator=_g()), torch.randn(4, 3, 2, generator=_g())

    def calls():
        return [
            *hopattn.decode(q, k, v, kv_lens, table, window=(8, -1)),
            *hopattn.merge_states_n(o, lse),
            *hopattn.merge_states(o[:, 0], lse[:, 0], o[:, 1], lse[:, 1]),
            *hopattn.attention(*_qkv(), causal=True),
        ]

    plain = calls()
    _through_dispatcher(monkeypatch)
    for a, b in zip(plain, calls()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("route", ["plain", "dispatcher"])
def test_out_buffers_bump_version_counters(request, route):
    if route == "dispatcher":
        request.getfixturevalue("dispatcher_only")
    q, k, v, kv_lens, table = _decode_inputs()
    out, lse = torch.empty(3, 1, 4, 16), torch.empty(3, 1, 4)
    before = out._version, lse._version
    got = hopattn.decode(q, k, v, kv_lens, table, out=out, lse_out=lse)
    assert got[0] is out and got[1] is lse
    assert out._version > before[0] and lse._version > before[1]
    want = hopattn.decode(q, k, v, kv_lens, table)
    torch.testing.assert_close(out, want[0])


@pytest.mark.parametrize("route", ["plain", "dispatcher"])
def test_out_buffers_refuse_autograd_in_every_family(request, route):
    if route == "dispatcher":
        request.getfixturevalue("dispatcher_only")
    q, k, v, kv_lens, table = _decode_inputs()
    q.requires_grad_()
    with pytest.raises(RuntimeError, match="hopattn.decode: out= buffers"):
        hopattn.decode(q, k, v, kv_lens, table, out=torch.empty(3, 1, 4, 16))
    with torch.no_grad():
        hopattn.decode(q, k, v, kv_lens, table, out=torch.empty(3, 1, 4, 16))


# ---------------------------------------------------------------------------- workspaces
def test_workspace_grows_zeroed_and_releases():
    ws = Workspace(torch.device("cpu"), zeroed=True)
    assert ws.nbytes == 0
    first = ws.reserve(10)
    assert first.dtype == torch.uint8 and first.numel() == 10 and not first.any()
    first.fill_(7)  # a workspace is reused as the last call left it (decode leaves it zeroed)
    assert ws.reserve(4) is first
    grown = ws.reserve(11)
    assert grown.numel() == 20 and not grown.any()  # twice the old size, zeroed afresh
    assert ws.reserve(50).numel() == 50
    ws.release()
    assert ws.nbytes == 0 and ws.buffer is None
    assert Workspace(torch.device("cpu"), zeroed=False).reserve(8).numel() == 8


def test_workspace_cache_never_serves_cpu_calls():
    cache = WorkspaceCache("decode", zeroed=True)
    q = torch.zeros(1)
    assert cache.get(q, 0) is None
    given = []

    def call(workspace):  # the C++ protocol: bytes needed, or 0 when it ran
        given.append(workspace)
        return 0 if workspace is not None and workspace.numel() >= 16 else 16

    cache.run(call, q, 0)
    assert given[0] is None and given[1].numel() == 16 and not given[1].any()
    assert len(cache) == 0 and cache.nbytes() == 0
    with pytest.raises(RuntimeError, match="hopattn.decode: the workspace size did not settle"):
        cache.run(lambda workspace: 16, q, 0)


def test_release_workspaces_without_cuda_calls():
    hopattn.torch.release_workspaces()  # what earlier CUDA tests of this process left
    assert hopattn.torch.release_workspaces() == 0


def test_compile_out_variants_and_backward_function():
    """torch.compile(fullgraph=True) through the out= route and attention_backward (the op route
    under Dynamo: nothing of the eager fast path may be traced)."""
    torch._dynamo.reset()
    q, k, v, kv_lens, table = _decode_inputs()
    fq, fk, fv = _qkv()

    def fn(q, k, v, kv_lens, table, out, lse, fq, fk, fv):
        hopattn.decode(q, k, v, kv_lens, table, out=out, lse_out=lse)
        o, o_lse = hopattn.attention(fq, fk, fv, causal=True)
        grads = hopattn.attention_backward(torch.ones_like(o), fq, fk, fv, o, o_lse, causal=True)
        return out * 2, grads[0], grads[3]

    buffers = (torch.zeros(3, 1, 4, 16), torch.zeros(3, 1, 4))
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    got = compiled(q, k, v, kv_lens, table, *buffers, fq, fk, fv)
    want = fn(q, k, v, kv_lens, table, torch.zeros(3, 1, 4, 16), torch.zeros(3, 1, 4), fq, fk, fv)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])
    assert got[2] is None and want[2] is None
    torch.testing.assert_close(buffers[0], want[0] / 2)
