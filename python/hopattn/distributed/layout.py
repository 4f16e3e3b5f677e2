"""How a sequence is split among the ranks of a context-parallel group.

- ``"zigzag"``: a sequence of length L is cut into 2 * world chunks of L / (2 world); rank r holds
  chunks r and 2 world - 1 - r, in that order. With a causal mask every rank then gets the same
  amount of work (an early chunk, cheap, with a late one, dear).
- ``"contiguous"``: world chunks of L / world; rank r holds chunk r (causal work grows with r; a
  sliding window then needs only the ring steps that reach the window).

A varlen batch is split sequence by sequence: a rank's local tensor is, for each sequence in
order, its chunks of that sequence; its local cu_seqlens are the global ones divided by world.
"""

LAYOUTS = ("zigzag", "contiguous")


def check_layout(name):
    if name not in LAYOUTS:
        raise ValueError(f"layout: expected one of {LAYOUTS}, got {name!r}")


def pieces(world, layout):
    """Chunks a sequence is cut into."""
    return 2 * world if layout == "zigzag" else world


def check_lengths(seq_lens, world, layout, where="cu_seqlens"):
    n = pieces(world, layout)
    for b, length in enumerate(seq_lens):
        if length < 0 or length % n != 0:
            raise ValueError(
                f"{where}: sequence {b} has length {length}: the {layout!r} layout over "
                f"{world} ranks needs every length to be a multiple of {n}"
            )


def chunks_of(rank, world, length, layout):
    """[(global start, length)] of the chunks of a sequence of ``length`` that ``rank`` holds,
    in local order."""
    n = pieces(world, layout)
    c = length // n
    if layout == "zigzag":
        return [(rank * c, c), ((n - 1 - rank) * c, c)]
    return [(rank * c, c)]


def local_length(world, length, layout):
    del layout  # every layout gives each rank length / world positions of each sequence
    return length // world


def global_rows(seq_lens, rank, world, layout):
    """For each local row of ``rank``, its row in the unsharded varlen tensor (a list)."""
    rows = []
    start = 0
    for length in seq_lens:
        for g, c in chunks_of(rank, world, length, layout):
            rows.extend(range(start + g, start + g + c))
        start += length
    return rows
