"""Context-parallel attention across the ranks of a torch.distributed group (NCCL on GPUs, gloo
on CPU tensors).

Each rank holds its shard of every sequence (layout.py: ``"zigzag"`` balances causal work,
``"contiguous"`` keeps neighbours together); :func:`ring_attention` passes the KV shards around
the ring and merges the partial states exactly (fp32, :func:`hopattn.merge_states`), forward and
backward (ring.py). :func:`shard` and :func:`unshard` move whole tensors to and from the layout.
"""

import torch
import torch.distributed as dist

from hopattn import _args
from hopattn.distributed import layout as _layout
from hopattn.distributed.ring import RingAttentionFunction, RingConfig

__all__ = ["ring_attention", "shard", "unshard"]


def _group_size(group):
    if not dist.is_available() or not dist.is_initialized():
        raise ValueError(
            "hopattn.distributed: expected an initialized torch.distributed process group "
            "(torch.distributed.init_process_group), got none"
        )
    return dist.get_world_size(group), dist.get_rank(group)


def _host_lengths(cu_seqlens, where):
    """Sequence lengths from host offsets (a list or a CPU tensor; a CUDA tensor is copied to the
    host, one synchronization)."""
    values = cu_seqlens.tolist() if isinstance(cu_seqlens, torch.Tensor) else list(cu_seqlens)
    if len(values) < 1 or values[0] != 0 or any(b < a for a, b in zip(values, values[1:])):
        raise ValueError(f"{where}: expected offsets [B+1] starting at 0, never decreasing, got "
                         f"{values[:8]}{' ...' if len(values) > 8 else ''}")  # fmt: skip
    return [b - a for a, b in zip(values, values[1:])]


_CONFIGS = {}  # the plans of recent calls: a model calls with the same shapes every layer
_MAX_CONFIGS = 64


def _config(group, *key):
    """The RingConfig of (group, lengths, options, device), built once (its index tensors are
    uploaded once per device)."""
    full = (group, dist.get_world_size(group), dist.get_rank(group)) + tuple(
        tuple(k) if isinstance(k, list) else k for k in key
    )
    cfg = _CONFIGS.get(full)
    if cfg is None:
        if len(_CONFIGS) >= _MAX_CONFIGS:
            _CONFIGS.clear()
        cfg = _CONFIGS[full] = RingConfig(group, *key)
    return cfg


def ring_attention(
    q,
    k,
    v,
    *,
    group=None,
    causal=False,
    window=(-1, -1),
    softcap=0.0,
    scale=None,
    sinks=None,
    cu_seqlens=None,
    layout="zigzag",
    deterministic=False,
):
    """Attention over a sequence sharded across ``group``: this rank's (out, lse).

    Shapes are those of :func:`hopattn.attention` over the local shard: dense q [B, S_local, Hq,
    D], k / v [B, S_local, Hkv, D] (every sequence of global length S_local * world), or varlen
    q [T_local, Hq, D], k / v [T_local, Hkv, D] with ``cu_seqlens`` the *global* offsets of the
    whole batch's sequences (host ints: a list or a CPU int tensor), each sequence split as
    ``layout`` says (``shard``). ``causal``, ``window``, ``softcap``, ``scale`` and ``sinks`` mean
    what they mean for the unsharded sequence. Returns out [.., Hq, Dv] in q's dtype and lse
    float32, differentiable through out (q, k, v and sinks; a rank's dsinks is its queries'
    part). Every rank must call with the same lengths and options.
    """
    _layout.check_layout(layout)
    world, _ = _group_size(group)
    causal = _args.flag(causal, "causal")
    dense = cu_seqlens is None
    if dense:
        if q.dim() != 4:
            raise ValueError(f"q: expected [B, S_local, H, D] without cu_seqlens, got {q.dim()}-D")
        b, s_local = q.shape[0], q.shape[1]
        seq_lens = [s_local * world] * b
        qf, kf, vf = (x.reshape(-1, *x.shape[2:]) for x in (q, k, v))
    else:
        seq_lens = _host_lengths(cu_seqlens, "cu_seqlens")
        qf, kf, vf = q, k, v
    _layout.check_lengths(seq_lens, world, layout)
    local_total = sum(seq_lens) // world
    for name, x in (("q", qf), ("k", kf), ("v", vf)):
        if x.dim() != 3 or x.shape[0] != local_total:
            raise ValueError(
                f"{name}: expected {local_total} local rows (the global lengths / {world} ranks), "
                f"got shape {tuple(x.shape)}"
            )
    cfg = _config(group, seq_lens, causal, tuple(window), float(softcap), scale, layout,
                  bool(deterministic), q.device)  # fmt: skip
    out, lse = RingAttentionFunction.apply(qf, kf, vf, sinks, cfg)
    if dense:
        out = out.reshape(q.shape[0], q.shape[1], *out.shape[1:])
        lse = lse.reshape(q.shape[0], q.shape[1], lse.shape[-1])
    return out, lse


def _rows(seq_lens, rank, world, layout, device):
    return torch.tensor(_layout.global_rows(seq_lens, rank, world, layout), device=device)


def shard(x, *, group=None, cu_seqlens=None, layout="zigzag"):
    """This rank's shard of a whole tensor: dense [B, S, ...] (split along S) or varlen [T, ...]
    with the global ``cu_seqlens``."""
    _layout.check_layout(layout)
    world, rank = _group_size(group)
    if cu_seqlens is None:
        seq_lens = [x.shape[1]]
        _layout.check_lengths(seq_lens, world, layout, "x")
        return x.index_select(1, _rows(seq_lens, rank, world, layout, x.device))
    seq_lens = _host_lengths(cu_seqlens, "cu_seqlens")
    _layout.check_lengths(seq_lens, world, layout)
    return x.index_select(0, _rows(seq_lens, rank, world, layout, x.device))


def unshard(x, *, group=None, cu_seqlens=None, layout="zigzag"):
    """The whole tensor from every rank's shard (an all-gather): the inverse of :func:`shard`."""
    _layout.check_layout(layout)
    world, _ = _group_size(group)
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x.contiguous(), group=group)
    dim = 1 if cu_seqlens is None else 0
    if cu_seqlens is None:
        seq_lens = [x.shape[1] * world]
    else:
        seq_lens = _host_lengths(cu_seqlens, "cu_seqlens")
    whole = torch.cat(parts, dim=dim)
    order = torch.cat([_rows(seq_lens, r, world, layout, x.device) for r in range(world)])
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel(), device=x.device)
    return whole.index_select(dim, inverse)
