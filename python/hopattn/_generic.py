"""Framework-neutral backend: numpy, CuPy, JAX or any array with __dlpack__ (torch has its own,
in hopattn.torch, for autograd and torch.compile).

Outputs are allocated in the input's framework and on its device (numpy.empty, or the array-API
namespace's empty), then the C++ call writes into them through DLPack.
"""

import sys

from hopattn import _C

# numpy has no bf16/fp8 of its own; ml_dtypes' types cannot cross DLPack, so their bytes are
# passed as a same-width integer view with the hopattn dtype named beside them.
_REINTERPRETED = {
    "bfloat16": ("int16", "bf16"),
    "float8_e4m3fn": ("int8", "fp8_e4m3"),
    "float8_e5m2": ("int8", "fp8_e5m2"),
}
_KDLCUDA = 2


def _is_numpy(x):
    np = sys.modules.get("numpy")
    return np is not None and isinstance(x, np.ndarray)


# _REINTERPRETED's entry (or None) of each numpy dtype met so far: `dtype.name` builds its string
# on every call (~2 us, two of them a plan() call), a dtype's hash and lookup cost ~0.1 us.
_SPEC_OF_DTYPE = {}


def dl(x):
    """What the extension receives for `x`: x itself, or (integer view, dtype name)."""
    if x is None or not _is_numpy(x):
        return x
    dtype = x.dtype
    try:
        spec = _SPEC_OF_DTYPE[dtype]
    except KeyError:
        spec = _SPEC_OF_DTYPE[dtype] = _REINTERPRETED.get(dtype.name)
    return x if spec is None else (x.view(spec[0]), spec[1])


def empty(ref, shape, dtype=None, zeroed=False):
    """An uninitialized (zeroed=True: zero-filled) array in ref's framework and on its device;
    dtype: None (ref's), "float32" or "uint8"."""
    shape = tuple(int(s) for s in shape)
    make = "zeros" if zeroed else "empty"
    if _is_numpy(ref):
        import numpy as np

        return getattr(np, make)(shape, dtype=ref.dtype if dtype is None else np.dtype(dtype))
    if type(ref).__module__.split(".")[0] == "cupy":
        import cupy

        with cupy.cuda.Device(ref.device.id):
            return getattr(cupy, make)(shape, dtype=ref.dtype if dtype is None else dtype)
    namespace = getattr(ref, "__array_namespace__", None)
    if namespace is None:
        raise TypeError(
            "hopattn: expected numpy arrays, torch tensors or arrays of an array-API framework "
            f"(CuPy, JAX), got {type(ref).__module__}.{type(ref).__name__}"
        )
    xp = namespace()
    return getattr(xp, make)(
        shape, dtype=ref.dtype if dtype is None else getattr(xp, dtype), device=ref.device
    )


def stream_of(x):
    """The stream a CUDA call runs on: CuPy's current stream; 0 (legacy default) otherwise."""
    device_type, _ = x.__dlpack_device__()
    if int(device_type) != _KDLCUDA:
        return 0
    if type(x).__module__.split(".")[0] == "cupy":
        import cupy

        with cupy.cuda.Device(x.device.id):
            return cupy.cuda.get_current_stream().ptr
    return 0


def _lead(x, drop=1):
    """x's shape without its last `drop` dims (empty for tensors of too low rank: the extension
    then reports the rank that was expected)."""
    shape = tuple(x.shape)
    return shape[:-drop] if len(shape) >= drop else ()


def _last(x):
    shape = tuple(x.shape)
    return shape[-1] if shape else 0


def _drop_axis1(x):
    shape = tuple(x.shape)
    return shape[:1] + shape[2:]


def _outputs(q, v, out, lse):
    """The outputs of an attention-like call, the given ones as they are: out with q's shape and
    dtype but v's last dim (the value head dim), lse float32 with q's shape without its last dim
    (attention, decode and mla share this contract)."""
    if out is None:
        out = empty(q, (*_lead(q), _last(v)))
    if lse is None:
        lse = empty(q, _lead(q), dtype="float32")
    return out, lse


def _page_arg(block_table, indptr, indices):
    if indptr is not None or indices is not None:
        return (dl(indptr), dl(indices))
    return dl(block_table)


# ---------------------------------------------------------------------------- families
# Each takes the flat, normalized arguments of hopattn._args, allocates the outputs it was not
# given, and returns them.


def attention(q, k, v, a, out=None, lse=None):
    out, lse = _outputs(q, v, out, lse)
    _C.attention_fwd(
        dl(q), dl(k), dl(v), dl(out), dl(lse), **_attention_kwargs(a), stream=stream_of(q)
    )
    return out, lse


def attention_backward(dout, q, k, v, out, lse, a, dq=None, dk=None, dv=None, dsinks=None):
    dq = empty(q, q.shape) if dq is None else dq
    dk = empty(k, k.shape) if dk is None else dk
    dv = empty(v, v.shape) if dv is None else dv
    if dsinks is None and a["sinks"] is not None:
        dsinks = empty(a["sinks"], a["sinks"].shape, dtype="float32")
    tensors = (dl(dout), dl(q), dl(k), dl(v), dl(out), dl(lse), dl(dq), dl(dk), dl(dv), dl(dsinks))
    kwargs = _attention_kwargs(a)
    size = _C.attention_bwd_workspace_size(*tensors, **kwargs)
    workspace = empty(q, (size,), "uint8") if size else None
    _C.attention_bwd(*tensors, **kwargs, workspace=dl(workspace), stream=stream_of(q))
    return dq, dk, dv, dsinks


def _attention_kwargs(a):
    return dict(
        cu_seqlens_q=dl(a["cu_seqlens_q"]),
        cu_seqlens_k=dl(a["cu_seqlens_k"]),
        max_seqlen_q=a["max_seqlen_q"],
        max_seqlen_k=a["max_seqlen_k"],
        page_table=_page_arg(a["page_table"], a["page_indptr"], a["page_indices"]),
        kv_lens=dl(a["kv_lens"]),
        kv_layout=a["kv_layout"],
        sinks=dl(a["sinks"]),
        causal=a["causal"],
        window_left=a["window_left"],
        window_right=a["window_right"],
        softcap=a["softcap"],
        scale=a["scale"],
        deterministic=a["deterministic"],
    )


def decode(q, k_cache, v_cache, kv_lens, a, out=None, lse=None):
    out, lse = _outputs(q, v_cache, out, lse)
    args = (
        dl(q),
        dl(k_cache),
        dl(v_cache),
        dl(kv_lens),
        _page_arg(a["page_table"], a["page_indptr"], a["page_indices"]),
        dl(out),
        dl(lse),
    )
    kwargs = _decode_kwargs(a)
    size = _C.decode_workspace_size(*args, **kwargs)
    # Zero-once workspace contract (options.hpp): a fresh workspace per call must start zeroed.
    # Minimal for now; the Python call path is to keep one workspace across calls instead.
    workspace = empty(q, (size,), "uint8", zeroed=True) if size else None
    _C.decode(*args, **kwargs, workspace=dl(workspace), stream=stream_of(q))
    return out, lse


def _decode_kwargs(a):
    return dict(
        kv_layout=a["kv_layout"],
        causal=a["causal"],
        window_left=a["window_left"],
        window_right=a["window_right"],
        softcap=a["softcap"],
        scale=a["scale"],
        sinks=dl(a["sinks"]),
        k_scale=a["k_scale"],
        k_scale_per_head=dl(a["k_scale_per_head"]),
        v_scale=a["v_scale"],
        v_scale_per_head=dl(a["v_scale_per_head"]),
        tree_mask=dl(a["tree_mask"]),
        beam_width=a["beam_width"],
        shared_kv_lens=dl(a["shared_kv_lens"]),
        num_splits=a["num_splits"],
    )


def mla(q_nope, q_pe, ckv, kpe, cu_seqlens_q, kv_lens, a, out=None, lse=None):
    out, lse = _outputs(q_nope, ckv, out, lse)
    args = (
        dl(q_nope),
        dl(q_pe),
        dl(ckv),
        dl(kpe),
        dl(cu_seqlens_q),
        dl(kv_lens),
        _page_arg(a["page_table"], a["page_indptr"], a["page_indices"]),
        dl(out),
        dl(lse),
    )
    kwargs = dict(
        max_seqlen_q=a["max_seqlen_q"],
        causal=a["causal"],
        scale=a["scale"],
        kv_scale=a["kv_scale"],
        num_splits=a["num_splits"],
        schedule=a["schedule"],
        stream=stream_of(q_nope),
    )
    # 0: it ran; else the workspace bytes the call needs (nothing ran yet).
    size = _C.mla(*args, **kwargs)
    if size:
        _C.mla(*args, **kwargs, workspace=dl(empty(q_nope, (size,), "uint8")))
    return out, lse


def merge_states(o_a, lse_a, o_b, lse_b, out=None, lse=None):
    out = empty(o_a, o_a.shape) if out is None else out
    lse = empty(o_a, lse_a.shape, dtype="float32") if lse is None else lse
    _C.merge_states(dl(o_a), dl(lse_a), dl(o_b), dl(lse_b), dl(out), dl(lse), stream=stream_of(o_a))
    return out, lse


def merge_states_n(o, lse, out=None, lse_out=None):
    if out is None:
        out = empty(o, _drop_axis1(o))
    if lse_out is None:
        lse_out = empty(o, _drop_axis1(lse), dtype="float32")
    _C.merge_states_n(dl(o), dl(lse), dl(out), dl(lse_out), stream=stream_of(o))
    return out, lse_out
