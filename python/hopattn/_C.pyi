# Type stub of the extension module hopattn._C (python/src). Internal: the public API is the
# hopattn package, which allocates outputs and passes them here. Tensors are any object with
# __dlpack__ (or a DLPack capsule), or a pair (array, dtype name) that reinterprets an integer
# view as bf16 / fp8 (numpy + ml_dtypes). Streams are cudaStream_t addresses (0 = default).
from typing import Any, Dict, Optional, Tuple, Union, overload

_Tensor = Any
_PageTable = Union[_Tensor, Tuple[_Tensor, _Tensor]]
_Lengths = Union[_Tensor, Tuple[int, int]]

MLA_LATENT_DIM: int
MLA_ROPE_DIM: int

def built_with_cuda() -> bool: ...

class Error(RuntimeError): ...

def check_errors(stream: int = 0) -> None: ...
def set_debug(enabled: bool) -> None: ...
def debug_enabled() -> bool: ...
def attention_fwd(
    q: _Tensor,
    k: _Tensor,
    v: _Tensor,
    out: _Tensor,
    lse: _Tensor,
    *,
    cu_seqlens_q: Optional[_Tensor] = None,
    cu_seqlens_k: Optional[_Tensor] = None,
    max_seqlen_q: int = 0,
    max_seqlen_k: int = 0,
    page_table: Optional[_PageTable] = None,
    kv_lens: Optional[_Tensor] = None,
    kv_layout: str = "NHD",
    sinks: Optional[_Tensor] = None,
    causal: bool = False,
    window_left: int = -1,
    window_right: int = -1,
    softcap: float = 0.0,
    scale: Optional[float] = None,
    deterministic: bool = False,
    workspace: None = None,  # refused unless None: the forward needs no workspace
    stream: int = 0,
) -> None: ...
def attention_bwd(
    dout: _Tensor,
    q: _Tensor,
    k: _Tensor,
    v: _Tensor,
    out: _Tensor,
    lse: _Tensor,
    dq: _Tensor,
    dk: _Tensor,
    dv: _Tensor,
    dsinks: Optional[_Tensor] = None,
    *,
    cu_seqlens_q: Optional[_Tensor] = None,
    cu_seqlens_k: Optional[_Tensor] = None,
    max_seqlen_q: int = 0,
    max_seqlen_k: int = 0,
    page_table: Optional[_PageTable] = None,
    kv_lens: Optional[_Tensor] = None,
    kv_layout: str = "NHD",
    sinks: Optional[_Tensor] = None,
    causal: bool = False,
    window_left: int = -1,
    window_right: int = -1,
    softcap: float = 0.0,
    scale: Optional[float] = None,
    deterministic: bool = False,
    workspace: Optional[_Tensor] = None,
    stream: int = 0,
) -> int: ...
def attention_bwd_workspace_size(
    dout: _Tensor,
    q: _Tensor,
    k: _Tensor,
    v: _Tensor,
    out: _Tensor,
    lse: _Tensor,
    dq: _Tensor,
    dk: _Tensor,
    dv: _Tensor,
    dsinks: Optional[_Tensor] = None,
    *,
    cu_seqlens_q: Optional[_Tensor] = None,
    cu_seqlens_k: Optional[_Tensor] = None,
    max_seqlen_q: int = 0,
    max_seqlen_k: int = 0,
    page_table: Optional[_PageTable] = None,
    kv_lens: Optional[_Tensor] = None,
    kv_layout: str = "NHD",
    sinks: Optional[_Tensor] = None,
    causal: bool = False,
    window_left: int = -1,
    window_right: int = -1,
    softcap: float = 0.0,
    scale: Optional[float] = None,
    deterministic: bool = False,
    workspace: Optional[_Tensor] = None,
    stream: int = 0,
) -> int: ...

# Returns 0 after running; runs nothing and returns the bytes needed when `workspace` is smaller.
def decode(
    q: _Tensor,
    k_cache: _Tensor,
    v_cache: _Tensor,
    kv_lens: _Tensor,
    page_table: _PageTable,
    out: _Tensor,
    lse: _Tensor,
    *,
    kv_layout: str = "NHD",
    causal: bool = True,
    window_left: int = -1,
    window_right: int = -1,
    softcap: float = 0.0,
    scale: Optional[float] = None,
    sinks: Optional[_Tensor] = None,
    k_scale: float = 1.0,
    k_scale_per_head: Optional[_Tensor] = None,
    v_scale: float = 1.0,
    v_scale_per_head: Optional[_Tensor] = None,
    tree_mask: Optional[_Tensor] = None,
    beam_width: int = 1,
    shared_kv_lens: Optional[_Tensor] = None,
    num_splits: int = 0,
    workspace: Optional[_Tensor] = None,
    stream: int = 0,
) -> int: ...
def decode_workspace_size(
    q: _Tensor,
    k_cache: _Tensor,
    v_cache: _Tensor,
    kv_lens: _Tensor,
    page_table: _PageTable,
    out: _Tensor,
    lse: _Tensor,
    *,
    kv_layout: str = "NHD",
    causal: bool = True,
    window_left: int = -1,
    window_right: int = -1,
    softcap: float = 0.0,
    scale: Optional[float] = None,
    sinks: Optional[_Tensor] = None,
    k_scale: float = 1.0,
    k_scale_per_head: Optional[_Tensor] = None,
    v_scale: float = 1.0,
    v_scale_per_head: Optional[_Tensor] = None,
    tree_mask: Optional[_Tensor] = None,
    beam_width: int = 1,
    shared_kv_lens: Optional[_Tensor] = None,
    num_splits: int = 0,
    workspace: Optional[_Tensor] = None,
    stream: int = 0,
) -> int: ...
def mla(
    q_nope: _Tensor,
    q_pe: _Tensor,
    ckv: _Tensor,
    kpe: _Tensor,
    cu_seqlens_q: _Tensor,
    kv_lens: _Tensor,
    page_table: _PageTable,
    out: _Tensor,
    lse: _Tensor,
    *,
    max_seqlen_q: int = 0,
    causal: bool = True,
    scale: Optional[float] = None,
    kv_scale: float = 1.0,
    num_splits: int = 0,
    schedule: str = "auto",
    workspace: Optional[_Tensor] = None,
    stream: int = 0,
) -> int: ...
def merge_states(
    o_a: _Tensor,
    lse_a: _Tensor,
    o_b: _Tensor,
    lse_b: _Tensor,
    out: _Tensor,
    lse: _Tensor,
    *,
    stream: int = 0,
) -> None: ...
def merge_states_n(
    o: _Tensor, lse: _Tensor, out: _Tensor, lse_out: _Tensor, *, stream: int = 0
) -> None: ...
def current_cuda_device() -> int: ...

class Workspace:
    # A byte tensor imported once (and kept alive): BatchAttention's device workspace.
    def __init__(self, workspace: _Tensor) -> None: ...
    @property
    def nbytes(self) -> int: ...

class BatchAttention:
    def __init__(
        self,
        num_qo_heads: int,
        num_kv_heads: int,
        head_dim: int,
        page_size: int,
        *,
        head_dim_v: int = 0,
        kv_layout: str = "NHD",
        causal: bool = True,
        window_left: int = -1,
        window_right: int = -1,
        softcap: float = 0.0,
        scale: Optional[float] = None,
        max_batch: int = 256,
        max_tokens: int = 16384,
        device: str = "cpu",
        device_index: int = 0,
    ) -> None: ...
    # The lengths: arrays, or (address, length) of a contiguous 1-D host int32 array that the
    # caller holds for the call.
    @overload
    def plan(self, cu_seqlens_q: _Lengths, kv_lens: _Lengths) -> None: ...
    @overload
    def plan(
        self, cu_seqlens_q: _Lengths, kv_lens: _Lengths, workspace: Workspace, stream: int
    ) -> None: ...
    def run(
        self,
        q: _Tensor,
        k_cache: _Tensor,
        v_cache: _Tensor,
        cu_seqlens_q: _Tensor,
        kv_lens: _Tensor,
        page_table: _Tensor,
        out: _Tensor,
        lse: _Tensor,
        *,
        sinks: Optional[_Tensor] = None,
        k_scale: float = 1.0,
        k_scale_per_head: Optional[_Tensor] = None,
        v_scale: float = 1.0,
        v_scale_per_head: Optional[_Tensor] = None,
        workspace: Optional[Workspace] = None,
        stream: int = 0,
    ) -> None: ...
    @property
    def plan_buffer_size(self) -> int: ...
    @property
    def workspace_size(self) -> int: ...
    @property
    def planned(self) -> Dict[str, int]: ...

# Support-matrix probes: None when the validator accepts the configuration, else its message.
def probe_attention(
    device: str,
    dtype: str,
    head_dim_qk: int,
    head_dim_v: int,
    hq: int,
    hkv: int,
    mode: str,
    page_size: int,
    kv_layout: str,
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    sinks: bool,
    backward: bool,
    deterministic: bool,
) -> Optional[str]: ...
def probe_decode(
    device: str,
    q_dtype: str,
    kv_dtype: str,
    head_dim: int,
    hq: int,
    hkv: int,
    q_len: int,
    page_size: int,
    kv_layout: str,
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    sinks: bool,
    per_head_scales: bool,
    tree_mask: bool,
    beam_width: int,
    shared_prefix: bool,
    num_splits: int,
) -> Optional[str]: ...
def probe_mla(
    device: str,
    dtype: str,
    heads: int,
    q_len: int,
    page_size: int,
    causal: bool,
    kv_dtype: str = "",
) -> Optional[str]: ...
def probe_merge(device: str, dtype: str, head_dim: int, n: int) -> Optional[str]: ...
