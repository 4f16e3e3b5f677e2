"""Ring attention over a torch.distributed group: forward and backward.

Forward: at ring step s every rank computes its queries against the KV shard it holds (rank
r - s's), through ``hopattn.attention`` on the sub-rectangles of blocks.py that have visible keys,
and merges each call's (out, lse) into an fp32 running state with ``hopattn.merge_states``; the
next shard's send/receive is posted before the step's compute and waited for after it.

Backward: the ring again with the final out and lse: each step's ``hopattn.attention_backward``
adds dQ of the rank's own queries (fp32) and dK / dV of the held shard into fp32 accumulators that
travel with the shard; after the last step each accumulator goes to its shard's owner. The
accumulator's send of step s is waited for only after step s + 1's kernels, so it overlaps them.

Sinks count once per query row: only the step-0 calls on each query chunk's own chunk (which
every row sees, since a row always sees itself) pass them, and merging adds that denominator term
exactly once. The gradient of ``sinks`` returned on a rank is its own queries' part: a
replicated parameter's gradient is summed over the group by the usual all-reduce.
"""

import torch
import torch.distributed as dist

import hopattn
from hopattn.distributed import blocks


class _Call:
    """One ``hopattn.attention`` call of a ring step, with its index and offset tensors."""

    def __init__(self, plan, device):
        q_rows, k_rows, cu_q, cu_k = [], [], [0], [0]
        for part in plan.parts:
            q_rows.extend(range(part.q_row, part.q_row + part.q_len))
            k_rows.extend(range(part.k_row, part.k_row + part.k_len))
            cu_q.append(cu_q[-1] + part.q_len)
            cu_k.append(cu_k[-1] + part.k_len)
        self.window = plan.window
        self.sinks = plan.sinks
        self.q_index = torch.tensor(q_rows, dtype=torch.int64, device=device)
        self.k_index = torch.tensor(k_rows, dtype=torch.int64, device=device)
        self.cu_q = torch.tensor(cu_q, dtype=torch.int32, device=device)
        self.cu_k = torch.tensor(cu_k, dtype=torch.int32, device=device)
        self.max_q = max(p.q_len for p in plan.parts)
        self.max_k = max(p.k_len for p in plan.parts)

    def keywords(self, cfg, sinks):
        return dict(
            window=self.window,
            softcap=cfg.softcap,
            scale=cfg.scale,
            sinks=sinks if self.sinks else None,
            cu_seqlens_q=self.cu_q,
            cu_seqlens_k=self.cu_k,
            max_seqlen_q=self.max_q,
            max_seqlen_k=self.max_k,
        )


class RingConfig:
    """What every rank knows on the host: the group, the lengths, the mask; the per-step calls."""

    def __init__(self, group, seq_lens, causal, window, softcap, scale, layout, deterministic,
                 device):  # fmt: skip
        self.group = group
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.softcap, self.scale, self.deterministic = softcap, scale, deterministic
        self.steps = blocks.steps_needed(seq_lens, self.world, causal, window, layout)
        self.calls = [
            [
                _Call(p, device)
                for p in blocks.step_plan(
                    seq_lens, self.rank, self.world, s, causal, window, layout
                )
            ]
            for s in range(self.steps)
        ]

    def peer(self, offset):
        """Global rank of the group member ``offset`` places after this one."""
        r = (self.rank + offset) % self.world
        return r if self.group is None else dist.get_global_rank(self.group, r)


class _Exchange:
    """Posted sends of ``tensors`` to the member ``send_to`` places on and receives of
    same-shaped ones from ``recv_from``; ``wait()`` returns the received tensors. The sent
    tensors are referenced until then (NCCL reads them on its own stream)."""

    def __init__(self, cfg, tensors, send_to, recv_from):
        self.sent = [t.contiguous() for t in tensors]
        self.received = [torch.empty_like(t) for t in self.sent]
        ops = []
        for t, r in zip(self.sent, self.received):
            ops.append(dist.P2POp(dist.isend, t, cfg.peer(send_to), cfg.group))
            ops.append(dist.P2POp(dist.irecv, r, cfg.peer(recv_from), cfg.group))
        self.requests = dist.batch_isend_irecv(ops)

    def wait(self):
        for r in self.requests:
            r.wait()
        self.sent = None
        return self.received


def ring_forward(cfg, q, k, v, sinks):
    """(out in q's dtype, lse fp32) of the local queries; q, k, v varlen [T, H, D] local shards."""
    t, hq, dv = q.shape[0], q.shape[1], v.shape[-1]
    acc_o = torch.zeros((t, hq, dv), dtype=torch.float32, device=q.device)
    acc_lse = torch.full((t, hq), float("-inf"), dtype=torch.float32, device=q.device)
    held_k, held_v = k, v
    for step in range(cfg.steps):
        pending = _Exchange(cfg, [held_k, held_v], 1, -1) if step + 1 < cfg.steps else None
        for call in cfg.calls[step]:
            o, lse = hopattn.attention(
                q.index_select(0, call.q_index),
                held_k.index_select(0, call.k_index),
                held_v.index_select(0, call.k_index),
                **call.keywords(cfg, sinks),
            )
            o_prev = acc_o.index_select(0, call.q_index)
            lse_prev = acc_lse.index_select(0, call.q_index)
            o_new, lse_new = hopattn.merge_states(o_prev, lse_prev, o.float(), lse)
            acc_o.index_copy_(0, call.q_index, o_new)
            acc_lse.index_copy_(0, call.q_index, lse_new)
        if pending is not None:
            held_k, held_v = pending.wait()
    return acc_o.to(q.dtype), acc_lse


def ring_backward(cfg, dout, q, k, v, out, lse, sinks):
    """(dq, dk, dv, dsinks or None) of the local shards."""
    f32 = torch.float32
    dq = torch.zeros(q.shape, dtype=f32, device=q.device)
    dsinks = torch.zeros(sinks.shape, dtype=f32, device=q.device) if sinks is not None else None
    held_k, held_v = k, v
    held_dk = torch.zeros(k.shape, dtype=f32, device=q.device)
    held_dv = torch.zeros(v.shape, dtype=f32, device=q.device)
    grads_in_flight = None  # the held shard's accumulators, on their way from the previous rank
    for step in range(cfg.steps):
        pending = _Exchange(cfg, [held_k, held_v], 1, -1) if step + 1 < cfg.steps else None
        results = []
        for call in cfg.calls[step]:
            results.append(
                (
                    call,
                    hopattn.attention_backward(
                        dout.index_select(0, call.q_index),
                        q.index_select(0, call.q_index),
                        held_k.index_select(0, call.k_index),
                        held_v.index_select(0, call.k_index),
                        out.index_select(0, call.q_index),
                        lse.index_select(0, call.q_index),
                        deterministic=cfg.deterministic,
                        **call.keywords(cfg, sinks),
                    ),
                )
            )
        if grads_in_flight is not None:
            held_dk, held_dv = grads_in_flight.wait()
        for call, (gq, gk, gv, gs) in results:
            dq.index_add_(0, call.q_index, gq.float())
            held_dk.index_add_(0, call.k_index, gk.float())
            held_dv.index_add_(0, call.k_index, gv.float())
            if gs is not None:
                dsinks += gs.float()
        if pending is not None:
            held_k, held_v = pending.wait()
            grads_in_flight = _Exchange(cfg, [held_dk, held_dv], 1, -1)
    # The held accumulators belong to rank (rank - (steps - 1)); ours is (steps - 1) ranks ahead.
    last = cfg.steps - 1
    if last > 0:
        held_dk, held_dv = _Exchange(cfg, [held_dk, held_dv], -last, last).wait()
    return dq.to(q.dtype), held_dk.to(k.dtype), held_dv.to(v.dtype), dsinks


class RingAttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sinks, cfg):
        out, lse = ring_forward(cfg, q, k, v, sinks)
        ctx.save_for_backward(q, k, v, out, lse, sinks)
        ctx.cfg = cfg
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse, sinks = ctx.saved_tensors
        dq, dk, dv, dsinks = ring_backward(ctx.cfg, dout.contiguous(), q, k, v, out, lse, sinks)
        return dq, dk, dv, dsinks, None
