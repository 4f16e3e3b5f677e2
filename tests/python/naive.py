"""Textbook numpy implementations (float64) of hopattn's semantics, the tests' oracle.

Written from DESIGN.md's definitions, independently of the C++ reference: every mask is built as
a dense boolean matrix, softmax is exp / sum, paged caches are gathered into contiguous rows first.
"""

import numpy as np

NEG_INF = -np.inf


def f64(x):
    return np.asarray(x, dtype=np.float64)


# ---------------------------------------------------------------------------- masks
def visibility(q_len, kv_len, causal=False, window=(-1, -1)):
    """Dense [q_len, kv_len] mask: query i sees key j (bottom-right aligned diagonal)."""
    i = np.arange(q_len)[:, None]
    j = np.arange(kv_len)[None, :]
    diag = i + kv_len - q_len
    mask = np.ones((q_len, kv_len), dtype=bool)
    if causal:
        mask &= j <= diag
    left, right = window
    if left >= 0:
        mask &= j >= diag - left
    if right >= 0:
        mask &= j <= diag + right
    return mask


# ---------------------------------------------------------------------------- one sequence
def _softcapped(s, softcap):
    return softcap * np.tanh(s / softcap) if softcap > 0 else s


def _softmax_with_sink(s, sink):
    """Row softmax of logits s [Sq, Sk] (-inf = masked) with an optional sink logit joining the
    denominator only. Returns (p [Sq, Sk], p_sink [Sq], lse [Sq]); rows that see nothing get
    p = 0 and lse = -inf; a NaN logit (NaN in q or a visible key) makes its whole row NaN."""
    full = s if sink is None else np.concatenate([s, np.full((s.shape[0], 1), sink)], axis=1)
    mx = full.max(axis=1, keepdims=True) if full.shape[1] else np.full((s.shape[0], 1), NEG_INF)
    # Rows that see nothing shift by 0; +inf or NaN maxima shift by themselves, which gives the
    # NaN rows the reference gives (inf - inf).
    shift = np.where(mx == NEG_INF, 0.0, mx)
    with np.errstate(invalid="ignore"):
        e = np.where(full == NEG_INF, 0.0, np.exp(full - shift))
    denom = e.sum(axis=1, keepdims=True)
    nan_row = np.isnan(denom)
    p_all = np.divide(e, denom, out=np.zeros_like(e), where=(denom > 0) | nan_row)
    with np.errstate(divide="ignore", invalid="ignore"):
        lse = np.where(denom[:, 0] > 0, shift[:, 0] + np.log(denom[:, 0]), NEG_INF)
    lse = np.where(nan_row[:, 0], np.nan, lse)
    p_sink = p_all[:, -1] if sink is not None else np.zeros(s.shape[0])
    return p_all[:, : s.shape[1]], p_sink, lse


def _masked_matmul(a, b, mask):
    """a @ b summed over the pairs mask allows only ([M, K] @ [K, N], mask [M, K]): a masked
    pair adds nothing even where b holds NaN (0 * NaN would)."""
    if np.isfinite(a).all() and np.isfinite(b).all():
        return np.where(mask, a, 0.0) @ b
    return np.where(mask[:, :, None], a[:, :, None] * b[None], 0.0).sum(axis=1)


def _logits(q, k, mask, scale, softcap):
    x = scale * (q @ k.T)
    return x, np.where(mask, _softcapped(x, softcap), NEG_INF)


def attend(q, k, v, mask, scale=None, softcap=0.0, sinks=None):
    """One sequence. q [Sq, Hq, D], k [Sk, Hkv, D], v [Sk, Hkv, Dv], mask [Sq, Sk].
    Returns out [Sq, Hq, Dv], lse [Sq, Hq] (float64)."""
    q, k, v = f64(q), f64(k), f64(v)
    sq, hq, d = q.shape
    group = hq // k.shape[1]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    out = np.zeros((sq, hq, v.shape[-1]))
    lse = np.full((sq, hq), NEG_INF)
    for h in range(hq):
        _, s = _logits(q[:, h], k[:, h // group], mask, scale, softcap)
        p, _, lse[:, h] = _softmax_with_sink(s, None if sinks is None else float(sinks[h]))
        out[:, h] = _masked_matmul(p, v[:, h // group], mask)
    return out, lse


def attend_backward(q, k, v, dout, mask, scale=None, softcap=0.0, sinks=None):
    """Gradients of attend's out for one sequence: (dq, dk, dv, dsinks), float64, from the
    explicit probability matrix (dS = P * (dP - rowsum(dO * O)))."""
    q, k, v, dout = f64(q), f64(k), f64(v), f64(dout)
    sq, hq, d = q.shape
    group = hq // k.shape[1]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    dsinks = np.zeros(hq)
    for h in range(hq):
        kh, vh = k[:, h // group], v[:, h // group]
        x, s = _logits(q[:, h], kh, mask, scale, softcap)
        p, p_sink, _ = _softmax_with_sink(s, None if sinks is None else float(sinks[h]))
        o = _masked_matmul(p, vh, mask)
        row_dot = np.sum(dout[:, h] * o, axis=1, keepdims=True)
        ds = np.where(mask, p * (dout[:, h] @ vh.T - row_dot), 0.0)
        if softcap > 0:
            ds = ds * (1.0 - np.tanh(x / softcap) ** 2)
        # Only the (query, key) pairs the mask allows carry gradient, even from a NaN row.
        dq[:, h] = scale * _masked_matmul(ds, kh, mask)
        dk[:, h // group] += scale * _masked_matmul(ds.T, q[:, h], mask.T)
        dv[:, h // group] += _masked_matmul(p.T, dout[:, h], mask.T)
        # The sink's weight p_sink joins the denominator: d out_i / d sink = -p_sink_i * out_i.
        dsinks[h] = -np.sum(p_sink * row_dot[:, 0])
    return dq, dk, dv, dsinks


# ---------------------------------------------------------------------------- families
def attention_dense(q, k, v, causal=False, window=(-1, -1), **kw):
    """q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D]."""
    mask = visibility(q.shape[1], k.shape[1], causal, window)
    results = [attend(q[b], k[b], v[b], mask, **kw) for b in range(q.shape[0])]
    return np.stack([r[0] for r in results]), np.stack([r[1] for r in results])


def attention_varlen(q, k, v, cu_q, cu_k, causal=False, window=(-1, -1), **kw):
    """q [total_q, Hq, D], k/v [total_k, Hkv, D], cu_q/cu_k [B+1]."""
    out = np.zeros((q.shape[0], q.shape[1], v.shape[-1]))
    lse = np.full(q.shape[:2], NEG_INF)
    for b in range(len(cu_q) - 1):
        qs, qe, ks, ke = cu_q[b], cu_q[b + 1], cu_k[b], cu_k[b + 1]
        mask = visibility(qe - qs, ke - ks, causal, window)
        out[qs:qe], lse[qs:qe] = attend(q[qs:qe], k[ks:ke], v[ks:ke], mask, **kw)
    return out, lse


def attention_dense_backward(q, k, v, dout, causal=False, window=(-1, -1), **kw):
    mask = visibility(q.shape[1], k.shape[1], causal, window)
    parts = [attend_backward(q[b], k[b], v[b], dout[b], mask, **kw) for b in range(q.shape[0])]
    dq, dk, dv = (np.stack([p[i] for p in parts]) for i in range(3))
    return dq, dk, dv, sum(p[3] for p in parts)


def gather_pages(pool, block_table_row, length, layout="NHD"):
    """Tokens 0..length of one request from a page pool: [length, H, D]."""
    if layout == "HND":
        pool = pool.transpose(0, 2, 1, 3)  # -> [P, page_size, H, D]
    page_size = pool.shape[1]
    rows = [pool[block_table_row[t // page_size], t % page_size] for t in range(length)]
    return np.stack(rows) if rows else np.zeros((0, *pool.shape[2:]), dtype=pool.dtype)


def attention_paged(
    q, k_pool, v_pool, cu_q, block_table, kv_lens, layout="NHD", causal=False, window=(-1, -1), **kw
):
    out = np.zeros((q.shape[0], q.shape[1], v_pool.shape[-1]))
    lse = np.full(q.shape[:2], NEG_INF)
    for b in range(len(cu_q) - 1):
        qs, qe, n = cu_q[b], cu_q[b + 1], int(kv_lens[b])
        k = gather_pages(k_pool, block_table[b], n, layout)
        v = gather_pages(v_pool, block_table[b], n, layout)
        mask = visibility(qe - qs, n, causal, window)
        out[qs:qe], lse[qs:qe] = attend(q[qs:qe], k, v, mask, **kw)
    return out, lse


def decode(
    q,
    k_cache,
    v_cache,
    kv_lens,
    block_table,
    layout="NHD",
    causal=True,
    window=(-1, -1),
    k_scale=1.0,
    v_scale=1.0,
    tree_mask=None,
    beam_width=1,
    shared_kv_lens=None,
    **kw,
):
    """q [B, q_len, Hq, D]; caches paged; k_scale/v_scale float or [Hkv] (real = stored*scale).
    Beams: token t < shared_kv_lens[r] of any beam of request r is read through the page table
    row of the request's first beam."""
    batch, q_len, hq, _ = q.shape
    out = np.zeros((batch, q_len, hq, v_cache.shape[-1]))
    lse = np.full((batch, q_len, hq), NEG_INF)
    num_kv_heads = k_cache.shape[2 if layout == "NHD" else 1]
    ks = np.broadcast_to(f64(k_scale), (num_kv_heads,))
    vs = np.broadcast_to(f64(v_scale), (num_kv_heads,))
    k_pool, v_pool = f64(k_cache), f64(v_cache)
    if layout == "HND":
        k_pool, v_pool = k_pool.transpose(0, 2, 1, 3), v_pool.transpose(0, 2, 1, 3)
    page_size = k_pool.shape[1]
    for b in range(batch):
        n = int(kv_lens[b])
        first = (b // beam_width) * beam_width
        prefix = 0 if shared_kv_lens is None else int(shared_kv_lens[b // beam_width])
        rows = [first if t < prefix else b for t in range(n)]
        pages = [block_table[rows[t]][t // page_size] for t in range(n)]
        k = (
            np.stack([k_pool[pages[t], t % page_size] for t in range(n)])
            if n
            else np.zeros((0, num_kv_heads, k_pool.shape[-1]))
        )
        v = (
            np.stack([v_pool[pages[t], t % page_size] for t in range(n)])
            if n
            else np.zeros((0, num_kv_heads, v_pool.shape[-1]))
        )
        if tree_mask is None:
            mask = visibility(q_len, n, causal, window)
        else:
            mask = visibility(q_len, n, False, window)
            mask[:, n - q_len :] &= np.asarray(tree_mask[b], dtype=bool)
        out[b], lse[b] = attend(q[b], k * ks[None, :, None], v * vs[None, :, None], mask, **kw)
    return out, lse


def mla(q_nope, q_pe, ckv, kpe, cu_q, kv_lens, block_table, causal=True, scale=None):
    """q_nope [T, H, 512], q_pe [T, H, 64], ckv [P, ps, 512], kpe [P, ps, 64]."""
    q = np.concatenate([f64(q_nope), f64(q_pe)], axis=-1)
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    out = np.zeros(q_nope.shape)
    lse = np.full(q_nope.shape[:2], NEG_INF)
    for b in range(len(cu_q) - 1):
        qs, qe, n = cu_q[b], cu_q[b + 1], int(kv_lens[b])
        c = gather_pages(f64(ckv)[:, :, None], block_table[b], n)  # [n, 1, 512]
        r = gather_pages(f64(kpe)[:, :, None], block_table[b], n)
        k = np.concatenate([c, r], axis=-1)
        mask = visibility(qe - qs, n, causal)
        out[qs:qe], lse[qs:qe] = attend(q[qs:qe], k, c, mask, scale=scale)
    return out, lse


def merge_states_n(o, lse):
    """o [T, n, H, D], lse [T, n, H] -> [T, H, D], [T, H]."""
    o, lse = f64(o), f64(lse)
    mx = lse.max(axis=1)
    safe = np.where(np.isfinite(mx), mx, 0.0)
    w = np.exp(lse - safe[:, None])  # exp(-inf) = 0 for empty states
    total = w.sum(axis=1)
    weight = np.divide(w, total[:, None], out=np.zeros_like(w), where=total[:, None] > 0)
    # A state of zero weight contributes nothing, whatever its o holds (even NaN).
    out = np.where(weight[..., None] > 0, weight[..., None] * o, 0.0).sum(axis=1)
    merged = np.where(total > 0, safe + np.log(np.where(total > 0, total, 1.0)), NEG_INF)
    # A NaN lse poisons its merged row instead of counting as an empty state.
    nan = np.isnan(lse).any(axis=1)
    return np.where(nan[..., None], np.nan, out), np.where(nan, np.nan, merged)


def merge_states(o_a, lse_a, o_b, lse_b):
    return merge_states_n(np.stack([o_a, o_b], axis=1), np.stack([lse_a, lse_b], axis=1))
