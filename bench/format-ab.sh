#!/usr/bin/env bash
# Format version 2 against version 3, side by side with one build: for each table shape,
# `masse bench` fills a fresh tiered pool created with --format-version 2 and one created
# with --format-version 3 (alternating which goes first, round by round), then runs
# readrandom on each. Reports per run the fill's host write amplification (capacity bytes
# written / user bytes, before any GC), the fill's ops/s and readrandom's ops/s.
#
#   bench/format-ab.sh                              # tables 4 6 5, 2 rounds, 16 read threads
#   bench/format-ab.sh --tables 4 --rounds 3 --threads 2 --duration 20
#
# Options:
#   --bin PATH      masse binary (default target/release/masse)
#   --tables LIST   table shapes: 4 (23 B keys, 100 B values, 2e6 keys), 6 (20 B, 100 B,
#                   2e6), 5 (16 B, 4096 B, 2e5)   (default "4 6 5")
#   --rounds N      rounds per table (2)          --threads T   readrandom threads (16)
#   --duration S    readrandom seconds (20)       --dir DIR     capacity tier (/var/tmp)
#   --out DIR       results (default bench/results/format-ab-<UTC>)
#
# Runs under `flock /tmp/masse-bench.lock` like the other benchmarks. Say what else ran on
# the machine when you cite the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=target/release/masse; TABLES="4 6 5"; ROUNDS=2; THREADS=16; DURATION=20
DIR=${TMPDIR:-/var/tmp}; OUT=""
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) BIN=$2; shift ;;
        --tables) TABLES=$2; shift ;;
        --rounds) ROUNDS=$2; shift ;;
        --threads) THREADS=$2; shift ;;
        --duration) DURATION=$2; shift ;;
        --dir) DIR=$2; shift ;;
        --out) OUT=$2; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
OUT=${OUT:-bench/results/format-ab-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
WORK=$(mktemp -d "$DIR/masse-fab-XXXXXX")
FAST=$(mktemp -u /dev/shm/masse-fab-XXXXXX)
trap 'rm -rf "$WORK" "$FAST"' EXIT
cp "$BIN" "$WORK/masse"
{
    echo "# bench/format-ab.sh $(date -u +%FT%TZ)"
    echo "binary: $BIN ($(sha256sum "$BIN" | cut -c1-12)), commit $(git rev-parse --short HEAD 2>/dev/null || echo ?)"
    echo "tables $TABLES, rounds $ROUNDS, readrandom threads $THREADS for $DURATION s; $(nproc) CPUs, $(uname -r)"
} | tee "$OUT/summary.txt"
shape() {
    case "$1" in
        4) echo "23 100 2000000" ;;
        6) echo "20 100 2000000" ;;
        5) echo "16 4096 200000" ;;
        *) echo "unknown table $1" >&2; exit 2 ;;
    esac
}
for t in $TABLES; do
    read -r K V N <<<"$(shape "$t")"
    for round in $(seq 1 "$ROUNDS"); do
        order="2 3"; [ $((round % 2)) -eq 0 ] && order="3 2"
        for f in $order; do
            rm -f "$FAST" "$WORK/cap"
            P=(--fast="$FAST" --capacity="$WORK/cap" --num="$N" --key_size="$K" --value_size="$V")
            o="$OUT/t$t-v$f-$round"
            flock /tmp/masse-bench.lock "$WORK/masse" bench "${P[@]}" --format-version="$f" \
                --benchmarks=fillrandom --threads=1 --seed=1 > "$o-fill.out" 2>&1
            flock /tmp/masse-bench.lock "$WORK/masse" bench "${P[@]}" --use_existing_db=true \
                --benchmarks=readrandom --threads="$THREADS" --duration="$DURATION" --seed=2 \
                > "$o-read.out" 2>&1
            waf=$(grep -a -o -E 'host write amplification [0-9.]+' "$o-fill.out" | tail -1 | awk '{print $4}')
            fill=$(grep -a -o -E 'fillrandom +:.* ([0-9]+) ops/sec' "$o-fill.out" | grep -o -E '[0-9]+ ops/sec' | head -1)
            read=$(grep -a -o -E 'readrandom +:.* ([0-9]+) ops/sec' "$o-read.out" | grep -o -E '[0-9]+ ops/sec' | head -1)
            echo "table $t round $round format $f: host WAF ${waf:-?}  fill ${fill:-?}  readrandom ${read:-?}   load $(cut -d' ' -f1-3 /proc/loadavg)" \
                | tee -a "$OUT/summary.txt"
        done
    done
done
rm -f "$FAST"
