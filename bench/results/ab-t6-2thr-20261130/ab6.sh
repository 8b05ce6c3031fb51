#!/usr/bin/env bash
# Table 6 keys (20 B, 100 B values, 70 % reads) at 2 threads: two builds, order rotating.
set -euo pipefail
OUT=$1; shift; ROUNDS=$1; shift; NUM=$1; shift; DUR=$1; shift
mkdir -p "$OUT"; N=("$@")
C="--num=$NUM --key_size=20 --value_size=100"
for r in $(seq 1 "$ROUNDS"); do
  for i in 0 1; do
    j=$(( (i + r - 1) % 2 )); b=${N[$j]}; name=$(basename "$b")
    rm -f /dev/shm/ab6-fast /var/tmp/ab6-cap
    P="--fast=/dev/shm/ab6-fast --capacity=/var/tmp/ab6-cap"
    "$b" bench $P --capacity-size=2048M --benchmarks=fillrandom --threads=1 --seed=1 $C > "$OUT/fill-$name-$r.out" 2>&1
    "$b" bench $P --use_existing_db=true --benchmarks=readrandomwriterandom --threads=2 --duration=$DUR --readwritepercent=70 --seed=2 $C > "$OUT/run-$name-$r.out" 2>&1
    echo "round $r $name: $(grep -a -o -E 'readrandomwriterandom +:.*ops/sec' "$OUT/run-$name-$r.out" | head -1) | $(grep -a -E '^  read   µs' "$OUT/run-$name-$r.out" | cut -c1-60) | $(grep -a -o -E '[0-9.]+ µs per operation' "$OUT/run-$name-$r.out")"
  done
done
rm -f /dev/shm/ab6-fast /var/tmp/ab6-cap
