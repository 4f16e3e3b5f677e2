"""the batch family's run: ``hopattn::batch_run`` and ``hopattn::batch_run_out``.

A BatchAttention is not a tensor, so the op names it by its integer handle
(``BatchAttention.handle``, resolved by :func:`hopattn.batch.lookup` when the op runs). What the
op reads through the handle (the plan, in the object's host buffer and, for CUDA, its device
workspace) is state plan() sets outside the op: the fake needs none of it (the outputs' shapes
come from q and v_cache), so torch.compile(fullgraph=True) traces run() with plan() called
outside the compiled region, and a CUDA graph that captured the op replays the latest plan.
"""

import torch

from hopattn import batch as _batch
from hopattn._torch.ops import Family, stream


def _shapes(q, k_cache, v_cache, *rest):
    return (q, (*q.shape[:-1], v_cache.shape[-1]), None), (q, q.shape[:-1], torch.float32)


def _run(family, args, outs):
    kw = family.kwargs(args, outs)
    ba = _batch.lookup(kw.pop("handle"))
    q = args[0]
    ba._c.run(**kw, workspace=ba._workspace_for(q), stream=stream(q))


# After the tensors: the handle, then the keys of BatchAttention.run's normalized options.
BATCH = Family(
    "batch_run",
    "Tensor q, Tensor k_cache, Tensor v_cache, Tensor cu_seqlens_q, Tensor kv_lens, "
    "Tensor page_table, int handle, Tensor? sinks=None, float k_scale=1.0, "
    "Tensor? k_scale_per_head=None, float v_scale=1.0, Tensor? v_scale_per_head=None",
    outputs=("out", "lse"),
    shapes=_shapes,
    run=_run,
)
