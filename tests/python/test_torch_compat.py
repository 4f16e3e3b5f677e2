"""hopattn._torch._compat: the one module that calls private torch APIs. Its version check, its
public fallbacks, and that its plain-context check sees every kind of interception."""

import types
import warnings

import pytest

from conftest import HAS_CUDA

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from hopattn._torch import _compat  # noqa: E402  (after the torch skip)

_NAMES = _compat._CUDA_NAMES + _compat._MODE_NAMES
_FWAD = torch.autograd.forward_ad


def test_versions_are_read():
    assert _compat.version_tuple("2.15.0+cu132") == (2, 15)
    assert _compat.version_tuple("2.6.0a0+git1234abc") == (2, 6)
    assert _compat.version_tuple(torch.__version__) >= _compat.MIN_VERSION
    with pytest.raises(ImportError, match="cannot read the torch version"):
        _compat.version_tuple("nightly")


def test_too_old_torch_is_refused_by_name():
    with pytest.raises(ImportError, match=r"needs torch >= 2\.4 .*found 2\.3\.1"):
        _compat.bind(torch._C, "2.3.1", torch.compiler.is_compiling)


def test_this_torch_uses_the_private_forms():
    """Every private name exists in the torch the suite runs on (a CUDA build: a CPU-only build
    lacks the CUDA queries and uses their public forms, which it never calls)."""
    if not hasattr(torch._C, "_cuda_getCurrentRawStream"):
        pytest.skip("a CPU-only torch build has no CUDA queries")
    assert _compat.MISSING == ()
    assert _compat.ACTIVE == {"cuda queries": "private", "plain-context check": "private"}


def test_missing_names_fall_back_to_public_forms():
    api = _compat.bind(types.SimpleNamespace(), torch.__version__, torch.compiler.is_compiling)
    assert set(api.MISSING) == {*_NAMES, "forward_ad._current_level"}
    assert api.ACTIVE["cuda queries"] == "public"
    assert api.ACTIVE["plain-context check"].startswith("fallback")
    assert api.plain_context() is False  # every call through the dispatcher
    assert api.current_device is torch.cuda.current_device
    assert api.is_capturing is torch.cuda.is_current_stream_capturing


def test_changed_mode_queries_fall_back():
    def broken(*args):
        raise TypeError("takes 1 positional argument")

    stub = types.SimpleNamespace(**{name: broken for name in _NAMES})
    api = _compat.bind(stub, torch.__version__, torch.compiler.is_compiling, _FWAD)
    assert api.ACTIVE["plain-context check"].startswith("fallback")
    assert api.plain_context() is False


def test_an_active_mode_at_import_does_not_disable_the_fast_path():
    with torch.device("cpu"):  # a torch function mode
        api = _compat.bind(torch._C, torch.__version__, torch.compiler.is_compiling, _FWAD)
        assert api.plain_context() is False
    assert api.ACTIVE["plain-context check"] == "private"
    assert api.plain_context() is True


def test_plain_eager():
    assert _compat.plain_context() is True


def test_dispatch_mode_is_seen():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Mode():
        assert _compat.plain_context() is False


def test_function_mode_is_seen():
    from torch.overrides import TorchFunctionMode

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Mode():
        assert _compat.plain_context() is False


def test_functorch_transform_is_seen():
    seen = []

    def f(x):
        seen.append(_compat.plain_context())
        return x * 2

    torch.func.vmap(f)(torch.ones(3, 2))
    assert seen == [False]


def test_forward_ad_level_is_seen():
    with torch.autograd.forward_ad.dual_level():
        assert _compat.plain_context() is False
    assert _compat.plain_context() is True


def test_jit_tracing_is_seen():
    seen = []

    def f(x):
        seen.append(_compat.plain_context())
        return x * 2

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on Python values
        torch.jit.trace(f, torch.ones(2), check_trace=False)
    assert seen == [False]


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device visible")
@pytest.mark.gpu
def test_private_and_public_cuda_queries_agree():
    api = _compat.bind(types.SimpleNamespace(), torch.__version__, torch.compiler.is_compiling)
    for device in range(torch.cuda.device_count()):
        assert _compat.current_raw_stream(device) == api.current_raw_stream(device)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        assert _compat.current_raw_stream(torch.cuda.current_device()) == stream.cuda_stream
    assert _compat.current_device() == api.current_device()
    assert _compat.is_capturing() is api.is_capturing() is False
    graph = torch.cuda.CUDAGraph()
    x = torch.zeros(4, device="cuda")
    seen = []
    with torch.cuda.graph(graph):
        seen.append((_compat.is_capturing(), api.is_capturing()))
        x.add_(1)
    assert seen == [(True, True)]
