"""hopattn.mla, hopattn.merge_states and hopattn.merge_states_n against the textbook versions."""

import numpy as np
import pytest

import hopattn
import naive
from conftest import (
    assert_close,
    assert_lse,
    call,
    csr_from_table,
    random_page_table,
    rounded,
    skip_unsupported,
)

LATENT, ROPE = 512, 64


def _dtype(fw):
    return "float16" if fw.is_cuda else "float32"


@pytest.mark.parametrize("q_lens", [[1, 1, 1], [3, 1, 6]], ids=["decode", "prefill"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("csr", [False, True], ids=["block-table", "csr"])
def test_mla(fw, rng, q_lens, causal, page_size, csr):
    _check_mla(fw, rng, q_lens, causal, page_size, csr)


# Every schedule of the CUDA kernel gives the reference's result (CPU tensors take the name and
# run the reference); a name outside the three is a ValueError before anything runs.
@pytest.mark.parametrize("schedule", ["auto", "seesaw", "one-consumer"])
def test_mla_schedule(fw, rng, schedule):
    _check_mla(fw, rng, [2, 1, 3], True, 64, False, schedule=schedule)


def test_mla_schedule_name(fw, rng):
    with pytest.raises(ValueError, match="schedule"):
        _check_mla(fw, rng, [1, 1, 1], True, 16, False, schedule="fast")


def _check_mla(fw, rng, q_lens, causal, page_size, csr, **options):
    kv_lens, heads, dtype = [7, 6, 20], 4, _dtype(fw)
    cu_q = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    table, num_pages = random_page_table(rng, kv_lens, page_size)
    arrays = dict(
        q_nope=(cu_q[-1], heads, LATENT),
        q_pe=(cu_q[-1], heads, ROPE),
        ckv=(num_pages, page_size, LATENT),
        kpe=(num_pages, page_size, ROPE),
    )
    data = {name: rng.normal(size=shape).astype(np.float32) for name, shape in arrays.items()}
    t = {name: fw.tensor(a, dtype) for name, a in data.items()}
    pages = (
        tuple(fw.tensor(a) for a in csr_from_table(table, kv_lens, page_size))
        if csr
        else fw.tensor(table)
    )
    out, lse = call(
        fw,
        hopattn.mla,
        t["q_nope"],
        t["q_pe"],
        t["ckv"],
        t["kpe"],
        fw.tensor(cu_q),
        fw.tensor(np.array(kv_lens, np.int32)),
        pages,
        causal=causal,
        max_seqlen_q=max(q_lens),
        **options,
    )
    n = {name: rounded(fw, a, dtype) for name, a in data.items()}
    ref_out, ref_lse = naive.mla(
        n["q_nope"], n["q_pe"], n["ckv"], n["kpe"], cu_q, kv_lens, table, causal=causal
    )
    assert tuple(out.shape) == (cu_q[-1], heads, LATENT)
    assert_close(fw, out, ref_out, dtype)
    assert_lse(fw, lse, ref_lse)


def _states(rng, shape, empty_fraction=0.2):
    """Partial states: o [.., H, D] and lse [.., H] with some empty (lse = -inf, o = NaN, which
    must never leak)."""
    o = rng.normal(size=shape).astype(np.float32)
    lse = (rng.normal(size=shape[:-1]) * 3).astype(np.float32)
    empty = rng.random(shape[:-1]) < empty_fraction
    lse[empty] = -np.inf
    o[empty] = np.nan
    return o, lse


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_merge_states(fw, rng, dtype):
    skip_unsupported(fw, dtype)
    (o_a, lse_a), (o_b, lse_b) = _states(rng, (13, 3, 40)), _states(rng, (13, 3, 40))
    lse_a[0, 0] = lse_b[0, 0] = -np.inf  # both empty: an empty state comes out
    o_a[0, 0] = o_b[0, 0] = np.nan
    out, lse = call(
        fw,
        hopattn.merge_states,
        fw.tensor(o_a, dtype),
        fw.tensor(lse_a),
        fw.tensor(o_b, dtype),
        fw.tensor(lse_b),
    )
    ref_out, ref_lse = naive.merge_states(
        rounded(fw, o_a, dtype), lse_a, rounded(fw, o_b, dtype), lse_b
    )
    assert_close(fw, out, ref_out, dtype)
    assert_lse(fw, lse, ref_lse)
    assert np.isneginf(fw.numpy(lse)[0, 0]) and (fw.numpy(out)[0, 0] == 0).all()


@pytest.mark.parametrize("n", [1, 2, 5])
def test_merge_states_n(fw, rng, n):
    dtype = _dtype(fw)
    o, lse = _states(rng, (9, n, 2, 24))
    out, merged = call(fw, hopattn.merge_states_n, fw.tensor(o, dtype), fw.tensor(lse))
    assert tuple(out.shape) == (9, 2, 24) and tuple(merged.shape) == (9, 2)
    ref_out, ref_lse = naive.merge_states_n(rounded(fw, o, dtype), lse)
    assert_close(fw, out, ref_out, dtype)
    assert_lse(fw, merged, ref_lse)


def test_split_kv_merge_equals_whole(fw, rng):
    """Attention over keys [0, a) merged with [a, n) equals attention over [0, n)."""
    dtype, d = ("float16", 128) if fw.is_cuda else ("float32", 16)
    q = fw.tensor(rng.normal(size=(1, 5, 4, d)), dtype)
    k = fw.tensor(rng.normal(size=(1, 23, 2, d)), dtype)
    v = fw.tensor(rng.normal(size=(1, 23, 2, d)), dtype)
    whole, whole_lse = call(fw, hopattn.attention, q, k, v)
    first = call(fw, hopattn.attention, q, k[:, :9], v[:, :9])
    second = call(fw, hopattn.attention, q, k[:, 9:], v[:, 9:])
    flat = [
        x.reshape(5, 4, -1) if i % 2 == 0 else x.reshape(5, 4)
        for i, x in enumerate((*first, *second))
    ]
    out, lse = call(fw, hopattn.merge_states, *flat)
    assert_close(fw, out, fw.numpy(whole).reshape(5, 4, d), dtype, scale=2)
    assert_lse(fw, lse, fw.numpy(whole_lse).reshape(5, 4))
