"""Normalization of the public keyword arguments into the flat values the backends take.

Both backends (the framework-neutral DLPack one and the torch custom ops, whose schemas allow only
flat tensors and scalars) receive exactly these values, so a call means the same on either.
"""

import numbers

_LAYOUTS = ("NHD", "HND")
# The C++ options are int32: a larger Python int would otherwise fail the binding's conversion
# with a dump of its whole signature instead of naming the argument.
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def _in_range(value, lo, hi, what):
    if not lo <= value <= hi:
        raise ValueError(f"{what}, got {value!r}")
    return value


def window_pair(window):
    """(left, right) of a sliding window, -1 = unbounded on that side."""
    if type(window) is tuple and len(window) == 2 and type(window[0]) is type(window[1]) is int:
        left, right = window  # the common case, without the generic checks (per-call host time)
    else:
        try:
            left, right = window
        except (TypeError, ValueError):
            raise TypeError(
                f"window: expected a pair (left, right) of ints, -1 = unbounded, got {window!r}"
            ) from None
        ints = (left, right)
        if not all(isinstance(w, numbers.Integral) and not isinstance(w, bool) for w in ints):
            raise TypeError(f"window: expected a pair (left, right) of ints, got {window!r}")
        left, right = int(left), int(right)
    if not (-1 <= left <= INT32_MAX and -1 <= right <= INT32_MAX):
        raise ValueError(
            f"window: expected ints in -1..{INT32_MAX} (-1 = unbounded), got {(left, right)!r}"
        )
    return left, right


def optional_int(value, name):
    """A host-side bound: None -> 0 (unknown; read from host index tensors on CPU)."""
    if value is None:
        return 0
    if type(value) is not int:
        if not isinstance(value, numbers.Integral) or isinstance(value, bool):
            raise TypeError(f"{name}: expected an int or None, got {type(value).__name__}")
        value = int(value)
    return _in_range(value, 0, INT32_MAX, f"{name}: expected an int in 0..{INT32_MAX} or None")


def flag(value, name):
    """A bool option. Truthiness would turn causal="false" on, so only bools (numpy's too)."""
    if value is True or value is False:
        return value
    kind = type(value)
    if kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_"):  # numpy 2 and 1
        return bool(value)
    raise TypeError(f"{name}: expected a bool, got {type(value).__name__}")


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


def mask(causal, left, right, softcap, scale):
    """The mask and scale keywords that attention, decode and BatchAttention share, normalized as
    each of them passes them on: causal, window_left, window_right (from window_pair, which the
    callers run first), softcap, scale."""
    return dict(
        causal=flag(causal, "causal"),
        window_left=left,
        window_right=right,
        softcap=real(softcap, "softcap"),
        scale=optional_float(scale, "scale"),
    )


def layout(kv_layout):
    if kv_layout not in _LAYOUTS:
        raise ValueError(f'kv_layout: expected "NHD" or "HND", got {kv_layout!r}')
    return kv_layout


_MLA_SCHEDULES = ("auto", "seesaw", "one-consumer", "narrow")


def mla_schedule(schedule):
    if not isinstance(schedule, str) or schedule not in _MLA_SCHEDULES:
        raise ValueError(
            'schedule: expected "auto", "seesaw", "one-consumer" or "narrow", '
            f"got {schedule!r}"
        )
    return schedule


def page_tensors(page_table, required=False):
    """(block_table, page_indptr, page_indices) from a block table or a (indptr, indices) pair."""
    if page_table is None:
        if required:
            raise TypeError(
                "page_table: expected a block table int32 [B, max_pages] or a pair (page_indptr, "
                "page_indices), got None"
            )
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
    if value is None:
        return 0
    return int32(value, "num_splits")


def int32(value, name):
    """An int option; its meaning (>= 1, dividing B, ...) is the C++ validator's to check."""
    if type(value) is not int:
        if not isinstance(value, numbers.Integral) or isinstance(value, bool):
            raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
        value = int(value)
    return _in_range(
        value, INT32_MIN, INT32_MAX, f"{name}: expected an int in {INT32_MIN}..{INT32_MAX}"
    )
