#!/usr/bin/env bash
# Where the time goes in `masse bench` on one of the paper's db_bench workloads:
# fills a pool, then profiles readrandomwriterandom with perf (call graphs, by
# symbol and by DSO) while sampling the capacity disk's counters, and prints the
# engine's own split (gets from DRAM vs device, group commit sizes, writer).
#
#   bench/profile-bench.sh                         # Table 4 at 10^7 keys, 16 threads, 30 s
#   TABLE=6 NUM=1e7 THREADS=2 DURATION=30 bench/profile-bench.sh
#
# Environment: TABLE (4, 5 or 6), NUM, THREADS, DURATION (seconds profiled),
# DIR (capacity file's filesystem, default /var/tmp). Needs perf (linux-perf).
# Writes bench/results/profile-bench-<UTC time>/ with the report and perf text.
set -euo pipefail
cd "$(dirname "$0")/.."
TABLE=${TABLE:-4}
NUM=$(python3 -c "print(int(float('${NUM:-1e7}')))")
THREADS=${THREADS:-16}
DURATION=${DURATION:-30}
DIR=${DIR:-${TMPDIR:-/var/tmp}}
case "$TABLE" in
    4) KS=23 VS=100 RW=50 ;;
    5) KS=16 VS=4096 RW=50 ;;
    6) KS=20 VS=100 RW=70 ;;
    *) echo "TABLE must be 4, 5 or 6" >&2; exit 2 ;;
esac
command -v perf >/dev/null || { echo "perf not found (apt-get install -y linux-perf)" >&2; exit 2; }
if [ -z "${MASSE_BENCH_LOCKED:-}" ]; then
    export MASSE_BENCH_LOCKED=1
    exec flock /tmp/masse-bench.lock "$0" "$@"
fi

nice -n 10 cargo build --release -q -p masse-cli
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=bench/results/profile-bench-$STAMP
mkdir -p "$OUT"
W=$(mktemp -d "$DIR/masse-profile-XXXXXX"); S=$(mktemp -d /dev/shm/masse-profile-XXXXXX)
trap 'rm -rf "$W" "$S"' EXIT
cp target/release/masse "$W/masse"
M=$W/masse
CAPSIZE=$(python3 -c "n=$NUM; r=((24+$KS+$VS+7)//8)*8+32; print(int(n*r*1.5)//(1<<20)+1024)")M
POOL="--fast=$S/fast --capacity=$W/cap"
COMMON="--num=$NUM --key_size=$KS --value_size=$VS"
DEV=$(lsblk -no PKNAME "$(df --output=source "$DIR" | tail -1)" 2>/dev/null || true)
[ -n "$DEV" ] || DEV=$(basename "$(df --output=source "$DIR" | tail -1)")
{
    echo "# masse bench profile: Table $TABLE, $NUM keys, $THREADS threads, $DURATION s"
    echo "- date: $(date -u '+%F %T') UTC; commit $(git rev-parse --short HEAD)$( [ -n "$(git status --porcelain)" ] && echo ' (uncommitted changes)')"
    echo "- machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(free -g | awk '/Mem:/{print $2}') GiB, Linux $(uname -r); capacity disk $DEV"
    echo "- command: TABLE=$TABLE NUM=$NUM THREADS=$THREADS DURATION=$DURATION bench/profile-bench.sh"
} > "$OUT/report.md"

echo "fill: masse bench $POOL --capacity-size=$CAPSIZE --benchmarks=fillrandom --threads=1 $COMMON --seed=42" >&2
"$M" bench $POOL --capacity-size="$CAPSIZE" --benchmarks=fillrandom --threads=1 $COMMON --seed=42 \
    --json="$W/fill.json" > "$W/fill.out"
grep -a "fillrandom" "$W/fill.out" | tail -1 >> "$OUT/report.md"

# The run lasts the profile window plus time to open the pool (index checkpoint load).
RUN="--benchmarks=readrandomwriterandom --readwritepercent=$RW --threads=$THREADS --duration=$((DURATION + 20)) --use_existing_db=true"
echo "run: masse bench $POOL $RUN $COMMON --seed=1042" >&2
"$M" bench $POOL $RUN $COMMON --seed=1042 --json="$W/run.json" > "$W/run.out" &
PID=$!
# Profile once the pool is open (it prints "pool  opened in …" then starts its threads).
for _ in $(seq 1 1200); do
    grep -q '^pool .*opened' "$W/run.out" 2>/dev/null && break
    kill -0 "$PID" 2>/dev/null || { echo "masse bench exited early:" >&2; cat "$W/run.out" >&2; exit 1; }
    sleep 0.1
done
sleep 2
ds0=$(awk -v d="$DEV" '$3==d{print $4, $7, $8, $11}' /proc/diskstats)
t0=$(date +%s.%N)
perf record -F 999 -g -p "$PID" -o "$W/perf.data" -- sleep "$DURATION" > /dev/null 2>&1
ds1=$(awk -v d="$DEV" '$3==d{print $4, $7, $8, $11}' /proc/diskstats)
t1=$(date +%s.%N)
wait "$PID"
grep -a "readrandomwriterandom" "$W/run.out" | tail -1 >> "$OUT/report.md"
python3 - "$ds0" "$ds1" "$t0" "$t1" "$DEV" >> "$OUT/report.md" <<'EOF'
import sys
a = list(map(int, sys.argv[1].split())); b = list(map(int, sys.argv[2].split()))
dt = float(sys.argv[4]) - float(sys.argv[3])
reads, rms, writes, wms = (b[i] - a[i] for i in range(4))
print(f"\n## The capacity disk ({sys.argv[5]}) during the profile ({dt:.1f} s, /proc/diskstats; all processes)\n")
print(f"- reads: {reads/dt:,.0f}/s, mean {1000*rms/max(reads,1):.0f} µs in the device queue and device")
print(f"- writes: {writes/dt:,.0f}/s, mean {1000*wms/max(writes,1):.0f} µs")
EOF
python3 - "$W/run.json" >> "$OUT/report.md" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))["benchmarks"][0]
e = j.get("engine", {})
print("\n## The engine over the whole run (masse bench JSON)\n")
for k in sorted(e):
    if isinstance(e[k], (int, float, str)):
        print(f"- {k}: {e[k]}")
EOF
perf report -i "$W/perf.data" --no-children --sort dso --stdio -g none 2>/dev/null \
    | grep -v '^#' | grep -v '^$' | head -12 > "$OUT/perf-dso.txt" || true
perf report -i "$W/perf.data" --no-children --sort sym --stdio -g none 2>/dev/null \
    | grep -v '^#' | grep -v '^$' | head -60 > "$OUT/perf-sym.txt" || true
perf report -i "$W/perf.data" --children --sort sym --stdio -g none 2>/dev/null \
    | grep -v '^#' | grep -v '^$' | grep -E 'masse::' | head -40 > "$OUT/perf-children-masse.txt" || true
{
    echo; echo "## perf, by DSO (on-CPU samples of the masse process, $DURATION s)"; echo; echo '```'
    cat "$OUT/perf-dso.txt"; echo '```'
    echo; echo "## perf, top symbols (self)"; echo; echo '```'
    head -30 "$OUT/perf-sym.txt"; echo '```'
    echo; echo "## perf, masse functions including callees"; echo; echo '```'
    head -25 "$OUT/perf-children-masse.txt"; echo '```'
} >> "$OUT/report.md"
cat "$OUT/report.md"
echo "written: $OUT/report.md" >&2
