#!/usr/bin/env bash
# Measures the engine-core figures: index DRAM per key, recovery time after
# SIGKILL (with and without a checkpoint), host write amplification under
# overwrite churn at 80 % utilization, put/get throughput at 2 and 16 threads,
# and fio's 4 KiB random-read IOPS at the same queue depths for comparison.
#
# Usage: bench/engine-figures.sh [KEYS]   (default 10000000; needs ~4 GiB on
# $CAP_DIR (default /var/tmp) and ~2 GiB of /dev/shm; installs fio if missing)
set -euo pipefail
KEYS=${1:-10000000}
CAP_DIR=${CAP_DIR:-/var/tmp}
cd "$(dirname "$0")/.."
cargo build --release -q -p masse-cli -p masse --examples
M=target/release/masse
W=$(mktemp -d "$CAP_DIR/masse-fig.XXXXXX"); S=$(mktemp -d /dev/shm/masse-fig.XXXXXX)
trap 'rm -rf "$W" "$S"' EXIT
echo "# $0 $*"; echo "# $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo none)"
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(awk '/MemTotal/{print $2/1048576 " GiB"}' /proc/meminfo), kernel $(uname -r)"

echo; echo "## index DRAM per key"
for n in 10000000 100000000; do
  for p in "" --presize; do cargo run --release -q -p masse --example index_mem -- --keys $n $p | grep -E "^(command|bytes/key)"; done
done

recover() { # $1 = label, extra demo args follow
  local label=$1; shift
  rm -f "$S/f" "$W/c"
  "$M" demo --fast "$S/f" --fast-size 2G --capacity "$W/c" --capacity-size 8G --num "$KEYS" --threads 16 \
       --phases fill --hang-at-end "$@" > "$W/demo.log" 2>&1 &
  local pid=$!
  until grep -q '^READY' "$W/demo.log" 2>/dev/null; do
    kill -0 $pid 2>/dev/null || { cat "$W/demo.log"; exit 1; }; sleep 1; done
  grep -E '^fill ' "$W/demo.log"
  kill -9 $pid; wait $pid 2>/dev/null || true
  echo "$label: SIGKILLed after the fill; reopening:"
  "$M" stats --fast "$S/f" --capacity "$W/c" | grep -E 'last recovery|index  '
}
echo; echo "## recovery after SIGKILL at $KEYS keys (16-byte keys, 100-byte values)"
recover "no checkpoint"
recover "with checkpoint" --checkpoint-at-end

echo; echo "## host write amplification: overwrite churn at 80 % utilization (2M keys)"
"$M" demo --dir "$W" --num 2000000 --threads 2 --utilization 0.8 --phases fill,overwrite --duration 120 \
  | grep -E '^(fill|overwrite) |host write|^gc |bands  '

echo; echo "## put/get throughput (fast tier /dev/shm, capacity tier on $CAP_DIR) and fio at the same queue depth"
command -v fio >/dev/null || { apt-get update -qq && apt-get install -y -qq fio >/dev/null; }
for T in 2 16; do
  "$M" demo --dir "$W" --num 2000000 --threads $T --phases fill,readwrite,overwrite --read-percent 100 --duration 30 \
    | grep -E '^(fill|readwrite|overwrite) ' | sed "s/^/threads=$T  /"
  fio --name=rr --filename="$W/fio.dat" --size=4G --rw=randread --bs=4k --direct=1 --ioengine=io_uring \
      --iodepth=$T --runtime=30 --time_based --group_reporting --output-format=terse --terse-version=3 \
    | awk -F';' -v qd=$T '{printf "fio 4 KiB randread QD%s: %d IOPS, mean %.0f us\n", qd, $8, $40}'
done
