//! The bench's command line and the run of the workload it names: torch's
//! tensor sharing and ours side by side, one way, on the same machine in
//! one run (`--workload streams`, `tcp`, `batches`, `servers`), or
//! checkpoint files inspected and converted by tensorshare and by torch
//! (`--workload files`). The torch side is `compat/python/bench_peer.py`
//! and its siblings, built into this binary.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use clap::builder::RangedU64ValueParser;
use clap::error::ErrorKind;
use clap::{Args, ValueEnum};
use tensorshare::connection::TcpAddress;
use tensorshare_cli::error::CliError;
use tensorshare_cli::format;

use crate::batches::busy::Load;
use crate::batches::{self, shm};
use crate::fd_limit::raise_fd_limit;
use crate::files;
use crate::servers;
use crate::streams::{self, route::Route};
use crate::tcp;
use crate::torch_peer::TorchPeer;

const BENCH_PEER: &str = include_str!("../../compat/python/bench_peer.py");
const BENCH_BATCHES: &str = include_str!("../../compat/python/bench_batches.py");

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
    #[arg(long, value_delimiter = ',', value_parser = format::parse_size)]
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
    #[arg(long, value_name = "SIZE", value_parser = format::parse_size)]
    busy_io: Option<usize>,
    /// With `--workload batches`, run the tables in a mount namespace of
    /// their own whose `/dev/shm` is a tmpfs of SIZE (e.g. 64MiB, Docker's
    /// default), as in a container; a feed that cannot share there shows
    /// as a failed row. Needs root.
    #[arg(long, value_name = "SIZE", value_parser = format::parse_size)]
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
    #[arg(long, value_name = "SIZE", value_parser = format::parse_size)]
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

/// What the bench times.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BenchWorkload {
    /// Tensors of each size streamed one way, on every path.
    Streams,
    /// Batches into a training loop.
    Batches,
    /// `bytes` over TCP, Rust and torch at either end, against torch's
    /// pickle over the same link.
    Tcp,
    /// Checkpoint files inspected and converted by tensorshare and by
    /// torch.
    Files,
    /// Many torch clients at once against one echo server: torch's, ours
    /// with a thread per client, ours on tokio.
    Servers,
}

/// Runs the workload `args` name and prints its tables.
pub fn run(args: BenchArgs) -> Result<(), CliError> {
    check_files_flags(&args)?;
    if args.workload == BenchWorkload::Batches
        && let Some(size) = args.shm_size
        && shm::inside().is_none()
    {
        return shm::run_inside(size);
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
        let torch = TorchPeer::new(python, script, None);
        torch.check()?;
        let options = servers::Options {
            python: torch.python(),
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
        return servers::run(&options);
    }
    if args.workload == BenchWorkload::Files {
        let torch = TorchPeer::new(python, script, None);
        torch.check()?;
        let options = files::Options {
            python: torch.python(),
            dir: args.dir.as_deref(),
            file_size: args.file_size.unwrap_or(DEFAULT_FILE_SIZE),
            small_tensors: args.small_tensors.unwrap_or(DEFAULT_SMALL_TENSORS),
            rounds: args.rounds,
        };
        return files::run(&options);
    }
    if args.workload != BenchWorkload::Batches
        && (!args.consumers.is_empty()
            || args.busy_loops > 0
            || args.busy_io.is_some()
            || args.shm_size.is_some()
            || args.torch_threads.is_some())
    {
        return Err(CliError::usage(
            ErrorKind::ArgumentConflict,
            "--consumers, --busy-loops, --busy-io, --shm-size and --torch-threads go with \
             --workload batches",
        ));
    }
    if args.workload == BenchWorkload::Batches {
        let torch = TorchPeer::new(python, batches_script, args.torch_threads);
        let known = batches::feed::feed_names();
        if let Some(unknown) = args.feeds.iter().find(|feed| !known.contains(feed)) {
            return Err(CliError::usage(
                ErrorKind::InvalidValue,
                format!(
                    "unknown feed {unknown:?}; the feeds are {}",
                    known.join(", ")
                ),
            ));
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
        let options = batches::Options {
            feeds: &args.feeds,
            rounds: args.rounds,
            quick: args.quick,
            consumers: &args.consumers,
            loads: &loads,
            private_shm: shm::inside(),
        };
        return batches::run(&torch, &options);
    }
    let torch = TorchPeer::new(python, script, None);
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
    streams::run(&torch, &sizes, &args.paths, args.rounds, args.quick)
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
    Err(CliError::usage(ErrorKind::ArgumentConflict, message))
}
