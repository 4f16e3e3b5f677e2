"""Shared fixtures: the frameworks and devices a test runs on, data makers, tolerances.

Every test that takes `fw` runs on numpy (CPU), torch CPU and torch CUDA; torch cases skip where
torch is not installed and CUDA cases where no GPU is visible. A CUDA case whose family has no GPU
kernel yet ends as an expected failure that names the missing kernel (`call`).
"""

import os
import sys
import zlib

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

try:
    import torch
except ImportError:  # numpy-only environments still run the CPU suite
    torch = None

HAS_CUDA = torch is not None and torch.cuda.is_available()

_TORCH_DTYPES = {}
if torch is not None:
    _TORCH_DTYPES = {
        "float32": torch.float32,
        "float16": torch.float16,
        "bfloat16": torch.bfloat16,
        "float8_e4m3fn": torch.float8_e4m3fn,
        "float8_e5m2": torch.float8_e5m2,
        "int8": torch.int8,
        "int32": torch.int32,
        "bool": torch.bool,
    }


class Framework:
    """Makes inputs in one framework and device from numpy data, and reads results back."""

    def __init__(self, name, device="cpu"):
        self.name, self.device = name, device

    def __repr__(self):
        return f"{self.name}-{self.device}"

    @property
    def is_cuda(self):
        return self.device.startswith("cuda")

    @property
    def is_torch(self):
        return self.name == "torch"

    def supports(self, dtype):
        if self.name == "numpy":
            return dtype in ("float32", "float16", "int8", "int32", "bool")
        if self.is_cuda and dtype == "float32":
            return False  # the kernels take 16-bit q/k/v; fp32 is the CPU reference's precise mode
        return dtype in _TORCH_DTYPES

    def tensor(self, array, dtype=None):
        array = np.asarray(array)
        dtype = dtype or array.dtype.name
        if self.name == "numpy":
            return array.astype(dtype)
        # Floating types go through float32 so torch does the rounding to bf16/fp8.
        staged = array.astype(np.float32 if dtype.startswith(("float", "bfloat")) else dtype)
        t = torch.from_numpy(np.ascontiguousarray(staged))
        return t.to(device=self.device, dtype=_TORCH_DTYPES[dtype])

    def numpy(self, x):
        """float64 (or the integer/bool dtype) numpy copy of a result or input."""
        if self.name == "numpy":
            return x.astype(np.float64) if x.dtype.kind == "f" else x
        x = x.detach().cpu()
        if x.is_floating_point():
            return x.to(torch.float64).numpy()
        return x.numpy()

    def zeros(self, shape, dtype):
        return self.tensor(np.zeros(shape, np.float32), dtype)


def _frameworks():
    params = [pytest.param(Framework("numpy"), id="numpy")]
    params.append(pytest.param(Framework("torch"), id="torch-cpu", marks=pytest.mark.torch))
    params.append(
        pytest.param(
            Framework("torch", "cuda"), id="torch-cuda", marks=[pytest.mark.torch, pytest.mark.gpu]
        )
    )
    return params


@pytest.fixture(params=_frameworks())
def fw(request):
    f = request.param
    if f.name == "torch" and torch is None:
        pytest.skip("PyTorch is not installed")
    if f.is_cuda and not HAS_CUDA:
        pytest.skip("no CUDA device visible")
    return f


@pytest.fixture
def rng(request):
    # A fresh seed per test, derived from its id, so a failure reproduces from the test name.
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def call(fw, fn, *args, **kwargs):
    """fn(*args, **kwargs); on CUDA, a family without a GPU kernel yet is an expected failure."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError as e:
        if fw.is_cuda:
            pytest.xfail(f"no GPU code path yet: {e}")
        raise


def skip_unsupported(fw, *dtypes):
    for dtype in dtypes:
        if not fw.supports(dtype):
            pytest.skip(f"{fw!r} has no {dtype}")


def head_dim(fw, cpu_dim=16):
    """Small head dims keep the CPU suite fast; on CUDA the most common one, which every kernel
    family is built for first."""
    return 128 if fw.is_cuda else cpu_dim


# Tolerances against the float64 textbook implementation. The CPU reference accumulates in
# double and rounds once, so its error is half an ulp of the output dtype. GPU kernels round
# P to 16 bits before P @ V (FlashAttention's scheme); their bound is a few ulps of the output.
_ATOL = {
    ("cpu", "float32"): 1e-5,
    ("cpu", "float16"): 2e-3,
    ("cpu", "bfloat16"): 1.6e-2,
    ("cuda", "float16"): 4e-3,
    ("cuda", "bfloat16"): 3e-2,
}
LSE_ATOL = 1e-3


def assert_close(fw, got, expected, dtype, what="out", scale=1.0):
    got = fw.numpy(got)
    assert not np.isnan(got).any(), f"{what}: NaN in the result"
    atol = _ATOL[("cuda" if fw.is_cuda else "cpu", dtype)] * scale
    np.testing.assert_allclose(got, expected, atol=atol, rtol=atol, err_msg=what)


def assert_lse(fw, got, expected):
    got = fw.numpy(got)
    assert not np.isnan(got).any(), "lse: NaN in the result"
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(expected), err_msg="lse -inf rows")
    finite = np.isfinite(expected)
    np.testing.assert_allclose(
        got[finite], expected[finite], atol=LSE_ATOL, rtol=LSE_ATOL, err_msg="lse"
    )


def rounded(fw, array, dtype):
    """The values a tensor of `dtype` made from `array` holds, as float64 (the oracle's input)."""
    return fw.numpy(fw.tensor(array, dtype))


def random_page_table(rng, kv_lens, page_size, spare_pages=3):
    """A block table [B, max_pages] over a shuffled pool; returns (table int32, num_pages)."""
    pages_per = [max(1, -(-int(n) // page_size)) for n in kv_lens]
    max_pages = max(pages_per)
    num_pages = sum(pages_per) + spare_pages
    order = rng.permutation(num_pages)
    table = np.zeros((len(kv_lens), max_pages), np.int32)
    used = 0
    for b, n in enumerate(pages_per):
        table[b, :n] = order[used : used + n]
        table[b, n:] = order[-1]  # unused slots still name a valid page
        used += n
    return table, num_pages


def csr_from_table(table, kv_lens, page_size):
    """(page_indptr, page_indices) for the pages each request uses."""
    counts = [-(-int(n) // page_size) for n in kv_lens]
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    indices = np.concatenate([table[b, :c] for b, c in enumerate(counts)] + [np.zeros(0)])
    return indptr, indices.astype(np.int32)
