#!/bin/bash
# What holds up a 4 KiB read at QD1 on the capacity disk (issue 18, reads during GC):
#  1. segment writes of 256 KiB at ~93 MB/s, in bursts of 16 at QD16 or QD1;
#  2. a 3.25 MiB hole punch (masse's TRIM of a freed band in a pool file) every 40 ms.
# Usage: bench/fio-read-stalls.sh [DIR]   (default /var/tmp; needs 4 GiB there)
# Prints one line per case; docs/benchmarks.md "Overwrite churn" cites its figures.
set -euo pipefail
dir=${1:-/var/tmp}/fio-read-stalls.$$
mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
f=$dir/f
echo "machine: $(nproc) CPUs, $(uname -r); file $f"
fio --name=fill --filename="$f" --rw=write --bs=1M --iodepth=16 --ioengine=io_uring \
    --direct=1 --size=4G --verify_state_save=0 >/dev/null
summary() { python3 - "$1" "$2" <<'PY'
import json, sys
t = open(sys.argv[1]).read(); d = json.loads(t[t.index("{"):])
r = [j for j in d["jobs"] if j["jobname"] == "r"][0]["read"]; p = r["clat_ns"]["percentile"]
w = [j for j in d["jobs"] if j["jobname"] == "w"]
mb = " write %.0f MB/s," % (w[0]["write"]["bw"] / 1024) if w else ""
print("%-34s%s reads p50 %.0f p99 %.0f p99.9 %.0f µs" % (sys.argv[2], mb,
      p["50.000000"] / 1e3, p["99.000000"] / 1e3, p["99.900000"] / 1e3))
PY
}
reader=(--name=r --filename="$f" --rw=randread --bs=4k --iodepth=1 --ioengine=io_uring
        --direct=1 --size=1G --time_based --runtime=15 --verify_state_save=0)
for cfg in "16 16" "1 16"; do
    set -- $cfg
    fio --output-format=json --name=w --filename="$f" --rw=write --bs=256k --iodepth=$1 \
        --iodepth_batch_submit=$1 --thinktime=40000 --thinktime_blocks=$2 --ioengine=io_uring \
        --direct=1 --size=3G --offset=1G --time_based --runtime=15 --verify_state_save=0 \
        "${reader[@]}" >"$dir/o.json" 2>/dev/null
    summary "$dir/o.json" "bursts of 16 writes at QD$1"
done
fio --output-format=json "${reader[@]}" >"$dir/o.json" 2>/dev/null
summary "$dir/o.json" "reads alone"
fio --output-format=json "${reader[@]}" >"$dir/o.json" 2>/dev/null &
sleep 0.5
python3 - "$f" <<'PY'
import ctypes, os, sys, time
libc = ctypes.CDLL("libc.so.6", use_errno=True)
fd = os.open(sys.argv[1], os.O_RDWR); band = 13 * 256 * 1024; off = 1 << 30
end = time.time() + 14
while time.time() < end:
    t = time.time()
    if libc.fallocate(fd, 3, ctypes.c_long(off), ctypes.c_long(band)) != 0:  # PUNCH_HOLE|KEEP_SIZE
        sys.exit("fallocate: errno %d" % ctypes.get_errno())
    off = off + band if off + band < (3 << 30) else 1 << 30
    time.sleep(max(0, 0.04 - (time.time() - t)))
PY
wait
summary "$dir/o.json" "3.25 MiB hole punch every 40 ms"
