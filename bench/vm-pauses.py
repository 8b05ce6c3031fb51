#!/usr/bin/env python3
"""Whole-machine pauses: times when every CPU stopped at once, alone or while a command runs.

    bench/vm-pauses.py --duration 10
    bench/vm-pauses.py --duration 10 -- fio --name=r --filename=F --rw=randread --bs=4k \\
        --direct=1 --ioengine=psync --numjobs=16 --time_based --runtime=12

One watcher process per CPU, pinned to it and run at SCHED_FIFO priority 50 (root or
CAP_SYS_NICE), sleeps 0.5 ms in a loop and records each sleep that took longer than
--late-ms. A real-time task preempts every ordinary one as soon as its timer fires, so a late
wake-up means its CPU ran nothing of the guest's choosing for that long: interrupts or
preemption off, or the virtual CPU not running at all. A *pause* is a late sleep on every CPU
at once whose wake-ups came within --sync-ms of each other: every CPU resumed together, as
when the whole virtual machine stops. Its length is the stretch all those sleeps share. A
request in flight across a pause takes at least its length, whatever the engine or tool that
issued it; this is how the 16-thread read tails in docs/benchmarks.md ("Why 16 blocking
readers' p99.9 is about 28 ms here") were traced. The watchers are load too (2,000 wake-ups
a second per CPU): compare a command's latencies from a run without them.

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


def pauses_of(per_cpu, sync_ms):
    """Pauses: one late sleep per CPU, their wake-ups within `sync_ms` of each other."""
    found = []
    for a0, a1 in per_cpu[0]:
        group = [(a0, a1)]
        for other in per_cpu[1:]:
            near = [(b0, b1) for b0, b1 in other if abs(b1 - a1) * 1000 <= sync_ms]
            if not near:
                break
            group.append(min(near, key=lambda b: abs(b[1] - a1)))
        else:
            lo, hi = max(g[0] for g in group), min(g[1] for g in group)
            if hi > lo:
                found.append((lo, hi))
    return found


def report(per_cpu, pauses, window, late_ms, what):
    """Print the per-CPU counts and the pauses that began within `window` (start, end)."""
    p = sys.stderr
    w0, w1 = window
    seconds = w1 - w0
    for cpu, rt, late in per_cpu:
        worst = max((b - a for a, b in late), default=0) * 1000
        print(f"cpu {cpu}: {len(late)} sleeps of 0.5 ms took over {late_ms} ms, worst {worst:.1f} ms"
              + ("" if rt else " (not SCHED_FIFO: run as root, or the figures below mean little)"),
              file=p)
    pauses = [x for x in pauses if w0 <= x[0] <= w1]
    if not pauses:
        print(f"whole-machine pauses{what}: none in {seconds:.1f} s", file=p)
        return
    lens = sorted((b - a) * 1000 for a, b in pauses)
    gaps = sorted((pauses[i][0] - pauses[i - 1][0]) * 1000 for i in range(1, len(pauses)))
    total = sum(lens)
    print(f"whole-machine pauses{what}: {len(pauses)} in {seconds:.1f} s "
          f"({len(pauses) / seconds:.1f}/s), {total:.0f} ms in all "
          f"({100 * total / 1000 / seconds:.1f} % of the time); "
          f"length median {lens[len(lens) // 2]:.1f} ms, max {lens[-1]:.1f} ms", file=p)
    if gaps:
        print(f"time between pauses: median {gaps[len(gaps) // 2]:.0f} ms", file=p)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=10, help="seconds to watch (10)")
    ap.add_argument("--late-ms", type=float, default=4,
                    help="a 0.5 ms sleep that takes longer than this is late (4)")
    ap.add_argument("--sync-ms", type=float, default=1,
                    help="late wake-ups this close on every CPU make a pause (1)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ...: run this meanwhile")
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    q = Queue()
    cpus = sorted(os.sched_getaffinity(0))
    procs = [Process(target=watch, args=(c, a.duration, a.late_ms, q)) for c in cpus]
    t0 = time.monotonic()
    for pr in procs:
        pr.start()
    rc = 0
    window = (t0, t0 + a.duration)
    if cmd:
        time.sleep(1)
        c0 = time.monotonic()
        try:
            rc = subprocess.call(cmd)
        except OSError as e:
            print(f"vm-pauses: cannot run {cmd[0]}: {e}", file=sys.stderr)
            rc = 127
        c1 = time.monotonic()
        window = (c0, c1)
        if c1 > t0 + a.duration:
            print("vm-pauses: the command outlasted the watchers; raise --duration", file=sys.stderr)
    per_cpu = sorted(q.get() for _ in procs)
    for pr in procs:
        pr.join()
    what = " while the command ran" if cmd else ""
    report(per_cpu, pauses_of([late for _, _, late in per_cpu], a.sync_ms), window, a.late_ms, what)
    sys.exit(128 - rc if rc < 0 else rc)


if __name__ == "__main__":
    main()
