//! `--workload servers`: many torch clients at once against one echo
//! server, three ways: torch's own (a thread per connection), ours with a
//! thread per connection, and ours on a single-threaded tokio runtime.
//! Requests a second and each server's peak RSS, our ratio to torch's.
//!
//! Each server is a process of its own run under the hidden `measure`
//! subcommand, which gives its peak RSS once it exits after serving the
//! clients; the clients are `compat/python/bench_servers.py`, `spawn`ed
//! torch processes with several connections each, which time from the
//! first request to the last answer.

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;
use std::thread;

use clap::{Args, ValueEnum};
use tensorshare::connection::Address;
use tensorshare::{Authkey, Connection, SharingContext};
use tensorshare_cli::error::CliError;
use tensorshare_cli::format;

use crate::measure::{Measurement, measure};

const BENCH_SERVERS: &str = include_str!("../../compat/python/bench_servers.py");

/// The hidden subcommand that runs one of our echo servers.
pub const SUBCOMMAND: &str = "server";

/// Connections per client process.
const THREADS_PER_PROCESS: usize = 8;

/// What one bench of servers runs.
pub struct Options<'a> {
    pub python: &'a Path,
    pub scratch: &'a Path,
    pub clients: usize,
    pub requests: usize,
    pub message_bytes: usize,
    pub rounds: usize,
}

/// A server the bench runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerKind {
    /// Stock torch: a `Listener`, a thread per connection.
    Torch,
    /// tensorshare's blocking `Listener`, a thread per connection.
    Threads,
    /// `tensorshare::tokio` on a single-threaded runtime, a task per
    /// connection.
    Async,
}

impl ServerKind {
    fn name(self) -> &'static str {
        match self {
            ServerKind::Torch => "torch, thread per client",
            ServerKind::Threads => "tensorshare, thread per client",
            ServerKind::Async => "tensorshare tokio, one thread",
        }
    }
}

/// One round of one server.
struct Round {
    requests_per_second: f64,
    server: Measurement,
}

pub fn run(options: &Options<'_>) -> Result<(), CliError> {
    let script = options.scratch.join("bench_servers.py");
    std::fs::write(&script, BENCH_SERVERS)
        .map_err(|e| CliError::io(format!("writing {}", script.display()), e))?;
    let authkey = Authkey::random()?;
    let processes = options.clients.div_ceil(THREADS_PER_PROCESS);
    let connections = processes * THREADS_PER_PROCESS;
    println!(
        "{connections} torch clients ({processes} processes of {THREADS_PER_PROCESS} connections), \
         {} requests each of {} (file_descriptor), echoed; median of {} rounds",
        options.requests,
        format::bytes(options.message_bytes as u64),
        options.rounds,
    );
    let kinds = [ServerKind::Torch, ServerKind::Threads, ServerKind::Async];
    let mut results = Vec::new();
    for kind in kinds {
        let mut rounds = Vec::new();
        for round in 0..options.rounds {
            let address = format!("@tensorshare-bench-servers-{}-{round}", std::process::id());
            rounds.push(run_round(
                options, &script, &authkey, kind, &address, processes,
            )?);
        }
        results.push((kind, median_round(rounds)));
    }
    let torch = results
        .first()
        .map(|(_, round)| round.requests_per_second)
        .unwrap_or(f64::NAN);
    println!(
        "{:<32} {:>14} {:>10} {:>16}",
        "server", "requests/s", "vs torch", "server peak RSS"
    );
    for (kind, round) in &results {
        println!(
            "{:<32} {:>14.0} {:>9.2}x {:>16}",
            kind.name(),
            round.requests_per_second,
            round.requests_per_second / torch,
            format::bytes(round.server.peak_rss_bytes),
        );
    }
    Ok(())
}

fn run_round(
    options: &Options<'_>,
    script: &Path,
    authkey: &Authkey,
    kind: ServerKind,
    address: &str,
    processes: usize,
) -> Result<Round, CliError> {
    let connections = (processes * THREADS_PER_PROCESS).to_string();
    let server: Vec<OsString> = match kind {
        ServerKind::Torch => vec![
            options.python.into(),
            script.into(),
            "serve".into(),
            "--address".into(),
            address.into(),
            "--connections".into(),
            connections.into(),
        ],
        ServerKind::Threads | ServerKind::Async => vec![
            std::env::current_exe()
                .map_err(|e| CliError::io("finding this program", e))?
                .into(),
            SUBCOMMAND.into(),
            "--mode".into(),
            if kind == ServerKind::Threads {
                "threads"
            } else {
                "async"
            }
            .into(),
            "--address".into(),
            address.into(),
            "--connections".into(),
            connections.into(),
        ],
    };
    // The server gets the key through `env`, under `measure`.
    let hex = authkey.to_hex();
    let mut command: Vec<OsString> =
        vec!["env".into(), format!("TENSORSHARE_AUTHKEY={hex}").into()];
    command.extend(server);
    let serving = thread::spawn(move || measure("the server", &command));
    let output = Command::new(options.python)
        .arg(script)
        .arg("clients")
        .args(["--address", address])
        .args(["--processes", &processes.to_string()])
        .args(["--threads", &THREADS_PER_PROCESS.to_string()])
        .args(["--requests", &options.requests.to_string()])
        .args(["--bytes", &options.message_bytes.to_string()])
        .env("TENSORSHARE_AUTHKEY", &hex)
        .output()
        .map_err(|e| CliError::io("starting the torch clients", e))?;
    let server = serving
        .join()
        .map_err(|_| "the server's measuring thread panicked")??;
    if !output.status.success() {
        return Err(format!(
            "the torch clients of the {} server failed ({}): {}",
            kind.name(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )
        .into());
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    let parsed: serde_json::Value = serde_json::from_str(line)
        .map_err(|e| format!("the torch clients printed {line:?}: {e}"))?;
    let (Some(requests), Some(seconds)) = (parsed["requests"].as_f64(), parsed["seconds"].as_f64())
    else {
        return Err(format!("the torch clients printed {line:?}: no requests or seconds").into());
    };
    Ok(Round {
        requests_per_second: requests / seconds,
        server,
    })
}

/// The round of median throughput.
fn median_round(mut rounds: Vec<Round>) -> Round {
    rounds.sort_by(|a, b| a.requests_per_second.total_cmp(&b.requests_per_second));
    let middle = rounds.len() / 2;
    rounds.swap_remove(middle)
}

#[derive(Debug, Args)]
pub struct ServerArgs {
    /// A thread per connection, or one tokio task each on one thread.
    #[arg(long, value_enum)]
    mode: ServerMode,
    /// Where to listen; the authkey comes in TENSORSHARE_AUTHKEY.
    #[arg(long)]
    address: Address,
    /// Serve this many connections, then exit once they have all closed.
    #[arg(long)]
    connections: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ServerMode {
    Threads,
    Async,
}

/// The echo server of one `--workload servers` round.
pub fn run_server(args: ServerArgs) -> Result<(), CliError> {
    let authkey =
        Authkey::from_env()?.ok_or_else(|| format!("{SUBCOMMAND} needs TENSORSHARE_AUTHKEY"))?;
    let sharing = SharingContext::new(authkey);
    let listener = sharing.listen(&args.address)?;
    match args.mode {
        ServerMode::Threads => thread::scope(|scope| {
            for _ in 0..args.connections {
                let connection = listener.accept()?;
                scope.spawn(|| echo(connection));
            }
            Ok::<_, CliError>(())
        }),
        ServerMode::Async => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| CliError::io("starting the tokio runtime", e))?;
            runtime.block_on(async {
                let mut listener = tensorshare::tokio::Listener::new(listener)?;
                let mut tasks = tokio::task::JoinSet::new();
                for _ in 0..args.connections {
                    let mut connection = listener.accept().await?;
                    tasks.spawn(async move {
                        while let Ok(value) = connection.recv().await {
                            if connection.send(&value).await.is_err() {
                                break;
                            }
                        }
                    });
                }
                tasks.join_all().await;
                Ok::<_, CliError>(())
            })
        }
    }
}

/// Sends back every message until the peer hangs up.
fn echo(mut connection: Connection) {
    while let Ok(value) = connection.recv() {
        if connection.send(&value).is_err() {
            break;
        }
    }
}
