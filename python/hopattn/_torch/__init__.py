"""The torch integration behind :mod:`hopattn.torch` (imported only from there).

- ``_compat``: every private torch API hopattn uses, version-checked, with public fallbacks.
- ``ops``: :class:`~hopattn._torch.ops.Family`, which turns one schema per family into the
  ``torch.library`` custom op, its ``*_out`` variant, their fake implementations, the autograd
  registration and the eager fast path.
- ``workspace``: per-(device, stream) workspaces of the families that need scratch memory.
- ``attention``, ``decode``, ``mla``, ``merge``, ``batch``: one module per family (schema,
  output shapes, the C++ call, autograd).
"""
