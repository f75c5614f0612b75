//! `--workload batches`: DataLoader-shaped batches fed to one stock torch
//! training loop by torch's own `DataLoader`, by a torch producer over a
//! connection, and by a Rust producer over each strategy, with and without
//! a batch in one storage (`SharingContext::batch`); and Rust to Rust.
//! With `--consumers`, several torch loops at once (`consumers`); with
//! `--busy-loops` or `--busy-io`, every table again beside other work
//! (`busy`); with `--shm-size`, in a private `/dev/shm` (`shm`). The torch
//! side is `compat/python/bench_batches.py`.

// The layers, bottom to top: each imports only those declared before it,
// and none what this file defines (`scripts/check-layers bench`). One
// comment per layer keeps rustfmt from sorting them.

// What feeds the training loop.
pub mod feed;
// What runs beside a loaded table.
pub mod busy;
// The tables in a private /dev/shm.
pub mod shm;
// Several training loops at once.
mod consumers;

use std::process::Stdio;

use tensorshare::connection::ConnectionOptions;
use tensorshare::connection::Listener;
use tensorshare::{Authkey, Connection, StrategyKind};
use tensorshare_cli::error::CliError;
use tensorshare_cli::format;
use tensorshare_cli::peer::Peer;

use crate::batch_protocol::{BatchSpec, ImageDType, Layout, produce_batches};
use crate::median::median;
use crate::rust_consumer;
use crate::spinner::spinner;
use crate::stream_protocol::producer_sharing;
use crate::torch_peer::TorchPeer;
use busy::Load;
use feed::{BASELINE, Feed, spec_args};

/// A batch size of the table and the target at it: the best Rust
/// producer feeding torch against the DataLoader with 2 workers.
struct BatchSize {
    batch: usize,
    sample: [usize; 3],
    dtype: ImageDType,
    target: f64,
}

const BATCH_SIZES: [BatchSize; 3] = [
    BatchSize {
        batch: 8,
        sample: [3, 64, 64],
        dtype: ImageDType::UInt8,
        target: 4.0,
    },
    BatchSize {
        batch: 32,
        sample: [3, 224, 224],
        dtype: ImageDType::UInt8,
        target: 2.0,
    },
    BatchSize {
        batch: 64,
        sample: [3, 224, 224],
        dtype: ImageDType::Float32,
        target: 2.0,
    },
];

/// As far ahead as a DataLoader with 2 workers and the default prefetch
/// of 2 batches each.
const WINDOW: usize = 4;

struct Row {
    feed: Feed,
    /// Median seconds per batch over the rounds.
    per_batch: f64,
}

/// What `--workload batches` runs.
pub struct Options<'a> {
    /// The feeds by name; all (or, with `consumers`, all that have a
    /// several-consumer form) when empty.
    pub feeds: &'a [String],
    pub rounds: usize,
    pub quick: bool,
    /// How many torch loops to feed at once, one table each; when empty,
    /// the one-loop table of every feed.
    pub consumers: &'a [usize],
    /// What runs beside a run of every table after the quiet one, each
    /// in turn: busy loops, a writer.
    pub loads: &'a [Load],
    /// The size of the private `/dev/shm` the bench runs in
    /// (`--shm-size`), where a feed that fails is a row that says so.
    pub private_shm: Option<String>,
}

/// One printed table: a batch size, how many consumers, and its rows.
struct Table {
    title: String,
    rows: Vec<Row>,
}

/// Runs the tables and prints them; then again beside each load, and
/// prints how much slower each row went.
pub fn run(torch: &TorchPeer, options: &Options) -> Result<(), CliError> {
    let quiet = run_tables(torch, options, None)?;
    for &load in options.loads {
        let loaded = {
            let dir = tempfile::tempdir()
                .map_err(|e| format!("a directory for the bench's load: {e}"))?;
            let _background = load.start(dir.path())?;
            run_tables(torch, options, Some(load))?
        };
        println!(
            "with {} beside it against quiet (per batch, loaded / quiet):",
            load.describe()
        );
        for (quiet, loaded) in quiet.iter().zip(&loaded) {
            println!("{}", slowdown_line(quiet, loaded));
        }
    }
    Ok(())
}

/// Every table at every batch size, `load` running beside them.
fn run_tables(
    torch: &TorchPeer,
    options: &Options,
    load: Option<Load>,
) -> Result<Vec<Table>, CliError> {
    let Options { rounds, quick, .. } = *options;
    let mut beside = match load {
        None => String::new(),
        Some(load) => format!("; {} beside it", load.describe()),
    };
    if let Some(size) = &options.private_shm {
        beside += &format!("; in a private /dev/shm of {size}, as in a container");
    }
    // Several loops' tables each name their threads.
    if options.consumers.is_empty()
        && let Some(threads) = torch.threads()
    {
        beside += &format!("; OMP_NUM_THREADS={threads} in each torch process");
    }
    if options.consumers.is_empty() {
        println!(
            "tensorshare bench --workload batches: DataLoader-shaped batches into one training \
             loop that sums every element; median of {rounds} rounds{beside}\n"
        );
    } else {
        println!(
            "tensorshare bench --workload batches --consumers: DataLoader-shaped batches into N \
             training loops at once, each its own; aggregate batches/s, median of {rounds} \
             rounds{beside}\n"
        );
    }
    let spinner = spinner();
    let mut tables = Vec::new();
    for size in &BATCH_SIZES {
        let mut spec = BatchSpec {
            batch: size.batch,
            sample: size.sample,
            dtype: size.dtype,
            batches: 0,
            rounds,
            window: WINDOW,
        };
        spec.batches = batches_per_round(spec.nbytes(), quick);
        let [c, h, w] = size.sample;
        let title = format!(
            "{} [{}, {c}, {h}, {w}] + int64 [{}]: {} a batch",
            size.dtype.name(),
            size.batch,
            size.batch,
            format::bytes(spec.nbytes() as u64)
        );
        if options.consumers.is_empty() {
            let failures_are_rows = options.private_shm.is_some();
            let table = run_table(
                torch,
                options.feeds,
                spec,
                title,
                &spinner,
                failures_are_rows,
            )?;
            spinner.suspend(|| {
                println!("{}", target_line(&table.rows, size.target));
                println!("{}\n", one_storage_line(&table.rows));
            });
            tables.push(table);
        } else {
            let first = tables.len();
            for &consumers in options.consumers {
                let torch = torch.for_consumers(consumers);
                let title = match torch.threads() {
                    Some(threads) => {
                        format!("{title}, {consumers} consumers, OMP_NUM_THREADS={threads}")
                    }
                    None => format!("{title}, {consumers} consumers"),
                };
                tables.push(run_consumers_table(
                    &torch,
                    options.feeds,
                    spec,
                    consumers,
                    title,
                    &spinner,
                )?);
            }
            if options.consumers.len() > 1 {
                spinner
                    .suspend(|| println!("{}", growth_line(options.consumers, &tables[first..])));
            }
            spinner.suspend(|| println!());
        }
    }
    spinner.finish_and_clear();
    Ok(tables)
}

fn print_header(title: &str) {
    println!("{title}");
    println!(
        "  {:<36} {:<8} {:>7} {:>10} {:>11} {:>17}",
        "feed", "consumer", "batches", "batches/s", "per batch", "vs DataLoader (2)"
    );
}

/// The one-loop table of `feeds` (all when empty) at `spec`.
/// The table of `feeds` at one batch size; with `failures_are_rows`, a
/// feed that fails prints a row that says why instead of ending the bench.
fn run_table(
    torch: &TorchPeer,
    feeds: &[String],
    spec: BatchSpec,
    title: String,
    spinner: &indicatif::ProgressBar,
    failures_are_rows: bool,
) -> Result<Table, CliError> {
    spinner.suspend(|| print_header(&title));
    let mut rows = Vec::new();
    for feed in Feed::all() {
        if !feeds.is_empty() && !feeds.contains(&feed.name()) {
            continue;
        }
        spinner.set_message(format!("{title}: {}", feed.label()));
        let seconds = match run_feed(feed, spec, torch) {
            Ok(seconds) => seconds,
            Err(error) if failures_are_rows => {
                let why = error.to_string();
                let why = why.lines().rev().find(|line| !line.trim().is_empty());
                spinner.suspend(|| {
                    println!(
                        "  {:<36} {:<8} failed: {}",
                        feed.label(),
                        feed.consumer(),
                        why.unwrap_or("no reason given").trim()
                    );
                });
                continue;
            }
            Err(error) => return Err(error),
        };
        let row = Row {
            feed,
            per_batch: median(seconds) / spec.batches as f64,
        };
        spinner.suspend(|| print_row(&row, &rows, spec.batches, feed.consumer()));
        rows.push(row);
    }
    Ok(Table { title, rows })
}

/// The feeds `--consumers` runs by default: the baseline and each
/// strategy's best layout into torch, one storage a batch.
fn consumer_feeds() -> Vec<Feed> {
    Feed::all()
        .into_iter()
        .filter(|feed| match feed {
            Feed::DataLoader { workers } => *workers == 2,
            Feed::Rust {
                layout,
                torch_trains,
                ..
            } => *torch_trains && *layout == Layout::Arena,
            Feed::TorchProducer => false,
        })
        .collect()
}

/// The table of `consumers` loops at once fed by each of `feeds`.
fn run_consumers_table(
    torch: &TorchPeer,
    feeds: &[String],
    spec: BatchSpec,
    consumers: usize,
    title: String,
    spinner: &indicatif::ProgressBar,
) -> Result<Table, CliError> {
    spinner.suspend(|| print_header(&title));
    let feeds: Vec<Feed> = if feeds.is_empty() {
        consumer_feeds()
    } else {
        Feed::all()
            .into_iter()
            .filter(|feed| feeds.contains(&feed.name()))
            .collect()
    };
    let mut rows = Vec::new();
    let mut checked = 0;
    for feed in feeds {
        spinner.set_message(format!("{title}: {}", feed.label()));
        let aggregate = consumers::run_feed(feed, spec, consumers, torch)?;
        checked += aggregate.checked;
        let row = Row {
            feed,
            per_batch: aggregate.per_batch,
        };
        let consumer = format!("{consumers} torch");
        spinner.suspend(|| print_row(&row, &rows, spec.batches * consumers, &consumer));
        rows.push(row);
    }
    // Each consumer checks each batch's shapes and sums; a bad batch fails
    // the run.
    let expected = (rows.len() * consumers * spec.batches * (spec.rounds + 1)) as u64;
    if checked != expected {
        return Err(format!("the consumers checked {checked} batches, expected {expected}").into());
    }
    spinner.suspend(|| {
        println!(
            "intact: {checked} batches checked, every one as sent ({} feeds x {consumers} \
             consumers x {} runs x {} batches)",
            rows.len(),
            spec.rounds + 1,
            spec.batches
        );
    });
    Ok(Table { title, rows })
}

/// How each feed's aggregate grows with the consumers, from one size's
/// `tables` (one for each of `consumers`).
fn growth_line(consumers: &[usize], tables: &[Table]) -> String {
    let Some(first) = tables.first() else {
        return String::new();
    };
    let counts: Vec<String> = consumers.iter().map(usize::to_string).collect();
    let feeds: Vec<String> = first
        .rows
        .iter()
        .map(|row| {
            let speedups: Vec<String> = tables
                .iter()
                .filter_map(|table| table.rows.iter().find(|r| r.feed == row.feed))
                .map(|r| format!("{:.2}x", row.per_batch / r.per_batch))
                .collect();
            format!("{} {}", row.feed.label(), speedups.join(" "))
        })
        .collect();
    format!(
        "aggregate at {} consumers against {}: {}",
        counts.join(", "),
        counts[0],
        feeds.join("; ")
    )
}

/// How much slower each row of `quiet` ran in `loaded`, flagging more than 3x.
fn slowdown_line(quiet: &Table, loaded: &Table) -> String {
    let rows: Vec<String> = quiet
        .rows
        .iter()
        .filter_map(|row| {
            let under_load = loaded.rows.iter().find(|r| r.feed == row.feed)?;
            let slowdown = under_load.per_batch / row.per_batch;
            let flag = if slowdown > 3.0 {
                " (more than 3x)"
            } else {
                ""
            };
            Some(format!("{} {slowdown:.2}x{flag}", row.feed.label()))
        })
        .collect();
    format!("  {}: {}", quiet.title, rows.join(", "))
}

/// Enough batches a round to outlast timer noise, without moving more than
/// about 256 MiB a round.
fn batches_per_round(nbytes: usize, quick: bool) -> usize {
    let count = ((256 << 20) / nbytes.max(1)).clamp(16, 300);
    if quick { (count / 4).max(4) } else { count }
}

/// Seconds per round of `feed`.
fn run_feed(feed: Feed, spec: BatchSpec, torch: &TorchPeer) -> Result<Vec<f64>, CliError> {
    let spec_args = spec_args(&spec);
    let spec_args: Vec<&str> = spec_args.iter().map(String::as_str).collect();
    let (strategy, layout, torch_trains) = match feed {
        Feed::DataLoader { workers } => {
            let workers = workers.to_string();
            let args = [&["dataloader", "--workers", &workers], &spec_args[..]].concat();
            return torch.seconds(torch.run(&args, None, None)?);
        }
        Feed::TorchProducer => {
            let args = [&["torch-producer"], &spec_args[..]].concat();
            return torch.seconds(torch.run(&args, None, None)?);
        }
        Feed::Rust {
            strategy,
            layout,
            torch_trains,
        } => (strategy, layout, torch_trains),
    };
    let authkey = Authkey::random()?;
    let sharing = producer_sharing(strategy, authkey.clone());
    let listener = Listener::bind_unique_abstract(&authkey, ConnectionOptions::default())?;
    let address = listener.address().to_string();
    let mut peer = if torch_trains {
        torch.spawn(&["consume"], None, Some((&address, &authkey)))?
    } else {
        // With the stdout its result is printed on.
        Peer::spawn(
            Peer::self_command(
                rust_consumer::SUBCOMMAND,
                &address,
                &authkey,
                &["--batches"],
            )?
            .stdout(Stdio::piped()),
        )?
    };
    let mut connection = Connection::new(peer.accept(&listener)?, &sharing)?;
    produce_batches(&mut connection, &sharing, spec, layout)?;
    torch.seconds(peer.finish()?)
}

/// Prints `row`, compared with the baseline among `before` (which comes
/// before every feed compared with it).
fn print_row(row: &Row, before: &[Row], batches: usize, consumer: &str) {
    let baseline = before
        .iter()
        .chain(std::iter::once(row))
        .find(|row| row.feed == BASELINE);
    let ratio = baseline.map_or_else(
        || "-".to_owned(),
        |baseline| format!("{:.2}x", baseline.per_batch / row.per_batch),
    );
    println!(
        "  {:<36} {:<8} {:>7} {:>10.1} {:>11} {:>17}",
        row.feed.label(),
        consumer,
        batches,
        1.0 / row.per_batch,
        format::duration(row.per_batch),
        ratio
    );
}

/// The target: the best Rust producer feeding torch's loop against
/// the DataLoader with 2 workers.
fn target_line(rows: &[Row], target: f64) -> String {
    let baseline = rows.iter().find(|row| row.feed == BASELINE);
    let best = rows
        .iter()
        .filter(|row| {
            matches!(
                row.feed,
                Feed::Rust {
                    torch_trains: true,
                    ..
                }
            )
        })
        .min_by(|a, b| a.per_batch.total_cmp(&b.per_batch));
    let (Some(baseline), Some(best)) = (baseline, best) else {
        return "target: needs the DataLoader and a Rust producer".into();
    };
    let ratio = baseline.per_batch / best.per_batch;
    let verdict = if ratio >= target { "met" } else { "NOT met" };
    format!(
        "target: {} into torch {:.1}/s vs DataLoader (2 workers) {:.1}/s = {ratio:.2}x \
         (target >= {target}x: {verdict})",
        best.feed.label(),
        1.0 / best.per_batch,
        1.0 / baseline.per_batch,
    )
}

/// What one storage a batch gains over a storage a tensor, per strategy,
/// feeding torch.
fn one_storage_line(rows: &[Row]) -> String {
    let per_batch = |strategy, layout| {
        rows.iter()
            .find(|row| {
                row.feed
                    == Feed::Rust {
                        strategy: Some(strategy),
                        layout,
                        torch_trains: true,
                    }
            })
            .map(|row| row.per_batch)
    };
    let gains: Vec<String> = StrategyKind::ALL
        .into_iter()
        .filter_map(|strategy| {
            let separate = per_batch(strategy, Layout::Separate)?;
            let arena = per_batch(strategy, Layout::Arena)?;
            Some(format!("{strategy} {:.2}x", separate / arena))
        })
        .collect();
    format!(
        "one storage a batch vs one a tensor, into torch: {}",
        gains.join(", ")
    )
}
