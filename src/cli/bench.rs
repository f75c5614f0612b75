//! `tensorshare bench`: torch's tensor sharing and ours side by side, one
//! way, on the same machine in one run. The torch side is
//! `compat/python/bench_peer.py`, built into this binary.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use tensorshare::connection::{ConnectionOptions, PrivateTempDir};
use tensorshare::{Address, Authkey, Listener, SharingContext, StrategyKind};

use super::bench_stream::{Workload, consume, produce};
use super::peer::{Peer, connect_back};

const BENCH_PEER: &str = include_str!("../../compat/python/bench_peer.py");

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// A Python with torch installed (default: $TENSORSHARE_PYTHON, else python3).
    #[arg(long)]
    python: Option<PathBuf>,
    /// Tensor sizes, comma-separated, e.g. 4KiB,1MiB,64MiB.
    #[arg(long, value_delimiter = ',', value_parser = parse_size, default_value = "4KiB,1MiB,64MiB")]
    sizes: Vec<usize>,
    /// Timed rounds per path; the table shows the median.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// A quarter of the tensors per round, for a quick look.
    #[arg(long)]
    quick: bool,
    /// The paths to run, comma-separated (default: all). The ratio column
    /// needs a torch -> torch path.
    #[arg(
        long,
        value_delimiter = ',',
        value_enum,
        default_value = "torch-fd,torch-fs,rust-to-rust,rust-to-torch,torch-to-rust,rust-to-rust-fs,rust-to-torch-fs,torch-to-rust-fs"
    )]
    paths: Vec<Route>,
}

#[derive(Debug, Args)]
pub struct BenchPeerArgs {
    /// The producer's listener; the authkey comes in TENSORSHARE_AUTHKEY.
    #[arg(long)]
    connect: Address,
}

/// The paths compared, in table order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Route {
    /// torch producer, torch consumer, file_descriptor.
    TorchFd,
    /// torch producer, torch consumer, file_system.
    TorchFs,
    /// Rust producer, Rust consumer, file_descriptor.
    RustToRust,
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
}

impl Route {
    fn label(self) -> String {
        let ends = match self {
            Route::TorchFd | Route::TorchFs => "torch -> torch",
            Route::RustToRust | Route::RustToRustFs => "Rust  -> Rust ",
            Route::RustToTorch | Route::RustToTorchFs => "Rust  -> torch",
            Route::TorchToRust | Route::TorchToRustFs => "torch -> Rust ",
        };
        format!("{ends}  {}", self.strategy())
    }

    /// The strategy every producer on this path shares with.
    fn strategy(self) -> StrategyKind {
        match self {
            Route::TorchFd | Route::RustToRust | Route::RustToTorch | Route::TorchToRust => {
                StrategyKind::FileDescriptor
            }
            Route::TorchFs | Route::RustToRustFs | Route::RustToTorchFs | Route::TorchToRustFs => {
                StrategyKind::FileSystem
            }
        }
    }

    /// Whether both ends are torch.
    fn torch_only(self) -> bool {
        matches!(self, Route::TorchFd | Route::TorchFs)
    }

    fn needs_torch(self) -> bool {
        !matches!(self, Route::RustToRust | Route::RustToRustFs)
    }
}

struct Row {
    path: Route,
    workload: Workload,
    /// Median seconds per tensor over the rounds.
    per_tensor: f64,
}

pub fn run(args: BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    let python = args
        .python
        .or_else(|| std::env::var_os("TENSORSHARE_PYTHON").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("python3"));
    let scratch = PrivateTempDir::create()?;
    let script = scratch.path().join("bench_peer.py");
    std::fs::write(&script, BENCH_PEER)
        .map_err(|e| format!("writing {}: {e}", script.display()))?;
    let torch = TorchPeer { python, script };
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
    let spinner = ProgressBar::new_spinner();
    spinner.set_style(
        ProgressStyle::with_template("{spinner} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    spinner.enable_steady_tick(Duration::from_millis(200));
    for &size in &args.sizes {
        let workload = workload_for(size, args.rounds, args.quick, fd_limit);
        let mut rows = Vec::new();
        for &path in &args.paths {
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
        spinner.suspend(|| print_rows(&rows));
    }
    spinner.finish_and_clear();
    Ok(())
}

/// The consumer of a Rust-to-Rust run.
pub fn run_peer(args: BenchPeerArgs) -> Result<(), Box<dyn std::error::Error>> {
    let (authkey, mut connection) = connect_back(&args.connect)?;
    let sharing = SharingContext::new(authkey);
    consume(&mut connection, &sharing)?;
    Ok(())
}

/// Enough tensors per round to outlast timer noise, without writing more
/// than about 512 MiB a round, and few enough that a producer keeping a
/// round's tensors stays within `fd_limit` (a `file_descriptor` tensor
/// holds about three fds until its consumer has it).
fn workload_for(size: usize, rounds: usize, quick: bool, fd_limit: u64) -> Workload {
    let fits = usize::try_from(fd_limit.saturating_sub(256) / 3).unwrap_or(usize::MAX);
    let count = ((512 << 20) / size.max(1))
        .clamp(12, 2000)
        .min(fits.max(12));
    let count = if quick { (count / 4).max(4) } else { count };
    Workload {
        size,
        count,
        rounds: rounds.max(1),
        warmup: (count / 10).max(2),
    }
}

/// Seconds per round for one path.
fn run_path(
    path: Route,
    workload: Workload,
    torch: &TorchPeer,
) -> Result<Vec<f64>, Box<dyn std::error::Error>> {
    let authkey = Authkey::random()?;
    let strategy = path.strategy().name();
    let sharing = SharingContext::new(authkey.clone()).with_strategy(path.strategy());
    if path.torch_only() {
        let output = torch.run(
            &["torch-to-torch", "--strategy", strategy],
            Some(workload),
            None,
        )?;
        return torch.seconds(output);
    }
    let listener = Listener::bind_in_private_dir(&authkey, ConnectionOptions::default())?;
    let address = listener.address().to_string();
    let torch_produces = matches!(path, Route::TorchToRust | Route::TorchToRustFs);
    let mut peer = match path {
        Route::RustToRust | Route::RustToRustFs => {
            Peer::spawn_self("bench-peer", listener.address(), &authkey, &[])?
        }
        Route::RustToTorch | Route::RustToTorchFs => {
            torch.spawn(&["consume"], None, Some((&address, &authkey)))?
        }
        _ => torch.spawn(
            &["produce", "--strategy", strategy],
            Some(workload),
            Some((&address, &authkey)),
        )?,
    };
    let mut connection = peer.accept(&listener)?;
    if torch_produces {
        consume(&mut connection, &sharing)?;
        return torch.seconds(peer.finish()?);
    }
    let rounds = produce(&mut connection, &sharing, workload)?;
    peer.finish()?;
    Ok(rounds.iter().map(Duration::as_secs_f64).collect())
}

fn print_rows(rows: &[Row]) {
    let torch_best = rows
        .iter()
        .filter(|row| row.path.torch_only())
        .map(|row| row.per_tensor)
        .fold(f64::INFINITY, f64::min);
    for row in rows {
        let size = row.workload.size;
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
    println!();
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

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// `4096`, `4KiB`, `1MiB`, `64MiB`, `1GiB`.
fn parse_size(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let number: usize = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a size like 4KiB"))?;
    let scale = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "K" | "k" => 1 << 10,
        "MiB" | "M" => 1 << 20,
        "GiB" | "G" => 1 << 30,
        other => return Err(format!("unknown unit {other:?}: use B, KiB, MiB or GiB")),
    };
    number
        .checked_mul(scale)
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{text:?} is not a positive size that fits in memory"))
}

/// The Python side: an interpreter with torch, and the script.
struct TorchPeer {
    python: PathBuf,
    script: PathBuf,
}

impl TorchPeer {
    fn check(&self) -> Result<(), String> {
        let status = Command::new(&self.python)
            .args(["-c", "import torch"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        match status {
            Ok(status) if status.success() => Ok(()),
            _ => Err(format!(
                "{} cannot import torch; pass --python (or set TENSORSHARE_PYTHON) to a Python \
                 with torch installed, e.g. the one scripts/python-env prints",
                self.python.display()
            )),
        }
    }

    fn command(
        &self,
        args: &[&str],
        workload: Option<Workload>,
        connect: Option<(&str, &Authkey)>,
    ) -> Command {
        let mut command = Command::new(&self.python);
        command.arg(&self.script).args(args);
        if let Some((address, authkey)) = connect {
            command.args(["--address", address, "--authkey", &authkey.to_hex()]);
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

    fn spawn(
        &self,
        args: &[&str],
        workload: Option<Workload>,
        connect: Option<(&str, &Authkey)>,
    ) -> Result<Peer, String> {
        Peer::spawn(&mut self.command(args, workload, connect))
            .map_err(|e| format!("starting {}: {e}", self.python.display()))
    }

    fn run(
        &self,
        args: &[&str],
        workload: Option<Workload>,
        connect: Option<(&str, &Authkey)>,
    ) -> Result<String, String> {
        self.spawn(args, workload, connect)?.finish()
    }

    /// The `seconds` list of the script's JSON result.
    fn seconds(&self, output: String) -> Result<Vec<f64>, Box<dyn std::error::Error>> {
        let line = output.lines().last().unwrap_or_default();
        let result: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| format!("bench_peer.py printed {line:?}: {e}"))?;
        let seconds = result["seconds"]
            .as_array()
            .ok_or_else(|| format!("bench_peer.py result lacks seconds: {line}"))?;
        Ok(seconds
            .iter()
            .filter_map(serde_json::Value::as_f64)
            .collect())
    }
}
