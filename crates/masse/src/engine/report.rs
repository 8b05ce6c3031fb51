//! What the engine reports about itself: the `Stats` snapshot and the
//! one-paragraph state dump for hang watchdogs.

use super::state::Engine;
use crate::device::Device;
use crate::stats::{read_counter as ld, DeviceStats, Stats};
use std::sync::Arc;

/// Every device of the pool with its role and I/O counters.
fn device_stats(e: &Engine) -> Vec<DeviceStats> {
    let mut devices = Vec::new();
    let mut add = |d: &Arc<dyn Device>, role: &'static str| {
        let i = d.info();
        let recorded = e.pool.media.iter().find(|(p, _)| *p == i.path);
        devices.push(DeviceStats {
            path: i.path.clone(),
            role,
            media: recorded.map_or(i.media, |(_, m)| *m).name(),
            backend: i.backend.name(),
            direct_io: i.direct_io,
            capacity: i.capacity,
            io: d.counters().snapshot(),
        });
    };
    if let Some(f) = &e.pool.fast {
        add(f, "fast");
    }
    for d in &e.pool.caps {
        add(d, "capacity");
    }
    devices
}

fn ratio(a: f64, b: u64) -> f64 {
    if b > 0 {
        a / b as f64
    } else {
        0.0
    }
}

/// A snapshot of the engine's counters (`Db::stats`).
pub(crate) fn stats(e: &Engine) -> Stats {
    let bands_free = e.bands.lock().free_count();
    let devices = device_stats(e);
    let cap_written: u64 = devices
        .iter()
        .filter(|d| d.role == "capacity")
        .map(|d| d.io.bytes_written)
        .sum();
    let rec = e.recovery.lock().clone();
    let dmg = super::damage::current(e);
    let entries = e.index.len() as u64;
    let ibytes = e.index.memory_bytes() as u64;
    let mut s = Stats {
        mode: e.pool.geo.mode.name(),
        format_version: e.pool.version,
        bands_total: e.layout.bands,
        bands_free,
        band_size: e.pool.geo.band_size,
        segment_size: e.pool.geo.segment_size,
        live_bytes: e.status.live_total(),
        pad_used: e.pad.as_ref().map_or(0, |p| p.used()),
        pad_size: e.pool.geo.pad_size,
        index_entries: entries,
        index_bytes: ibytes,
        index_bytes_per_key: ratio(ibytes as f64, entries),
        recovery_source: rec.source,
        recovery_us: rec.us,
        recovery_segments_replayed: rec.segments,
        recovery_pad_records: rec.pad_records,
        recovery_pad_skipped: rec.pad_skipped,
        recovery_warnings: rec.warnings,
        recovery_notes: rec.notes,
        damage_recorded: dmg.corruptions,
        damage_first_epoch: dmg.first_epoch,
        damage_last_epoch: dmg.last_epoch,
        devices,
        latency: e.latency.summary(),
        ..Stats::default()
    };
    copy_counters(e, &mut s);
    // From the same snapshot of user bytes that `user_bytes_written` reports.
    s.host_write_amplification = ratio(cap_written as f64, s.user_bytes_written);
    s
}

/// The plain counters, one to one.
fn copy_counters(e: &Engine, s: &mut Stats) {
    let c = &e.counters;
    s.puts = ld(&c.puts);
    s.gets = ld(&c.gets);
    s.get_hits = ld(&c.get_hits);
    s.deletes = ld(&c.deletes);
    s.batches = ld(&c.batches);
    s.user_bytes_written = ld(&c.user_bytes);
    s.user_bytes_read = ld(&c.read_bytes);
    s.reads_from_dram = ld(&c.reads_from_dram);
    s.reads_from_device = ld(&c.reads_from_device);
    s.read_retries = ld(&c.read_retries);
    s.commit_groups = ld(&c.commit_groups);
    s.commit_records = ld(&c.commit_records);
    s.pad_bytes_written = ld(&c.pad_bytes);
    s.segments_written = ld(&c.segments_written);
    s.segment_bytes_written = ld(&c.segment_bytes);
    s.partial_flushes = ld(&c.partial_flushes);
    s.inplace_writes = ld(&c.inplace_writes);
    s.inplace_bytes = ld(&c.inplace_bytes);
    s.forced_seals = ld(&c.forced_seals);
    s.stream_diverted = ld(&c.stream_diverted);
    s.cold_writes = ld(&c.cold_writes);
    s.absorbed_writes = ld(&c.absorbed_writes);
    s.gc_separate = e.streams_on();
    s.gc_runs = ld(&c.gc_runs);
    s.gc_bands_freed = ld(&c.gc_bands_freed);
    s.gc_bytes_read = ld(&c.gc_bytes_read);
    s.gc_rest_us = ld(&c.gc_rest_ns) / 1000;
    s.gc_records_moved = ld(&c.gc_records_moved);
    s.gc_bytes_moved = ld(&c.gc_bytes_moved);
    s.gc_tombstones_dropped = ld(&c.gc_tombstones_dropped);
    s.write_stalls = ld(&c.stalls);
    s.write_stall_us = ld(&c.stall_us);
    s.checkpoints = ld(&c.checkpoints);
    s.checkpoint_bytes = ld(&c.checkpoint_bytes);
    s.checkpoints_skipped = ld(&c.checkpoint_skipped);
    s.last_checkpoint_us = ld(&c.last_checkpoint_us);
    s.corruptions = ld(&c.corruptions);
}

/// A one-paragraph dump of the write path's state (`Db::debug_state`). Takes
/// only short-lived locks, so it answers even when a writer is stuck.
pub(crate) fn debug_state(e: &Engine, activity: impl std::fmt::Debug) -> String {
    let (queued, leader, stalled) = e.requests.debug_state();
    let pad = e.pad.as_ref().map(|p| p.debug_state());
    let (free, victims) = {
        let bt = e.bands.lock();
        (bt.free_count(), bt.victims())
    };
    let writer = e.writer.len();
    format!(
        "queue {queued} requests ({stalled} already completed), leader active {leader}; {}\
         bands free {free} of {}, victims {victims}; writer queue {writer:?}; \
         segments in DRAM {}; activity {activity:?}; failed {:?}",
        pad.unwrap_or_default(),
        e.layout.bands,
        e.segments.len(),
        e.failed.lock().clone()
    )
}
