//! `masse`: the command-line tool of the masse storage engine.

mod ack_writer;
mod bench;
mod cmds;
mod data;
mod demo;
mod dumpfmt;
mod error;
mod gen;
mod logging;
mod machine;
mod media_bench;
mod metrics;
mod metrics_engine;
mod metrics_http;
mod migrate;
mod mount;
mod place;
mod pool;
mod probe;
mod probe_create;
mod serve_nbd;
mod serve_resp;
mod stress;
mod stress_enum;
mod top;
mod workload;

use clap::{CommandFactory, Parser, Subcommand};
use error::{CliResult, EXIT_ERROR};

const ABOUT: &str = "\
masse: a media-aware tiered key-value storage engine (MASSé).
Small writes are made durable on an SCM-class fast tier (Optane, Z-NAND, XL-Flash,
PMEM, tmpfs) used as a write pad, merged in DRAM into large segments, and written
strictly sequentially in LBands to a QLC/TLC capacity tier; a DRAM hash index finds
every key in one read. A pool is named by its devices (--fast, --capacity).";

const AFTER: &str = "\
Start with `masse demo` (temporary files; a few minutes, or seconds with --num 200k),
or make a pool:
  masse create --fast /dev/shm/f --fast-size 1G --capacity /var/tmp/c --capacity-size 16G
  masse put --fast /dev/shm/f --capacity /var/tmp/c hello world
Exit codes: 0 success, 1 key not found (get), 2 error, 3 check found problems,
4 the demo read a wrong value.";

#[derive(Parser, Debug)]
#[command(name = "masse", version, about = ABOUT, after_help = AFTER)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,

    /// What to log on stderr: error, warn, info (open and recovery, checkpoints, GC
    /// passes), debug (write stalls), trace; or directives like `masse=debug`.
    /// Overrides RUST_LOG. Default: RUST_LOG if set, else warn.
    #[arg(long, global = true, value_name = "LEVEL", help_heading = "Logging")]
    log_level: Option<String>,

    /// Log as text lines or as JSON objects, one per line. Default: text.
    #[arg(long, global = true, value_enum, default_value_t = logging::LogFormat::Text, help_heading = "Logging")]
    log_format: logging::LogFormat,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Format devices as a new pool and print the layout chosen
    ///
    /// Formats the devices (creating files given with --fast-size/--capacity-size) and prints
    /// the mode, segment size, band size and bands per device, pad size, checkpoint slot size,
    /// IU, and per device its path, role, media, size, I/O backend and whether O_DIRECT is used.
    /// A device that already holds a pool is refused unless --force is given.
    #[command(mut_arg("capacity", |a| a.required(true)))]
    Create(cmds::CreateArgs),

    /// Store a value under a key (durable when the command returns)
    ///
    /// The value is VALUE, the contents of --value-file, or standard input with --stdin.
    #[command(
        mut_arg("capacity", |a| a.required(true)),
        override_usage = "masse put [OPTIONS] --capacity <PATH> <KEY> <VALUE | --value-file <FILE> | --stdin>"
    )]
    Put(cmds::PutArgs),

    /// Print the value of a key; exit code 1 if it is absent
    ///
    /// Writes the raw value bytes to standard output or to --output FILE. When the key is
    /// absent, prints "not found" on stderr and exits with code 1.
    #[command(mut_arg("capacity", |a| a.required(true)))]
    Get(cmds::GetArgs),

    /// Delete a key and print whether it existed (durable when the command returns)
    #[command(mut_arg("capacity", |a| a.required(true)))]
    Del(cmds::DelArgs),

    /// Open the pool and print the engine's statistics
    ///
    /// Opening runs recovery when the pool was not closed cleanly; the statistics include
    /// how long the open took and what it recovered from (clean, checkpoint or scan).
    #[command(mut_arg("capacity", |a| a.required(true)))]
    Stats(cmds::StatsArgs),

    /// Verify the whole pool; exit code 3 if problems are found
    ///
    /// Reads every segment of every band in use and verifies headers, summaries and record
    /// checksums, then every index entry against its record, and the space accounting.
    #[command(mut_arg("capacity", |a| a.required(true)))]
    Check(cmds::CheckArgs),

    /// Run a benchmark workload on a new pool and verify every value: start here
    ///
    /// Makes a pool (by default on temporary files: the fast tier in /dev/shm, the capacity
    /// tier under $TMPDIR or /var/tmp), runs db_bench-style phases (fill, read, overwrite,
    /// readwrite, delete, verify) on several threads, and prints per phase the throughput and
    /// latency percentiles, then the engine's statistics: host write amplification, GC, index
    /// DRAM per key, pad and device I/O. The temporary files are removed unless --keep.
    Demo(demo::DemoArgs),

    /// Identify a device's media (SCM, TLC, QLC, HDD) and the engine settings for it
    ///
    /// Reads what the system says (sysfs: rotational, block sizes, optimal I/O, discard,
    /// zoned, the drive model against a table of known models), then measures for a few
    /// seconds on a temporary file next to DEVICE (QD1 4 KiB read latency, 4 KiB random vs
    /// 256 KiB sequential write bandwidth, read latency under writes). Prints the class and
    /// the role, segment and band size, IU alignment and queue depth that follow. Works on
    /// emulated drives (sim:qlc:64GiB) too.
    Probe(probe::ProbeArgs),

    /// Evidence benchmark: an emulated QLC drive written directly and through masse
    ///
    /// Drives sim:qlc with 4 KiB random writes at full span, then with the same user writes
    /// as 4 KiB puts through masse (fast tier on sim:optane), in virtual time, and prints side
    /// by side the QLC drive's device WAF, host WAF, NAND bytes and erases per user byte, and
    /// the latency of 4 KiB reads issued during the writes.
    MediaBench(media_bench::MediaBenchArgs),

    /// Crash and fault harness: random work against an oracle, kill loop, injected faults
    ///
    /// Runs many threads of random puts, deletes, atomic batches, gets and iterations
    /// against an expected-state oracle kept outside the pool (a memory-mapped file that
    /// survives SIGKILL). With --crash-loop, repeatedly starts a child, SIGKILLs it at a
    /// random moment (during recovery, fill, GC, checkpoints), and verifies on reopen that
    /// every acknowledged write and delete is there, in-flight writes are whole or absent and
    /// batches are atomic; the last child also runs `check`, GC and a checkpoint. With
    /// --faults, injects power cuts, torn writes, bit flips and I/O errors on in-memory
    /// devices. With --enumerate, cuts power after every device write and sync of
    /// deterministic scenarios (torn variants too) and checks each crash state; with
    /// --damage, flips bytes in every kind of metadata block and checks that loss is limited,
    /// reported and survivable. Exit code 5 (and a replay command) when a guarantee is broken.
    Stress(stress::StressArgs),

    /// Serve the pool over a network protocol: nbd (volumes as block devices), resp (Redis)
    Serve(serve_nbd::ServeArgs),
    /// Run RocksDB db_bench's workloads on a masse pool, with data-center QoS reports
    ///
    /// Accepts db_bench's flags (--benchmarks, --num, --key_size, --value_size, --threads,
    /// --duration, --reads, --writes, --readwritepercent, --seed, --histogram,
    /// --use_existing_db, --db) and prints its summary line per benchmark, then latency
    /// percentiles to p99.999, ACT shares, IOPS consistency, the engine's figures and CPU per
    /// operation; optionally a JSON report and SVG plots.
    Bench(Box<bench::BenchArgs>),

    /// Side-by-side rows and tables of masse bench and db_bench runs (bench/compare-rocksdb)
    #[command(hide = true)]
    BenchCompare(bench::compare::CompareArgs),
    /// Mount the pool as a file system (FUSE) on DIR until unmounted
    ///
    /// Serves the pool's file layer (vFile: files and directories stored as records:
    /// inodes, hashed directory pages, data in chunks) so unmodified programs use the
    /// engine. The first mount of a pool creates the file layer. Runs in the foreground;
    /// unmount with `fusermount3 -u DIR` (or `umount DIR` as root), Ctrl-C, SIGTERM or
    /// SIGHUP: buffered data is written out and the pool closed cleanly. Data is durable
    /// at fsync, at every close of a file, and within --writeback-secs otherwise;
    /// namespace changes (create, rename, unlink, mkdir) are durable when they return,
    /// and a rename is atomic across a crash. Errors map to errno: ENOENT, EEXIST,
    /// ENOTEMPTY, ENOSPC (pool full: reported by the write, or at the latest by the
    /// close or fsync, never only at unmount), EIO (checksum failure).
    #[command(mut_arg("capacity", |a| a.required(true)))]
    Mount(mount::MountArgs),

    /// List keys (optionally values) of the pool; --prefix, --hex, --json
    ///
    /// Keys come in no particular order (the index is a hash table). By default only
    /// key-value keys are listed; --layer files|volumes|all shows the file and block
    /// layers' internal records too. Text output escapes non-printable bytes (\xNN).
    #[command(mut_arg("capacity", |a| a.required(true)))]
    Scan(data::ScanArgs),

    /// Write every record of the pool to a portable, checksummed stream (a backup)
    ///
    /// The stream (docs/operating.md, "The dump format") holds the records as they are,
    /// the file and block layers' internal records included, so `masse load` restores
    /// keys, files and volumes exactly into a pool of any geometry. Run it on a pool no
    /// other process has open.
    #[command(mut_arg("capacity", |a| a.required(true)))]
    Dump(data::DumpArgs),

    /// Put the records of a `masse dump` stream into a pool, in atomic batches
    ///
    /// Every record's checksum is verified before it is written; the stream's end frame
    /// (record count, bytes, order) at the end. Each batch is one atomic write: after a
    /// failure the pool holds exactly the first N records, N is printed, and --skip N
    /// resumes. Existing keys with the same names are overwritten.
    #[command(mut_arg("capacity", |a| a.required_unless_present("check_only")))]
    Load(data::LoadArgs),

    /// Copy every record of a pool into a new one: a newer format, a keyed digest,
    /// another geometry
    ///
    /// What `masse dump` of the old pool piped into `masse load` on a new one does, in
    /// one process: every record (key-value keys, files and volumes) is copied, in
    /// atomic batches, into a pool you made beforehand with `masse create`. Use it to
    /// give a pool of an older format version this build's format (a format-1 pool
    /// gets the keyed digest of format 2), or to move a pool to other devices or
    /// another mode, segment or band size.
    ///
    /// Steps: stop whatever has the old pool open; create the new pool on other
    /// devices (`masse create --fast NEWFAST --capacity NEWCAP --capacity-size SIZE`);
    /// run `masse migrate --from fast=OLDFAST,capacity=OLDCAP --to
    /// fast=NEWFAST,capacity=NEWCAP`; then use the new pool. The source is left as it
    /// was: nothing is written to it but what opening and closing any pool writes,
    /// and its background GC is off.
    ///
    /// The destination must be empty unless --force. Refused before any record is
    /// written: the same pool as both source and destination (a shared device or the
    /// same pool id), a destination with keys, a pool that cannot be opened (missing,
    /// in use by another process, not a masse pool, a newer format). After the copy
    /// the destination is closed, reopened and checked as `masse check` does, and
    /// its key count compared with the keys copied; the summary (records, bytes,
    /// time, MB/s, source and destination format version, check) goes to stderr, or
    /// to stdout as JSON with --json. Exit code 3 if the check finds problems or the
    /// counts differ, 2 on errors. After an interruption the destination holds whole
    /// batches: the same command with --force completes it.
    Migrate(migrate::MigrateArgs),

    /// List, create or delete the pool's NBD volumes
    Volume(data::VolumeArgs),

    /// Live console over a running command's --metrics endpoint
    ///
    /// Refreshes every second: ops/s and MB/s per kind, p50/p99/p99.9 latency of the last
    /// interval, IOPS consistency so far, host WAF, per-device MB/s and lifetime bytes
    /// written (against --rated-tbw), GC activity, pad and band occupancy. Start the
    /// command with --metrics 127.0.0.1:9100 and run `masse top --metrics 127.0.0.1:9100`.
    /// Quit with q. Without a terminal it prints one frame per interval.
    Top(top::TopArgs),

    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    Completions(gen::CompletionsArgs),

    /// Print the man page, or write one page per command with --dir
    Man(gen::ManArgs),

    /// Crash-test child: write keys ack{i:012} and print "ACK i" after each acknowledged
    /// write ("DEL j" after each acknowledged delete), never closing.
    #[command(hide = true, mut_arg("capacity", |a| a.required(true)))]
    AckWriter(ack_writer::AckWriterArgs),
}

fn run(cli: Cli) -> CliResult<i32> {
    match &cli.cmd {
        Cmd::Create(a) => cmds::create(a),
        Cmd::Put(a) => cmds::put(a),
        Cmd::Get(a) => cmds::get(a),
        Cmd::Del(a) => cmds::del(a),
        Cmd::Stats(a) => cmds::stats(a),
        Cmd::Check(a) => cmds::check(a),
        Cmd::Demo(a) => demo::run(a),
        Cmd::Probe(a) => probe::run(a),
        Cmd::MediaBench(a) => media_bench::run(a),
        Cmd::Stress(a) => stress::run(a),
        Cmd::Serve(a) => serve_nbd::run(a),
        Cmd::Bench(a) => bench::run(a),
        Cmd::BenchCompare(a) => bench::compare::run(a),
        Cmd::Mount(a) => mount::run(a),
        Cmd::AckWriter(a) => ack_writer::run(a),
        Cmd::Scan(a) => data::scan(a),
        Cmd::Top(a) => top::run(a),
        Cmd::Completions(a) => gen::completions(a, Cli::command()),
        Cmd::Man(a) => gen::man(a, Cli::command()),
        Cmd::Dump(a) => data::dump(a),
        Cmd::Load(a) => data::load(a),
        Cmd::Migrate(a) => migrate::run(a),
        Cmd::Volume(a) => data::volume(a),
    }
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = logging::init(cli.log_level.as_deref(), cli.log_format) {
        eprintln!("masse: error: {}", e.one_line());
        std::process::exit(EXIT_ERROR);
    }
    let code = match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("masse: error: {}", e.one_line());
            if e.code == 0 {
                EXIT_ERROR
            } else {
                e.code
            }
        }
    };
    std::process::exit(code);
}
