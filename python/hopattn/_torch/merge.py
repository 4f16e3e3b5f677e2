"""state merging: ``hopattn::merge_states`` and ``hopattn::merge_states_n`` (and ``*_out``)."""

import torch

from hopattn import _C
from hopattn._torch.ops import Family, run_on_stream

_F32 = torch.float32


def _merge_shapes(o_a, lse_a, o_b, lse_b):
    return (o_a, o_a.shape, None), (o_a, lse_a.shape, _F32)


MERGE = Family(
    "merge_states",
    "Tensor o_a, Tensor lse_a, Tensor o_b, Tensor lse_b",
    outputs=("out", "lse"),
    shapes=_merge_shapes,
    run=run_on_stream(_C.merge_states),
)


def _merge_n_shapes(o, lse):
    return (o, (o.shape[0], *o.shape[2:]), None), (o, (lse.shape[0], *lse.shape[2:]), _F32)


MERGE_N = Family(
    "merge_states_n",
    "Tensor o, Tensor lse",
    outputs=("out", "lse_out"),
    shapes=_merge_n_shapes,
    run=run_on_stream(_C.merge_states_n),
)
