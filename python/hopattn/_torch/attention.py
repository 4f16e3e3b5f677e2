"""attention forward and backward: ``hopattn::attention_fwd`` (differentiable; its backward is
``hopattn::attention_bwd``, the CPU reference's backward for CPU tensors) and
``hopattn::attention_bwd``, each with its ``*_out`` variant."""

import torch
from torch.utils.dlpack import to_dlpack

from hopattn import _C
from hopattn._torch.ops import Family, run_on_stream, stream

_F32 = torch.float32

# The options of both (after their tensors): hopattn._attention_flat's keys, with its defaults.
OPTIONS = (
    "Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_k=None, int max_seqlen_q=0, "
    "int max_seqlen_k=0, Tensor? page_table=None, Tensor? page_indptr=None, "
    "Tensor? page_indices=None, Tensor? kv_lens=None, str kv_layout='NHD', Tensor? sinks=None, "
    "bool causal=False, int window_left=-1, int window_right=-1, float softcap=0.0, "
    "float? scale=None, bool deterministic=False"
)


# ---------------------------------------------------------------------------- forward
def _fwd_shapes(q, k, v, *options):
    return (q, (*q.shape[:-1], v.shape[-1]), None), (q, q.shape[:-1], _F32)


def _setup_context(ctx, inputs, output):
    out, lse = output
    tensors, others = FWD.split(inputs)
    ctx.save_for_backward(*tensors, out, lse)
    ctx.others = others
    # The bwd family has no lse gradient input: lse is returned without gradient rather than
    # with a silently wrong one.
    ctx.mark_non_differentiable(lse)


def _backward(ctx, dout, _dlse):
    *tensors, out, lse = ctx.saved_tensors
    q, k, v, *options = FWD.join(tensors, ctx.others)
    dq, dk, dv, dsinks = BWD.call((dout.contiguous(), q, k, v, out, lse, *options))
    grads = [dq, dk, dv] + [None] * len(options)
    sinks = options[_SINKS]
    if sinks is not None and ctx.needs_input_grad[3 + _SINKS]:
        grads[3 + _SINKS] = dsinks.to(sinks.dtype)
    return tuple(grads)


FWD = Family(
    "attention_fwd",
    f"Tensor q, Tensor k, Tensor v, {OPTIONS}",
    outputs=("out", "lse"),
    shapes=_fwd_shapes,
    run=run_on_stream(_C.attention_fwd),
    autograd=(_setup_context, _backward),
)
_SINKS = FWD.names.index("sinks") - 3  # among the options


# ---------------------------------------------------------------------------- backward
def _bwd_shapes(dout, q, k, v, out, lse, *options):
    sinks = options[_SINKS]
    return (
        (q, q.shape, None),
        (k, k.shape, None),
        (v, v.shape, None),
        None if sinks is None else (q, sinks.shape, _F32),
    )


def _run_bwd(family, args, outs):
    q = args[1]
    if args[6 + _SINKS] is None:
        outs = (*outs[:3], None)  # the functional op's placeholder for dsinks
    size = _C.attention_bwd_workspace_size(**family.kwargs(args, outs))
    workspace = torch.empty(size, dtype=torch.uint8, device=q.device) if size else None
    _C.attention_bwd(
        **family.kwargs(args, outs),  # fresh capsules: each is consumed once
        workspace=None if workspace is None else to_dlpack(workspace),
        stream=stream(q),
    )


BWD = Family(
    "attention_bwd",
    f"Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, {OPTIONS}",
    outputs=("dq", "dk", "dv", "dsinks?"),
    shapes=_bwd_shapes,
    run=_run_bwd,
)
