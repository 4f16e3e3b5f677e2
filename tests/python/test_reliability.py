"""Hostile inputs on the CPU path: NaN propagation (never an empty row), overlapping and aliased
outputs, host-visible scale and sink values, and error messages for wrong argument types."""

import numpy as np
import pytest

import hopattn
import naive

NAN = np.nan


def _same(got, want, what):
    """NaN in the same places, equal infinities, close elsewhere."""
    got = np.asarray(got, np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{what}: NaN places")
    finite = ~np.isnan(want)
    np.testing.assert_allclose(got[finite], want[finite], atol=1e-5, rtol=1e-5, err_msg=what)


def _randn(rng, *shape):
    return rng.normal(size=shape).astype(np.float32)


# ---------------------------------------------------------------------------- NaN
def test_nan_query_is_not_an_empty_row():
    q = np.full((1, 1, 1, 4), NAN, np.float32)
    k = np.ones((1, 2, 1, 4), np.float32)
    out, lse = hopattn.attention(q, k, k)
    assert np.isnan(out).all() and np.isnan(lse).all()
    want_out, want_lse = naive.attention_dense(q, k, k)
    _same(out, want_out, "out")
    _same(lse, want_lse, "lse")


@pytest.mark.parametrize("where", ["q", "k", "v", "k_masked", "v_masked"])
def test_attention_nan_reaches_the_rows_that_read_it(rng, where):
    q, k, v = _randn(rng, 1, 3, 2, 8), _randn(rng, 1, 4, 1, 8), _randn(rng, 1, 4, 1, 8)
    # causal, bottom-right: query i sees keys 0..i+1; key 3 is seen by query 2 only
    {
        "q": lambda: q.__setitem__((0, 1, 0, 3), NAN),
        "k": lambda: k.__setitem__((0, 0, 0, 5), NAN),
        "v": lambda: v.__setitem__((0, 2, 0, 1), NAN),
        "k_masked": lambda: k.__setitem__((0, 3, 0, 0), NAN),
        "v_masked": lambda: v.__setitem__((0, 3, 0, 7), NAN),
    }[where]()
    out, lse = hopattn.attention(q, k, v, causal=True)
    want_out, want_lse = naive.attention_dense(q, k, v, causal=True)
    _same(out, want_out, "out")
    _same(lse, want_lse, "lse")
    assert np.isnan(out).any()
    if where.endswith("masked"):
        assert not np.isnan(out[0, :2]).any(), "queries 0 and 1 never see key 3"


def test_attention_backward_nan_row_gives_nan_gradients(rng):
    q, k, v = _randn(rng, 1, 3, 1, 8), _randn(rng, 1, 4, 1, 8), _randn(rng, 1, 4, 1, 8)
    dout = _randn(rng, 1, 3, 1, 8)
    q[0, 0, 0, 2] = NAN  # query 0 sees keys 0..1
    out, lse = hopattn.attention(q, k, v, causal=True)
    dq, dk, dv, _ = hopattn.attention_backward(dout, q, k, v, out, lse, causal=True)
    want = naive.attention_dense_backward(q, k, v, dout, causal=True)
    for got, w, what in zip((dq, dk, dv), want, ("dq", "dk", "dv")):
        _same(got, w, what)
    assert np.isnan(dq[0, 0]).all() and not np.isnan(dq[0, 1:]).any()
    assert np.isnan(dk[0, :2]).all() and not np.isnan(dk[0, 2:]).any()


def _decode_case(rng):
    k_cache, v_cache = _randn(rng, 3, 4, 2, 8), _randn(rng, 3, 4, 2, 8)
    k_cache[2, 1:], v_cache[2, 1:] = NAN, NAN  # slots past kv_len 9
    table = np.array([[1, 0, 2]], np.int32)
    kv_lens = np.array([9], np.int32)
    return _randn(rng, 1, 2, 4, 8), k_cache, v_cache, kv_lens, table


@pytest.mark.parametrize("where", ["none", "q", "k", "v_outside_window"])
def test_decode_nan(rng, where):
    q, k_cache, v_cache, kv_lens, table = _decode_case(rng)
    if where == "q":
        q[0, 1, 3, 0] = NAN
    elif where == "k":
        k_cache[0, 2, 1, 4] = NAN  # token 6 of kv head 1
    elif where == "v_outside_window":
        v_cache[1, 0, 0, 0] = NAN  # token 0: left of every query's window
    out, lse = hopattn.decode(q, k_cache, v_cache, kv_lens, table, window=(4, -1))
    want_out, want_lse = naive.decode(q, k_cache, v_cache, kv_lens, table, window=(4, -1))
    _same(out, want_out, "out")
    _same(lse, want_lse, "lse")
    assert np.isnan(lse).any() == (where in ("q", "k"))


def test_mla_nan_query_row(rng):
    q_nope, q_pe = _randn(rng, 2, 2, 512), _randn(rng, 2, 2, 64)
    ckv, kpe = _randn(rng, 1, 8, 512), _randn(rng, 1, 8, 64)
    q_pe[1, 0, 3] = NAN
    ckv[0, 5:] = NAN  # past kv_len 5
    args = (np.array([0, 2], np.int32), np.array([5], np.int32), np.array([[0]], np.int32))
    out, lse = hopattn.mla(q_nope, q_pe, ckv, kpe, *args)
    want_out, want_lse = naive.mla(q_nope, q_pe, ckv, kpe, *args)
    _same(out, want_out, "out")
    _same(lse, want_lse, "lse")
    assert np.isnan(lse).tolist() == [[False, False], [True, False]]


def test_merge_nan_lse_is_not_an_empty_state(rng):
    o = _randn(rng, 3, 2, 2, 4)
    lse = _randn(rng, 3, 2, 2)
    lse[1, 0, 1] = NAN
    out, merged = hopattn.merge_states_n(o, lse)
    want_out, want_lse = naive.merge_states_n(o, lse)
    _same(out, want_out, "out")
    _same(merged, want_lse, "lse")
    assert np.isnan(merged[1, 1])
