"""The Python API's contract: keyword-only options, errors and their messages, out= buffers,
outputs in the caller's framework, lazy torch import, documentation."""

import inspect
import subprocess
import sys

import numpy as np
import pytest

import hopattn
from conftest import call, head_dim, random_page_table


def _qkv(fw, rng, b=1, sq=4, sk=6, hq=4, hkv=2, d=None, dtype=None):
    d = d or head_dim(fw)
    dtype = dtype or ("float16" if fw.is_cuda else "float32")
    make = lambda *s: fw.tensor(rng.normal(size=s), dtype)  # noqa: E731
    return make(b, sq, hq, d), make(b, sk, hkv, d), make(b, sk, hkv, d)


# ---------------------------------------------------------------------------- signatures
PUBLIC = {
    "attention": ["q", "k", "v"],
    "attention_backward": ["dout", "q", "k", "v", "out", "lse"],
    "decode": ["q", "k_cache", "v_cache", "kv_lens", "page_table"],
    "mla": ["q_nope", "q_pe", "ckv", "kpe", "cu_seqlens_q", "kv_lens", "page_table"],
    "merge_states": ["o_a", "lse_a", "o_b", "lse_b"],
    "merge_states_n": ["o", "lse"],
}


@pytest.mark.parametrize("name", PUBLIC)
def test_keyword_only_past_the_tensors(name):
    params = inspect.signature(getattr(hopattn, name)).parameters.values()
    positional = [p.name for p in params if p.kind == p.POSITIONAL_OR_KEYWORD]
    assert positional == PUBLIC[name]
    assert all(p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in params)


def test_design_signatures():
    """DESIGN.md's names and defaults (extensions only add keywords)."""
    a = inspect.signature(hopattn.attention).parameters
    assert a["causal"].default is False and a["window"].default == (-1, -1)
    assert a["softcap"].default == 0.0 and a["scale"].default is None
    assert a["deterministic"].default is False
    for name in ("sinks", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k"):
        assert a[name].default is None
    d = inspect.signature(hopattn.decode).parameters
    assert d["causal"].default is True and d["kv_layout"].default == "NHD"
    assert d["beam_width"].default == 1
    for name in ("k_scale", "v_scale", "tree_mask", "shared_kv_lens", "num_splits", "sinks"):
        assert d[name].default is None


def test_positional_option_is_rejected(rng):
    from conftest import Framework

    q, k, v = _qkv(Framework("numpy"), rng)
    with pytest.raises(TypeError):
        hopattn.attention(q, k, v, True)


@pytest.mark.parametrize("name", list(PUBLIC) + ["support_matrix"])
def test_docstrings_say_shapes(name):
    doc = getattr(hopattn, name).__doc__
    assert doc and len(doc) > 80
    if name in ("attention", "decode", "mla"):
        assert "[" in doc and "Returns" in doc


def test_help_decode_is_enough():
    doc = hopattn.decode.__doc__
    for word in (
        "q_len",
        "page_size",
        "kv_lens",
        "page_table",
        "k_scale",
        "tree_mask",
        "beam_width",
        "shared_kv_lens",
        "float8_e4m3fn",
        "int8",
        "HND",
        "lse",
    ):
        assert word in doc, word


def test_import_does_not_import_torch():
    code = "import sys, hopattn; assert 'torch' not in sys.modules; print(hopattn.__version__)"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------------------- errors
def test_bad_shape_is_value_error_with_expected_and_given(fw, rng):
    q, k, v = _qkv(fw, rng, hq=4, hkv=3)  # Hkv must divide Hq
    with pytest.raises(ValueError, match=r"expected .*, got .*3"):
        call(fw, hopattn.attention, q, k, v)


def test_mismatched_v_is_value_error(fw, rng):
    q, k, _ = _qkv(fw, rng, sk=6)
    _, _, v = _qkv(fw, rng, sk=5)
    with pytest.raises(ValueError, match=r"v.*expected.*got"):
        call(fw, hopattn.attention, q, k, v)


def test_bad_dtype_is_type_error(fw, rng):
    q, k, v = _qkv(fw, rng)
    k = fw.tensor(fw.numpy(k), "int32")
    with pytest.raises(TypeError, match=r"expected .*, got int32"):
        call(fw, hopattn.attention, q, k, v)


def test_unsupported_dlpack_dtype_is_type_error():
    q = np.zeros((1, 2, 2, 16))  # float64: no attention dtype
    with pytest.raises(TypeError, match="q: .*expected .*got float64$"):
        hopattn.attention(q, q, q)


def test_not_a_tensor_is_type_error():
    with pytest.raises(TypeError, match="expected a tensor supporting DLPack"):
        hopattn.attention([[1.0]], [[1.0]], [[1.0]])


def test_bad_option_values(rng):
    from conftest import Framework

    q, k, v = _qkv(Framework("numpy"), rng)
    with pytest.raises(ValueError, match="kv_layout"):
        hopattn.attention(q, k, v, kv_layout="NDH")
    with pytest.raises(TypeError, match="window"):
        hopattn.attention(q, k, v, window=3)
    with pytest.raises(ValueError, match="softcap"):
        hopattn.attention(q, k, v, softcap=-1.0)


def test_decode_q_len_limit(fw, rng):
    table, pages = random_page_table(rng, [20], 16)
    d = head_dim(fw)
    dtype = "float16" if fw.is_cuda else "float32"
    q = fw.tensor(rng.normal(size=(1, 17, 2, d)), dtype)
    cache = fw.tensor(rng.normal(size=(pages, 16, 2, d)), dtype)
    with pytest.raises(ValueError, match=r"q_len in 1\.\.16.*17"):
        call(
            fw,
            hopattn.decode,
            q,
            cache,
            cache,
            fw.tensor(np.array([20], np.int32)),
            fw.tensor(table),
        )


def test_page_index_out_of_range(rng):
    from conftest import Framework

    fw = Framework("numpy")
    q = fw.tensor(rng.normal(size=(1, 1, 2, 16)), "float32")
    cache = fw.tensor(rng.normal(size=(2, 4, 2, 16)), "float32")
    table = np.array([[0, 5]], np.int32)  # page 5 of a 2-page pool
    with pytest.raises(ValueError, match="page"):
        hopattn.decode(q, cache, cache, np.array([7], np.int32), table)


def test_nothing_written_on_error(fw, rng):
    q, k, v = _qkv(fw, rng, hq=4, hkv=3)
    out = fw.tensor(np.full((1, 4, 4, q.shape[-1]), 7.0), str(q.dtype).split(".")[-1])
    lse = fw.tensor(np.full((1, 4, 4), 7.0), "float32")
    with pytest.raises(ValueError):
        call(fw, hopattn.attention, q, k, v, out=out, lse_out=lse)
    assert (fw.numpy(out) == 7).all() and (fw.numpy(lse) == 7).all()


def test_cuda_varlen_needs_host_bounds(fw, rng):
    if not fw.is_cuda:
        pytest.skip("CPU calls read the bounds from the host cu_seqlens")
    q, k, v = (x.reshape(-1, *x.shape[2:]) for x in _qkv(fw, rng))
    cu = fw.tensor(np.array([0, 4], np.int32))
    cu_k = fw.tensor(np.array([0, 6], np.int32))
    with pytest.raises(ValueError, match="max_seqlen"):
        hopattn.attention(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu_k)


# ---------------------------------------------------------------------------- outputs
def test_outputs_in_callers_framework_and_device(fw, rng):
    q, k, v = _qkv(fw, rng)
    out, lse = call(fw, hopattn.attention, q, k, v)
    assert type(out) is type(q) and type(lse) is type(q)
    if fw.is_torch:
        assert out.device == q.device and lse.device == q.device


def test_out_buffers_are_written_and_returned(fw, rng):
    q, k, v = _qkv(fw, rng)
    expected_out, expected_lse = call(fw, hopattn.attention, q, k, v, causal=True)
    dtype = str(q.dtype).split(".")[-1]
    out = fw.tensor(np.zeros(tuple(q.shape)), dtype)
    lse = fw.tensor(np.zeros(tuple(q.shape[:-1])), "float32")
    got_out, got_lse = call(fw, hopattn.attention, q, k, v, causal=True, out=out, lse_out=lse)
    assert got_out is out and got_lse is lse
    np.testing.assert_array_equal(fw.numpy(out), fw.numpy(expected_out))
    np.testing.assert_array_equal(fw.numpy(lse), fw.numpy(expected_lse))


def test_out_buffer_strided_view(fw, rng):
    """out= may be a view into a larger buffer (written in place, nothing copied)."""
    if fw.is_cuda:
        pytest.skip("CUDA outputs need TMA-compatible strides")
    q, k, v = _qkv(fw, rng)
    big = fw.tensor(np.zeros((1, 4, 4, 2 * q.shape[-1])), "float32")
    view = big[..., : q.shape[-1]]
    call(fw, hopattn.attention, q, k, v, out=view)
    expected, _ = hopattn.attention(q, k, v)
    np.testing.assert_array_equal(fw.numpy(big)[..., : q.shape[-1]], fw.numpy(expected))
    assert (fw.numpy(big)[..., q.shape[-1] :] == 0).all()


def test_merge_out_buffers(fw, rng):
    dtype = "float16" if fw.is_cuda else "float32"
    o = fw.tensor(rng.normal(size=(5, 3, 2, 8)), dtype)
    lse = fw.tensor(rng.normal(size=(5, 3, 2)), "float32")
    out = fw.tensor(np.zeros((5, 2, 8)), dtype)
    lse_out = fw.tensor(np.zeros((5, 2)), "float32")
    got = call(fw, hopattn.merge_states_n, o, lse, out=out, lse_out=lse_out)
    assert got[0] is out and got[1] is lse_out
    expected = hopattn.merge_states_n(o, lse)
    np.testing.assert_array_equal(fw.numpy(out), fw.numpy(expected[0]))


def test_read_only_out_is_rejected(rng):
    q = rng.normal(size=(1, 2, 2, 16)).astype(np.float32)
    out = np.zeros_like(q)
    out.flags.writeable = False
    with pytest.raises(TypeError, match="out: expected a writable tensor"):
        hopattn.attention(q, q, q, out=out)


def test_read_only_inputs_are_fine(rng):
    q = rng.normal(size=(1, 2, 2, 16)).astype(np.float32)
    q.flags.writeable = False
    out, _ = hopattn.attention(q, q, q)
    assert np.isfinite(out).all()


def test_ml_dtypes_bfloat16_numpy(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    q = rng.normal(size=(1, 3, 2, 16)).astype(ml_dtypes.bfloat16)
    out, lse = hopattn.attention(q, q, q, causal=True)
    assert out.dtype == q.dtype
    ref, _ = hopattn.attention(
        q.astype(np.float32), q.astype(np.float32), q.astype(np.float32), causal=True
    )
    np.testing.assert_allclose(out.astype(np.float32), ref, atol=1.6e-2, rtol=1.6e-2)


def test_built_with_cuda_is_bool():
    assert isinstance(hopattn.built_with_cuda(), bool)


def test_forward_binding_refuses_a_workspace():
    # The forward shares the backward's keyword list but needs no workspace: one given is an
    # error, not dropped.
    from hopattn import _C

    q = np.zeros((1, 4, 2, 8), np.float32)
    out, lse = np.zeros_like(q), np.zeros((1, 4, 2), np.float32)
    with pytest.raises(ValueError, match="workspace: expected None"):
        _C.attention_fwd(q, q, q, out, lse, workspace=np.zeros(16, np.uint8))
    _C.attention_fwd(q, q, q, out, lse)  # without one it runs
    assert np.isfinite(out).all()
