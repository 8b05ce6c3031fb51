#!/bin/bash
# Spike A (docs/plans/issue18-batched-reads.md §6): counts per get today, H1 (halt polling), fio ceilings.
set -u
B=${B:-/var/tmp/masse-base}
OUT=/var/tmp/spike/a; mkdir -p $OUT
FAST=/dev/shm/masse-spike; CAP=/var/tmp/spike/cap
C=(--num=2000000 --key_size=23 --value_size=100)
run() { # name haltpoll_ns
  rm -f $FAST $CAP
  $B bench --fast=$FAST --capacity=$CAP --capacity-size=2048M --benchmarks=fillrandom --threads=1 --seed=1 "${C[@]}" > $OUT/fill-$1.out 2>&1
  echo $2 > /sys/module/haltpoll/parameters/guest_halt_poll_ns
  $B bench --fast=$FAST --capacity=$CAP --use_existing_db=true --benchmarks=readrandomwriterandom --threads=16 --duration=60 --readwritepercent=50 --seed=2 "${C[@]}" > $OUT/run-$1.out 2>&1 &
  P=$!
  sleep 15
  perf stat -e task-clock,context-switches,cpu-migrations,sched:sched_wakeup,syscalls:sys_enter_pread64,syscalls:sys_enter_io_uring_enter,syscalls:sys_enter_futex,irq:irq_handler_entry -p $P -- sleep 20 > $OUT/perf-$1.txt 2>&1
  wait $P
  echo 0 > /sys/module/haltpoll/parameters/guest_halt_poll_ns
  grep -a -o -E 'readrandomwriterandom +:.*' $OUT/run-$1.out | head -1 | sed "s/^/$1: /"
}
run base 0
run haltpoll 200000
run base2 0
rm -f $FAST $CAP
F=/var/tmp/spike/fio.dat
FC="--filename=$F --size=4G --rw=randread --bs=4k --direct=1 --time_based --runtime=20 --group_reporting --thread --verify_state_save=0"
fio --name=psync16 $FC --ioengine=psync --numjobs=16 > $OUT/fio-psync16.txt 2>&1
fio --name=ur1x16 $FC --ioengine=io_uring --numjobs=1 --iodepth=16 > $OUT/fio-ur1x16.txt 2>&1
fio --name=ur2x8b $FC --ioengine=io_uring --numjobs=2 --iodepth=8 --iodepth_batch_submit=8 --iodepth_batch_complete_min=2 > $OUT/fio-ur2x8b.txt 2>&1
rm -f $F
grep -h -E "IOPS=|cpu " $OUT/fio-*.txt
echo done
