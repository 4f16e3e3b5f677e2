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


# ---------------------------------------------------------------------------- overlapping outputs
def _qkv(rng):
    return _randn(rng, 1, 3, 2, 8), _randn(rng, 1, 4, 1, 8), _randn(rng, 1, 4, 1, 8)


def test_zero_stride_out_is_rejected(rng):
    q, k, v = _qkv(rng)
    out = np.lib.stride_tricks.as_strided(np.zeros(8, np.float32), (1, 3, 2, 8), (0, 0, 0, 4))
    with pytest.raises(ValueError, match="out: expected an output whose elements do not overlap"):
        hopattn.attention(q, k, v, out=out)


def test_lse_in_out_memory_is_rejected(rng):
    q, k, v = _qkv(rng)
    out = np.zeros((1, 3, 2, 8), np.float32)
    lse = out.reshape(-1)[:6].reshape(1, 3, 2)
    with pytest.raises(ValueError, match="lse: expected memory disjoint from out"):
        hopattn.attention(q, k, v, out=out, lse_out=lse)


def test_gradients_may_not_overlap_but_packed_ones_may(rng):
    q, k, v = _qkv(rng)
    dout = _randn(rng, 1, 3, 2, 8)
    out, lse = hopattn.attention(q, k, v)
    dkv = np.zeros((1, 4, 2, 1, 8), np.float32)  # dk and dv side by side: disjoint views
    _, dk, dv, _ = hopattn.attention_backward(
        dout, q, k, v, out, lse, dk=dkv[:, :, 0], dv=dkv[:, :, 1]
    )
    want = naive.attention_dense_backward(q, k, v, dout)
    np.testing.assert_allclose(dk, want[1], atol=1e-5)
    np.testing.assert_allclose(dv, want[2], atol=1e-5)
    with pytest.raises(ValueError, match="dv: expected memory disjoint from dk"):
        hopattn.attention_backward(dout, q, k, v, out, lse, dk=dkv[:, :, 0], dv=dkv[:, :, 0])


def test_outputs_never_alias_inputs(rng):
    q, k, v = _qkv(rng)
    with pytest.raises(ValueError, match="out: expected memory disjoint from the input q"):
        hopattn.attention(q, k, v, out=q)
    o, lse = _randn(rng, 3, 2, 4), _randn(rng, 3, 2)
    with pytest.raises(ValueError, match="no output may alias an input"):
        hopattn.merge_states(o, lse, o.copy(), lse.copy(), out=o)  # no in-place merge


def test_torch_expanded_out_is_rejected(rng):
    torch = pytest.importorskip("torch")
    q, k, v = (torch.from_numpy(x) for x in _qkv(rng))
    out = torch.zeros(1, 1, 2, 8).expand(1, 3, 2, 8)
    with pytest.raises(ValueError, match="out: expected an output whose elements do not overlap"):
        hopattn.attention(q, k, v, out=out)


# ---------------------------------------------------------------------------- host-visible values
@pytest.mark.parametrize("bad", [NAN, np.inf, 0.0, -1.0])
@pytest.mark.parametrize("which", ["k_scale", "v_scale"])
def test_bad_per_head_scales_are_rejected_like_the_scalar(rng, bad, which):
    q, k_cache, v_cache, kv_lens, table = _decode_case(rng)
    with pytest.raises(ValueError, match=f"{which}: expected a finite value > 0"):
        hopattn.decode(q, k_cache, v_cache, kv_lens, table, **{which: bad})
    scales = np.array([1.0, bad], np.float32)
    with pytest.raises(ValueError, match=rf"{which}\[1\]: expected a finite value > 0"):
        hopattn.decode(q, k_cache, v_cache, kv_lens, table, **{which: scales})


@pytest.mark.parametrize("bad", [NAN, np.inf])
def test_nan_or_infinite_sinks_are_rejected(rng, bad):
    q, k, v = _qkv(rng)
    sinks = np.array([0.5, bad], np.float32)
    match = r"sinks\[1\]: expected a finite logit or -inf \(no sink\)"
    with pytest.raises(ValueError, match=match):
        hopattn.attention(q, k, v, sinks=sinks)
    qd, k_cache, v_cache, kv_lens, table = _decode_case(rng)
    with pytest.raises(ValueError, match=match):
        hopattn.decode(
            qd, k_cache, v_cache, kv_lens, table, sinks=np.array([0, bad, 0, 0], np.float32)
        )


def test_minus_infinity_sink_means_no_sink(rng):
    q, k, v = _qkv(rng)
    out, lse = hopattn.attention(q, k, v, sinks=np.full(2, -np.inf, np.float32))
    want_out, want_lse = hopattn.attention(q, k, v)
    np.testing.assert_allclose(out, want_out, atol=1e-6)
    np.testing.assert_allclose(lse, want_lse, atol=1e-6)


# ---------------------------------------------------------------------------- sizes
def test_more_keys_than_int32_is_a_hopattn_error_not_memory_error(rng):
    q = _randn(rng, 1, 1, 1, 4)
    # 2^31 + 1 keys of one repeated row: no memory behind them, but the count is what matters
    k = np.lib.stride_tricks.as_strided(np.ones(4, np.float32), (1, 2**31 + 1, 1, 4), (0, 0, 0, 4))
    with pytest.raises(ValueError, match=r"k: expected at most 2147483647 keys \(token counts"):
        hopattn.attention(q, k, k, window=(0, 0))


# ---------------------------------------------------------------------------- tensor import errors
def _varlen(rng):
    q, k = _randn(rng, 3, 2, 8), _randn(rng, 4, 1, 8)
    return q, k, np.array([0, 3], np.int32), np.array([0, 4], np.int32)


def test_int64_index_tensors_say_expected_int32(rng):
    q, k, cu_q, cu_k = _varlen(rng)
    with pytest.raises(TypeError, match="^cu_seqlens_q: expected int32, got int64$"):
        hopattn.attention(q, k, k, cu_seqlens_q=cu_q.astype(np.int64), cu_seqlens_k=cu_k)
    qd, k_cache, v_cache, kv_lens, table = _decode_case(rng)
    with pytest.raises(TypeError, match="^kv_lens: expected int32, got int64$"):
        hopattn.decode(qd, k_cache, v_cache, kv_lens.astype(np.int64), table)
    with pytest.raises(TypeError, match="^page_table: expected int32, got int64$"):
        hopattn.decode(qd, k_cache, v_cache, kv_lens, table.astype(np.int64))
    with pytest.raises(TypeError, match="^page_indices: expected int32, got uint32$"):
        pages = (np.array([0, 3], np.int32), np.array([1, 0, 2], np.uint32))
        hopattn.decode(qd, k_cache, v_cache, kv_lens, pages)


def test_unsupported_dtypes_are_named_plainly(rng):
    q, k, v = _qkv(rng)
    with pytest.raises(TypeError, match=r"^q: from_dlpack: expected bf16, .* got float64$"):
        hopattn.attention(q.astype(np.float64), k, v)
    with pytest.raises(TypeError, match=r"got complex64$"):
        hopattn.attention(q, k.astype(np.complex64), v)


def test_big_endian_arrays_ask_for_native_byte_order(rng):
    q, k, v = _qkv(rng)
    with pytest.raises(
        TypeError, match=r"^q: expected native byte order, got a byte-swapped array"
    ):
        hopattn.attention(q.astype(">f4"), k, v)
    out = np.zeros((1, 3, 2, 8), ">f4")
    with pytest.raises(TypeError, match=r"^out: expected native byte order"):
        hopattn.attention(q, k, v, out=out)


# ---------------------------------------------------------------------------- argument errors
@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"window": (2**40, -1)}, r"^window: expected ints in -1\.\.2147483647"),
        ({"window": (0, -(2**40))}, r"^window: expected ints in -1\.\.2147483647"),
        ({"causal": "false"}, None),
        ({"causal": None}, None),
        ({"deterministic": "yes"}, None),
    ],
)
def test_attention_options_out_of_range_or_of_the_wrong_type(rng, kwargs, match):
    q, k, v = _qkv(rng)
    if match is None:
        name = next(iter(kwargs))
        with pytest.raises(TypeError, match=rf"^{name}: expected a bool, got "):
            hopattn.attention(q, k, v, **kwargs)
    else:
        with pytest.raises(ValueError, match=match):
            hopattn.attention(q, k, v, **kwargs)


@pytest.mark.parametrize("name", ["max_seqlen_q", "max_seqlen_k"])
@pytest.mark.parametrize("value", [2**40, -5])
def test_max_seqlen_out_of_range(rng, name, value):
    q, k, cu_q, cu_k = _varlen(rng)
    with pytest.raises(ValueError, match=rf"^{name}: expected an int in 0\.\.2147483647 or None"):
        hopattn.attention(q, k, k, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, **{name: value})


def test_causal_accepts_numpy_bools(rng):
    q, k, v = _qkv(rng)
    out, _ = hopattn.attention(q, k, v, causal=np.bool_(True))
    np.testing.assert_allclose(out, hopattn.attention(q, k, v, causal=True)[0])


def test_decode_and_mla_options(rng):
    q, k_cache, v_cache, kv_lens, table = _decode_case(rng)
    page_msg = r"^page_table: expected a block table int32 \[B, max_pages\] or a pair"
    with pytest.raises(TypeError, match=page_msg):
        hopattn.decode(q, k_cache, v_cache, kv_lens, None)
    with pytest.raises(ValueError, match=r"^beam_width: expected an int in "):
        hopattn.decode(q, k_cache, v_cache, kv_lens, table, beam_width=2**40)
    with pytest.raises(ValueError, match=r"^num_splits: expected an int in "):
        hopattn.decode(q, k_cache, v_cache, kv_lens, table, num_splits=-(2**40))
    with pytest.raises(TypeError, match=r"^causal: expected a bool, got str"):
        hopattn.decode(q, k_cache, v_cache, kv_lens, table, causal="false")
    q_nope, q_pe = _randn(rng, 1, 1, 512), _randn(rng, 1, 1, 64)
    ckv, kpe = _randn(rng, 1, 4, 512), _randn(rng, 1, 4, 64)
    cu, lens = np.array([0, 1], np.int32), np.array([3], np.int32)
    with pytest.raises(TypeError, match=page_msg):
        hopattn.mla(q_nope, q_pe, ckv, kpe, cu, lens, None)
    with pytest.raises(ValueError, match=r"^max_seqlen_q: expected an int in 0\.\.2147483647"):
        hopattn.mla(q_nope, q_pe, ckv, kpe, cu, lens, np.array([[0]], np.int32), max_seqlen_q=-5)


# ---------------------------------------------------------------------------- frameworks
class _Foreign:
    """An array of another framework: DLPack-capable, but not numpy's."""

    def __init__(self, a):
        self._a, self.shape, self.dtype = a, a.shape, a.dtype

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_tensors_of_one_call_come_from_one_framework(rng):
    q, k, v = _qkv(rng)
    match = r"^k: expected a tensor of q's framework \(numpy\), got test_reliability\._Foreign"
    with pytest.raises(TypeError, match=match):
        hopattn.attention(q, _Foreign(k), v)
    qv, kv, cu_q, cu_k = _varlen(rng)
    with pytest.raises(TypeError, match=r"^cu_seqlens_k: expected a tensor of q's framework"):
        hopattn.attention(qv, kv, kv, cu_seqlens_q=cu_q, cu_seqlens_k=_Foreign(cu_k))
    qd, k_cache, v_cache, kv_lens, table = _decode_case(rng)
    with pytest.raises(TypeError, match=r"^page_indices: expected a tensor of q's framework"):
        pages = (np.array([0, 3], np.int32), _Foreign(np.array([1, 0, 2], np.int32)))
        hopattn.decode(qd, k_cache, v_cache, kv_lens, pages)
    with pytest.raises(TypeError, match=r"^k_scale: expected a tensor of q's framework"):
        hopattn.decode(qd, k_cache, v_cache, kv_lens, table, k_scale=_Foreign(np.ones(2, "f4")))
    o, lse = _randn(rng, 3, 2, 4), _randn(rng, 3, 2)
    with pytest.raises(TypeError, match=r"^lse_out: expected a tensor of o_a's framework"):
        hopattn.merge_states(o, lse, o, lse, lse_out=_Foreign(np.zeros((3, 2), "f4")))


def test_torch_q_with_numpy_k(rng):
    torch = pytest.importorskip("torch")
    q, k, v = _qkv(rng)
    with pytest.raises(TypeError, match=r"^k: expected a tensor of q's framework \(torch\)"):
        hopattn.attention(torch.from_numpy(q), k, torch.from_numpy(v))
