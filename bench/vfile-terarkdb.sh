#!/usr/bin/env bash
# The paper's TerarkDB case (§4.4, Table 6) on this machine: RocksDB's db_bench,
# readrandomwriterandom 70/30, 20 B keys, 100 B values, no read cache, with the
# database files on a `masse mount` versus on the same disk's ext4, side by side.
#
#   bench/vfile-terarkdb.sh            # 10^7 keys, 120 s of readrandomwriterandom per side
#   bench/vfile-terarkdb.sh --quick    # 10^6 keys, 30 s per side
#   NUM=3000000 DURATION=60 THREADS=4 bench/vfile-terarkdb.sh
#
# Environment: NUM (keys), DURATION (seconds of the mixed phase), THREADS (db_bench
# threads, default 4), MOUNT_THREADS (FUSE threads of the mount, default 4), BENCH_DIR (where the ext4 database and the capacity-tier
# file go; default /var/tmp), CAP_SIZE (capacity-tier file, default 8G), CHUNK (vFile
# chunk size, default 16K), PERF=0 to skip
# the perf profile. Needs db_bench (rocksdb-tools), fusermount3/root, and perf for
# the profile. Wrapped in flock /tmp/masse-bench.lock so benchmarks do not overlap.
#
# Both sides use O_DIRECT reads (use_direct_reads) and no block cache (cache_size=0),
# so every read reaches storage: on ext4 the disk, on the mount the engine (one
# chunk record per read, from the capacity tier or a DRAM segment buffer). Writes
# go through the page cache on ext4, and through the vFile write-back buffer and
# the engine's fast tier (a /dev/shm file standing in for SCM) on the mount.
set -euo pipefail
cd "$(dirname "$0")/.."

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

command -v db_bench >/dev/null || { echo "db_bench not found (apt-get install -y rocksdb-tools)"; exit 2; }
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
    if [ -n "$MPID" ]; then wait "$MPID" 2>/dev/null || true; fi
    rm -rf "$EXT4" "$FAST" "$CAP"
    rmdir "$MNT" 2>/dev/null || true
}
trap cleanup EXIT
cleanup
mkdir -p "$EXT4" "$MNT"

{
    echo "# vFile TerarkDB case: db_bench on a masse mount vs ext4"
    echo "date (UTC):  $(date -u '+%Y-%m-%d %H:%M:%S')"
    echo "machine:     $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, $(uname -r); shared with other jobs (figures taken on the shared 2-core machine)"
    echo "disk:        $(df -hT "$BENCH_DIR" | awk 'NR==2 {print $1, $2, $3}') ($BENCH_DIR)"
    echo "db_bench:    $(db_bench --version 2>&1 | head -1)"
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

run_side() { # name dir
    local name=$1 dir=$2
    echo "== $name: load $NUM keys"
    /usr/bin/time -f "%e s elapsed, %U s user, %S s sys" \
        db_bench --db="$dir/db" $COMMON $LOAD > "$OUT/$name-load.txt" 2>&1
    grep -E "^fillrandom" "$OUT/$name-load.txt" || true
    echo "== $name: readrandomwriterandom 70/30 for $DURATION s"
    /usr/bin/time -f "%e s elapsed, %U s user, %S s sys" \
        db_bench --db="$dir/db" $COMMON $MIXED > "$OUT/$name-mixed.txt" 2>&1
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

# Side by side.
parse() { # file -> "ops/s avg p99 p99.9" (read histogram)
    awk '
        /^readrandomwriterandom/ { for (i = 1; i <= NF; i++) if ($i == "ops/sec") ops = $(i-1) }
        /Microseconds per read:/ { r = 1; next }
        /Microseconds per write:/ { r = 0 }
        r && /^Count:/ { avg = $4 }
        r && /^Percentiles:/ { p99 = $7; p999 = $9 }
        END { printf "%s %s %s %s\n", ops, avg, p99, p999 }' "$1"
}
read -r E_OPS E_AVG E_P99 E_P999 < <(parse "$OUT/ext4-mixed.txt")
read -r M_OPS M_AVG M_P99 M_P999 < <(parse "$OUT/masse-mixed.txt")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
{
    echo
    echo "| readrandomwriterandom 70/30 | ops/s | read avg µs | read p99 µs | read p99.9 µs |"
    echo "|---|---:|---:|---:|---:|"
    echo "| ext4 (same disk) | $E_OPS | $E_AVG | $E_P99 | $E_P999 |"
    echo "| masse mount (vFile) | $M_OPS | $M_AVG | $M_P99 | $M_P999 |"
    echo "| masse / ext4 | $(ratio "$M_OPS" "$E_OPS") | $(ratio "$M_AVG" "$E_AVG") | $(ratio "$M_P99" "$E_P99") | $(ratio "$M_P999" "$E_P999") |"
    echo
    echo "load (fillrandom, WAL off):"
    echo "  ext4:  $(grep -E '^fillrandom' "$OUT/ext4-load.txt" | tr -s ' ')"
    echo "  masse: $(grep -E '^fillrandom' "$OUT/masse-load.txt" | tr -s ' ')"
    echo "db_bench process time during the mixed phase:"
    echo "  ext4:  $(tail -1 "$OUT/ext4-mixed.txt")"
    echo "  masse: $(tail -1 "$OUT/masse-mixed.txt")"
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
echo "results in $OUT/"
