//! The hang watchdog of stress runs: a write that never finishes fails the run
//! with the engine's write-path state and a thread dump, instead of hanging it.
//! Devices that block every write on command make the hang deterministic.

use masse::device::{Device, DeviceInfo, IoCounters, MemDevice};
use masse::{Db, DeviceSpec, Options, PoolConfig};
use masse_stress::oracle::Oracle;
use masse_stress::watchdog::{HangHook, HangReport};
use masse_stress::workload::{run, RunConfig};
use std::io;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Shared switch: while on, every write, discard and sync waits.
#[derive(Default)]
struct Gate {
    closed: Mutex<bool>,
    cv: Condvar,
}

impl Gate {
    fn set(&self, closed: bool) {
        *self.closed.lock().expect("gate") = closed;
        self.cv.notify_all();
    }
    fn pass(&self) {
        let mut c = self.closed.lock().expect("gate");
        while *c {
            c = self.cv.wait(c).expect("gate");
        }
    }
}

/// A MemDevice whose writes block while the gate is closed.
struct Blocking {
    inner: MemDevice,
    gate: Arc<Gate>,
}

impl Device for Blocking {
    fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.gate.pass();
        self.inner.write_at(buf, offset)
    }
    fn sync(&self) -> io::Result<()> {
        self.gate.pass();
        self.inner.sync()
    }
    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        self.gate.pass();
        self.inner.discard(offset, len)
    }
    fn counters(&self) -> &IoCounters {
        self.inner.counters()
    }
}

fn pool(gate: &Arc<Gate>) -> PoolConfig {
    let dev = |size: u64| {
        DeviceSpec::Device(Arc::new(Blocking {
            inner: MemDevice::new(size),
            gate: gate.clone(),
        }) as Arc<dyn Device>)
    };
    let mut c = PoolConfig::tiered(dev(64 << 20), dev(32 << 20));
    c.segment_size = Some(64 << 10);
    c.band_size = Some(1 << 20);
    c
}

fn config(timeout: Duration, hook: Option<HangHook>) -> RunConfig {
    RunConfig {
        threads: 2,
        duration: Duration::from_secs(30),
        max_ops: 3000,
        seed: 7,
        checkpoint_every: Duration::ZERO,
        write_percent: 80,
        hang_timeout: timeout,
        on_hang: hook,
        ..RunConfig::default()
    }
}

#[test]
fn a_write_that_never_finishes_fails_the_run_with_the_write_path_state() {
    let gate = Arc::new(Gate::default());
    let db = Db::create(&pool(&gate), Options::default()).expect("create");
    let o = Oracle::in_memory(500, 7).expect("oracle");
    let reports: Arc<Mutex<Vec<HangReport>>> = Arc::default();
    let (r2, g2) = (reports.clone(), gate.clone());
    let hook = HangHook(Arc::new(move |r: &HangReport| {
        r2.lock().expect("reports").push(r.clone());
        g2.set(false); // let the stuck writes finish, so the run can end
    }));
    let mut cfg = config(Duration::from_secs(1), Some(hook));
    cfg.max_ops = 0;
    let g3 = gate.clone();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let closer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        g3.set(true);
        // Without a working watchdog the run would hang: open the gate late so
        // the test fails (the run then succeeds) instead of hanging.
        let _ = done_rx.recv_timeout(Duration::from_secs(20));
        g3.set(false);
    });
    let t0 = Instant::now();
    let res = run(&db, &o, &cfg, &AtomicBool::new(false));
    let took = t0.elapsed();
    let _ = done_tx.send(());
    let err = res.expect_err("a run whose writes never finish must fail");
    assert!(took < Duration::from_secs(15), "the watchdog took {took:?}");
    let msg = err.0;
    eprintln!("{msg}");
    assert!(msg.starts_with("hang: "), "{msg}");
    assert!(msg.contains("has not finished after"), "{msg}");
    assert!(
        ["put of key", "delete of key", "batch of keys"]
            .iter()
            .any(|w| msg.contains(w)),
        "the stalled write is named: {msg}"
    );
    assert!(
        msg.contains("engine state: queue") && msg.contains("leader active"),
        "Db::debug_state is in the report: {msg}"
    );
    assert!(
        msg.contains("threads:") && msg.contains("masse-writer"),
        "{msg}"
    );
    assert_eq!(reports.lock().expect("reports").len(), 1);
    drop(db);
    let _ = closer.join();
}

#[test]
fn a_healthy_run_passes_the_watchdog() {
    let gate = Arc::new(Gate::default());
    let db = Db::create(&pool(&gate), Options::default()).expect("create");
    let o = Oracle::in_memory(500, 8).expect("oracle");
    let hook = HangHook(Arc::new(|r: &HangReport| panic!("unexpected hang: {r}")));
    let rep = run(
        &db,
        &o,
        &config(Duration::from_secs(20), Some(hook)),
        &AtomicBool::new(false),
    )
    .expect("run");
    assert!(rep.puts > 0);
    db.close().expect("close");
}
