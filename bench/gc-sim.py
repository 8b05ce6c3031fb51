#!/usr/bin/env python3
"""Band GC simulator: what victim choice, the free-band watermark and hot/cold
separation of GC moves do to write amplification, before building them.

One record is one unit; a band holds S records; GC empties the sealed band with
the best score whenever fewer than --low bands are free and re-places its live
records. Streams: `mixed` puts GC moves in the band user writes fill (masse
today); `sep` gives GC moves a band of their own; `sep2` splits them by how often
a record was moved since it was last written (once / more); `hc2` is `sep` plus
cold user writes (the write of a key whose live copy looks long-lived, by
--cold-by, goes to the GC moves' band: masse's `Options::cold_user_writes`),
`hc3` the same with a third band for them; `sepbit` is five classes after SepBIT
(Wang et al., FAST '22): user writes split by the lifespan of the copy they
replace (below --ell × keys user writes or not), GC moves by the age of their
record (below 4×, 16× that, or older); `oracle` knows the future: every
record, user write or move, goes to one of five bands by when its key is
written next (within keys/16, keys/4, keys, 4·keys user writes, or later) —
a bound on what placement by expected lifetime can do; `freq` the same five
bands by an estimate of that from exact per-key write counts. With
--absorb N (any mode), a user write of a key whose live copy is in the user
stream's open segment (a segment is N records placed by that stream)
replaces it there and places nothing: masse's `Options::absorb_overwrites`
(N ≈ 1,950 records of 134 bytes in a 256 KiB segment, at full scale). By default a record
may only land in a band opened after the band holding its key's live copy (masse's
"later position = newer version", design.md §10.5); otherwise it goes to the
newest open band, and the share of such forced placements is printed
(--unordered drops the rule). The rule here covers keys with a live copy only;
docs/plans/issue18-hot-cold.md §3 gives the whole rule.

It counts records, not bytes: multiply by the format's own overhead (Table 4's
1.17 with format 3; 1.2 for the 16 + 100-byte records of the churn runs) to compare with `masse demo`'s host WAF. The whole run is
counted, the fill included, as `masse demo --phases fill,overwrite` does.

Example (docs/plans/issue18-hot-cold.md):
    bench/gc-sim.py --dist zipf --modes mixed,sep --policies greedy,cb --low 8,4
"""
import argparse
import bisect
import itertools
import random


class Sim:
    def __init__(self, keys, bands, util, policy, mode, low, ordered, seed):
        self.S = int(keys / (util * bands))
        self.NB, self.policy, self.mode, self.low, self.ordered = bands, policy, mode, low, ordered
        self.rnd = random.Random(seed)
        self.loc = [-1] * keys          # band of each key's live copy
        self.cnt = [0] * keys           # freq: writes of each key so far
        self.wtime = [0] * keys         # user writes before each key's live record was written
        self.moves_of = [0] * keys      # times each key's current record was moved by GC
        self.live = [0] * bands
        self.sealed_at = [0] * bands    # bands sealed before this one (its age clock)
        self.order = [0] * bands        # opening order: masse's band first_seq
        self.state = ["free"] * bands
        self.free = list(range(bands))
        self.members = [set() for _ in range(bands)]
        self.open = {}                  # stream -> [band, records in it]
        self.opened = self.sealed = 0
        self.user = self.moved = self.forced = 0
        self.absorb = 0                 # records per user segment (0: no absorption)
        self.seg_of = [-1 << 60] * keys  # user segment that holds each key's live copy (none: -2^60)
        self.useg = self.useg_used = self.absorbed = 0

    def open_band(self, st):
        b = self.free.pop(0)
        self.state[b] = "open"
        self.opened += 1
        self.order[b] = self.opened
        self.open[st] = [b, 0]

    def room(self, st):
        """The open band of stream `st`, sealing a full one first."""
        if st not in self.open:
            self.open_band(st)
        if self.open[st][1] >= self.S:
            b = self.open[st][0]
            self.state[b] = "sealed"
            self.sealed += 1
            self.sealed_at[b] = self.sealed
            self.open_band(st)
        return self.open[st][0]

    def target(self, k, st):
        b = self.room(st)
        old = self.loc[k]
        if not self.ordered or old < 0 or b == old or self.order[b] > self.order[old]:
            return st
        self.forced += 1
        newest = max(self.open, key=lambda s: self.order[self.open[s][0]])
        self.room(newest)
        return newest

    def place(self, k, st):
        st = self.target(k, st)
        b, old = self.open[st][0], self.loc[k]
        if old >= 0:
            self.live[old] -= 1
            self.members[old].discard(k)
        self.loc[k] = b
        self.seg_of[k] = -1 << 60
        if st == "user" and self.absorb:
            self.seg_of[k] = self.useg
            self.useg_used += 1
            if self.useg_used == self.absorb:
                self.useg, self.useg_used = self.useg + 1, 0
        self.live[b] += 1
        self.members[b].add(k)
        self.open[st][1] += 1

    def score(self, b):
        u = self.live[b] / self.S
        if self.policy == "greedy":
            return 1 - u
        return (1 - u) * max(1, self.sealed - self.sealed_at[b]) / (1 + u)

    def gc(self):
        v = max((b for b in range(self.NB) if self.state[b] == "sealed"), key=self.score)
        for k in list(self.members[v]):
            self.moves_of[k] += 1
            st = {"mixed": "user", "sep": "gc", "hc2": "gc", "hc3": "gc"}.get(self.mode)
            if self.mode == "freq":
                st = self.freq_stream(k)
            elif self.mode == "oracle":
                st = self.oracle_stream(k)
            elif self.mode == "sepbit":
                age = self.user - self.wtime[k]
                st = "g1" if age < 4 * self.ell else ("g2" if age < 16 * self.ell else "g3")
            elif st is None:
                st = "gc%d" % min(self.moves_of[k], 2)
            self.place(k, st)
            self.moved += 1
        self.state[v] = "free"
        self.free.append(v)

    def user_stream(self, k):
        """Where a user write goes: `hc2`/`hc3` send a key whose live copy looks
        long-lived (moved by GC, or in a band sealed more than --cold-age bands
        ago) to the GC band (`hc2`) or to a cold band of its own (`hc3`)."""
        if not self.mode.startswith("hc") or self.loc[k] < 0:
            return "user"
        old = self.loc[k]
        if self.cold_by == "moved":
            cold = self.moves_of[k] > 0
        else:
            cold = self.state[old] == "sealed" and self.sealed - self.sealed_at[old] > self.cold_age
        if not cold:
            return "user"
        return "gc" if self.mode == "hc2" else "cold"

    def freq_stream(self, k):
        """The oracle's five bands by an estimate instead: user writes so far over
        the key's writes so far (exact per-key counts)."""
        return self.bucket((self.user + 1) / self.cnt[k])

    def bucket(self, left):
        n = len(self.loc)
        return "o%d" % sum(left >= t for t in (n / 16, n / 4, n, 4 * n))

    def oracle_stream(self, k):
        return self.bucket(self.next_of[k] - self.user)

    def write(self, k):
        while len(self.free) < self.low:
            self.gc()
        if self.absorb and self.useg - self.absorb_segs < self.seg_of[k] <= self.useg:
            # The live copy is in the open user segment: overwrite it there.
            self.user += 1
            self.absorbed += 1
            return
        st = self.user_stream(k)
        if self.mode == "freq":
            self.cnt[k] += 1
            st = self.freq_stream(k)
        if self.mode == "oracle":
            self.next_of[k] = self.future[self.user]
            st = self.oracle_stream(k)
        if self.mode == "sepbit":
            st = "u1" if self.loc[k] >= 0 and self.user - self.wtime[k] < self.ell else "u2"
        self.wtime[k] = self.user
        self.moves_of[k] = 0
        self.place(k, st)
        self.user += 1


def drawer(dist, keys, theta, rnd):
    if dist == "uniform":
        return lambda: rnd.randrange(keys)
    # Zipfian over ranks, ranks scattered over the keys (YCSB's scrambled zipfian).
    cdf = list(itertools.accumulate(1.0 / (i + 1) ** theta for i in range(keys)))
    perm = list(range(keys))
    rnd.shuffle(perm)
    return lambda: perm[min(keys - 1, bisect.bisect_left(cdf, rnd.random() * cdf[-1]))]


def run(a, dist, mode, policy, low):
    sim = Sim(a.keys, a.bands, a.utilization, policy, mode, low, not a.unordered, a.seed)
    sim.cold_by, sim.cold_age, sim.ell = a.cold_by, a.cold_age, a.ell * a.keys
    sim.absorb, sim.absorb_segs = a.absorb, a.absorb_segments
    draw = drawer(dist, a.keys, a.theta, sim.rnd)
    writes = list(range(a.keys)) + [draw() for _ in range(int(a.overwrites * a.keys))]
    if mode == "oracle":
        sim.next_of, sim.future, seen = [0] * a.keys, [0] * len(writes), {}
        for i in range(len(writes) - 1, -1, -1):
            sim.future[i] = seen.get(writes[i], 1 << 62)
            seen[writes[i]] = i
    for k in writes:
        sim.write(k)
    total = sim.user + sim.moved - sim.absorbed
    return total / sim.user, sim.forced / total


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dist", default="uniform,zipf", help="uniform and/or zipf (comma-separated)")
    p.add_argument("--modes", default="mixed,sep", help="mixed, sep, sep2 (comma-separated)")
    p.add_argument("--policies", default="greedy,cb", help="greedy and/or cb (cost-benefit)")
    p.add_argument("--low", default="8", help="free-band watermarks (comma-separated)")
    p.add_argument("--keys", type=int, default=200_000, help="keys (masse demo's 2e6, scaled by 1/10)")
    p.add_argument("--bands", type=int, default=133, help="bands (masse demo's pool at --utilization 0.8)")
    p.add_argument("--utilization", type=float, default=0.8)
    p.add_argument("--overwrites", type=float, default=5.5, help="overwrites per key after the fill")
    p.add_argument("--theta", type=float, default=0.99)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cold-by", default="moved", help="hc modes: `moved` (live copy moved by GC) or `age`")
    p.add_argument("--cold-age", type=int, default=32, help="hc modes with --cold-by age: sealed bands")
    p.add_argument("--ell", type=float, default=0.1, help="sepbit: lifespan threshold, in user writes per key")
    p.add_argument("--absorb", type=int, default=0,
                   help="records per user segment: a user write whose key's live copy is in the open "
                        "user segment replaces it there (0: off)")
    p.add_argument("--absorb-segments", type=int, default=1,
                   help="with --absorb: how many of the user stream's newest segments take "
                        "overwrites (1: the open one; 2: it and the last one sealed, masse's held "
                        "segment; GC here may still pick the held segment's band, which masse "
                        "does not, so 2 flatters a little)")
    p.add_argument("--unordered", action="store_true", help="ignore the position-order rule")
    a = p.parse_args()
    for dist in a.dist.split(","):
        for low in map(int, a.low.split(",")):
            for mode in a.modes.split(","):
                for policy in a.policies.split(","):
                    waf, forced = run(a, dist, mode, policy, low)
                    print(f"{dist:8} low={low:<3} {mode:6} {policy:6} WAF {waf:.3f}  forced {forced * 100:.1f} %",
                          flush=True)


if __name__ == "__main__":
    main()
