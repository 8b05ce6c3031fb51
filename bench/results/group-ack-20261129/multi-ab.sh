#!/bin/bash
# usage: multi-ab.sh OUT ROUNDS DURATION bin1 bin2 ...   (16 threads, Table 4, 2e6 keys; order rotates per round)
set -euo pipefail
OUT=$1; ROUNDS=$2; DUR=$3; shift 3
BINS=("$@"); N=${#BINS[@]}
mkdir -p "$OUT"; W=$(mktemp -d /var/tmp/mab-XXXX); F=/dev/shm/mab-fast
C=(--num=2000000 --key_size=23 --value_size=100)
for r in $(seq 0 $((ROUNDS-1))); do
  for i in $(seq 0 $((N-1))); do
    b=${BINS[$(( (i + r) % N ))]}; name=$(basename $b)
    rm -f $F $W/cap
    $b bench --fast=$F --capacity=$W/cap --capacity-size=2048M --benchmarks=fillrandom --threads=1 --seed=1 "${C[@]}" > $OUT/fill-$name-$r.out 2>&1
    $b bench --fast=$F --capacity=$W/cap --use_existing_db=true --benchmarks=readrandomwriterandom --threads=${THREADS:-16} --duration=$DUR --readwritepercent=50 --seed=2 "${C[@]}" > $OUT/run-$name-$r.out 2>&1
    ops=$(grep -a -o -E '[0-9]+ ops/sec' $OUT/run-$name-$r.out | head -1); cpu=$(grep -a -o -E '[0-9.]+ µs per operation' $OUT/run-$name-$r.out)
    gc=$(grep -a -o -E 'in [0-9]+ group commits \([0-9]+ records' $OUT/run-$name-$r.out)
    echo "round $r $name: $ops  cpu $cpu  $gc  load $(cut -d' ' -f1 /proc/loadavg)" | tee -a $OUT/summary.txt
  done
done
rm -rf $W $F
