#!/usr/bin/env python3
"""A model of the fwd kernel's barrier protocol with split-row tiles (fwd_split_rows.patch,
kernels/fwd/split_rows.cuh): the producer's loads (K, Q, V of each block into a two-stage ring),
two consumers walking plain tiles (GEMM turns, the V-tail barrier) and split tiles (each over
every other block, then the three-barrier hand-over), with mbarrier phases and named barriers,
run under random interleavings (some favouring or starving one party). It reports a deadlock, a
consumer reading a stage that holds another block than the one it waited for, or an exchange
overwritten before it was read. Each consumer is one party (its 128 threads move together).

    python3 tools/experiments/split_rows_protocol.py [TRIALS]

With kSplitRead replaced by kSplitFree (two barrier ids instead of three) it finds the race the
third id closes within a few hundred trials."""
import random
import sys

STAGES = 2


class MBar:
    def __init__(self, count):
        self.count, self.arrived, self.phase = count, 0, 0

    def done(self, parity):  # phase with this parity completed
        return self.phase != parity

    def arrive(self, n=1):
        self.arrived += n
        assert self.arrived <= self.count, "over-arrival"
        if self.arrived == self.count:
            self.arrived = 0
            self.phase ^= 1


def sim(tiles, seed):
    rng = random.Random(seed)
    mb = {}
    for s in range(STAGES):
        for k in ('kf', 'vf'):
            mb[(k, s)] = MBar(1)
        for k in ('ke', 've'):
            mb[(k, s)] = MBar(2)
    mb['qf'] = MBar(1)
    mb['qe'] = MBar(2)
    stage_data = {}  # ('k' | 'v', stage) and 'q': the (tile, block) / tile loaded there last

    def producer():
        it, qph = 0, 0
        for ti, (kind, nblocks, tail) in enumerate(tiles):
            if nblocks == 0:
                continue
            for b in range(nblocks):
                s, ph = it % STAGES, (it // STAGES) & 1
                yield ('wait', ('ke', s), ph ^ 1)
                stage_data[('k', s)] = (ti, b)
                yield ('arrive', ('kf', s))
                if b == 0:
                    yield ('wait', 'qe', qph ^ 1)
                    stage_data['q'] = ti
                    yield ('arrive', 'qf')
                yield ('wait', ('ve', s), ph ^ 1)
                stage_data[('v', s)] = (ti, b)
                yield ('arrive', ('vf', s))
                it += 1
            qph ^= 1

    def consumer(c):
        it, qph = 0, 0
        if c == 1:
            yield ('nb_arrive', 'turn0')

        def st(i):
            return i % STAGES, (i // STAGES) & 1

        def use(kind, s, ti, b):
            got = stage_data.get((kind, s))
            assert got == (ti, b), f"c{c} reads {kind}{s}: holds {got}, waited for {(ti, b)}"

        for ti, (kind, nblocks, tail) in enumerate(tiles):
            if nblocks == 0:
                continue
            split = kind == 'split'
            if not split:
                # compute_rows (idle or not: same protocol)
                yield ('wait', 'qf', qph)
                s, ph = st(it)
                yield ('wait', ('kf', s), ph)
                yield ('nb_sync', f'turn{c}')
                use('k', s, ti, 0)
                assert stage_data['q'] == ti
                yield ('nb_arrive', f'turn{1 - c}')
                if nblocks == 1:
                    yield ('arrive', 'qe')
                yield ('arrive', ('ke', s))
                if tail:
                    yield ('wait', ('vf', s), ph)
                    yield ('nb_sync', 'vtail')
                prev = it
                it += 1
                for b in range(1, nblocks):
                    s, ph = st(it)
                    ps, pph = st(prev)
                    yield ('wait', ('kf', s), ph)
                    yield ('wait', ('vf', ps), pph)
                    yield ('nb_sync', f'turn{c}')
                    use('k', s, ti, b)
                    use('v', ps, ti, b - 1)
                    assert stage_data['q'] == ti
                    yield ('nb_arrive', f'turn{1 - c}')
                    if b == nblocks - 1:
                        yield ('arrive', 'qe')
                    yield ('arrive', ('ke', s))
                    yield ('arrive', ('ve', ps))
                    prev = it
                    it += 1
                ps, pph = st(prev)
                yield ('wait', ('vf', ps), pph)
                yield ('nb_sync', f'turn{c}')
                use('v', ps, ti, nblocks - 1)
                yield ('nb_arrive', f'turn{1 - c}')
                yield ('arrive', ('ve', ps))
                qph ^= 1
                continue
            # split tile
            last = (nblocks - 1 - c) // 2 * 2 + c
            yield ('wait', 'qf', qph)

            def pass_block(i, b, first):
                s, ph = st(i)
                yield ('wait', ('kf', s), ph)
                use('k', s, ti, b)
                yield ('arrive', ('ke', s))
                if first and tail:
                    yield ('wait', ('vf', s), ph)
                    yield ('nb_sync', 'vtail')
                yield ('wait', ('vf', s), ph)
                use('v', s, ti, b)
                yield ('arrive', ('ve', s))

            if c == 1:
                yield from pass_block(it, 0, True)
                it += 1
            i = c
            s, ph = st(it)
            yield ('wait', ('kf', s), ph)
            use('k', s, ti, i)
            assert stage_data['q'] == ti
            if i == last:
                yield ('arrive', 'qe')
            yield ('arrive', ('ke', s))
            if c == 0 and tail:
                yield ('wait', ('vf', s), ph)
                yield ('nb_sync', 'vtail')
            prev = it
            it += 1
            i += 2
            while i < nblocks:
                yield from pass_block(it, i - 1, False)
                it += 1
                s, ph = st(it)
                ps, pph = st(prev)
                yield ('wait', ('kf', s), ph)
                yield ('wait', ('vf', ps), pph)
                use('k', s, ti, i)
                use('v', ps, ti, i - 2)
                assert stage_data['q'] == ti
                if i == last:
                    yield ('arrive', 'qe')
                yield ('arrive', ('ke', s))
                yield ('arrive', ('ve', ps))
                prev = it
                it += 1
                i += 2
            ps, pph = st(prev)
            yield ('wait', ('vf', ps), pph)
            use('v', ps, ti, last)
            yield ('arrive', ('ve', ps))
            if last + 1 < nblocks:
                yield from pass_block(it, last + 1, False)
                it += 1
            qph ^= 1
            # hand-over
            if c == 1:
                yield ('nb_sync', 'free')
                yield ('write_x', ti)
                yield ('nb_arrive', 'written')
                yield ('nb_sync', 'read')
            else:
                yield ('nb_arrive', 'free')
                yield ('nb_sync', 'written')
                yield ('read_x', ti)
                yield ('nb_arrive', 'read')

    ents = {'P': producer(), 'C0': consumer(0), 'C1': consumer(1)}
    pending = {k: None for k in ents}
    done = set()
    xbuf = {'val': None, 'readers_pending': False}
    nbars = {}

    def nbar(name):
        if name not in nbars:
            nbars[name] = {'arrived': 0, 'gen': 0, 'sync_gen': {}}
        return nbars[name]

    def try_op(e, op):
        kind = op[0]
        if kind == 'wait':
            return mb[op[1]].done(op[2])
        if kind == 'arrive':
            mb[op[1]].arrive()
            return True
        if kind in ('nb_arrive', 'nb_sync'):
            b = nbar(op[1])
            key = e
            if key not in b['sync_gen']:
                b['arrived'] += 1
                assert b['arrived'] <= 2, f"named barrier {op[1]} over-arrived"
                my_gen = b['gen']
                if b['arrived'] == 2:
                    b['arrived'] = 0
                    b['gen'] += 1
                if kind == 'nb_arrive':
                    return True
                b['sync_gen'][key] = my_gen
            if b['gen'] > b['sync_gen'][key]:
                del b['sync_gen'][key]
                return True
            return False
        if kind == 'write_x':
            assert not xbuf['readers_pending'], "consumer 1 overwrote an exchange not yet read"
            xbuf['val'] = op[1]
            xbuf['readers_pending'] = True
            return True
        if kind == 'read_x':
            assert xbuf['val'] == op[1], f"consumer 0 read {xbuf['val']}'s exchange for {op[1]}"
            xbuf['readers_pending'] = False
            return True
        raise ValueError(op)

    bias = rng.random()
    favored = 'P'
    while len(done) < 3:
        runnable = []
        for e, g in ents.items():
            if e in done:
                continue
            if pending[e] is None:
                try:
                    pending[e] = next(g)
                except StopIteration:
                    done.add(e)
                    continue
            runnable.append(e)
        if not runnable:
            break
        rng.shuffle(runnable)
        if rng.random() < 0.05:
            favored = rng.choice(['P', 'C0', 'C1'])
        if favored in runnable and rng.random() < bias:
            runnable.remove(favored)
            runnable.insert(0, favored)
        elif favored in runnable and len(runnable) > 1 and rng.random() < bias:
            runnable.remove(favored)
            runnable.append(favored)
        progressed = False
        for e in runnable:
            if try_op(e, pending[e]):
                pending[e] = None
                progressed = True
                break
        if not progressed:
            return f"deadlock: {pending}"
    return None


def main():
    rng = random.Random(1)
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    for trial in range(trials):
        tiles = []
        if rng.random() < 0.3:  # runs of short split tiles (consumer 0 may finish one alone)
            tiles = [('split', 2, rng.random() < 0.3) for _ in range(rng.randint(2, 6))]
        for _ in range(rng.randint(0 if tiles else 1, 12)):
            k = rng.choice(['normal', 'split', 'split', 'zero', 'idle1'])
            if k == 'zero':
                tiles.append(('normal', 0, False))
            elif k == 'idle1':
                tiles.append(('normal', 1, rng.random() < 0.5))
            elif k == 'split':
                tiles.append(('split', rng.randint(2, 7), rng.random() < 0.5))
            else:
                tiles.append(('normal', rng.randint(1, 6), rng.random() < 0.5))
        err = sim(tiles, trial)
        if err:
            print("trial", trial, tiles, err)
            return 1
    print(f"{trials} random tile sequences: no deadlock, no stage or exchange mix-up")
    return 0


if __name__ == '__main__':
    sys.exit(main())
