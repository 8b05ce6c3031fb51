#!/usr/bin/env bash
# Two or more builds of masse side by side: `masse bench` Table 4 (23 B keys, 100 B values,
# fillrandom then readrandomwriterandom 50/50), every build once per round, the order
# rotating from round to round (A B, B A, ... or A B C, B C A, C A B, ...), so machine noise
# and the slowing of the disk through a sequence fall on every build alike. For "no cost"
# checks of a change (issue 12's fixes, issue 15's restructuring), before/after figures of an
# engine change, and bisecting a regression across several commits.
#
#   bench/ab.sh BEFORE_BIN AFTER_BIN                 # 3 rounds, 2e6 keys, 16 threads, 30 s
#   bench/ab.sh --rounds 5 --num 1e7 --threads 2 --duration 60 old/masse new/masse
#   bench/ab.sh --rounds 3 --duration 25 a/masse b/masse c/masse d/masse
#
# Options:
#   --rounds N      rounds (3)                            --num N        keys (2000000)
#   --threads T     readrandomwriterandom threads (16)   --duration S   seconds per run (30)
#   --dir DIR       capacity tier (default $TMPDIR or /var/tmp); fast tier: /dev/shm
#   --capacity-only pools without a fast tier (default: tiered)
#   --out DIR       results (default bench/results/ab-<UTC>)
#
# Prints each run's db_bench-style summary line with its CPU per operation, group commits
# and the load average, then the median ops/s per build and its ratio to the first build.
# Copies the binaries first (a rebuild during the run must not change them) and runs under
# `flock /tmp/masse-bench.lock` like the other benchmarks. Say what else ran on the machine
# when you cite the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=3; NUM=2000000; THREADS=16; DURATION=30
DIR=${TMPDIR:-/var/tmp}; OUT=""; CAPONLY=0
BINS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=$2; shift ;;
        --num) NUM=$(python3 -c "print(int(float('$2')))"); shift ;;
        --threads) THREADS=$2; shift ;;
        --duration) DURATION=$2; shift ;;
        --dir) DIR=$2; shift ;;
        --out) OUT=$2; shift ;;
        --capacity-only) CAPONLY=1 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
        *) BINS+=("$1") ;;
    esac
    shift
done
[ "${#BINS[@]}" -ge 2 ] || { echo "usage: bench/ab.sh [options] BIN BIN [BIN...]" >&2; exit 2; }
OUT=${OUT:-bench/results/ab-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
WORK=$(mktemp -d "$DIR/masse-ab-XXXXXX")
FAST=$(mktemp -u /dev/shm/masse-ab-XXXXXX)
trap 'rm -rf "$WORK" "$FAST"' EXIT
N=${#BINS[@]}
# Two builds keep the names "before" and "after" (older result directories use them).
NAMES=(before after)
[ "$N" -eq 2 ] || NAMES=($(seq -f "b%g" 1 "$N"))
{
    echo "# bench/ab.sh $(date -u +%FT%TZ)"
    for i in $(seq 0 $((N - 1))); do
        cp "${BINS[$i]}" "$WORK/${NAMES[$i]}"
        echo "${NAMES[$i]}: ${BINS[$i]} ($(sha256sum "${BINS[$i]}" | cut -c1-12))"
    done
    echo "rounds $ROUNDS, num $NUM, threads $THREADS, duration $DURATION s, capacity-only $CAPONLY; $(nproc) CPUs, $(uname -r)"
} | tee "$OUT/summary.txt"
COMMON=(--num="$NUM" --key_size=23 --value_size=100)
for round in $(seq 1 "$ROUNDS"); do
    for i in $(seq 0 $((N - 1))); do
        v=${NAMES[$(( (i + round - 1) % N ))]}
        rm -f "$FAST" "$WORK/cap"
        P=(--fast="$FAST" --capacity="$WORK/cap")
        [ "$CAPONLY" -eq 1 ] && P=(--capacity="$WORK/cap")
        flock /tmp/masse-bench.lock "$WORK/$v" bench "${P[@]}" --capacity-size=2048M \
            --benchmarks=fillrandom --threads=1 --seed=1 "${COMMON[@]}" > "$OUT/fill-$v-$round.out" 2>&1
        flock /tmp/masse-bench.lock "$WORK/$v" bench "${P[@]}" --use_existing_db=true \
            --benchmarks=readrandomwriterandom --threads="$THREADS" --duration="$DURATION" \
            --readwritepercent=50 --seed=2 "${COMMON[@]}" > "$OUT/run-$v-$round.out" 2>&1
        line=$(grep -a -o -E 'readrandomwriterandom +:.*' "$OUT/run-$v-$round.out" | head -1)
        cpu=$(grep -a -o -E '[0-9.]+ µs per operation' "$OUT/run-$v-$round.out" | head -1)
        groups=$(grep -a -o -E '[0-9]+ group commits \([0-9]+ records' "$OUT/run-$v-$round.out" | head -1)
        echo "round $round $v: $line   cpu $cpu; $groups); load $(cut -d' ' -f1-3 /proc/loadavg)" \
            | tee -a "$OUT/summary.txt"
    done
done
python3 - "$OUT/summary.txt" "${NAMES[@]}" <<'EOF' | tee -a "$OUT/summary.txt"
import re, statistics, sys
names = sys.argv[2:]
ops = {n: [] for n in names}
for line in open(sys.argv[1]):
    m = re.match(r"round \d+ (\S+): .* (\d+) ops/sec", line)
    if m:
        ops[m.group(1)].append(int(m.group(2)))
first = statistics.median(ops[names[0]])
for n in names:
    med = statistics.median(ops[n])
    print(f"{n}: median {med:,.0f} ops/s (range {min(ops[n]):,}-{max(ops[n]):,}), "
          f"{med / first:.3f} x {names[0]}")
EOF
