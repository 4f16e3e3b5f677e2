"""Scratch memory of the families that need it (decode, mla), owned per (device, stream).

A C++ call given a workspace smaller than it needs runs nothing and returns the bytes it needs
(0 when it ran), so a call holding a large enough buffer crosses to C++ once.

- :class:`Workspace`: one growable byte buffer on one device, used by the calls of one stream.
  decode's starts zero-filled (its zero-once contract, options.hpp: zeroed once after allocation,
  the kernels leave it zeroed); mla's is uninitialized (it holds split partials only).
- :class:`WorkspaceCache`: a family's workspaces by (device index, raw stream). Eager CUDA calls
  on the current device reuse their stream's workspace, so calls in flight on two streams never
  share one and calls on one stream are ordered. A buffer is allocated while its stream is
  current, so freeing it (a larger one replacing it, :meth:`WorkspaceCache.release`, or
  ``hopattn.torch.release_workspaces()``) is stream-ordered in torch's caching allocator and safe
  at any time.
- No cache serves CPU tensors (a CPU call runs synchronously in the calling thread, and two
  threads may call at once), a device other than the current one, or CUDA-graph capture: there
  each call allocates its own workspace, under capture from the graph's private pool, so a
  captured graph owns its workspace and never holds memory the cache may free or reuse.

Entries are not tied to the lifetime of Python stream objects: torch hands out a new
``torch.cuda.Stream`` wrapper on every ``current_stream()`` and keeps its streams in a per-device
pool for the life of the process, so there is no object whose collection means "this stream is
gone". The entries are bounded by the streams a process uses; ``release`` frees them.
"""

import torch

from hopattn._torch import _compat


def _allocate(device, nbytes, zeroed):
    make = torch.zeros if zeroed else torch.empty
    return make(nbytes, dtype=torch.uint8, device=device)


class Workspace:
    """A byte buffer on `device` that grows on demand (zero-filled when `zeroed`)."""

    __slots__ = ("device", "zeroed", "buffer")

    def __init__(self, device, zeroed):
        self.device = device
        self.zeroed = zeroed
        self.buffer = None

    @property
    def nbytes(self):
        return 0 if self.buffer is None else self.buffer.numel()

    def reserve(self, nbytes):
        """A buffer of at least `nbytes`: the current one, or a new one of max(nbytes, twice the
        current size) that replaces it (fewer regrowths when sizes creep up)."""
        if self.buffer is None or self.buffer.numel() < nbytes:
            self.buffer = _allocate(self.device, max(nbytes, 2 * self.nbytes), self.zeroed)
        return self.buffer

    def release(self):
        self.buffer = None


class WorkspaceCache:
    """One family's :class:`Workspace` per (device index, raw stream) of eager CUDA calls."""

    def __init__(self, family, zeroed):
        self.family = family
        self.zeroed = zeroed
        self._entries = {}

    def __len__(self):
        return len(self._entries)

    def entries(self):
        """{(device index, raw stream): Workspace}, a copy."""
        return dict(self._entries)

    def nbytes(self):
        return sum(w.nbytes for w in self._entries.values())

    def get(self, ref, stream):
        """The workspace of a call on `ref`'s device and `stream`, or None where no cache may
        serve (CPU, another than the current device, CUDA-graph capture)."""
        if not ref.is_cuda:
            return None
        device = ref.get_device()
        if device != _compat.current_device() or _compat.is_capturing():
            return None
        key = (device, stream)
        ws = self._entries.get(key)
        if ws is None:
            ws = self._entries[key] = Workspace(ref.device, self.zeroed)
        return ws

    def release(self, device=None):
        """Drops the workspaces (of one device index, or all); returns the bytes released."""
        keys = [key for key in self._entries if device is None or key[0] == device]
        freed = 0
        for key in keys:
            freed += self._entries.pop(key).nbytes
        return freed

    def run(self, call, ref, stream):
        """Runs `call(workspace tensor or None)`, which returns 0 when it ran and otherwise the
        workspace bytes it needs (having run nothing): once with the cached workspace, and again
        with a large enough one when that did not suffice."""
        ws = self.get(ref, stream)
        needed = call(None if ws is None else ws.buffer)
        if needed:
            buf = (
                ws.reserve(needed) if ws is not None else _allocate(ref.device, needed, self.zeroed)
            )
            if call(buf):
                raise RuntimeError(f"hopattn.{self.family}: the workspace size did not settle")
