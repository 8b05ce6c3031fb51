//! `masse completions SHELL` and `masse man`: generated from the clap definition,
//! so they never disagree with `--help`.

use crate::error::{io_err, CliResult};
use clap::{Args, Command};
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell. Install e.g. with
    /// `masse completions bash > /etc/bash_completion.d/masse` or
    /// `masse completions fish > ~/.config/fish/completions/masse.fish`.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
pub struct ManArgs {
    /// Write masse.1 and one page per command (masse-put.1, masse-serve-nbd.1, ...)
    /// into DIR. Default: print masse(1) on standard output (`masse man | man -l -`).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

pub fn completions(a: &CompletionsArgs, mut cmd: Command) -> CliResult<i32> {
    // Into a buffer first: clap_complete panics on a write error, and
    // `masse completions zsh | head -1` closes the pipe early.
    let mut buf = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "masse", &mut buf);
    write_stdout(&buf)
}

/// Write `buf` to stdout; a reader that went away (broken pipe) is not an error.
fn write_stdout(buf: &[u8]) -> CliResult<i32> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(buf).and_then(|_| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(crate::error::CliError::new(
            format!("writing to stdout: {e}"),
        )),
        _ => Ok(0),
    }
}

pub fn man(a: &ManArgs, cmd: Command) -> CliResult<i32> {
    let Some(dir) = &a.dir else {
        let mut buf = Vec::new();
        clap_mangen::Man::new(cmd)
            .render(&mut buf)
            .map_err(|e| crate::error::CliError::new(format!("rendering the man page: {e}")))?;
        return write_stdout(&buf);
    };
    std::fs::create_dir_all(dir).map_err(|e| io_err("creating", dir, e))?;
    let n = write_pages(cmd, dir, "masse")?;
    eprintln!("wrote {n} man pages to {}", dir.display());
    Ok(0)
}

/// The page of `cmd` named `name`, then its visible subcommands', recursively.
fn write_pages(cmd: Command, dir: &std::path::Path, name: &str) -> CliResult<usize> {
    let cmd = cmd.name(name.to_string());
    let path = dir.join(format!("{name}.1"));
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .render(&mut buf)
        .map_err(|e| io_err("rendering", &path, e))?;
    std::fs::write(&path, buf).map_err(|e| io_err("writing", &path, e))?;
    let mut n = 1;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        n += write_pages(sub.clone(), dir, &format!("{name}-{}", sub.get_name()))?;
    }
    Ok(n)
}
