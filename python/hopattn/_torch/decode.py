"""paged decode: ``hopattn::decode`` and ``hopattn::decode_out``, with the per-stream zeroed
workspace (decode's zero-once contract)."""

import torch

from hopattn import _C
from hopattn._torch.ops import Family, run_with_workspace
from hopattn._torch.workspace import WorkspaceCache

WORKSPACES = WorkspaceCache("decode", zeroed=True)


def _shapes(q, k_cache, v_cache, *rest):
    return (q, (*q.shape[:-1], v_cache.shape[-1]), None), (q, q.shape[:-1], torch.float32)


# After q and the caches: the keys of hopattn.decode's normalized options, with their defaults.
DECODE = Family(
    "decode",
    "Tensor q, Tensor k_cache, Tensor v_cache, Tensor kv_lens, Tensor? page_table, "
    "Tensor? page_indptr, Tensor? page_indices, str kv_layout='NHD', bool causal=True, "
    "int window_left=-1, int window_right=-1, float softcap=0.0, float? scale=None, "
    "Tensor? sinks=None, float k_scale=1.0, Tensor? k_scale_per_head=None, float v_scale=1.0, "
    "Tensor? v_scale_per_head=None, Tensor? tree_mask=None, int beam_width=1, "
    "Tensor? shared_kv_lens=None, int num_splits=0",
    outputs=("out", "lse"),
    shapes=_shapes,
    run=run_with_workspace(_C.decode, WORKSPACES),
)
