"""hopattn.BatchAttention: a serving step (prefill chunks, decodes, empty slots) planned once and
run, against the textbook paged attention; re-planning, caller buffers and errors. CUDA cases
end as expected failures while the build has no batch kernel; test_batch_torch.py holds the
CUDA path's own tests (against the CPU BatchAttention, CUDA graphs, torch.compile)."""

import numpy as np
import pytest

import hopattn
import naive
from conftest import (
    Framework,
    assert_close,
    assert_lse,
    call,
    head_dim,
    random_page_table,
    rounded,
    skip_unsupported,
    torch,
)

# A decode, an empty slot, a speculative decode, a prefill chunk over cached tokens, a first
# prefill chunk (no cache before it) and a one-token request with one key.
Q_LENS = [1, 0, 5, 24, 9, 1]
KV_LENS = [37, 6, 21, 60, 9, 1]


def _dtype(fw):
    return "float16" if fw.is_cuda else "float32"


def _step(fw, rng, q_lens, kv_lens, hq, hkv, page_size, layout, dtype, cache_dtype=None):
    """Tensors for run() in fw's framework, the host lengths for plan(), and the oracle's
    float64 inputs (what the tensors hold after rounding)."""
    cache_dtype = cache_dtype or dtype
    d = head_dim(fw, 64)
    cu = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    kv = np.array(kv_lens, np.int32)
    table, num_pages = (
        random_page_table(rng, kv_lens, page_size) if kv_lens else (np.zeros((0, 1), np.int32), 1)
    )
    q = rng.normal(size=(int(cu[-1]), hq, d)).astype(np.float32)
    shape = (num_pages, page_size, hkv, d) if layout == "NHD" else (num_pages, hkv, page_size, d)
    k, v = rng.normal(size=shape).astype(np.float32), rng.normal(size=shape).astype(np.float32)
    if cache_dtype == "int8":  # stored values that span the range, not N(0, 1) rounded
        k, v = (np.clip(np.rint(40 * x), -127, 127) for x in (k, v))
    tensors = dict(
        q=fw.tensor(q, dtype),
        k_cache=fw.tensor(k, cache_dtype),
        v_cache=fw.tensor(v, cache_dtype),
        cu_seqlens_q=fw.tensor(cu),
        kv_lens=fw.tensor(kv),
        page_table=fw.tensor(table),
    )
    oracle = dict(
        q=rounded(fw, q, dtype),
        k_pool=rounded(fw, k, cache_dtype),
        v_pool=rounded(fw, v, cache_dtype),
        cu_q=cu,
        block_table=table,
        kv_lens=kv,
    )
    return tensors, (cu, kv), oracle


def _batch(fw, hq, hkv, page_size, layout="NHD", **kw):
    return hopattn.BatchAttention(
        hq, hkv, head_dim(fw, 64), page_size, kv_layout=layout, device=fw.device, max_batch=16, **kw
    )


def _check(fw, ba, tensors, oracle, dtype, layout="NHD", run_kw=None, **opts):
    out, lse = call(fw, ba.run, *tensors.values(), **(run_kw or {}))
    ref_out, ref_lse = naive.attention_paged(*oracle.values(), layout=layout, **opts)
    assert tuple(out.shape) == tuple(ref_out.shape) and tuple(lse.shape) == tuple(ref_lse.shape)
    assert_close(fw, out, ref_out, dtype)
    assert_lse(fw, lse, ref_lse)
    return out, lse


OPTIONS = {
    "causal": {},
    "non-causal": dict(causal=False),
    "window": dict(window=(6, -1)),
    "window-both-sides": dict(causal=False, window=(4, 3)),
    "softcap-scale": dict(softcap=4.0, scale=0.25),
}


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("opt", OPTIONS)
def test_batch_step(fw, rng, page_size, layout, opt):
    dtype, kw = _dtype(fw), OPTIONS[opt]
    tensors, lengths, oracle = _step(fw, rng, Q_LENS, KV_LENS, 4, 2, page_size, layout, dtype)
    ba = _batch(fw, 4, 2, page_size, layout, **kw)
    ba.plan(*lengths)
    _check(fw, ba, tensors, oracle, dtype, layout, **{"causal": True, **kw})


@pytest.mark.parametrize("gqa", [(1, 1), (5, 1), (16, 2)], ids=str)
def test_batch_gqa_and_sinks(fw, rng, gqa):
    hq, hkv = gqa
    dtype = _dtype(fw)
    tensors, lengths, oracle = _step(fw, rng, Q_LENS, KV_LENS, hq, hkv, 16, "NHD", dtype)
    sinks = rng.normal(size=hq).astype(np.float32)
    sinks[0] = -np.inf  # head 0 has no sink
    ba = _batch(fw, hq, hkv, 16)
    ba.plan(*lengths)
    _check(
        fw,
        ba,
        tensors,
        oracle,
        dtype,
        run_kw=dict(sinks=fw.tensor(sinks)),
        causal=True,
        sinks=sinks,
    )


def test_batch_split_keys(fw, rng):
    """A long decode and a long chunk on the default grid: their keys are split across CTAs and
    merged, and each row's sink joins the softmax once."""
    dtype = _dtype(fw)
    q_lens, kv_lens = [1, 30, 2], [1500, 700, 2]
    tensors, lengths, oracle = _step(fw, rng, q_lens, kv_lens, 4, 2, 16, "HND", dtype)
    sinks = rng.normal(size=4).astype(np.float32)
    ba = _batch(fw, 4, 2, 16, "HND")
    ba.plan(*lengths)
    assert ba._c.planned["num_merges"] > 0
    _check(
        fw,
        ba,
        tensors,
        oracle,
        dtype,
        "HND",
        run_kw=dict(sinks=fw.tensor(sinks)),
        causal=True,
        sinks=sinks,
    )


@pytest.mark.parametrize("scales", ["per-tensor", "per-head"])
def test_batch_int8_cache(fw, rng, scales):
    skip_unsupported(fw, "int8")
    if fw.is_cuda:
        pytest.skip("the CUDA contract takes fp8 e4m3 as its 8-bit cache")
    dtype = _dtype(fw)
    tensors, lengths, oracle = _step(fw, rng, Q_LENS, KV_LENS, 4, 2, 16, "NHD", dtype, "int8")
    if scales == "per-tensor":
        k_scale, v_scale = 0.02, 0.05
        run_kw = dict(k_scale=k_scale, v_scale=v_scale)
    else:
        k_scale = np.array([0.01, 0.03], np.float32)
        v_scale = np.array([0.05, 0.02], np.float32)
        run_kw = dict(k_scale=fw.tensor(k_scale), v_scale=fw.tensor(v_scale))
    per_head = np.broadcast_to(np.asarray(k_scale, np.float64), (2,))
    oracle["k_pool"] = oracle["k_pool"] * per_head[None, None, :, None]
    per_head = np.broadcast_to(np.asarray(v_scale, np.float64), (2,))
    oracle["v_pool"] = oracle["v_pool"] * per_head[None, None, :, None]
    ba = _batch(fw, 4, 2, 16)
    ba.plan(*lengths)
    _check(fw, ba, tensors, oracle, dtype, run_kw=run_kw, causal=True)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_batch_16bit(fw, rng, dtype):
    skip_unsupported(fw, dtype)
    tensors, lengths, oracle = _step(fw, rng, Q_LENS, KV_LENS, 4, 2, 16, "NHD", dtype)
    ba = _batch(fw, 4, 2, 16)
    ba.plan(*lengths)
    out, _ = _check(fw, ba, tensors, oracle, dtype, causal=True)
    assert out.dtype == tensors["q"].dtype


def test_batch_out_buffers(fw, rng):
    dtype = _dtype(fw)
    tensors, lengths, oracle = _step(fw, rng, Q_LENS, KV_LENS, 4, 2, 16, "NHD", dtype)
    rows = int(lengths[0][-1])
    out = fw.zeros((rows, 4, head_dim(fw, 64)), dtype)
    lse = fw.zeros((rows, 4), "float32")
    ba = _batch(fw, 4, 2, 16)
    ba.plan(*lengths)
    got_out, got_lse = _check(
        fw, ba, tensors, oracle, dtype, run_kw=dict(out=out, lse_out=lse), causal=True
    )
    assert got_out is out and got_lse is lse


def test_batch_replan(fw, rng):
    """One object, steps of different compositions in turn (the plan is rewritten each time)."""
    dtype = _dtype(fw)
    ba = _batch(fw, 4, 2, 8, window=(20, -1))
    for q_lens, kv_lens in [
        (Q_LENS, KV_LENS),
        ([3, 1, 1, 1], [3, 90, 1, 40]),
        ([], []),
        ([40], [64]),
    ]:
        tensors, lengths, oracle = _step(fw, rng, q_lens, kv_lens, 4, 2, 8, "NHD", dtype)
        ba.plan(*lengths)
        _check(fw, ba, tensors, oracle, dtype, causal=True, window=(20, -1))


def test_batch_plan_partitions_mixed_steps():
    """plan() runs a mixed step's prefill and its decodes on separate CTAs, whether its decodes
    cost less than its prefill or more; a pure decode step is not partitioned. Both mixed steps
    also get a concurrent form (prefill on part of each group of CTAs, decodes by the decode
    family beside it), the pure step none."""
    ba = hopattn.BatchAttention(32, 8, 128, 16, max_batch=256, max_tokens=16384, device="cpu")
    q = [2048, 2048, 2048, 2048] + [1] * 124
    kv = [2048, 2048, 6144, 10240] + [4097] * 124
    ba.plan(np.cumsum([0] + q).astype(np.int32), np.array(kv, dtype=np.int32))
    planned = ba._c.planned
    assert not planned["decodes_spread"] and planned["num_side_items"] == 0
    assert 0 < planned["partition_ctas"] < 33  # 8 KV heads on 132 CTAs: groups of 33
    assert planned["concurrent_ctas"] == 26
    q = [8192] + [1] * 255
    kv = [8192] + [2048 + (14336 * i) // 254 for i in range(255)]
    ba.plan(np.cumsum([0] + q).astype(np.int32), np.array(kv, dtype=np.int32))
    planned = ba._c.planned
    assert not planned["decodes_spread"] and planned["num_side_items"] == 0
    assert 0 < planned["partition_ctas"] < 33  # 8 KV heads on 132 CTAs: groups of 33
    assert planned["concurrent_ctas"] == 21
    ba.plan(np.arange(129, dtype=np.int32), np.full(128, 8192, dtype=np.int32))
    planned = ba._c.planned
    assert not planned["decodes_spread"] and planned["num_side_items"] == 0
    assert planned["partition_ctas"] == 0
    assert planned["concurrent_ctas"] == 0


def test_batch_plan_takes_torch_cpu_lengths(rng):
    if torch is None:
        pytest.skip("PyTorch is not installed")
    ba = hopattn.BatchAttention(4, 2, 64, 16, device="cpu")
    ba.plan(torch.tensor([0, 1, 4], dtype=torch.int32), torch.tensor([9, 3], dtype=torch.int32))
    assert ba._c.planned["batch"] == 2
    # Strided int32 views cross as numpy views too (the same plan as contiguous lengths), and
    # other dtypes keep the extension's message.
    cu = torch.tensor([0, 0, 1, 0, 4, 0], dtype=torch.int32)[::2]
    kv = torch.tensor([9, 0, 3, 0], dtype=torch.int32)[::2]
    ba.plan(cu, kv)
    assert ba._c.planned["batch"] == 2
    with pytest.raises(TypeError, match="cu_seqlens_q: expected int32, got int64"):
        ba.plan(cu.long(), kv)
    # A contiguous view past its storage's start crosses as (address, length) at its own data.
    ba.plan(
        torch.tensor([7, 0, 1, 4], dtype=torch.int32)[1:], torch.tensor([9, 3], dtype=torch.int32)
    )
    assert ba._c.planned["batch"] == 2 and ba._c.planned["total_q"] == 4


def test_batch_plan_torch_lengths_errors_match_numpy():
    """Contiguous 1-D CPU int32 torch lengths cross as (address, length), the rest as numpy views:
    each rejected pair gets numpy's message."""
    if torch is None:
        pytest.skip("PyTorch is not installed")
    ba = hopattn.BatchAttention(4, 2, 64, 16, device="cpu", max_batch=8)
    bad = [
        ([0, 1, 4], [9]),  # kv_lens shape
        ([0, 1, 4], [9, 2]),  # kv_lens[1] < q_len
        ([], []),  # cu_seqlens_q shape [0]
        ([1, 1], [3]),  # cu_seqlens_q[0] != 0
        ([0, 4, 1], [9, 3]),  # decreasing
        (list(range(11)), [1] * 10),  # B > max_batch
        ([[0, 1]], [9]),  # rank 2: the numpy view's path
    ]
    for cu, kv in bad:
        with pytest.raises(Exception) as want:
            ba.plan(np.array(cu, np.int32), np.array(kv, np.int32))
        with pytest.raises(type(want.value)) as got:
            ba.plan(torch.tensor(cu, dtype=torch.int32), torch.tensor(kv, dtype=torch.int32))
        assert str(got.value) == str(want.value), (cu, kv)
    ba.plan(torch.tensor([0, 0], dtype=torch.int32), torch.tensor([5], dtype=torch.int32))
    assert ba._c.planned["batch"] == 1


# ---------------------------------------------------------------------------- errors
def _cpu_step(rng):
    fw = Framework("numpy")
    tensors, lengths, _ = _step(fw, rng, Q_LENS, KV_LENS, 4, 2, 16, "NHD", "float32")
    ba = hopattn.BatchAttention(4, 2, 64, 16, device="cpu", max_batch=8)
    return ba, tensors, lengths


def test_batch_errors_plan(rng):
    ba, tensors, (cu, kv) = _cpu_step(rng)
    with pytest.raises(TypeError, match="cu_seqlens_q: expected int32, got int64"):
        ba.plan(cu.astype(np.int64), kv)
    with pytest.raises(ValueError, match="0..max_batch = 8"):
        ba.plan(np.zeros(10, np.int32), np.zeros(9, np.int32))
    with pytest.raises(ValueError, match=r"kv_lens\[3\]: expected >= q_len = 24"):
        ba.plan(cu, np.where(np.arange(len(kv)) == 3, 5, kv).astype(np.int32))
    with pytest.raises(ValueError, match=r"kv_lens: expected shape \[6\]"):
        ba.plan(cu, kv[:-1])
    with pytest.raises(TypeError, match="cu_seqlens_q: expected a tensor supporting DLPack"):
        ba.plan([0, 1], kv[:1])
    with pytest.raises(TypeError, match="kv_lens: expected a tensor supporting DLPack"):
        ba.plan(cu, list(kv))


def test_batch_workspace_imported_once(rng):
    # The device workspace is imported once (_C.Workspace), and what it refuses it refuses there;
    # the size and device checks stay with the plan() that uploads into it.
    ba, tensors, (cu, kv) = _cpu_step(rng)
    assert hopattn._C.Workspace(np.zeros(64, np.float32)).nbytes == 256
    read_only = np.zeros(64, np.uint8)
    read_only.flags.writeable = False
    with pytest.raises(TypeError, match="workspace: expected a writable tensor"):
        hopattn._C.Workspace(read_only)
    with pytest.raises(TypeError, match="workspace: expected a writable tensor"):
        hopattn._C.Workspace([0, 1])
    with pytest.raises(ValueError, match="workspace: expected no workspace"):
        ba._c.plan(cu, kv, hopattn._C.Workspace(np.zeros(64, np.uint8)), 0)
    # A CPU object keeps no workspace; its run() passes none.
    assert ba._held is None and ba._workspace_for(tensors["q"]) is None


def test_batch_errors_run(rng):
    ba, tensors, (cu, kv) = _cpu_step(rng)
    with pytest.raises(ValueError, match=r"call plan\(\) before run\(\)"):
        ba.run(*tensors.values())
    ba.plan(cu, kv)
    t = dict(tensors)
    t["kv_lens"] = kv + np.int32(1)
    with pytest.raises(ValueError, match=r"kv_lens\[0\]: expected 37 \(what plan\(\) was given"):
        ba.run(*t.values())
    t = dict(tensors, q=tensors["q"].astype(np.float16))
    with pytest.raises(TypeError, match="k_cache: expected fp16, fp8_e4m3, fp8_e5m2 or int8"):
        ba.run(*t.values())
    t = dict(tensors, q=tensors["q"][:, :2])
    with pytest.raises(ValueError, match=r"\[total_q, num_qo_heads, head_dim\]"):
        ba.run(*t.values())
    with pytest.raises(ValueError, match="k_scale: expected a finite value > 0"):
        ba.run(*tensors.values(), k_scale=0.0)
    out = np.zeros((40, 4, 64), np.float32)
    with pytest.raises(ValueError, match=r"out: expected shape \[40, 4, 64\]"):
        ba.run(*tensors.values(), out=out[:, :, :32])


def test_batch_errors_config():
    with pytest.raises(NotImplementedError, match="head_dim: expected 64, 128 or 256, got 100"):
        hopattn.BatchAttention(4, 2, 100, 16, device="cpu")
    with pytest.raises(ValueError, match="num_kv_heads"):
        hopattn.BatchAttention(4, 3, 64, 16, device="cpu")
    with pytest.raises(ValueError, match="page_size: expected 1..256"):
        hopattn.BatchAttention(4, 2, 64, 0, device="cpu")
    with pytest.raises(ValueError, match="kv_layout"):
        hopattn.BatchAttention(4, 2, 64, 16, kv_layout="NDH", device="cpu")
    with pytest.raises(ValueError, match="device"):
        hopattn.BatchAttention(4, 2, 64, 16, device="tpu")
    with pytest.raises(TypeError, match="window"):
        hopattn.BatchAttention(4, 2, 64, 16, window=5, device="cpu")
    with pytest.raises(TypeError, match="causal: expected a bool"):
        hopattn.BatchAttention(4, 2, 64, 16, causal="yes", device="cpu")


def test_batch_device_default():
    index = hopattn.batch._current_cuda_device()
    expected = "cpu" if index < 0 else f"cuda:{index}"
    assert hopattn.BatchAttention(4, 2, 64, 16).device == expected
    # Making a CUDA object touches no device (pinned plan staging is made by the first
    # uploading plan()), so any index names a device here.
    assert hopattn.BatchAttention(4, 2, 64, 16, device="cuda:1").device == "cuda:1"


def test_batch_cpu_tensors_for_a_cuda_object(rng):
    _, tensors, lengths = _cpu_step(rng)
    ba = hopattn.BatchAttention(4, 2, 64, 16, device="cuda:0", max_batch=8)
    ba.plan(*lengths)
    with pytest.raises(TypeError, match="the device the BatchAttention was made for"):
        ba.run(*tensors.values())
