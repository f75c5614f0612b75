//! `--workload batches --consumers N`: N stock torch training loops on one
//! host, each fed its own batches (as DDP ranks take theirs), by one Rust
//! producer process over N connections or by N DataLoaders; aggregate
//! batches a second. The torch side is `compat/python/bench_batches.py`.

use tensorshare::connection::ConnectionOptions;
use tensorshare::connection::Listener;
use tensorshare::{Authkey, Connection, SharingContext, Value};
use tensorshare_cli::error::CliError;
use tensorshare_cli::peer::Peer;

use super::feed::{Feed, spec_args};
use crate::batch_protocol::{BatchSpec, produce_batches};
use crate::median::median;
use crate::stream_protocol::producer_sharing;
use crate::torch_peer::TorchPeer;

/// What N consumers fed by `feed` did together.
pub struct Aggregate {
    /// Median over the rounds of a round's wall time (the slowest
    /// consumer's) divided by the batches all consumers trained on in it.
    pub per_batch: f64,
    /// Batches the consumers checked, warm-up runs included.
    pub checked: u64,
}

/// Runs `consumers` torch training loops fed by `feed` at once.
pub fn run_feed(
    feed: Feed,
    spec: BatchSpec,
    consumers: usize,
    torch: &TorchPeer,
) -> Result<Aggregate, CliError> {
    let results = match feed {
        Feed::DataLoader { workers } => dataloaders(workers, spec, consumers, torch)?,
        Feed::Rust {
            strategy,
            layout,
            torch_trains: true,
        } => {
            let authkey = Authkey::random()?;
            let sharing = producer_sharing(strategy, authkey.clone());
            let listener = Listener::bind_unique_abstract(&authkey, ConnectionOptions::default())?;
            let address = listener.address().to_string();
            let mut peers = (0..consumers)
                .map(|_| torch.spawn(&["consume"], None, Some((&address, &authkey))))
                .collect::<Result<Vec<_>, _>>()?;
            // Every consumer connects before any is served: they start
            // their runs together.
            let mut connections = peers
                .iter_mut()
                .map(|peer| Ok(Connection::new(peer.accept(&listener)?, &sharing)?))
                .collect::<Result<Vec<_>, CliError>>()?;
            std::thread::scope(|scope| {
                let producers: Vec<_> = connections
                    .iter_mut()
                    .map(|connection| {
                        let sharing = &sharing;
                        scope.spawn(move || produce_batches(connection, sharing, spec, layout))
                    })
                    .collect();
                producers
                    .into_iter()
                    .try_for_each(|producer| producer.join().map_err(|_| "a producer panicked")?)
            })?;
            finish_all(peers, torch)?
        }
        _ => {
            return Err(format!(
                "{} has no several-consumer form: --consumers takes dataloader-K and \
                 rust-STRATEGY[-arena] feeds",
                feed.name()
            )
            .into());
        }
    };
    aggregate(&results, spec, consumers)
}

/// N DataLoaders, each in its own torch process, released together.
fn dataloaders(
    workers: usize,
    spec: BatchSpec,
    consumers: usize,
    torch: &TorchPeer,
) -> Result<Vec<ConsumerResult>, CliError> {
    let authkey = Authkey::random()?;
    let listener = Listener::bind_unique_abstract(&authkey, ConnectionOptions::default())?;
    let address = listener.address().to_string();
    let workers = workers.to_string();
    let spec_args = spec_args(&spec);
    let spec_args: Vec<&str> = spec_args.iter().map(String::as_str).collect();
    let args = [
        &["dataloader", "--workers", &workers][..],
        &spec_args[..],
        &["--start-at", &address],
    ]
    .concat();
    let mut peers = (0..consumers)
        .map(|_| torch.spawn_with_authkey(&args, &authkey))
        .collect::<Result<Vec<_>, _>>()?;
    let sharing = SharingContext::new(authkey);
    let mut starts = peers
        .iter_mut()
        .map(|peer| Ok(Connection::new(peer.accept(&listener)?, &sharing)?))
        .collect::<Result<Vec<_>, CliError>>()?;
    for start in &mut starts {
        start.send(&Value::from(true))?;
    }
    drop(starts);
    finish_all(peers, torch)
}

/// One consumer's result: its rounds' seconds and the batches it checked.
struct ConsumerResult {
    seconds: Vec<f64>,
    checked: u64,
}

fn finish_all(peers: Vec<Peer>, torch: &TorchPeer) -> Result<Vec<ConsumerResult>, CliError> {
    peers
        .into_iter()
        .map(|mut peer| {
            let output = peer.finish()?;
            let (seconds, checked) = torch.seconds_and_checked(output)?;
            Ok(ConsumerResult { seconds, checked })
        })
        .collect()
}

/// Round `r`'s wall time is its slowest consumer's: they start together.
fn aggregate(
    results: &[ConsumerResult],
    spec: BatchSpec,
    consumers: usize,
) -> Result<Aggregate, CliError> {
    if results.len() != consumers || results.iter().any(|r| r.seconds.len() != spec.rounds) {
        return Err(format!(
            "expected {consumers} consumers' {} rounds each",
            spec.rounds
        )
        .into());
    }
    let rounds: Vec<f64> = (0..spec.rounds)
        .map(|round| {
            results
                .iter()
                .map(|result| result.seconds[round])
                .fold(0.0, f64::max)
        })
        .collect();
    Ok(Aggregate {
        per_batch: median(rounds) / (spec.batches * consumers) as f64,
        checked: results.iter().map(|result| result.checked).sum(),
    })
}
