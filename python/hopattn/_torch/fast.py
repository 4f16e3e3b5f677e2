"""The eager fast path: ``hopattn._torch_C``, an optional C++ extension built against the torch
installed when hopattn was built (python/torch_ext/ext.cpp).

hopattn's public functions (and ``BatchAttention.run``) hand a plain eager call on torch tensors to
it first, with their arguments as given. It takes the calls it can run exactly as the generic path would (plain
``torch.Tensor`` / ``nn.Parameter`` on CPU or CUDA, the common argument types, no tracer, mode,
functorch transform or forward-mode AD level active): it reads the tensors in place, allocates the
outputs with torch's allocator, runs on the current stream of the tensors' device, reuses the
decode / mla workspaces of :mod:`hopattn._torch.workspace`, and for attention inputs that require
grad records a C++ autograd node whose backward is the bwd family. Any other call it answers with
``NotImplemented`` before doing anything, and the generic path (the ``torch.library`` ops of
:mod:`hopattn._torch.ops`, which torch.compile, opcheck and the dispatcher always use) serves it.

- ``EXT``: the extension module, or None where it was not built or does not load (built against
  another torch). ``hopattn.torch.set_fast_path(False)`` turns its use off (the library reads no
  environment variable).
- ``REASON``: why ``EXT`` is None ("" when it is not).
"""

from hopattn import _C
from hopattn._torch import decode as _decode
from hopattn._torch import mla as _mla

EXT = None
REASON = ""


def _load():
    try:
        from hopattn import _torch_C
    except ImportError as e:  # not built (no torch at build time), or another torch's build
        return None, f"hopattn._torch_C does not import: {e}"
    try:
        _torch_C.bind(_C.torch_api(), _decode.WORKSPACES, _mla.WORKSPACES)
    except (ImportError, AttributeError, TypeError) as e:
        return None, f"hopattn._torch_C does not bind: {e}"
    return _torch_C, ""


EXT, REASON = _load()
