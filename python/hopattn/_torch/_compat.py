"""Every private torch API hopattn uses, behind one version check, each with a public fallback.

An eager call asks torch a few questions per call (the current CUDA device and stream, whether a
CUDA graph is being captured, whether anything would intercept the op's dispatch). The public
forms cost microseconds each (a ``torch.cuda.Stream`` object built per call, lazy-init checks);
``torch._C`` answers the same in a fraction of that. Those calls live here and nowhere else:

- ``current_raw_stream(device)``: the raw ``cudaStream_t`` of the device's current stream
  (``torch._C._cuda_getCurrentRawStream``; public: ``torch.cuda.current_stream(d).cuda_stream``).
- ``current_device()``: ``torch._C._cuda_getDevice`` (public: ``torch.cuda.current_device``).
- ``is_capturing()``: ``torch._C._cuda_isCurrentStreamCapturing`` (public:
  ``torch.cuda.is_current_stream_capturing``).
- ``plain_context()``: True when calling an op's implementation directly is what its dispatch
  would do anyway: not under torch.compile (public ``torch.compiler.is_compiling``), jit tracing
  (``torch._C._get_tracing_state``), a dispatch mode (``_len_torch_dispatch_stack``), a torch
  function mode (``_is_torch_function_mode_enabled``) or a functorch transform
  (``_are_functorch_transforms_active``), nor inside a forward-mode AD level
  (``torch.autograd.forward_ad._current_level``). Fallback: always False, so every call goes
  through the dispatcher (correct, slower).

The private forms are used when torch is at least ``PRIVATE_MIN`` (all of these calls predate it;
the suite has run on torch 2.11 and 2.15), every name exists, and a self-check at import (the mode
queries answer in the types expected) passes; otherwise the public forms. ``MISSING`` names what
was not found, ``ACTIVE`` which forms are in use (tests/python/test_torch_compat.py checks both).
"""

import re
import types

import torch
import torch.autograd.forward_ad

# torch.library.custom_op / register_fake / register_autograd and opcheck appeared in 2.4.
MIN_VERSION = (2, 4)
PRIVATE_MIN = (2, 4)

_CUDA_NAMES = ("_cuda_getCurrentRawStream", "_cuda_getDevice", "_cuda_isCurrentStreamCapturing")
_MODE_NAMES = (
    "_get_tracing_state",
    "_len_torch_dispatch_stack",
    "_is_torch_function_mode_enabled",
    "_are_functorch_transforms_active",
)


def version_tuple(version):
    """(major, minor) of a torch version string ("2.15.0+cu132", "2.6.0a0+git1234")."""
    m = re.match(r"(\d+)\.(\d+)", str(version))
    if m is None:
        raise ImportError(f"hopattn.torch: cannot read the torch version {version!r}")
    return int(m.group(1)), int(m.group(2))


def _mode_queries_ok(c):
    # Types only: a mode may legitimately be active while this module is imported (a
    # `with torch.device(...)` block is a torch function mode), so "nothing active" is not checked.
    try:
        state = c._get_tracing_state()
        return (
            (state is None or not isinstance(state, (bool, int)))
            and type(c._len_torch_dispatch_stack()) is int
            and type(c._is_torch_function_mode_enabled()) is bool
            and type(c._are_functorch_transforms_active()) is bool
        )
    except Exception:  # a changed signature: use the public forms
        return False


def bind(c, version, is_compiling, forward_ad=None):
    """The shim's functions over `c` (torch._C, or a stand-in in tests) and `forward_ad`
    (torch.autograd.forward_ad) for torch `version`."""
    v = version_tuple(version)
    if v < MIN_VERSION:
        raise ImportError(
            f"hopattn.torch needs torch >= {MIN_VERSION[0]}.{MIN_VERSION[1]} "
            f"(torch.library.custom_op), found {version}"
        )
    recent = v >= PRIVATE_MIN
    missing = tuple(name for name in _CUDA_NAMES + _MODE_NAMES if not hasattr(c, name))
    if type(getattr(forward_ad, "_current_level", None)) is not int:
        missing += ("forward_ad._current_level",)
    api = types.SimpleNamespace(MISSING=missing)

    # CUDA queries. A CPU-only torch build has none of these; with no CUDA tensors they are
    # never called, and the public forms raise torch's own error if they were.
    if recent and not any(name in missing for name in _CUDA_NAMES):
        api.current_raw_stream = c._cuda_getCurrentRawStream
        api.current_device = c._cuda_getDevice
        api.is_capturing = c._cuda_isCurrentStreamCapturing
        cuda = "private"
    else:
        api.current_raw_stream = lambda device: torch.cuda.current_stream(device).cuda_stream
        api.current_device = torch.cuda.current_device
        api.is_capturing = torch.cuda.is_current_stream_capturing
        cuda = "public"

    modes_found = not any(n in missing for n in _MODE_NAMES + ("forward_ad._current_level",))
    if recent and modes_found and _mode_queries_ok(c):
        tracing_state = c._get_tracing_state
        dispatch_modes = c._len_torch_dispatch_stack
        function_modes = c._is_torch_function_mode_enabled
        transforms = c._are_functorch_transforms_active

        def plain_context():
            # is_compiling first: under Dynamo it is the constant True and nothing else runs.
            return not (
                is_compiling()
                or tracing_state() is not None
                or dispatch_modes() > 0
                or function_modes()
                or transforms()
                or forward_ad._current_level >= 0
            )

        modes = "private"
    else:

        def plain_context():
            return False

        modes = "fallback (every call through the dispatcher)"

    api.plain_context = plain_context
    api.ACTIVE = {"cuda queries": cuda, "plain-context check": modes}
    return api


_api = bind(torch._C, torch.__version__, torch.compiler.is_compiling, torch.autograd.forward_ad)
MISSING = _api.MISSING
ACTIVE = _api.ACTIVE
current_raw_stream = _api.current_raw_stream
current_device = _api.current_device
is_capturing = _api.is_capturing
plain_context = _api.plain_context
