#!/usr/bin/env bash
# Read tails of 16 blocking readers, with and without masse, and the whole-machine pauses
# under each load (docs/benchmarks.md, "Why 16 blocking readers' p99.9 is about 28 ms here").
# Run from the repository root after `cargo build --release -p masse-cli`; needs root for
# the watchers' SCHED_FIFO. Writes *.txt here.
set -euo pipefail
R=bench/results/vm-pauses-20261130
B=target/release/masse
F=/var/tmp/vm-pauses-fio.dat
C="--num=2000000 --key_size=23 --value_size=100"
P="--fast=/dev/shm/vm-pauses-fast --capacity=/var/tmp/vm-pauses-cap"
trap 'rm -f $F /dev/shm/vm-pauses-fast /var/tmp/vm-pauses-cap' EXIT
fio --name=w --filename=$F --rw=write --bs=1M --size=2G --direct=1 --verify_state_save=0 > /dev/null
$B bench $P --capacity-size=2048M --benchmarks=fillrandom --threads=1 --seed=1 $C > /dev/null
FIO="fio --name=r --filename=$F --rw=randread --bs=4k --direct=1 --group_reporting --time_based --runtime=10 --verify_state_save=0 --percentile_list=50:99:99.9:99.99"
MASSE="$B bench $P --use_existing_db=true --benchmarks=readrandom --duration=10 --seed=2 $C"
bench/vm-pauses.py --duration 10 > $R/idle.txt 2>&1
# Each load twice: alone (its latencies), then under the watchers (the pauses).
for w in "fio-io_uring-1x16:--ioengine=io_uring --numjobs=1 --iodepth=16" \
         "fio-psync-2:--ioengine=psync --numjobs=2" "fio-psync-16:--ioengine=psync --numjobs=16"; do
    name=${w%%:*}; args=${w#*:}
    $FIO $args > $R/$name.txt 2>&1
    bench/vm-pauses.py --duration 12 -- $FIO $args > $R/$name-watched.txt 2>&1
done
for t in 16 2; do
    $MASSE --threads=$t > $R/masse-readrandom-$t.txt 2>&1
    bench/vm-pauses.py --duration 12 -- $MASSE --threads=$t > $R/masse-readrandom-$t-watched.txt 2>&1
done
