//! Counters and latency histograms, readable at any time through [`crate::Db::stats`].

use crate::device::IoSnapshot;
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Operations that get a latency histogram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// put
    Put,
    /// get
    Get,
    /// delete
    Delete,
    /// write batch
    Batch,
}

const OPS: [Op; 4] = [Op::Put, Op::Get, Op::Delete, Op::Batch];

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::Get => "get",
            Op::Delete => "delete",
            Op::Batch => "batch",
        }
    }
}

/// Live counters, updated with relaxed atomics.
#[derive(Default)]
pub(crate) struct Counters {
    pub puts: AtomicU64,
    pub gets: AtomicU64,
    pub get_hits: AtomicU64,
    pub deletes: AtomicU64,
    pub batches: AtomicU64,
    pub user_bytes: AtomicU64,
    pub read_bytes: AtomicU64,
    pub reads_from_dram: AtomicU64,
    pub reads_from_device: AtomicU64,
    pub read_retries: AtomicU64,
    pub commit_groups: AtomicU64,
    pub commit_records: AtomicU64,
    pub pad_bytes: AtomicU64,
    pub segments_written: AtomicU64,
    pub segment_bytes: AtomicU64,
    pub partial_flushes: AtomicU64,
    pub inplace_writes: AtomicU64,
    pub inplace_bytes: AtomicU64,
    pub forced_seals: AtomicU64,
    pub stream_diverted: AtomicU64,
    pub cold_writes: AtomicU64,
    pub absorbed_writes: AtomicU64,
    pub gc_runs: AtomicU64,
    pub gc_bands_freed: AtomicU64,
    pub gc_bytes_read: AtomicU64,
    pub gc_rest_ns: AtomicU64,
    pub gc_records_moved: AtomicU64,
    pub gc_bytes_moved: AtomicU64,
    pub gc_tombstones_dropped: AtomicU64,
    pub stalls: AtomicU64,
    pub stall_us: AtomicU64,
    pub checkpoints: AtomicU64,
    pub checkpoint_bytes: AtomicU64,
    pub checkpoint_skipped: AtomicU64,
    pub last_checkpoint_us: AtomicU64,
    pub corruptions: AtomicU64,
}

pub(crate) struct Histos {
    h: [Mutex<Histogram<u64>>; 4],
    /// Exact sum of the samples per operation, ns (a Prometheus histogram's `_sum`).
    sum_ns: [AtomicU64; 4],
}

impl Histos {
    pub fn new() -> Histos {
        let mk = || {
            Mutex::new(
                Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("static bounds are valid"),
            )
        };
        Histos {
            h: [mk(), mk(), mk(), mk()],
            sum_ns: Default::default(),
        }
    }
    pub fn record(&self, op: Op, ns: u64) {
        let i = OPS.iter().position(|&o| o == op).unwrap_or(0);
        let _ = self.h[i].lock().record(ns.max(1));
        self.sum_ns[i].fetch_add(ns, Relaxed);
    }
    /// Per operation, the number of samples at or below each bound (ascending, ns).
    pub fn buckets(&self, bounds_ns: &[u64]) -> Vec<LatencyBuckets> {
        OPS.iter()
            .zip(self.h.iter().zip(self.sum_ns.iter()))
            .map(|(op, (h, sum))| {
                let h = h.lock();
                LatencyBuckets {
                    op: op.name(),
                    count: h.len(),
                    sum_ns: read_counter(sum),
                    cumulative: bounds_ns
                        .iter()
                        .map(|&b| h.count_between(0, b.min(h.high())))
                        .collect(),
                }
            })
            .collect()
    }
    pub fn summary(&self) -> Vec<LatencySummary> {
        OPS.iter()
            .zip(self.h.iter())
            .filter_map(|(op, h)| {
                let h = h.lock();
                if h.is_empty() {
                    return None;
                }
                Some(LatencySummary {
                    op: op.name().to_string(),
                    count: h.len(),
                    mean_ns: h.mean() as u64,
                    p50_ns: h.value_at_quantile(0.5),
                    p99_ns: h.value_at_quantile(0.99),
                    p999_ns: h.value_at_quantile(0.999),
                    p9999_ns: h.value_at_quantile(0.9999),
                    max_ns: h.max(),
                })
            })
            .collect()
    }
    pub fn reset(&self) {
        for h in &self.h {
            h.lock().reset();
        }
        for s in &self.sum_ns {
            s.store(0, Relaxed);
        }
    }
}

/// Latency samples of one operation counted at fixed upper bounds: what a
/// Prometheus histogram needs (see [`crate::Db::latency_buckets`]).
#[derive(Clone, Debug, serde::Serialize)]
pub struct LatencyBuckets {
    /// Operation name: "put", "get", "delete" or "batch".
    pub op: &'static str,
    /// Samples.
    pub count: u64,
    /// Sum of the samples, ns.
    pub sum_ns: u64,
    /// Samples at or below each requested bound, in the bounds' order. Counts are at
    /// the histogram's resolution (3 significant digits): a sample within 0.1% of a
    /// bound may fall on either side.
    pub cumulative: Vec<u64>,
}

/// Latency percentiles of one operation type.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LatencySummary {
    /// Operation name.
    pub op: String,
    /// Samples.
    pub count: u64,
    /// Mean, ns.
    pub mean_ns: u64,
    /// Median, ns.
    pub p50_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// 99.9th percentile, ns.
    pub p999_ns: u64,
    /// 99.99th percentile, ns.
    pub p9999_ns: u64,
    /// Maximum, ns.
    pub max_ns: u64,
}

/// Per-device figures.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DeviceStats {
    /// Path or name.
    pub path: String,
    /// "fast" or "capacity".
    pub role: &'static str,
    /// Media class.
    pub media: &'static str,
    /// "io_uring", "pread" or "memory".
    pub backend: &'static str,
    /// False when O_DIRECT could not be used (data goes through the page cache).
    pub direct_io: bool,
    /// Bytes of the device in use by the pool.
    pub capacity: u64,
    /// I/O counters.
    pub io: IoSnapshot,
}

/// A snapshot of everything the engine counts.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Stats {
    /// Pool configuration family.
    pub mode: &'static str,
    /// On-disk format version of the pool (docs/format.md §1).
    pub format_version: u32,
    /// User puts (including records inside batches).
    pub puts: u64,
    /// User gets.
    pub gets: u64,
    /// Gets that found the key.
    pub get_hits: u64,
    /// User deletes.
    pub deletes: u64,
    /// Write batches.
    pub batches: u64,
    /// Key + value bytes written by users.
    pub user_bytes_written: u64,
    /// Value bytes returned to users.
    pub user_bytes_read: u64,
    /// Gets served from a DRAM segment buffer.
    pub reads_from_dram: u64,
    /// Gets served by one device read.
    pub reads_from_device: u64,
    /// Gets retried because GC moved the record under them.
    pub read_retries: u64,
    /// Group commits and the records in them.
    pub commit_groups: u64,
    /// Records committed (user + GC).
    pub commit_records: u64,
    /// Bytes written to the fast-tier pad.
    pub pad_bytes_written: u64,
    /// Segments written to the capacity tier.
    pub segments_written: u64,
    /// Bytes of segments written to the capacity tier.
    pub segment_bytes_written: u64,
    /// Partial-segment flushes (capacity-only / scm-only group commits).
    pub partial_flushes: u64,
    /// Updates written over the old record in place (scm-only mode).
    pub inplace_writes: u64,
    /// Bytes written to the capacity tier by in-place updates (whole 4 KiB pages).
    pub inplace_bytes: u64,
    /// Segments sealed before full because the pad ran out of room (or, with
    /// separate GC writes, the GC stream's segment held the oldest pad batch
    /// of a half-full pad).
    pub forced_seals: u64,
    /// Whether GC moves fill an open band of their own (`Options::gc_separate`
    /// on a tiered pool).
    pub gc_separate: bool,
    /// Separate GC writes (`Options::gc_separate`): records placed in the
    /// other stream's open band than their own, to land after their key's
    /// newest copy (design.md §9.5).
    pub stream_diverted: u64,
    /// Separate GC writes with `Options::cold_user_writes`: user writes
    /// placed in the GC moves' band because their key's newest copy was old
    /// (design.md §9.5).
    pub cold_writes: u64,
    /// Tiered pools with `Options::absorb_overwrites`: puts written over
    /// their key's record of the same length in a segment still in DRAM
    /// (the open one or the held one), rather than appended (design.md §4.10). They reach the pad, not
    /// the capacity tier.
    pub absorbed_writes: u64,
    /// Capacity-tier bytes written ÷ user bytes written.
    pub host_write_amplification: f64,
    /// GC passes that freed a band.
    pub gc_runs: u64,
    /// Bands freed by GC.
    pub gc_bands_freed: u64,
    /// Bytes GC read from the capacity tier.
    pub gc_bytes_read: u64,
    /// Time background GC rested between segments (`Options::gc_duty`), µs.
    pub gc_rest_us: u64,
    /// Records GC relocated.
    pub gc_records_moved: u64,
    /// Bytes GC relocated.
    pub gc_bytes_moved: u64,
    /// Tombstones GC proved unneeded and dropped.
    pub gc_tombstones_dropped: u64,
    /// Writes that waited for free space, and the total wait.
    pub write_stalls: u64,
    /// Total stall time, µs.
    pub write_stall_us: u64,
    /// Bands in the pool.
    pub bands_total: u32,
    /// Free bands.
    pub bands_free: u32,
    /// Band size.
    pub band_size: u64,
    /// Segment size.
    pub segment_size: u32,
    /// Bytes of live records in the capacity tier.
    pub live_bytes: u64,
    /// Pad bytes in use (written, not yet reclaimable).
    pub pad_used: u64,
    /// Pad size.
    pub pad_size: u64,
    /// Index entries (live keys + tombstones).
    pub index_entries: u64,
    /// DRAM of the index, bytes.
    pub index_bytes: u64,
    /// Index DRAM per entry.
    pub index_bytes_per_key: f64,
    /// Checkpoints written.
    pub checkpoints: u64,
    /// Bytes of checkpoints written.
    pub checkpoint_bytes: u64,
    /// Checkpoints skipped because the index did not fit the checkpoint slot.
    pub checkpoints_skipped: u64,
    /// Duration of the last checkpoint, µs.
    pub last_checkpoint_us: u64,
    /// How the last open recovered: "checkpoint" or "scan", followed by
    /// " (clean shutdown)" when the pool had been closed cleanly.
    pub recovery_source: String,
    /// Duration of the last open's recovery, µs.
    pub recovery_us: u64,
    /// Segments replayed from the capacity tier at the last open.
    pub recovery_segments_replayed: u64,
    /// Pad records replayed (placed again) at the last open.
    pub recovery_pad_records: u64,
    /// Pad records the last open did not place again: overwritten later on
    /// the pad, or already the pool's state on the capacity tier.
    pub recovery_pad_skipped: u64,
    /// Problems recovery found and worked around (a damaged checkpoint, lost records).
    pub recovery_warnings: Vec<String>,
    /// What recovery found that an ordinary crash leaves behind (a write torn at
    /// the crash frontier, a batch cut short) or damage that cost nothing.
    pub recovery_notes: Vec<String>,
    /// Checksum failures seen (on reads, GC or recovery).
    pub corruptions: u64,
    /// The pool's damage record (format.md §4): damage events found since an
    /// operator last cleared it, in this run or earlier ones; 0 = none. While
    /// it is set, a key whose newest copy was lost reads as an older value or
    /// as absent.
    pub damage_recorded: u64,
    /// Epochs (opens) of the first and the last run that recorded damage.
    pub damage_first_epoch: u64,
    /// See `damage_first_epoch`.
    pub damage_last_epoch: u64,
    /// Per-device I/O.
    pub devices: Vec<DeviceStats>,
    /// Latency percentiles per operation.
    pub latency: Vec<LatencySummary>,
}

/// The value of a relaxed counter.
pub(crate) fn read_counter(a: &AtomicU64) -> u64 {
    a.load(Relaxed)
}

impl Stats {
    /// Human-readable multi-line report.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        self.text_writes(&mut s);
        self.text_upkeep(&mut s);
        self.text_reads_and_devices(&mut s);
        s
    }

    /// The report's lines on what was written and where: operations, tiers, bands, pad.
    fn text_writes(&self, s: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(s, "mode                 {}", self.mode);
        let _ = writeln!(s, "format version       {}", self.format_version);
        let _ = writeln!(
            s,
            "operations           puts {}  gets {} (hits {})  deletes {}  batches {}",
            self.puts, self.gets, self.get_hits, self.deletes, self.batches
        );
        let _ = writeln!(
            s,
            "user bytes           written {:.1} MiB  read {:.1} MiB",
            mib(self.user_bytes_written),
            mib(self.user_bytes_read)
        );
        let _ = writeln!(
            s,
            "capacity tier        {} segments ({:.1} MiB) + {} partial flushes + {} in-place updates ({:.1} MiB); {} overwrites absorbed in DRAM; host write amplification {:.3}",
            self.segments_written,
            mib(self.segment_bytes_written),
            self.partial_flushes,
            self.inplace_writes,
            mib(self.inplace_bytes),
            self.absorbed_writes,
            self.host_write_amplification
        );
        let _ = writeln!(
            s,
            "bands                {} free of {} ({:.2} MiB each, {} KiB segments); live data {:.1} MiB",
            self.bands_free,
            self.bands_total,
            mib(self.band_size),
            self.segment_size >> 10,
            mib(self.live_bytes)
        );
        let _ = writeln!(
            s,
            "write pad            {:.1} of {:.1} MiB in use; {:.1} MiB written in {} group commits ({} records); {} segments sealed early (pad full)",
            mib(self.pad_used),
            mib(self.pad_size),
            mib(self.pad_bytes_written),
            self.commit_groups,
            self.commit_records,
            self.forced_seals
        );
    }

    /// The report's lines on background work: GC, index, checkpoints, recovery.
    fn text_upkeep(&self, s: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(
            s,
            "gc                   {} passes, {} bands freed, {:.1} MiB read, {} records / {:.1} MiB moved, {} tombstones dropped, rested {} ms; {} write stalls ({} µs)",
            self.gc_runs,
            self.gc_bands_freed,
            mib(self.gc_bytes_read),
            self.gc_records_moved,
            mib(self.gc_bytes_moved),
            self.gc_tombstones_dropped,
            self.gc_rest_us / 1000,
            self.write_stalls,
            self.write_stall_us
        );
        if self.gc_separate {
            let _ = writeln!(
                s,
                "gc streams           GC moves in a band of their own, with {} cold user writes; {} records placed in the other stream's band, after their key's newest copy",
                self.cold_writes,
                self.stream_diverted
            );
        }
        let _ = writeln!(
            s,
            "index                {} entries, {:.1} MiB DRAM, {:.2} bytes/key",
            self.index_entries,
            mib(self.index_bytes),
            self.index_bytes_per_key
        );
        let _ = writeln!(
            s,
            "checkpoints          {} written ({:.1} MiB), {} skipped, last took {} µs",
            self.checkpoints,
            mib(self.checkpoint_bytes),
            self.checkpoints_skipped,
            self.last_checkpoint_us
        );
        let _ = writeln!(
            s,
            "last recovery        {} in {} µs ({} segments, {} pad records replayed, {} already held)",
            self.recovery_source,
            self.recovery_us,
            self.recovery_segments_replayed,
            self.recovery_pad_records,
            self.recovery_pad_skipped
        );
        for w in &self.recovery_warnings {
            let _ = writeln!(s, "recovery warning     {w}");
        }
        if self.damage_recorded > 0 {
            let _ = writeln!(
                s,
                "DAMAGE RECORDED      {} damage event(s) since epoch {} (last in epoch {}): keys whose newest copy was lost read as older values or absent; `masse check` says more, `masse check --clear-damage` clears it",
                self.damage_recorded, self.damage_first_epoch, self.damage_last_epoch
            );
        }
        for w in &self.recovery_notes {
            let _ = writeln!(s, "recovery note        {w}");
        }
    }

    /// The report's lines on reads, per-device I/O and latency.
    fn text_reads_and_devices(&self, s: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(
            s,
            "reads                {} from DRAM buffers, {} from devices, {} retries; {} checksum failures",
            self.reads_from_dram, self.reads_from_device, self.read_retries, self.corruptions
        );
        for d in &self.devices {
            let _ = writeln!(
                s,
                "device {:8}      {} ({}, {}, direct {}) written {:.1} MiB in {} writes, read {:.1} MiB in {} reads, {} syncs, {:.1} MiB trimmed",
                d.role,
                d.path,
                d.media,
                d.backend,
                d.direct_io,
                mib(d.io.bytes_written),
                d.io.writes,
                mib(d.io.bytes_read),
                d.io.reads,
                d.io.syncs,
                mib(d.io.bytes_discarded)
            );
        }
        for l in &self.latency {
            let _ = writeln!(
                s,
                "latency {:6}       n={} mean {:.1} µs  p50 {:.1}  p99 {:.1}  p99.9 {:.1}  p99.99 {:.1}  max {:.1} µs",
                l.op,
                l.count,
                l.mean_ns as f64 / 1e3,
                l.p50_ns as f64 / 1e3,
                l.p99_ns as f64 / 1e3,
                l.p999_ns as f64 / 1e3,
                l.p9999_ns as f64 / 1e3,
                l.max_ns as f64 / 1e3
            );
        }
    }
}

/// Bytes in MiB, for the text report.
fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

/// Space of the capacity tier as writers see it, from [`crate::Db::space`]. Cheap
/// to take (no latency summaries), so faces can ask before buffering a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Space {
    /// Bands in the pool.
    pub bands_total: u32,
    /// Bands on the free list.
    pub bands_free: u32,
    /// Free bands user writes may never take (kept for GC and deletes).
    pub user_reserve_bands: u32,
    /// Bytes of records one band holds (band size less its header).
    pub band_payload: u64,
    /// Bytes of live records (headers included).
    pub live_bytes: u64,
    /// Band payload user writes can still fill, counting what GC can win back
    /// from dead records. Compare it with [`crate::Db::record_room`], not with
    /// raw value sizes: records do not pack segments perfectly. An estimate
    /// that errs low: it leaves out the reserve bands, one band of working room
    /// for the open band and GC (two with separate GC writes, whose open band
    /// user writes do not fill), and bands whose dead records GC would not
    /// find worth moving the live ones for.
    pub user_available_bytes: u64,
}
