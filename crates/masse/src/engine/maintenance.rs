//! The maintenance thread: background GC while free bands run low, and
//! periodic index checkpoints (paper §2.6, §2.7).
//!
//! It wakes every 20 ms. GC pace follows the write rate: it keeps running
//! passes (at most 64 per tick) while the free bands are below the low
//! watermark. A checkpoint is written once `checkpoint_interval` bytes have
//! reached the capacity tier since the last one.

use super::gc::{gc_pass, low_watermark, GcOutcome, Pass};
use super::state::Engine;
use crate::error::Error;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

/// Background loop: GC when free bands run low, checkpoints by bytes written.
pub(crate) fn run(e: Arc<Engine>) {
    while wait_tick(&e) {
        if e.check_failed().is_err() {
            continue;
        }
        if e.opts.background_gc {
            collect(&e);
        }
        let iv = e.opts.checkpoint_interval;
        if iv > 0 && e.bytes_since_ckpt.load(Relaxed) >= iv {
            if let Err(err) = super::checkpoint::checkpoint(&e) {
                e.fail(format!("checkpoint failed: {err}"));
            }
        }
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
        if free >= low_watermark(e) || *e.stop.0.lock() {
            break;
        }
        match gc_pass(e, Pass::Background) {
            Ok(GcOutcome::Freed { .. }) => {}
            Ok(GcOutcome::NoVictim) => break,
            Err(err) => {
                if !matches!(err, Error::NoSpace(_)) {
                    e.fail(format!("GC failed: {err}"));
                }
                break;
            }
        }
    }
}
