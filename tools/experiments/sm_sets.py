"""`sm_sets.py SM_GPCS_OUTPUT N [tpc]`: sets of N SM ids from tools/sm_gpcs.cu's groups (one
line "K SMs: a b c ..." a GPC), for `hopattn bench ... --free-sms` / `--decode-sm-order` and
`stream_rate sms`. Prints "spread a,b,...", taken round-robin over the groups (largest first),
each group's SMs in id order (so whole pairs 2k, 2k + 1: the two SMs of a TPC, if %smid numbers
them so; the library's `gpc` order takes one SM a pair first instead, gpc_order.hpp), and
"packed a,b,...", whole groups in turn. With `tpc`: "pairs" and "singles", N SMs from the two
largest groups, N / 2 from each: whole pairs, against one SM of as many pairs."""
import sys

groups = []
for line in open(sys.argv[1]):
    head, sep, tail = line.partition("SMs:")
    if sep and head.strip().isdigit():
        groups.append(sorted(int(x) for x in tail.split()))
n = int(sys.argv[2])
groups.sort(key=len, reverse=True)


def round_robin(lists, count):
    out, depth = [], 0
    while len(out) < count and any(depth < len(g) for g in lists):
        out += [g[depth] for g in lists if depth < len(g)][: count - len(out)]
        depth += 1
    return out


if len(sys.argv) > 3 and sys.argv[3] == "tpc":
    half = n // 2
    pairs, singles = [], []
    for g in groups[:2]:
        firsts = [s for s in g if s % 2 == 0 and s + 1 in g]  # SM 2k of each pair the GPC holds
        pairs += [sm for s in firsts[: half // 2] for sm in (s, s + 1)]
        singles += firsts[:half]
    print("pairs " + ",".join(map(str, pairs)))
    print("singles " + ",".join(map(str, singles)))
else:
    print("spread " + ",".join(map(str, round_robin(groups, n))))
    print("packed " + ",".join(map(str, [sm for g in groups for sm in g][:n])))
