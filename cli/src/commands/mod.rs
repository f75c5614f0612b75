//! Command-line parsing and dispatch.

mod authkey;
mod bench;
mod bench_batch_stream;
mod bench_batches;
mod bench_busy;
mod bench_consumers;
mod bench_files;
mod bench_measure;
mod bench_servers;
mod bench_shm;
mod bench_stream;
mod convert;
mod demo;
mod doctor;
mod echo;
mod format;
mod gc;
mod inspect;
mod manager;
mod peer;
mod shutdown;
mod strategy;
mod workload;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, Subcommand};

use crate::error::CliError;

/// Share CPU tensors between processes in PyTorch's own wire format.
#[derive(Debug, Parser)]
#[command(name = "tensorshare", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// torch's tensor sharing and ours side by side: per-tensor cost, GB/s
    /// and our ratio to torch's best (needs a Python with torch).
    Bench(bench::BenchArgs),
    /// The consumer of a Rust-to-Rust `bench` run.
    #[command(hide = true)]
    BenchPeer(bench::BenchPeerArgs),
    /// Runs a command and prints its wall time and peak RSS: how
    /// `bench --workload files` measures each side.
    #[command(hide = true)]
    BenchMeasure(bench_measure::BenchMeasureArgs),
    /// The Rust echo servers of `bench --workload servers`.
    #[command(hide = true)]
    BenchServer(bench_servers::BenchServerArgs),
    /// Two processes stream tensors both ways over every strategy, verify
    /// every byte and print what it cost. Needs no Python.
    Demo(demo::DemoArgs),
    /// The second process of `demo`.
    #[command(hide = true)]
    DemoPeer(demo::DemoPeerArgs),
    /// Decode a torch pickle, .pt or .safetensors file without executing
    /// anything.
    Inspect(inspect::InspectArgs),
    /// Rewrite a torch pickle (any strategy), .pt or .safetensors file as a
    /// torch.save file that `torch.load(path, weights_only=True)` loads, or
    /// a state dict as a .safetensors file (OUT named *.safetensors, or
    /// --safetensors).
    ///
    /// The storages of a file_descriptor pickle are fetched from the
    /// process that wrote it, while it runs, with its authkey.
    Convert(convert::ConvertArgs),
    /// Listen for multiprocessing.connection peers and send every message back
    /// re-pickled; prints `listening ADDRESS` once ready.
    Echo(echo::EchoArgs),
    /// Run a shared-memory manager for the file_system strategy; prints its
    /// socket path once ready.
    Manager(manager::ManagerArgs),
    /// Find shared-memory segments left in /dev/shm, and tensorshare's
    /// socket directories left in $TMPDIR, by processes that are gone, and
    /// remove them.
    Gc(gc::GcArgs),
    /// Check the limits shared memory runs into (/dev/shm, open files,
    /// vm.max_map_count, logind's RemoveIPC, inotify, managers, leaked
    /// segments), one line each with its fix; exits 1 when one fails.
    Doctor(doctor::DoctorArgs),
}

/// Runs the parsed command.
pub fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Bench(args) => bench::run(args),
        Command::BenchPeer(args) => bench::run_peer(args),
        Command::BenchMeasure(args) => bench_measure::run(args),
        Command::BenchServer(args) => bench_servers::run_server(args),
        Command::Demo(args) => demo::run(args),
        Command::DemoPeer(args) => demo::run_peer(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Convert(args) => convert::run(args),
        Command::Echo(args) => echo::run(args),
        Command::Manager(args) => manager::run(args),
        Command::Gc(args) => gc::run(args),
        Command::Doctor(args) => doctor::run(args),
    }
}

/// A usage error of `subcommand` found after parsing, which `main` prints
/// as clap prints its own (`error: ...`, then the usage) and exits with
/// clap's status.
pub fn usage_error(
    subcommand: &str,
    kind: ErrorKind,
    message: impl std::fmt::Display,
) -> clap::Error {
    let mut command = Cli::command();
    command.build();
    let error = clap::Error::raw(kind, message);
    match command.find_subcommand_mut(subcommand) {
        Some(subcommand) => error.format(subcommand),
        None => error.format(&mut command),
    }
}

/// How the command starts an error line: as clap starts a usage error.
pub const ERROR_PREFIX: &str = "error: ";

/// An error and its causes on one line, each cause once.
pub fn one_line(error: &(dyn std::error::Error + 'static)) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !message.contains(&cause_text) {
            message.push_str(": ");
            message.push_str(&cause_text);
        }
        source = cause.source();
    }
    message.replace('\n', " ")
}
