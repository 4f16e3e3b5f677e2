"""The batch family: one serving step (prefill chunks and decodes over one paged KV cache) planned
once on the host and run for every layer of the step. The C++ object (hopattn::BatchAttention)
does the planning, validation and running; this module normalizes arguments, resolves the device,
owns the device workspace of a CUDA configuration and allocates outputs in the caller's framework.

torch tensors go through the custom op ``torch.ops.hopattn.batch_run`` (hopattn._torch.batch),
which names its BatchAttention by an integer handle (:func:`lookup`): the object is not a tensor,
and an int is what an op schema, torch.compile and its guards take.
"""

import functools
import itertools
import sys
import weakref

import hopattn
from hopattn import _C, _args, _generic

_KDLCPU, _KDLCUDA = 1, 2

# handle -> BatchAttention, for the torch op. Weak: a handle does not keep its object alive.
_OBJECTS = weakref.WeakValueDictionary()
_HANDLES = itertools.count(1)


def lookup(handle):
    """The live BatchAttention of `handle` (BatchAttention.handle)."""
    ba = _OBJECTS.get(int(handle))
    if ba is None:
        raise RuntimeError(
            f"hopattn.BatchAttention: handle {int(handle)}: expected a live BatchAttention, got "
            "none (the object was garbage-collected; keep it alive while its runs are traced "
            "or captured)"
        )
    return ba


def _current_cuda_device():
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return torch.cuda.current_device()
    return _C.current_cuda_device()


def _device(device):
    """(type, index) of a device argument: None, "cpu", "cuda", "cuda:N", or a torch.device."""
    if device is None:
        index = _current_cuda_device()
        return ("cuda", index) if index >= 0 else ("cpu", 0)
    name = str(device)  # torch.device("cuda", 1) -> "cuda:1"
    if name == "cpu":
        return ("cpu", 0)
    if name == "cuda":
        index = _current_cuda_device()
        return ("cuda", max(index, 0))
    if name.startswith("cuda:") and name[5:].isdigit():
        return ("cuda", int(name[5:]))
    raise ValueError(f'device: expected None, "cpu", "cuda" or "cuda:N", got {device!r}')


def _device_of(x):
    device_type, index = x.__dlpack_device__()
    if int(device_type) == _KDLCUDA:
        return ("cuda", int(index))
    return ("cpu", 0) if int(device_type) == _KDLCPU else (str(device_type), int(index))


def _empty(ref, shape, dtype=None, zeroed=False):
    """An array in ref's framework and on its device (torch tensors too, without custom ops)."""
    if hopattn._is_torch(ref):
        import torch

        kind = {None: ref.dtype, "float32": torch.float32, "uint8": torch.uint8}[dtype]
        make = torch.zeros if zeroed else torch.empty
        return make(tuple(int(s) for s in shape), dtype=kind, device=ref.device)
    return _generic.empty(ref, shape, dtype, zeroed)


def _torch_workspace(index, nbytes):
    """A zeroed uint8 [nbytes] torch tensor on cuda:index, or None where torch is not installed
    or does not see that device (then the first CUDA run() allocates it in q's framework)."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        return None
    return torch.zeros(nbytes, dtype=torch.uint8, device=torch.device("cuda", index))


def _torch_stream_query(index):
    """plan()'s query of torch's current raw stream on cuda:index: the shim's torch._C call (the
    public torch.cuda.current_stream() builds a device and a Stream object each call, microseconds
    of plan()), or the public form where the shim refuses this torch."""
    try:
        from hopattn._torch._compat import current_raw_stream
    except ImportError:  # a torch older than hopattn.torch supports
        import torch

        return lambda: torch.cuda.current_stream(index).cuda_stream
    return functools.partial(current_raw_stream, index)


def _host_lengths(x, name):
    """plan()'s lengths as the extension takes them. numpy arrays and CPU int32 torch tensors,
    the usual ones, need no tensor check (~0.2 us each). A contiguous 1-D CPU int32 torch tensor
    crosses as (address, length), which _C.BatchAttention.plan reads during the call while the
    caller holds the tensor (~0.3 us; its numpy view costs ~0.7 us more, a DLPack capsule ~2.4 us);
    other CPU int32 ones as their numpy view (the buffer protocol, strides kept); anything else,
    errors included, as _generic.dl passes it."""
    kind = type(x)
    np = sys.modules.get("numpy")
    if np is not None and kind is np.ndarray:
        return _generic.dl(x)
    torch = sys.modules.get("torch")
    if torch is not None and kind is torch.Tensor and x.dtype is torch.int32 and x.is_cpu:
        if x.dim() == 1 and x.is_contiguous():
            return (x.data_ptr(), x.numel())
        return x.numpy()
    hopattn._require_tensors(**{name: x})
    return _generic.dl(x)


class BatchAttention:
    """Attention of one serving step (mixed prefill chunks and decodes) over a paged KV cache.

    Made once for the engine's limits; ``plan(cu_seqlens_q, kv_lens)`` once per step (on the host,
    from host copies of the lengths, never a device sync); ``run(...)`` once per layer with that
    plan.

    Arguments: ``num_qo_heads`` Hq and ``num_kv_heads`` Hkv (Hq % Hkv == 0, Hq / Hkv <= 128);
    ``head_dim`` D of q and k (64, 128 or 256) and ``head_dim_v`` Dv of v (default D);
    ``page_size`` 1..256; ``kv_layout`` "NHD" (pages [num_pages, page_size, Hkv, D]) or "HND"
    ([num_pages, Hkv, page_size, D]); ``causal`` (default True, bottom-right aligned: query i of
    q_len sees key j iff j <= i + kv_len - q_len); ``window=(left, right)`` sliding window around
    that diagonal, -1 = unbounded; ``softcap`` c > 0 maps a scaled logit s to c*tanh(s/c);
    ``scale`` (default 1/sqrt(D)); ``max_batch`` and ``max_tokens``: the most requests and q tokens
    a step may hold (buffers are sized for them once); ``device``: where run()'s tensors live
    (None = the current CUDA device, or the CPU where there is none; "cpu", "cuda", "cuda:N").

    CPU tensors run the CPU reference through the plan. A CUDA configuration owns its device
    workspace (``workspace_size`` bytes, zeroed, allocated once here with torch where torch sees
    the device, else in q's framework by the first CUDA run()); plan() uploads each plan into it
    on the device's current stream and run() reads it there, so run() allocates nothing but the
    outputs it is not given and is CUDA-graph capturable: a graph that captured run() replays
    whatever plan() uploaded last (with the same buffers, sized for the limits).
    """

    def __init__(
        self,
        num_qo_heads,
        num_kv_heads,
        head_dim,
        page_size,
        *,
        head_dim_v=None,
        kv_layout="NHD",
        causal=True,
        window=(-1, -1),
        softcap=0.0,
        scale=None,
        max_batch=256,
        max_tokens=16384,
        device=None,
    ):
        left, right = _args.window_pair(window)
        self._device = _device(device)
        self._c = _C.BatchAttention(
            _args.int32(num_qo_heads, "num_qo_heads"),
            _args.int32(num_kv_heads, "num_kv_heads"),
            _args.int32(head_dim, "head_dim"),
            _args.int32(page_size, "page_size"),
            head_dim_v=0 if head_dim_v is None else _args.int32(head_dim_v, "head_dim_v"),
            kv_layout=_args.layout(kv_layout),
            **_args.mask(causal, left, right, softcap, scale),
            max_batch=_args.int32(max_batch, "max_batch"),
            max_tokens=_args.int32(max_tokens, "max_tokens"),
            device=self._device[0],
            device_index=self._device[1],
        )
        self._workspace = None  # the device workspace, a tensor of its framework
        self._held = None  # the same imported once (_C.Workspace): what plan() and run() pass
        self._current_stream = None  # () -> the raw current stream of the workspace's device
        self.handle = next(_HANDLES)
        _OBJECTS[self.handle] = self
        kind, index = self._device
        size = self._c.workspace_size
        if kind == "cuda" and size > 0 and _C.built_with_cuda():
            ws = _torch_workspace(index, size)
            if ws is not None:
                self._keep_workspace(ws)

    @property
    def device(self):
        """The device run()'s tensors live on: "cpu" or "cuda:N"."""
        kind, index = self._device
        return "cpu" if kind == "cpu" else f"cuda:{index}"

    def __repr__(self):
        return f"hopattn.BatchAttention(device={self.device!r}, planned={self._c.planned!r})"

    def plan(self, cu_seqlens_q, kv_lens):
        """Plans one step. ``cu_seqlens_q`` int32 [B+1]: request b's q tokens are rows
        cu_seqlens_q[b] .. cu_seqlens_q[b+1]-1 of q (0 first, non-decreasing, total <= max_tokens);
        ``kv_lens`` int32 [B]: its cached tokens including those q tokens (each >= its q length;
        a request with no q tokens costs nothing). Both host (CPU) arrays: numpy or CPU torch.
        B <= max_batch. The plan serves every run() until the next plan().

        CUDA configurations: the plan is copied into the object's device workspace by an
        asynchronous copy on the device's current stream (torch's, or CuPy's; no device sync),
        so runs enqueued after it on that stream, captured graphs' replays included, see it."""
        cu = _host_lengths(cu_seqlens_q, "cu_seqlens_q")
        kv = _host_lengths(kv_lens, "kv_lens")
        held = self._held
        if held is None:
            self._c.plan(cu, kv)  # CPU, or a CUDA workspace not allocated yet: run() uploads
        else:
            self._c.plan(cu, kv, held, self._current_stream())

    def run(
        self,
        q,
        k_cache,
        v_cache,
        cu_seqlens_q,
        kv_lens,
        page_table,
        *,
        sinks=None,
        k_scale=None,
        v_scale=None,
        out=None,
        lse_out=None,
    ):
        """Attention of the planned step, for one layer.

        - ``q`` [total_q, Hq, D], bf16 or fp16 (float32 too on CPU); rows past the step's q
          tokens are left alone
        - ``k_cache`` [num_pages, page_size, Hkv, D] ("NHD") or [num_pages, Hkv, page_size, D]
          ("HND"); ``v_cache`` the same with Dv; dtype q's, or 8-bit (float8_e4m3fn; on CPU also
          float8_e5m2 / int8) with real value = stored * scale
        - ``cu_seqlens_q`` int32 [B+1], ``kv_lens`` int32 [B]: on q's device, with the values
          plan() saw; ``page_table`` int32 [B, max_pages]: request b's pages in token order
        - ``sinks`` float32 [Hq]: a logit per q head added to the softmax denominator only;
          ``k_scale`` / ``v_scale``: float, or float32 [Hkv] per KV head

        Returns ``(out, lse)``: out [total_q, Hq, Dv] in q's dtype, lse float32 [total_q, Hq]
        (natural log; a row that sees no key gives out 0, lse -inf). ``out=`` / ``lse_out=``
        write into caller buffers.
        """
        # Eager torch calls: the C++ fast path (hopattn._torch_C) runs the whole call, or declines
        # (NotImplemented) before anything ran and the path below serves and raises.
        result = hopattn._try_fast(
            "batch_run",
            q,
            self._c,
            self._held,
            q,
            k_cache,
            v_cache,
            cu_seqlens_q,
            kv_lens,
            page_table,
            sinks,
            k_scale,
            v_scale,
            out,
            lse_out,
        )
        if result is not NotImplemented:
            return result
        hopattn._require_tensors(
            q=q,
            k_cache=k_cache,
            v_cache=v_cache,
            cu_seqlens_q=cu_seqlens_q,
            kv_lens=kv_lens,
            page_table=page_table,
        )
        hopattn._one_framework(
            "q",
            q,
            k_cache=k_cache,
            v_cache=v_cache,
            cu_seqlens_q=cu_seqlens_q,
            kv_lens=kv_lens,
            page_table=page_table,
            sinks=sinks,
            k_scale=k_scale,
            v_scale=v_scale,
            out=out,
            lse_out=lse_out,
        )
        k_value, k_per_head = _args.kv_scale(k_scale, "k_scale")
        v_value, v_per_head = _args.kv_scale(v_scale, "v_scale")
        if hopattn._is_torch(q):
            options = dict(
                handle=self.handle,
                sinks=sinks,
                k_scale=k_value,
                k_scale_per_head=k_per_head,
                v_scale=v_value,
                v_scale_per_head=v_per_head,
            )
            tensors = (q, k_cache, v_cache, cu_seqlens_q, kv_lens, page_table)
            return hopattn._backend(q).batch_run(tensors, options, out, lse_out)
        lead = tuple(q.shape)[:-1]
        if out is None:
            out = _empty(q, (*lead, tuple(v_cache.shape)[-1] if v_cache.shape else 0))
        if lse_out is None:
            lse_out = _empty(q, lead, "float32")
        dl = _generic.dl
        self._c.run(
            dl(q),
            dl(k_cache),
            dl(v_cache),
            dl(cu_seqlens_q),
            dl(kv_lens),
            dl(page_table),
            dl(out),
            dl(lse_out),
            sinks=dl(sinks),
            k_scale=k_value,
            k_scale_per_head=dl(k_per_head),
            v_scale=v_value,
            v_scale_per_head=dl(v_per_head),
            workspace=self._workspace_for(q),
            stream=_generic.stream_of(q),
        )
        return out, lse_out

    def _keep_workspace(self, ws):
        """Makes `ws` the device workspace, imported once here (a bad one is refused now), and
        picks plan()'s query of the current stream of its device: torch's or CuPy's."""
        self._held = _C.Workspace(_generic.dl(ws))
        self._workspace = ws
        if hopattn._is_torch(ws):
            self._current_stream = _torch_stream_query(self._device[1])
        else:
            self._current_stream = functools.partial(_generic.stream_of, ws)

    def _workspace_for(self, q):
        """run()'s workspace (CUDA), as a _C.Workspace: the one made at construction, or, where
        none could be made there, one allocated zeroed in q's framework now (once); None where
        none is needed or q is elsewhere (run() then names the device)."""
        if self._held is None:
            size = self._c.workspace_size
            if size == 0 or _device_of(q) != self._device:
                return None
            self._keep_workspace(_empty(q, (size,), "uint8", zeroed=True))
        elif _device_of(q) != self._device:
            return None
        return self._held
