"""hopattn: attention kernels for NVIDIA Hopper, over any tensor with ``__dlpack__``.

Tensors are torch tensors, numpy arrays (CPU), or CuPy/JAX arrays. CPU tensors run the CPU
reference (double accumulation); CUDA tensors run the GPU kernels on the tensors' own device and
the framework's current stream, without synchronizing the device. Outputs come back in the inputs'
framework and on their device. Every function returns ``(out, lse)``: lse is float32, natural log,
with q's shape without the last dim.

Functions: :func:`attention` (forward: dense, varlen, paged KV), :func:`attention_backward`,
:func:`decode` (paged generation), :func:`mla` (multi-head latent attention),
:func:`merge_states`, :func:`merge_states_n`, :func:`support_matrix`; and the class
:class:`BatchAttention` (a serving step of mixed prefill and decode requests: plan once, run per
layer; CPU tensors only so far).

torch tensors go through ``torch.library`` custom ops (``torch.ops.hopattn.*``), so calls are
differentiable (attention), traceable by ``torch.compile(fullgraph=True)`` and CUDA-graph
capturable. ``import hopattn`` does not import torch; ``hopattn.torch`` is loaded on first use.

Errors: bad shapes or values raise ValueError, bad dtypes or devices TypeError, valid requests
without a code path NotImplementedError; each message says what was expected and what was given.
"""

import sys as _sys

from hopattn import _C, _args, _generic
from hopattn.batch import BatchAttention
from hopattn.support import format_support_matrix, support_matrix

__version__ = "0.1.0"
__all__ = [
    "attention",
    "attention_backward",
    "decode",
    "mla",
    "merge_states",
    "merge_states_n",
    "BatchAttention",
    "support_matrix",
    "format_support_matrix",
    "built_with_cuda",
    "check_errors",
    "debug",
    "Error",
]

#: Raised by :func:`check_errors` for a bad device-resident index a kernel met (a RuntimeError).
Error = _C.Error


# The eager fast path (hopattn._torch.fast): {tensor type: module}, filled when hopattn.torch is
# imported and its C++ extension loads; `_compiling` becomes torch.compiler.is_compiling then.
# Under torch.compile the fast path is never taken: Dynamo folds is_compiling() to True and traces
# the generic path, the torch.library ops.
_FAST = {}


def _compiling():
    return False


def _try_fast(name, anchor, *args):
    """The eager fast path's result (hopattn._torch.fast: function ``name`` of the module for
    ``anchor``'s tensor type), or NotImplemented: under torch.compile, without the extension, or
    for a call it does not take (the generic path then runs and raises what it raises)."""
    if _compiling():
        return NotImplemented
    fast = _FAST.get(type(anchor))
    return NotImplemented if fast is None else getattr(fast, name)(*args)


def built_with_cuda():
    """True when this build contains the GPU kernels (compiled with the CUDA toolkit)."""
    return _C.built_with_cuda()


def _stream_handle(stream):
    """A raw CUDA stream: an int, a torch.cuda.Stream (.cuda_stream) or a CuPy stream (.ptr)."""
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    for attr in ("cuda_stream", "ptr"):
        handle = getattr(stream, attr, None)
        if isinstance(handle, int):
            return handle
    raise TypeError(
        "stream: expected an int, a torch.cuda.Stream or a CuPy stream, got "
        f"{type(stream).__name__}"
    )


def _current_stream():
    """The current stream of an imported framework that has CUDA up (torch, then CuPy), else 0."""
    torch = _sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.current_stream().cuda_stream
    cupy = _sys.modules.get("cupy")
    if cupy is not None:
        try:
            return cupy.cuda.get_current_stream().ptr
        except Exception:  # CuPy without a usable device
            return 0
    return 0


def check_errors(stream=None):
    """Raises :class:`hopattn.Error` for the first bad device-resident index a kernel met.

    Page tables, kv_lens and cu_seqlens of CUDA calls live on the device, so a call cannot check
    their values without synchronizing. The kernels check each index where they use it, never
    read out of bounds (a bad page's keys are read as zeros, a bad request is skipped) and record
    the first violation of the device. This function synchronizes ``stream`` (default: the current
    stream of torch, else CuPy, else the legacy default stream), raises naming the family, the
    request, the value and its bound, and clears the record. Also reports a kernel fault of the
    stream's earlier work as RuntimeError. A no-op for CPU-only builds, and before any CUDA call
    (CPU calls validate their index arrays before running). Not allowed while the stream is being
    captured into a CUDA graph (ValueError).
    """
    handle = None if stream is None else _stream_handle(stream)
    if not _C.built_with_cuda():
        return
    _C.check_errors(stream=_current_stream() if handle is None else handle)


def debug(enabled=None):
    """Debug mode: validate device-resident index arrays before every CUDA launch.

    ``debug(True)`` makes every call on CUDA tensors copy its index arrays (page tables,
    kv_lens, cu_seqlens; per-head scales and sinks too) to the host, synchronously, and validate
    them as a CPU call would: a bad value raises ValueError before anything is launched or
    written. Slow by design, and not usable inside a CUDA graph capture. CPU calls always validate
    their arrays, so it changes nothing for them. Returns the previous setting; ``debug()``
    returns the current one.
    """
    previous = _C.debug_enabled()
    if enabled is not None:
        _C.set_debug(_args.flag(enabled, "enabled"))
    return previous


def __getattr__(name):
    # `hopattn.torch` and `hopattn.distributed` without importing torch at `import hopattn` time.
    if name in ("torch", "distributed"):
        import importlib

        return importlib.import_module("hopattn." + name)
    raise AttributeError(f"module 'hopattn' has no attribute {name!r}")


def _is_torch(x):
    # The module name decides for torch tensors first: torch.compile traces this function, and
    # reading sys.modules under its tracer is fragile. The isinstance check catches subclasses
    # defined outside torch.
    if type(x).__module__.split(".")[0] == "torch":
        return True
    torch = _sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _backend(x):
    if _is_torch(x):
        import hopattn.torch

        return hopattn.torch._backend
    return _generic


def _framework(x):
    return "torch" if _is_torch(x) else type(x).__module__.split(".")[0]


def _one_framework(anchor_name, anchor, **tensors):
    """Every tensor argument from the anchor's framework: the backend is chosen by the anchor, and
    a torch backend handed a numpy array (or the reverse) would fail inside its DLPack export."""
    expected = _framework(anchor)
    kind = type(anchor)
    for name, t in tensors.items():
        if t is None or type(t) is kind:  # the common cases, without the generic checks
            continue
        if isinstance(t, (tuple, list)) and name == "page_table" and len(t) == 2:
            _one_framework(anchor_name, anchor, page_indptr=t[0], page_indices=t[1])
        elif hasattr(t, "__dlpack__") and _framework(t) != expected:
            raise TypeError(
                f"{name}: expected a tensor of {anchor_name}'s framework ({expected}), got "
                f"{type(t).__module__}.{type(t).__name__} (all tensors of one call come from "
                "one framework)"
            )


def _require_tensors(**tensors):
    for name, t in tensors.items():
        if not (hasattr(t, "__dlpack__") and hasattr(t, "shape")):
            raise TypeError(
                f"{name}: expected a tensor supporting DLPack (__dlpack__), got {type(t).__name__}"
            )


def _attention_flat(
    causal,
    window,
    softcap,
    scale,
    sinks,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    page_table,
    kv_lens,
    kv_layout,
    deterministic,
):
    left, right = _args.window_pair(window)
    block_table, indptr, indices = _args.page_tensors(page_table)
    return dict(
        cu_seqlens_q=cu_seqlens_q,
        cu_seqlens_k=cu_seqlens_k,
        max_seqlen_q=_args.optional_int(max_seqlen_q, "max_seqlen_q"),
        max_seqlen_k=_args.optional_int(max_seqlen_k, "max_seqlen_k"),
        page_table=block_table,
        page_indptr=indptr,
        page_indices=indices,
        kv_lens=kv_lens,
        kv_layout=_args.layout(kv_layout),
        sinks=sinks,
        **_args.mask(causal, left, right, softcap, scale),
        deterministic=_args.flag(deterministic, "deterministic"),
    )


def attention(
    q,
    k,
    v,
    *,
    causal=False,
    window=(-1, -1),
    softcap=0.0,
    scale=None,
    sinks=None,
    cu_seqlens_q=None,
    cu_seqlens_k=None,
    max_seqlen_q=None,
    max_seqlen_k=None,
    deterministic=False,
    page_table=None,
    kv_lens=None,
    kv_layout="NHD",
    out=None,
    lse_out=None,
):
    """Attention forward (training / prefill): softmax(scale * q k^T + mask) v.

    Layouts (H = heads, D = head dim; Hq % Hkv == 0 for GQA/MQA):

    - dense:  q [B, Sq, Hq, Dqk], k [B, Sk, Hkv, Dqk], v [B, Sk, Hkv, Dv]
    - varlen: q [total_q, Hq, Dqk], k [total_k, Hkv, Dqk], v [total_k, Hkv, Dv] with
      ``cu_seqlens_q`` / ``cu_seqlens_k`` int32 [B+1] (row offsets of each sequence)
    - paged:  q varlen (``cu_seqlens_q``); k, v are page pools [num_pages, page_size, Hkv, D]
      (``kv_layout="NHD"``) or [num_pages, Hkv, page_size, D] ("HND"), addressed by
      ``page_table`` (int32 block table [B, max_pages], or a pair (page_indptr [B+1],
      page_indices) in CSR form) and ``kv_lens`` int32 [B].

    Options: ``causal`` (bottom-right aligned: query i of q_len sees key j iff
    j <= i + kv_len - q_len); ``window=(left, right)`` sliding window around that diagonal,
    -1 = unbounded; ``softcap`` c > 0 maps a scaled logit s to c*tanh(s/c); ``scale`` defaults to
    1/sqrt(Dqk); ``sinks`` float32 [Hq], a logit per q head added to the softmax denominator only;
    ``max_seqlen_q`` / ``max_seqlen_k``: host bounds of the varlen lengths, required for CUDA
    tensors (reading device lengths would synchronize); ``deterministic``: bitwise reproducible
    backward. dtypes: q, k, v bf16 or fp16 (float32 too on CPU).

    Returns ``(out, lse)``: out has q's shape with Dv last and q's dtype; lse float32 with q's
    shape without the last dim. A row that sees no key gives out = 0, lse = -inf. ``out=`` /
    ``lse_out=`` write into caller buffers instead (then no autograd).

    torch tensors that require grad are differentiated through ``out`` (backward =
    :func:`attention_backward`); lse is returned as non-differentiable.
    """
    r = _try_fast(
        "attention", q,
        q, k, v, causal, window, softcap, scale, sinks, cu_seqlens_q, cu_seqlens_k,
        max_seqlen_q, max_seqlen_k, deterministic, page_table, kv_lens, kv_layout, out,
        lse_out,
    )  # fmt: skip
    if r is not NotImplemented:
        return r
    _require_tensors(q=q, k=k, v=v)
    _one_framework(
        "q",
        q,
        k=k,
        v=v,
        sinks=sinks,
        cu_seqlens_q=cu_seqlens_q,
        cu_seqlens_k=cu_seqlens_k,
        page_table=page_table,
        kv_lens=kv_lens,
        out=out,
        lse_out=lse_out,
    )
    a = _attention_flat(
        causal,
        window,
        softcap,
        scale,
        sinks,
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        page_table,
        kv_lens,
        kv_layout,
        deterministic,
    )
    return _backend(q).attention(q, k, v, a, out=out, lse=lse_out)


def attention_backward(
    dout,
    q,
    k,
    v,
    out,
    lse,
    *,
    causal=False,
    window=(-1, -1),
    softcap=0.0,
    scale=None,
    sinks=None,
    cu_seqlens_q=None,
    cu_seqlens_k=None,
    max_seqlen_q=None,
    max_seqlen_k=None,
    deterministic=False,
    page_table=None,
    kv_lens=None,
    kv_layout="NHD",
    dq=None,
    dk=None,
    dv=None,
    dsinks=None,
):
    """Gradients of :func:`attention` with respect to q, k, v (and sinks).

    ``dout`` has out's shape and dtype; ``out`` and ``lse`` are what the forward returned; every
    keyword means what it means in :func:`attention` and must match the forward call. With GQA,
    dk/dv are summed over each KV head's group of q heads. The gradients are computed from the
    given ``out`` and ``lse`` (probabilities exp(s - lse), D = rowsum(dout * out)) on every
    device, as FlashAttention's backward does: handed the merged out and lse of a forward split
    over key blocks, a call on one block returns that block's share of the gradients (context
    parallel: :mod:`hopattn.distributed`).

    Returns ``(dq, dk, dv, dsinks)``: dq/dk/dv with q's/k's/v's shapes and dtypes; dsinks
    float32 [Hq] when ``sinks`` is given, else None. ``dq=``/``dk=``/``dv=``/``dsinks=`` write
    into caller buffers.
    """
    _require_tensors(dout=dout, q=q, k=k, v=v, out=out, lse=lse)
    _one_framework(
        "q",
        q,
        dout=dout,
        k=k,
        v=v,
        out=out,
        lse=lse,
        sinks=sinks,
        cu_seqlens_q=cu_seqlens_q,
        cu_seqlens_k=cu_seqlens_k,
        page_table=page_table,
        kv_lens=kv_lens,
        dq=dq,
        dk=dk,
        dv=dv,
        dsinks=dsinks,
    )
    a = _attention_flat(
        causal,
        window,
        softcap,
        scale,
        sinks,
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        page_table,
        kv_lens,
        kv_layout,
        deterministic,
    )
    return _backend(q).attention_backward(
        dout, q, k, v, out, lse, a, dq=dq, dk=dk, dv=dv, dsinks=dsinks
    )


def decode(
    q,
    k_cache,
    v_cache,
    kv_lens,
    page_table,
    *,
    causal=True,
    window=(-1, -1),
    softcap=0.0,
    scale=None,
    sinks=None,
    k_scale=None,
    v_scale=None,
    kv_layout="NHD",
    tree_mask=None,
    beam_width=1,
    shared_kv_lens=None,
    num_splits=None,
    out=None,
    lse_out=None,
):
    """Decode attention (generation) over a paged KV cache.

    - ``q`` [B, q_len, Hq, D], q_len 1..16 (speculative draft tokens), bf16 or fp16
    - ``k_cache``, ``v_cache`` [num_pages, page_size, Hkv, D] (``kv_layout="NHD"``) or
      [num_pages, Hkv, page_size, D] ("HND"); page_size 1..256; dtype q's, or 8-bit
      float8_e4m3fn / float8_e5m2 / int8 with real value = stored * scale
    - ``kv_lens`` int32 [B]: cached tokens per request, including the q_len new ones
      (0 = idle slot: out 0, lse -inf)
    - ``page_table`` int32 [B, max_pages] block table, or a pair (page_indptr [B+1],
      page_indices) in CSR form

    Options: ``causal`` (default True: draft token i sees the prefix and drafts 0..i);
    ``tree_mask`` bool [B, q_len, q_len] replaces that among the drafts (row i: which drafts
    query i sees; the prefix before the drafts is always visible); ``window=(left, right)``,
    ``softcap``, ``scale`` (default 1/sqrt(D)) and ``sinks`` float32 [Hq] as in
    :func:`attention`; ``k_scale`` / ``v_scale``: float, or float32 [Hkv] per KV head;
    ``beam_width`` W: rows b*W..b*W+W-1 of q are the beams of request b, and their first
    ``shared_kv_lens[b]`` tokens (int32 [B/W]) sit on the same pages and are read once for all
    beams; ``num_splits``: split-sequence partitions (None = chosen by the library).

    Returns ``(out, lse)``: out [B, q_len, Hq, D] in q's dtype, lse float32 [B, q_len, Hq].
    ``out=`` / ``lse_out=`` write into caller buffers.
    """
    r = _try_fast(
        "decode", q,
        q, k_cache, v_cache, kv_lens, page_table, causal, window, softcap, scale, sinks,
        k_scale, v_scale, kv_layout, tree_mask, beam_width, shared_kv_lens, num_splits,
        out, lse_out,
    )  # fmt: skip
    if r is not NotImplemented:
        return r
    _require_tensors(q=q, k_cache=k_cache, v_cache=v_cache, kv_lens=kv_lens)
    _one_framework(
        "q",
        q,
        k_cache=k_cache,
        v_cache=v_cache,
        kv_lens=kv_lens,
        page_table=page_table,
        sinks=sinks,
        k_scale=k_scale,
        v_scale=v_scale,
        tree_mask=tree_mask,
        shared_kv_lens=shared_kv_lens,
        out=out,
        lse_out=lse_out,
    )
    left, right = _args.window_pair(window)
    block_table, indptr, indices = _args.page_tensors(page_table, required=True)
    k_value, k_per_head = _args.kv_scale(k_scale, "k_scale")
    v_value, v_per_head = _args.kv_scale(v_scale, "v_scale")
    a = dict(
        page_table=block_table,
        page_indptr=indptr,
        page_indices=indices,
        kv_layout=_args.layout(kv_layout),
        **_args.mask(causal, left, right, softcap, scale),
        sinks=sinks,
        k_scale=k_value,
        k_scale_per_head=k_per_head,
        v_scale=v_value,
        v_scale_per_head=v_per_head,
        tree_mask=tree_mask,
        beam_width=_args.int32(beam_width, "beam_width"),
        shared_kv_lens=shared_kv_lens,
        num_splits=_args.num_splits(num_splits),
    )
    return _backend(q).decode(q, k_cache, v_cache, kv_lens, a, out=out, lse=lse_out)


def mla(
    q_nope,
    q_pe,
    ckv,
    kpe,
    cu_seqlens_q,
    kv_lens,
    page_table,
    *,
    causal=True,
    scale=None,
    max_seqlen_q=None,
    kv_scale=None,
    num_splits=None,
    schedule="auto",
    out=None,
    lse_out=None,
):
    """Multi-head latent attention (DeepSeek-V2/V3) over a paged latent cache.

    - ``q_nope`` [total_q, H, 512] (queries absorbed into the latent space), ``q_pe``
      [total_q, H, 64] (rope part); ``cu_seqlens_q`` int32 [B+1] (decode: 0, 1, 2, ...)
    - ``ckv`` [num_pages, page_size, 512]: compressed KV, both keys and values; ``kpe``
      [num_pages, page_size, 64]: rope keys
    - ``kv_lens`` int32 [B], ``page_table`` int32 [B, max_pages] or (page_indptr, page_indices)

    logits = scale * (q_nope . ckv + q_pe . kpe), scale default 1/sqrt(576); values = ckv.
    ``causal`` (default True) aligns bottom-right; ``max_seqlen_q`` is the host bound of the q
    lengths, required for CUDA tensors. ``ckv``/``kpe`` may be float8_e4m3fn with ``kv_scale``
    (float, real value = stored value * kv_scale); q stays 16-bit. ``num_splits`` (CUDA): key
    splits per (request, row tile), None = the library's cost model. ``schedule`` (CUDA kernel):
    "auto" (the library's choice by shape and cache dtype), "seesaw" (64-key blocks in pairs, both
    consumer warpgroups computing logits; 16-bit caches), "one-consumer" or "narrow" (requests of
    at most 16 rows, max_seqlen_q * H <= 16, or 32 over an fp8 cache: keys on the MMA's M side);
    any schedule gives the same result to rounding, and CPU tensors take it and run the reference.

    Returns ``(out, lse)``: out [total_q, H, 512] in q_nope's dtype, lse float32 [total_q, H].
    """
    r = _try_fast(
        "mla", q_nope,
        q_nope, q_pe, ckv, kpe, cu_seqlens_q, kv_lens, page_table, causal, scale,
        max_seqlen_q, kv_scale, num_splits, schedule, out, lse_out,
    )  # fmt: skip
    if r is not NotImplemented:
        return r
    _require_tensors(
        q_nope=q_nope, q_pe=q_pe, ckv=ckv, kpe=kpe, cu_seqlens_q=cu_seqlens_q, kv_lens=kv_lens
    )
    _one_framework(
        "q_nope",
        q_nope,
        q_pe=q_pe,
        ckv=ckv,
        kpe=kpe,
        cu_seqlens_q=cu_seqlens_q,
        kv_lens=kv_lens,
        page_table=page_table,
        out=out,
        lse_out=lse_out,
    )
    block_table, indptr, indices = _args.page_tensors(page_table, required=True)
    a = dict(
        page_table=block_table,
        page_indptr=indptr,
        page_indices=indices,
        max_seqlen_q=_args.optional_int(max_seqlen_q, "max_seqlen_q"),
        causal=_args.flag(causal, "causal"),
        scale=_args.optional_float(scale, "scale"),
        kv_scale=1.0 if kv_scale is None else float(kv_scale),
        num_splits=_args.optional_int(num_splits, "num_splits"),
        schedule=_args.mla_schedule(schedule),
    )
    return _backend(q_nope).mla(
        q_nope, q_pe, ckv, kpe, cu_seqlens_q, kv_lens, a, out=out, lse=lse_out
    )


def merge_states(o_a, lse_a, o_b, lse_b, *, out=None, lse_out=None):
    """Merge two partial attention states over disjoint key sets (split-KV, cascade, context
    parallel): out = (e^lse_a o_a + e^lse_b o_b) / (e^lse_a + e^lse_b), lse = log(e^lse_a +
    e^lse_b).

    ``o_a``, ``o_b`` [T, H, D] (bf16, fp16, or float32), ``lse_a``, ``lse_b`` float32 [T, H].
    Empty states (lse = -inf) contribute nothing; two empty states merge to an empty one
    (out 0, lse -inf). Returns ``(out, lse)`` with o_a's and lse_a's shapes.
    """
    r = _try_fast("merge_states", o_a, o_a, lse_a, o_b, lse_b, out, lse_out)
    if r is not NotImplemented:
        return r
    _require_tensors(o_a=o_a, lse_a=lse_a, o_b=o_b, lse_b=lse_b)
    _one_framework("o_a", o_a, lse_a=lse_a, o_b=o_b, lse_b=lse_b, out=out, lse_out=lse_out)
    return _backend(o_a).merge_states(o_a, lse_a, o_b, lse_b, out=out, lse=lse_out)


def merge_states_n(o, lse, *, out=None, lse_out=None):
    """Merge n partial attention states stacked on axis 1.

    ``o`` [T, n, H, D], ``lse`` float32 [T, n, H]. Returns ``(out, lse)``: out [T, H, D] in o's
    dtype, lse float32 [T, H].
    """
    r = _try_fast("merge_states_n", o, o, lse, out, lse_out)
    if r is not NotImplemented:
        return r
    _require_tensors(o=o, lse=lse)
    _one_framework("o", o, lse=lse, out=out, lse_out=lse_out)
    return _backend(o).merge_states_n(o, lse, out=out, lse_out=lse_out)
