"""PyTorch integration: ``torch.library`` custom ops, autograd, torch.compile and CUDA graphs.

``hopattn.attention(...)`` and friends route torch tensors here, so importing this module is
optional; it is imported lazily (``import hopattn`` never imports torch).

Ops (``torch.ops.hopattn.*``): attention_fwd, attention_bwd, decode, mla, merge_states,
merge_states_n, batch_run (BatchAttention.run, its object named by an int handle), each with
an ``*_out`` variant that writes into caller tensors. Each has a fake (meta) implementation, so
``torch.compile(fullgraph=True)`` traces them without running them, and attention_fwd has an
autograd formula whose backward is attention_bwd (the CPU reference's backward for CPU tensors).
Each family is declared once, by its schema, in ``hopattn._torch`` (one module per family);
``hopattn._torch.ops.Family`` derives the ops, fakes and autograd.

CUDA tensors run on their own device and on torch's current stream of that device; outputs come
from torch's caching allocator (so under CUDA-graph capture, from the graph's pool) and the C++ call
allocates and synchronizes nothing.

Host cost of an eager call (docs/perf/NOTES.md, "Python host path"): where the optional C++
extension ``hopattn._torch_C`` was built (against the torch installed at build time), a plain
eager call runs in it end to end (:mod:`hopattn._torch.fast`), autograd included; every call it
declines, and every call where it is absent, takes the generic path below.

The generic path: a plain eager call (nothing that would intercept
the dispatch, plain tensors) calls the op's implementation directly, or, when inputs require grad,
runs it in a ``torch.autograd.Function`` with the op's own autograd formula; tensors cross to C++
as DLPack capsules made by torch's C exporter; decode and mla reuse a workspace per (device,
stream) (``hopattn._torch.workspace``), so a call makes one C++ call. Under CUDA-graph capture
every call allocates its workspace from the graph's pool: a captured graph never holds cached
memory. :func:`release_workspaces` frees the cached ones.
"""

import torch

import hopattn
from hopattn._torch import fast as _fast
from hopattn._torch.attention import BWD as _BWD
from hopattn._torch.attention import FWD as _FWD
from hopattn._torch.batch import BATCH as _BATCH
from hopattn._torch.decode import DECODE as _DECODE
from hopattn._torch.decode import WORKSPACES as _DECODE_WORKSPACES
from hopattn._torch.merge import MERGE as _MERGE
from hopattn._torch.merge import MERGE_N as _MERGE_N
from hopattn._torch.mla import MLA as _MLA
from hopattn._torch.mla import WORKSPACES as _MLA_WORKSPACES

__all__ = [
    "attention",
    "attention_backward",
    "decode",
    "mla",
    "merge_states",
    "merge_states_n",
    "release_workspaces",
    "set_fast_path",
]


def set_fast_path(enabled=True):
    """Whether eager calls on plain torch tensors go through the C++ fast path
    (``hopattn._torch_C``, where it was built) or the generic ``torch.library`` path; results are
    bitwise the same. Returns whether the fast path is now in use (False where it was not built)."""
    hopattn._FAST.clear()
    if enabled and _fast.EXT is not None:
        hopattn._FAST.update({torch.Tensor: _fast.EXT, torch.nn.Parameter: _fast.EXT})
    return bool(hopattn._FAST)


# The eager fast path: hopattn's public functions try it first for plain torch tensors.
set_fast_path(True)
hopattn._compiling = torch.compiler.is_compiling

# The same functions as the top level: torch tensors given to those end up here anyway.
attention = hopattn.attention
attention_backward = hopattn.attention_backward
decode = hopattn.decode
mla = hopattn.mla
merge_states = hopattn.merge_states
merge_states_n = hopattn.merge_states_n


def release_workspaces(device=None):
    """Frees the workspaces that eager decode and mla calls keep per (device, stream), of one
    CUDA device index or of all; returns the bytes released. Safe at any time (the frees are
    stream-ordered); the next eager call on a stream allocates its workspace afresh."""
    return _DECODE_WORKSPACES.release(device) + _MLA_WORKSPACES.release(device)


class _backend:
    """What hopattn's top-level functions call for torch tensors (flat, normalized arguments,
    the same as hopattn._generic's)."""

    @staticmethod
    def attention(q, k, v, a, out=None, lse=None):
        args = _FWD.flat((q, k, v), a)
        if out is None and lse is None:
            return _FWD.call(args)
        return _FWD.call_out(args, (out, lse))

    @staticmethod
    def attention_backward(dout, q, k, v, out, lse, a, dq=None, dk=None, dv=None, dsinks=None):
        args = _BWD.flat((dout, q, k, v, out, lse), a)
        if dq is None and dk is None and dv is None and dsinks is None:
            dq, dk, dv, dsinks = _BWD.call(args)
            return dq, dk, dv, (dsinks if a["sinks"] is not None else None)
        return _BWD.call_out(args, (dq, dk, dv, dsinks))

    @staticmethod
    def decode(q, k_cache, v_cache, kv_lens, a, out=None, lse=None):
        args = _DECODE.flat((q, k_cache, v_cache, kv_lens), a)
        if out is None and lse is None:
            return _DECODE.call(args)
        return _DECODE.call_out(args, (out, lse))

    @staticmethod
    def mla(q_nope, q_pe, ckv, kpe, cu_seqlens_q, kv_lens, a, out=None, lse=None):
        args = _MLA.flat((q_nope, q_pe, ckv, kpe, cu_seqlens_q, kv_lens), a)
        if out is None and lse is None:
            return _MLA.call(args)
        return _MLA.call_out(args, (out, lse))

    @staticmethod
    def batch_run(tensors, a, out=None, lse=None):
        args = _BATCH.flat(tensors, a)
        if out is None and lse is None:
            return _BATCH.call(args)
        return _BATCH.call_out(args, (out, lse))

    @staticmethod
    def merge_states(o_a, lse_a, o_b, lse_b, out=None, lse=None):
        args = (o_a, lse_a, o_b, lse_b)
        if out is None and lse is None:
            return _MERGE.call(args)
        return _MERGE.call_out(args, (out, lse))

    @staticmethod
    def merge_states_n(o, lse, out=None, lse_out=None):
        if out is None and lse_out is None:
            return _MERGE_N.call((o, lse))
        return _MERGE_N.call_out((o, lse), (out, lse_out))
