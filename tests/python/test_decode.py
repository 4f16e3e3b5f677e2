"""hopattn.decode: paged generation attention against the textbook implementation."""

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

KV_LENS = [17, 0, 5, 33]  # an idle slot (0) in the middle of the batch


def _q_dtype(fw):
    return "float16" if fw.is_cuda else "float32"


def _cache(rng, table_pages, page_size, hkv, d, layout):
    shape = (
        (table_pages, page_size, hkv, d) if layout == "NHD" else (table_pages, hkv, page_size, d)
    )
    return rng.normal(size=shape).astype(np.float32)


def _problem(
    fw, rng, q_len, page_size, layout, kv_lens=KV_LENS, hq=4, hkv=2, dtype=None, cache_dtype=None
):
    dtype = dtype or _q_dtype(fw)
    cache_dtype = cache_dtype or dtype
    d = head_dim(fw)
    table, num_pages = random_page_table(rng, kv_lens, page_size)
    q = rng.normal(size=(len(kv_lens), q_len, hq, d)).astype(np.float32)
    k = _cache(rng, num_pages, page_size, hkv, d, layout)
    v = _cache(rng, num_pages, page_size, hkv, d, layout)
    tensors = dict(
        q=fw.tensor(q, dtype),
        k_cache=fw.tensor(k, cache_dtype),
        v_cache=fw.tensor(v, cache_dtype),
        kv_lens=fw.tensor(np.array(kv_lens, np.int32)),
        page_table=fw.tensor(table),
    )
    oracle = dict(
        q=rounded(fw, q, dtype),
        k_cache=rounded(fw, k, cache_dtype),
        v_cache=rounded(fw, v, cache_dtype),
        kv_lens=kv_lens,
        block_table=table,
    )
    return tensors, oracle, dtype


OPTIONS = {
    "causal": {},
    "non-causal": dict(causal=False),
    "window": dict(window=(6, -1)),
    "softcap-scale": dict(softcap=4.0, scale=0.25),
}


@pytest.mark.parametrize("page_size", [1, 5, 16])
@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("q_len", [1, 3])
@pytest.mark.parametrize("opt", OPTIONS)
def test_decode(fw, rng, page_size, layout, q_len, opt):
    tensors, oracle, dtype = _problem(fw, rng, q_len, page_size, layout)
    out, lse = call(fw, hopattn.decode, *tensors.values(), kv_layout=layout, **OPTIONS[opt])
    ref_out, ref_lse = naive.decode(*oracle.values(), layout=layout, **OPTIONS[opt])
    assert tuple(out.shape) == tuple(tensors["q"].shape)
    assert_close(fw, out, ref_out, dtype)
    assert_lse(fw, lse, ref_lse)


@pytest.mark.parametrize("gqa", [(1, 1), (6, 2), (7, 1), (10, 2)], ids=str)
def test_decode_gqa(fw, rng, gqa):
    hq, hkv = gqa
    tensors, oracle, dtype = _problem(fw, rng, 2, 8, "NHD", hq=hq, hkv=hkv)
    sinks = rng.normal(size=hq).astype(np.float32)
    out, lse = call(fw, hopattn.decode, *tensors.values(), sinks=fw.tensor(sinks))
    ref_out, ref_lse = naive.decode(*oracle.values(), sinks=sinks)
    assert_close(fw, out, ref_out, dtype)
    assert_lse(fw, lse, ref_lse)


@pytest.mark.parametrize("cache_dtype", ["int8", "float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("scales", ["none", "per-tensor", "per-head"])
def test_decode_8bit_cache(fw, rng, cache_dtype, scales):
    skip_unsupported(fw, cache_dtype)
    hkv = 2
    tensors, oracle, dtype = _problem(fw, rng, 1, 16, "NHD", hkv=hkv, cache_dtype=cache_dtype)
    if cache_dtype == "int8":
        for name in ("k_cache", "v_cache"):  # int8 values span the range, not N(0, 1) rounded
            stored = rng.integers(-127, 128, size=tuple(tensors[name].shape)).astype(np.int8)
            tensors[name], oracle[name] = fw.tensor(stored), stored.astype(np.float64)
    kw, ref_kw = {}, {}
    if scales == "per-tensor":
        kw = ref_kw = dict(k_scale=0.02, v_scale=0.5)
    elif scales == "per-head":
        k_scale = np.array([0.01, 0.03], np.float32)
        v_scale = np.array([0.2, 0.7], np.float32)
        kw = dict(k_scale=fw.tensor(k_scale), v_scale=fw.tensor(v_scale))
        ref_kw = dict(k_scale=k_scale, v_scale=v_scale)
    out, lse = call(fw, hopattn.decode, *tensors.values(), **kw)
    ref_out, ref_lse = naive.decode(*oracle.values(), **ref_kw)
    if fw.is_cuda:  # DESIGN.md: relative L2 error <= 2e-2 on the dequantized cache
        got = fw.numpy(out)
        assert np.linalg.norm(got - ref_out) <= 2e-2 * np.linalg.norm(ref_out)
    else:
        assert_close(fw, out, ref_out, dtype)
    assert_lse(fw, lse, ref_lse)


def test_decode_tree_mask(fw, rng):
    q_len = 4
    tensors, oracle, dtype = _problem(fw, rng, q_len, 4, "NHD", kv_lens=[9, 4, 12])
    tree = rng.random((3, q_len, q_len)) < 0.5
    tree |= np.eye(q_len, dtype=bool)  # each draft sees itself
    out, lse = call(fw, hopattn.decode, *tensors.values(), tree_mask=fw.tensor(tree))
    ref_out, ref_lse = naive.decode(*oracle.values(), tree_mask=tree)
    assert_close(fw, out, ref_out, dtype)
    assert_lse(fw, lse, ref_lse)


@pytest.mark.parametrize("beam_width", [2, 3])
def test_decode_beams_share_prefix(fw, rng, beam_width):
    """Beams read their shared prefix through the first beam's pages: the other beams' table
    entries for it point at unrelated pages, which must not be read."""
    page_size = 4  # two requests
    kv_lens = {2: [13, 13, 11, 11], 3: [13, 12, 14, 9, 11, 10]}[beam_width]
    shared = np.array([6, 8], np.int32)  # the first is not page-aligned
    tensors, oracle, dtype = _problem(fw, rng, 1, page_size, "NHD", kv_lens=kv_lens)
    out, lse = call(
        fw,
        hopattn.decode,
        *tensors.values(),
        beam_width=beam_width,
        shared_kv_lens=fw.tensor(shared),
    )
    ref_out, ref_lse = naive.decode(*oracle.values(), beam_width=beam_width, shared_kv_lens=shared)
    assert_close(fw, out, ref_out, dtype)
    assert_lse(fw, lse, ref_lse)


def test_decode_csr_pages(fw, rng):
    tensors, oracle, dtype = _problem(fw, rng, 2, 3, "HND")
    indptr, indices = csr_from_table(oracle["block_table"], KV_LENS, 3)
    tensors["page_table"] = (fw.tensor(indptr), fw.tensor(indices))
    out, lse = call(fw, hopattn.decode, *tensors.values(), kv_layout="HND")
    ref_out, ref_lse = naive.decode(*oracle.values(), layout="HND")
    assert_close(fw, out, ref_out, dtype)
    assert_lse(fw, lse, ref_lse)


@pytest.mark.parametrize("num_splits", [None, 1, 3, 64])
def test_decode_num_splits_same_result(fw, rng, num_splits):
    tensors, oracle, dtype = _problem(fw, rng, 1, 16, "NHD", kv_lens=[300, 1, 77])
    out, lse = call(fw, hopattn.decode, *tensors.values(), num_splits=num_splits)
    ref_out, ref_lse = naive.decode(*oracle.values())
    assert_close(fw, out, ref_out, dtype)
    assert_lse(fw, lse, ref_lse)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_decode_16bit(fw, rng, dtype):
    skip_unsupported(fw, dtype)
    tensors, oracle, _ = _problem(fw, rng, 2, 16, "NHD", dtype=dtype)
    out, lse = call(fw, hopattn.decode, *tensors.values())
    assert out.dtype == tensors["q"].dtype
    ref_out, ref_lse = naive.decode(*oracle.values())
    assert_close(fw, out, ref_out, dtype)
    assert_lse(fw, lse, ref_lse)
