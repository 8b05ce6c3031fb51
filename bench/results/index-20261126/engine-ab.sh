#!/bin/bash
# Engine A/B for the packed index: fill 10^7 keys (16 thr), checkpoint at end, SIGKILL,
# reopen with `masse stats` (recovery from the checkpoint); old and new interleaved.
# Then: a pool checkpointed by the old build, opened by the new one (legacy images).
set -u
KEYS=${KEYS:-10000000}
W=$(mktemp -d /var/tmp/masse-ab.XXXXXX); S=$(mktemp -d /dev/shm/masse-ab.XXXXXX)
trap 'rm -rf "$W" "$S"' EXIT
echo "# $(date -u +%FT%TZ) keys=$KEYS load: $(cat /proc/loadavg)"
fill() { # $1 = binary
  rm -f "$S/f" "$W/c"
  "$1" demo --fast "$S/f" --fast-size 2G --capacity "$W/c" --capacity-size 8G --num "$KEYS" --threads 16 \
       --phases fill --hang-at-end --checkpoint-at-end > "$W/demo.log" 2>&1 &
  local pid=$!
  until grep -q '^READY' "$W/demo.log" 2>/dev/null; do
    kill -0 $pid 2>/dev/null || { cat "$W/demo.log"; exit 1; }; sleep 1; done
  grep -E '^fill ' "$W/demo.log"
  kill -9 $pid; wait $pid 2>/dev/null || true
}
reopen() { # $1 = binary
  /usr/bin/time -f "stats wall %e s, max RSS %M KiB" "$1" stats --fast "$S/f" --capacity "$W/c" 2>&1 | grep -E 'last recovery|index  |stats wall'
}
for r in 1 2 3; do
  for b in old new; do
    echo "== round $r $b"; fill /tmp/masse-$b; reopen /tmp/masse-$b
  done
done
echo "== legacy: filled and checkpointed by old, opened by new"
fill /tmp/masse-old; reopen /tmp/masse-new; echo "-- and again (new checkpoint written at close?)"; reopen /tmp/masse-new
echo "# end $(date -u +%FT%TZ) load: $(cat /proc/loadavg)"
