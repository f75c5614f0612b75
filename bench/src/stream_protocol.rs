//! The streaming workload the bench times, in Rust, speaking the protocol of
//! `compat/python/bench_peer.py` so that either end can be torch:
//!
//! ```text
//! producer -> consumer   {"size": BYTES, "count": N, "rounds": R, "warmup": W}
//! producer -> consumer   W tensors, then consumer -> producer  W
//! R times:  producer -> consumer  N tensors, then consumer -> producer  N
//! ```
//!
//! Tensor `i` of a run is `size` bytes of uint8, every byte `i % 251`,
//! written by the producer straight into shared memory.
//!
//! Between two Rust ends the tensors may also travel raw, as the floor
//! under a strategy: [`Framing::RawFds`] sends each storage's fd alone on
//! an empty message (what `file_descriptor` costs without the pickle
//! around it), [`Framing::RawBytes`] each storage's bytes as the whole
//! message (what a socket costs `bytes`).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tensorshare::model::TensorView;
use tensorshare::{Authkey, Connection, DType, SharingContext, StrategyKind, Tensor, Value};
use tensorshare_cli::error::CliError;
use tensorshare_strategies::file_descriptor::{FdSegment, FileDescriptorStrategy};
use tensorshare_strategies::{Segment, SharingStrategy};

const FILL_MODULUS: usize = 251;

/// How the tensors of a Rust-to-Rust run travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Framing {
    /// Pickled as torch's `ForkingPickler` writes them, fds attached and
    /// registered with the resource sharer: the path programs take.
    Pickled,
    /// Each storage's fd alone on an empty message, mapped by the consumer
    /// through the `file_descriptor` strategy with no pickle, resource
    /// sharer or cache: the floor under [`Framing::Pickled`]. The producer
    /// still reuses its memfds, safely only because it frees a round's
    /// tensors after the ack, when the consumer has unmapped them all; the
    /// consumer maps each one afresh.
    RawFds,
    /// Each storage's bytes as one message, read by the consumer into a
    /// buffer it keeps: the two copies through the socket that the `bytes`
    /// strategy cannot avoid, without the pickle, the receive buffers
    /// handed to storages, or the cache.
    RawBytes,
}

/// What the producer announces.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    pub size: usize,
    pub count: usize,
    pub rounds: usize,
    pub warmup: usize,
}

impl Workload {
    fn to_value(self) -> Value {
        let entry = |key: &str, value: usize| (Value::Str(key.into()), Value::Int(value as i64));
        Value::Dict(
            vec![
                entry("size", self.size),
                entry("count", self.count),
                entry("rounds", self.rounds),
                entry("warmup", self.warmup),
            ]
            .into(),
        )
    }

    fn from_value(value: &Value) -> Result<Self, String> {
        let Value::Dict(entries) = value else {
            return Err(format!("expected the workload header, got {value:?}"));
        };
        let field = |name: &str| {
            entries
                .iter()
                .find(|(key, _)| matches!(key, Value::Str(k) if &**k == name))
                .and_then(|(_, value)| value.as_int())
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| format!("workload header lacks a count for {name:?}"))
        };
        Ok(Self {
            size: field("size")?,
            count: field("count")?,
            rounds: field("rounds")?,
            warmup: field("warmup")?,
        })
    }
}

/// Produces the workload; returns each timed round's duration.
pub fn produce(
    connection: &mut Connection,
    sharing: &SharingContext,
    workload: Workload,
    framing: Framing,
) -> Result<Vec<Duration>, CliError> {
    connection.send(&workload.to_value())?;
    let mut run = |count| send_run(connection, sharing, framing, workload.size, count);
    run(workload.warmup)?;
    (0..workload.rounds).map(|_| run(workload.count)).collect()
}

/// Sends `count` new tensors, allocated through `sharing` (which reuses
/// the memfds its receivers have reported unmapped), and waits for the
/// ack. As in the torch producer, every tensor is kept until the ack and
/// freed after the clock stops.
fn send_run(
    connection: &mut Connection,
    sharing: &SharingContext,
    framing: Framing,
    size: usize,
    count: usize,
) -> Result<Duration, CliError> {
    let mut kept = Vec::with_capacity(count);
    let start = Instant::now();
    for index in 0..count {
        let mut writer = sharing.allocate(size)?;
        fill_in_parallel(writer.as_bytes_mut(), (index % FILL_MODULUS) as u8);
        let tensor = Value::Tensor(Tensor::new(
            writer.freeze(),
            TensorView::contiguous(DType::UInt8, &[size]),
        )?);
        let storage = || tensor.as_tensor().map(Tensor::storage);
        match framing {
            Framing::Pickled => connection.send(&tensor)?,
            Framing::RawFds => {
                let fd = storage()
                    .and_then(|storage| storage.local_segment::<FdSegment>())
                    .and_then(FdSegment::fd)
                    .ok_or("raw fds need the file_descriptor strategy")?;
                connection.get_mut().send_bytes_with_fds(&[], &[fd])?;
            }
            Framing::RawBytes => {
                let bytes = storage()
                    .and_then(|storage| storage.bytes())
                    .ok_or("raw bytes need a storage in this process")?;
                connection.get_mut().send_bytes(bytes)?;
            }
        }
        kept.push(tensor);
    }
    let ack = connection.recv()?;
    let elapsed = start.elapsed();
    if ack.as_int() != Some(count as i64) {
        return Err(format!("the consumer acknowledged {ack:?}, expected {count}").into());
    }
    drop(kept);
    Ok(elapsed)
}

/// Writes `byte` everywhere, on every core for large buffers, as torch's
/// `fill_` does (its grain is 32 Ki elements; threads here are spawned per
/// call, so the bar is higher).
fn fill_in_parallel(bytes: &mut [u8], byte: u8) {
    const MIN_PER_THREAD: usize = 512 << 10;
    // Asked once: the answer reads cgroup files, which costs more than
    // filling a small tensor.
    static CORES: OnceLock<usize> = OnceLock::new();
    let threads = if bytes.len() < 2 * MIN_PER_THREAD {
        1
    } else {
        let cores =
            *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from));
        cores.min(bytes.len() / MIN_PER_THREAD).max(1)
    };
    if threads == 1 {
        bytes.fill(byte);
        return;
    }
    let chunk = bytes.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let mut chunks = bytes.chunks_mut(chunk);
        let first = chunks.next();
        for part in chunks {
            scope.spawn(move || part.fill(byte));
        }
        if let Some(part) = first {
            part.fill(byte);
        }
    });
}

/// Consumes a workload, checking every tensor.
pub fn consume(connection: &mut Connection, framing: Framing) -> Result<(), CliError> {
    let workload = Workload::from_value(&connection.recv()?)?;
    // Kept across messages, as a connection keeps its receive buffer.
    let mut buffer = Vec::new();
    let mut run = |count| receive_run(connection, framing, workload.size, count, &mut buffer);
    run(workload.warmup)?;
    for _ in 0..workload.rounds {
        run(workload.count)?;
    }
    Ok(())
}

fn receive_run(
    connection: &mut Connection,
    framing: Framing,
    size: usize,
    count: usize,
    buffer: &mut Vec<u8>,
) -> Result<(), CliError> {
    for index in 0..count {
        match framing {
            Framing::Pickled => check_tensor(&connection.recv()?, size, index)?,
            Framing::RawBytes => {
                let len = connection.get_mut().recv_bytes_into(buffer)?;
                check_bytes(buffer.get(..len), size, index)?;
            }
            Framing::RawFds => {
                let fds = connection.get_mut().recv_bytes_with_fds(buffer)?;
                let [fd] = <[_; 1]>::try_from(fds)
                    .map_err(|fds| format!("tensor {index}: {} fds, expected 1", fds.len()))?;
                let segment = FileDescriptorStrategy.import(fd, size)?;
                check_bytes(Some(segment.as_bytes()), size, index)?;
            }
        }
    }
    connection.send(&Value::Int(count as i64))?;
    Ok(())
}

fn check_tensor(received: &Value, size: usize, index: usize) -> Result<(), String> {
    let tensor = received
        .as_tensor()
        .ok_or_else(|| format!("tensor {index}: received {}", received.type_name()))?;
    if tensor.dtype() != DType::UInt8 || tensor.numel() != size {
        return Err(format!(
            "tensor {index}: expected {size} uint8 elements, got {tensor:?}"
        ));
    }
    check_bytes(tensor.storage().bytes(), size, index)
}

/// Checks the first and last of a tensor's `size` bytes.
fn check_bytes(bytes: Option<&[u8]>, size: usize, index: usize) -> Result<(), String> {
    let bytes =
        bytes.ok_or_else(|| format!("tensor {index}: its bytes are not in this process"))?;
    if bytes.len() < size {
        return Err(format!(
            "tensor {index}: {} bytes, expected {size}",
            bytes.len()
        ));
    }
    let expected = (index % FILL_MODULUS) as u8;
    if bytes.first() != Some(&expected) || bytes.get(size.saturating_sub(1)) != Some(&expected) {
        return Err(format!(
            "tensor {index}: first or last byte is not {expected}"
        ));
    }
    Ok(())
}

/// A producer's context with `strategy` (`None`: the default placement),
/// one for every connection, as one process has.
pub fn producer_sharing(strategy: Option<StrategyKind>, authkey: Authkey) -> SharingContext {
    let sharing = SharingContext::new(authkey);
    match strategy {
        // The producer keeps every tensor until the consumer has received
        // it, mapping its files: holding sent files longer (5 minutes by
        // default) would only pile up files in $TMPDIR over a run.
        Some(StrategyKind::Memmap) => sharing
            .with_strategy(StrategyKind::Memmap)
            .with_unfetched_lifetime(Duration::ZERO),
        Some(strategy) => sharing.with_strategy(strategy),
        None => sharing,
    }
}
