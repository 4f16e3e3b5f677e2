#!/usr/bin/env python3
"""Host time of hopattn.BatchAttention.plan() and of its pieces, for one 256-request step: a
prefill chunk of 8192 tokens and 255 decodes over 2k..16k cached tokens (Hq 32, Hkv 8, D 128,
pages of 16, max_batch 256, max_tokens 16384). Prints the median of single timed calls of each
row; the rows are timed in interleaved rounds so that clock drift hits them alike. ~3 s.

    python3 tools/plan_overhead.py                 # CUDA configuration where there is a GPU
    python3 tools/plan_overhead.py --device cpu    # the CPU configuration (no upload)
    taskset -c 2 python3 tools/plan_overhead.py    # one core, as docs/perf/NOTES.md measures

Rows (CUDA): plan() with numpy and with CPU torch lengths; the C++ call alone without the upload
(`_c.plan(cu, kv)`: the planner; again with the torch lengths as _host_lengths hands them over)
and with it (`_c.plan(cu, kv, workspace, stream)`: the planner, the event record and the async
copy); the stream query plan() makes; the lengths' conversions; and, as "before", what plan()
did per call until the workspace was imported once at construction: the public torch stream
query, the workspace's DLPack import, and a plan() with both emulated from the pieces.
"""

import argparse
import time

import numpy as np

import hopattn
from hopattn import _C, _generic, batch

try:
    import torch
except ImportError:
    torch = None


def step():
    q_lens, kv_lens = [8192], [8192]
    for i in range(255):
        q_lens.append(1)
        kv_lens.append(2048 + 14336 * i // 254 + 1)
    cu = np.zeros(len(q_lens) + 1, dtype=np.int32)
    cu[1:] = np.cumsum(q_lens)
    return cu, np.array(kv_lens, dtype=np.int32)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device", default=None, help='"cpu", "cuda" or "cuda:N" (default: the current device)'
    )
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=100, help="timed calls of each row per round")
    args = parser.parse_args()

    ba = hopattn.BatchAttention(32, 8, 128, 16, max_batch=256, max_tokens=16384, device=args.device)
    cu, kv = step()
    a, b = batch._host_lengths(cu, "cu"), batch._host_lengths(kv, "kv")
    rows = {"plan() numpy lengths": lambda: ba.plan(cu, kv)}
    if torch is not None:
        tcu, tkv = torch.from_numpy(cu), torch.from_numpy(kv)
        rows["plan() torch CPU lengths"] = lambda: ba.plan(tcu, tkv)
    rows["_c.plan(cu, kv): planner, no upload"] = lambda: ba._c.plan(a, b)
    if torch is not None:
        # The same call with the torch lengths as they cross ((address, length) pairs): the
        # difference to the row above is the extension's import of the two forms.
        ta, tb = batch._host_lengths(tcu, "cu"), batch._host_lengths(tkv, "kv")
        rows["_c.plan(torch lengths as they cross)"] = lambda: ba._c.plan(ta, tb)
    held = ba._held
    if held is not None:
        ws, query = ba._workspace, ba._current_stream
        s = query()
        rows["_c.plan(cu, kv, ws, stream): with upload"] = lambda: ba._c.plan(a, b, held, s)
        rows["stream query (plan()'s)"] = query
    rows["_host_lengths x2 numpy"] = lambda: (
        batch._host_lengths(cu, "cu"),
        batch._host_lengths(kv, "kv"),
    )
    if torch is not None:
        rows["_host_lengths x2 torch"] = lambda: (
            batch._host_lengths(tcu, "cu"),
            batch._host_lengths(tkv, "kv"),
        )
    if held is not None and hopattn._is_torch(ws):
        public = lambda: torch.cuda.current_stream(ws.device).cuda_stream  # noqa: E731
        rows["before: public torch stream query"] = public
        rows["before: workspace DLPack import"] = lambda: _C.Workspace(_generic.dl(ws))

        def before():
            # plan() numpy as it was: the tensor checks, both per-call costs above, the C++ call.
            hopattn._require_tensors(cu_seqlens_q=cu, kv_lens=kv)
            c, k = _generic.dl(cu), _generic.dl(kv)
            ba._c.plan(c, k, _C.Workspace(_generic.dl(ws)), public())

        rows["before: plan() numpy (emulated)"] = before

    samples = {name: [] for name in rows}
    for f in rows.values():  # warm-up: the pinned staging, caches, the branch predictor
        for _ in range(50):
            f()
    clock = time.perf_counter
    for _ in range(args.rounds):
        for name, f in rows.items():
            out = samples[name]
            for _ in range(args.calls):
                t = clock()
                f()
                out.append(clock() - t)

    n = args.rounds * args.calls
    print(f"BatchAttention.plan(), 256 requests, {ba.device}, median of {n} calls:")
    for name, ts in samples.items():
        ts.sort()
        print(f"  {name:44s} {1e6 * ts[len(ts) // 2]:8.2f} us")
    if held is None:
        print(f"  ({ba.device} configuration: no device workspace, so no upload)")


if __name__ == "__main__":
    main()
