#!/usr/bin/env bash
# The paper's TerarkDB case (§4.4, Table 6) on this machine: RocksDB's db_bench,
# readrandomwriterandom 70/30, 20 B keys, 100 B values, no read cache, with the
# database files on ext4, on a `masse mount` (FUSE), and in masse in-process through
# the RocksDB FileSystem plugin (plugins/rocksdb, --fs_uri=masse://...), side by side,
# all three with the same release db_bench 11.8.1 (plugins/rocksdb/build.sh).
#
#   bench/vfile-terarkdb.sh            # 10^7 keys, 120 s of readrandomwriterandom per side
#   bench/vfile-terarkdb.sh --quick    # 10^6 keys, 30 s per side
#   NUM=3000000 DURATION=60 THREADS=4 bench/vfile-terarkdb.sh
#   bench/vfile-terarkdb.sh --plot bench/results/vfile-terarkdb-STAMP   # (re)draw a run's chart
#
# Environment: NUM (keys), DURATION (seconds of the mixed phase), THREADS (db_bench
# threads, default 4), MOUNT_THREADS (FUSE threads of the mount, default 4), BENCH_DIR (where the ext4 database and the capacity-tier
# file go; default /var/tmp), CAP_SIZE (capacity-tier file, default 8G), CHUNK (vFile
# chunk size, default 16K), PERF=0 to skip
# the perf profiles, DB_BENCH (default: plugins/rocksdb/build.sh's, which has the
# plugin; without the plugin the third column is skipped). Needs fusermount3/root,
# and perf for the profiles. Wrapped in flock /tmp/masse-bench.lock so benchmarks do not overlap.
#
# Both sides use O_DIRECT reads (use_direct_reads) and no block cache (cache_size=0),
# so every read reaches storage: on ext4 the disk, on the mount the engine (one
# chunk record per read, from the capacity tier or a DRAM segment buffer). Writes
# go through the page cache on ext4, and through the vFile write-back buffer and
# the engine's fast tier (a /dev/shm file standing in for SCM) on the mount.
set -euo pipefail
cd "$(dirname "$0")/.."

parse() { # file -> "ops/s avg p99 p99.9" (read histogram)
    awk '
        /^readrandomwriterandom/ { for (i = 1; i <= NF; i++) if ($i == "ops/sec") ops = $(i-1) }
        /Microseconds per read:/ { r = 1; next }
        /Microseconds per write:/ { r = 0 }
        r && /^Count:/ { avg = $4 }
        r && /^Percentiles:/ { p99 = $7; p999 = $9 }
        END { printf "%s %s %s %s\n", ops, avg, p99, p999 }' "$1"
}

# Chart of a results directory: ops/s and read latency (mean, p99, p99.9) per side.
plot() { # dir -> dir/chart.svg, dir/chart.png
    local dir=$1 dat=$1/chart.dat side label num
    if ! command -v gnuplot >/dev/null; then
        echo "gnuplot not found: no chart (apt-get install -y gnuplot-nox)"; return 0
    fi
    : > "$dat"
    for side in "ext4:ext4" "masse:masse mount" "plugin:masse plugin"; do
        label=${side#*:}; side=${side%%:*}
        [ -f "$dir/$side-mixed.txt" ] || continue
        echo "\"$label\" $(parse "$dir/$side-mixed.txt")" >> "$dat"
    done
    num=$(grep -o -m1 'NUM=[0-9]*' "$dir/summary.txt" || true)
    for ext in svg png; do
        local term="svg size 1100,440 dynamic font 'sans,11'"
        [ $ext = png ] && term="pngcairo size 1100,440 font 'sans,10'"
        gnuplot <<EOF
set terminal $term
set output "$dir/chart.$ext"
set termoption noenhanced
set multiplot layout 1,2 title "db_bench 11.8.1 readrandomwriterandom 70/30 ($num, 20 B keys, 100 B values, no block cache, direct reads)"
set style data histograms
set style fill solid 0.8 border -1
set grid ytics
set yrange [0:*]
set title "throughput"
set ylabel "ops/s"
plot "$dat" using 2:xtic(1) lc rgb "#c0392b" notitle
set title "read latency"
set ylabel "µs (log)"
set logscale y
set yrange [10:*]
set style histogram clustered gap 1
set key top right
plot "$dat" using 3:xtic(1) title "mean" lc rgb "#888888", "" using 4 title "p99" lc rgb "#e67e22", "" using 5 title "p99.9" lc rgb "#c0392b"
unset multiplot
EOF
    done
    rm -f "$dat"
    echo "chart: $dir/chart.svg, $dir/chart.png"
}
if [ "${1:-}" = "--plot" ]; then plot "$2"; exit 0; fi

if [ "${1:-}" = "--quick" ]; then
    NUM=${NUM:-1000000}
    DURATION=${DURATION:-30}
fi
NUM=${NUM:-10000000}
DURATION=${DURATION:-120}
THREADS=${THREADS:-4}
BENCH_DIR=${BENCH_DIR:-/var/tmp}
CHUNK=${CHUNK:-16K}
PERF=${PERF:-1}
CAP_SIZE=${CAP_SIZE:-8G}
MOUNT_THREADS=${MOUNT_THREADS:-4}

if [ -z "${MASSE_BENCH_LOCKED:-}" ]; then
    export MASSE_BENCH_LOCKED=1
    exec flock /tmp/masse-bench.lock "$0" "$@"
fi

if [ -z "${DB_BENCH:-}" ]; then
    DB_BENCH=$(plugins/rocksdb/build.sh --no-full-build | tail -1) || {
        echo "no release db_bench with the masse plugin: run plugins/rocksdb/build.sh (or set DB_BENCH)"; exit 2; }
fi
db_bench() { "$DB_BENCH" "$@"; }
PLUGIN=0
if grep -q -a MasseFileSystem "$DB_BENCH"; then PLUGIN=1; fi
cargo build --release -q -p masse-cli
MASSE=$PWD/target/release/masse

STAMP=$(date -u +%Y%m%d-%H%M%S)
OUT=bench/results/vfile-terarkdb-$STAMP
mkdir -p "$OUT"
EXT4=$BENCH_DIR/masse-terark-ext4
FAST=/dev/shm/masse-terark-fast
CAP=$BENCH_DIR/masse-terark-cap
MNT=$BENCH_DIR/masse-terark-mnt
MPID=""

cleanup() {
    if mountpoint -q "$MNT" 2>/dev/null; then
        fusermount3 -u "$MNT" 2>/dev/null || umount "$MNT" 2>/dev/null || true
    fi
    # A mount still up (a file held open by a failed run): SIGTERM makes masse
    # unmount and close the pool itself, so the wait below cannot hang.
    if [ -n "$MPID" ] && mountpoint -q "$MNT" 2>/dev/null; then kill -TERM "$MPID" 2>/dev/null || true; fi
    if [ -n "$MPID" ]; then wait "$MPID" 2>/dev/null || true; fi
    rm -rf "$EXT4" "$FAST" "$CAP"
    rmdir "$MNT" 2>/dev/null || true
}
trap cleanup EXIT
cleanup
mkdir -p "$EXT4" "$MNT"

{
    echo "# vFile TerarkDB case: db_bench on ext4, a masse mount and the in-process masse plugin"
    echo "date (UTC):  $(date -u '+%Y-%m-%d %H:%M:%S')"
    echo "machine:     $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, $(uname -r); shared with other jobs (figures taken on the shared 2-core machine)"
    echo "disk:        $(df -hT "$BENCH_DIR" | awk 'NR==2 {print $1, $2, $3}') ($BENCH_DIR)"
    echo "db_bench:    $DB_BENCH ($(db_bench --version 2>&1 | head -1))"
    echo "masse:       $(git rev-parse --short HEAD) ($(git status --porcelain | wc -l) uncommitted files)"
    echo "command:     NUM=$NUM DURATION=$DURATION THREADS=$THREADS CHUNK=$CHUNK MOUNT_THREADS=$MOUNT_THREADS bench/vfile-terarkdb.sh"
} | tee "$OUT/summary.txt"

COMMON="--num=$NUM --key_size=20 --value_size=100 --compression_type=none --cache_size=0 \
--use_direct_reads=true --seed=1 --stats_interval_seconds=0"
LOAD="--benchmarks=fillrandom --disable_wal=1 --threads=1"
MIXED="--benchmarks=readrandomwriterandom --use_existing_db=1 --readwritepercent=70 \
--duration=$DURATION --threads=$THREADS --histogram=1"
echo "load:        db_bench --db=DIR $COMMON $LOAD" | tee -a "$OUT/summary.txt"
echo "measured:    db_bench --db=DIR $COMMON $MIXED" | tee -a "$OUT/summary.txt"

# One db_bench run; its block-device write bytes (/proc/PID/io write_bytes, polled:
# the disk side of ext4, the capacity tier of the plugin -- /dev/shm is no block
# device) go to $OUT/<name>.wbytes.
bench_io() { # name args...
    local name=$1; shift
    /usr/bin/time -f "%e s elapsed, %U s user, %S s sys" "$DB_BENCH" "$@" > "$OUT/$name.txt" 2>&1 &
    local tpid=$! pid="" wb=0 w
    for _ in $(seq 50); do pid=$(pgrep -P "$tpid" | head -1); [ -n "$pid" ] && break; sleep 0.1; done
    echo "$pid" > "$OUT/$name.pid"
    while [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; do
        w=$(awk '/^write_bytes/ {print $2}' "/proc/$pid/io" 2>/dev/null || true)
        [ -n "$w" ] && wb=$w
        sleep 0.5
    done
    wait "$tpid" || { tail -5 "$OUT/$name.txt"; return 1; }
    echo "$wb" > "$OUT/$name.wbytes"
}

run_side() { # name dir [db_bench flags...]
    local name=$1 dir=$2; shift 2
    echo "== $name: load $NUM keys"
    bench_io "$name-load" --db="$dir/db" "$@" $COMMON $LOAD --statistics=1
    grep -E "^fillrandom" "$OUT/$name-load.txt" || true
    echo "== $name: readrandomwriterandom 70/30 for $DURATION s"
    bench_io "$name-mixed" --db="$dir/db" "$@" $COMMON $MIXED --statistics=1
    grep -E "^readrandomwriterandom" "$OUT/$name-mixed.txt" || true
}

# ext4 first (the page cache is dropped so neither side starts warm).
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
run_side ext4 "$EXT4"
rm -rf "$EXT4"

# The masse side: a tiered pool (fast tier in /dev/shm, capacity tier on the same disk).
"$MASSE" create --fast "$FAST" --fast-size 2G --capacity "$CAP" --capacity-size "$CAP_SIZE" > "$OUT/masse-create.txt"
"$MASSE" mount --fast "$FAST" --capacity "$CAP" --chunk-size "$CHUNK" --threads "$MOUNT_THREADS" --stats "$MNT" > "$OUT/masse-mount.txt" 2>&1 &
MPID=$!
for _ in $(seq 100); do mountpoint -q "$MNT" && break; sleep 0.1; done
mountpoint -q "$MNT" || { cat "$OUT/masse-mount.txt"; exit 1; }
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
MOUNT_PID=$(pgrep -f "masse mount --fast $FAST" | head -1)
if [ "$PERF" = 1 ] && command -v perf >/dev/null; then
    # Profile the mount process during the mixed phase (after a 10 s warm-up).
    (
        while ! [ -s "$OUT/masse-mixed.txt" ]; do sleep 1; done
        sleep 10
        perf record -F 499 -g -p "$MOUNT_PID" -o "$OUT/perf-mount.data" -- sleep 20 > /dev/null 2>&1 || true
    ) &
    PERFJOB=$!
fi
run_side masse "$MNT"
if [ -n "${PERFJOB:-}" ]; then wait "$PERFJOB" || true; fi
fusermount3 -u "$MNT" 2>/dev/null || umount "$MNT"
wait "$MPID"; MPID=""
rm -rf "$FAST" "$CAP"

# The in-process side: the same kind of pool, opened by db_bench through the plugin.
if [ "$PLUGIN" = 1 ]; then
    URI="masse://fast=$FAST,capacity=$CAP,fast_size=2G,capacity_size=$CAP_SIZE,chunk_size=$CHUNK,create=if_missing"
    echo "plugin:      --fs_uri=$URI --db=/db" | tee -a "$OUT/summary.txt"
    if [ "$PERF" = 1 ] && command -v perf >/dev/null; then
        (   # db_bench itself, 20 s of the mixed phase after a 10 s warm-up
            while ! [ -s "$OUT/plugin-mixed.pid" ]; do sleep 0.5; done
            sleep 10
            perf record -F 499 -g -p "$(cat "$OUT/plugin-mixed.pid")" -o "$OUT/perf-plugin.data" -- sleep 20 > /dev/null 2>&1 || true
        ) &
        PERFJOB2=$!
    fi
    sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
    run_side plugin "" --fs_uri="$URI"
    if [ -n "${PERFJOB2:-}" ]; then wait "$PERFJOB2" || true; fi
fi

# Side by side.
read -r E_OPS E_AVG E_P99 E_P999 < <(parse "$OUT/ext4-mixed.txt")
read -r M_OPS M_AVG M_P99 M_P999 < <(parse "$OUT/masse-mixed.txt")
P_OPS=-; P_AVG=-; P_P99=-; P_P999=-
[ "$PLUGIN" = 1 ] && read -r P_OPS P_AVG P_P99 P_P999 < <(parse "$OUT/plugin-mixed.txt")
# Bytes RocksDB wrote (flushes, compactions, WAL: --statistics) and the block-device
# bytes its process caused, load + mixed phase.
rocks_bytes() { awk '/^rocksdb\.(flush\.write|compact\.write|wal)\.bytes COUNT/ {s += $4} END {print s + 0}' "$@"; }
waf() { # side -> "rocksdb_MiB device_MiB ratio"
    local r d
    r=$(rocks_bytes "$OUT/$1-load.txt" "$OUT/$1-mixed.txt")
    d=$(( $(cat "$OUT/$1-load.wbytes") + $(cat "$OUT/$1-mixed.wbytes") ))
    awk -v r="$r" -v d="$d" 'BEGIN { printf "%.0f MiB by RocksDB, %.0f MiB to the disk: %.2f\n", r/1048576, d/1048576, (r > 0 ? d / r : 0) }'
}
ratio() { [ "$1" = - ] && { echo -; return; }; awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
{
    echo
    echo "| readrandomwriterandom 70/30 | ops/s | read avg µs | read p99 µs | read p99.9 µs |"
    echo "|---|---:|---:|---:|---:|"
    echo "| ext4 (same disk) | $E_OPS | $E_AVG | $E_P99 | $E_P999 |"
    echo "| masse mount (vFile) | $M_OPS | $M_AVG | $M_P99 | $M_P999 |"
    echo "| masse in-process (plugin) | $P_OPS | $P_AVG | $P_P99 | $P_P999 |"
    echo "| mount / ext4 | $(ratio "$M_OPS" "$E_OPS") | $(ratio "$M_AVG" "$E_AVG") | $(ratio "$M_P99" "$E_P99") | $(ratio "$M_P999" "$E_P999") |"
    echo "| plugin / ext4 | $(ratio "$P_OPS" "$E_OPS") | $(ratio "$P_AVG" "$E_AVG") | $(ratio "$P_P99" "$E_P99") | $(ratio "$P_P999" "$E_P999") |"
    echo
    echo "disk bytes per byte RocksDB wrote (load + mixed; masse's fast tier is /dev/shm, not counted):"
    echo "  ext4:   $(waf ext4)"
    [ "$PLUGIN" = 1 ] && echo "  plugin: $(waf plugin)"
    echo
    echo "load (fillrandom, WAL off):"
    echo "  ext4:  $(grep -E '^fillrandom' "$OUT/ext4-load.txt" | tr -s ' ')"
    echo "  masse: $(grep -E '^fillrandom' "$OUT/masse-load.txt" | tr -s ' ')"
    [ "$PLUGIN" = 1 ] && echo "  plugin: $(grep -E '^fillrandom' "$OUT/plugin-load.txt" | tr -s ' ')"
    echo "db_bench process time during the mixed phase:"
    echo "  ext4:  $(tail -1 "$OUT/ext4-mixed.txt")"
    echo "  masse: $(tail -1 "$OUT/masse-mixed.txt")"
    [ "$PLUGIN" = 1 ] && echo "  plugin: $(tail -1 "$OUT/plugin-mixed.txt")"
    echo
    echo "masse mount --stats (FUSE handler time per op, file layer and engine counters):"
    sed -n '/FUSE handler time/,$p' "$OUT/masse-mount.txt"
} | tee -a "$OUT/summary.txt"

if [ -f "$OUT/perf-mount.data" ]; then
    perf report -i "$OUT/perf-mount.data" --no-children --sort dso --stdio 2>/dev/null \
        | grep -v '^#' | grep -v '^$' | head -15 > "$OUT/perf-mount-dso.txt" || true
    perf report -i "$OUT/perf-mount.data" --no-children --sort sym --stdio -g none 2>/dev/null \
        | grep -v '^#' | grep -v '^$' | head -40 > "$OUT/perf-mount-sym.txt" || true
    rm -f "$OUT/perf-mount.data"
    {
        echo
        echo "perf (mount process, 20 s of the mixed phase), by DSO:"
        cat "$OUT/perf-mount-dso.txt"
        echo "top symbols:"
        head -25 "$OUT/perf-mount-sym.txt"
    } | tee -a "$OUT/summary.txt"
fi
if [ -f "$OUT/perf-plugin.data" ]; then
    perf report -i "$OUT/perf-plugin.data" --no-children --sort dso --stdio 2>/dev/null \
        | grep -v '^#' | grep -v '^$' | head -15 > "$OUT/perf-plugin-dso.txt" || true
    perf report -i "$OUT/perf-plugin.data" --no-children --sort sym --stdio -g none 2>/dev/null \
        | grep -v '^#' | grep -v '^$' | head -40 > "$OUT/perf-plugin-sym.txt" || true
    rm -f "$OUT/perf-plugin.data"
    {
        echo
        echo "perf (db_bench with the plugin, 20 s of the mixed phase), by DSO:"
        cat "$OUT/perf-plugin-dso.txt"
        echo "top symbols:"
        head -25 "$OUT/perf-plugin-sym.txt"
    } | tee -a "$OUT/summary.txt"
fi
rm -f "$OUT"/*.pid
plot "$OUT"
echo "results in $OUT/"
