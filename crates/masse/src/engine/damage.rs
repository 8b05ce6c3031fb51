//! The pool's damage record (issue 44): damage recovery found, or a run
//! that closed cleanly counted, kept in the epoch block (format.md §4) and
//! carried from each open to the next until an operator clears it. Without
//! it the only sign that acknowledged data was lost was one warning at the
//! first open after the damage; every later command, `check` included,
//! then served older values and called the pool consistent.

use super::state::Engine;
use crate::error::Result;
use crate::format::{DamageRecord, EpochBlock};
use std::sync::atomic::Ordering::Relaxed;

/// At open: the record the previous run left.
pub(crate) fn carry(e: &Engine, prev: DamageRecord) {
    *e.damage.lock() = (prev, 0);
}

/// After recovery: add what it found (its corruptions, or one event for a
/// warning that counted none) and, if anything, write the record into this
/// run's epoch block at once, so a crash before the close keeps it. Logs
/// the record at every open while it is set.
pub(crate) fn after_recovery(e: &Engine) -> Result<()> {
    let found = e.counters.corruptions.load(Relaxed);
    let warned = !e.recovery.lock().warnings.is_empty();
    let n = if found == 0 && warned { 1 } else { found };
    let rec = {
        let mut d = e.damage.lock();
        d.0.add(n, e.epoch);
        d.1 = found;
        d.0
    };
    if n > 0 {
        write(e, rec)?;
    }
    if rec.is_set() {
        tracing::warn!(
            corruptions = rec.corruptions,
            first_epoch = rec.first_epoch,
            last_epoch = rec.last_epoch,
            "the pool carries a damage record: reads of keys whose newest copy was lost return \
             an older value or nothing; see `masse check`, and clear it with \
             `masse check --clear-damage` once dealt with"
        );
    }
    Ok(())
}

/// The record as this run ends: with the corruptions counted since it was
/// last brought up to date (reads, GC, `check`).
pub(crate) fn at_close(e: &Engine) -> DamageRecord {
    let now = e.counters.corruptions.load(Relaxed);
    let mut d = e.damage.lock();
    let n = now.saturating_sub(d.1);
    d.0.add(n, e.epoch);
    d.1 = now;
    d.0
}

/// The record now (what `at_close` would write).
pub(crate) fn current(e: &Engine) -> DamageRecord {
    let now = e.counters.corruptions.load(Relaxed);
    let d = e.damage.lock();
    let mut r = d.0;
    r.add(now.saturating_sub(d.1), e.epoch);
    r
}

/// An operator has dealt with the damage: forget it, durably.
pub(crate) fn clear(e: &Engine) -> Result<()> {
    let now = e.counters.corruptions.load(Relaxed);
    *e.damage.lock() = (DamageRecord::default(), now);
    write(e, DamageRecord::default())
}

/// Rewrite this run's epoch block with `rec`. In place: the other copy holds
/// the previous epoch, so a torn write leaves it valid, and the damaged
/// copy makes the next open skip an epoch number (format.md §4); the record
/// of this run's damage is then lost, and recovery reports again what it
/// still finds.
fn write(e: &Engine, rec: DamageRecord) -> Result<()> {
    let b = EpochBlock {
        epoch: e.epoch,
        pool_tag: e.tag,
        clean: 0,
        damage: rec,
    };
    crate::pool::write_epoch(&e.pool, &b)
}
