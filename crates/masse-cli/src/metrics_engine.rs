//! The engine's figures as Prometheus metrics: every counter of `Stats`, space and
//! index gauges, per-device I/O, latency histograms per operation, and what an
//! emulated drive did inside (NAND bytes, for its write amplification).

use crate::metrics::{latency_bounds, row, EngineSlot, Fams, HistRow, Row};
use masse::Stats;

/// Everything the engine in `slot` says now (only `pool_open 0` when it is empty);
/// devices are labelled by their paths only if `paths`.
pub fn collect(o: &mut Fams, slot: &EngineSlot, paths: bool) {
    let guard = slot.db_read();
    let Some(db) = guard.as_ref() else {
        o.gauge("pool_open", "1 while the pool is open in this process", 0.0);
        return;
    };
    o.gauge("pool_open", "1 while the pool is open in this process", 1.0);
    let s = db.stats();
    let act = db.activity();
    o.family(
        "activity",
        "1 while the engine is doing this in the background",
        false,
        &[
            row(&[("what", "gc")], f(act.gc)),
            row(&[("what", "checkpoint")], f(act.checkpoint)),
        ],
    );
    operations(o, &s);
    writes(o, &s);
    gc(o, &s);
    space(o, &s);
    recovery(o, &s);
    devices(o, &s, paths);
    emulated(o);
    latency(o, db);
}

fn f(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

fn operations(o: &mut Fams, s: &Stats) {
    o.family(
        "ops",
        "User operations by kind (puts include the records inside batches)",
        true,
        &[
            row(&[("op", "put")], s.puts as f64),
            row(&[("op", "get")], s.gets as f64),
            row(&[("op", "delete")], s.deletes as f64),
            row(&[("op", "batch")], s.batches as f64),
        ],
    );
    o.counter("get_hits", "Gets that found the key", s.get_hits as f64);
    o.counter(
        "user_written_bytes",
        "Key + value bytes written by users",
        s.user_bytes_written as f64,
    );
    o.counter(
        "user_read_bytes",
        "Value bytes returned to users",
        s.user_bytes_read as f64,
    );
    o.family(
        "reads",
        "Gets by where the record was found",
        true,
        &[
            row(&[("from", "dram")], s.reads_from_dram as f64),
            row(&[("from", "device")], s.reads_from_device as f64),
        ],
    );
    o.counter(
        "read_retries",
        "Gets retried because GC moved the record under them",
        s.read_retries as f64,
    );
    o.counter(
        "corruptions",
        "Checksum failures seen (reads, GC, recovery)",
        s.corruptions as f64,
    );
    o.gauge(
        "damage_recorded",
        "Damage events in the pool's damage record (0: none): acknowledged data was lost; \
         cleared only by `masse check --clear-damage`",
        s.damage_recorded as f64,
    );
}

fn writes(o: &mut Fams, s: &Stats) {
    o.counter("commit_groups", "Group commits", s.commit_groups as f64);
    o.counter(
        "commit_records",
        "Records committed (user + GC)",
        s.commit_records as f64,
    );
    o.counter(
        "pad_written_bytes",
        "Bytes written to the fast-tier write pad",
        s.pad_bytes_written as f64,
    );
    o.counter(
        "segments_written",
        "Segments written to the capacity tier",
        s.segments_written as f64,
    );
    o.counter(
        "segment_written_bytes",
        "Bytes of segments written to the capacity tier",
        s.segment_bytes_written as f64,
    );
    o.counter(
        "partial_flushes",
        "Partial-segment flushes (pools without a fast tier)",
        s.partial_flushes as f64,
    );
    o.counter(
        "inplace_writes",
        "Updates written over the old record in place (scm-only)",
        s.inplace_writes as f64,
    );
    o.counter(
        "inplace_written_bytes",
        "Bytes written by in-place updates",
        s.inplace_bytes as f64,
    );
    o.counter(
        "forced_seals",
        "Segments sealed early because the pad ran short of room",
        s.forced_seals as f64,
    );
    o.counter(
        "stream_diverted",
        "Records placed in the other write stream's band, after their key's newest copy (gc_separate)",
        s.stream_diverted as f64,
    );
    o.counter(
        "cold_writes",
        "User writes placed with GC moves because their key's newest copy was old (cold_user_writes)",
        s.cold_writes as f64,
    );
    o.counter(
        "absorbed_writes",
        "Puts written over their key's same-length record in a segment still in DRAM (absorb_overwrites)",
        s.absorbed_writes as f64,
    );
    o.gauge(
        "host_write_amplification",
        "Capacity-tier bytes written / user bytes written since open",
        s.host_write_amplification,
    );
    o.counter(
        "write_stalls",
        "Writes that waited for free space",
        s.write_stalls as f64,
    );
    o.counter(
        "write_stall_seconds",
        "Total time writes waited for free space",
        s.write_stall_us as f64 / 1e6,
    );
}

fn gc(o: &mut Fams, s: &Stats) {
    o.counter("gc_passes", "GC passes that freed a band", s.gc_runs as f64);
    o.counter(
        "gc_bands_freed",
        "Bands freed by GC",
        s.gc_bands_freed as f64,
    );
    o.counter(
        "gc_read_bytes",
        "Bytes GC read from the capacity tier",
        s.gc_bytes_read as f64,
    );
    o.counter(
        "gc_moved_records",
        "Records GC relocated",
        s.gc_records_moved as f64,
    );
    o.counter(
        "gc_moved_bytes",
        "Bytes GC relocated",
        s.gc_bytes_moved as f64,
    );
    o.counter(
        "gc_tombstones_dropped",
        "Tombstones GC proved unneeded and dropped",
        s.gc_tombstones_dropped as f64,
    );
    o.counter(
        "gc_rest_seconds",
        "Time background GC rested between segments (gc_duty below 1)",
        s.gc_rest_us as f64 / 1e6,
    );
}

fn space(o: &mut Fams, s: &Stats) {
    let free = s.bands_free as f64;
    o.family(
        "bands",
        "Capacity-tier bands by state",
        false,
        &[
            row(&[("state", "free")], free),
            row(&[("state", "used")], s.bands_total as f64 - free),
        ],
    );
    o.gauge("band_size_bytes", "Band size", s.band_size as f64);
    o.gauge("segment_size_bytes", "Segment size", s.segment_size as f64);
    o.gauge(
        "live_bytes",
        "Bytes of live records in the capacity tier",
        s.live_bytes as f64,
    );
    o.gauge(
        "pad_used_bytes",
        "Write-pad bytes in use",
        s.pad_used as f64,
    );
    o.gauge("pad_size_bytes", "Write-pad size", s.pad_size as f64);
    o.gauge(
        "index_entries",
        "Index entries (live keys + tombstones)",
        s.index_entries as f64,
    );
    o.gauge(
        "index_bytes",
        "DRAM used by the index",
        s.index_bytes as f64,
    );
    o.counter(
        "checkpoints",
        "Index checkpoints written",
        s.checkpoints as f64,
    );
    o.counter(
        "checkpoint_written_bytes",
        "Bytes of checkpoints written",
        s.checkpoint_bytes as f64,
    );
    o.counter(
        "checkpoints_skipped",
        "Checkpoints skipped: the index did not fit the slot",
        s.checkpoints_skipped as f64,
    );
    o.gauge(
        "last_checkpoint_seconds",
        "Duration of the last checkpoint",
        s.last_checkpoint_us as f64 / 1e6,
    );
}

fn recovery(o: &mut Fams, s: &Stats) {
    o.family(
        "recovery_source",
        "How the last open recovered (1 on the source used)",
        false,
        &[row(&[("source", s.recovery_source.as_str())], 1.0)],
    );
    o.gauge(
        "recovery_seconds",
        "Duration of the last open's recovery",
        s.recovery_us as f64 / 1e6,
    );
    o.gauge(
        "recovery_segments_replayed",
        "Segments replayed at the last open",
        s.recovery_segments_replayed as f64,
    );
    o.gauge(
        "recovery_pad_records",
        "Pad records replayed at the last open",
        s.recovery_pad_records as f64,
    );
    o.gauge(
        "recovery_pad_skipped",
        "Pad records the last open did not place again (overwritten later on the pad, or already held)",
        s.recovery_pad_skipped as f64,
    );
    o.gauge(
        "recovery_warnings",
        "Problems the last recovery found and worked around",
        s.recovery_warnings.len() as f64,
    );
}

fn devices(o: &mut Fams, s: &Stats, paths: bool) {
    type Pick = fn(&masse::stats::DeviceStats) -> f64;
    let fams: [(&str, &str, bool, Pick); 7] = [
        (
            "device_written_bytes",
            "Bytes written to the device by this process",
            true,
            |d| d.io.bytes_written as f64,
        ),
        (
            "device_read_bytes",
            "Bytes read from the device by this process",
            true,
            |d| d.io.bytes_read as f64,
        ),
        ("device_writes", "Write operations", true, |d| {
            d.io.writes as f64
        }),
        ("device_reads", "Read operations", true, |d| {
            d.io.reads as f64
        }),
        ("device_syncs", "Flush/sync operations", true, |d| {
            d.io.syncs as f64
        }),
        (
            "device_trimmed_bytes",
            "Bytes discarded (TRIM)",
            true,
            |d| d.io.bytes_discarded as f64,
        ),
        (
            "device_capacity_bytes",
            "Bytes of the device used by the pool",
            false,
            |d| d.capacity as f64,
        ),
    ];
    for (name, help, counter, pick) in fams {
        let rows: Vec<Row> = s
            .devices
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let name = if paths {
                    d.path.clone()
                } else {
                    format!("dev{i}")
                };
                row(&[("device", &name), ("role", d.role)], pick(d))
            })
            .collect();
        o.family(name, help, counter, &rows);
    }
}

/// Emulated drives (sim:…): host and NAND bytes, so the drive's own WAF shows.
fn emulated(o: &mut Fams) {
    let sims = crate::pool::sim_stats();
    if sims.is_empty() {
        return;
    }
    let host: Vec<Row> = sims
        .iter()
        .map(|(n, h, _)| row(&[("device", n)], *h as f64))
        .collect();
    let nand: Vec<Row> = sims
        .iter()
        .map(|(n, _, w)| row(&[("device", n)], *w as f64))
        .collect();
    o.family(
        "emulated_host_written_bytes",
        "Bytes the host wrote to an emulated drive",
        true,
        &host,
    );
    o.family(
        "emulated_nand_written_bytes",
        "Bytes an emulated drive wrote to its NAND (host writes + its own GC)",
        true,
        &nand,
    );
}

fn latency(o: &mut Fams, db: &masse::Db) {
    let bounds = latency_bounds();
    let ns: Vec<u64> = bounds.iter().map(|b| (b * 1e9).round() as u64).collect();
    let rows = db
        .latency_buckets(&ns)
        .into_iter()
        .map(|h| HistRow {
            labels: vec![("op", h.op.to_string())],
            count: h.count,
            sum: h.sum_ns as f64 / 1e9,
            cumulative: h.cumulative,
        })
        .collect();
    o.histograms(
        "op_latency_seconds",
        "Latency of user operations as the engine measured them",
        &bounds,
        rows,
    );
}
