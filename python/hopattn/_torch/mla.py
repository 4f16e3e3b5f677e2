"""multi-head latent attention: ``hopattn::mla`` and ``hopattn::mla_out``, with the per-stream
workspace of split partials (uninitialized: mla needs no zeroing)."""

import torch

from hopattn import _C
from hopattn._torch.ops import Family, run_with_workspace
from hopattn._torch.workspace import WorkspaceCache

WORKSPACES = WorkspaceCache("mla", zeroed=False)


def _shapes(q_nope, q_pe, ckv, *rest):
    return (q_nope, (*q_nope.shape[:-1], ckv.shape[-1]), None), (
        q_nope,
        q_nope.shape[:-1],
        torch.float32,
    )


# After the tensors: the keys of hopattn.mla's normalized options, with their defaults.
MLA = Family(
    "mla",
    "Tensor q_nope, Tensor q_pe, Tensor ckv, Tensor kpe, Tensor cu_seqlens_q, Tensor kv_lens, "
    "Tensor? page_table, Tensor? page_indptr, Tensor? page_indices, int max_seqlen_q=0, "
    "bool causal=True, float? scale=None, float kv_scale=1.0, int num_splits=0, "
    "str schedule='auto'",
    outputs=("out", "lse"),
    shapes=_shapes,
    run=run_with_workspace(_C.mla, WORKSPACES),
)
