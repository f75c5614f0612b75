//! `tensorshare demo`: two Rust processes stream tensors to each other over
//! each of the four strategies, verify every byte, and print what it cost.

use std::ops::Range;
use std::time::{Duration, Instant};

use clap::Args;
use clap::builder::RangedU64ValueParser;
use indicatif::{ProgressBar, ProgressStyle};
use tensorshare::connection::Address;
use tensorshare::connection::{self, ConnectionOptions};
use tensorshare::{Authkey, Connection, DType, SharingContext, StrategyKind, Value};
use tensorshare_cli::error::CliError;
use tensorshare_cli::format;
use tensorshare_cli::peer::{Peer, connect_back};
use tensorshare_strategies::file_system::ShmRoom;

use super::workload::{TensorSpec, shared_identity};

/// The most tensors `--tensors` takes: a run that long says nothing a
/// shorter one does not, and the workload is planned up front.
const MAX_TENSORS: usize = 1_000_000;

/// `--tensors`: at least one, at most [`MAX_TENSORS`].
fn tensor_count() -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::new().range(1..=MAX_TENSORS as u64)
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// How many tensors each process sends per strategy (1 to 1000000).
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = tensor_count(), allow_negative_numbers = true)]
    tensors: usize,
}

#[derive(Debug, Args)]
pub struct DemoPeerArgs {
    /// The demo's listener; the authkey comes in TENSORSHARE_AUTHKEY.
    #[arg(long)]
    connect: Address,
    #[arg(long, value_name = "N", value_parser = tensor_count(), allow_negative_numbers = true)]
    tensors: usize,
}

/// One direction's figures.
struct Leg {
    strategy: StrategyKind,
    direction: &'static str,
    tensors: usize,
    bytes: usize,
    elapsed: Duration,
    zero_copy: bool,
}

pub fn run(args: DemoArgs) -> Result<(), CliError> {
    let workload = workload(args.tensors);
    let budget = in_flight_budget();
    let authkey = Authkey::random()?;
    let listener =
        connection::Listener::bind_unique_abstract(&authkey, ConnectionOptions::default())?;
    let tensors = args.tensors.to_string();
    let mut peer = Peer::spawn_self(
        "demo-peer",
        listener.address(),
        &authkey,
        &["--tensors", &tensors],
    )?;
    let sharing = SharingContext::new(authkey.clone());
    let mut connection = Connection::new(peer.accept(&listener)?, &sharing)?;
    println!(
        "tensorshare demo: process {} and process {} exchange {} tensors each way per strategy\n",
        std::process::id(),
        peer.id(),
        workload.len()
    );

    let per_leg: usize = workload.iter().map(TensorSpec::nbytes).sum();
    let progress = progress_bar((per_leg * 2 * StrategyKind::ALL.len()) as u64);
    let mut legs = Vec::new();
    for strategy in StrategyKind::ALL {
        let begin = vec![
            Value::Str(strategy.to_string().into()),
            Value::Int(i64::try_from(budget).unwrap_or(i64::MAX)),
        ];
        connection.send(&message("begin", Value::Tuple(begin.into())))?;
        // The one context, sending with this leg's strategy.
        let mut leg = with_strategy(connection, strategy)?;
        let rounds = rounds(&workload, budget);
        let (elapsed, zero_copy) = send_stream(&mut leg, &workload, &rounds, &progress)?;
        legs.push(Leg {
            strategy,
            direction: "A -> B",
            tensors: workload.len(),
            bytes: per_leg,
            elapsed,
            zero_copy,
        });
        receive_stream(&mut leg, &workload, &rounds, &progress)?;
        let (elapsed, zero_copy) = read_report(leg.recv()?)?;
        connection = Connection::new(leg.into_inner(), &sharing)?;
        legs.push(Leg {
            strategy,
            direction: "B -> A",
            tensors: workload.len(),
            bytes: per_leg,
            elapsed,
            zero_copy,
        });
    }
    connection.send(&message("quit", Value::None))?;
    progress.finish_and_clear();
    peer.finish()?;

    print_table(&legs);
    println!(
        "\nvs copy: how many times faster than `bytes` the same way, which copies every \
         tensor into\nthe message as torch's pickle does without shared memory; the others \
         hand over the memory\nitself. Times include writing each tensor and checking every \
         byte of it on arrival."
    );
    println!("\nevery byte of every tensor verified on the receiving side");
    Ok(())
}

/// The second process: mirrors [`run`].
pub fn run_peer(args: DemoPeerArgs) -> Result<(), CliError> {
    let (authkey, connection) = connect_back(&args.connect, ConnectionOptions::default())?;
    let sharing = SharingContext::new(authkey);
    let mut connection = Connection::new(connection, &sharing)?;
    let workload = workload(args.tensors);
    let hidden = ProgressBar::hidden();
    loop {
        let (tag, argument) = read_message(connection.recv()?)?;
        match (tag.as_str(), argument) {
            ("quit", _) => return Ok(()),
            ("begin", begin) => {
                let Some([Value::Str(name), Value::Int(budget)]) = begin.as_sequence() else {
                    return Err(format!("unexpected demo leg {begin:?}").into());
                };
                let rounds = rounds(&workload, usize::try_from(*budget).unwrap_or(usize::MAX));
                let mut leg = with_strategy(connection, name.parse()?)?;
                receive_stream(&mut leg, &workload, &rounds, &hidden)?;
                let (elapsed, zero_copy) = send_stream(&mut leg, &workload, &rounds, &hidden)?;
                let report = Value::Tuple(
                    vec![Value::Float(elapsed.as_secs_f64()), Value::Bool(zero_copy)].into(),
                );
                leg.send(&message("report", report))?;
                connection = Connection::new(leg.into_inner(), &sharing)?;
            }
            (other, _) => return Err(format!("unexpected demo message {other:?}").into()),
        }
    }
}

/// `connection` sending with `strategy`: its context's handle set up for
/// it, which shares the resource sharer and the pools.
fn with_strategy(connection: Connection, strategy: StrategyKind) -> Result<Connection, CliError> {
    let sharing = connection.sharing().clone().with_strategy(strategy);
    Ok(Connection::new(connection.into_inner(), &sharing)?)
}

/// Several dtypes, shapes and sizes, from a few KiB to 16 MiB, some of them
/// non-contiguous views.
fn workload(count: usize) -> Vec<TensorSpec> {
    let shapes: [(DType, &[usize], bool); 8] = [
        (DType::Float32, &[1024], false),
        (DType::Float64, &[256, 128], true),
        (DType::Int64, &[32, 64, 64], false),
        (DType::BFloat16, &[512, 512], false),
        (DType::UInt8, &[16 << 20], false),
        (DType::Complex64, &[300, 700], true),
        (DType::Bool, &[4096], false),
        (DType::Int32, &[1 << 20], false),
    ];
    (0..count)
        .map(|i| {
            let (dtype, sizes, transposed) = shapes[i % shapes.len()];
            TensorSpec {
                dtype,
                sizes: sizes.to_vec(),
                transposed,
            }
        })
        .collect()
}

/// The bytes a sender has in flight at most: a quarter of what `/dev/shm`
/// has free as the demo starts, so that a leg of named segments fits in a
/// container's 64 MB `/dev/shm` beside what both processes' pools keep.
/// Unbounded where its room cannot be read.
fn in_flight_budget() -> usize {
    ShmRoom::now().map_or(usize::MAX, |room| {
        usize::try_from(room.available / 4).unwrap_or(usize::MAX)
    })
}

/// The workload cut into rounds of at most `budget` bytes (a tensor
/// larger than that is a round of its own): the sender waits for the
/// receiver to have verified and let go of one round before it sends the
/// next. On a roomy machine the whole workload is one round.
fn rounds(workload: &[TensorSpec], budget: usize) -> Vec<Range<usize>> {
    let mut rounds = Vec::new();
    let (mut start, mut bytes) = (0, 0usize);
    for (index, spec) in workload.iter().enumerate() {
        if index > start && bytes.saturating_add(spec.nbytes()) > budget {
            rounds.push(start..index);
            (start, bytes) = (index, 0);
        }
        bytes = bytes.saturating_add(spec.nbytes());
    }
    rounds.push(start..workload.len());
    rounds
}

/// Sends the workload, written in place in shared memory, one round at a
/// time; returns the time until the receiver acknowledged it and whether
/// every tensor arrived on the memory it was written to.
fn send_stream(
    connection: &mut Connection,
    workload: &[TensorSpec],
    rounds: &[Range<usize>],
    progress: &ProgressBar,
) -> Result<(Duration, bool), CliError> {
    let start = Instant::now();
    let mut identities = Vec::with_capacity(workload.len());
    for (round, range) in rounds.iter().enumerate() {
        if round > 0 {
            expect_tag(connection, "round done")?;
        }
        for index in range.clone() {
            let spec = &workload[index];
            let tensor = spec.build(connection.sharing(), index as u64)?;
            identities.push(shared_identity(tensor.storage()));
            let item = Value::Tuple(vec![Value::Int(index as i64), Value::Tensor(tensor)].into());
            connection.send(&item)?;
            progress.inc(spec.nbytes() as u64);
        }
    }
    connection.send(&message("end", Value::Int(workload.len() as i64)))?;
    let (tag, received) = read_message(connection.recv()?)?;
    let elapsed = start.elapsed();
    if tag != "ack" {
        return Err(format!("expected an ack, got {tag:?}").into());
    }
    let zero_copy =
        identities.iter().all(Option::is_some) && parse_identities(&received) == identities;
    Ok((elapsed, zero_copy))
}

/// Receives and verifies the workload, telling the sender when each round
/// but the last is done with, then acknowledges it with what each received
/// storage maps.
fn receive_stream(
    connection: &mut Connection,
    workload: &[TensorSpec],
    rounds: &[Range<usize>],
    progress: &ProgressBar,
) -> Result<(), CliError> {
    let mut identities = Vec::with_capacity(workload.len());
    for (round, range) in rounds.iter().enumerate() {
        if round > 0 {
            connection.send(&message("round done", Value::Int(round as i64)))?;
        }
        for index in range.clone() {
            let item = connection.recv()?;
            let tensor = match item.as_sequence() {
                Some([Value::Int(i), Value::Tensor(t)]) if *i == index as i64 => t,
                _ => return Err(format!("expected tensor {index}, got {item:?}").into()),
            };
            let spec = &workload[index];
            spec.verify(tensor, index as u64)?;
            identities.push(shared_identity(tensor.storage()));
            progress.inc(spec.nbytes() as u64);
        }
    }
    expect_tag(connection, "end")?;
    connection.send(&message("ack", identities_value(&identities)))?;
    Ok(())
}

/// Receives the demo message tagged `tag`.
fn expect_tag(connection: &mut Connection, tag: &str) -> Result<(), CliError> {
    let (got, _) = read_message(connection.recv()?)?;
    if got != tag {
        return Err(format!("expected the demo message {tag:?}, got {got:?}").into());
    }
    Ok(())
}

fn identities_value(identities: &[Option<(u64, u64)>]) -> Value {
    Value::List(
        identities
            .iter()
            .map(|identity| match identity {
                // Bit patterns, not numbers: only equality matters.
                Some((dev, ino)) => {
                    Value::Tuple(vec![Value::Int(*dev as i64), Value::Int(*ino as i64)].into())
                }
                None => Value::None,
            })
            .collect(),
    )
}

fn parse_identities(value: &Value) -> Vec<Option<(u64, u64)>> {
    let items = value.as_sequence().unwrap_or_default();
    items
        .iter()
        .map(|item| match item.as_sequence() {
            Some([Value::Int(dev), Value::Int(ino)]) => Some((*dev as u64, *ino as u64)),
            _ => None,
        })
        .collect()
}

fn message(tag: &str, argument: Value) -> Value {
    Value::Tuple(vec![Value::Str(tag.into()), argument].into())
}

fn read_message(value: Value) -> Result<(String, Value), String> {
    match value.as_sequence() {
        Some([Value::Str(tag), argument]) => Ok((tag.to_string(), argument.clone())),
        Some([other, _]) => Err(format!("malformed demo message tag {other:?}")),
        _ => Err(format!("malformed demo message {value:?}")),
    }
}

fn read_report(value: Value) -> Result<(Duration, bool), String> {
    match read_message(value)? {
        (tag, Value::Tuple(items)) if tag == "report" => match &items[..] {
            [Value::Float(seconds), Value::Bool(zero_copy)] => {
                match Duration::try_from_secs_f64(*seconds) {
                    Ok(elapsed) => Ok((elapsed, *zero_copy)),
                    Err(_) => Err(format!("malformed report {items:?}")),
                }
            }
            _ => Err(format!("malformed report {items:?}")),
        },
        (tag, _) => Err(format!("expected a report, got {tag:?}")),
    }
}

fn progress_bar(total: u64) -> ProgressBar {
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{spinner} {bytes}/{total_bytes} [{bar:40}] {bytes_per_sec}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    // Drawn only when the run outlasts a moment, and only on a terminal.
    bar.enable_steady_tick(Duration::from_millis(250));
    bar
}

fn print_table(legs: &[Leg]) {
    println!(
        "{:<16} {:<9} {:>7} {:>10} {:>12} {:>8} {:>8} {:>9}",
        "strategy", "direction", "tensors", "bytes", "per tensor", "GB/s", "vs copy", "zero-copy"
    );
    for leg in legs {
        let seconds = leg.elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
        // The same exchange, the same way, through a copy.
        let copy = legs
            .iter()
            .find(|other| other.strategy == StrategyKind::Bytes && other.direction == leg.direction)
            .map_or(seconds, |copy| copy.elapsed.as_secs_f64());
        println!(
            "{:<16} {:<9} {:>7} {:>10} {:>12} {:>8.2} {:>7.2}x {:>9}",
            leg.strategy.to_string(),
            leg.direction,
            leg.tensors,
            format::bytes(leg.bytes as u64),
            format::duration(seconds / leg.tensors.max(1) as f64),
            leg.bytes as f64 / seconds / 1e9,
            copy / seconds,
            if leg.zero_copy { "yes" } else { "no" },
        );
    }
}
