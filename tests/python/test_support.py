"""The support matrix comes from the validators and agrees with what calls actually do."""

import numpy as np
import pytest

import hopattn


def test_matrix_shape():
    m = hopattn.support_matrix()
    assert set(m) == {"cpu", "cuda"}
    for device in m.values():
        assert set(device) == {"attention", "attention_backward", "decode", "mla", "merge_states"}


def test_cpu_and_cuda_contracts():
    cpu, cuda = hopattn.support_matrix("cpu"), hopattn.support_matrix("cuda")
    assert "fp32" in cpu["attention"]["dtypes"]
    assert cuda["attention"]["dtypes"] and "fp32" not in cuda["attention"]["dtypes"]
    assert cpu["decode"]["q_lens"] == "1..16"
    # the GPU head dims are a subset of the CPU reference's range
    assert cpu["attention"]["head_dims"].startswith("1..")
    assert all(int(d) in (64, 96, 128, 192, 256) for d in cuda["decode"]["head_dims"].split(", "))


def test_matrix_agrees_with_calls(rng):
    """A head dim the CPU matrix excludes is rejected by a real call, one it includes runs."""
    cpu = hopattn.support_matrix("cpu")["attention"]
    top = int(cpu["head_dims"].split("..")[1])
    ok = rng.normal(size=(1, 2, 1, top)).astype(np.float32)
    hopattn.attention(ok, ok, ok)
    bad = np.zeros((1, 2, 1, top + 1), np.float32)
    with pytest.raises(ValueError, match="head_dim"):
        hopattn.attention(bad, bad, bad)


def test_markdown():
    text = hopattn.format_support_matrix()
    assert text.count("| family |") == 2 and "| decode |" in text


def test_bad_device():
    with pytest.raises(ValueError):
        hopattn.support_matrix("tpu")
