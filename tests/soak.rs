//! The long crash test (`scripts/soak`): the kill trials of
//! `tests/crash.rs` over every strategy, with Rust and torch on either
//! side, killing the producer, the server, the shared-memory managers
//! (`file_system`) or all of them at a random moment, for
//! `TENSORSHARE_SOAK_TRIALS` trials or `TENSORSHARE_SOAK_MINUTES` minutes
//! (the first reached when both are set). Prints a table of trials, what
//! was left by kind and owner before and after `tensorshare gc`, and
//! failures, per strategy, peers and victim, and fails when a trial was
//! unclean ([`Outcome::is_clean`]: the rule is in `scripts/soak`). It is
//! an ignored test, which the workspace's `cargo test` leaves out: run
//! without either setting, it fails saying how to run it.
//!
//! `TENSORSHARE_SOAK_PARALLEL` sets the trials running at once (default 8);
//! `TENSORSHARE_SOAK_ONLY` keeps the kinds of trial whose `strategy peers
//! victim` (as the table shows them, e.g. `file_system rust->rust manager`)
//! contains it, to repeat one cell.

mod support;

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use support::kill_trials::{self, Outcome, Peers, Strategy, Trial, Victim};
use support::test_python;

const TRIALS_ENV: &str = "TENSORSHARE_SOAK_TRIALS";
const MINUTES_ENV: &str = "TENSORSHARE_SOAK_MINUTES";
const PARALLEL_ENV: &str = "TENSORSHARE_SOAK_PARALLEL";
const ONLY_ENV: &str = "TENSORSHARE_SOAK_ONLY";
/// Failures and leaks described one by one under the table.
const DESCRIBED: usize = 30;

fn setting(name: &str) -> Option<f64> {
    let text = std::env::var(name).ok()?;
    let value: f64 = text
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{name}={text:?} is not a number"));
    Some(value)
}

/// Every kind of trial: strategy x peers x victim, those whose row
/// contains `only` when it is given. Only `file_system` processes launch
/// managers.
fn kinds(python: bool, only: Option<&str>) -> Vec<(Strategy, Peers, Victim)> {
    let mut kinds = Vec::new();
    for strategy in Strategy::ALL {
        for peers in [
            Peers::RustToRust,
            Peers::TorchToRust,
            Peers::TorchFdToRust,
            Peers::RustToTorch,
        ] {
            if peers.needs_python() && !python {
                continue;
            }
            for victim in [
                Victim::Producer,
                Victim::Server,
                Victim::Manager,
                Victim::All,
            ] {
                if victim == Victim::Manager && strategy != Strategy::FileSystem {
                    continue;
                }
                let row = format!("{} {} {}", strategy.name(), peers.name(), victim.name());
                if only.is_some_and(|only| !row.contains(only)) {
                    continue;
                }
                kinds.push((strategy, peers, victim));
            }
        }
    }
    kinds
}

/// A small xorshift generator for the kill delays; the seed is printed.
struct Delays(u64);

impl Delays {
    fn next(&mut self) -> Duration {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        Duration::from_millis(x % 300)
    }
}

#[derive(Default)]
struct Row {
    trials: usize,
    shm: usize,
    memmap_files: usize,
    sockets: usize,
    tmp_files: usize,
    ours_after_gc: usize,
    managers: usize,
    fds: usize,
    torch_shm: usize,
    torch_after_gc: usize,
    failures: usize,
    unclean: usize,
}

impl Row {
    fn add(&mut self, outcome: &Outcome) {
        let leaks = &outcome.leaks;
        self.trials += 1;
        self.shm += leaks.shm.len();
        self.memmap_files += leaks.memmap_files.len();
        self.sockets += leaks.sockets.len();
        self.tmp_files += leaks.tmp_files.len();
        self.ours_after_gc += leaks.ours_after_gc.len();
        self.managers += leaks.managers.len();
        self.fds += leaks.fds;
        self.torch_shm += leaks.torch_shm.len();
        self.torch_after_gc += leaks.torch_after_gc.len();
        self.failures += usize::from(outcome.failure.is_some());
        self.unclean += usize::from(!outcome.is_clean());
    }

    fn merge(&mut self, other: &Row) {
        self.trials += other.trials;
        self.shm += other.shm;
        self.memmap_files += other.memmap_files;
        self.sockets += other.sockets;
        self.tmp_files += other.tmp_files;
        self.ours_after_gc += other.ours_after_gc;
        self.managers += other.managers;
        self.fds += other.fds;
        self.torch_shm += other.torch_shm;
        self.torch_after_gc += other.torch_after_gc;
        self.failures += other.failures;
        self.unclean += other.unclean;
    }

    /// The counts after the row's name, in the header's order.
    fn cells(&self) -> String {
        format!(
            "{:>6} | {:>5} {:>6} {:>7} {:>6} {:>5} {:>8} {:>4} | {:>5} {:>8} | {:>8} {:>7}",
            self.trials,
            self.shm,
            self.memmap_files,
            self.sockets,
            self.tmp_files,
            self.ours_after_gc,
            self.managers,
            self.fds,
            self.torch_shm,
            self.torch_after_gc,
            self.failures,
            self.unclean
        )
    }
}

/// The table's header, over [`Row::cells`].
const HEADER: &str = "trials |   shm memmap sockets tmpdir    gc managers  fds | torch torch-gc | \
                      failures unclean";

#[test]
#[ignore = "a long soak: scripts/soak runs it"]
fn soak_kill_trials() {
    let trials_limit = setting(TRIALS_ENV).map(|n| n as usize);
    let minutes = setting(MINUTES_ENV);
    assert!(
        trials_limit.is_some() || minutes.is_some(),
        "the soak runs for {TRIALS_ENV} trials or {MINUTES_ENV} minutes, and neither is set: \
         run scripts/soak, which sets them"
    );
    let parallel = setting(PARALLEL_ENV).map_or(8, |n| (n as usize).max(1));
    let python = test_python("soak::soak_kill_trials");
    let only = std::env::var(ONLY_ENV).ok().filter(|only| !only.is_empty());
    let kinds = kinds(python.is_some(), only.as_deref());
    assert!(
        !kinds.is_empty(),
        "{ONLY_ENV}={only:?} matches no kind of trial"
    );
    let started = Instant::now();
    let deadline = minutes.map(|m| started + Duration::from_secs_f64(m * 60.0));
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    let delays = Mutex::new(Delays(seed));
    let mut out = std::io::stderr();
    let _ = writeln!(
        out,
        "soak: {} kinds of trial, {parallel} at a time, until {}; delay seed {seed}",
        kinds.len(),
        match (trials_limit, minutes) {
            (Some(n), Some(m)) => format!("{n} trials or {m} minutes"),
            (Some(n), None) => format!("{n} trials"),
            (None, Some(m)) => format!("{m} minutes"),
            (None, None) => unreachable!(),
        }
    );
    let next_trial = |i: usize| {
        if deadline.is_some_and(|d| Instant::now() >= d) || trials_limit.is_some_and(|n| i >= n) {
            return None;
        }
        let (strategy, peers, victim) = kinds[i % kinds.len()];
        let delay = delays.lock().expect("delays").next();
        Some(Trial {
            strategy,
            peers,
            victim,
            delay,
        })
    };
    let outcomes = kill_trials::run_pool(parallel, python.as_deref(), next_trial, |ended| {
        if ended.is_multiple_of(100) {
            let _ = writeln!(
                std::io::stderr(),
                "soak: {ended} trials in {:.0} s",
                started.elapsed().as_secs_f64()
            );
        }
    });
    let mut rows: BTreeMap<(Strategy, Peers, Victim), Row> = BTreeMap::new();
    for (trial, outcome) in &outcomes {
        rows.entry((trial.strategy, trial.peers, trial.victim))
            .or_default()
            .add(outcome);
    }
    let _ = writeln!(
        out,
        "\nsoak: {} trials in {:.1} s. Ours, as the survivors left it: shm memmap sockets \
         tmpdir; `gc`: ours still there after `tensorshare gc`; managers alive; fds a \
         surviving server kept. torch, torch-gc: segments torch's own processes left, before \
         and after gc. unclean: trials that failed or left ours to answer for (scripts/soak \
         says the rule).\n",
        outcomes.len(),
        started.elapsed().as_secs_f64()
    );
    let _ = writeln!(
        out,
        "{:<16} {:<12} {:<16} {HEADER}",
        "strategy", "peers", "victim"
    );
    let mut total = Row::default();
    for ((strategy, peers, victim), row) in &rows {
        let _ = writeln!(
            out,
            "{:<16} {:<12} {:<16} {}",
            strategy.name(),
            peers.name(),
            victim.name(),
            row.cells()
        );
        total.merge(row);
    }
    let _ = writeln!(out, "{:<46} {}", "total", total.cells());
    let bad: Vec<String> = outcomes
        .iter()
        .filter(|(_, outcome)| !outcome.is_clean())
        .map(|(trial, outcome)| format!("{trial:?}: {}", outcome.describe()))
        .collect();
    for line in bad.iter().take(DESCRIBED) {
        let _ = writeln!(out, "  {line}");
    }
    if bad.len() > DESCRIBED {
        let _ = writeln!(out, "  ... and {} more", bad.len() - DESCRIBED);
    }
    assert!(
        bad.is_empty(),
        "{} of {} trials were unclean",
        bad.len(),
        outcomes.len()
    );
}

/// The Rust producer of the trials (see [`kill_trials::producer_role`]).
#[test]
#[ignore = "a child role: the kill trials run it"]
fn producer_role() {
    kill_trials::producer_role();
}
