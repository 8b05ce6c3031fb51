//! `masse migrate`: copy every record of one pool into another, in one process.
//!
//! What `masse dump` from the old pool piped into `masse load` on a new one does,
//! without the pipe: the records come from [`Db::iter`] on the source, every
//! layer's (key-value keys, the file layer's and the block layer's internal
//! records), and go to the destination through the same atomic batches as `load`
//! ([`crate::data::Batcher`]). The destination is made beforehand with
//! `masse create`, with whatever geometry (and this build's format) the user
//! wants, and must be empty unless `--force`. The source is only read: nothing is
//! written to it but what opening and closing any pool writes (an epoch, a
//! checkpoint, crash recovery if it was not closed), and its background GC is off.
//! Afterwards the destination is closed, reopened and checked, and the key counts
//! compared.

use crate::data::{bar, BatchError, Batcher};
use crate::error::{CliError, CliResult, EXIT_CHECK_FAILED};
use crate::pool::{pool_flags, PoolArgs};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use masse::format::{Superblock, SuperblockProbe, SUPERBLOCK_SIZE};
use masse::index::KeyDigest;
use masse::{CheckReport, Db, Options};
use masse_cli::units::fmt_bytes;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// A pool named in one argument: `fast=PATH,capacity=PATH[,capacity=PATH...]`, the
/// form of the C API's pool specs and the RocksDB plugin's `masse://` URIs.
#[derive(Clone, Debug)]
pub struct PoolSpec {
    pub fast: Option<PathBuf>,
    pub capacity: Vec<PathBuf>,
}

/// Parse `[masse://]fast=PATH,capacity=PATH[,capacity=PATH...]`.
pub fn parse_spec(s: &str) -> Result<PoolSpec, String> {
    let body = s.strip_prefix("masse://").unwrap_or(s);
    let mut spec = PoolSpec {
        fast: None,
        capacity: Vec::new(),
    };
    for part in body.split(',').filter(|p| !p.trim().is_empty()) {
        let Some((k, v)) = part.split_once('=') else {
            return Err(format!(
                "`{part}` is not key=value: name a pool as fast=PATH,capacity=PATH \
                 (capacity=PATH alone for a pool without a fast tier)"
            ));
        };
        if v.is_empty() {
            return Err(format!("`{part}`: the path is empty"));
        }
        match k.trim() {
            "fast" if spec.fast.is_some() => return Err("fast= is given twice".into()),
            "fast" => spec.fast = Some(PathBuf::from(v)),
            "capacity" => spec.capacity.push(PathBuf::from(v)),
            other => {
                return Err(format!(
                    "unknown key `{other}` (a pool is named by fast= and capacity=, the \
                     latter repeated for several devices; sizes and geometry belong to \
                     `masse create`)"
                ))
            }
        }
    }
    if spec.capacity.is_empty() {
        return Err("no capacity= device: name a pool as fast=PATH,capacity=PATH".into());
    }
    Ok(spec)
}

#[derive(Args, Debug)]
pub struct MigrateArgs {
    /// The pool to copy from, left as it is: fast=PATH,capacity=PATH (repeat
    /// capacity=PATH for each capacity device, in the order of `masse create`; omit
    /// fast= for a pool without a fast tier). It may be of any format version this
    /// build opens (1 to 5); the new pool is of the newest.
    #[arg(long, value_name = "POOL", value_parser = parse_spec)]
    pub from: PoolSpec,

    /// The pool to copy into, in the same form. Create it first with `masse create`
    /// (any mode, segment and band size, devices); it gets this build's format
    /// version and its own keyed digest. It must hold no keys unless --force.
    #[arg(long, value_name = "POOL", value_parser = parse_spec)]
    pub to: PoolSpec,

    /// Copy into a destination that already holds keys: keys of the same name are
    /// overwritten, the others kept (what `masse load` does). Also completes an
    /// interrupted migrate. Default: refuse a destination that is not empty.
    #[arg(long)]
    pub force: bool,

    /// Records per atomic batch (also capped by the engine's largest batch), as for
    /// `masse load`. Default: 1024.
    #[arg(long, value_name = "N", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: u64,

    /// Print the summary as pretty-printed JSON on standard output instead of text on
    /// stderr. Default: text.
    #[arg(long)]
    pub json: bool,

    /// Use pread/pwrite system calls instead of io_uring, on both pools. Default:
    /// io_uring when the kernel allows it, else pread/pwrite automatically.
    #[arg(long, help_heading = "Pool devices")]
    pub pread: bool,

    /// Do not use O_DIRECT on either pool (testing only). Default: O_DIRECT wherever
    /// the filesystem accepts it.
    #[arg(long, help_heading = "Pool devices")]
    pub buffered: bool,
}

impl MigrateArgs {
    fn pool(&self, s: &PoolSpec) -> PoolArgs {
        PoolArgs {
            fast: s.fast.clone(),
            capacity: s.capacity.clone(),
            pread: self.pread,
            buffered: self.buffered,
            ..Default::default()
        }
    }
}

/// Which pool of a migrate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Source,
    Destination,
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Side::Source => "the source pool (--from)",
            Side::Destination => "the destination pool (--to)",
        })
    }
}

/// Why a migrate was refused or stopped. Every refusal happens before any record is
/// written to the destination; no record is ever written to the source.
#[derive(Debug)]
pub enum MigrateError {
    /// --from and --to name the same pool: a device in common, or the same pool id
    /// (e.g. a copy of the pool's files).
    SamePool(String),
    /// The destination holds keys and --force was not given.
    NotEmpty { keys: u64, flags: String },
    /// A pool could not be opened: missing, busy, foreign, too new, devices that do
    /// not form one pool.
    Open { side: Side, msg: String },
    /// Copying stopped; the destination holds the first `committed` records copied.
    /// `why`: what the user can do about it.
    Copy {
        committed: u64,
        msg: String,
        why: Stopped,
    },
    /// Closing a pool failed.
    Close { side: Side, msg: String },
    /// The destination could not be reopened or checked after the copy.
    Verify(String),
}

impl std::fmt::Display for MigrateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MigrateError::SamePool(why) => write!(
                f,
                "--from and --to name the same pool ({why}); migrate copies into another \
                 pool: create it with `masse create` on other devices"
            ),
            MigrateError::NotEmpty { keys, flags } => write!(
                f,
                "the destination pool (--to) is not empty: it holds {keys} keys; migrate \
                 into a newly created pool (`masse create --force{flags}` formats it anew, \
                 losing those keys), or give --force to merge into it (keys of the same \
                 name are overwritten). Nothing was written"
            ),
            MigrateError::Open { side, msg } => write!(f, "cannot open {side}: {msg}"),
            MigrateError::Copy {
                committed,
                msg,
                why,
            } => {
                write!(
                    f,
                    "copying stopped: {msg}; the destination holds the first {committed} \
                     records copied (each batch is atomic), the source is unchanged. "
                )?;
                f.write_str(why.advice())
            }
            MigrateError::Close { side, msg } => write!(f, "closing {side}: {msg}"),
            MigrateError::Verify(msg) => write!(f, "verifying the destination: {msg}"),
        }
    }
}

/// Why a copy stopped, for the advice that follows the error.
#[derive(Debug)]
pub enum Stopped {
    /// The destination ran out of space.
    Full,
    /// A record or batch is larger than the destination's geometry allows.
    TooLarge,
    /// A record of the source could not be read (damage): a rerun stops there too.
    SourceDamaged,
    /// Anything else (an I/O error, say): a rerun may get past it.
    Other,
}

impl Stopped {
    fn advice(&self) -> &'static str {
        match self {
            Stopped::Full => {
                "The destination is too small for the source's records: create it again \
                 larger (masse create --force) and run migrate again"
            }
            Stopped::TooLarge => {
                "A record or batch is larger than the destination's geometry takes (its \
                 bands or its fast tier): create it with larger bands or a larger fast \
                 tier, or run migrate again with a smaller --batch"
            }
            Stopped::SourceDamaged => {
                "The source holds a damaged record: see `masse check` on the source (a \
                 rerun would stop at the same record)"
            }
            Stopped::Other => {
                "Run the same migrate with --force to complete it (records already copied \
                 are written again with the same values), or recreate the destination"
            }
        }
    }
}

impl From<MigrateError> for CliError {
    fn from(e: MigrateError) -> CliError {
        CliError::new(e.to_string())
    }
}

/// What the first device of a pool says about it, read before the pool is opened.
#[derive(Clone, Debug, serde::Serialize)]
struct PoolFacts {
    devices: Vec<String>,
    mode: String,
    format_version: Option<u32>,
    key_digest: Option<&'static str>,
    pool_id: Option<String>,
    /// Live keys: in the source when the copy began, in the destination before it.
    keys_before: u64,
}

fn devices(p: &PoolArgs) -> Vec<&Path> {
    p.fast
        .iter()
        .chain(p.capacity.iter())
        .map(|p| p.as_path())
        .collect()
}

/// The first superblock copy that decodes, of the pool's first device.
fn superblock(p: &PoolArgs) -> Option<Superblock> {
    use std::os::unix::fs::FileExt;
    let dev = devices(p).into_iter().next()?;
    let f = std::fs::File::open(dev).ok()?;
    let mut b = vec![0u8; 2 * SUPERBLOCK_SIZE];
    f.read_exact_at(&mut b, 0).ok()?;
    b.chunks(SUPERBLOCK_SIZE)
        .find_map(|c| match Superblock::decode(c) {
            SuperblockProbe::Found(sb) => Some(sb),
            _ => None,
        })
}

fn facts(p: &PoolArgs, sb: Option<&Superblock>) -> PoolFacts {
    PoolFacts {
        devices: devices(p).iter().map(|d| d.display().to_string()).collect(),
        mode: sb.map_or("?", |s| s.geometry.mode.name()).to_string(),
        format_version: sb.map(|s| s.version),
        key_digest: sb.map(|s| match s.key_digest {
            KeyDigest::Xxh3 => "unkeyed XXH3",
            KeyDigest::Keyed(_) => "keyed SipHash-2-4",
        }),
        pool_id: sb.map(|s| format!("{:032x}", s.pool_id)),
        keys_before: 0,
    }
}

/// A device named in both pools (the same file or block device under any path).
fn shared_device(from: &PoolArgs, to: &PoolArgs) -> Option<String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let id = |p: &Path| -> Option<(bool, u64, u64)> {
        let m = std::fs::metadata(p).ok()?;
        Some(if m.file_type().is_block_device() {
            (true, 0, m.rdev())
        } else {
            (false, m.dev(), m.ino())
        })
    };
    for a in devices(from) {
        for b in devices(to) {
            let same = match (id(a), id(b)) {
                (Some(x), Some(y)) => x == y,
                _ => a == b,
            };
            if same {
                return Some(if a == b {
                    format!("both name {}", a.display())
                } else {
                    format!("{} and {} are the same device", a.display(), b.display())
                });
            }
        }
    }
    None
}

fn open(side: Side, pool: &PoolArgs, opts: Options) -> Result<Db, MigrateError> {
    let fail = |msg: String| MigrateError::Open { side, msg };
    // open_config names devices by their flags; here they are spec keys.
    let cfg = pool.open_config().map_err(|e| {
        let m = e.msg;
        fail(
            match (m.strip_prefix("--fast "), m.strip_prefix("--capacity ")) {
                (Some(rest), _) => format!("fast={rest}"),
                (_, Some(rest)) => format!("capacity={rest}"),
                _ => m,
            },
        )
    })?;
    Db::open(&cfg, opts).map_err(|e| {
        let hint = match (&e, side) {
            (masse::Error::Busy { .. }, _) => {
                ". Stop the process that has it open (its NBD export, mount or server) and \
                 run migrate again"
                    .to_string()
            }
            (masse::Error::NotMasse { .. }, Side::Destination) => format!(
                " (the destination is made first: `masse create{}` with the sizes and \
                 geometry you want)",
                pool_flags(pool.fast.as_deref(), &pool.capacity)
            ),
            (masse::Error::FormatTooNew { .. }, Side::Source) => {
                ". Migrate it with a masse build that reads its format".to_string()
            }
            _ => String::new(),
        };
        fail(format!("{e}{hint}"))
    })
}

/// A spinner on stderr for work of unknown length (hidden without a terminal).
fn spinner(msg: &'static str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(5));
    if let Ok(s) = ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}") {
        pb.set_style(s);
    }
    pb.set_message(msg);
    pb.enable_steady_tick(std::time::Duration::from_millis(200));
    pb
}

/// What the copy did.
struct Copied {
    records: u64,
    bytes: u64,
    secs: f64,
    source_keys: u64,
    dest_before: u64,
    /// Source keys the destination held already (--force into a pool with keys).
    overlap: u64,
}

/// Copy every record of `src` into the destination, which this opens, checks for
/// emptiness, and closes again (also after a failure, so what was committed stays).
/// Open the destination once to refuse it early: unopenable, or holding keys
/// without `--force`. `copy` checks again (the pool may change meanwhile).
fn preflight_destination(to: &PoolArgs, a: &MigrateArgs) -> Result<(), MigrateError> {
    let dst = open(Side::Destination, to, Options::default())?;
    let keys = dst.key_count();
    let closed = dst.close();
    if keys > 0 && !a.force {
        return Err(MigrateError::NotEmpty {
            keys,
            flags: pool_flags(to.fast.as_deref(), &to.capacity),
        });
    }
    closed.map_err(|e| MigrateError::Close {
        side: Side::Destination,
        msg: format!("{e} (before copying: nothing was written)"),
    })
}

fn copy(src: &Db, to: &PoolArgs, a: &MigrateArgs) -> Result<Copied, MigrateError> {
    let source_keys = src.key_count();
    let opts = Options {
        expected_keys: source_keys as usize,
        ..Options::default()
    };
    let dst = open(Side::Destination, to, opts)?;
    let dest_before = dst.key_count();
    if dest_before > 0 && !a.force {
        let _ = dst.close();
        return Err(MigrateError::NotEmpty {
            keys: dest_before,
            flags: pool_flags(to.fast.as_deref(), &to.capacity),
        });
    }
    let t0 = Instant::now();
    let pb = bar(source_keys, "migrate", "{human_pos}/{human_len} records");
    let mut out = Batcher::new(Some(&dst), a.batch);
    let mut overlap = 0u64;
    let stop = |committed: u64, msg: String, why: Stopped| MigrateError::Copy {
        committed,
        msg,
        why,
    };
    // The source is read on a thread of its own while the batches are written, as
    // `dump | load` read and write in two processes at once. Records go over in
    // chunks, a few at a time, so memory stays bounded whatever the values' sizes.
    let r = std::thread::scope(|scope| -> Result<(), MigrateError> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<masse::Result<Chunk>>(4);
        scope.spawn(move || read_source(src, &tx));
        for chunk in rx {
            let chunk = chunk.map_err(|e| {
                let why = match e {
                    masse::Error::Corruption(_) => Stopped::SourceDamaged,
                    _ => Stopped::Other,
                };
                stop(out.committed, format!("reading the source pool: {e}"), why)
            })?;
            for (k, v) in chunk {
                // Source keys are distinct, so before the copy writes a key this
                // says whether the destination held it already.
                if dest_before > 0 && dst.may_contain(&k).unwrap_or(false) {
                    overlap += 1;
                }
                let wrote = out.add(&k, &v);
                wrote.map_err(|e| batch_stop(e, Some(&k), out.committed))?;
                pb.inc(1);
            }
        }
        out.finish()
            .map_err(|e| batch_stop(e, None, out.committed))?;
        dst.flush().map_err(|e| {
            let msg = format!("flushing the destination pool: {e}");
            stop(out.committed, msg, Stopped::Other)
        })
    });
    pb.finish_and_clear();
    let (records, bytes) = (out.committed, out.bytes);
    drop(out);
    let closed = dst.close();
    r?;
    closed.map_err(|e| MigrateError::Close {
        side: Side::Destination,
        msg: format!(
            "{e}; every record was copied and acknowledged before it: run `masse check` \
             on the destination"
        ),
    })?;
    Ok(Copied {
        records,
        bytes,
        secs: t0.elapsed().as_secs_f64(),
        source_keys,
        dest_before,
        overlap,
    })
}

/// Records read from the source, handed to the writing side together.
type Chunk = Vec<(Vec<u8>, Vec<u8>)>;

/// Send every record of the source in chunks of at most 1024 records or about
/// 1 MiB; the first read error ends it. Stops early when the writing side has.
fn read_source(src: &Db, tx: &std::sync::mpsc::SyncSender<masse::Result<Chunk>>) {
    let (mut chunk, mut bytes) = (Chunk::new(), 0usize);
    for r in src.iter() {
        match r {
            Ok((k, v)) => {
                bytes += k.len() + v.len();
                chunk.push((k, v));
            }
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        }
        if chunk.len() >= 1024 || bytes >= 1 << 20 {
            bytes = 0;
            if tx.send(Ok(std::mem::take(&mut chunk))).is_err() {
                return;
            }
        }
    }
    if !chunk.is_empty() {
        let _ = tx.send(Ok(chunk));
    }
}

fn batch_stop(e: BatchError, key: Option<&[u8]>, committed: u64) -> MigrateError {
    let why = match e {
        BatchError::Write(masse::Error::NoSpace(_)) => Stopped::Full,
        BatchError::Write(masse::Error::TooLarge { .. }) => Stopped::TooLarge,
        _ => Stopped::Other,
    };
    let msg = match e {
        BatchError::Record(e) => {
            let k = key.unwrap_or_default();
            let shown = k[..k.len().min(64)].escape_ascii();
            format!("the source's key \"{shown}\": {e}")
        }
        BatchError::Write(e) => format!("writing to the destination pool: {e}"),
    };
    MigrateError::Copy {
        committed,
        msg,
        why,
    }
}

/// The machine-readable summary (`--json`).
#[derive(serde::Serialize)]
struct Summary {
    /// Check clean and every count as expected.
    ok: bool,
    records: u64,
    bytes: u64,
    seconds: f64,
    records_per_sec: f64,
    mb_per_sec: f64,
    source: PoolFacts,
    destination: PoolFacts,
    /// Source keys the destination held before (only with --force).
    overlapping_keys: u64,
    /// Keys the destination should hold: its keys before + records - overlapping.
    expected_keys: u64,
    /// Live keys the check found in the reopened destination.
    destination_keys: u64,
    counts_match: bool,
    check_seconds: f64,
    check: CheckReport,
}

pub fn run(a: &MigrateArgs) -> CliResult<i32> {
    let (from, to) = (a.pool(&a.from), a.pool(&a.to));
    if let Some(why) = shared_device(&from, &to) {
        return Err(MigrateError::SamePool(why).into());
    }
    let (src_sb, dst_sb) = (superblock(&from), superblock(&to));
    if let (Some(s), Some(d)) = (&src_sb, &dst_sb) {
        if s.pool_id == d.pool_id {
            return Err(MigrateError::SamePool(format!(
                "both hold pool id {:032x}: a copy of the same pool's devices",
                s.pool_id
            ))
            .into());
        }
    }
    let (mut src_facts, mut dst_facts) =
        (facts(&from, src_sb.as_ref()), facts(&to, dst_sb.as_ref()));
    // The destination's refusals come before the source is opened: the first
    // open of an older pool by this build may scan its whole log.
    preflight_destination(&to, a)?;

    // The source is only read: no background GC moves its records meanwhile.
    let src_opts = Options {
        background_gc: false,
        ..Options::default()
    };
    let src = open(Side::Source, &from, src_opts)?;
    let copied = copy(&src, &to, a);
    let closed = src.close();
    let c = copied?;
    closed.map_err(|e| MigrateError::Close {
        side: Side::Source,
        msg: format!("{e} (every record was copied and the destination closed)"),
    })?;
    src_facts.keys_before = c.source_keys;
    dst_facts.keys_before = c.dest_before;

    // Reopen the destination as any later command will, and check it.
    let t1 = Instant::now();
    let dst = open(Side::Destination, &to, Options::default())?;
    let pb = spinner("checking the destination pool");
    let report = dst.check();
    pb.finish_and_clear();
    let closed = dst.close();
    let report = report.map_err(|e| MigrateError::Verify(format!("check failed: {e}")))?;
    closed.map_err(|e| MigrateError::Close {
        side: Side::Destination,
        msg: format!("{e} (after checking it)"),
    })?;
    let check_secs = t1.elapsed().as_secs_f64();

    let expected = c.dest_before + c.records - c.overlap;
    let counts_match = report.live_keys == expected && c.records == c.source_keys;
    let ok = counts_match && report.is_clean();
    let s = Summary {
        ok,
        records: c.records,
        bytes: c.bytes,
        seconds: c.secs,
        records_per_sec: c.records as f64 / c.secs.max(1e-9),
        mb_per_sec: c.bytes as f64 / c.secs.max(1e-9) / 1e6,
        source: src_facts,
        destination: dst_facts,
        overlapping_keys: c.overlap,
        expected_keys: expected,
        destination_keys: report.live_keys,
        counts_match,
        check_seconds: check_secs,
        check: report,
    };
    if a.json {
        let j = serde_json::to_string_pretty(&s)
            .map_err(|e| CliError::new(format!("cannot encode JSON: {e}")))?;
        println!("{j}");
    } else {
        eprint!("{}", summary_text(&s));
    }
    Ok(if ok { 0 } else { EXIT_CHECK_FAILED })
}

fn format_of(p: &PoolFacts) -> String {
    match (p.format_version, p.key_digest) {
        (Some(v), Some(d)) => format!("format {v} ({d} digest)"),
        _ => "format ?".to_string(),
    }
}

fn summary_text(s: &Summary) -> String {
    use std::fmt::Write;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "migrated {} records, {} of keys and values, in {:.2} s ({:.0} records/s, {:.1} MB/s)",
        s.records,
        fmt_bytes(s.bytes),
        s.seconds,
        s.records_per_sec,
        s.mb_per_sec
    );
    let _ = writeln!(
        t,
        "  {} {} pool -> {} {} pool",
        format_of(&s.source),
        s.source.mode,
        format_of(&s.destination),
        s.destination.mode
    );
    let (src_keys, before) = (s.source.keys_before, s.destination.keys_before);
    let _ = writeln!(
        t,
        "  keys: source {src_keys}, copied {}, destination {} (expected {}: {before} before{}) {}",
        s.records,
        s.destination_keys,
        s.expected_keys,
        if s.overlapping_keys > 0 || before > 0 {
            format!(", {} of the copied keys already there", s.overlapping_keys)
        } else {
            String::new()
        },
        if s.counts_match {
            "- counts match"
        } else {
            "- COUNTS DIFFER"
        }
    );
    let r = &s.check;
    let _ = writeln!(
        t,
        "  check of the reopened destination ({:.2} s): {} bands, {} segments, {} records; \
         {} live keys ({}), {} tombstones",
        s.check_seconds,
        r.bands_scanned,
        r.segments,
        r.records,
        r.live_keys,
        fmt_bytes(r.live_bytes),
        r.tombstones
    );
    for e in &r.errors {
        let _ = writeln!(t, "  error: {e}");
    }
    let _ = writeln!(
        t,
        "{}",
        match (r.is_clean(), s.counts_match) {
            (true, true) => "destination is consistent; the source was left as it was",
            (false, _) => "migrate FAILED: the check found problems in the destination",
            (true, false) => "migrate FAILED: the destination's key count is not the expected one",
        }
    );
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_specs() {
        let s = parse_spec("fast=/dev/shm/f,capacity=/var/tmp/c").unwrap();
        assert_eq!(s.fast.as_deref(), Some(Path::new("/dev/shm/f")));
        assert_eq!(s.capacity, vec![PathBuf::from("/var/tmp/c")]);
        let s = parse_spec("masse://capacity=/a,capacity=/b").unwrap();
        assert!(s.fast.is_none());
        assert_eq!(s.capacity.len(), 2);
        for bad in [
            "/var/tmp/c",
            "fast=/f",
            "fast=/f,fast=/g,capacity=/c",
            "capacity=/c,capacity_size=1G",
            "capacity=",
            "",
        ] {
            assert!(parse_spec(bad).is_err(), "{bad:?} accepted");
        }
    }
}
