//! `tensorshare bench`: torch's tensor sharing and ours side by side, one
//! way, on the same machine in one run. The torch side is
//! `compat/python/bench_peer.py`, built into this binary.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::builder::RangedU64ValueParser;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use tensorshare::connection::Address;
use tensorshare::connection::Listener;
use tensorshare::connection::{AUTHKEY_ENV, ConnectionOptions, TcpAddress};
use tensorshare::{Authkey, Connection, SharingContext, StrategyKind};

use super::bench_busy::Load;
use super::bench_stream::{Framing, Workload, consume, produce};
use super::peer::{Peer, connect_back};
use crate::error::CliError;

mod targets;
mod tcp;

const BENCH_PEER: &str = include_str!("../../../compat/python/bench_peer.py");
const BENCH_BATCHES: &str = include_str!("../../../compat/python/bench_batches.py");

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// A Python with torch installed (default: $TENSORSHARE_PYTHON, else python3).
    #[arg(long)]
    python: Option<PathBuf>,
    /// What to time: single tensors streamed one way (`--sizes`,
    /// `--paths`), DataLoader-shaped batches fed to a torch training
    /// loop by torch's DataLoader and by every producer, `bytes` over
    /// TCP (`--sizes`, `--tcp-address`) against torch pickling to torch
    /// over the same link, or checkpoint files inspected and converted by
    /// us and by torch (`--file-size`, `--small-tensors`, `--dir`).
    #[arg(long, value_enum, default_value = "streams")]
    workload: BenchWorkload,
    /// Tensor sizes, comma-separated, e.g. 4KiB,1MiB,64MiB (the default).
    // Defaulted in `run`, not by clap, so that `--workload files` can tell
    // it was given.
    #[arg(long, value_delimiter = ',', value_parser = super::format::parse_size)]
    sizes: Vec<usize>,
    /// Timed rounds per path, 1 to 1000; the table shows the median.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 5,
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=1000), allow_negative_numbers = true
    )]
    rounds: usize,
    /// A quarter of the tensors per round, for a quick look.
    #[arg(long)]
    quick: bool,
    /// The paths to run, comma-separated (default: all but the Rust/torch
    /// bytes and memmap ones, each of which costs a torch start per size).
    /// The ratio column needs a torch -> torch path; the lines under each
    /// size need rust-to-rust and torch-fd or torch-fs (file_descriptor),
    /// rust-to-rust-bytes and torch-pickle (bytes).
    #[arg(
        long,
        value_delimiter = ',',
        value_enum,
        default_value = "torch-fd,torch-fs,torch-pickle,rust-to-rust,rust-to-rust-raw-fds,\
                         rust-to-torch,torch-to-rust,rust-to-rust-fs,rust-to-torch-fs,torch-to-rust-fs,\
                         rust-to-rust-bytes,rust-to-rust-raw-bytes,rust-to-rust-memmap"
    )]
    paths: Vec<Route>,
    /// With `--workload batches`, the feeds to run, comma-separated
    /// (default: all): dataloader-1, dataloader-2, torch-producer,
    /// rust-default (no strategy named, a batch in one storage, as the
    /// crate docs' first example), rust-STRATEGY and rust-STRATEGY-arena
    /// into torch's training loop
    /// (STRATEGY: fd, fs, bytes, memmap), rust-to-rust-fd and
    /// rust-to-rust-fd-arena into the same loop in Rust.
    #[arg(long, value_delimiter = ',', value_name = "FEEDS")]
    feeds: Vec<String>,
    /// With `--workload batches`, feed this many torch training loops at
    /// once, each its own batches (as DDP ranks take theirs), one table
    /// each, comma-separated (e.g. 1,2,4): one Rust producer process over N
    /// connections against N DataLoaders, aggregate batches a second.
    /// Feeds (default: dataloader-2 and rust-STRATEGY-arena): dataloader-K
    /// and rust-STRATEGY[-arena].
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "N",
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=64)
    )]
    consumers: Vec<usize>,
    /// With `--workload batches`, run every table twice: quiet, then with
    /// N `sh -c 'while :; do :; done'` processes beside it (started and
    /// killed by the bench), and print how much slower each row went.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        value_parser = RangedU64ValueParser::<usize>::new().range(0..=64)
    )]
    busy_loops: usize,
    /// With `--workload batches`, run every table again beside a writer
    /// at nice 19 that writes a file of SIZE (e.g. 2GiB) into the
    /// temporary directory and removes it, over and over (started and
    /// stopped by the bench), as a package install or a checkpoint save
    /// does beside a training job; and print how much slower each row
    /// went.
    #[arg(long, value_name = "SIZE", value_parser = super::format::parse_size)]
    busy_io: Option<usize>,
    /// With `--workload batches`, run the tables in a mount namespace of
    /// their own whose `/dev/shm` is a tmpfs of SIZE (e.g. 64MiB, Docker's
    /// default), as in a container; a feed that cannot share there shows
    /// as a failed row. Needs root.
    #[arg(long, value_name = "SIZE", value_parser = super::format::parse_size)]
    shm_size: Option<usize>,
    /// With `--workload batches`, the intra-op threads of every torch
    /// process the bench starts (`OMP_NUM_THREADS`). By default torch's own,
    /// one a core, for one training loop; with `--consumers N`, the cores
    /// shared among the N loops (at least one each), as `torchrun` does for
    /// several ranks on one host.
    #[arg(
        long,
        value_name = "N",
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=1024)
    )]
    torch_threads: Option<usize>,
    /// With `--workload tcp`, where the listening end of each path binds:
    /// `HOST:PORT`, port 0 for a free one (default 127.0.0.1:0). A
    /// non-loopback address times the link it is on (a veth pair, a NIC);
    /// the other end connects to the address the listener reports.
    #[arg(long, value_name = "HOST:PORT")]
    tcp_address: Option<TcpAddress>,
    /// With `--workload tcp`, set TCP_NODELAY on tensorshare's ends (torch's
    /// stay as CPython leaves them, off).
    #[arg(long)]
    tcp_nodelay: bool,
    /// With `--workload tcp`, words put before the command of every
    /// connecting peer, e.g. `ip netns exec other`, so that it runs across
    /// a link from the listening end (which this process and, for
    /// torch -> torch, torch's consumer are).
    #[arg(long, value_name = "COMMAND", value_delimiter = ' ', num_args = 1..)]
    tcp_peer_wrapper: Vec<String>,
    /// With `--workload files`, the tensor bytes of each of the two large
    /// checkpoints (a zip and a legacy torch.save of 200 float32 tensors);
    /// default 2GiB. The cuda:0 checkpoint is an eighth of it.
    #[arg(long, value_name = "SIZE", value_parser = super::format::parse_size)]
    file_size: Option<usize>,
    /// With `--workload files`, how many 16-element float32 tensors the
    /// small-tensors checkpoint holds; default 200000.
    #[arg(
        long,
        value_name = "N",
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=100_000_000)
    )]
    small_tensors: Option<usize>,
    /// With `--workload files`, where to write the checkpoints, in a
    /// private directory removed at the end (default: $TMPDIR). One
    /// checkpoint and one conversion of it at a time: about twice
    /// --file-size of disk.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// With `--workload servers`, the torch clients connected at once
    /// (rounded up to a multiple of 8: 8 connections per process).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 64,
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=512)
    )]
    clients: usize,
    /// With `--workload servers`, the requests each client sends.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 50,
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=100_000)
    )]
    requests: usize,
}

#[derive(Debug, Args)]
pub struct BenchPeerArgs {
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

/// What `bench` times.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BenchWorkload {
    /// Tensors of each size streamed one way, on every path.
    Streams,
    /// Batches into a training loop (`bench_batches`).
    Batches,
    /// `bytes` over TCP, Rust and torch at either end, against torch's
    /// pickle over the same link.
    Tcp,
    /// Checkpoint files inspected and converted by tensorshare and by
    /// torch (`bench_files`).
    Files,
    /// Many torch clients at once against one echo server: torch's, ours
    /// with a thread per client, ours on tokio (`bench_servers`).
    Servers,
}

/// The paths compared, in table order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Route {
    /// torch producer, torch consumer, file_descriptor.
    TorchFd,
    /// torch producer, torch consumer, file_system.
    TorchFs,
    /// torch producer, torch consumer, stock `pickle` of a plain tensor
    /// (what the bytes strategy sends): no sharing.
    TorchPickle,
    /// Rust producer, Rust consumer, file_descriptor.
    RustToRust,
    /// Rust producer, Rust consumer, file_descriptor with each fd alone on
    /// a message: the strategy's kernel work without the pickle, resource
    /// sharer or cache around it, the floor under rust-to-rust.
    RustToRustRawFds,
    /// Rust producer, torch consumer, file_descriptor.
    RustToTorch,
    /// torch producer, Rust consumer, file_descriptor.
    TorchToRust,
    /// Rust producer, Rust consumer, file_system.
    RustToRustFs,
    /// Rust producer, torch consumer, file_system.
    RustToTorchFs,
    /// torch producer, Rust consumer, file_system.
    TorchToRustFs,
    /// Rust producer, Rust consumer, bytes.
    RustToRustBytes,
    /// Rust producer, Rust consumer, each storage's bytes alone as one
    /// message: the socket's two copies without the pickle around them,
    /// the floor under rust-to-rust-bytes.
    RustToRustRawBytes,
    /// Rust producer, torch consumer, bytes.
    RustToTorchBytes,
    /// torch producer (stock `pickle`), Rust consumer, bytes.
    TorchToRustBytes,
    /// Rust producer, Rust consumer, memmap.
    RustToRustMemmap,
    /// Rust producer, torch consumer, memmap (torch has no memmap producer).
    RustToTorchMemmap,
}

impl Route {
    fn label(self) -> String {
        // "Rust" padded to "torch"'s width keeps the arrows in one column.
        let ends = self.ends().replace("Rust", "Rust ");
        match self.framing() {
            Framing::RawFds => return format!("{ends}  fds, no pickle"),
            Framing::RawBytes => return format!("{ends}  bytes, no pickle"),
            Framing::Pickled => {}
        }
        if self.torch_produces() && self.strategy() == StrategyKind::Bytes {
            // torch has no bytes strategy: its producer pickles the tensor.
            return format!("{ends}  pickle (bytes)");
        }
        format!("{ends}  {}", self.strategy())
    }

    /// Who produces and who consumes, e.g. `Rust -> torch`.
    fn ends(self) -> &'static str {
        match (self.torch_produces(), self.torch_consumes()) {
            (true, true) => "torch -> torch",
            (false, false) => "Rust -> Rust",
            (false, true) => "Rust -> torch",
            (true, false) => "torch -> Rust",
        }
    }

    /// The path as a line under the table names it: `torch file_system`,
    /// `torch pickle`, `Rust -> Rust file_descriptor`.
    fn short_label(self) -> String {
        match self {
            Route::TorchPickle => "torch pickle".to_owned(),
            path if path.torch_only() => format!("torch {}", path.strategy()),
            path => format!("{} {}", path.ends(), path.strategy()),
        }
    }

    /// Who produces, who consumes, and the strategy every producer on this
    /// path shares with (for a torch producer, `bytes` is stock `pickle` of
    /// a plain tensor): the one table the questions below are answered from.
    fn parts(self) -> (Side, Side, StrategyKind) {
        use Side::{Rust, Torch};
        use StrategyKind::{Bytes, FileDescriptor, FileSystem, Memmap};
        match self {
            Route::TorchFd => (Torch, Torch, FileDescriptor),
            Route::TorchFs => (Torch, Torch, FileSystem),
            Route::TorchPickle => (Torch, Torch, Bytes),
            Route::RustToRust | Route::RustToRustRawFds => (Rust, Rust, FileDescriptor),
            Route::RustToTorch => (Rust, Torch, FileDescriptor),
            Route::TorchToRust => (Torch, Rust, FileDescriptor),
            Route::RustToRustFs => (Rust, Rust, FileSystem),
            Route::RustToTorchFs => (Rust, Torch, FileSystem),
            Route::TorchToRustFs => (Torch, Rust, FileSystem),
            Route::RustToRustBytes | Route::RustToRustRawBytes => (Rust, Rust, Bytes),
            Route::RustToTorchBytes => (Rust, Torch, Bytes),
            Route::TorchToRustBytes => (Torch, Rust, Bytes),
            Route::RustToRustMemmap => (Rust, Rust, Memmap),
            Route::RustToTorchMemmap => (Rust, Torch, Memmap),
        }
    }

    fn strategy(self) -> StrategyKind {
        self.parts().2
    }

    fn framing(self) -> Framing {
        match self {
            Route::RustToRustRawFds => Framing::RawFds,
            Route::RustToRustRawBytes => Framing::RawBytes,
            _ => Framing::Pickled,
        }
    }

    fn torch_produces(self) -> bool {
        self.parts().0 == Side::Torch
    }

    fn torch_consumes(self) -> bool {
        self.parts().1 == Side::Torch
    }

    /// Whether both ends are torch.
    fn torch_only(self) -> bool {
        self.torch_produces() && self.torch_consumes()
    }

    fn needs_torch(self) -> bool {
        self.torch_produces() || self.torch_consumes()
    }

    /// The name `--paths` takes.
    fn name(self) -> String {
        value_name(self)
    }
}

/// The name a command line gives `value`.
fn value_name(value: impl ValueEnum + std::fmt::Debug) -> String {
    value
        .to_possible_value()
        .map_or_else(|| format!("{value:?}"), |name| name.get_name().to_owned())
}

/// One end of a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Rust,
    Torch,
}

struct Row {
    path: Route,
    workload: Workload,
    /// Median seconds per tensor over the rounds.
    per_tensor: f64,
}

pub fn run(args: BenchArgs) -> Result<(), CliError> {
    check_files_flags(&args)?;
    if args.workload == BenchWorkload::Batches
        && let Some(size) = args.shm_size
        && super::bench_shm::inside().is_none()
    {
        return super::bench_shm::run_inside(size);
    }
    let python = args
        .python
        .or_else(|| std::env::var_os("TENSORSHARE_PYTHON").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("python3"));
    let scratch = tempfile::Builder::new()
        .prefix("tensorshare-bench-")
        .tempdir()
        .map_err(|e| CliError::io("creating the scratch directory for the peer scripts", e))?;
    let script = scratch.path().join("bench_peer.py");
    // bench_batches.py imports bench_peer.py from beside it.
    let batches_script = scratch.path().join("bench_batches.py");
    for (path, text) in [(&script, BENCH_PEER), (&batches_script, BENCH_BATCHES)] {
        std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    if args.workload == BenchWorkload::Servers {
        TorchPeer {
            python: python.clone(),
            script,
            threads: None,
        }
        .check()?;
        let options = super::bench_servers::Options {
            python: &python,
            scratch: scratch.path(),
            clients: args.clients,
            requests: if args.quick {
                args.requests.div_ceil(4)
            } else {
                args.requests
            },
            message_bytes: args.sizes.first().copied().unwrap_or(4 << 10),
            rounds: args.rounds,
        };
        return super::bench_servers::run(&options);
    }
    if args.workload == BenchWorkload::Files {
        let torch = TorchPeer {
            python,
            script,
            threads: None,
        };
        torch.check()?;
        let options = super::bench_files::Options {
            python: &torch.python,
            dir: args.dir.as_deref(),
            file_size: args.file_size.unwrap_or(DEFAULT_FILE_SIZE),
            small_tensors: args.small_tensors.unwrap_or(DEFAULT_SMALL_TENSORS),
            rounds: args.rounds,
        };
        return super::bench_files::run(&options);
    }
    if args.workload != BenchWorkload::Batches
        && (!args.consumers.is_empty()
            || args.busy_loops > 0
            || args.busy_io.is_some()
            || args.shm_size.is_some()
            || args.torch_threads.is_some())
    {
        return Err(super::usage_error(
            "bench",
            clap::error::ErrorKind::ArgumentConflict,
            "--consumers, --busy-loops, --busy-io, --shm-size and --torch-threads go with \
             --workload batches",
        )
        .into());
    }
    if args.workload == BenchWorkload::Batches {
        let torch = TorchPeer {
            python,
            script: batches_script,
            threads: args.torch_threads,
        };
        let known = super::bench_batches::feed_names();
        if let Some(unknown) = args.feeds.iter().find(|feed| !known.contains(feed)) {
            return Err(super::usage_error(
                "bench",
                clap::error::ErrorKind::InvalidValue,
                format!(
                    "unknown feed {unknown:?}; the feeds are {}",
                    known.join(", ")
                ),
            )
            .into());
        }
        raise_fd_limit();
        torch.check()?;
        let loads: Vec<Load> = [
            (args.busy_loops > 0).then_some(Load::Loops(args.busy_loops)),
            args.busy_io.map(|bytes| Load::Io {
                mib: (bytes as u64).div_ceil(1 << 20),
            }),
        ]
        .into_iter()
        .flatten()
        .collect();
        let options = super::bench_batches::Options {
            feeds: &args.feeds,
            rounds: args.rounds,
            quick: args.quick,
            consumers: &args.consumers,
            loads: &loads,
            private_shm: super::bench_shm::inside(),
        };
        return super::bench_batches::run(&torch, &options);
    }
    let torch = TorchPeer {
        python,
        script,
        threads: None,
    };
    let sizes = if args.sizes.is_empty() {
        DEFAULT_SIZES.to_vec()
    } else {
        args.sizes
    };
    if args.workload == BenchWorkload::Tcp {
        torch.check()?;
        let link = tcp::TcpLink {
            torch: &torch,
            address: args
                .tcp_address
                .unwrap_or_else(|| SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into())
                .into(),
            nodelay: args.tcp_nodelay,
            wrapper: args.tcp_peer_wrapper,
        };
        return tcp::run(&link, &sizes, args.rounds, args.quick);
    }
    // Before any peer runs, so that none of them competes with it.
    let memcpy: Vec<f64> = sizes.iter().map(|&size| memcpy_seconds(size)).collect();
    let fd_limit = raise_fd_limit();
    if args.paths.iter().any(|path| path.needs_torch()) {
        torch.check()?;
    }

    println!(
        "tensorshare bench: uint8 tensors streamed one way, the producer writing every byte; \
         median of {} rounds\n",
        args.rounds
    );
    println!(
        "{:<9} {:<32} {:>7} {:>12} {:>8} {:>14}",
        "size", "path", "tensors", "per tensor", "GB/s", "vs torch best"
    );
    let spinner = spinner();
    for (&size, &memcpy) in sizes.iter().zip(&memcpy) {
        let mut rows = Vec::new();
        for &path in &args.paths {
            let workload = workload_for(path, size, args.rounds, args.quick, fd_limit);
            spinner.set_message(format!(
                "{} {}",
                super::format::bytes(size as u64),
                path.label()
            ));
            let rounds = run_path(path, workload, &torch)?;
            rows.push(Row {
                path,
                workload,
                per_tensor: median(rounds) / workload.count as f64,
            });
        }
        spinner.suspend(|| print_rows(&rows, size, memcpy));
    }
    spinner.finish_and_clear();
    Ok(())
}

/// `--sizes` when not given.
const DEFAULT_SIZES: [usize; 3] = [4 << 10, 1 << 20, 64 << 20];
/// `--file-size` when not given.
const DEFAULT_FILE_SIZE: usize = 2 << 30;
/// `--small-tensors` when not given.
const DEFAULT_SMALL_TENSORS: usize = 200_000;

/// Rejects the flags of the files workload with any other, and the flags
/// of the others with it: a flag that does nothing would read as if it
/// had shaped the table.
fn check_files_flags(args: &BenchArgs) -> Result<(), CliError> {
    let files_flags = [
        ("--file-size", args.file_size.is_some()),
        ("--small-tensors", args.small_tensors.is_some()),
        ("--dir", args.dir.is_some()),
    ];
    let other_flags = [
        ("--sizes", !args.sizes.is_empty()),
        ("--quick", args.quick),
        ("--feeds", !args.feeds.is_empty()),
        ("--consumers", !args.consumers.is_empty()),
        ("--busy-loops", args.busy_loops > 0),
        ("--busy-io", args.busy_io.is_some()),
        ("--shm-size", args.shm_size.is_some()),
        ("--torch-threads", args.torch_threads.is_some()),
        ("--tcp-address", args.tcp_address.is_some()),
        ("--tcp-nodelay", args.tcp_nodelay),
        ("--tcp-peer-wrapper", !args.tcp_peer_wrapper.is_empty()),
    ];
    let given = |flags: &[(&'static str, bool)]| -> Vec<&'static str> {
        flags
            .iter()
            .filter(|(_, given)| *given)
            .map(|(flag, _)| *flag)
            .collect()
    };
    let message = if args.workload == BenchWorkload::Files {
        let misplaced = given(&other_flags);
        if misplaced.is_empty() {
            return Ok(());
        }
        let verb = if misplaced.len() == 1 { "does" } else { "do" };
        format!(
            "{} {verb} not go with --workload files, which takes --file-size, \
             --small-tensors, --dir, --rounds and --python",
            misplaced.join(", ")
        )
    } else {
        let misplaced = given(&files_flags);
        if misplaced.is_empty() {
            return Ok(());
        }
        let (verb, them) = if misplaced.len() == 1 {
            ("goes", "it")
        } else {
            ("go", "them")
        };
        format!(
            "{} {verb} with --workload files: add that, or drop {them}",
            misplaced.join(", ")
        )
    };
    Err(super::usage_error("bench", clap::error::ErrorKind::ArgumentConflict, message).into())
}

/// A spinner saying what runs, ticking on its own.
pub(super) fn spinner() -> ProgressBar {
    let spinner = ProgressBar::new_spinner();
    spinner.set_style(
        ProgressStyle::with_template("{spinner} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    spinner.enable_steady_tick(Duration::from_millis(200));
    spinner
}

/// The consumer of a Rust-to-Rust run.
pub fn run_peer(args: BenchPeerArgs) -> Result<(), CliError> {
    let options = ConnectionOptions::default().with_tcp_nodelay(args.tcp_nodelay);
    let (authkey, connection) = connect_back(&args.connect, options)?;
    let sharing = SharingContext::new(authkey);
    let mut connection = Connection::new(connection, &sharing)?;
    if args.batches {
        let seconds = super::bench_batch_stream::consume_batches(&mut connection)?;
        println!("{}", serde_json::json!({ "seconds": seconds }));
        return Ok(());
    }
    consume(&mut connection, args.framing)?;
    Ok(())
}

/// Enough tensors per round to outlast timer noise, without writing more
/// than about 512 MiB a round, and few enough that a producer keeping a
/// round's tensors stays within `fd_limit` (a `file_descriptor` tensor
/// holds about three fds until its consumer has it). Paths that copy every
/// byte through the socket (`bytes`) run an eighth of that: they take far
/// longer per tensor, so fewer outlast the noise as well.
fn workload_for(path: Route, size: usize, rounds: usize, quick: bool, fd_limit: u64) -> Workload {
    let fits = usize::try_from(fd_limit.saturating_sub(256) / 3).unwrap_or(usize::MAX);
    let count = ((512 << 20) / size.max(1))
        .clamp(12, 2000)
        .min(fits.max(12));
    let count = if path.strategy() == StrategyKind::Bytes {
        (count / 8).max(4)
    } else {
        count
    };
    let count = if quick { (count / 4).max(4) } else { count };
    Workload {
        size,
        count,
        rounds: rounds.max(1),
        warmup: (count / 10).max(2),
    }
}

/// Seconds per round for one path.
fn run_path(path: Route, workload: Workload, torch: &TorchPeer) -> Result<Vec<f64>, CliError> {
    let authkey = Authkey::random()?;
    let strategy = path.strategy().name();
    let mut sharing = SharingContext::new(authkey.clone()).with_strategy(path.strategy());
    if path.strategy() == StrategyKind::Memmap {
        // The producer keeps every tensor until the consumer's ack, which
        // comes after the consumer has mapped each file: holding sent files
        // longer (5 minutes by default) would only pile up a few GiB of
        // files in $TMPDIR over a run.
        sharing = sharing.with_unfetched_lifetime(Duration::ZERO);
    }
    if path.torch_only() {
        let output = torch.run(
            &["torch-to-torch", "--strategy", strategy],
            Some(workload),
            None,
        )?;
        return torch.seconds(output);
    }
    let listener = Listener::bind_unique_abstract(&authkey, ConnectionOptions::default())?;
    let address = listener.address().to_string();
    let mut peer = if path.torch_produces() {
        torch.spawn(
            &["produce", "--strategy", strategy],
            Some(workload),
            Some((&address, &authkey)),
        )?
    } else if path.torch_consumes() {
        torch.spawn(&["consume"], None, Some((&address, &authkey)))?
    } else {
        let framing = value_name(path.framing());
        Peer::spawn_self(
            "bench-peer",
            listener.address(),
            &authkey,
            &["--framing", &framing],
        )?
    };
    let mut connection = Connection::new(peer.accept(&listener)?, &sharing)?;
    if path.torch_produces() {
        consume(&mut connection, Framing::Pickled)?;
        return torch.seconds(peer.finish()?);
    }
    let rounds = produce(&mut connection, &sharing, workload, path.framing())?;
    peer.finish()?;
    Ok(rounds.iter().map(Duration::as_secs_f64).collect())
}

fn print_rows(rows: &[Row], size: usize, memcpy: f64) {
    let torch_best = rows
        .iter()
        .filter(|row| row.path.torch_only())
        .map(|row| row.per_tensor)
        .fold(f64::INFINITY, f64::min);
    for row in rows {
        let ratio = if torch_best.is_finite() {
            format!("{:.2}x", torch_best / row.per_tensor)
        } else {
            "-".into()
        };
        println!(
            "{:<9} {:<32} {:>7} {:>12} {:>8.2} {:>14}",
            super::format::bytes(size as u64),
            row.path.label(),
            row.workload.count,
            super::format::duration(row.per_tensor),
            size as f64 / row.per_tensor / 1e9,
            ratio,
        );
    }
    for line in targets::lines(rows, size, memcpy) {
        println!("{line}");
    }
    println!();
}

/// Median seconds for one plain copy of `size` bytes within this process,
/// between buffers already faulted in: the bandwidth the bytes strategy's
/// copies are up against. Small sizes repeat the copy to outlast the timer.
fn memcpy_seconds(size: usize) -> f64 {
    const SAMPLES: usize = 5;
    let source = vec![0x5a_u8; size];
    let mut target = vec![0xa5_u8; size];
    let repeats = ((64 << 20) / size.max(1)).max(1);
    let samples = (0..SAMPLES)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..repeats {
                target.copy_from_slice(std::hint::black_box(&source));
                std::hint::black_box(&mut target);
            }
            start.elapsed().as_secs_f64() / repeats as f64
        })
        .collect();
    median(samples)
}

/// Raises this process's soft fd limit to the hard one, as torch's docs
/// advise for `file_descriptor` sharing; peers started from here inherit
/// it. Returns the soft limit now in force.
fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}

pub(super) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// The Python side: an interpreter with torch, the script, and the
/// intra-op threads of each process (`None` for torch's default).
#[derive(Clone)]
pub(super) struct TorchPeer {
    python: PathBuf,
    script: PathBuf,
    threads: Option<usize>,
}

impl TorchPeer {
    /// The peer for `consumers` training loops at once: unless threads were
    /// given, the cores shared among them, as `torchrun` sets
    /// `OMP_NUM_THREADS` for several ranks, since N loops of one thread a
    /// core each would spin in each other's way at every parallel op.
    pub(super) fn for_consumers(&self, consumers: usize) -> Self {
        let threads = self.threads.or_else(|| {
            let cores = std::thread::available_parallelism().map_or(1, usize::from);
            (consumers > 1).then(|| (cores / consumers).max(1))
        });
        Self {
            threads,
            ..self.clone()
        }
    }

    /// The intra-op threads each torch process is started with, when set.
    pub(super) fn threads(&self) -> Option<usize> {
        self.threads
    }

    pub(super) fn check(&self) -> Result<(), String> {
        if has_module(&self.python, "torch") {
            return Ok(());
        }
        Err(format!(
            "{} has no torch; pass --python (or set TENSORSHARE_PYTHON) to a Python \
             with torch installed, e.g. the one scripts/python-env prints",
            self.python.display()
        ))
    }

    fn command(
        &self,
        args: &[&str],
        workload: Option<Workload>,
        connect: Option<(&str, &Authkey)>,
    ) -> Command {
        let mut command = Command::new(&self.python);
        command.arg(&self.script).args(args);
        if let Some(threads) = self.threads {
            command.env("OMP_NUM_THREADS", threads.to_string());
        }
        if let Some((address, authkey)) = connect {
            // In the environment: a command line is visible to every user.
            command
                .args(["--address", address])
                .env(AUTHKEY_ENV, authkey.to_hex());
        }
        if let Some(w) = workload {
            for (flag, value) in [
                ("--size", w.size),
                ("--count", w.count),
                ("--rounds", w.rounds),
                ("--warmup", w.warmup),
            ] {
                command.args([flag, &value.to_string()]);
            }
        }
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    pub(super) fn spawn(
        &self,
        args: &[&str],
        workload: Option<Workload>,
        connect: Option<(&str, &Authkey)>,
    ) -> Result<Peer, String> {
        Peer::spawn(&mut self.command(args, workload, connect))
            .map_err(|e| format!("starting {}: {e}", self.python.display()))
    }

    /// Starts the script with `authkey` in its environment and no
    /// `--address`, for a subcommand that takes the address otherwise.
    pub(super) fn spawn_with_authkey(
        &self,
        args: &[&str],
        authkey: &Authkey,
    ) -> Result<Peer, String> {
        Peer::spawn(
            self.command(args, None, None)
                .env(AUTHKEY_ENV, authkey.to_hex()),
        )
        .map_err(|e| format!("starting {}: {e}", self.python.display()))
    }

    pub(super) fn run(
        &self,
        args: &[&str],
        workload: Option<Workload>,
        connect: Option<(&str, &Authkey)>,
    ) -> Result<String, String> {
        self.spawn(args, workload, connect)?.finish()
    }

    /// The `seconds` list of the script's JSON result.
    pub(super) fn seconds(&self, output: String) -> Result<Vec<f64>, CliError> {
        Ok(Self::result(&output)?.0)
    }

    /// The `seconds` list and the `checked` count of a
    /// `bench_batches.py` result.
    pub(super) fn seconds_and_checked(&self, output: String) -> Result<(Vec<f64>, u64), CliError> {
        let (seconds, result) = Self::result(&output)?;
        let checked = result["checked"]
            .as_u64()
            .ok_or_else(|| format!("bench_batches.py result lacks checked: {result}"))?;
        Ok((seconds, checked))
    }

    fn result(output: &str) -> Result<(Vec<f64>, serde_json::Value), CliError> {
        let line = output.lines().last().unwrap_or_default();
        let result: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| format!("bench_peer.py printed {line:?}: {e}"))?;
        let seconds = result["seconds"]
            .as_array()
            .ok_or_else(|| format!("bench_peer.py result lacks seconds: {line}"))?
            .iter()
            .filter_map(serde_json::Value::as_f64)
            .collect();
        Ok((seconds, result))
    }
}

/// The row of `route`, if it ran.
fn row_of(rows: &[Row], route: Route) -> Option<&Row> {
    rows.iter().find(|row| row.path == route)
}

/// The fastest of `routes` among `rows`.
fn fastest<'a>(rows: &'a [Row], routes: &[Route]) -> Option<&'a Row> {
    rows.iter()
        .filter(|row| routes.contains(&row.path))
        .min_by(|a, b| a.per_tensor.total_cmp(&b.per_tensor))
}

/// Whether `python` has `module` installed. Found, not imported: importing
/// torch costs a second or two, which every peer the bench starts pays
/// anyway, and a torch that is there but fails to import says why in the
/// first peer's error.
pub(super) fn has_module(python: &std::path::Path, module: &str) -> bool {
    Command::new(python)
        .args([
            "-c",
            &format!(
                "import importlib.util, sys; sys.exit(importlib.util.find_spec({module:?}) is None)"
            ),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}
