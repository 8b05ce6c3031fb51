#!/usr/bin/env bash
# Where the time goes when fio drives a masse volume through NBD: perf profiles of the
# `masse serve nbd` process (by thread, by DSO, by symbol) during 4 KiB random writes and
# reads at QD 1 and 16, plus the server's own per-request timing counters (queue wait,
# backend, reply). Output: bench/results/nbd-profile-STAMP.txt.
#
# Usage: bench/nbd-profile.sh     Environment: SECS=8 CAP_DIR=/var/tmp THREADS=32
# (perf report pipelines end in `head`: their SIGPIPE must not stop the script)
set -euo pipefail
SECS=${SECS:-8}
CAP_DIR=${CAP_DIR:-/var/tmp}
THREADS=${THREADS:-32}
cd "$(dirname "$0")/.."
ROOT=$PWD
exec 9>/tmp/masse-bench.lock
flock 9
command -v perf >/dev/null || { echo "perf is required (apt-get install -y linux-perf)" >&2; exit 2; }
cargo build --release -q -p masse-cli
M=$ROOT/target/release/masse
W=$(mktemp -d "$CAP_DIR/masse-nbd-prof.XXXXXX"); S=$(mktemp -d /dev/shm/masse-nbd-prof.XXXXXX)
PID=""
cleanup() { [ -n "$PID" ] && { kill -TERM "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; }; rm -rf "$W" "$S"; }
trap cleanup EXIT
mkdir -p "$ROOT/bench/results"
OUT=$ROOT/bench/results/nbd-profile-$(date -u +%Y%m%d-%H%M).txt
SOCK=$W/sock; U="nbd+unix:///v?socket=$SOCK"
exec > >(tee "$OUT") 2>&1
echo "# bench/nbd-profile.sh (SECS=$SECS THREADS=$THREADS) $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo none)"
echo "# machine: $(nproc) cores,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), kernel $(uname -r); load $(cut -d' ' -f1-3 /proc/loadavg) (shared machine)"
"$M" create --fast "$S/fast" --fast-size 1G --capacity "$W/cap" --capacity-size 4G > /dev/null

start() {
  "$M" serve nbd --fast "$S/fast" --capacity "$W/cap" --export v --size 1G --socket "$SOCK" --threads "$THREADS" > "$W/out" 2> "$W/err" &
  PID=$!
  until grep -q '^ready' "$W/out" 2>/dev/null; do kill -0 "$PID" || { cat "$W/err"; exit 1; }; sleep 0.1; done
}
stop() { kill -TERM "$PID"; wait "$PID"; PID=""; grep -E '^(mean|connections)' "$W/err" | sed 's/^/  server: /'; }

start
fio --name=fill --ioengine=nbd --uri="$U" --rw=write --bs=1m --iodepth=8 --size=1G --output-format=terse > /dev/null
stop
for rw in randwrite randread; do
  for qd in 1 16; do
    start
    echo; echo "=== $rw QD$qd, ${SECS}s"
    perf record -F 999 -g -p "$PID" -o "$W/perf.data" -- sleep "$SECS" > /dev/null 2>&1 &
    PERF=$!
    fio --name=p --ioengine=nbd --uri="$U" --rw=$rw --bs=4k --iodepth=$qd --size=1G --time_based \
        --runtime="$SECS" --output-format=json --output="$W/fio.json" > /dev/null
    wait $PERF || true
    python3 -c "
import json; j=json.load(open('$W/fio.json'))['jobs'][0]; p=j['$([ $rw = randwrite ] && echo write || echo read)']
print(f\"  fio: {p['iops']:.0f} IOPS, mean completion latency {p['clat_ns']['mean']/1000:.1f} us\")"
    stop
    echo "  -- CPU samples by thread (top 8)"
    perf report -i "$W/perf.data" --no-children --sort=comm --stdio -g none 2>/dev/null | grep -E '^ +[0-9]' | head -8 | sed 's/^/  /' || true
    echo "  -- by DSO"
    perf report -i "$W/perf.data" --no-children --sort=dso --stdio -g none 2>/dev/null | grep -E '^ +[0-9]' | head -5 | sed 's/^/  /' || true
    echo "  -- by symbol (top 25)"
    perf report -i "$W/perf.data" --no-children --sort=sym --stdio -g none 2>/dev/null | grep -E '^ +[0-9]' | head -25 | sed 's/^/  /' || true
  done
done
echo; echo "profile: $OUT"
