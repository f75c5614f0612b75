//! `tensorshare echo --listen ADDRESS --strategy NAME`, the authkey in
//! `TENSORSHARE_AUTHKEY`, `--authkey-file PATH` or `--authkey HEX`: rebuild
//! every message and send it back re-pickled, for as many peers as connect.
//!
//! On a TCP address it sends storages back as bytes (shared memory does not
//! cross hosts), refuses keys shorter than [`MIN_TCP_AUTHKEY_LEN`], says on
//! stderr that the traffic is authenticated but not encrypted, and listens
//! on an address other hosts can reach only with `--allow-remote`.

use std::io::Write;
use std::sync::Arc;

use clap::Args;
use clap::builder::RangedU64ValueParser;
use tensorshare::connection::Address;
use tensorshare::connection::{
    ConnectionOptions, DEFAULT_MAX_MESSAGE_BYTES, IncomingConnection, Listener, MIN_TCP_AUTHKEY_LEN,
};
use tensorshare::{Authkey, Connection, Error, SharingContext, StrategyKind};
use tensorshare_cli::error::{CliError, one_line};

use super::authkey::AuthkeyArgs;
use super::shutdown::{ShutdownSignal, Wake};
use super::strategy::strategy_parser;

#[derive(Debug, Args)]
pub struct EchoArgs {
    /// Where to listen: a socket path, `@name` for the abstract namespace,
    /// or a TCP `HOST:PORT` (`127.0.0.1:6000`, `[::1]:0`; port 0 picks a
    /// free port, which the `listening` line shows). Over TCP storages go
    /// back as bytes, whatever --strategy says.
    #[arg(long, value_name = "ADDRESS")]
    listen: Address,
    /// Listen on a TCP address other hosts can reach (anything but a
    /// loopback address, 0.0.0.0 included). Traffic is authenticated with
    /// the authkey but not encrypted: use it on a network you trust.
    #[arg(long)]
    allow_remote: bool,
    /// How long a peer has to finish the authkey handshake before its
    /// connection is closed (other peers are served meanwhile).
    #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = RangedU64ValueParser::<u64>::new().range(1..))]
    handshake_timeout: u64,
    // The peers' `multiprocessing.current_process().authkey`; required.
    #[command(flatten)]
    authkey: AuthkeyArgs,
    /// How storages are sent back.
    #[arg(long, value_name = "NAME", value_parser = strategy_parser(), default_value = StrategyKind::FileDescriptor.name())]
    strategy: StrategyKind,
    /// Refuse messages longer than this many bytes before reading them
    /// (at least 1).
    #[arg(
        long,
        value_name = "BYTES",
        default_value_t = DEFAULT_MAX_MESSAGE_BYTES,
        value_parser = RangedU64ValueParser::<usize>::new().range(1..), allow_negative_numbers = true
    )]
    max_message_bytes: usize,
    /// Under `memmap`: the directory files are created in and accepted from
    /// (default: `$TMPDIR`, else `/tmp`). Peers must use the same one.
    #[arg(long, value_name = "DIR")]
    memmap_dir: Option<std::path::PathBuf>,
    /// Under `memmap`: leave the files this process creates in place when
    /// it is done with them, instead of removing them.
    #[arg(long)]
    keep_files: bool,
    /// How long an fd sent waits for its receiver to fetch it, and how long
    /// after its last send a `memmap` file is kept for its receiver
    /// (default: 300).
    #[arg(long, value_name = "SECS", value_parser = RangedU64ValueParser::<u64>::new().range(1..))]
    unfetched_lifetime: Option<u64>,
    /// Under `memmap`: keep at most this many sent files for their
    /// receivers, the oldest going first (default: 4096).
    #[arg(long, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    max_held_files: Option<usize>,
    /// Under `memmap`: keep at most this many bytes of sent files for their
    /// receivers, the oldest going first (default: 1 GiB).
    #[arg(long, value_name = "BYTES", value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    max_held_bytes: Option<usize>,
}

pub fn run(args: EchoArgs) -> Result<(), CliError> {
    let authkey = args.authkey.required()?;
    let mut sharing = SharingContext::new(authkey.clone())
        .with_strategy(args.strategy)
        .with_memmap_keep_files(args.keep_files);
    if let Some(dir) = &args.memmap_dir {
        sharing = sharing.with_memmap_dir(dir)?;
    }
    if let Some(secs) = args.unfetched_lifetime {
        sharing = sharing.with_unfetched_lifetime(std::time::Duration::from_secs(secs));
    }
    if let Some(max) = args.max_held_files {
        sharing = sharing.with_max_held_memmap_files(max);
    }
    if let Some(max) = args.max_held_bytes {
        sharing = sharing.with_max_held_memmap_bytes(max);
    }
    let sharing = Arc::new(sharing);
    let options = ConnectionOptions::default()
        .with_max_message_bytes(args.max_message_bytes)
        .with_handshake_timeout(std::time::Duration::from_secs(args.handshake_timeout));
    if args.listen.is_tcp() {
        check_tcp_authkey(&authkey)?;
    }
    let shutdown = ShutdownSignal::install()?;
    let listener = Listener::bind(&args.listen, &authkey, options)?;
    if listener.is_reachable_from_other_hosts() && !args.allow_remote {
        return Err(format!(
            "{} is reachable from other hosts, and echo serves them only when asked: pass \
             --allow-remote (traffic is authenticated but not encrypted), or listen on \
             127.0.0.1:PORT for this machine only",
            listener.address()
        )
        .into());
    }
    if args.listen.is_tcp() {
        eprintln!(
            "tensorshare echo: TCP traffic is authenticated with the authkey but not encrypted: \
             anyone on the path can read every tensor; storages go as bytes"
        );
    }
    listener.set_nonblocking(true)?;
    println!("listening {}", listener.address());
    std::io::stdout().flush()?;

    let mut next_peer = 0_u64;
    let mut peers: Vec<std::thread::JoinHandle<()>> = Vec::new();
    loop {
        if shutdown.wait(&listener)? == Wake::Shutdown {
            break;
        }
        let incoming = match listener.accept_unauthenticated() {
            Ok(incoming) => incoming,
            Err(e) if e.is_would_block() => continue,
            Err(e) => {
                // Out of fds, most likely: this peer is lost, the next may
                // not be. The kernel keeps the connection queued, so the
                // listener polls readable again at once: pause first.
                eprintln!("tensorshare echo: {}", one_line(&e));
                std::thread::sleep(ACCEPT_BACKOFF);
                continue;
            }
        };
        next_peer += 1;
        let peer = match incoming.tcp_peer() {
            Some(address) => format!("{next_peer} ({address})"),
            None => next_peer.to_string(),
        };
        let sharing = Arc::clone(&sharing);
        let named = peer.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("echo-peer-{next_peer}"))
            .spawn(move || {
                let peer = named;
                if let Err(reason) = serve_peer(incoming, &sharing, &peer) {
                    eprintln!(
                        "tensorshare echo: peer {peer}: {}; closed its connection",
                        one_line(&reason)
                    );
                }
            });
        match spawned {
            Ok(thread) => {
                peers.retain(|peer| !peer.is_finished());
                peers.push(thread);
            }
            Err(e) => {
                eprintln!("tensorshare echo: peer {peer}: cannot start a thread for it: {e}");
            }
        }
    }
    // A peer that has hung up has a thread about to drop what it echoed:
    // given a moment, it does, and a memmap file a storage of it held goes
    // with the context below rather than outliving the process. Peers still
    // connected end with the process; what they hold is released with it.
    let deadline = std::time::Instant::now() + PEERS_GRACE;
    while peers.iter().any(|peer| !peer.is_finished()) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // Unfetched fds and the listening socket go now, explicitly (the
    // resource sharer's is abstract, or a socket file it removes too).
    sharing.shutdown();
    drop(listener);
    Ok(())
}

/// Refuses a key too short for a TCP listener: see [`MIN_TCP_AUTHKEY_LEN`].
fn check_tcp_authkey(authkey: &Authkey) -> Result<(), String> {
    let len = authkey.as_bytes().len();
    if len >= MIN_TCP_AUTHKEY_LEN {
        return Ok(());
    }
    Err(format!(
        "the authkey is {len} bytes; a TCP listener needs at least {MIN_TCP_AUTHKEY_LEN}: \
         whoever sees one handshake on the wire can test guesses at the key offline. Use a \
         random key of 32 bytes, e.g. `python3 -c \"import os; print(os.urandom(32).hex())\"`, \
         and give it to the peers as their multiprocessing authkey"
    ))
}

/// How long a stopping echo waits for its peers' threads to end.
const PEERS_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// How long to pause after a failed accept before polling again.
const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(50);

/// Echoes every message until the peer hangs up. A message refused whole
/// (it does not rebuild) is answered with nothing and logged, and the next
/// one is read; any other failure ends the connection.
fn serve_peer(
    incoming: IncomingConnection,
    sharing: &SharingContext,
    peer: &str,
) -> Result<(), Error> {
    let mut connection = Connection::new(incoming.authenticate()?, sharing)?;
    loop {
        let value = match connection.recv() {
            Ok(value) => value,
            Err(closed) if closed.is_closed() => return Ok(()),
            Err(refused) if refused.is_refused_message() => {
                eprintln!(
                    "tensorshare echo: peer {peer}: a message not echoed: {}",
                    one_line(&refused)
                );
                continue;
            }
            Err(e) => return Err(e),
        };
        connection.send(&value)?;
    }
}
