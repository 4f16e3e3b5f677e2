"""PyTorch integration: ``torch.library`` custom ops, autograd, torch.compile and CUDA graphs.

``hopattn.attention(...)`` and friends route torch tensors here, so importing this module is
optional; it is imported lazily (``import hopattn`` never imports torch).

Ops (``torch.ops.hopattn.*``): attention_fwd, attention_bwd, decode, mla, merge_states,
merge_states_n, each with an ``*_out`` variant that writes into caller tensors. Each has a fake
(meta) implementation, so ``torch.compile(fullgraph=True)`` traces them without running them, and
attention_fwd has an autograd formula whose backward is attention_bwd (the CPU reference's
backward for CPU tensors).

CUDA tensors run on their own device and on torch's current stream of that device; outputs come
from torch's caching allocator (so under CUDA-graph capture, from the graph's pool) and the C++ call
allocates and synchronizes nothing.

Host cost of an eager call (docs/perf/decode.md): a plain eager call (no autograd to record, no
torch.compile / jit / fx tracing, no dispatch or function mode, no functorch transform, plain
tensors) calls the op's implementation directly instead of going through the dispatcher, which
would only forward it there; tensors cross to C++ as DLPack capsules made by torch's C exporter;
and an eager decode reuses a workspace cached per (device, stream) (zeroed when allocated, grown on
demand), so it makes one C++ call. Under CUDA-graph capture every call allocates its workspace from
the graph's pool as before: a captured graph never holds the cache's memory.
"""

from typing import Optional, Tuple

import torch
from torch import Tensor
from torch.utils.dlpack import to_dlpack as _to_dlpack

import hopattn
from hopattn import _C

__all__ = [
    "attention",
    "attention_backward",
    "decode",
    "mla",
    "merge_states",
    "merge_states_n",
]

# The same functions as the top level: torch tensors given to those end up here anyway.
attention = hopattn.attention
attention_backward = hopattn.attention_backward
decode = hopattn.decode
mla = hopattn.mla
merge_states = hopattn.merge_states
merge_states_n = hopattn.merge_states_n


# ---------------------------------------------------------------------------- helpers
def _stream(t):
    # The raw cudaStream_t of the current stream of t's device, without building a Stream object.
    return torch._C._cuda_getCurrentRawStream(t.get_device()) if t.is_cuda else 0


def _d(t):
    # A DLPack capsule straight from torch's C exporter (one per C++ call: a capsule is consumed
    # once). Tensor.__dlpack__ would add ~5 us of Python checks a tensor and refuse tensors that
    # require grad or live on another than the current device; the C++ call only reads and writes
    # memory, runs on the tensors' device (its device guard) and checks that they share it.
    return None if t is None else _to_dlpack(t)


_C_torch = torch._C


def _plain_eager(*args):
    """True when the op's dispatch would do nothing but call its implementation: an eager call
    (not traced by torch.compile, jit or fx, no dispatch or function mode, no functorch transform)
    on plain CPU / CUDA tensors of which none requires grad while grad mode is on."""
    if (
        torch.compiler.is_compiling()
        or _C_torch._get_tracing_state() is not None
        or _C_torch._len_torch_dispatch_stack() > 0
        or _C_torch._is_torch_function_mode_enabled()
        or _C_torch._are_functorch_transforms_active()
    ):
        return False
    grad = torch.is_grad_enabled()
    for t in args:
        if isinstance(t, Tensor) and (
            type(t) is not Tensor or (grad and t.requires_grad) or not (t.is_cuda or t.is_cpu)
        ):
            return False
    return True


# Eager decode workspaces: (device index, stream) -> uint8 tensor. One per stream, so calls in
# flight on two streams never share one (calls on one stream are ordered); allocated zeroed on that
# stream; replaced by a larger one when a call needs more (freeing the old one is stream-ordered).
_workspaces = {}


def _cached_workspace(t, stream, family="decode"):
    """(key, cached workspace or None) for a call on `stream`, or (None, None) where no cache may
    serve: CPU tensors, a device other than the current one, or CUDA-graph capture (a graph must
    own its workspace: the cache may be freed or used by later eager calls)."""
    if not t.is_cuda:
        return None, None
    device = t.get_device()
    if device != _C_torch._cuda_getDevice() or _C_torch._cuda_isCurrentStreamCapturing():
        return None, None
    key = (device, stream, family)  # families lay their workspaces out differently
    return key, _workspaces.get(key)


def _workspace_for(t, key, size):
    if key is None:  # zeroed: the decode workspace contract (options.hpp), zeroed before first use
        return torch.zeros(size, dtype=torch.uint8, device=t.device)
    old = _workspaces.get(key)
    size = max(size, 2 * old.numel()) if old is not None else size
    _workspaces[key] = torch.zeros(size, dtype=torch.uint8, device=t.device)
    return _workspaces[key]


def _pages(block_table, indptr, indices):
    if indptr is not None or indices is not None:
        return (_d(indptr), _d(indices))
    return _d(block_table)


def _empty(ref, shape, dtype=None):
    return torch.empty(tuple(shape), dtype=ref.dtype if dtype is None else dtype, device=ref.device)


def _needs_grad(*tensors):
    return torch.is_grad_enabled() and any(
        t is not None and isinstance(t, Tensor) and t.requires_grad for t in tensors
    )


def _no_out_with_grad(name, *tensors):
    if _needs_grad(*tensors):
        raise RuntimeError(
            f"hopattn.{name}: out= buffers do not support automatic differentiation; call it "
            "without out= (or under torch.no_grad())"
        )


# ---------------------------------------------------------------------------- attention fwd
# Flat option order of the attention ops (after q, k, v): the keys of hopattn._attention_flat.
_FWD_KEYS = (
    "cu_seqlens_q",
    "cu_seqlens_k",
    "max_seqlen_q",
    "max_seqlen_k",
    "page_table",
    "page_indptr",
    "page_indices",
    "kv_lens",
    "kv_layout",
    "sinks",
    "causal",
    "window_left",
    "window_right",
    "softcap",
    "scale",
    "deterministic",
)
_FWD_TENSOR_KEYS = (
    "cu_seqlens_q",
    "cu_seqlens_k",
    "page_table",
    "page_indptr",
    "page_indices",
    "kv_lens",
    "sinks",
)


def _fwd_kwargs(flat):
    a = dict(zip(_FWD_KEYS, flat))
    kw = {key: a[key] for key in _FWD_KEYS if key not in _FWD_TENSOR_KEYS}
    kw.update(
        cu_seqlens_q=_d(a["cu_seqlens_q"]),
        cu_seqlens_k=_d(a["cu_seqlens_k"]),
        kv_lens=_d(a["kv_lens"]),
        sinks=_d(a["sinks"]),
        page_table=_pages(a["page_table"], a["page_indptr"], a["page_indices"]),
    )
    return kw


def _run_fwd(q, k, v, flat, out, lse):
    _C.attention_fwd(_d(q), _d(k), _d(v), _d(out), _d(lse), **_fwd_kwargs(flat), stream=_stream(q))


def _fwd_shapes(q, v):
    return (*q.shape[:-1], v.shape[-1]), q.shape[:-1]


def _attention_fwd_impl(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Optional[Tensor],
    cu_seqlens_k: Optional[Tensor],
    max_seqlen_q: int,
    max_seqlen_k: int,
    page_table: Optional[Tensor],
    page_indptr: Optional[Tensor],
    page_indices: Optional[Tensor],
    kv_lens: Optional[Tensor],
    kv_layout: str,
    sinks: Optional[Tensor],
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    scale: Optional[float],
    deterministic: bool,
) -> Tuple[Tensor, Tensor]:
    out_shape, lse_shape = _fwd_shapes(q, v)
    out, lse = _empty(q, out_shape), _empty(q, lse_shape, torch.float32)
    _run_fwd(
        q,
        k,
        v,
        (
            cu_seqlens_q,
            cu_seqlens_k,
            max_seqlen_q,
            max_seqlen_k,
            page_table,
            page_indptr,
            page_indices,
            kv_lens,
            kv_layout,
            sinks,
            causal,
            window_left,
            window_right,
            softcap,
            scale,
            deterministic,
        ),
        out,
        lse,
    )
    return out, lse


_attention_fwd = torch.library.custom_op(
    "hopattn::attention_fwd", _attention_fwd_impl, mutates_args=()
)


@_attention_fwd.register_fake
def _(q, k, v, *flat):
    out_shape, lse_shape = _fwd_shapes(q, v)
    return q.new_empty(out_shape), q.new_empty(lse_shape, dtype=torch.float32)


@torch.library.custom_op("hopattn::attention_fwd_out", mutates_args=("out", "lse"))
def _attention_fwd_out(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Optional[Tensor],
    cu_seqlens_k: Optional[Tensor],
    max_seqlen_q: int,
    max_seqlen_k: int,
    page_table: Optional[Tensor],
    page_indptr: Optional[Tensor],
    page_indices: Optional[Tensor],
    kv_lens: Optional[Tensor],
    kv_layout: str,
    sinks: Optional[Tensor],
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    scale: Optional[float],
    deterministic: bool,
    out: Tensor,
    lse: Tensor,
) -> None:
    _run_fwd(
        q,
        k,
        v,
        (
            cu_seqlens_q,
            cu_seqlens_k,
            max_seqlen_q,
            max_seqlen_k,
            page_table,
            page_indptr,
            page_indices,
            kv_lens,
            kv_layout,
            sinks,
            causal,
            window_left,
            window_right,
            softcap,
            scale,
            deterministic,
        ),
        out,
        lse,
    )


@_attention_fwd_out.register_fake
def _(*args):
    return None


# ---------------------------------------------------------------------------- attention bwd
def _run_bwd(dout, q, k, v, out, lse, flat, dq, dk, dv, dsinks):
    def capsules():  # fresh for each C++ call
        tensors = (dout, q, k, v, out, lse, dq, dk, dv, dsinks)
        return tuple(_d(t) for t in tensors), _fwd_kwargs(flat)

    tensors, kw = capsules()
    size = _C.attention_bwd_workspace_size(*tensors, **kw)
    workspace = torch.empty(size, dtype=torch.uint8, device=q.device) if size else None
    tensors, kw = capsules()
    _C.attention_bwd(*tensors, **kw, workspace=_d(workspace), stream=_stream(q))


@torch.library.custom_op("hopattn::attention_bwd", mutates_args=())
def _attention_bwd(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    cu_seqlens_q: Optional[Tensor],
    cu_seqlens_k: Optional[Tensor],
    max_seqlen_q: int,
    max_seqlen_k: int,
    page_table: Optional[Tensor],
    page_indptr: Optional[Tensor],
    page_indices: Optional[Tensor],
    kv_lens: Optional[Tensor],
    kv_layout: str,
    sinks: Optional[Tensor],
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    scale: Optional[float],
    deterministic: bool,
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    # dsinks is an empty tensor when there are no sinks (ops cannot return None).
    dq, dk, dv = _empty(q, q.shape), _empty(k, k.shape), _empty(v, v.shape)
    dsinks = _empty(q, sinks.shape if sinks is not None else (0,), torch.float32)
    _run_bwd(
        dout,
        q,
        k,
        v,
        out,
        lse,
        (
            cu_seqlens_q,
            cu_seqlens_k,
            max_seqlen_q,
            max_seqlen_k,
            page_table,
            page_indptr,
            page_indices,
            kv_lens,
            kv_layout,
            sinks,
            causal,
            window_left,
            window_right,
            softcap,
            scale,
            deterministic,
        ),
        dq,
        dk,
        dv,
        dsinks if sinks is not None else None,
    )
    return dq, dk, dv, dsinks


@_attention_bwd.register_fake
def _(dout, q, k, v, out, lse, *flat):
    sinks = dict(zip(_FWD_KEYS, flat))["sinks"]
    return (
        q.new_empty(q.shape),
        k.new_empty(k.shape),
        v.new_empty(v.shape),
        q.new_empty(sinks.shape if sinks is not None else (0,), dtype=torch.float32),
    )


@torch.library.custom_op("hopattn::attention_bwd_out", mutates_args=("dq", "dk", "dv", "dsinks"))
def _attention_bwd_out(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    cu_seqlens_q: Optional[Tensor],
    cu_seqlens_k: Optional[Tensor],
    max_seqlen_q: int,
    max_seqlen_k: int,
    page_table: Optional[Tensor],
    page_indptr: Optional[Tensor],
    page_indices: Optional[Tensor],
    kv_lens: Optional[Tensor],
    kv_layout: str,
    sinks: Optional[Tensor],
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    scale: Optional[float],
    deterministic: bool,
    dq: Tensor,
    dk: Tensor,
    dv: Tensor,
    dsinks: Optional[Tensor],
) -> None:
    _run_bwd(
        dout,
        q,
        k,
        v,
        out,
        lse,
        (
            cu_seqlens_q,
            cu_seqlens_k,
            max_seqlen_q,
            max_seqlen_k,
            page_table,
            page_indptr,
            page_indices,
            kv_lens,
            kv_layout,
            sinks,
            causal,
            window_left,
            window_right,
            softcap,
            scale,
            deterministic,
        ),
        dq,
        dk,
        dv,
        dsinks,
    )


@_attention_bwd_out.register_fake
def _(*args):
    return None


# ---------------------------------------------------------------------------- autograd
_SINKS_INPUT = 3 + _FWD_KEYS.index("sinks")  # position of sinks among attention_fwd's inputs


def _fwd_setup_context(ctx, inputs, output):
    q, k, v, *flat = inputs
    out, lse = output
    a = dict(zip(_FWD_KEYS, flat))
    ctx.save_for_backward(q, k, v, out, lse, *(a[key] for key in _FWD_TENSOR_KEYS))
    ctx.options = {key: a[key] for key in _FWD_KEYS if key not in _FWD_TENSOR_KEYS}
    # The bwd family has no lse gradient input: lse is returned without gradient rather than
    # with a silently wrong one.
    ctx.mark_non_differentiable(lse)


def _fwd_backward(ctx, dout, _dlse):
    q, k, v, out, lse, *saved = ctx.saved_tensors
    a = dict(zip(_FWD_TENSOR_KEYS, saved), **ctx.options)
    dq, dk, dv, dsinks = torch.ops.hopattn.attention_bwd(
        dout.contiguous(), q, k, v, out, lse, *(a[key] for key in _FWD_KEYS)
    )
    grads = [None] * (3 + len(_FWD_KEYS))
    grads[0], grads[1], grads[2] = dq, dk, dv
    if a["sinks"] is not None and ctx.needs_input_grad[_SINKS_INPUT]:
        grads[_SINKS_INPUT] = dsinks.to(a["sinks"].dtype)
    return tuple(grads)


torch.library.register_autograd(
    "hopattn::attention_fwd", _fwd_backward, setup_context=_fwd_setup_context
)


# ---------------------------------------------------------------------------- decode
_DECODE_KEYS = (
    "page_table",
    "page_indptr",
    "page_indices",
    "kv_layout",
    "causal",
    "window_left",
    "window_right",
    "softcap",
    "scale",
    "sinks",
    "k_scale",
    "k_scale_per_head",
    "v_scale",
    "v_scale_per_head",
    "tree_mask",
    "beam_width",
    "shared_kv_lens",
    "num_splits",
)


_DECODE_TENSOR_KEYS = (
    "sinks",
    "k_scale_per_head",
    "v_scale_per_head",
    "tree_mask",
    "shared_kv_lens",
)


def _run_decode(q, k_cache, v_cache, kv_lens, flat, out, lse):
    stream = _stream(q)

    def call(workspace):  # 0 when it ran, else the workspace bytes it needs (nothing ran)
        a = dict(zip(_DECODE_KEYS, flat))
        pages = _pages(a.pop("page_table"), a.pop("page_indptr"), a.pop("page_indices"))
        for key in _DECODE_TENSOR_KEYS:
            a[key] = _d(a[key])
        args = (_d(q), _d(k_cache), _d(v_cache), _d(kv_lens), pages, _d(out), _d(lse))
        return _C.decode(*args, **a, workspace=_d(workspace), stream=stream)

    key, cached = _cached_workspace(q, stream)
    size = call(cached)
    if size:
        call(_workspace_for(q, key, size))


def _decode_impl(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    kv_lens: Tensor,
    page_table: Optional[Tensor],
    page_indptr: Optional[Tensor],
    page_indices: Optional[Tensor],
    kv_layout: str,
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    scale: Optional[float],
    sinks: Optional[Tensor],
    k_scale: float,
    k_scale_per_head: Optional[Tensor],
    v_scale: float,
    v_scale_per_head: Optional[Tensor],
    tree_mask: Optional[Tensor],
    beam_width: int,
    shared_kv_lens: Optional[Tensor],
    num_splits: int,
) -> Tuple[Tensor, Tensor]:
    out = _empty(q, (*q.shape[:-1], v_cache.shape[-1]))
    lse = _empty(q, q.shape[:-1], torch.float32)
    _run_decode(
        q,
        k_cache,
        v_cache,
        kv_lens,
        (
            page_table,
            page_indptr,
            page_indices,
            kv_layout,
            causal,
            window_left,
            window_right,
            softcap,
            scale,
            sinks,
            k_scale,
            k_scale_per_head,
            v_scale,
            v_scale_per_head,
            tree_mask,
            beam_width,
            shared_kv_lens,
            num_splits,
        ),
        out,
        lse,
    )
    return out, lse


_decode = torch.library.custom_op("hopattn::decode", _decode_impl, mutates_args=())


@_decode.register_fake
def _(q, k_cache, v_cache, *rest):
    return (
        q.new_empty((*q.shape[:-1], v_cache.shape[-1])),
        q.new_empty(q.shape[:-1], dtype=torch.float32),
    )


def _decode_out_impl(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    kv_lens: Tensor,
    page_table: Optional[Tensor],
    page_indptr: Optional[Tensor],
    page_indices: Optional[Tensor],
    kv_layout: str,
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    scale: Optional[float],
    sinks: Optional[Tensor],
    k_scale: float,
    k_scale_per_head: Optional[Tensor],
    v_scale: float,
    v_scale_per_head: Optional[Tensor],
    tree_mask: Optional[Tensor],
    beam_width: int,
    shared_kv_lens: Optional[Tensor],
    num_splits: int,
    out: Tensor,
    lse: Tensor,
) -> None:
    _run_decode(
        q,
        k_cache,
        v_cache,
        kv_lens,
        (
            page_table,
            page_indptr,
            page_indices,
            kv_layout,
            causal,
            window_left,
            window_right,
            softcap,
            scale,
            sinks,
            k_scale,
            k_scale_per_head,
            v_scale,
            v_scale_per_head,
            tree_mask,
            beam_width,
            shared_kv_lens,
            num_splits,
        ),
        out,
        lse,
    )


_decode_out = torch.library.custom_op(
    "hopattn::decode_out", _decode_out_impl, mutates_args=("out", "lse")
)


@_decode_out.register_fake
def _(*args):
    return None


# ---------------------------------------------------------------------------- mla
def _run_mla(
    q_nope,
    q_pe,
    ckv,
    kpe,
    cu_seqlens_q,
    kv_lens,
    page_table,
    page_indptr,
    page_indices,
    max_seqlen_q,
    causal,
    scale,
    kv_scale,
    num_splits,
    out,
    lse,
):
    stream = _stream(q_nope)

    def call(workspace):  # 0 when it ran, else the workspace bytes it needs (nothing ran)
        return _C.mla(
            _d(q_nope),
            _d(q_pe),
            _d(ckv),
            _d(kpe),
            _d(cu_seqlens_q),
            _d(kv_lens),
            _pages(page_table, page_indptr, page_indices),
            _d(out),
            _d(lse),
            max_seqlen_q=max_seqlen_q,
            causal=causal,
            scale=scale,
            kv_scale=kv_scale,
            num_splits=num_splits,
            workspace=_d(workspace),
            stream=stream,
        )

    key, cached = _cached_workspace(q_nope, stream, "mla")
    size = call(cached)
    if size:
        call(_workspace_for(q_nope, key, size))


@torch.library.custom_op("hopattn::mla", mutates_args=())
def _mla(
    q_nope: Tensor,
    q_pe: Tensor,
    ckv: Tensor,
    kpe: Tensor,
    cu_seqlens_q: Tensor,
    kv_lens: Tensor,
    page_table: Optional[Tensor],
    page_indptr: Optional[Tensor],
    page_indices: Optional[Tensor],
    max_seqlen_q: int,
    causal: bool,
    scale: Optional[float],
    kv_scale: float,
    num_splits: int,
) -> Tuple[Tensor, Tensor]:
    out = _empty(q_nope, (*q_nope.shape[:-1], ckv.shape[-1]))
    lse = _empty(q_nope, q_nope.shape[:-1], torch.float32)
    _run_mla(
        q_nope,
        q_pe,
        ckv,
        kpe,
        cu_seqlens_q,
        kv_lens,
        page_table,
        page_indptr,
        page_indices,
        max_seqlen_q,
        causal,
        scale,
        kv_scale,
        num_splits,
        out,
        lse,
    )
    return out, lse


@_mla.register_fake
def _(q_nope, q_pe, ckv, *rest):
    return (
        q_nope.new_empty((*q_nope.shape[:-1], ckv.shape[-1])),
        q_nope.new_empty(q_nope.shape[:-1], dtype=torch.float32),
    )


@torch.library.custom_op("hopattn::mla_out", mutates_args=("out", "lse"))
def _mla_out(
    q_nope: Tensor,
    q_pe: Tensor,
    ckv: Tensor,
    kpe: Tensor,
    cu_seqlens_q: Tensor,
    kv_lens: Tensor,
    page_table: Optional[Tensor],
    page_indptr: Optional[Tensor],
    page_indices: Optional[Tensor],
    max_seqlen_q: int,
    causal: bool,
    scale: Optional[float],
    kv_scale: float,
    num_splits: int,
    out: Tensor,
    lse: Tensor,
) -> None:
    _run_mla(
        q_nope,
        q_pe,
        ckv,
        kpe,
        cu_seqlens_q,
        kv_lens,
        page_table,
        page_indptr,
        page_indices,
        max_seqlen_q,
        causal,
        scale,
        kv_scale,
        num_splits,
        out,
        lse,
    )


@_mla_out.register_fake
def _(*args):
    return None


# ---------------------------------------------------------------------------- merge
def _run_merge(o_a, lse_a, o_b, lse_b, out, lse):
    _C.merge_states(_d(o_a), _d(lse_a), _d(o_b), _d(lse_b), _d(out), _d(lse), stream=_stream(o_a))


@torch.library.custom_op("hopattn::merge_states", mutates_args=())
def _merge_states(o_a: Tensor, lse_a: Tensor, o_b: Tensor, lse_b: Tensor) -> Tuple[Tensor, Tensor]:
    out, lse = _empty(o_a, o_a.shape), _empty(o_a, lse_a.shape, torch.float32)
    _run_merge(o_a, lse_a, o_b, lse_b, out, lse)
    return out, lse


@_merge_states.register_fake
def _(o_a, lse_a, o_b, lse_b):
    return o_a.new_empty(o_a.shape), o_a.new_empty(lse_a.shape, dtype=torch.float32)


@torch.library.custom_op("hopattn::merge_states_out", mutates_args=("out", "lse"))
def _merge_states_out(
    o_a: Tensor, lse_a: Tensor, o_b: Tensor, lse_b: Tensor, out: Tensor, lse: Tensor
) -> None:
    _run_merge(o_a, lse_a, o_b, lse_b, out, lse)


@_merge_states_out.register_fake
def _(*args):
    return None


def _run_merge_n(o, lse, out, lse_out):
    _C.merge_states_n(_d(o), _d(lse), _d(out), _d(lse_out), stream=_stream(o))


def _merged_shapes(o, lse):
    return (o.shape[0], *o.shape[2:]), (lse.shape[0], *lse.shape[2:])


@torch.library.custom_op("hopattn::merge_states_n", mutates_args=())
def _merge_states_n(o: Tensor, lse: Tensor) -> Tuple[Tensor, Tensor]:
    out_shape, lse_shape = _merged_shapes(o, lse)
    out, lse_out = _empty(o, out_shape), _empty(o, lse_shape, torch.float32)
    _run_merge_n(o, lse, out, lse_out)
    return out, lse_out


@_merge_states_n.register_fake
def _(o, lse):
    out_shape, lse_shape = _merged_shapes(o, lse)
    return o.new_empty(out_shape), o.new_empty(lse_shape, dtype=torch.float32)


@torch.library.custom_op("hopattn::merge_states_n_out", mutates_args=("out", "lse_out"))
def _merge_states_n_out(o: Tensor, lse: Tensor, out: Tensor, lse_out: Tensor) -> None:
    _run_merge_n(o, lse, out, lse_out)


@_merge_states_n_out.register_fake
def _(*args):
    return None


# ---------------------------------------------------------------------------- backend
class _backend:
    """What hopattn's top-level functions call for torch tensors (flat, normalized arguments,
    the same as hopattn._generic's)."""

    @staticmethod
    def attention(q, k, v, a, out=None, lse=None):
        flat = tuple(a[key] for key in _FWD_KEYS)
        if out is None and lse is None:
            if _plain_eager(q, k, v, *flat):
                return _attention_fwd_impl(q, k, v, *flat)
            return torch.ops.hopattn.attention_fwd(q, k, v, *flat)
        _no_out_with_grad("attention", q, k, v, a["sinks"])
        out_shape, lse_shape = _fwd_shapes(q, v)
        out = _empty(q, out_shape) if out is None else out
        lse = _empty(q, lse_shape, torch.float32) if lse is None else lse
        torch.ops.hopattn.attention_fwd_out(q, k, v, *flat, out, lse)
        return out, lse

    @staticmethod
    def attention_backward(dout, q, k, v, out, lse, a, dq=None, dk=None, dv=None, dsinks=None):
        flat = tuple(a[key] for key in _FWD_KEYS)
        sinks = a["sinks"]
        if dq is None and dk is None and dv is None and dsinks is None:
            dq, dk, dv, dsinks = torch.ops.hopattn.attention_bwd(dout, q, k, v, out, lse, *flat)
            return dq, dk, dv, (dsinks if sinks is not None else None)
        dq = _empty(q, q.shape) if dq is None else dq
        dk = _empty(k, k.shape) if dk is None else dk
        dv = _empty(v, v.shape) if dv is None else dv
        if dsinks is None and sinks is not None:
            dsinks = _empty(q, sinks.shape, torch.float32)
        torch.ops.hopattn.attention_bwd_out(dout, q, k, v, out, lse, *flat, dq, dk, dv, dsinks)
        return dq, dk, dv, dsinks

    @staticmethod
    def decode(q, k_cache, v_cache, kv_lens, a, out=None, lse=None):
        flat = tuple(a[key] for key in _DECODE_KEYS)
        plain = _plain_eager(q, k_cache, v_cache, kv_lens, *flat, out, lse)
        if out is None and lse is None:
            if plain:
                return _decode_impl(q, k_cache, v_cache, kv_lens, *flat)
            return torch.ops.hopattn.decode(q, k_cache, v_cache, kv_lens, *flat)
        out = _empty(q, (*q.shape[:-1], v_cache.shape[-1])) if out is None else out
        lse = _empty(q, q.shape[:-1], torch.float32) if lse is None else lse
        if plain:
            _decode_out_impl(q, k_cache, v_cache, kv_lens, *flat, out, lse)
            # What the op's dispatch does for arguments it mutates.
            torch.autograd.graph.increment_version((out, lse))
        else:
            torch.ops.hopattn.decode_out(q, k_cache, v_cache, kv_lens, *flat, out, lse)
        return out, lse

    @staticmethod
    def mla(q_nope, q_pe, ckv, kpe, cu_seqlens_q, kv_lens, a, out=None, lse=None):
        args = (
            q_nope,
            q_pe,
            ckv,
            kpe,
            cu_seqlens_q,
            kv_lens,
            a["page_table"],
            a["page_indptr"],
            a["page_indices"],
            a["max_seqlen_q"],
            a["causal"],
            a["scale"],
            a["kv_scale"],
            a["num_splits"],
        )
        if out is None and lse is None:
            return torch.ops.hopattn.mla(*args)
        out = _empty(q_nope, (*q_nope.shape[:-1], ckv.shape[-1])) if out is None else out
        lse = _empty(q_nope, q_nope.shape[:-1], torch.float32) if lse is None else lse
        torch.ops.hopattn.mla_out(*args, out, lse)
        return out, lse

    @staticmethod
    def merge_states(o_a, lse_a, o_b, lse_b, out=None, lse=None):
        if out is None and lse is None:
            return torch.ops.hopattn.merge_states(o_a, lse_a, o_b, lse_b)
        out = _empty(o_a, o_a.shape) if out is None else out
        lse = _empty(o_a, lse_a.shape, torch.float32) if lse is None else lse
        torch.ops.hopattn.merge_states_out(o_a, lse_a, o_b, lse_b, out, lse)
        return out, lse

    @staticmethod
    def merge_states_n(o, lse, out=None, lse_out=None):
        if out is None and lse_out is None:
            return torch.ops.hopattn.merge_states_n(o, lse)
        out_shape, lse_shape = _merged_shapes(o, lse)
        out = _empty(o, out_shape) if out is None else out
        lse_out = _empty(o, lse_shape, torch.float32) if lse_out is None else lse_out
        torch.ops.hopattn.merge_states_n_out(o, lse, out, lse_out)
        return out, lse_out
