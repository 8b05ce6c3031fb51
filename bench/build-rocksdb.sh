#!/usr/bin/env bash
# Build a release RocksDB db_bench (and ldb) from the RocksDB source shipped inside the
# crates.io crate librocksdb-sys, reproducibly, and cache it outside the git tree.
#
#   bench/build-rocksdb.sh                      # build once (~25 min on 2 cores), then reuse
#   bench/build-rocksdb.sh --print-path         # the cached db_bench's path on stdout (builds if missing)
#   bench/build-rocksdb.sh --plugin DIR         # also compile the RocksDB plugin in DIR (repeatable)
#   bench/build-rocksdb.sh --check              # only verify a cached binary (version, NDEBUG)
#   bench/build-rocksdb.sh --quick              # -O0 build for tests only (CI): never benchmark it
#
# Besides db_bench and ldb it links db_bench_paths: db_bench's own objects with the main()
# of bench/rocksdb/db_bench_paths.cc, which adds --db_paths (DBOptions::db_paths, no
# db_bench flag sets it) for the tiered variant of bench/compare-rocksdb.
#
# Options:
#   --crate-version V  librocksdb-sys version (default 0.19.0+11.8.1 = RocksDB 11.8.1)
#   --cache DIR        cache root (default ${XDG_CACHE_HOME:-~/.cache}/masse)
#   --plugin DIR       a RocksDB plugin directory (PLUGINS.md: DIR/CMakeLists.txt sets
#                      <name>_SOURCES, <name>_FUNC, ...; <name> = DIR's basename). It is
#                      linked into the source tree's plugin/ and compiled into librocksdb.
#   --targets "T..."   ninja targets (default "db_bench ldb")
#   --jobs N           parallel compile jobs (default: number of CPUs)
#   --force            rebuild even if the cached binary exists
#   --quick            compile at -O0 (still -DNDEBUG), its own cache key: g++ spends most of
#                      RocksDB's build parsing headers, so this saves about a third of the
#                      compile, not more; the binary is ~10x slower and only fit for
#                      functional tests (the plugin tests in CI)
#
# Build choices (each is part of the cache key, so a change gets its own binary):
#   CMAKE_BUILD_TYPE=Release  -O3 -DNDEBUG: no assertions (the point of the exercise)
#   PORTABLE=haswell          RocksDB's INSTALL.md: "a reasonable compromise ... compatible
#                             with most processors made since roughly 2013" -- reproducible
#                             across machines, yet keeps SSE4.2 + PCLMUL (hardware CRC32C on
#                             every block read) and AVX2; -march=native would tie the binary
#                             to this CPU
#   WITH_GFLAGS=ON            Debian's libgflags-dev (db_bench's flag parser)
#   WITH_LIBURING=ON          io_uring for MultiRead/MultiGet (batched reads) and async_io
#   WITH_JEMALLOC=ON          RocksDB's production allocator (Makefile builds pick it up when
#                             present; the wiki's memory-usage page recommends it)
#   WITH_SNAPPY/LZ4/ZSTD=ON   complete binary a user would deploy; the benchmarks still run
#                             --compression_type=none (masse stores bytes as given, and
#                             db_bench's values are synthetic half-compressible data)
#   WITH_TESTS=OFF, ROCKSDB_BUILD_SHARED=OFF, FAIL_ON_WARNINGS=OFF, WITH_TRACE_TOOLS=OFF
#                             no tests; one static library (a shared one would compile every
#                             file a second time); GCC 12 warnings must not stop the build
#
# Layout under the cache root:
#   rocksdb-<rocksdb version>/src             the crate's rocksdb/ directory (shared)
#   rocksdb-<rocksdb version>/build-<key>     CMake/ninja build dir (reused: a plugin or a
#                                             source edit recompiles only what changed)
#   rocksdb-<rocksdb version>/bin-<key>[-p<plugins hash>]/{db_bench,ldb,db_bench_paths,BUILD-INFO.txt}
# The last line of stdout is the db_bench path; the log goes to stderr and build.log.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)

CRATE_VERSION=0.19.0+11.8.1
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/masse
PLUGINS=()
TARGETS="db_bench ldb"
JOBS=$(nproc)
FORCE=0
PRINT_PATH=0
CHECK_ONLY=0
QUICK=0
while [ $# -gt 0 ]; do
    case "$1" in
        --crate-version) CRATE_VERSION=$2; shift ;;
        --cache) CACHE=$2; shift ;;
        --plugin) PLUGINS+=("$(cd "$2" && pwd)"); shift ;;
        --targets) TARGETS=$2; shift ;;
        --jobs) JOBS=$2; shift ;;
        --force) FORCE=1 ;;
        --print-path) PRINT_PATH=1 ;;
        --check) CHECK_ONLY=1 ;;
        --quick) QUICK=1 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "build-rocksdb: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
ROCKSDB_VERSION=${CRATE_VERSION#*+}
ROOT=$CACHE/rocksdb-$ROCKSDB_VERSION
SRC=$ROOT/src
say() { echo "build-rocksdb: $*" >&2; }

CMAKE_OPTS=(
    -DCMAKE_BUILD_TYPE=Release -DPORTABLE=haswell
    -DWITH_GFLAGS=ON -DWITH_LIBURING=ON -DWITH_JEMALLOC=ON
    -DWITH_SNAPPY=ON -DWITH_LZ4=ON -DWITH_ZSTD=ON -DWITH_ZLIB=OFF -DWITH_BZ2=OFF
    -DWITH_TESTS=OFF -DWITH_ALL_TESTS=OFF -DWITH_BENCHMARK_TOOLS=ON -DWITH_CORE_TOOLS=ON
    -DWITH_TOOLS=OFF -DWITH_TRACE_TOOLS=OFF -DWITH_EXAMPLES=OFF
    -DROCKSDB_BUILD_SHARED=OFF -DFAIL_ON_WARNINGS=OFF
)
FLAVOR=release
if [ "$QUICK" = 1 ]; then
    CMAKE_OPTS+=("-DCMAKE_CXX_FLAGS_RELEASE=-O0 -DNDEBUG" "-DCMAKE_C_FLAGS_RELEASE=-O0 -DNDEBUG")
    FLAVOR=quick
fi
KEY=$FLAVOR-haswell-$(printf '%s\n' "${CMAKE_OPTS[@]}" | sha256sum | cut -c1-10)
BUILD=$ROOT/build-$KEY
BIN=$ROOT/bin-$KEY
PLUGIN_NAMES=""
if [ ${#PLUGINS[@]} -gt 0 ]; then
    for P in "${PLUGINS[@]}"; do PLUGIN_NAMES="$PLUGIN_NAMES $(basename "$P")"; done
    PLUGIN_NAMES=${PLUGIN_NAMES# }
    # The binary's key names the plugins and their content (a plugin edit is a new binary).
    PHASH=$(for P in "${PLUGINS[@]}"; do (cd "$P" && find . -type f -print0 | sort -z | xargs -0 sha256sum); done | sha256sum | cut -c1-8)
    BIN=$BIN-p$PHASH
fi

# Debian packages the build needs: installed only when missing.
need_debs() {
    local missing=()
    for p in cmake ninja-build g++ libgflags-dev liburing-dev libjemalloc-dev libsnappy-dev liblz4-dev libzstd-dev; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing ${missing[*]}"
    local sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
    $sudo apt-get install -y "${missing[@]}" >&2 || { $sudo apt-get update >&2 && $sudo apt-get install -y "${missing[@]}" >&2; }
}

# The crate from crates.io through cargo (the only network there is): a throwaway manifest
# pins it, `cargo fetch` downloads and checksums it, and its .crate archive is unpacked here.
fetch_source() {
    [ -f "$SRC/CMakeLists.txt" ] && return 0
    local tmp crate
    tmp=$(mktemp -d)
    mkdir -p "$tmp/src" && : > "$tmp/src/lib.rs"
    cat > "$tmp/Cargo.toml" <<EOF
[package]
name = "fetch-rocksdb-source"
version = "0.0.0"
edition = "2021"
[dependencies]
librocksdb-sys = { version = "=$CRATE_VERSION", default-features = false }
EOF
    say "fetching librocksdb-sys $CRATE_VERSION from crates.io"
    (cd "$tmp" && cargo fetch --quiet) >&2
    crate=$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/"librocksdb-sys-$CRATE_VERSION.crate" | head -1)
    [ -f "$crate" ] || { say "cargo fetch did not leave librocksdb-sys-$CRATE_VERSION.crate"; exit 1; }
    mkdir -p "$ROOT"
    rm -rf "$ROOT/src.tmp" && mkdir "$ROOT/src.tmp"
    tar -xzf "$crate" -C "$ROOT/src.tmp" --strip-components=2 "librocksdb-sys-$CRATE_VERSION/rocksdb"
    grep "librocksdb-sys" -A3 "$tmp/Cargo.lock" | grep checksum > "$ROOT/src.tmp/CRATE-CHECKSUM" || true
    mv "$ROOT/src.tmp" "$SRC"
    rm -rf "$tmp"
    local v
    v=$(awk '/define ROCKSDB_(MAJOR|MINOR|PATCH)/{printf "%s%s", s, $3; s="."}' "$SRC/include/rocksdb/version.h")
    [ "$v" = "$ROCKSDB_VERSION" ] || { say "the crate holds RocksDB $v, not $ROCKSDB_VERSION"; exit 1; }
}

# Link each plugin directory into src/plugin/<name> (a link, so a plugin edit needs no copy).
link_plugins() {
    [ ${#PLUGINS[@]} -eq 0 ] && return 0
    for P in "${PLUGINS[@]}"; do
        local name dest
        name=$(basename "$P"); dest=$SRC/plugin/$name
        [ -f "$P/CMakeLists.txt" ] || { say "plugin $P has no CMakeLists.txt (see $SRC/PLUGINS.md)"; exit 1; }
        # A link from another checkout of the same plugin is re-pointed (the build
        # dir is shared by every checkout on the machine); a real directory is not ours.
        if [ -e "$dest" ] && [ ! -L "$dest" ]; then
            say "$dest already exists and is not a link to a plugin checkout"; exit 1
        fi
        if [ -L "$dest" ] && [ "$(readlink -f "$dest")" != "$P" ]; then
            say "re-pointing $dest from $(readlink -f "$dest") to $P"
        fi
        ln -sfn "$P" "$dest"
    done
}

build() {
    mkdir -p "$BUILD"
    say "configuring $BUILD (plugins: ${PLUGIN_NAMES:-none})"
    (cd "$BUILD" && cmake -G Ninja "${CMAKE_OPTS[@]}" "-DROCKSDB_PLUGINS=$PLUGIN_NAMES" "$SRC") >> "$BUILD/build.log" 2>&1 \
        || { tail -30 "$BUILD/build.log" >&2; say "cmake failed: $BUILD/build.log"; exit 1; }
    say "compiling $TARGETS with $JOBS jobs (log: $BUILD/build.log)"
    local t0=$SECONDS
    # shellcheck disable=SC2086
    (cd "$BUILD" && nice -n 5 ninja -j "$JOBS" $TARGETS) >> "$BUILD/build.log" 2>&1 \
        || { tail -30 "$BUILD/build.log" >&2; say "build failed: $BUILD/build.log"; exit 1; }
    local took=$((SECONDS - t0))
    mkdir -p "$BIN.tmp"
    local t
    for t in $TARGETS; do  # db_bench sits at the top of the build dir, ldb under tools/
        if [ -f "$BUILD/$t" ]; then cp "$BUILD/$t" "$BIN.tmp/"; else cp "$BUILD/tools/$t" "$BIN.tmp/"; fi
    done
    build_paths_tool "$BIN.tmp"
    {
        echo "rocksdb: $ROCKSDB_VERSION (crates.io librocksdb-sys $CRATE_VERSION, $(cat "$SRC/CRATE-CHECKSUM" 2>/dev/null | tr -d ' '))"
        echo "built: $(date -u '+%Y-%m-%d %H:%M UTC'), ninja ran ${took} s in this invocation (an earlier, interrupted one may have compiled part of it) with $JOBS jobs on $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
        echo "compiler: $(g++ --version | head -1)"
        echo "cmake: ${CMAKE_OPTS[*]} -DROCKSDB_PLUGINS=$PLUGIN_NAMES"
        echo "plugins: ${PLUGIN_NAMES:-none}"
        echo "flags: $(cd "$BUILD" && ninja -t commands CMakeFiles/db_bench.dir/tools/db_bench.cc.o | tail -1 | grep -o -E -- '-march=[^ ]+|-O[0-9s]|-DNDEBUG|-DROCKSDB_(IOURING_PRESENT|JEMALLOC)|-D(SNAPPY|LZ4|ZSTD)\b' | tr '\n' ' ')"
    } > "$BIN.tmp/BUILD-INFO.txt"
    rm -rf "$BIN" && mv "$BIN.tmp" "$BIN"
    say "built in $((took / 60)) min $((took % 60)) s"
}

# db_bench_paths: db_bench's compile and link commands (from ninja), with our main().
build_paths_tool() {
    local dir=$1 src=$HERE/rocksdb/db_bench_paths.cc
    local main_o=CMakeFiles/db_bench.dir/tools/db_bench.cc.o cc ld
    cc=$(cd "$BUILD" && ninja -t commands "$main_o" | tail -1)
    ld=$(cd "$BUILD" && ninja -t commands db_bench | tail -1)
    cc=${cc//"$SRC/tools/db_bench.cc"/"$src"}
    cc=${cc//"$main_o"/db_bench_paths.o}
    ld=${ld//"$main_o"/db_bench_paths.o}
    ld=${ld//"-o db_bench "/"-o db_bench_paths "}
    (cd "$BUILD" && bash -c "$cc" && bash -c "$ld") >> "$BUILD/build.log" 2>&1 \
        || { tail -20 "$BUILD/build.log" >&2; say "db_bench_paths failed: $BUILD/build.log"; exit 1; }
    cp "$BUILD/db_bench_paths" "$dir/"
    sha256sum "$src" | cut -c1-16 > "$dir/db_bench_paths.src-sha"
}

# Proof of a release build: db_bench prints "WARNING: Assertions are enabled" (and
# "Optimization is disabled") in every run's header when built without NDEBUG / -O.
check() {
    local db out
    [ -x "$BIN/db_bench" ] || { say "no binary at $BIN/db_bench"; return 1; }
    db=$(mktemp -d)
    out=$("$BIN/db_bench" --benchmarks=fillseq --num=1000 --db="$db/db" --compression_type=none 2>&1) \
        || { rm -rf "$db"; say "db_bench failed to run: $out"; return 1; }
    rm -rf "$db"
    local bad='Assertions are enabled|Optimization is disabled'
    [ "$QUICK" = 1 ] && bad='Assertions are enabled'
    if grep -q -E "$bad" <<< "$out"; then
        say "NOT a release build: $(grep -E 'WARNING' <<< "$out")"; return 1
    fi
    say "$("$BIN/db_bench" --version 2>&1 | head -1); release build: the run header has no 'Assertions are enabled' warning (NDEBUG)"
    grep -E '^(RocksDB|Date|CPU|Keys|Values):' <<< "$out" | sed 's/^/build-rocksdb:   /' >&2 || true
    sed 's/^/build-rocksdb:   /' "$BIN/BUILD-INFO.txt" >&2
}

if [ "$CHECK_ONLY" = 1 ]; then check; echo "$BIN/db_bench"; exit 0; fi
if [ "$FORCE" = 1 ] || [ ! -x "$BIN/db_bench" ]; then
    need_debs
    fetch_source
    link_plugins
    build
fi
# bench/rocksdb/db_bench_paths.cc changed since the cached binary: relink it (seconds).
if [ "$(cat "$BIN/db_bench_paths.src-sha" 2>/dev/null)" != "$(sha256sum "$HERE/rocksdb/db_bench_paths.cc" | cut -c1-16)" ]; then
    say "relinking db_bench_paths (bench/rocksdb/db_bench_paths.cc changed)"
    build_paths_tool "$BIN"
fi
if [ "$PRINT_PATH" = 0 ] || [ "$FORCE" = 1 ]; then check; fi
echo "$BIN/db_bench"
