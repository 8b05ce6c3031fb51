//! The maintenance thread: background GC while free bands run low, and
//! periodic index checkpoints (paper §2.6, §2.7).
//!
//! It wakes every 20 ms. GC pace follows the write rate: it keeps running
//! passes (at most 64 per tick) while the free bands are below the low
//! watermark. A checkpoint is written once `checkpoint_interval` bytes have
//! reached the capacity tier since the last one. It also bounds how long
//! records stay on the pad only: an idle `Gc` segment is sealed, and a held
//! `User` segment is sent to the writer after a second.

use super::gc::{gc_pass, low_watermark, GcOutcome, Pass};
use super::state::Engine;
use crate::error::Error;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Background loop: GC when free bands run low, checkpoints by bytes written.
pub(crate) fn run(e: Arc<Engine>) {
    lower_priority();
    let mut moved = (0, None);
    let mut held = None;
    while wait_tick(&e) {
        if e.check_failed().is_err() {
            continue;
        }
        if e.opts.background_gc {
            collect(&e);
        }
        seal_when_idle(&e, &mut moved);
        release_old_held(&e, &mut held);
        let iv = e.opts.checkpoint_interval;
        if iv > 0 && e.bytes_since_ckpt.load(Relaxed) >= iv {
            if let Err(err) = super::checkpoint::checkpoint(&e) {
                e.fail(format!("checkpoint failed: {err}"));
            }
        }
    }
}

/// Background work yields the CPU to the threads users wait on (nice + 10,
/// at most 19, for this thread only). On a machine with few cores, GC's parsing and index
/// updates otherwise take the CPU a get's thread needs when its read
/// completes, and the get waits a scheduler slice (≈ 1 ms) on top of the
/// disk. A write that waits for space runs its own GC pass on its own thread
/// (`gc::wait_for_space`), so a busy CPU cannot starve writers out of space.
fn lower_priority() {
    // SAFETY: get/setpriority with this thread's id read and change only
    // this thread's nice value; they touch no memory of ours. A failure
    // leaves the priority as it was.
    unsafe {
        let tid = libc::gettid() as libc::id_t;
        let nice = libc::getpriority(libc::PRIO_PROCESS, tid);
        libc::setpriority(libc::PRIO_PROCESS, tid, (nice + 10).min(19));
    }
}

/// Sleep one tick; false once the engine is stopping.
fn wait_tick(e: &Engine) -> bool {
    let mut stop = e.stop.0.lock();
    if *stop {
        return false;
    }
    e.stop.1.wait_for(&mut stop, Duration::from_millis(20));
    !*stop
}

/// Keep going while below the watermark: GC pace follows the write rate.
fn collect(e: &Engine) {
    for _ in 0..64 {
        let free = e.bands.lock().free_count();
        if free >= low_watermark(e) || e.stopping() {
            break;
        }
        match gc_pass(e, Pass::Background) {
            Ok(GcOutcome::Freed { .. }) => {}
            Ok(GcOutcome::NoVictim) => break,
            Err(err) => {
                // A pass that close cut short (`Error::Closed`) failed nothing.
                if !matches!(err, Error::NoSpace(_)) && !e.stopping() {
                    e.fail(format!("GC failed: {err}"));
                }
                break;
            }
        }
    }
}

/// Separate GC writes: once nothing has entered the GC stream for
/// `GC_IDLE`, seal its open segment. It fills while GC moves records (any
/// pass: background, a writer's waiting for space, `gc_once`) and with cold
/// user writes (`Options::cold_user_writes`), and holds the
/// pad from its first batch on: left open, a crash would have the next open
/// replay everything written since. Under steady churn GC never rests that
/// long, so no segment is cut short there. `moved`: the moves counted at the
/// last change, and when it changed (`None` once sealed).
fn seal_when_idle(e: &Engine, moved: &mut (u64, Option<Instant>)) {
    let c = &e.counters;
    let now = c.gc_records_moved.load(Relaxed) + c.cold_writes.load(Relaxed);
    if now != moved.0 {
        *moved = (now, Some(Instant::now()));
        return;
    }
    if !moved.1.is_some_and(|t| t.elapsed() >= GC_IDLE) {
        return;
    }
    moved.1 = None;
    if let Err(err) = e.seal_gc_stream() {
        if !e.stopping() {
            e.fail(format!(
                "sealing the GC stream's open segment failed: {err}"
            ));
        }
    }
}

/// How long GC rests before the GC stream's open segment is sealed.
const GC_IDLE: Duration = Duration::from_secs(1);

/// Absorbed overwrites: the held `User` segment (design.md §4.10) goes to
/// the writer once it has been held for `Options::absorb_hold`. Under load the next
/// segment closes within milliseconds and sends it anyway; under a trickle
/// of writes it would otherwise keep its records on the pad only, where
/// damage to the newest pad batch loses them unreported (§11), until the
/// next segment fills. `seen`: the held segment's seq and when it was first
/// seen held.
fn release_old_held(e: &Engine, seen: &mut Option<(u64, Instant)>) {
    if !e.absorbs() {
        return; // nothing is ever held: leave the write state alone
    }
    let now = e.write_state.lock().held.as_ref().map(|o| o.buf.seq);
    match (now, *seen) {
        (None, _) => *seen = None,
        (Some(seq), Some((was, since))) if seq == was => {
            if since.elapsed() >= e.opts.absorb_hold {
                *seen = None;
                // A segment held since the look above goes too: it only
                // absorbs less.
                if let Err(err) = e.release_held() {
                    if !e.stopping() {
                        e.fail(format!("writing the held segment failed: {err}"));
                    }
                }
            }
        }
        (Some(seq), _) => *seen = Some((seq, Instant::now())),
    }
}
