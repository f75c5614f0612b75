//! The paths the streams table compares (`--paths`): who produces, who
//! consumes, over which strategy and framing; how many tensors a round
//! each sends at a size; and the row each gives.

use clap::ValueEnum;
use tensorshare::StrategyKind;

use crate::stream_protocol::{Framing, Workload};

/// The paths compared, in table order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Route {
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
    /// How the table's row names it, e.g. `Rust  -> torch  file_system`.
    pub fn label(self) -> String {
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
    pub fn ends(self) -> &'static str {
        match (self.torch_produces(), self.torch_consumes()) {
            (true, true) => "torch -> torch",
            (false, false) => "Rust -> Rust",
            (false, true) => "Rust -> torch",
            (true, false) => "torch -> Rust",
        }
    }

    /// The path as a line under the table names it: `torch file_system`,
    /// `torch pickle`, `Rust -> Rust file_descriptor`.
    pub fn short_label(self) -> String {
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

    /// The strategy every producer on this path shares with.
    pub fn strategy(self) -> StrategyKind {
        self.parts().2
    }

    /// How a Rust-to-Rust path's tensors travel.
    pub fn framing(self) -> Framing {
        match self {
            Route::RustToRustRawFds => Framing::RawFds,
            Route::RustToRustRawBytes => Framing::RawBytes,
            _ => Framing::Pickled,
        }
    }

    /// Whether the producer is torch.
    pub fn torch_produces(self) -> bool {
        self.parts().0 == Side::Torch
    }

    /// Whether the consumer is torch.
    pub fn torch_consumes(self) -> bool {
        self.parts().1 == Side::Torch
    }

    /// Whether both ends are torch.
    pub fn torch_only(self) -> bool {
        self.torch_produces() && self.torch_consumes()
    }

    /// Whether either end is torch.
    pub fn needs_torch(self) -> bool {
        self.torch_produces() || self.torch_consumes()
    }

    /// The name `--paths` takes.
    pub fn name(self) -> String {
        value_name(self)
    }
}

/// The name a command line gives `value`.
pub fn value_name(value: impl ValueEnum + std::fmt::Debug) -> String {
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

/// One path's row of the table at one size.
pub struct Row {
    pub path: Route,
    pub workload: Workload,
    /// Median seconds per tensor over the rounds.
    pub per_tensor: f64,
}

/// Enough tensors per round to outlast timer noise, without writing more
/// than about 512 MiB a round, and few enough that a producer keeping a
/// round's tensors stays within `fd_limit` (a `file_descriptor` tensor
/// holds about three fds until its consumer has it). Paths that copy every
/// byte through the socket (`bytes`) run an eighth of that: they take far
/// longer per tensor, so fewer outlast the noise as well.
pub fn workload_for(
    path: Route,
    size: usize,
    rounds: usize,
    quick: bool,
    fd_limit: u64,
) -> Workload {
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

/// The row of `route`, if it ran.
pub fn row_of(rows: &[Row], route: Route) -> Option<&Row> {
    rows.iter().find(|row| row.path == route)
}

/// The fastest of `routes` among `rows`.
pub fn fastest<'a>(rows: &'a [Row], routes: &[Route]) -> Option<&'a Row> {
    rows.iter()
        .filter(|row| routes.contains(&row.path))
        .min_by(|a, b| a.per_tensor.total_cmp(&b.per_tensor))
}
