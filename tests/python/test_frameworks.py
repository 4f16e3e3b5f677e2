"""Frameworks other than numpy and torch, through DLPack: CuPy (CUDA) and JAX (CPU and CUDA).
Each skips where its framework is not installed (the device machine has both)."""

import numpy as np
import pytest

import hopattn
import naive
from conftest import HAS_CUDA, LSE_ATOL


def _cuda_or_skip():
    if not HAS_CUDA:
        pytest.skip("no CUDA device visible")


def _expect(q, k, v):
    return naive.attention_dense(q, k, v, causal=True)


def test_cupy_attention(rng):
    cupy = pytest.importorskip("cupy")
    _cuda_or_skip()
    q, k, v = (
        rng.normal(size=s).astype(np.float16) for s in ((1, 9, 4, 128),) + ((1, 17, 2, 128),) * 2
    )
    try:
        out, lse = hopattn.attention(*(cupy.asarray(x) for x in (q, k, v)), causal=True)
    except NotImplementedError as e:
        pytest.xfail(f"no GPU code path yet: {e}")
    assert isinstance(out, cupy.ndarray) and out.dtype == np.float16
    ref_out, ref_lse = _expect(q, k, v)
    np.testing.assert_allclose(cupy.asnumpy(out).astype(np.float64), ref_out, atol=4e-3)
    np.testing.assert_allclose(cupy.asnumpy(lse), ref_lse, atol=LSE_ATOL)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_jax_attention(rng, device):
    jax = pytest.importorskip("jax")
    if device == "cuda":
        _cuda_or_skip()
    try:
        target = jax.devices(device if device == "cpu" else "gpu")[0]
    except RuntimeError:
        pytest.skip(f"JAX has no {device} backend here")
    dtype, d = (np.float32, 16) if device == "cpu" else (np.float16, 128)
    q, k, v = (rng.normal(size=s).astype(dtype) for s in ((1, 5, 2, d), (1, 8, 2, d), (1, 8, 2, d)))
    args = [jax.device_put(x, target) for x in (q, k, v)]
    try:
        out, lse = hopattn.attention(*args, causal=True)
    except NotImplementedError as e:
        pytest.xfail(f"no GPU code path yet: {e}")
    assert isinstance(out, jax.Array)
    ref_out, ref_lse = _expect(q, k, v)
    atol = 1e-5 if device == "cpu" else 4e-3
    np.testing.assert_allclose(np.asarray(out).astype(np.float64), ref_out, atol=atol)
    np.testing.assert_allclose(np.asarray(lse), ref_lse, atol=LSE_ATOL)
