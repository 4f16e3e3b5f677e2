# Type stub of the public API (see the docstrings in __init__.py for shapes and semantics).
# Tensor: any array with __dlpack__ (torch.Tensor, numpy.ndarray, CuPy, JAX); outputs come back
# as the same kind of array as the inputs.
from typing import Any, Dict, Optional, Protocol, Sequence, Tuple, TypeVar, Union

class _DLPack(Protocol):
    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    @property
    def shape(self) -> Sequence[int]: ...

T = TypeVar("T", bound=_DLPack)
PageTable = Union[_DLPack, Tuple[_DLPack, _DLPack]]  # block table [B, max_pages] or CSR pair

__version__: str

def built_with_cuda() -> bool: ...

class Error(RuntimeError): ...

def check_errors(stream: Optional[Any] = None) -> None: ...
def debug(enabled: Optional[bool] = None) -> bool: ...
def attention(
    q: T,
    k: T,
    v: T,
    *,
    causal: bool = False,
    window: Tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    scale: Optional[float] = None,
    sinks: Optional[T] = None,
    cu_seqlens_q: Optional[T] = None,
    cu_seqlens_k: Optional[T] = None,
    max_seqlen_q: Optional[int] = None,
    max_seqlen_k: Optional[int] = None,
    deterministic: bool = False,
    page_table: Optional[PageTable] = None,
    kv_lens: Optional[T] = None,
    kv_layout: str = "NHD",
    out: Optional[T] = None,
    lse_out: Optional[T] = None,
) -> Tuple[T, T]: ...
def attention_backward(
    dout: T,
    q: T,
    k: T,
    v: T,
    out: T,
    lse: T,
    *,
    causal: bool = False,
    window: Tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    scale: Optional[float] = None,
    sinks: Optional[T] = None,
    cu_seqlens_q: Optional[T] = None,
    cu_seqlens_k: Optional[T] = None,
    max_seqlen_q: Optional[int] = None,
    max_seqlen_k: Optional[int] = None,
    deterministic: bool = False,
    page_table: Optional[PageTable] = None,
    kv_lens: Optional[T] = None,
    kv_layout: str = "NHD",
    dq: Optional[T] = None,
    dk: Optional[T] = None,
    dv: Optional[T] = None,
    dsinks: Optional[T] = None,
) -> Tuple[T, T, T, Optional[T]]: ...
def decode(
    q: T,
    k_cache: T,
    v_cache: T,
    kv_lens: T,
    page_table: PageTable,
    *,
    causal: bool = True,
    window: Tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    scale: Optional[float] = None,
    sinks: Optional[T] = None,
    k_scale: Union[float, T, None] = None,
    v_scale: Union[float, T, None] = None,
    kv_layout: str = "NHD",
    tree_mask: Optional[T] = None,
    beam_width: int = 1,
    shared_kv_lens: Optional[T] = None,
    num_splits: Optional[int] = None,
    out: Optional[T] = None,
    lse_out: Optional[T] = None,
) -> Tuple[T, T]: ...
def mla(
    q_nope: T,
    q_pe: T,
    ckv: T,
    kpe: T,
    cu_seqlens_q: T,
    kv_lens: T,
    page_table: PageTable,
    *,
    causal: bool = True,
    scale: Optional[float] = None,
    max_seqlen_q: Optional[int] = None,
    kv_scale: Optional[float] = None,
    num_splits: Optional[int] = None,
    schedule: str = "auto",
    out: Optional[T] = None,
    lse_out: Optional[T] = None,
) -> Tuple[T, T]: ...
def merge_states(
    o_a: T, lse_a: T, o_b: T, lse_b: T, *, out: Optional[T] = None, lse_out: Optional[T] = None
) -> Tuple[T, T]: ...
def merge_states_n(
    o: T, lse: T, *, out: Optional[T] = None, lse_out: Optional[T] = None
) -> Tuple[T, T]: ...

class BatchAttention:
    # One serving step: plan(cu_seqlens_q [B+1], kv_lens [B]) on host int32 arrays, then
    # run(q [total_q, Hq, D], k_cache, v_cache, cu_seqlens_q, kv_lens, page_table [B, max_pages])
    # -> (out [total_q, Hq, Dv], lse float32 [total_q, Hq]). CUDA configurations own a device
    # workspace; plan() uploads into it on the current stream. `handle` names the object for the
    # torch op torch.ops.hopattn.batch_run.
    handle: int
    def __init__(
        self,
        num_qo_heads: int,
        num_kv_heads: int,
        head_dim: int,
        page_size: int,
        *,
        head_dim_v: Optional[int] = None,
        kv_layout: str = "NHD",
        causal: bool = True,
        window: Tuple[int, int] = (-1, -1),
        softcap: float = 0.0,
        scale: Optional[float] = None,
        max_batch: int = 256,
        max_tokens: int = 16384,
        device: Any = None,
    ) -> None: ...
    @property
    def device(self) -> str: ...
    def plan(self, cu_seqlens_q: _DLPack, kv_lens: _DLPack) -> None: ...
    def run(
        self,
        q: T,
        k_cache: T,
        v_cache: T,
        cu_seqlens_q: T,
        kv_lens: T,
        page_table: T,
        *,
        sinks: Optional[T] = None,
        k_scale: Union[float, T, None] = None,
        v_scale: Union[float, T, None] = None,
        out: Optional[T] = None,
        lse_out: Optional[T] = None,
    ) -> Tuple[T, T]: ...

def support_matrix(device: Optional[str] = None) -> Dict[str, Any]: ...
def format_support_matrix(matrix: Optional[Dict[str, Any]] = None) -> str: ...
