"""`sm_sets.py SM_GPCS_OUTPUT N [tpc]`: sets of N SM ids from tools/sm_gpcs.cu's groups (one
line "K SMs: a b c ..." a GPC), for `hopattn bench ... --free-sms` / `--decode-sm-order` and
`stream_rate sms`. Prints "spread a,b,...", taken round-robin over the groups (largest first);
"packed a,b,...", whole groups in turn; "tpcspread a,b,...", round-robin over the groups as
spread, but first one SM of each pair 2k, 2k + 1 a group holds (the two SMs of a TPC, if %smid
numbers them so), then the pairs' other SMs. With `tpc`: "pairs" and "singles", N SMs from the
two largest groups, N / 2 from each: whole pairs, against one SM of as many pairs."""
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


def firsts_and_seconds(g):
    """One SM of each pair the group holds (and its unpaired SMs), then the pairs' others."""
    members = set(g)
    firsts = [s for s in g if s % 2 == 0 and s + 1 in members]
    lone = [s for s in g if (s ^ 1) not in members]
    return firsts + lone, [s + 1 for s in firsts]


if len(sys.argv) > 3 and sys.argv[3] == "tpc":
    two = groups[:2]
    half = n // 2
    pairs, singles = [], []
    for g in two:
        firsts, seconds = firsts_and_seconds(g)
        paired = [s for s in firsts if s + 1 in seconds]
        pairs += [sm for s in paired[: half // 2] for sm in (s, s + 1)]
        singles += paired[:half]
    print("pairs " + ",".join(map(str, pairs)))
    print("singles " + ",".join(map(str, singles)))
else:
    split = [firsts_and_seconds(g) for g in groups]
    tpcspread = round_robin([f for f, _ in split], n)
    tpcspread += round_robin([s for _, s in split], n - len(tpcspread))
    print("spread " + ",".join(map(str, round_robin(groups, n))))
    print("packed " + ",".join(map(str, [sm for g in groups for sm in g][:n])))
    print("tpcspread " + ",".join(map(str, tpcspread)))
