//! Command-line parsing and dispatch.

// The layers, bottom to top: each imports only those declared before it,
// and none what this file defines (`scripts/check-layers cli`). One
// comment per layer keeps rustfmt from sorting them.

// Where a command gets an authkey.
mod authkey;
// What `inspect` and `convert` read.
mod input;
// SIGTERM and SIGINT for servers.
mod shutdown;
// `--strategy NAME`.
mod strategy;
// Patterned tensors and what a storage maps, for `demo`.
mod workload;
// The commands.
mod convert;
mod demo;
mod doctor;
mod echo;
mod gc;
mod inspect;
mod manager;

use clap::{CommandFactory, Parser, Subcommand};
use tensorshare_cli::error::CliError;

/// Share CPU tensors between processes in PyTorch's own wire format.
#[derive(Debug, Parser)]
#[command(name = "tensorshare", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
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

/// `usage`, a usage error a command found after parsing
/// ([`CliError::usage`]), formatted as clap formats its own: `error:
/// ...`, then the usage of `subcommand`, the one that ran.
pub fn with_usage_of(usage: clap::Error, subcommand: Option<&str>) -> clap::Error {
    let mut command = Cli::command();
    command.build();
    match subcommand.and_then(|name| command.find_subcommand_mut(name)) {
        Some(subcommand) => usage.format(subcommand),
        None => usage.format(&mut command),
    }
}
