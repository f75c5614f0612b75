//! `tensorshare-bench measure -- COMMAND ARGS...` (hidden): runs one
//! command and prints its wall time and peak RSS as one JSON line, for
//! `--workload files`, which runs tensorshare's commands and torch's
//! through it so that both are measured the same way, and `--workload
//! servers`, which runs each server through it.
//!
//! The peak comes from `getrusage(RUSAGE_CHILDREN)`: this process has
//! exactly one child, so the largest child's `ru_maxrss` is that command's
//! own (its children included, if it waits for them). No `/usr/bin/time`
//! is needed, and the command runs in a process of its own, as a user runs
//! it.

use std::ffi::OsString;
use std::process::{Command, Stdio};
use std::time::Instant;

use clap::Args;
use nix::sys::resource::{UsageWho, getrusage};

use tensorshare_cli::error::CliError;

/// The hidden subcommand that measures a command.
pub const SUBCOMMAND: &str = "measure";

#[derive(Debug, Args)]
pub struct MeasureArgs {
    /// The command to run and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

/// One measured run of a command.
#[derive(Clone, Copy, Debug)]
pub struct Measurement {
    /// From start to exit, as the user waits for it.
    pub seconds: f64,
    /// The command's peak resident set size.
    pub peak_rss_bytes: u64,
}

/// Runs the command with its stdout discarded (what `inspect --json`
/// prints would only cost a pipe) and its stderr passed on, and prints
/// `{"seconds": S, "max_rss_kib": K, "status": "..."}`; fails when the
/// command does.
pub fn run(args: MeasureArgs) -> Result<(), CliError> {
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| format!("{SUBCOMMAND} needs a command after `--`"))?;
    let shown = program.to_string_lossy().into_owned();
    let start = Instant::now();
    let status = Command::new(program)
        .args(rest)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .map_err(|e| CliError::io(format!("starting {shown}"), e))?;
    let seconds = start.elapsed().as_secs_f64();
    let usage =
        getrusage(UsageWho::RUSAGE_CHILDREN).map_err(|errno| format!("getrusage: {errno}"))?;
    println!(
        "{}",
        serde_json::json!({
            "seconds": seconds,
            // Kibibytes on Linux.
            "max_rss_kib": usage.max_rss(),
            "status": status.to_string(),
        })
    );
    if !status.success() {
        return Err(format!("{shown} failed ({status})").into());
    }
    Ok(())
}

/// Runs `command` under [`SUBCOMMAND`], its stdout discarded; a command
/// that fails is an error that shows what it said on stderr.
pub fn measure(what: &str, command: &[OsString]) -> Result<Measurement, CliError> {
    let exe = std::env::current_exe().map_err(|e| CliError::io("finding this program", e))?;
    let output = Command::new(exe)
        .arg(SUBCOMMAND)
        .arg("--")
        .args(command)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| CliError::io(format!("starting {SUBCOMMAND} for {what}"), e))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        return Err(format!("{what} failed ({}): {}", output.status, stderr.trim()).into());
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    let parsed: serde_json::Value = serde_json::from_str(line)
        .map_err(|e| format!("{SUBCOMMAND} of {what} printed {line:?}: {e}"))?;
    match (parsed["seconds"].as_f64(), parsed["max_rss_kib"].as_u64()) {
        (Some(seconds), Some(kib)) => Ok(Measurement {
            seconds,
            peak_rss_bytes: kib * 1024,
        }),
        _ => Err(
            format!("{SUBCOMMAND} of {what} printed {line:?}: no seconds or max_rss_kib").into(),
        ),
    }
}
