"""The README's Python examples, one function per family, run by test_examples.py on the CPU
here and on CUDA on the device. Keep each body identical to its README block."""

import numpy as np
import torch

import hopattn

device = "cuda" if torch.cuda.is_available() else "cpu"


def example_numpy():
    q = np.random.randn(2, 7, 4, 64).astype(np.float32)  # [B, Sq, Hq, D]
    k = np.random.randn(2, 9, 2, 64).astype(np.float32)  # [B, Sk, Hkv, D] (GQA 4:2)
    v = np.random.randn(2, 9, 2, 64).astype(np.float32)
    out, lse = hopattn.attention(q, k, v, causal=True, window=(4, -1))
    assert isinstance(out, np.ndarray) and out.shape == (2, 7, 4, 64) and lse.shape == (2, 7, 4)


def example_attention():
    q = torch.randn(2, 256, 8, 128, dtype=torch.bfloat16, device=device, requires_grad=True)
    k = torch.randn(2, 256, 2, 128, dtype=torch.bfloat16, device=device, requires_grad=True)
    v = torch.randn(2, 256, 2, 128, dtype=torch.bfloat16, device=device, requires_grad=True)
    out, lse = hopattn.attention(q, k, v, causal=True, softcap=30.0)  # lse: fp32 [2, 256, 8]
    out.float().square().mean().backward()  # q.grad, k.grad, v.grad from the bwd family

    # Varlen (ragged) batch: 3 sequences of 100, 0 and 156 tokens packed along dim 0.
    cu = torch.tensor([0, 100, 100, 256], dtype=torch.int32, device=device)
    q, k, v = (x.detach()[0] for x in (q, k, v))  # [total, H, D]
    out, lse = hopattn.attention(
        q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=156, max_seqlen_k=156, causal=True
    )


def example_decode():
    batch, page_size, pages_each = 4, 16, 8
    k_cache = torch.randn(batch * pages_each, page_size, 2, 128, device=device)
    v_cache = torch.randn(batch * pages_each, page_size, 2, 128, device=device)
    k_cache, v_cache = k_cache.to(torch.float8_e4m3fn), v_cache.to(torch.float8_e4m3fn)
    page_table = torch.randperm(batch * pages_each, device=device).int().view(batch, pages_each)
    kv_lens = torch.tensor([100, 1, 128, 37], dtype=torch.int32, device=device)  # incl. new token
    q = torch.randn(batch, 1, 8, 128, dtype=torch.bfloat16, device=device)  # [B, q_len, Hq, D]
    out, lse = hopattn.decode(q, k_cache, v_cache, kv_lens, page_table, k_scale=0.5, v_scale=0.5)
    assert out.shape == (4, 1, 8, 128) and lse.shape == (4, 1, 8)


def example_mla():
    batch, heads, page_size, pages_each = 2, 16, 64, 4
    ckv = torch.randn(batch * pages_each, page_size, 512, dtype=torch.bfloat16, device=device)
    kpe = torch.randn(batch * pages_each, page_size, 64, dtype=torch.bfloat16, device=device)
    page_table = torch.arange(batch * pages_each, device=device).int().view(batch, pages_each)
    kv_lens = torch.tensor([200, 75], dtype=torch.int32, device=device)
    cu_seqlens_q = torch.tensor([0, 1, 2], dtype=torch.int32, device=device)  # one token each
    q_nope = torch.randn(batch, heads, 512, dtype=torch.bfloat16, device=device)
    q_pe = torch.randn(batch, heads, 64, dtype=torch.bfloat16, device=device)
    out, lse = hopattn.mla(
        q_nope, q_pe, ckv, kpe, cu_seqlens_q, kv_lens, page_table, max_seqlen_q=1
    )  # out [2, 16, 512]
    # fp8 e4m3 cache (real value = stored * kv_scale)
    ckv8, kpe8 = (2 * ckv).to(torch.float8_e4m3fn), (2 * kpe).to(torch.float8_e4m3fn)
    out8, lse8 = hopattn.mla(
        q_nope, q_pe, ckv8, kpe8, cu_seqlens_q, kv_lens, page_table, max_seqlen_q=1, kv_scale=0.5
    )
    assert out8.shape == out.shape and lse8.shape == lse.shape


def example_merge():
    q = torch.randn(1, 32, 8, 128, dtype=torch.bfloat16, device=device)
    k = torch.randn(1, 1000, 8, 128, dtype=torch.bfloat16, device=device)
    v = torch.randn(1, 1000, 8, 128, dtype=torch.bfloat16, device=device)
    o1, lse1 = hopattn.attention(
        q[0],
        k[0, :600],
        v[0, :600],  # keys 0..599 (varlen form)
        cu_seqlens_q=torch.tensor([0, 32], dtype=torch.int32, device=device),
        cu_seqlens_k=torch.tensor([0, 600], dtype=torch.int32, device=device),
        max_seqlen_q=32,
        max_seqlen_k=600,
    )
    o2, lse2 = hopattn.attention(q, k[:, 600:], v[:, 600:])  # keys 600..999 (dense form)
    out, lse = hopattn.merge_states(o1, lse1, o2[0], lse2[0])  # == attention over all 1000 keys
    o = torch.stack([o1, o2[0]], dim=1)  # or n states at once: [T, n, H, D]
    out_n, lse_n = hopattn.merge_states_n(o, torch.stack([lse1, lse2[0]], dim=1))


def example_batch():
    ba = hopattn.BatchAttention(8, 2, 64, 16, device="cpu")  # Hq, Hkv, D, page_size; made once
    cu_seqlens_q = np.array([0, 1, 1, 33], np.int32)  # a decode, an idle slot, a 32-token chunk
    kv_lens = np.array([70, 0, 96], np.int32)  # cached tokens, incl. the new ones
    ba.plan(cu_seqlens_q, kv_lens)  # once per step, on the host
    k_cache = np.random.randn(18, 16, 2, 64).astype(np.float32)  # [num_pages, page_size, Hkv, D]
    v_cache = np.random.randn(18, 16, 2, 64).astype(np.float32)
    page_table = np.arange(18, dtype=np.int32).reshape(3, 6)  # [B, max_pages]
    q = np.random.randn(33, 8, 64).astype(np.float32)  # [total_q, Hq, D]
    out, lse = ba.run(q, k_cache, v_cache, cu_seqlens_q, kv_lens, page_table)  # per layer
    # 8-bit caches (float8_e4m3fn on CUDA too) take k_scale= / v_scale=: a float, or float32 [Hkv]
    assert out.shape == (33, 8, 64) and lse.shape == (33, 8)


def example_compile_and_graphs():
    q = torch.randn(4, 64, 8, 128, dtype=torch.bfloat16, device=device)
    k = torch.randn(4, 64, 8, 128, dtype=torch.bfloat16, device=device)

    @torch.compile(fullgraph=True)
    def layer(q, k):
        out, _ = hopattn.attention(q, k, k, causal=True)  # a torch.ops.hopattn op in the graph
        return out * 2

    layer(q, k)
    if device == "cuda":
        hopattn.attention(q, k, k, causal=True)  # warm-up before capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # no allocation, no sync inside hopattn: capturable
            out, lse = hopattn.attention(q, k, k, causal=True)
        graph.replay()
