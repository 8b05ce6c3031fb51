#!/bin/bash
# Issue 12 cost: masse bench Table 4 (23 B keys, 100 B values, 50/50 readrandomwriterandom), 16 threads,
# before (main 70a2fa9) and after (issue12), interleaved A B A B in one run.
set -e
cd /tmp/b12
N=2000000; D=30
for round in 1 2; do
for v in before after; do
  rm -f /dev/shm/b12.fast /var/tmp/b12.cap
  P="--fast=/dev/shm/b12.fast --capacity=/var/tmp/b12.cap"
  ./masse-$v bench $P --capacity-size=2048M --benchmarks=fillrandom --threads=1 --num=$N --key_size=23 --value_size=100 --seed=1 > fill-$v-$round.out 2>&1
  ./masse-$v bench $P --benchmarks=readrandomwriterandom --threads=16 --duration=$D --use_existing_db=true --readwritepercent=50 --num=$N --key_size=23 --value_size=100 --seed=2 > run-$v-$round.out 2>&1
  echo "round $round $v: $(grep -a -o -E 'fillrandom +:.*' fill-$v-$round.out | head -1)"
  echo "round $round $v: $(grep -a -o -E 'readrandomwriterandom +:.*' run-$v-$round.out | head -1)   load $(cut -d' ' -f1-3 /proc/loadavg)"
done
done
rm -f /dev/shm/b12.fast /var/tmp/b12.cap
