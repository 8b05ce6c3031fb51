//! The benchmarks of `masse bench`, with db_bench 7.8's semantics: what each thread does,
//! how many operations, which keys, and what the summary line says.

use crate::error::{CliError, CliResult};
use crate::workload::{new_hist, run_threads, Progress, Ticker};
use hdrhistogram::Histogram;
use masse::Db;
use masse_cli::dbbench::{fmt_key, Mt64, Summary};
use masse_cli::keydist::Zipfian;
use masse_cli::rng::SplitMix64;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A benchmark name db_bench knows and `masse bench` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Bench {
    Fillseq,
    Fillrandom,
    Overwrite,
    Readrandom,
    Readrandomwriterandom,
    Readwhilewriting,
    Deleterandom,
    Multireadrandom,
}

pub const ALL: [Bench; 8] = [
    Bench::Fillseq,
    Bench::Fillrandom,
    Bench::Overwrite,
    Bench::Readrandom,
    Bench::Readrandomwriterandom,
    Bench::Readwhilewriting,
    Bench::Deleterandom,
    Bench::Multireadrandom,
];

impl Bench {
    pub fn name(self) -> &'static str {
        match self {
            Bench::Fillseq => "fillseq",
            Bench::Fillrandom => "fillrandom",
            Bench::Overwrite => "overwrite",
            Bench::Readrandom => "readrandom",
            Bench::Readrandomwriterandom => "readrandomwriterandom",
            Bench::Readwhilewriting => "readwhilewriting",
            Bench::Deleterandom => "deleterandom",
            Bench::Multireadrandom => "multireadrandom",
        }
    }

    pub fn parse(s: &str) -> Option<Bench> {
        ALL.iter().copied().find(|b| b.name() == s)
    }

    /// db_bench starts these on a fresh database (unless --use_existing_db, which skips them).
    pub fn fresh_db(self) -> bool {
        matches!(self, Bench::Fillseq | Bench::Fillrandom)
    }

    /// Whether --duration bounds this benchmark (db_bench ignores it for sequential
    /// writes and deletes).
    fn timed(self) -> bool {
        !matches!(self, Bench::Fillseq | Bench::Deleterandom)
    }
}

/// Operation kinds with their own latency figures.
pub const KINDS: [&str; 3] = ["read", "write", "delete"];
const READ: usize = 0;
const WRITE: usize = 1;
const DELETE: usize = 2;

/// The flags a benchmark needs, resolved as db_bench resolves them.
#[derive(Clone, Debug)]
pub struct Spec {
    pub bench: Bench,
    pub num: u64,
    pub key_size: usize,
    pub value_size: usize,
    pub threads: usize,
    pub duration: f64,
    /// Operations per thread for reads (readrandom, readwhilewriting readers).
    pub reads: u64,
    /// Operations per thread for writes (fill*, overwrite).
    pub writes: u64,
    /// Operations per thread of readrandomwriterandom.
    pub readwrites: u64,
    /// Keys per `Db::get_many` call of multireadrandom (db_bench's --batch_size).
    pub batch: u64,
    pub readwritepercent: u32,
    /// Seconds per interval of the time series.
    pub interval: f64,
    /// Zipfian key draws (`--key_dist=zipfian`) for every benchmark but the fills;
    /// `None`: db_bench's uniform draws.
    pub skew: Option<Zipfian>,
}

impl Spec {
    /// The key number of the next random operation. Zipfian draws still take
    /// db_bench's database-picking draw first, so a thread's stream of draws
    /// keeps its shape whatever the distribution.
    fn next_key(&self, rng: &mut Mt64) -> u64 {
        match (&self.skew, self.bench) {
            (Some(g), b) if !b.fresh_db() => {
                let _db = rng.next_u64();
                g.next(rng)
            }
            _ => rng.next_key(self.num),
        }
    }
}

/// What one benchmark measured.
pub struct Outcome {
    pub summary: Summary,
    /// Latency per kind (read, write, delete), ns.
    pub hist: [Histogram<u64>; 3],
    /// Operations per interval per kind.
    pub series: [Vec<u64>; 3],
    /// Latency per interval per kind, ns, 2 significant digits.
    pub interval_hist: Vec<[Histogram<u64>; 3]>,
    pub seconds: f64,
    /// Operations counted in the summary (readwhilewriting: the readers only).
    pub ops: u64,
    pub reads: u64,
    pub found: u64,
    pub writes: u64,
    pub deletes: u64,
    /// Key + value bytes written by the benchmark (all threads, also readwhilewriting's writer).
    pub user_bytes_written: u64,
}

/// Per-thread results.
struct Tally {
    hist: [Histogram<u64>; 3],
    series: [Vec<u64>; 3],
    ops: u64,
    bytes: u64,
    reads: u64,
    found: u64,
    writes: u64,
    deletes: u64,
    written: u64,
    busy: f64,
    message: String,
    counted: bool,
}

impl Tally {
    fn new(counted: bool) -> CliResult<Tally> {
        Ok(Tally {
            hist: [new_hist(3)?, new_hist(3)?, new_hist(3)?],
            series: [Vec::new(), Vec::new(), Vec::new()],
            ops: 0,
            bytes: 0,
            reads: 0,
            found: 0,
            writes: 0,
            deletes: 0,
            written: 0,
            busy: 0.0,
            message: String::new(),
            counted,
        })
    }
}

/// Latency of the current interval of one thread, merged into the shared per-interval
/// histograms when the thread moves on (so memory grows with intervals, not threads).
struct IntervalRec<'a> {
    idx: usize,
    h: [Histogram<u64>; 3],
    dirty: bool,
    shared: &'a Mutex<Vec<[Histogram<u64>; 3]>>,
}

impl<'a> IntervalRec<'a> {
    fn new(shared: &'a Mutex<Vec<[Histogram<u64>; 3]>>) -> CliResult<IntervalRec<'a>> {
        Ok(IntervalRec {
            idx: 0,
            h: [new_hist(2)?, new_hist(2)?, new_hist(2)?],
            dirty: false,
            shared,
        })
    }

    fn flush(&mut self) -> CliResult<()> {
        if !self.dirty {
            return Ok(());
        }
        let mut g = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        while g.len() <= self.idx {
            g.push([new_hist(2)?, new_hist(2)?, new_hist(2)?]);
        }
        for k in 0..3 {
            let _ = g[self.idx][k].add(&self.h[k]);
            self.h[k].reset();
        }
        self.dirty = false;
        Ok(())
    }
}

struct Ctx<'a> {
    db: &'a Db,
    spec: &'a Spec,
    progress: &'a Progress,
    start: Instant,
    deadline: Option<Instant>,
    readers_left: AtomicU64,
    abort: AtomicBool,
    values: &'a [u8],
    intervals: Mutex<Vec<[Histogram<u64>; 3]>>,
}

impl Ctx<'_> {
    fn interval_of(&self, t: Instant) -> usize {
        (t.duration_since(self.start).as_secs_f64() / self.spec.interval) as usize
    }

    /// One latency sample of `kind` from `t0` to `t1`, covering `n` operations of the
    /// per-interval series (a multireadrandom batch is one sample of `batch` reads, as
    /// db_bench records it).
    #[allow(clippy::too_many_arguments)]
    fn record(
        &self,
        tl: &mut Tally,
        iv: &mut IntervalRec,
        kind: usize,
        t0: Instant,
        t1: Instant,
        n: u64,
    ) -> CliResult<()> {
        let ns = (t1.duration_since(t0).as_nanos() as u64).max(1);
        tl.hist[kind].saturating_record(ns);
        let i = self.interval_of(t1);
        if i != iv.idx {
            iv.flush()?;
            iv.idx = i;
        }
        iv.h[kind].saturating_record(ns);
        iv.dirty = true;
        let s = &mut tl.series[kind];
        if s.len() <= i {
            s.resize(i + 1, 0);
        }
        s[i] += n;
        Ok(())
    }

    fn over(&self, t: Instant, i: u64, limit: u64) -> bool {
        if self.abort.load(Relaxed) {
            return true;
        }
        match self.deadline {
            Some(d) if self.spec.bench.timed() => t >= d,
            _ => i >= limit,
        }
    }

    /// One thread of the benchmark. `role_writer`: readwhilewriting's background writer.
    fn thread(&self, seed: u64, role_writer: bool) -> CliResult<Tally> {
        let sp = self.spec;
        let mut tl = Tally::new(!role_writer)?;
        let mut iv = IntervalRec::new(&self.intervals)?;
        let mut rng = Mt64::new(seed);
        let mut key = vec![0u8; sp.key_size];
        // Values are windows of a shared random buffer, as db_bench's RandomGenerator.
        let mut vpos = (SplitMix64::new(seed).next_u64() as usize) % self.values.len().max(1);
        let vlen = sp.value_size;
        let mut next_value = |vals: &'_ [u8]| -> (usize, usize) {
            if vpos + vlen > vals.len() {
                vpos = 0;
            }
            let r = (vpos, vpos + vlen);
            vpos += vlen.max(1);
            r
        };
        let mut ticker = Ticker::new(self.progress);
        let t_start = Instant::now();
        let mut now = t_start;
        let mut i = 0u64;
        let (mut batch_reads, mut batch_writes) = (0u32, 0u32);
        loop {
            let b = sp.bench;
            if role_writer {
                if self.readers_left.load(Relaxed) == 0 || self.abort.load(Relaxed) {
                    break;
                }
            } else {
                let limit = match b {
                    Bench::Readrandom | Bench::Readwhilewriting | Bench::Multireadrandom => {
                        sp.reads
                    }
                    Bench::Readrandomwriterandom => sp.readwrites,
                    Bench::Deleterandom => sp.num,
                    _ => sp.writes,
                };
                if self.over(now, i, limit) {
                    break;
                }
            }
            let k = match b {
                Bench::Fillseq => i % sp.num.max(1),
                _ => sp.next_key(&mut rng),
            };
            fmt_key(&mut key, k);
            // What to do: rrwr mixes in batches of 100, reads first, as db_bench does.
            let kind = if role_writer {
                WRITE
            } else {
                match b {
                    Bench::Fillseq | Bench::Fillrandom | Bench::Overwrite => WRITE,
                    Bench::Readrandom | Bench::Readwhilewriting | Bench::Multireadrandom => READ,
                    Bench::Deleterandom => DELETE,
                    Bench::Readrandomwriterandom => {
                        if batch_reads == 0 && batch_writes == 0 {
                            batch_reads = sp.readwritepercent;
                            batch_writes = 100 - sp.readwritepercent;
                        }
                        if batch_reads > 0 {
                            batch_reads -= 1;
                            READ
                        } else {
                            batch_writes -= 1;
                            WRITE
                        }
                    }
                }
            };
            let t0 = Instant::now();
            match kind {
                READ => {
                    let got = self
                        .db
                        .get(&key)
                        .map_err(|e| CliError::new(format!("{}: get failed: {e}", b.name())))?;
                    now = Instant::now();
                    tl.reads += 1;
                    if let Some(v) = got {
                        tl.found += 1;
                        if matches!(b, Bench::Readrandom | Bench::Readwhilewriting) {
                            tl.bytes += (key.len() + v.len()) as u64;
                        }
                    }
                }
                WRITE => {
                    let (a, z) = next_value(self.values);
                    self.db
                        .put(&key, &self.values[a..z])
                        .map_err(|e| CliError::new(format!("{}: put failed: {e}", b.name())))?;
                    now = Instant::now();
                    tl.writes += 1;
                    tl.written += (key.len() + vlen) as u64;
                    if !role_writer && b != Bench::Readrandomwriterandom {
                        tl.bytes += (key.len() + vlen) as u64;
                    }
                }
                _ => {
                    self.db
                        .delete(&key)
                        .map_err(|e| CliError::new(format!("{}: delete failed: {e}", b.name())))?;
                    now = Instant::now();
                    tl.deletes += 1;
                }
            }
            self.record(&mut tl, &mut iv, kind, t0, now, 1)?;
            i += 1;
            if tl.counted {
                tl.ops += 1;
                ticker.tick(1);
            }
        }
        iv.flush()?;
        ticker.flush();
        tl.busy = t_start.elapsed().as_secs_f64();
        tl.message = match sp.bench {
            Bench::Readrandom | Bench::Readwhilewriting | Bench::Multireadrandom => {
                format!("({} of {} found)", tl.found, tl.reads)
            }
            Bench::Readrandomwriterandom => format!(
                "( reads:{} writes:{} total:{} found:{})",
                tl.reads, tl.writes, sp.readwrites, tl.found
            ),
            _ => String::new(),
        };
        Ok(tl)
    }
    /// One thread of multireadrandom, as db_bench's `MultiReadRandom`: per batch one
    /// draw to pick a database, then one draw per key (key = draw % num); the batch goes
    /// to `Db::get_many` as one call, and its latency is one sample, as db_bench records
    /// it. Without --duration a thread runs the batches that fit in --reads keys.
    fn multiread_thread(&self, seed: u64) -> CliResult<Tally> {
        let sp = self.spec;
        let b = sp.batch.max(1);
        let mut tl = Tally::new(true)?;
        let mut iv = IntervalRec::new(&self.intervals)?;
        let mut rng = Mt64::new(seed);
        let mut keys = vec![vec![0u8; sp.key_size]; b as usize];
        let mut ticker = Ticker::new(self.progress);
        let t_start = Instant::now();
        let mut now = t_start;
        while !self.over(now, tl.ops + b - 1, sp.reads) {
            let _db = rng.next_u64();
            for k in keys.iter_mut() {
                let n = match &sp.skew {
                    Some(g) => g.next(&mut rng),
                    None => rng.next_u64() % sp.num.max(1),
                };
                fmt_key(k, n);
            }
            let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            let t0 = Instant::now();
            let got = self
                .db
                .get_many(&refs)
                .map_err(|e| CliError::new(format!("multireadrandom: get_many failed: {e}")))?;
            now = Instant::now();
            for (k, v) in keys.iter().zip(&got) {
                if let Some(v) = v {
                    tl.found += 1;
                    tl.bytes += (k.len() + v.len()) as u64;
                }
            }
            tl.reads += b;
            tl.ops += b;
            self.record(&mut tl, &mut iv, READ, t0, now, b)?;
            ticker.tick(b);
        }
        iv.flush()?;
        ticker.flush();
        tl.busy = t_start.elapsed().as_secs_f64();
        tl.message = format!("({} of {} found)", tl.found, tl.reads);
        Ok(tl)
    }
}

/// Run one benchmark on `db` with one generator seed per thread (readwhilewriting: one
/// more, for its writer, first).
pub fn run(db: &Db, sp: &Spec, seeds: &[u64], values: &[u8]) -> CliResult<Outcome> {
    let rww = sp.bench == Bench::Readwhilewriting;
    let per_thread = match sp.bench {
        Bench::Readrandom | Bench::Readwhilewriting | Bench::Multireadrandom => sp.reads,
        Bench::Readrandomwriterandom => sp.readwrites,
        Bench::Deleterandom => sp.num,
        _ => sp.writes,
    };
    let timed = sp.duration > 0.0 && sp.bench.timed();
    let progress = Progress::start(
        sp.bench.name(),
        timed.then_some(sp.duration),
        per_thread * sp.threads as u64,
    );
    let start = progress.started();
    let ctx = Ctx {
        db,
        spec: sp,
        progress: &progress,
        start,
        deadline: timed.then(|| start + Duration::from_secs_f64(sp.duration)),
        readers_left: AtomicU64::new(sp.threads as u64),
        abort: AtomicBool::new(false),
        values,
        intervals: Mutex::new(Vec::new()),
    };
    let results = run_threads(seeds.len(), &progress, "a benchmark thread panicked", |t| {
        let (ctx, seed) = (&ctx, seeds[t]);
        let writer = rww && t == 0;
        let r = if sp.bench == Bench::Multireadrandom {
            ctx.multiread_thread(seed)
        } else {
            ctx.thread(seed, writer)
        };
        if r.is_err() {
            ctx.abort.store(true, Relaxed);
        }
        if !writer {
            ctx.readers_left.fetch_sub(1, Relaxed);
        }
        r
    });
    let seconds = progress.finish();
    let mut hist = [new_hist(3)?, new_hist(3)?, new_hist(3)?];
    let mut series: [Vec<u64>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    let (mut ops, mut bytes, mut reads, mut found, mut writes, mut deletes, mut written) =
        (0, 0, 0, 0, 0, 0, 0);
    let mut busy = 0.0;
    let mut message: Option<String> = None;
    for r in results {
        let t = r?;
        for k in 0..3 {
            hist[k]
                .add(&t.hist[k])
                .map_err(|e| CliError::new(format!("merging histograms: {e:?}")))?;
            if series[k].len() < t.series[k].len() {
                series[k].resize(t.series[k].len(), 0);
            }
            for (a, b) in series[k].iter_mut().zip(&t.series[k]) {
                *a += b;
            }
        }
        reads += t.reads;
        found += t.found;
        writes += t.writes;
        deletes += t.deletes;
        written += t.written;
        if t.counted {
            ops += t.ops;
            bytes += t.bytes;
            busy += t.busy;
            // db_bench keeps the message of the first thread it merges.
            if message.is_none() {
                message = Some(t.message);
            }
        }
    }
    let mut extra = String::new();
    if bytes > 0 {
        extra = format!("{:6.1} MB/s", bytes as f64 / 1048576.0 / seconds.max(1e-9));
    }
    if let Some(m) = message.filter(|m| !m.is_empty()) {
        if !extra.is_empty() {
            extra.push(' ');
        }
        extra.push_str(&m);
    }
    let shown = ops.max(1);
    let summary = Summary {
        name: sp.bench.name().to_string(),
        micros_per_op: busy * 1e6 / shown as f64,
        ops_per_sec: (shown as f64 / seconds.max(1e-9)) as u64,
        seconds,
        operations: ops,
        extra,
    };
    let interval_hist =
        std::mem::take(&mut *ctx.intervals.lock().unwrap_or_else(|e| e.into_inner()));
    Ok(Outcome {
        summary,
        hist,
        series,
        interval_hist,
        seconds,
        ops,
        reads,
        found,
        writes,
        deletes,
        user_bytes_written: written,
    })
}
