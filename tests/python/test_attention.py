"""hopattn.attention (forward): dense, varlen and paged KV against the textbook implementation."""

import numpy as np
import pytest

import hopattn
import naive
from conftest import (
    assert_close,
    assert_lse,
    call,
    csr_from_table,
    head_dim,
    random_page_table,
    rounded,
    skip_unsupported,
)

# (B, Sq, Sk, Hq, Hkv): single token, odd lengths, Sq > Sk, GQA ratios 2, 2, 5.
DENSE_SHAPES = [(1, 1, 1, 1, 1), (2, 7, 13, 4, 2), (1, 13, 5, 6, 3), (3, 9, 16, 5, 1)]
OPTIONS = {
    "plain": {},
    "causal": dict(causal=True),
    "window": dict(window=(3, 0)),
    "causal-window": dict(causal=True, window=(4, -1)),
    "two-sided-window": dict(window=(2, 5)),
    "softcap": dict(softcap=5.0),
    "scale": dict(scale=0.3),
    "sinks": dict(sinks=True),
    "all": dict(causal=True, window=(6, -1), sinks=True, softcap=3.0, scale=0.2),
}


def _dtype(fw):
    return "float16" if fw.is_cuda else "float32"


def _sinks(fw, rng, opts, hq):
    """(options for hopattn, options for the naive code) with the sinks made real."""
    ours, theirs = dict(opts), dict(opts)
    if opts.get("sinks"):
        s = rng.normal(size=hq).astype(np.float32)
        ours["sinks"], theirs["sinks"] = fw.tensor(s, "float32"), s
    return ours, theirs


def _qkv(fw, rng, q_shape, k_shape, v_shape, dtype):
    arrays = [rng.normal(size=s).astype(np.float32) for s in (q_shape, k_shape, v_shape)]
    return [fw.tensor(a, dtype) for a in arrays], [rounded(fw, a, dtype) for a in arrays]


@pytest.mark.parametrize("shape", DENSE_SHAPES, ids=str)
@pytest.mark.parametrize("opt", OPTIONS)
def test_dense(fw, rng, shape, opt):
    b, sq, sk, hq, hkv = shape
    d, dtype = head_dim(fw), _dtype(fw)
    (q, k, v), (qn, kn, vn) = _qkv(fw, rng, (b, sq, hq, d), (b, sk, hkv, d), (b, sk, hkv, d), dtype)
    ours, theirs = _sinks(fw, rng, OPTIONS[opt], hq)
    out, lse = call(fw, hopattn.attention, q, k, v, **ours)
    ref_out, ref_lse = naive.attention_dense(qn, kn, vn, **theirs)
    assert tuple(out.shape) == (b, sq, hq, d) and tuple(lse.shape) == (b, sq, hq)
    assert_close(fw, out, ref_out, dtype)
    assert_lse(fw, lse, ref_lse)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_dense_dtypes(fw, rng, dtype):
    skip_unsupported(fw, dtype)
    d = head_dim(fw)
    (q, k, v), (qn, kn, vn) = _qkv(fw, rng, (2, 5, 4, d), (2, 11, 2, d), (2, 11, 2, d), dtype)
    out, lse = call(fw, hopattn.attention, q, k, v, causal=True)
    assert out.dtype == q.dtype and str(lse.dtype).endswith("float32")
    ref_out, ref_lse = naive.attention_dense(qn, kn, vn, causal=True)
    assert_close(fw, out, ref_out, dtype)
    assert_lse(fw, lse, ref_lse)


def test_value_head_dim_differs(fw, rng):
    # The CPU reference takes any Dv; the kernels have (Dqk 192, Dv 128).
    dqk, dv = (192, 128) if fw.is_cuda else (24, 8)
    dtype = _dtype(fw)
    (q, k, v), (qn, kn, vn) = _qkv(fw, rng, (1, 6, 2, dqk), (1, 9, 2, dqk), (1, 9, 2, dv), dtype)
    out, lse = call(fw, hopattn.attention, q, k, v, causal=True)
    assert tuple(out.shape) == (1, 6, 2, dv)
    ref_out, ref_lse = naive.attention_dense(qn, kn, vn, causal=True)
    assert_close(fw, out, ref_out, dtype)
    assert_lse(fw, lse, ref_lse)


# Per request (q_len, kv_len): empty q, empty kv (rows see nothing), q_len > kv_len with causal.
VARLEN = [(3, 5), (0, 4), (7, 2), (1, 9), (4, 0)]


@pytest.mark.parametrize("opt", ["plain", "causal", "causal-window", "sinks", "all"])
@pytest.mark.parametrize("give_bounds", [True, False], ids=["bounds", "no-bounds"])
def test_varlen(fw, rng, opt, give_bounds):
    if fw.is_cuda and not give_bounds:
        pytest.skip("CUDA calls need max_seqlen_q/k (see test_api)")
    q_lens, k_lens = zip(*VARLEN)
    cu_q = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(k_lens)]).astype(np.int32)
    hq, hkv, d, dtype = 4, 2, head_dim(fw), _dtype(fw)
    (q, k, v), (qn, kn, vn) = _qkv(
        fw, rng, (cu_q[-1], hq, d), (cu_k[-1], hkv, d), (cu_k[-1], hkv, d), dtype
    )
    ours, theirs = _sinks(fw, rng, OPTIONS[opt], hq)
    bounds = dict(max_seqlen_q=max(q_lens), max_seqlen_k=max(k_lens)) if give_bounds else {}
    out, lse = call(
        fw,
        hopattn.attention,
        q,
        k,
        v,
        cu_seqlens_q=fw.tensor(cu_q),
        cu_seqlens_k=fw.tensor(cu_k),
        **bounds,
        **ours,
    )
    ref_out, ref_lse = naive.attention_varlen(qn, kn, vn, cu_q, cu_k, **theirs)
    assert_close(fw, out, ref_out, dtype)
    assert_lse(fw, lse, ref_lse)


@pytest.mark.parametrize("page_size", [1, 3, 16])
@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("csr", [False, True], ids=["block-table", "csr"])
def test_paged(fw, rng, page_size, layout, csr):
    q_lens, kv_lens = [2, 5, 1], [7, 5, 20]
    cu_q = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    table, num_pages = random_page_table(rng, kv_lens, page_size)
    hq, hkv, d, dtype = 6, 2, head_dim(fw), _dtype(fw)
    pool_shape = (
        (num_pages, page_size, hkv, d) if layout == "NHD" else (num_pages, hkv, page_size, d)
    )
    (q, k, v), (qn, kn, vn) = _qkv(fw, rng, (cu_q[-1], hq, d), pool_shape, pool_shape, dtype)
    pages = (
        tuple(fw.tensor(a) for a in csr_from_table(table, kv_lens, page_size))
        if csr
        else fw.tensor(table)
    )
    out, lse = call(
        fw,
        hopattn.attention,
        q,
        k,
        v,
        causal=True,
        cu_seqlens_q=fw.tensor(cu_q),
        max_seqlen_q=max(q_lens),
        max_seqlen_k=max(kv_lens),
        page_table=pages,
        kv_lens=fw.tensor(np.array(kv_lens, np.int32)),
        kv_layout=layout,
    )
    ref_out, ref_lse = naive.attention_paged(qn, kn, vn, cu_q, table, kv_lens, layout, causal=True)
    assert_close(fw, out, ref_out, dtype)
    assert_lse(fw, lse, ref_lse)


def test_paged_matches_contiguous(fw, rng):
    """The same keys through a shuffled page pool or a contiguous varlen layout."""
    dtype, d, page_size = _dtype(fw), head_dim(fw), 4
    kv_lens, q_lens = [9, 14], [3, 14]
    cu_q = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(kv_lens)]).astype(np.int32)
    (q, k, v), (_, kn, vn) = _qkv(
        fw, rng, (cu_q[-1], 4, d), (cu_k[-1], 2, d), (cu_k[-1], 2, d), dtype
    )
    table, num_pages = random_page_table(rng, kv_lens, page_size)
    k_pool = np.zeros((num_pages, page_size, 2, d))
    v_pool = np.zeros_like(k_pool)
    for b, n in enumerate(kv_lens):
        for t in range(n):
            k_pool[table[b, t // page_size], t % page_size] = kn[cu_k[b] + t]
            v_pool[table[b, t // page_size], t % page_size] = vn[cu_k[b] + t]
    common = dict(
        causal=True,
        cu_seqlens_q=fw.tensor(cu_q),
        max_seqlen_q=max(q_lens),
        max_seqlen_k=max(kv_lens),
    )
    contiguous = call(fw, hopattn.attention, q, k, v, cu_seqlens_k=fw.tensor(cu_k), **common)
    paged = call(
        fw,
        hopattn.attention,
        q,
        fw.tensor(k_pool, dtype),
        fw.tensor(v_pool, dtype),
        page_table=fw.tensor(table),
        kv_lens=fw.tensor(np.array(kv_lens, np.int32)),
        **common,
    )
    np.testing.assert_allclose(fw.numpy(paged[0]), fw.numpy(contiguous[0]), atol=1e-6)
    np.testing.assert_allclose(fw.numpy(paged[1]), fw.numpy(contiguous[1]), atol=1e-6)


def test_non_contiguous_inputs(fw, rng):
    """Arbitrary strides on CPU: q sliced out of a packed qkv tensor."""
    if fw.is_cuda:
        pytest.skip("CUDA inputs need a unit innermost stride and 16-byte aligned strides")
    d = head_dim(fw)
    qkv = rng.normal(size=(2, 6, 3, 4, d)).astype(np.float32)
    t = fw.tensor(qkv)
    q, k, v = t[:, :, 0], t[:, :, 1], t[:, :, 2]
    out, lse = hopattn.attention(q, k, v, causal=True)
    ref_out, ref_lse = naive.attention_dense(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal=True)
    assert_close(fw, out, ref_out, "float32")
    assert_lse(fw, lse, ref_lse)
