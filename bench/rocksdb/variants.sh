# RocksDB configurations ("variants") of bench/compare-rocksdb, sourced by it; each flag
# with the reason and the source it comes from. docs/benchmarks.md ("Fair comparison")
# repeats this list for readers. Sources, by the tag used below:
#   [options.h] [advanced_options.h] [table.h]  RocksDB 11.8.1's option documentation, in
#       the source the build script compiles (include/rocksdb/*.h of crates.io's
#       librocksdb-sys 0.19.0+11.8.1)
#   [point-lookup]  ColumnFamilyOptions::OptimizeForPointLookup (options/options.cc):
#       RocksDB's own preset for Put/Get-only use
#   [benchmark.sh]  tools/benchmark.sh: the harness RocksDB's maintainers run for their
#       published benchmarks (its O_DIRECT, cache and BlobDB settings)
#   [wiki-hash]    https://github.com/facebook/rocksdb/wiki/Data-Block-Hash-Index
#   [wiki-part]    https://github.com/facebook/rocksdb/wiki/Partitioned-Index-Filters
#   [wiki-blob]    https://github.com/facebook/rocksdb/wiki/BlobDB and
#                  https://rocksdb.org/blog/2021/05/26/integrated-blob-db.html
#   [wiki-dio]     https://github.com/facebook/rocksdb/wiki/Direct-IO
#   [multiget]     facebook/rocksdb pull requests 5881 (MultiRead over io_uring), 6815
#                  (MultiGet reads a file's blocks with one MultiRead under direct I/O),
#                  10535 (reading several levels at once: coroutine MultiGet only)

# What every RocksDB run gets, the old comparison's flags (and issue 14's "new user"):
#   --wal_dir on the fast tier     the WAL where masse's write pad is [options.h wal_dir]
#   --sync=1                       acknowledge a write once durable, as masse does
#   --use_direct_reads, --use_direct_io_for_flush_and_compaction
#                                  no page cache on either side: RocksDB's block cache is
#                                  its read cache [wiki-dio] [options.h]
#   --compression_type=none        masse stores bytes as given; db_bench's values are
#                                  synthetic, half-compressible data (--compression_ratio
#                                  0.5): compressing them would measure the generator
#   --bloom_bits=10                [benchmark.sh] [point-lookup]
#   --cache_index_and_filter_blocks=true
#                                  index and filters live in (and are charged to) the block
#                                  cache, so the DRAM budget holds [table.h] [benchmark.sh]
#   --cache_size=<masse's index DRAM after its fill>   the same DRAM budget
common_flags() {  # db wal_dir cache_bytes
    echo "--db=$1 --wal_dir=$2 --cache_size=$3 --sync=1 --use_direct_reads=true \
--use_direct_io_for_flush_and_compaction=true --compression_type=none --bloom_bits=10 \
--cache_index_and_filter_blocks=true --statistics --histogram"
}

# tuned: release + what the sources above recommend for point lookups on this machine.
#   --use_data_block_hash_index=true --data_block_hash_table_util_ratio=0.75
#       a hash index in each data block: Get() skips the binary search [point-lookup]
#       [wiki-hash: 21.8 % less CPU in DataBlockIter::Seek, +10 % throughput cached]
#   --memtable_whole_key_filtering=true --memtable_bloom_size_ratio=0.02
#       a bloom filter over the memtable's keys: a Get of a key not in the memtable skips
#       the skiplist search [point-lookup] [advanced_options.h]
#   --pin_l0_filter_and_index_blocks_in_cache=true
#       L0's index/filter blocks cannot be evicted (every Get probes every L0 file) [table.h]
#   --prepopulate_block_cache=1
#       flushed blocks enter the block cache (direct I/O leaves no page cache to find them
#       in) [table.h kFlushOnly] [benchmark.sh: with O_DIRECT]
#   --level_compaction_dynamic_level_bytes=true
#       the library's default since 8.x (db_bench's own default is still false): fewer
#       levels, less space and read amplification [advanced_options.h]
#   --max_background_jobs=<CPUs>
#       IncreaseParallelism(): "Good value for total_threads is the number of cores"
#       [options.h]
#   --write_buffer_size=64 MiB --max_write_buffer_number=4
#       RocksDB's default memtable size, two more memtables so writers do not stall while
#       one flush runs on this 2-core machine; at most 256 MiB of memtables, outside the
#       block cache as before (peak RSS shows it)
#   HyperClockCache (db_bench 11.8's default --cache_type), with index/filter blocks at
#   high priority (table.h's default), is kept.
tuned_flags() {
    echo "--use_data_block_hash_index=true --data_block_hash_table_util_ratio=0.75 \
--memtable_whole_key_filtering=true --memtable_bloom_size_ratio=0.02 \
--pin_l0_filter_and_index_blocks_in_cache=true --prepopulate_block_cache=1 \
--level_compaction_dynamic_level_bytes=true --max_background_jobs=$(nproc) \
--write_buffer_size=67108864 --max_write_buffer_number=4"
}

# partitioned: tuned + partitioned index and filters, for when they outgrow the cache
# (10^8 keys): only the top-level index stays pinned, partitions are cached like data
# blocks [wiki-part] [table.h partition_filters, pin_top_level_index_and_filter].
partitioned_flags() {
    echo "--partition_index_and_filters=true --pin_top_level_index_and_filter=true"
}

# blob: tuned + integrated BlobDB, RocksDB's answer to large-value write amplification:
# values go to blob files once, only a small reference goes through compactions
# [wiki-blob]. Settings of [benchmark.sh]'s blob mode, except min_blob_size:
#   --enable_blob_files=true --min_blob_size=1024   every 4 KiB value of Table 5 is
#       separated; values under 1 KiB would stay in the LSM [advanced_options.h]
#   --blob_file_size=268435456 --blob_compression_type=none
#   --enable_blob_garbage_collection=true --blob_garbage_collection_age_cutoff=0.25
#       overwritten values' space is reclaimed by relocating the oldest quarter of the
#       blob files during compactions [advanced_options.h] [benchmark.sh]
#   --use_blob_cache=true --use_shared_block_and_blob_cache=true
#       blobs cached in the same block cache: the DRAM budget stays [benchmark.sh]
blob_flags() {
    echo "--enable_blob_files=true --min_blob_size=1024 --blob_file_size=268435456 \
--blob_compression_type=none --enable_blob_garbage_collection=true \
--blob_garbage_collection_age_cutoff=0.25 --use_blob_cache=true --use_shared_block_and_blob_cache=true"
}

# tiered: tuned + the fast tier used the way masse uses it, within masse's fast-tier
# size (its pad + checkpoint slots): the WAL (--wal_dir, as every variant) and the upper
# levels' SST files there, the rest on the capacity tier.
#   --db_paths=<fast dir>:<budget - 256 MiB - 16 MiB>,<capacity dir>:0
#       [options.h db_paths]: flushes (L0) go to the first path, and a level goes to the
#       first path whose remaining target size holds it, L0 counted as L1's size
#       (LevelCompactionBuilder::GetPathId); db_bench has no flag for it, so this variant
#       runs db_bench_paths (bench/rocksdb/db_bench_paths.cc: db_bench + --db_paths)
#   --max_total_wal_size=268435456   the WAL's share of the budget: older memtables are
#       flushed when the WALs exceed it [options.h]
#   --level_compaction_dynamic_level_bytes=false   RocksDB ignores it with several paths
#       (advanced_options.h / GetPathId); said explicitly so OPTIONS shows what runs
#   Blob files always go to the first path (db/blob/blob_file_builder.cc), so BlobDB and
#   this placement do not combine: tiered keeps values in SST files.
tiered_flags() {  # db fast_sst_dir fast_budget_bytes
    local wal=268435456 sst
    sst=$(( $3 - wal - (16 << 20) ))
    [ "$sst" -gt 0 ] || { echo "tiered: a fast tier of $3 bytes leaves no room for SST files" >&2; return 1; }
    echo "--db_paths=$2:$sst,$1:0 --max_total_wal_size=$wal --level_compaction_dynamic_level_bytes=false"
}

variant_flags() {  # variant db wal_dir fast_sst_dir fast_budget
    case "$1" in
        debian-7.8|release) echo "" ;;
        tuned) tuned_flags ;;
        partitioned) echo "$(tuned_flags) $(partitioned_flags)" ;;
        blob) echo "$(tuned_flags) $(blob_flags)" ;;
        tiered) echo "$(tuned_flags) $(tiered_flags "$2" "$4" "$5")" ;;
        *) echo "unknown RocksDB variant $1 (release, tuned, partitioned, blob, tiered, debian-7.8)" >&2; return 1 ;;
    esac
}

variant_binary() {
    case "$1" in
        debian-7.8) echo /usr/bin/db_bench ;;
        tiered) echo "$WORK/db_bench_paths" ;;
        *) echo "$WORK/db_bench" ;;
    esac
}

# multireadrandom: the batched MultiGet API (--multiread_batched: the one that reads a
# file's blocks with one MultiRead [multiget]); --async_io only when asked, since without
# folly coroutines (USE_COROUTINES, which no registry here provides) it changes nothing
# for MultiGet in 11.8.1 (db/version_set.cc reads levels one after another).
multiread_flags() {  # bench variant
    [ "$1" = multireadrandom ] || return 0
    echo "--multiread_batched=true --async_io=${ASYNC:-false}"
}

# The options a variant must show in the OPTIONS file RocksDB writes at open (key=value
# as RocksDB prints them), or in db_bench_paths' report of the paths in effect.
expected_options() {  # variant
    local base="use_direct_reads=true use_direct_io_for_flush_and_compaction=true \
compression=kNoCompression cache_index_and_filter_blocks=true"
    local tuned="data_block_index_type=kDataBlockBinaryAndHash data_block_hash_table_util_ratio=0.750000 \
memtable_whole_key_filtering=true memtable_prefix_bloom_size_ratio=0.020000 \
pin_l0_filter_and_index_blocks_in_cache=true prepopulate_block_cache=kFlushOnly \
write_buffer_size=67108864 max_write_buffer_number=4 max_background_jobs=$(nproc)"
    case "$1" in
        debian-7.8|release) echo "$base" ;;
        tuned) echo "$base $tuned level_compaction_dynamic_level_bytes=true" ;;
        partitioned) echo "$base $tuned level_compaction_dynamic_level_bytes=true index_type=kTwoLevelIndexSearch \
partition_filters=true pin_top_level_index_and_filter=true" ;;
        blob) echo "$base $tuned level_compaction_dynamic_level_bytes=true enable_blob_files=true min_blob_size=1024 \
blob_file_size=268435456 enable_blob_garbage_collection=true blob_garbage_collection_age_cutoff=0.250000" ;;
        tiered) echo "$base $tuned level_compaction_dynamic_level_bytes=false max_total_wal_size=268435456" ;;
    esac
}

# Check a fill's OPTIONS file (and, for tiered, where its SST files went); print what was
# verified, return non-zero when a flag did not take effect.
check_options() {  # variant db fast_sst_dir fill_stdout
    local opts missing=0 kv
    opts=$(ls -t "$2"/OPTIONS-* 2>/dev/null | head -1)
    [ -n "$opts" ] || { echo "no OPTIONS file in $2"; return 1; }
    for kv in $(expected_options "$1"); do
        if grep -q -x -E "\s*${kv//./\\.}\s*" "$opts"; then echo "$kv"; else echo "MISSING: $kv"; missing=1; fi
    done
    grep -q -E '^\s*filter_policy=bloomfilter:10' "$opts" && echo "filter_policy=bloomfilter:10" \
        || { echo "MISSING: filter_policy=bloomfilter:10"; missing=1; }
    if [ "$1" = tiered ]; then
        grep -q "db_paths in effect: $3 " "$4" && grep "db_paths in effect" "$4" | sed 's/^/  /' \
            || { echo "MISSING: db_paths in effect ($3)"; missing=1; }
        echo "SST files on the fast tier after the fill: $(find "$3" -name '*.sst' | wc -l) ($(du -sb "$3" | cut -f1) bytes); on the capacity tier: $(find "$2" -name '*.sst' | wc -l) ($(find "$2" -name '*.sst' -printf '%s\n' | awk '{s+=$1} END{printf "%.0f\n", s}') bytes)"
    fi
    return $missing
}
