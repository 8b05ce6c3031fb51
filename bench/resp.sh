#!/usr/bin/env bash
# masse serve resp against redis-server, side by side, one run on one machine:
#   redis-benchmark -t set,get,mset -P {1,16} -c {1,16,64} -d {100,4096}
# against four servers:
#   masse-tiered   masse serve resp, write pad on /dev/shm (the SCM stand-in), capacity tier in $CAP_DIR
#   masse-caponly  masse serve resp, capacity-only pool in $CAP_DIR (durable on the same disk as Redis's AOF)
#   redis-always   redis-server --appendonly yes --appendfsync always (the durable comparison), AOF in $CAP_DIR
#   redis-everysec redis-server --appendonly yes --appendfsync everysec (may lose the last second)
# then one larger-than-RAM row: $BIG_KEYS keys of 4 KiB written to Redis with --maxmemory $BIG_MAXMEM
# (allkeys-lru, so Redis evicts) and to masse-tiered, and how many keys each still holds.
#
# Usage: bench/resp.sh [BASE]   BASE scales the request count of each run
#   (n = BASE x P x c, clamped to [2000, 40 x BASE]); default 2000. Smoke: bench/resp.sh 100
# Env: CAP_DIR (default /var/tmp), BIG_KEYS (default 200000), BIG_MAXMEM (default 256mb),
#   OUT (default bench/results/resp-<UTC time>).
# Writes $OUT.csv (one row per run), $OUT.md (the table) and $OUT.png (gnuplot, if installed).
# Needs: redis-server, redis-benchmark, redis-cli (Debian redis-server, redis-tools), python3.
set -euo pipefail
BASE=${1:-2000}
CAP_DIR=${CAP_DIR:-/var/tmp}
BIG_KEYS=${BIG_KEYS:-200000}
BIG_MAXMEM=${BIG_MAXMEM:-256mb}
cd "$(dirname "$0")/.."
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=${OUT:-bench/results/resp-$STAMP}
for t in redis-server redis-benchmark redis-cli python3; do
  command -v $t >/dev/null || { echo "missing $t (apt-get install redis-server redis-tools python3)" >&2; exit 2; }
done
cargo build --release -q -p masse-cli
M=$PWD/target/release/masse
W=$(mktemp -d "$CAP_DIR/masse-resp.XXXXXX"); S=$(mktemp -d /dev/shm/masse-resp.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done; rm -rf "$W" "$S"; }
trap cleanup EXIT
PORT=16400

{
echo "# $0 $*   (BASE=$BASE)"
echo "# $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo none)"
echo "# machine: $(nproc) cores,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r); $(redis-server --version | cut -d' ' -f1-3)"
echo "# capacity dir $CAP_DIR on $(df --output=source "$CAP_DIR" | tail -1); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# other processes using CPU at start:"; ps -eo pcpu,comm --sort=-pcpu | awk 'NR>1 && $1>5 {print "#   " $0}' | head -8
} | tee "$OUT.md"

wait_port() { for _ in $(seq 200); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.05; done; echo "server on $1 did not start" >&2; exit 1; }

start() { # $1 = target; sets SPID
  rm -rf "$W"/* "$S"/*
  case $1 in
    masse-tiered)
      "$M" create --fast "$S/f" --fast-size 2G --capacity "$W/c" --capacity-size 24G >/dev/null
      "$M" serve resp --fast "$S/f" --capacity "$W/c" --listen 127.0.0.1:$PORT >"$W/log" 2>&1 & ;;
    masse-caponly)
      "$M" create --capacity "$W/c" --capacity-size 24G >/dev/null
      "$M" serve resp --capacity "$W/c" --listen 127.0.0.1:$PORT >"$W/log" 2>&1 & ;;
    redis-always|redis-everysec)
      redis-server --port $PORT --bind 127.0.0.1 --dir "$W" --save "" --appendonly yes \
        --appendfsync "${1#redis-}" --daemonize no ${2:-} >"$W/log" 2>&1 & ;;
  esac
  SPID=$!; PIDS+=("$SPID"); wait_port $PORT
}
stop() { redis-cli -p $PORT shutdown nosave >/dev/null 2>&1 || true; wait "$SPID" 2>/dev/null || true; }

# One redis-benchmark run -> "rps p50 p99 p999" (ms); p99.9 from the percentile distribution.
measure() { # test P c d n
  redis-benchmark -p $PORT -t "$1" -P "$2" -c "$3" -d "$4" -n "$5" -r 1000000 2>/dev/null | tr '\r' '\n' | python3 -c '
import re, sys
rps = p50 = p99 = p999 = None
for l in sys.stdin:
    m = re.search(r"throughput summary: ([\d.]+) requests per second", l)
    if m: rps = float(m.group(1))
    m = re.match(r"\s*([\d.]+)% <= ([\d.]+) milliseconds", l)
    if m and p999 is None and float(m.group(1)) >= 99.9: p999 = float(m.group(2))
    if l.strip().startswith("avg") and "p50" in l:
        v = next(sys.stdin).split(); p50, p99 = float(v[2]), float(v[4])
print(rps, p50, p99, p999)'
}

TARGETS="masse-tiered masse-caponly redis-always redis-everysec"
echo "target,test,P,c,d,n,rps,p50_ms,p99_ms,p999_ms" > "$OUT.csv"
for tgt in $TARGETS; do
  start $tgt
  for d in 100 4096; do for P in 1 16; do for c in 1 16 64; do for t in set get mset; do
    n=$((BASE * P * c)); n=$((n < 2000 ? 2000 : n)); n=$((n > 40 * BASE ? 40 * BASE : n))
    [ $n -lt 2000 ] && n=2000
    read -r rps p50 p99 p999 < <(measure $t $P $c $d $n)
    echo "$tgt,$t,$P,$c,$d,$n,$rps,$p50,$p99,$p999" | tee -a "$OUT.csv"
  done; done; done; done
  [[ $tgt == masse* ]] && redis-cli -p $PORT info stats | grep -E "masse_(commit|records)" | sed "s/^/# $tgt /" | tee -a "$OUT.md"
  stop
done

# Larger than Redis's RAM: BIG_KEYS distinct keys of 4 KiB, pipelined through redis-cli --pipe.
big() { # target [redis args]
  start "$@"
  local t0=$(date +%s.%N)
  python3 -c '
import sys
v = b"x" * 4096
w = sys.stdout.buffer
for i in range(int(sys.argv[1])):
    k = b"big:%d" % i
    w.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$4096\r\n%s\r\n" % (len(k), k, v))
' "$BIG_KEYS" | redis-cli -p $PORT --pipe >"$W/pipe.log" 2>&1 || true
  local t1=$(date +%s.%N)
  local kept=$(redis-cli -p $PORT dbsize)
  local errs=$(grep -o 'errors: [0-9]*' "$W/pipe.log" || echo "errors: ?")
  echo "$1,$BIG_KEYS,$kept,$(python3 -c "print(round($BIG_KEYS/($t1-$t0)))"),$errs"
  stop
}
echo "target,keys_written,keys_kept,sets_per_s,pipe" > "$OUT.big.csv"
big masse-tiered | tee -a "$OUT.big.csv"
big redis-always "--maxmemory $BIG_MAXMEM --maxmemory-policy allkeys-lru" | sed "s/^redis-always/redis-always maxmemory $BIG_MAXMEM allkeys-lru/" | tee -a "$OUT.big.csv"

python3 - "$OUT" "$TARGETS" <<'PY' | tee -a "$OUT.md"
import csv, sys
out, targets = sys.argv[1], sys.argv[2].split()
rows = list(csv.DictReader(open(out + ".csv")))
key = lambda r: (r["d"], r["P"], r["c"], r["test"])
cells = {}
for r in rows:
    cells.setdefault(key(r), {})[r["target"]] = r
print()
print("| d | P | c | test | " + " | ".join(f"{t} req/s (p50/p99/p99.9 ms)" for t in targets) + " |")
print("|---|---|---|---|" + "---|" * len(targets))
def f(x): return "?" if x in (None, "", "None") else x
for k in sorted(cells, key=lambda k: (int(k[0]), int(k[1]), int(k[2]), k[3])):
    c = cells[k]
    vals = [f"{float(c[t]['rps']):,.0f} ({f(c[t]['p50_ms'])}/{f(c[t]['p99_ms'])}/{f(c[t]['p999_ms'])})" if t in c and c[t]["rps"] != "None" else "?" for t in targets]
    print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | " + " | ".join(vals) + " |")
print()
print("Larger than Redis's RAM (4 KiB values, redis-cli --pipe):")
print()
print("| target | keys written | keys kept | SETs/s | pipe |")
print("|---|---|---|---|---|")
for r in csv.reader(open(out + ".big.csv")):
    if r[0] != "target": print("| " + " | ".join(r) + " |")
PY

if command -v gnuplot >/dev/null; then
  python3 - "$OUT" "$TARGETS" > "$W/plot.dat" <<'PY'
import csv, sys
out, targets = sys.argv[1], sys.argv[2].split()
rows = list(csv.DictReader(open(out + ".csv")))
cells = {}
for r in rows:
    if r["test"] == "mset": continue
    cells.setdefault((r["test"], r["d"], r["P"], r["c"]), {})[r["target"]] = r
for k in sorted(cells, key=lambda k: (k[0], int(k[1]), int(k[2]), int(k[3]))):
    label = f"{k[0]} d{k[1]} P{k[2]} c{k[3]}"
    vals = []
    for t in targets:
        r = cells[k].get(t, {})
        vals += [r.get("rps", "0"), r.get("p99_ms", "0"), r.get("p999_ms", "0")]
    print('"' + label + '" ' + " ".join(v if v not in ("None", "") else "0" for v in vals))
PY
  gnuplot <<GP
set terminal pngcairo size 1600,1000 noenhanced
set output "$OUT.png"
set multiplot layout 2,1 title "redis-benchmark: masse serve resp vs redis-server (AOF) — $(date -u +%F), BASE=$BASE"
set style data histograms; set style histogram clustered gap 1; set style fill solid 0.8 border -1
set xtics rotate by -45 font ",8"; set grid ytics; set key top left
set ylabel "requests/s"; set logscale y
plot for [i=0:3] "$W/plot.dat" using (column(2+3*i)):xtic(1) title word("$TARGETS", i+1)
set ylabel "p99.9 latency (ms)"
plot for [i=0:3] "$W/plot.dat" using (column(4+3*i)):xtic(1) title word("$TARGETS", i+1)
unset multiplot
GP
  echo "plot: $OUT.png"
fi
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT.md"
