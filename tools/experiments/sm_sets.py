"""`sm_sets.py SM_GPCS_OUTPUT N`: two sets of N SM ids from tools/sm_gpcs.cu's groups (one line
"K SMs: a b c ..." a GPC): `spread`, taken round-robin over the groups (largest first), and
`packed`, whole groups in turn. Prints "spread a,b,..." and "packed a,b,...", for
`hopattn bench ... --free-sms` and `stream_rate sms`."""
import sys

groups = []
for line in open(sys.argv[1]):
    head, sep, tail = line.partition("SMs:")
    if sep and head.strip().isdigit():
        groups.append([int(x) for x in tail.split()])
n = int(sys.argv[2])
groups.sort(key=len, reverse=True)
spread, depth = [], 0
while len(spread) < n and any(depth < len(g) for g in groups):
    spread += [g[depth] for g in groups if depth < len(g)][: n - len(spread)]
    depth += 1
packed = [sm for g in groups for sm in g][:n]
print("spread " + ",".join(map(str, spread)))
print("packed " + ",".join(map(str, packed)))
