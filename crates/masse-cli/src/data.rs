//! Data in and out of a pool: `scan`, `dump`, `load`, `volume list|create|delete`.
//!
//! `dump` writes every record of the pool, the file and block layers' internal
//! records included, as they are, to the stream of [`crate::dumpfmt`]; `load` puts
//! them back into any pool, whatever its geometry. Loading is atomic per batch:
//! each batch of records is one `Db::write`, so after an interruption the pool
//! holds exactly the first N records of the stream, N printed, and `--skip N`
//! resumes (reloading a record is harmless too: it rewrites the same value).
//! `masse migrate` (`crate::migrate`) writes through the same batches ([`Batcher`]).

use crate::cmds::{decode_hex, with_db};
use crate::dumpfmt::{DumpError, DumpReader, DumpWriter, Item};
use crate::error::{io_err, CliError, CliResult};
use crate::pool::PoolArgs;
use clap::{Args, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use masse::{vblock, vfile, Db, WriteBatch};
use std::io::{BufReader, BufWriter, IsTerminal, Read, Write};
use std::path::PathBuf;
use std::time::Instant;

/// Which records a listing covers.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    /// Key-value users' keys only.
    Kv,
    /// The file layer's records (`masse mount`): inodes, directory pages, file data.
    Files,
    /// The block layer's records (NBD volumes): the volume directory and chunks.
    Volumes,
    /// Everything.
    All,
}

fn layer_of(k: &[u8]) -> Layer {
    if vfile::is_file_layer_key(k) {
        Layer::Files
    } else if vblock::is_volume_key(k) {
        Layer::Volumes
    } else {
        Layer::Kv
    }
}

fn wanted(l: Layer, k: &[u8]) -> bool {
    l == Layer::All || layer_of(k) == l
}

#[derive(Args, Debug)]
pub struct ScanArgs {
    #[command(flatten)]
    pub pool: PoolArgs,
    /// Only keys starting with this (UTF-8, or hex bytes with --hex). Default: all keys.
    #[arg(long, value_name = "PREFIX")]
    pub prefix: Option<String>,
    /// Print keys and values (and read --prefix) as hex instead of text with escapes.
    #[arg(long)]
    pub hex: bool,
    /// Print values too. Default: keys only.
    #[arg(long)]
    pub values: bool,
    /// One JSON object per line: {"key": …, "value": …}, strings as in the text output
    /// (hex with --hex), plus "layer".
    #[arg(long)]
    pub json: bool,
    /// Which records: key-value keys, the file layer's, the block layer's, or all.
    #[arg(long, value_enum, default_value_t = Layer::Kv)]
    pub layer: Layer,
    /// Stop after this many keys. Default: no limit.
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
    /// Skip records that cannot be read (damage) instead of stopping at the first:
    /// each is reported on stderr, and the command exits 3 if any was skipped.
    #[arg(long)]
    pub salvage: bool,
}

/// Records `scan` and `dump --salvage` skipped because they could not be read.
#[derive(Default)]
struct Salvage {
    on: bool,
    skipped: u64,
}

impl Salvage {
    /// The pair, or `None` for a damaged record skipped in salvage mode.
    fn pair(
        &mut self,
        r: masse::Result<(Vec<u8>, Vec<u8>)>,
    ) -> CliResult<Option<(Vec<u8>, Vec<u8>)>> {
        match r {
            Ok(kv) => Ok(Some(kv)),
            Err(e) if self.on => {
                self.skipped += 1;
                if self.skipped <= 100 {
                    eprintln!("skipped a damaged record: {e}");
                }
                Ok(None)
            }
            Err(e) => Err(CliError::new(format!(
                "reading the pool: {e} (--salvage skips damaged records and goes on; \
                 `masse check` says what is damaged)"
            ))),
        }
    }

    /// Say what was skipped; the exit code.
    fn finish(&self) -> i32 {
        if self.skipped == 0 {
            return 0;
        }
        eprintln!(
            "salvage: {} damaged record(s) skipped; every other record was read",
            self.skipped
        );
        crate::error::EXIT_CHECK_FAILED
    }
}

fn show(b: &[u8], hex: bool) -> String {
    if hex {
        b.iter().map(|x| format!("{x:02x}")).collect()
    } else {
        b.escape_ascii().to_string()
    }
}

/// List keys (in no particular order: the index is a hash table).
pub fn scan(a: &ScanArgs) -> CliResult<i32> {
    let prefix = match &a.prefix {
        Some(p) if a.hex => decode_hex(p)?,
        Some(p) => p.as_bytes().to_vec(),
        None => Vec::new(),
    };
    let out = std::io::stdout();
    let mut out = BufWriter::new(out.lock());
    let mut sal = Salvage {
        on: a.salvage,
        skipped: 0,
    };
    let n = with_db(&a.pool, |db| {
        let mut n = 0u64;
        for r in db.iter() {
            let Some((k, v)) = sal.pair(r)? else {
                continue;
            };
            if !k.starts_with(&prefix) || !wanted(a.layer, &k) {
                continue;
            }
            if a.limit.is_some_and(|l| n >= l) {
                break;
            }
            n += 1;
            let line = scan_line(a, &k, &v);
            if writeln!(out, "{line}").is_err() {
                break; // stdout closed (e.g. piped into head): stop quietly
            }
        }
        Ok(n)
    })?;
    let _ = out.flush();
    if std::io::stderr().is_terminal() {
        eprintln!("{n} keys");
    }
    Ok(sal.finish())
}

fn scan_line(a: &ScanArgs, k: &[u8], v: &[u8]) -> String {
    if a.json {
        let mut o = serde_json::json!({ "key": show(k, a.hex) });
        if a.values {
            o["value"] = show(v, a.hex).into();
        }
        if a.layer != Layer::Kv {
            o["layer"] = format!("{:?}", layer_of(k)).to_lowercase().into();
        }
        return o.to_string();
    }
    match a.values {
        true => format!("{}\t{}", show(k, a.hex), show(v, a.hex)),
        false => show(k, a.hex),
    }
}

// ---------------------------------------------------------------------------

#[derive(Args, Debug)]
pub struct DumpArgs {
    #[command(flatten)]
    pub pool: PoolArgs,
    /// Write the stream to FILE (removed again if the dump fails). Default: standard output.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Which records to dump. Default: all (a full backup).
    #[arg(long, value_enum, default_value_t = Layer::All)]
    pub layer: Layer,
    /// Skip records that cannot be read (damage) instead of failing: the intact
    /// rest of the pool is dumped, each skipped record is reported on stderr, and
    /// the command exits 3 if any was skipped.
    #[arg(long)]
    pub salvage: bool,
}

/// A progress bar on stderr (hidden when stderr is not a terminal): records
/// against an estimate for `dump`, input bytes for `load`, records for `migrate`.
pub(crate) fn bar(total: u64, what: &str, unit: &str) -> ProgressBar {
    let pb = if std::io::stderr().is_terminal() {
        ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr_with_hz(5))
    } else {
        ProgressBar::hidden()
    };
    let t =
        format!("{what:>8} [{{elapsed_precise}}] [{{wide_bar}}] {unit} {{per_sec}} eta {{eta}}");
    if let Ok(s) = ProgressStyle::with_template(&t) {
        pb.set_style(s.progress_chars("=> "));
    }
    pb
}

/// Dump the pool to a stream; prints what it wrote and how fast on stderr.
pub fn dump(a: &DumpArgs) -> CliResult<i32> {
    if a.output.is_none() && std::io::stdout().is_terminal() {
        return Err(CliError::new(
            "the dump is binary: give --output FILE or redirect standard output",
        ));
    }
    let t0 = Instant::now();
    let mut sal = Salvage {
        on: a.salvage,
        skipped: 0,
    };
    let sal_ref = &mut sal;
    let r = with_db(&a.pool, |db| match &a.output {
        Some(p) => {
            let f = std::fs::File::create(p).map_err(|e| io_err("creating", p, e))?;
            let w = BufWriter::with_capacity(1 << 20, f);
            let r = dump_to(db, a.layer, w, sal_ref).and_then(|(n, b, w)| {
                let f = w.into_inner().map_err(|e| CliError::new(e.to_string()))?;
                f.sync_all().map_err(|e| io_err("syncing", p, e))?;
                Ok((n, b))
            });
            if r.is_err() {
                let _ = std::fs::remove_file(p);
            }
            r
        }
        None => dump_to(
            db,
            a.layer,
            BufWriter::new(std::io::stdout().lock()),
            sal_ref,
        )
        .map(|(n, b, _)| (n, b)),
    })?;
    let secs = t0.elapsed().as_secs_f64();
    eprintln!(
        "dumped {} records, {} of keys and values, in {secs:.2} s ({:.0} records/s, {:.1} MB/s)",
        r.0,
        masse_cli::units::fmt_bytes(r.1),
        r.0 as f64 / secs,
        r.1 as f64 / secs / 1e6
    );
    Ok(sal.finish())
}

fn dump_to<W: Write>(db: &Db, layer: Layer, out: W, sal: &mut Salvage) -> CliResult<(u64, u64, W)> {
    let st = db.stats();
    let meta = serde_json::json!({
        "tool": format!("masse {}", env!("CARGO_PKG_VERSION")),
        "created_unix": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        "layer": format!("{layer:?}").to_lowercase(),
        "source_geometry": format!("{:?}", db.geometry()),
        "source_live_bytes": st.live_bytes,
    });
    let werr = |e: std::io::Error| CliError::new(format!("writing the dump: {e}"));
    let mut w = DumpWriter::new(out, &meta).map_err(werr)?;
    // Index entries include tombstones: an upper bound on the records to dump.
    let pb = bar(st.index_entries, "dump", "{human_pos}/~{human_len} records");
    for r in db.iter() {
        let Some((k, v)) = sal.pair(r)? else {
            continue;
        };
        if wanted(layer, &k) {
            w.record(&k, &v).map_err(werr)?;
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    w.finish().map_err(werr)
}

// ---------------------------------------------------------------------------

#[derive(Args, Debug)]
pub struct LoadArgs {
    #[command(flatten)]
    pub pool: PoolArgs,
    /// Read the stream from FILE. Default: standard input.
    #[arg(long, short, value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// Skip the first N records of the stream (resume an interrupted load: the
    /// failed load prints N). They are still read and verified. Default: 0.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub skip: u64,
    /// Records per atomic batch (also capped by the engine's largest batch). Default: 1024.
    #[arg(long, value_name = "N", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: u64,
    /// Only read and verify the stream; do not open a pool or write anything.
    #[arg(long)]
    pub check_only: bool,
}

/// Load a stream into a pool, in atomic batches.
pub fn load(a: &LoadArgs) -> CliResult<i32> {
    let (inp, input_len): (Box<dyn Read>, u64) = match &a.input {
        Some(p) => {
            let f = std::fs::File::open(p).map_err(|e| io_err("opening", p, e))?;
            let len = f.metadata().map(|m| m.len()).unwrap_or(0);
            (Box::new(f), len)
        }
        None => (Box::new(std::io::stdin().lock()), 0),
    };
    let mut rd = DumpReader::new(BufReader::with_capacity(1 << 20, inp))
        .map_err(|e| CliError::new(format!("reading the dump: {e}")))?;
    let from = rd.meta.get("tool").and_then(|t| t.as_str()).unwrap_or("?");
    eprintln!("reading a dump written by {from}");
    let t0 = Instant::now();
    let (loaded, bytes) = if a.check_only {
        load_into(None, &mut rd, a, input_len)?
    } else {
        with_db(&a.pool, |db| load_into(Some(db), &mut rd, a, input_len))?
    };
    let secs = t0.elapsed().as_secs_f64();
    let verb = if a.check_only { "verified" } else { "loaded" };
    eprintln!(
        "{verb} {loaded} records ({} of keys and values; {} skipped) in {secs:.2} s \
         ({:.0} records/s, {:.1} MB/s); the stream's checksums and end frame match",
        masse_cli::units::fmt_bytes(bytes),
        a.skip.min(rd.records),
        loaded as f64 / secs,
        bytes as f64 / secs / 1e6
    );
    Ok(0)
}

/// Writes records to a pool in atomic batches: at most `max_records` records and
/// about half the engine's largest group (the batch also pays per-record headers),
/// each batch one `Db::write`. Without a pool it only counts. `load` and `migrate`
/// both write through it, so their batches are the same.
pub(crate) struct Batcher<'a> {
    db: Option<&'a Db>,
    max_records: u64,
    max_bytes: usize,
    batch: WriteBatch,
    batch_bytes: usize,
    /// Records in committed batches (all of them in the pool).
    pub committed: u64,
    /// Key and value bytes of the records added so far.
    pub bytes: u64,
}

/// Why [`Batcher`] stopped; nothing of the failed batch is in the pool.
#[derive(Debug)]
pub(crate) enum BatchError {
    /// The record cannot be stored (key or value length).
    Record(masse::Error),
    /// The pool refused or failed the batch's write.
    Write(masse::Error),
}

impl<'a> Batcher<'a> {
    pub fn new(db: Option<&'a Db>, max_records: u64) -> Batcher<'a> {
        Batcher {
            db,
            max_records,
            max_bytes: db.map_or(usize::MAX, |d| d.max_batch_bytes() / 2),
            batch: WriteBatch::new(),
            batch_bytes: 0,
            committed: 0,
            bytes: 0,
        }
    }

    /// Add a record; writes the batch when it is full. Returns whether a batch was
    /// written.
    pub fn add(&mut self, k: &[u8], v: &[u8]) -> Result<bool, BatchError> {
        let rec = k.len() + v.len() + 32;
        // A big record after a nearly full batch would make one the pool
        // refuses (TooLarge) though each record fits: write the batch first.
        let mut wrote = false;
        if !self.batch.is_empty() && self.batch_bytes + rec > self.max_bytes {
            self.commit()?;
            wrote = true;
        }
        self.batch.put(k, v).map_err(BatchError::Record)?;
        self.bytes += (k.len() + v.len()) as u64;
        self.batch_bytes += rec;
        if self.batch.len() as u64 >= self.max_records || self.batch_bytes >= self.max_bytes {
            self.commit()?;
            wrote = true;
        }
        Ok(wrote)
    }

    /// Write what is left. Returns whether there was anything.
    pub fn finish(&mut self) -> Result<bool, BatchError> {
        if self.batch.is_empty() {
            return Ok(false);
        }
        self.commit()?;
        Ok(true)
    }

    fn commit(&mut self) -> Result<(), BatchError> {
        let batch = std::mem::take(&mut self.batch);
        let n = batch.len() as u64;
        self.batch_bytes = 0;
        if let Some(db) = self.db {
            db.write(batch).map_err(BatchError::Write)?;
        }
        self.committed += n;
        Ok(())
    }
}

/// Read every record, writing those after `--skip` in batches; on failure the
/// error says how many records are in the pool and how to resume.
fn load_into<R: Read>(
    db: Option<&Db>,
    rd: &mut DumpReader<R>,
    a: &LoadArgs,
    input_len: u64,
) -> CliResult<(u64, u64)> {
    let what = if a.check_only { "verify" } else { "load" };
    let pb = bar(input_len, what, "{bytes}/{total_bytes}");
    let mut out = Batcher::new(db, a.batch);
    let fail = |committed: u64, what: String| {
        let resume = match db {
            Some(_) => format!("; the pool holds the stream's first {committed} records: resume with --skip {committed}"),
            None => String::new(),
        };
        CliError::new(format!("{what}{resume}"))
    };
    loop {
        let item = rd.next_item().map_err(|e: DumpError| {
            fail(a.skip + out.committed, format!("reading the dump: {e}"))
        })?;
        let end = matches!(item, Item::End);
        let wrote = match item {
            Item::Record(k, v) => {
                if rd.records <= a.skip {
                    continue;
                }
                out.add(&k, &v)
            }
            Item::End => out.finish(),
        };
        let wrote = wrote.map_err(|e| {
            let what = match e {
                BatchError::Record(e) => format!("record {}: {e}", rd.records - 1),
                BatchError::Write(e) => format!("writing to the pool: {e}"),
            };
            fail(a.skip + out.committed, what)
        })?;
        if wrote {
            pb.set_position(rd.offset);
        }
        if end {
            pb.finish_and_clear();
            if rd.records < a.skip {
                return Err(CliError::new(format!(
                    "--skip {} but the stream holds {} records",
                    a.skip, rd.records
                )));
            }
            return Ok((out.committed, out.bytes));
        }
    }
}

// ---------------------------------------------------------------------------

#[derive(Args, Debug)]
pub struct VolumeArgs {
    #[command(subcommand)]
    pub cmd: VolumeCmd,
}

#[derive(Subcommand, Debug)]
pub enum VolumeCmd {
    /// List the pool's NBD volumes: name, size, block and chunk size, id
    #[command(mut_arg("capacity", |a| a.required(true)))]
    List {
        #[command(flatten)]
        pool: PoolArgs,
        /// One JSON object per volume instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Create a volume (what `serve nbd --export NAME --size SIZE` does on first use)
    #[command(mut_arg("capacity", |a| a.required(true)))]
    Create {
        #[command(flatten)]
        pool: PoolArgs,
        /// The volume's name (1 to 255 bytes of UTF-8).
        name: String,
        /// Its size: 64M, 10G... (a multiple of the block size).
        #[arg(long, value_parser = crate::pool::size_arg)]
        size: u64,
        /// Logical block size, 512 or 4096. Default: 4096.
        #[arg(long, default_value_t = 4096)]
        block_size: u32,
    },
    /// Delete a volume and all its data (it must not be served meanwhile)
    #[command(mut_arg("capacity", |a| a.required(true)))]
    Delete {
        #[command(flatten)]
        pool: PoolArgs,
        /// The volume's name.
        name: String,
    },
}

pub fn volume(a: &VolumeArgs) -> CliResult<i32> {
    let verr = |e: vblock::VolumeError| CliError::new(e.to_string());
    match &a.cmd {
        VolumeCmd::List { pool, json } => {
            let vols = with_db(pool, |db| vblock::list_volumes(db).map_err(verr))?;
            print_volumes(&vols, *json);
        }
        VolumeCmd::Create {
            pool,
            name,
            size,
            block_size,
        } => {
            let mut spec = vblock::VolumeSpec::new(*size);
            spec.block_size = *block_size;
            let v = with_db(pool, |db| {
                vblock::create_volume(db, name, spec).map_err(verr)
            })?;
            println!("created volume {:?}: {} bytes, id {}", v.name, v.size, v.id);
        }
        VolumeCmd::Delete { pool, name } => {
            with_db(pool, |db| vblock::delete_volume(db, name).map_err(verr))?;
            println!("deleted volume {name:?}");
        }
    }
    Ok(0)
}

fn print_volumes(vols: &[vblock::VolumeInfo], json: bool) {
    if json {
        for v in vols {
            let o = serde_json::json!({"name": v.name, "id": v.id, "size": v.size,
                "block_size": v.block_size, "chunk_size": v.chunk_size, "deleting": v.deleting});
            println!("{o}");
        }
        return;
    }
    println!(
        "{:<24} {:>12} {:>6} {:>7} {:>5}",
        "NAME", "SIZE", "BLOCK", "CHUNK", "ID"
    );
    for v in vols {
        let note = if v.deleting {
            "  (delete unfinished: run volume delete again)"
        } else {
            ""
        };
        println!(
            "{:<24} {:>12} {:>6} {:>7} {:>5}{note}",
            v.name,
            masse_cli::units::fmt_bytes(v.size),
            v.block_size,
            v.chunk_size,
            v.id
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use masse::{DeviceSpec, Options, PoolConfig};

    /// A big record after a nearly full batch goes into a batch of its own:
    /// the pool never gets a batch above its limit, which it would refuse
    /// (`TooLarge`) although each record fits.
    #[test]
    fn a_big_record_after_a_nearly_full_batch_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = PoolConfig::capacity_only(DeviceSpec::file(dir.path().join("cap"), 64 << 20));
        cfg.segment_size = Some(64 << 10);
        cfg.band_size = Some(1 << 20);
        cfg.io.force_buffered = true;
        let db = Db::create(&cfg, Options::default()).unwrap();
        let max = db.max_batch_bytes();
        let mut b = Batcher::new(Some(&db), u64::MAX);
        // Small records up to just under the batcher's own threshold...
        let small = vec![1u8; 1000];
        let mut i = 0u32;
        while b.batch_bytes + 2 * 1040 < max / 2 {
            b.add(&i.to_be_bytes(), &small).unwrap();
            i += 1;
        }
        // ...then one record of most of the pool's limit.
        let big = vec![2u8; max * 3 / 4];
        b.add(b"big", &big).expect("each record fits on its own");
        b.finish().unwrap();
        assert_eq!(b.committed, i as u64 + 1);
        assert_eq!(db.get(b"big").unwrap().map(|v| v.len()), Some(big.len()));
        db.close().unwrap();
    }
}
