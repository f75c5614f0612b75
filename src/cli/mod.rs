//! Command-line parsing and dispatch.

mod inspect;

use clap::{Parser, Subcommand};

/// Share CPU tensors between processes in PyTorch's own wire format.
#[derive(Debug, Parser)]
#[command(name = "tensorshare", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Decode a torch pickle or .pt file without executing anything.
    Inspect(inspect::InspectArgs),
}

/// Runs the parsed command.
pub fn run(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
    match cli.command {
        Command::Inspect(args) => inspect::run(args),
    }
}
