"""Normalization of the public keyword arguments into the flat values the backends take.

Both backends (the framework-neutral DLPack one and the torch custom ops, whose schemas allow only
flat tensors and scalars) receive exactly these values, so a call means the same on either.
"""

import numbers

_LAYOUTS = ("NHD", "HND")


def window_pair(window):
    """(left, right) of a sliding window, -1 = unbounded on that side."""
    if type(window) is tuple and len(window) == 2 and type(window[0]) is type(window[1]) is int:
        return window  # the common case, without the generic checks below (per-call host time)
    try:
        left, right = window
    except (TypeError, ValueError):
        raise TypeError(
            f"window: expected a pair (left, right) of ints, -1 = unbounded, got {window!r}"
        ) from None
    if not all(isinstance(w, numbers.Integral) and not isinstance(w, bool) for w in (left, right)):
        raise TypeError(f"window: expected a pair (left, right) of ints, got {window!r}")
    return int(left), int(right)


def optional_int(value, name):
    """A host-side bound: None -> 0 (unknown; read from host index tensors on CPU)."""
    if value is None:
        return 0
    if type(value) is int:
        return value
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"{name}: expected an int or None, got {type(value).__name__}")
    return int(value)


def optional_float(value, name):
    if value is None:
        return None
    if type(value) is float:
        return value
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TypeError(f"{name}: expected a float or None, got {type(value).__name__}")
    return float(value)


def real(value, name):
    if type(value) is float:
        return value
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TypeError(f"{name}: expected a float, got {type(value).__name__}")
    return float(value)


def layout(kv_layout):
    if kv_layout not in _LAYOUTS:
        raise ValueError(f'kv_layout: expected "NHD" or "HND", got {kv_layout!r}')
    return kv_layout


def page_tensors(page_table):
    """(block_table, page_indptr, page_indices) from a block table or a (indptr, indices) pair."""
    if page_table is None:
        return None, None, None
    if isinstance(page_table, (tuple, list)):
        if len(page_table) != 2:
            raise ValueError(
                "page_table: expected a block table [B, max_pages] or a pair (page_indptr, "
                f"page_indices), got a sequence of {len(page_table)} items"
            )
        return None, page_table[0], page_table[1]
    return page_table, None, None


def kv_scale(scale, name):
    """(per-tensor value, per-KV-head tensor or None) from a float, None or an fp32 [Hkv] array."""
    if scale is None:
        return 1.0, None
    if type(scale) is float:
        return scale, None
    if isinstance(scale, numbers.Real) and not isinstance(scale, bool):
        return float(scale), None
    if not hasattr(scale, "__dlpack__"):
        raise TypeError(
            f"{name}: expected a float or a float32 array [Hkv], got {type(scale).__name__}"
        )
    return 1.0, scale


def num_splits(value):
    return optional_int(value, "num_splits")


def positive_int(value, name):
    if type(value) is int:
        return value
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    return int(value)
