#!/usr/bin/env python3
"""Replay of the fwd kernel's persistent tile walk on the host: how evenly the static walk spreads
causal work over the CTAs (src/kernels/fwd/tile_scheduler.cuh), plain and paired, and which one
plan::fwd_pair_tiles (src/plan/fwd_order.hpp) picks.

A tile's work is its KV blocks (dense, bottom-right causal, q_len = kv_len) plus one block for its
fixed cost; a CTA's time is the sum of its tiles'. The walk is the kernel's: L2 sections of
(batch, head) pairs whose K and V fit half of a 50 MB L2, LPT order inside a section, the snake
over the grid; paired, units of m-blocks n - 1 - k and k. Dense calls (equal lengths) only: the
rule leaves varlen calls, whose lengths the host does not see, unpaired. The C++ host tests
(tests/gpu/fwd_schedule_test.cu) check the kernel's own functions against the same figures.

    python3 tools/fwd_walk_replay.py                 # the issue rows and the rule's sweep
    python3 tools/fwd_walk_replay.py 16384 8 1 256   # S, heads, batch, head dim
    python3 tools/fwd_walk_replay.py 16384 32 1 64 192  # ... and query rows a tile (the hd64
                                                     # instance of three consumers: 192)
    python3 tools/fwd_walk_replay.py 8192 32 2 64 192 4  # ... and the GQA group (q heads a KV
                                                     # head, unpacked: a section holds whole
                                                     # groups, its K/V counted once a KV head)
    python3 tools/fwd_walk_replay.py varlen          # random varlen mixes, plain and paired
    python3 tools/fwd_walk_replay.py dynamic         # the same, each CTA taking the next unit
                                                     # when it finishes (an atomic tile counter)
"""
import heapq
import math
import random
import sys

GRID, L2_HALF = 132, 25 << 20
# Query rows a tile (128; 192 for the hd64 instance of three consumer warpgroups). A KV block's
# work grows with the rows, so the costs below count 128-row blocks.
BLOCK_M = 128
# q heads a KV head (GQA, rows unpacked): an L2 section counts KV heads, so it holds GROUP times
# the (batch, q head) pairs (src/kernels/fwd/launch.cu, l2_section_size).
GROUP = 1
# (S, heads, batch, head dim) of the causal rows the notes name.
ISSUE_ROWS = [(16384, 8, 1, 256), (4096, 8, 4, 256), (2048, 8, 8, 256), (16384, 16, 1, 128),
              (1024, 16, 16, 128), (16384, 32, 1, 64), (1024, 32, 16, 64)]


def block_n(d):
    return 80 if d == 256 else 128


def section_pairs(s, heads, batch, d):
    return min(max(1, L2_HALF // (s * d * 4)) * GROUP, heads * batch)


def walk_units(s, heads, batch, d, paired, lengths=None):
    """The walk's units in order (sections, then rank, then the section's pairs), each its work.
    lengths: varlen sequence lengths (q = kv each; s is then their maximum)."""
    lengths = lengths or [s] * batch
    batch = len(lengths)
    m_blocks = (s + BLOCK_M - 1) // BLOCK_M
    walk_m = m_blocks + (m_blocks & 1) if paired else m_blocks
    bn, bh = block_n(d), heads * batch
    sec = section_pairs(s, heads, batch, d)

    def cost(m, b):
        n = lengths[b]
        if m * BLOCK_M >= n:
            return 0
        return (math.ceil(min((m + 1) * BLOCK_M, n) / bn) + 1) * BLOCK_M / 128

    units = []  # the order: sections, then rank, then the section's pairs
    ranks = walk_m // 2 if paired else walk_m
    for first in range(0, bh, sec):
        for k in range(ranks):
            for pair in range(first, min(first + sec, bh)):
                b = pair // heads
                units.append(cost(walk_m - 1 - k, b) + (cost(k, b) if paired else 0))
    return units


def busiest_over_mean(s, heads, batch, d, paired, grid=GRID, lengths=None):
    """The static walk: unit i to CTA i % grid, snaking back every other round."""
    units = walk_units(s, heads, batch, d, paired, lengths)
    g = min(grid, len(units))
    load = [0] * g
    for i, w in enumerate(units):
        r, c = divmod(i, g)
        load[c if r % 2 == 0 else g - 1 - c] += w
    return max(load) / (sum(load) / g)


def dynamic_busiest_over_mean(units, grid=GRID):
    """Each CTA takes the next unit of the order when it finishes its last (fetch cost 0)."""
    g = min(grid, len(units))
    heap = [(0, c) for c in range(g)]
    for w in units:
        t, c = heapq.heappop(heap)
        heapq.heappush(heap, (t + w, c))
    return max(t for t, _ in heap) / (sum(units) / g)


def dynamic_rows():
    for args in ISSUE_ROWS:
        plain, paired = (walk_units(*args, p) for p in (False, True))
        print(f"S={args[0]} heads={args[1]} B={args[2]} hd{args[3]}: static plain "
              f"{busiest_over_mean(*args, False):.3f} paired {busiest_over_mean(*args, True):.3f}; "
              f"dynamic plain {dynamic_busiest_over_mean(plain):.3f} paired "
              f"{dynamic_busiest_over_mean(paired):.3f}, all tiles heavy to light "
              f"{dynamic_busiest_over_mean(sorted(plain, reverse=True)):.3f}")

    def figures(s, heads, d, lengths):
        plain = walk_units(s, heads, 0, d, False, lengths)
        return (busiest_over_mean(s, heads, 0, d, False, lengths=lengths),
                dynamic_busiest_over_mean(plain),
                dynamic_busiest_over_mean(walk_units(s, heads, 0, d, True, lengths)),
                dynamic_busiest_over_mean(sorted(plain, reverse=True)))

    n, means = over_mixes(figures, even_m_blocks=False)
    print(f"varlen: {n} random mixes (geometric mean of busiest over mean): static plain "
          f"{means[0]:.3f}, dynamic plain {means[1]:.3f}, dynamic paired {means[2]:.3f}, "
          f"dynamic over all tiles heavy to light {means[3]:.3f}")


def pair_rule(s, heads, batch, grid=GRID):
    m_blocks = (s + BLOCK_M - 1) // BLOCK_M
    if m_blocks % 2:
        return False
    units = m_blocks // 2 * heads * batch
    rounds = -(-units // grid)
    return units >= grid and rounds * grid * 25 <= units * 26


def row(s, heads, batch, d):
    plain = busiest_over_mean(s, heads, batch, d, False)
    paired = busiest_over_mean(s, heads, batch, d, True)
    pick = paired if pair_rule(s, heads, batch) else plain
    print(f"S={s} heads={heads} B={batch} hd{d}: plain {plain:.3f}, paired {paired:.3f}, "
          f"rule {'paired' if pair_rule(s, heads, batch) else 'plain'} -> {pick:.3f}")
    return plain, pick


def over_mixes(figures, even_m_blocks, trials=200):
    """figures(s, heads, d, lengths) over seeded random varlen mixes of 2-32 sequences of
    64..8192 tokens; returns the count and the geometric mean of each figure. even_m_blocks: the
    longest sequence grown by a block where its m-block count is odd, as the pair rule wants."""
    rng = random.Random(1)
    rows = []
    for _ in range(trials):
        count, heads, d = rng.choice([2, 4, 8, 16, 32]), rng.choice([8, 16, 32]), rng.choice(
            [64, 128, 256])
        lengths = [rng.randint(64, 8192) for _ in range(count)]
        s = max(lengths)
        if even_m_blocks and (s + 127) // 128 % 2:
            lengths[lengths.index(s)] = s = s + 128
        rows.append(figures(s, heads, d, lengths))
    return trials, [math.exp(sum(map(math.log, column)) / trials) for column in zip(*rows)]


def varlen_mixes():
    n, means = over_mixes(
        lambda s, heads, d, lengths: [
            busiest_over_mean(s, heads, 0, d, paired, lengths=lengths) for paired in (False, True)
        ], even_m_blocks=True)
    print(f"varlen: {n} random mixes of 2-32 sequences of 64..8192 tokens, busiest CTA over the "
          f"mean (geometric mean): plain {means[0]:.3f}, paired {means[1]:.3f}")


def main():
    global BLOCK_M, GROUP
    if sys.argv[1:] == ["varlen"]:
        varlen_mixes()
        return
    if sys.argv[1:] == ["dynamic"]:
        dynamic_rows()
        return
    if len(sys.argv) in (5, 6, 7):
        if len(sys.argv) >= 6:
            BLOCK_M = int(sys.argv[5])
        if len(sys.argv) == 7:
            GROUP = int(sys.argv[6])
        row(*map(int, sys.argv[1:5]))
        return
    for args in ISSUE_ROWS:
        row(*args)
    n, worse, log_plain, log_pick = 0, 0, 0.0, 0.0
    for d in (64, 128, 256):
        for s in (512, 1000, 1024, 2048, 3000, 4096, 5000, 6000, 7000, 8192, 9000, 12000, 16384,
                  20000, 32768):
            for heads in (1, 2, 4, 8, 16, 32, 64):
                for batch in (1, 2, 3, 4, 8, 16):
                    if (s + 127) // 128 * heads * batch < 2 * GRID:
                        continue
                    plain = busiest_over_mean(s, heads, batch, d, False)
                    pick = (busiest_over_mean(s, heads, batch, d, True)
                            if pair_rule(s, heads, batch) else plain)
                    n += 1
                    worse += pick > plain * 1.04
                    log_plain += math.log(plain)
                    log_pick += math.log(pick)
    print(f"sweep: {n} shapes, busiest CTA over the mean (geometric mean): plain "
          f"{math.exp(log_plain / n):.3f}, with the rule {math.exp(log_pick / n):.3f}; "
          f"{worse} shapes more than 4% worse than plain")


if __name__ == "__main__":
    main()
