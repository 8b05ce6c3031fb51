#!/usr/bin/env python3
"""Whole-machine pauses: times when every CPU stopped at once, alone or while a command runs.

    bench/vm-pauses.py --duration 10
    bench/vm-pauses.py --duration 10 -- fio --name=r --filename=F --rw=randread --bs=4k \\
        --direct=1 --ioengine=psync --numjobs=16 --time_based --runtime=12

One watcher process per CPU, pinned to it and run at SCHED_FIFO priority 50 (root or
CAP_SYS_NICE), sleeps 0.5 ms in a loop and records each wake-up that came more than
--late-ms late. A real-time task preempts every ordinary one as soon as its timer fires, so
a late wake-up means the CPU ran nothing of the guest's choosing: interrupts off for that
long, or the virtual CPU not running at all. When the late intervals of *every* CPU overlap,
the whole machine stopped; that is reported as a pause, with its length (the overlap) and
the gap to the one before. A request in flight across a pause takes at least the pause's
length, whatever the engine or tool that issued it; this is how the 16-thread read tails in
docs/benchmarks.md ("Why 16 blocking readers' p99.9 is about 28 ms here") were traced.

The command, if given, starts one second after the watchers and is waited for; its output
passes through. The report goes to standard error at the end.
"""
import argparse
import os
import subprocess
import sys
import time
from multiprocessing import Process, Queue


def watch(cpu, seconds, late_ms, out):
    """Sleep 0.5 ms at a time on `cpu` for `seconds`; put the late intervals on `out`."""
    os.sched_setaffinity(0, {cpu})
    rt = True
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))
    except PermissionError:
        rt = False
    late = []
    end = time.monotonic() + seconds
    while True:
        t0 = time.monotonic()
        time.sleep(0.0005)
        t = time.monotonic()
        if t - t0 > late_ms / 1000:
            late.append((t0, t))
        if t > end:
            break
    out.put((cpu, rt, late))


def overlaps(per_cpu):
    """The intervals during which every CPU was late at once."""
    common = per_cpu[0]
    for other in per_cpu[1:]:
        joined = []
        for a0, a1 in common:
            for b0, b1 in other:
                lo, hi = max(a0, b0), min(a1, b1)
                if hi > lo:
                    joined.append((lo, hi))
        common = joined
    return sorted(common)


def report(per_cpu, pauses, seconds, late_ms):
    p = sys.stderr
    for cpu, rt, late in per_cpu:
        worst = max((b - a for a, b in late), default=0) * 1000
        print(f"cpu {cpu}: {len(late)} wake-ups over {late_ms} ms late, worst {worst:.1f} ms"
              + ("" if rt else " (no SCHED_FIFO: run as root for a clean measure)"), file=p)
    if not pauses:
        print(f"whole-machine pauses: none in {seconds:.0f} s", file=p)
        return
    lens = sorted((b - a) * 1000 for a, b in pauses)
    gaps = [(pauses[i][0] - pauses[i - 1][0]) * 1000 for i in range(1, len(pauses))]
    total = sum(lens)
    print(f"whole-machine pauses: {len(pauses)} in {seconds:.0f} s ({len(pauses) / seconds:.1f}/s), "
          f"{total:.0f} ms in all ({100 * total / 1000 / seconds:.1f} % of the time); "
          f"length median {lens[len(lens) // 2]:.1f} ms, max {lens[-1]:.1f} ms", file=p)
    if gaps:
        gaps.sort()
        print(f"time between pauses: median {gaps[len(gaps) // 2]:.0f} ms", file=p)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=10, help="seconds to watch (10)")
    ap.add_argument("--late-ms", type=float, default=4, help="a wake-up this late counts (4 ms)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ...: run this meanwhile")
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    q = Queue()
    cpus = sorted(os.sched_getaffinity(0))
    procs = [Process(target=watch, args=(c, a.duration, a.late_ms, q)) for c in cpus]
    for pr in procs:
        pr.start()
    rc = 0
    if cmd:
        time.sleep(1)
        rc = subprocess.call(cmd)
    per_cpu = sorted(q.get() for _ in procs)
    for pr in procs:
        pr.join()
    report(per_cpu, overlaps([late for _, _, late in per_cpu]), a.duration, a.late_ms)
    sys.exit(rc)


if __name__ == "__main__":
    main()
