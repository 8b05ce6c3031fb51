#!/usr/bin/env bash
# fio through NBD: 4 KiB random read, random write and 70/30 read/write at queue depths
# 1..32, through a masse volume export and through the passthrough (--raw) export of the
# same capacity file, side by side: IOPS, mean, p99, p99.9, p99.99 latency (completion
# latency as fio's nbd engine sees it: submit to reply), as Markdown tables, a CSV and
# a latency-vs-IOPS chart (SVG, gnuplot) under bench/results/.
#
# Usage: bench/nbd-fio.sh            (bench/nbd-fio.sh --plot RESULTS.csv redraws a chart)
# Environment: RUNTIME=10 (s per point) RAMP=2 WS=2G (working set) CAP_SIZE=8G
#   QDS="1 2 4 8 16 32" CAP_DIR=/var/tmp (capacity file; fast tier in /dev/shm)
#   THREADS=32 (server worker threads)
# Needs fio with the nbd engine, gnuplot for the chart (apt-get install -y fio gnuplot-nox).
set -euo pipefail
RUNTIME=${RUNTIME:-10}
RAMP=${RAMP:-2}
WS=${WS:-2G}
CAP_SIZE=${CAP_SIZE:-8G}
QDS=${QDS:-"1 2 4 8 16 32"}
CAP_DIR=${CAP_DIR:-/var/tmp}
THREADS=${THREADS:-32}
cd "$(dirname "$0")/.."
ROOT=$PWD

# Chart: latency (mean and p99) against IOPS, one panel per workload, points = QDs.
# plot CSV -> CSV's name with .svg and .png
plot() {
  local csv=$1 base=${1%.csv} tmp
  if ! command -v gnuplot >/dev/null; then
    echo "gnuplot not found: no chart (apt-get install -y gnuplot-nox)"; return 0
  fi
  tmp=$(mktemp -d)
  for wl in randread randwrite randrw; do
    for t in raw masse; do
      awk -F, -v w=$wl -v t=$t 'NR>1 && $1==t && $2==w && ($3=="read" || w=="randwrite") {print $4, $5, $6, $7}' "$csv" > "$tmp/$wl-$t.dat"
    done
  done
  for ext in svg png; do
    local term="svg size 1500,480 dynamic font 'sans,11'"
    [ $ext = png ] && term="pngcairo size 1500,480 font 'sans,10'"
    gnuplot <<EOF
set terminal $term
set output "$base.$ext"
set multiplot layout 1,3 title "4 KiB random I/O through NBD: latency vs IOPS (QD 1..32), masse volume vs raw passthrough of the same file"
set logscale y
set xlabel "IOPS"
set ylabel "latency (µs)"
set grid
set key top left
do for [wl in "randread randwrite randrw"] {
  set title wl.(wl eq "randrw" ? " 70/30 (read latency)" : "")
  plot "$tmp/".wl."-raw.dat" using 2:3 with linespoints lc rgb "#888888" pt 7 title "raw mean", \\
       "$tmp/".wl."-raw.dat" using 2:4 with linespoints lc rgb "#888888" dt 2 pt 6 title "raw p99", \\
       "$tmp/".wl."-masse.dat" using 2:3 with linespoints lc rgb "#c0392b" pt 7 title "masse mean", \\
       "$tmp/".wl."-masse.dat" using 2:4 with linespoints lc rgb "#c0392b" dt 2 pt 6 title "masse p99"
}
unset multiplot
EOF
  done
  rm -rf "$tmp"
  echo "chart: $base.svg, $base.png"
}
if [ "${1:-}" = "--plot" ]; then plot "$2"; exit 0; fi

# One benchmark at a time on the shared machine.
exec 9>/tmp/masse-bench.lock
flock 9

cargo build --release -q -p masse-cli
M=$ROOT/target/release/masse
command -v fio >/dev/null || { echo "fio is required (apt-get install -y fio)" >&2; exit 2; }

W=$(mktemp -d "$CAP_DIR/masse-nbd-bench.XXXXXX")
S=$(mktemp -d /dev/shm/masse-nbd-bench.XXXXXX)
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ]; then kill -TERM "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  rm -rf "$W" "$S"
}
trap cleanup EXIT

OUT=$ROOT/bench/results
mkdir -p "$OUT"
STAMP=$(date -u +%Y%m%d-%H%M)
CSV=$OUT/nbd-fio-$STAMP.csv
MD=$OUT/nbd-fio-$STAMP.md
SOCK=$W/nbd.sock
CAP=$W/cap
FAST=$S/fast

{
  echo "# bench/nbd-fio.sh (RUNTIME=$RUNTIME RAMP=$RAMP WS=$WS CAP_SIZE=$CAP_SIZE QDS=\"$QDS\" THREADS=$THREADS)"
  echo "# $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo none)"
  echo "# machine: $(nproc) cores,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r); shared with other work"
  echo "# capacity file $CAP on $(df --output=source "$CAP_DIR" | tail -1) ($(findmnt -no FSTYPE -T "$CAP_DIR")); fast tier $FAST (tmpfs)"
  echo "# fio $(fio --version), ioengine=nbd over a Unix socket, one connection, bs=4k, working set $WS, ${RUNTIME}s per point after ${RAMP}s ramp"
} | tee "$MD"
echo "target,workload,part,qd,iops,avg_us,p99_us,p999_us,p9999_us" > "$CSV"

start_server() { # args for masse serve nbd
  rm -f "$SOCK"
  "$M" serve nbd "$@" --socket "$SOCK" --threads "$THREADS" > "$W/server.out" 2> "$W/server.err" &
  SERVER_PID=$!
  for _ in $(seq 1 600); do
    grep -q '^ready' "$W/server.out" 2>/dev/null && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$W/server.err" >&2; exit 1; }
    sleep 0.1
  done
  echo "server did not become ready" >&2; exit 1
}
stop_server() {
  kill -TERM "$SERVER_PID"; wait "$SERVER_PID" || { cat "$W/server.err" >&2; exit 1; }
  SERVER_PID=""
  echo "server counters ($1):"
  grep -E '^(connections|bytes|mean|operations|capacity tier|write pad|gc  )' "$W/server.err" | sed 's/^/  /'
}

fio_json() { # uri rw qd extra...
  local uri=$1 rw=$2 qd=$3; shift 3
  fio --name=nbd --ioengine=nbd --uri="$uri" --rw="$rw" --bs=4k --iodepth="$qd" --size="$WS" \
      --norandommap --randrepeat=0 --lat_percentiles=1 --percentile_list=99:99.9:99.99 \
      --output-format=json "$@"
}

point() { # target uri workload qd
  local target=$1 uri=$2 wl=$3 qd=$4 rw mix=()
  case $wl in
    randread) rw=randread ;;
    randwrite) rw=randwrite ;;
    randrw) rw=randrw; mix=(--rwmixread=70) ;;
  esac
  fio_json "$uri" "$rw" "$qd" "${mix[@]}" --time_based --runtime="$RUNTIME" --ramp_time="$RAMP" --output="$W/fio.json" > /dev/null
  python3 - "$W/fio.json" "$target" "$wl" "$qd" >> "$CSV" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1])); job = j["jobs"][0]
for part in ("read", "write"):
    p = job[part]
    if p["io_bytes"] == 0:
        continue
    lat = p["lat_ns"]; pc = lat.get("percentile", {})
    g = lambda k: pc.get(k, 0) / 1000
    print(f"{sys.argv[2]},{sys.argv[3]},{part},{sys.argv[4]},{p['iops']:.0f},{lat['mean']/1000:.1f},"
          f"{g('99.000000'):.0f},{g('99.900000'):.0f},{g('99.990000'):.0f}")
EOF
  tail -n +2 "$CSV" | grep "^$target,$wl,.*,$qd," | tail -2 | sed 's/^/  /'
}

sweep() { # target uri
  local target=$1 uri=$2
  echo "== $target: precondition (sequential 1 MiB writes over $WS)"
  fio --name=fill --ioengine=nbd --uri="$uri" --rw=write --bs=1m --iodepth=8 --size="$WS" --output-format=terse >/dev/null
  for wl in randread randwrite randrw; do
    for qd in $QDS; do point "$target" "$uri" "$wl" "$qd"; done
  done
}

# 1. Passthrough of the capacity file (fully allocated first, so reads hit the disk).
echo "== creating the $CAP_SIZE capacity file"
fallocate -l "$CAP_SIZE" "$CAP" 2>/dev/null || dd if=/dev/zero of="$CAP" bs=1M count=$(( $(numfmt --from=iec "$CAP_SIZE") >> 20 )) status=none
start_server --raw "$CAP" --export raw
sweep raw "nbd+unix:///raw?socket=$SOCK"
stop_server raw

# 2. masse on the same file, fast tier on tmpfs.
"$M" create --force --fast "$FAST" --fast-size 1G --capacity "$CAP" > /dev/null
start_server --fast "$FAST" --capacity "$CAP" --export vol --size "$WS"
sweep masse "nbd+unix:///vol?socket=$SOCK"
stop_server masse

# Tables: per workload (and part), QD rows, the two targets side by side.
python3 - "$CSV" >> "$MD" <<'EOF'
import csv, sys, collections
rows = list(csv.DictReader(open(sys.argv[1])))
d = collections.OrderedDict()
for r in rows:
    d.setdefault((r["workload"], r["part"]), {}).setdefault(int(r["qd"]), {})[r["target"]] = r
for (wl, part), byqd in d.items():
    title = wl if wl != "randrw" else f"randrw 70/30, {part}s"
    print(f"\n### 4 KiB {title}\n")
    print("| QD | raw IOPS | raw avg µs | raw p99 | raw p99.9 | raw p99.99 | masse IOPS | masse avg µs | masse p99 | masse p99.9 | masse p99.99 | masse/raw IOPS |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for qd in sorted(byqd):
        t = byqd[qd]
        cells = [str(qd)]
        for tgt in ("raw", "masse"):
            r = t.get(tgt)
            cells += [r["iops"], r["avg_us"], r["p99_us"], r["p999_us"], r["p9999_us"]] if r else ["-"] * 5
        ratio = (f"{float(t['masse']['iops']) / float(t['raw']['iops']):.2f}"
                 if "raw" in t and "masse" in t and float(t["raw"]["iops"]) > 0 else "-")
        print("| " + " | ".join(cells + [ratio]) + " |")
EOF
printf '\n(latencies in µs; figures from the shared 2-core machine)\n' >> "$MD"
sed -n '/^### /,$p' "$MD"

plot "$CSV"
echo "tables: $MD"; echo "data: $CSV"
