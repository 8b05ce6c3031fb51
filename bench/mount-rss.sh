#!/usr/bin/env bash
# Memory of `masse mount` as files come and go (issue 13): RSS of the mount process
# at the start, after N files of 100 bytes are created (one open/write/close each,
# in the mount's root), after they are all deleted, and its peak (VmHWM).
#
# Usage: bench/mount-rss.sh [N] [MASSE_BINARY]   (default 100000 and this tree's
# release build; run as root or with fusermount3; ~2 GiB on $CAP_DIR, default /var/tmp)
set -euo pipefail
N=${1:-100000}
CAP_DIR=${CAP_DIR:-/var/tmp}
cd "$(dirname "$0")/.."
if [ -z "${2:-}" ]; then cargo build --release -q -p masse-cli; fi
M=$(realpath "${2:-target/release/masse}")
W=$(mktemp -d "$CAP_DIR/masse-rss.XXXXXX"); S=$(mktemp -d /dev/shm/masse-rss.XXXXXX)
PID=""
cleanup() {
  if [ -n "$PID" ]; then umount "$W/mnt" 2>/dev/null || kill -TERM "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
  rm -rf "$W" "$S"
}
trap cleanup EXIT
mkdir "$W/mnt"
"$M" create --fast "$S/f" --fast-size 256M --capacity "$W/c" --capacity-size 2G > /dev/null
"$M" mount --fast "$S/f" --capacity "$W/c" "$W/mnt" > "$W/log" 2>&1 &
PID=$!
until grep -q "mounted on" "$W/log" 2>/dev/null; do kill -0 "$PID"; sleep 0.1; done
mib() { awk -v k="$1" '$1 == k":" {printf "%.1f MiB", $2 / 1024}' "/proc/$PID/status"; }
echo "# $0 $N $M"
echo "# $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo none); $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "start:                  $(mib VmRSS)"
python3 - "$W/mnt" "$N" create <<'EOF'
import sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    with open(f"{d}/f{i}", "wb") as f:
        f.write(b"x" * 100)
EOF
sleep 3  # the mount hands freed memory back every 2 s
echo "after $N creates:  $(mib VmRSS)"
python3 - "$W/mnt" "$N" <<'EOF'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    os.unlink(f"{d}/f{i}")
EOF
sleep 3
echo "after deleting them:    $(mib VmRSS)"
echo "peak (VmHWM):           $(mib VmHWM)"
