//! `tensorshare-bench`: torch's tensor sharing and ours side by side, and
//! checkpoint files inspected and converted by tensorshare and by torch.
//! Its manual is `bench/README.md`.

// The layers, bottom to top: each imports only those declared before it
// (`scripts/check-layers bench`). One comment per layer keeps rustfmt from
// sorting them.

// The median of a run's samples.
mod median;
// The spinner saying what runs.
mod spinner;
// The soft fd limit, raised.
mod fd_limit;
// The `tensorshare` command, which some workloads run.
mod tensorshare_exe;
// The streams of bench_peer.py, in Rust.
mod stream_protocol;
// The batches of bench_batches.py, in Rust.
mod batch_protocol;
// The torch side of a run.
mod torch_peer;
// `measure`: a command's wall time and peak RSS.
mod measure;
// `peer`: the Rust consumer of a Rust-to-Rust path.
mod rust_consumer;
// The workloads.
mod streams;
// `--workload tcp`.
mod tcp;
// `--workload batches`.
mod batches;
// `--workload files`.
mod files;
// `--workload servers`, and `server`: one of our echo servers.
mod servers;
// The command line and the run of the workload it names.
mod bench;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use tensorshare_cli::error::exit_code;

/// The bench's allocator, the `tensorshare` command's: messages are made
/// of many small allocations, which mimalloc serves faster than glibc's
/// allocator, and the Rust side is measured as the command runs it.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// torch's tensor sharing and ours side by side: per-tensor cost, GB/s and
/// our ratio to torch's best; or checkpoint files inspected and converted
/// by tensorshare and by torch (needs a Python with torch).
#[derive(Debug, Parser)]
#[command(
    name = "tensorshare-bench",
    version,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(flatten)]
    bench: bench::BenchArgs,
    /// What the bench runs itself again as.
    #[command(subcommand)]
    hidden: Option<Hidden>,
}

/// The processes the bench starts from its own executable
/// (`std::env::current_exe()`).
#[derive(Debug, Subcommand)]
enum Hidden {
    /// The consumer of a Rust-to-Rust path.
    #[command(name = rust_consumer::SUBCOMMAND, hide = true)]
    Peer(rust_consumer::PeerArgs),
    /// Runs a command and prints its wall time and peak RSS: how
    /// `--workload files` and `--workload servers` measure each side.
    #[command(name = measure::SUBCOMMAND, hide = true)]
    Measure(measure::MeasureArgs),
    /// The Rust echo servers of `--workload servers`.
    #[command(name = servers::SUBCOMMAND, hide = true)]
    Server(servers::ServerArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let ran = match cli.hidden {
        None => bench::run(cli.bench),
        Some(Hidden::Peer(args)) => rust_consumer::run(args),
        Some(Hidden::Measure(args)) => measure::run(args),
        Some(Hidden::Server(args)) => servers::run_server(args),
    };
    // A usage error found after parsing (flags that do not go with the
    // workload, ...) shows the bench's usage.
    exit_code(ran, |usage| usage.format(&mut Cli::command()))
}
