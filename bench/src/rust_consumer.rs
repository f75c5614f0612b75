//! `tensorshare-bench peer --connect ADDRESS` (hidden): the Rust consumer
//! of a Rust-to-Rust path, which the bench starts as a process of its own
//! and which connects back to it: the streams of `--workload streams` and
//! `--workload tcp`, or the training loop of `--workload batches`.

use clap::Args;
use tensorshare::connection::{Address, ConnectionOptions};
use tensorshare::{Connection, SharingContext};
use tensorshare_cli::error::CliError;
use tensorshare_cli::peer::connect_back;

use crate::batch_protocol::consume_batches;
use crate::stream_protocol::{Framing, consume};

/// The hidden subcommand the bench starts its Rust consumers with.
pub const SUBCOMMAND: &str = "peer";

#[derive(Debug, Args)]
pub struct PeerArgs {
    /// The producer's listener; the authkey comes in TENSORSHARE_AUTHKEY.
    #[arg(long)]
    connect: Address,
    /// How the producer's tensors travel: pickled, or raw as on its
    /// `rust-to-rust-raw-fds` and `rust-to-rust-raw-bytes` paths.
    #[arg(long, value_enum, default_value = "pickled")]
    framing: Framing,
    /// Train on the batches workload's batches (`--workload batches`).
    #[arg(long, conflicts_with = "framing")]
    batches: bool,
    /// Set TCP_NODELAY on a TCP connection (`--workload tcp --tcp-nodelay`).
    #[arg(long)]
    tcp_nodelay: bool,
}

/// The consumer of a Rust-to-Rust run.
pub fn run(args: PeerArgs) -> Result<(), CliError> {
    let options = ConnectionOptions::default().with_tcp_nodelay(args.tcp_nodelay);
    let (authkey, connection) = connect_back(&args.connect, options)?;
    let sharing = SharingContext::new(authkey);
    let mut connection = Connection::new(connection, &sharing)?;
    if args.batches {
        let seconds = consume_batches(&mut connection)?;
        println!("{}", serde_json::json!({ "seconds": seconds }));
        return Ok(());
    }
    consume(&mut connection, args.framing)?;
    Ok(())
}
