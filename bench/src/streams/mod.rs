//! `--workload streams`, the default: `count` uint8 tensors of each size
//! streamed one way on every path (`--paths`), torch's and ours, the
//! producer writing every byte; one row a path at each size, then the
//! lines of our targets under it (`targets`).

// The layers, bottom to top: each imports only those declared before it,
// and none what this file defines (`scripts/check-layers bench`). One
// comment per layer keeps rustfmt from sorting them.

// The paths, their workloads and their rows.
pub mod route;
// The lines under each size's rows.
mod targets;

use std::time::{Duration, Instant};

use tensorshare::connection::{ConnectionOptions, Listener};
use tensorshare::{Authkey, Connection};
use tensorshare_cli::error::CliError;
use tensorshare_cli::format;
use tensorshare_cli::peer::Peer;

use crate::fd_limit::raise_fd_limit;
use crate::median::median;
use crate::rust_consumer;
use crate::spinner::spinner;
use crate::stream_protocol::producer_sharing;
use crate::stream_protocol::{Framing, Workload, consume, produce};
use crate::torch_peer::TorchPeer;
use route::{Route, Row, value_name, workload_for};

/// Times every one of `paths` at each of `sizes` and prints the table.
pub fn run(
    torch: &TorchPeer,
    sizes: &[usize],
    paths: &[Route],
    rounds: usize,
    quick: bool,
) -> Result<(), CliError> {
    // Before any peer runs, so that none of them competes with it.
    let memcpy: Vec<f64> = sizes.iter().map(|&size| memcpy_seconds(size)).collect();
    let fd_limit = raise_fd_limit();
    if paths.iter().any(|path| path.needs_torch()) {
        torch.check()?;
    }

    println!(
        "tensorshare bench: uint8 tensors streamed one way, the producer writing every byte; \
         median of {rounds} rounds\n"
    );
    println!(
        "{:<9} {:<32} {:>7} {:>12} {:>8} {:>14}",
        "size", "path", "tensors", "per tensor", "GB/s", "vs torch best"
    );
    let spinner = spinner();
    for (&size, &memcpy) in sizes.iter().zip(&memcpy) {
        let mut rows = Vec::new();
        for &path in paths {
            let workload = workload_for(path, size, rounds, quick, fd_limit);
            spinner.set_message(format!("{} {}", format::bytes(size as u64), path.label()));
            let seconds = run_path(path, workload, torch)?;
            rows.push(Row {
                path,
                workload,
                per_tensor: median(seconds) / workload.count as f64,
            });
        }
        spinner.suspend(|| print_rows(&rows, size, memcpy));
    }
    spinner.finish_and_clear();
    Ok(())
}

/// Seconds per round for one path.
fn run_path(path: Route, workload: Workload, torch: &TorchPeer) -> Result<Vec<f64>, CliError> {
    let authkey = Authkey::random()?;
    let strategy = path.strategy().name();
    let sharing = producer_sharing(Some(path.strategy()), authkey.clone());
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
            rust_consumer::SUBCOMMAND,
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
            format::bytes(size as u64),
            row.path.label(),
            row.workload.count,
            format::duration(row.per_tensor),
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
