//! `masse ack-writer`: the hidden child of the crash tests. It writes keys in
//! order and reports every acknowledged write on stdout, then waits to be killed.

use crate::error::{CliError, CliResult};
use crate::pool::{open_pool, PoolArgs};
use clap::Args;
use masse::{Options, WriteBatch};
use masse_cli::ack::{ack_key, ack_value, ValueSizes};
use std::io::Write;

#[derive(Args, Debug)]
pub struct AckWriterArgs {
    #[command(flatten)]
    pub pool: PoolArgs,
    /// First key number.
    #[arg(long)]
    pub start: u64,
    /// Number of keys to write.
    #[arg(long)]
    pub count: u64,
    /// Value length: a size (100) or an inclusive range (100..4000) drawn per key.
    #[arg(long, value_name = "SIZE|MIN..MAX")]
    pub value_size: ValueSizes,
    /// Seed mixed into every value.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Keys per atomic WriteBatch (1 = single puts).
    #[arg(long, default_value_t = 1)]
    pub batch: u64,
}

pub fn run(a: &AckWriterArgs) -> CliResult<i32> {
    if a.batch == 0 {
        return Err(CliError::new("--batch must be at least 1"));
    }
    let db = open_pool(&a.pool, Options::default())?;
    let mut out = std::io::stdout().lock();
    // The parent stops reading only by killing us; if stdout breaks, stop too.
    let mut say = |line: String| -> CliResult<()> {
        writeln!(out, "{line}")
            .and_then(|_| out.flush())
            .map_err(|e| CliError::new(format!("cannot write to stdout: {e}")))
    };
    say("OPEN".to_string())?;
    let end = a.start.saturating_add(a.count);
    let mut i = a.start;
    while i < end {
        let last = (i + a.batch).min(end) - 1;
        if a.batch == 1 {
            db.put(&ack_key(i), &ack_value(i, a.seed, a.value_size))
                .map_err(|e| CliError::new(format!("put of key {i} failed: {e}")))?;
        } else {
            let mut b = WriteBatch::new();
            for j in i..=last {
                b.put(&ack_key(j), &ack_value(j, a.seed, a.value_size))
                    .map_err(|e| CliError::new(format!("batch put of key {j}: {e}")))?;
            }
            db.write(b)
                .map_err(|e| CliError::new(format!("batch {i}..={last} failed: {e}")))?;
        }
        say(format!("ACK {last}"))?;
        for j in i..=last {
            if j % 10 == 0 && j >= 7 {
                db.delete(&ack_key(j - 7))
                    .map_err(|e| CliError::new(format!("delete of key {} failed: {e}", j - 7)))?;
                say(format!("DEL {}", j - 7))?;
            }
        }
        i = last + 1;
    }
    say("DONE".to_string())?;
    // Never close: the parent kills us, and that crash is what is being tested.
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}
