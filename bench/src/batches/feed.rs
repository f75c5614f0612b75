//! What feeds the training loop of `--workload batches`: torch's
//! DataLoader, a torch producer, or a Rust producer over a strategy and a
//! layout; each feed's name (`--feeds`) and label, the arguments its torch
//! side is started with, and a Rust producer's sharing context.

use tensorshare::StrategyKind;

use crate::batch_protocol::{BatchSpec, Layout};

/// The DataLoader row every other is compared with.
pub const BASELINE: Feed = Feed::DataLoader { workers: 2 };

/// The producer of the crate docs' first example: no strategy named, a
/// batch in one storage ([`SharingContext::batch`]).
pub const RUST_DEFAULT: Feed = Feed::Rust {
    strategy: None,
    layout: Layout::Arena,
    torch_trains: true,
};

/// What feeds the training loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Feed {
    /// torch's `DataLoader`, its workers collating into shared memory.
    DataLoader { workers: usize },
    /// A torch process collating into shared memory, over a Pipe.
    TorchProducer,
    /// tensorshare's producer over `strategy`; `None` for the default
    /// placement, a producer as the crate docs' first example writes it.
    Rust {
        strategy: Option<StrategyKind>,
        layout: Layout,
        /// Whether the loop is torch's (else the same loop in Rust).
        torch_trains: bool,
    },
}

impl Feed {
    /// Every feed, in table order.
    pub fn all() -> Vec<Feed> {
        let mut feeds = vec![
            Feed::DataLoader { workers: 1 },
            BASELINE,
            Feed::TorchProducer,
            RUST_DEFAULT,
        ];
        for strategy in StrategyKind::ALL {
            for layout in [Layout::Separate, Layout::Arena] {
                feeds.push(Feed::Rust {
                    strategy: Some(strategy),
                    layout,
                    torch_trains: true,
                });
            }
        }
        for layout in [Layout::Separate, Layout::Arena] {
            feeds.push(Feed::Rust {
                strategy: Some(StrategyKind::FileDescriptor),
                layout,
                torch_trains: false,
            });
        }
        feeds
    }

    pub fn label(self) -> String {
        match self {
            Feed::DataLoader { workers: 1 } => "torch DataLoader, 1 worker".into(),
            Feed::DataLoader { workers } => format!("torch DataLoader, {workers} workers"),
            Feed::TorchProducer => "torch producer, file_descriptor".into(),
            RUST_DEFAULT => "Rust default".into(),
            Feed::Rust {
                strategy, layout, ..
            } => {
                let strategy = strategy.map_or("default", StrategyKind::name);
                match layout {
                    Layout::Separate => format!("Rust {strategy}"),
                    Layout::Arena => format!("Rust {strategy}, one storage"),
                }
            }
        }
    }

    /// The name `--feeds` takes: `dataloader-2`, `torch-producer`,
    /// `rust-fs-arena`, `rust-to-rust-fd`, ...
    pub fn name(self) -> String {
        match self {
            Feed::DataLoader { workers } => format!("dataloader-{workers}"),
            Feed::TorchProducer => "torch-producer".into(),
            RUST_DEFAULT => "rust-default".into(),
            Feed::Rust {
                strategy,
                layout,
                torch_trains,
            } => {
                let ends = if torch_trains { "rust" } else { "rust-to-rust" };
                let strategy = match strategy {
                    None => "default",
                    Some(StrategyKind::FileDescriptor) => "fd",
                    Some(StrategyKind::FileSystem) => "fs",
                    Some(kind) => kind.name(),
                };
                let arena = if layout == Layout::Arena {
                    "-arena"
                } else {
                    ""
                };
                format!("{ends}-{strategy}{arena}")
            }
        }
    }

    pub fn consumer(self) -> &'static str {
        match self {
            Feed::Rust {
                torch_trains: false,
                ..
            } => "Rust",
            _ => "torch",
        }
    }
}

/// The names `--feeds` takes, in table order.
pub fn feed_names() -> Vec<String> {
    Feed::all().into_iter().map(Feed::name).collect()
}

/// The command-line arguments of `bench_batches.py` for `spec`.
pub fn spec_args(spec: &BatchSpec) -> Vec<String> {
    let [c, h, w] = spec.sample.map(|s| s.to_string());
    [
        "--batch",
        &spec.batch.to_string(),
        "--sample",
        &c,
        &h,
        &w,
        "--dtype",
        spec.dtype.name(),
        "--batches",
        &spec.batches.to_string(),
        "--rounds",
        &spec.rounds.to_string(),
        "--window",
        &spec.window.to_string(),
    ]
    .map(str::to_owned)
    .to_vec()
}
