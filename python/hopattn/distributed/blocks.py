"""Which query rows of a rank meet which keys of a ring step, as calls of ``hopattn.attention``.

Pure Python over host integers (no torch, no communication), so the plan is the same on every
rank and testable alone.

A sequence of length L is cut into chunks (layout.py). At ring step s, rank r holds the KV shard of
rank (r - s) mod world. For each sequence, each of r's query chunks meets each key chunk of that
shard: a rectangle of Lq x Lk positions at global offsets Oq, Ok, in which query i sees key j iff
``lo <= (Ok + j) - (Oq + i) <= hi`` (causal: hi = 0; window (left, right): lo = -left, hi =
right; -1 = unbounded). That band inside the rectangle is, after trimming the rows that see no key
and the keys that no row sees, exactly the mask of one attention call on the sub-rectangle:
bottom-right aligned, ``window=(left', right')`` on its own diagonal (``sub_problem``). Sub-problems
with the same window, sink flag and key chunk share one varlen call.
"""

from collections import namedtuple

from hopattn.distributed import layout as _layout

#: One sub-rectangle: query rows [q_row, q_row + q_len) and key rows [k_row, k_row + k_len) of
#: the rank's local tensors (rows of the local q and of the held KV shard), the window of its
#: call, and whether the call adds the sinks (each query row's own-chunk block, step 0: exactly
#: once per row, so that the merged denominator holds each sink once).
SubProblem = namedtuple("SubProblem", "q_row q_len k_row k_len window sinks")

#: The sub-problems of one call: same window and sink flag, and the same key chunk of the held
#: shard (so that no query row appears twice in a call: its merge reads and writes each row once).
CallPlan = namedtuple("CallPlan", "window sinks parts")

_INF = float("inf")


def band(causal, window):
    """(lo, hi) of key position minus query position that a query sees (+-inf: unbounded)."""
    left, right = window
    lo = -left if left >= 0 else -_INF
    hi = right if right >= 0 else _INF
    if causal:
        hi = min(hi, 0)
    return lo, hi


def sub_problem(q_len, k_len, lo, hi):
    """The part of a q_len x k_len rectangle where ``lo <= j - i <= hi`` as one attention call.

    Returns ``(i0, q_len', j0, k_len', (left', right'))`` or None when no query sees any key:
    rows [i0, i0 + q_len') and keys [j0, j0 + k_len') with the window, on the sub-rectangle's
    bottom-right diagonal, that gives the same mask (-1 where the bound cuts nothing).
    """
    if q_len <= 0 or k_len <= 0 or lo > hi:
        return None
    i0 = max(0, -hi) if hi != _INF else 0
    i1 = min(q_len - 1, k_len - 1 - lo) if lo != -_INF else q_len - 1
    if i0 > i1:
        return None
    j0 = max(0, i0 + lo) if lo != -_INF else 0
    j1 = min(k_len - 1, i1 + hi) if hi != _INF else k_len - 1
    if j0 > j1:
        return None
    i0, i1, j0, j1 = int(i0), int(i1), int(j0), int(j1)
    ql, kl = i1 - i0 + 1, j1 - j0 + 1
    diag = kl - ql  # the sub-rectangle's bottom-right diagonal: j' - i' = diag
    # j' - i' in [lo - j0 + i0, hi - j0 + i0]: left' = diag - (lo - j0 + i0), right' = the rest.
    left = -1 if lo == -_INF else int(diag - (lo - j0 + i0))
    right = -1 if hi == _INF else int(hi - j0 + i0 - diag)
    # A bound that cuts nothing in the sub-rectangle is dropped (the unmasked path is faster).
    if left >= kl - 1:
        left = -1
    if right >= ql - 1:
        right = -1
    return i0, ql, j0, kl, (left, right)


def step_plan(seq_lens, rank, world, step, causal, window, layout_name):
    """The calls of ring step ``step`` on ``rank``: a list of CallPlan, grouped by window.

    ``seq_lens``: the global length of each sequence (host ints, each divisible as the layout
    requires).
    """
    src = (rank - step) % world
    lo, hi = band(causal, window)
    groups = {}
    q_base = k_base = 0
    for length in seq_lens:
        q_chunks = _layout.chunks_of(rank, world, length, layout_name)
        k_chunks = _layout.chunks_of(src, world, length, layout_name)
        q_off = 0
        for q_start, q_len in q_chunks:
            k_off = 0
            for slot, (k_start, k_len) in enumerate(k_chunks):
                shift = q_start - k_start  # j - i = (kpos - qpos) + shift
                sub = sub_problem(q_len, k_len, lo + shift, hi + shift)
                if sub is not None:
                    i0, ql, j0, kl, win = sub
                    sinks = step == 0 and q_start == k_start
                    groups.setdefault((win, sinks, slot), []).append(
                        SubProblem(q_base + q_off + i0, ql, k_base + k_off + j0, kl, win, sinks)
                    )
                k_off += k_len
            q_off += q_len
        local = _layout.local_length(world, length, layout_name)
        q_base += local
        k_base += local
    return [CallPlan(win, sinks, parts) for (win, sinks, _), parts in sorted(groups.items())]


def steps_needed(seq_lens, world, causal, window, layout_name):
    """How many ring steps any rank has work in (the ring stops after the last: later KV blocks
    are neither sent nor computed)."""
    last = 0
    for step in range(world):
        for rank in range(world):
            if step_plan(seq_lens, rank, world, step, causal, window, layout_name):
                last = step
                break
    return last + 1
