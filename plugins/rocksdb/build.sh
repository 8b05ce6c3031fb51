#!/usr/bin/env bash
# Build RocksDB 11.8.1's db_bench and ldb with the masse FileSystem plugin
# compiled in (docs/rocksdb-plugin.md): the one command.
#
#   plugins/rocksdb/build.sh                 # build (first time ~25 min on a quiet 2-core machine), print db_bench's path
#   plugins/rocksdb/build.sh --no-full-build # only reuse or relink a cached build; exit 3 if RocksDB itself is not built yet
#   plugins/rocksdb/build.sh --no-cargo      # use target/release/libmasse_ffi.a as it is (a caller inside cargo)
#   plugins/rocksdb/build.sh --jobs N        # compile jobs (default: number of CPUs)
#   plugins/rocksdb/build.sh --quick         # an -O0 RocksDB for the tests only (CI; see bench/build-rocksdb.sh)
#
# Steps: cargo builds libmasse_ffi.a (the C API, linked statically into the
# plugin); bench/build-rocksdb.sh --plugin plugins/rocksdb/masse compiles the
# plugin into the cached RocksDB build (~/.cache/masse/rocksdb-11.8.1/, shared
# with bench/compare-rocksdb: with RocksDB built once, adding the plugin compiles
# two files and relinks, under a minute). The binary is relinked whenever
# libmasse_ffi.a changed since it was built (its sha256 is kept beside it).
# The last line of stdout is the db_bench path; ldb is beside it.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
FULL=1
CARGO=1
JOBS=$(nproc)
QUICK=()
while [ $# -gt 0 ]; do
    case "$1" in
        --no-full-build) FULL=0 ;;
        --no-cargo) CARGO=0 ;;
        --jobs) JOBS=$2; shift ;;
        --quick) QUICK=(--quick) ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "build.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
say() { echo "rocksdb-plugin: $*" >&2; }

if [ "$CARGO" = 1 ]; then
    (cd "$REPO" && cargo build --release -q -p masse-ffi) >&2
fi
LIB=$REPO/target/release/libmasse_ffi.a
[ -f "$LIB" ] || { say "$LIB missing (cargo build --release -p masse-ffi)"; exit 1; }
LIBSHA=$(sha256sum "$LIB" | cut -c1-16)

CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/masse/rocksdb-11.8.1
if [ "$FULL" = 0 ] && ! ls "$CACHE"/build-*/librocksdb.a > /dev/null 2>&1; then
    say "RocksDB is not built on this machine yet (plugins/rocksdb/build.sh builds it, ~25 min)"
    exit 3
fi
# The cached binary's path, without building: its key holds the plugin's sources.
BIN=$("$REPO/bench/build-rocksdb.sh" "${QUICK[@]}" --plugin "$HERE/masse" --check 2>/dev/null | tail -1 || true)
FORCE=()
if [ -x "$BIN" ] && [ "$(cat "$(dirname "$BIN")/masse-ffi.sha" 2>/dev/null)" != "$LIBSHA" ]; then
    say "libmasse_ffi.a changed since $BIN was linked: relinking"
    FORCE=(--force)
fi
BIN=$(nice -n 10 "$REPO/bench/build-rocksdb.sh" "${QUICK[@]}" --plugin "$HERE/masse" --jobs "$JOBS" "${FORCE[@]}" | tail -1)
echo "$LIBSHA" > "$(dirname "$BIN")/masse-ffi.sha"
echo "$BIN"
