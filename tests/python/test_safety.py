"""The safety contract from Python (README, "Safety contract"): hopattn.check_errors() and
hopattn.debug(). On CPU they are no-ops (CPU calls validate their index arrays before running);
on CUDA a bad device-resident page id is never read, check_errors() raises hopattn.Error naming
the family, request, value and bound, and debug mode raises ValueError before the launch."""

import numpy as np
import pytest

import hopattn
from conftest import HAS_CUDA

try:
    import torch
except ImportError:
    torch = None


# What a CPU call (and debug mode) says about the repro: page index 9 into 4 pages.
_BAD_PAGE_9 = r"page_table\[1\]\[1\]: expected a page index in \[0, 4\), got 9"


@pytest.fixture(autouse=True)
def _debug_off():
    hopattn.debug(False)
    yield
    hopattn.debug(False)


def _decode_inputs(page_table, num_pages=4, page_size=4, dtype=np.float32):
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 1, 4, 64)).astype(dtype)
    k = rng.standard_normal((num_pages, page_size, 2, 64)).astype(dtype)
    v = rng.standard_normal((num_pages, page_size, 2, 64)).astype(dtype)
    kv_lens = np.array([5, 8], np.int32)
    return q, k, v, kv_lens, np.asarray(page_table, np.int32)


def test_error_is_a_runtime_error():
    assert issubclass(hopattn.Error, RuntimeError)
    assert "check_errors" in hopattn.__all__ and "debug" in hopattn.__all__


def test_check_errors_is_a_no_op_on_cpu():
    q, k, v, lens, table = _decode_inputs([[0, 1], [2, 3]])
    hopattn.decode(q, k, v, lens, table)
    assert hopattn.check_errors() is None
    assert hopattn.check_errors(0) is None


def test_check_errors_rejects_a_bad_stream():
    with pytest.raises(TypeError, match="stream: expected an int"):
        hopattn.check_errors("default")


def test_debug_toggles_and_returns_the_previous_setting():
    assert hopattn.debug() is False
    assert hopattn.debug(True) is False
    assert hopattn.debug() is True
    assert hopattn.debug(False) is True
    with pytest.raises(TypeError, match="enabled: expected a bool"):
        hopattn.debug("yes")


@pytest.mark.parametrize("debug", [False, True])
def test_cpu_calls_validate_index_arrays_either_way(debug):
    # The repro: page index 9 into a pool of 4 pages.
    q, k, v, lens, table = _decode_inputs([[0, 1], [2, 9]])
    hopattn.debug(debug)
    with pytest.raises(ValueError, match=_BAD_PAGE_9):
        hopattn.decode(q, k, v, lens, table)


cuda = pytest.mark.skipif(not (HAS_CUDA and hopattn.built_with_cuda()), reason="needs a CUDA GPU")


def _cuda_decode(page_table):
    q, k, v, lens, table = _decode_inputs(page_table, num_pages=4, page_size=16)
    lens = np.array([20, 40], np.int32)
    def cuda_bf16(a):
        return torch.from_numpy(a).to("cuda", torch.bfloat16)

    return (
        cuda_bf16(q),
        cuda_bf16(k),
        cuda_bf16(v),
        torch.from_numpy(lens).cuda(),
        torch.from_numpy(table).cuda(),
    )


@cuda
def test_cuda_good_call_leaves_no_record():
    q, k, v, lens, table = _cuda_decode([[0, 1, 0], [1, 2, 3]])
    out, _ = hopattn.decode(q, k, v, lens, table)
    hopattn.check_errors()
    assert torch.isfinite(out.float()).all()


@cuda
def test_cuda_bad_page_is_reported_by_check_errors():
    # The issue's repro on the device: page 9 of 4; request 1's second page.
    q, k, v, lens, table = _cuda_decode([[0, 1, 0], [1, 9, 3]])
    out, _ = hopattn.decode(q, k, v, lens, table)  # no sync, no error yet
    reported = r"decode: request 1: page table = 9: expected a page index in \[0, 4\)"
    with pytest.raises(hopattn.Error, match=reported):
        hopattn.check_errors()
    hopattn.check_errors()  # cleared
    assert torch.isfinite(out.float()).all()


@cuda
def test_cuda_debug_mode_raises_before_the_launch():
    q, k, v, lens, table = _cuda_decode([[0, 1, 0], [1, 9, 3]])
    out = torch.full((2, 1, 4, 64), float("nan"), dtype=torch.bfloat16, device="cuda")
    lse = torch.full((2, 1, 4), float("nan"), dtype=torch.float32, device="cuda")
    hopattn.debug(True)
    with pytest.raises(ValueError, match=_BAD_PAGE_9):
        hopattn.decode(q, k, v, lens, table, out=out, lse_out=lse)
    hopattn.debug(False)
    assert torch.isnan(out.float()).all() and torch.isnan(lse).all()
    hopattn.check_errors()  # nothing was launched
