//! Crash trials for the `file_system` strategy: a producer streams tensors
//! to an echo server and holds the echoes; at a random moment the producer,
//! the server, both, or their shared-memory managers die by SIGKILL. Once
//! the survivors have exited, no segment either process created may remain
//! in `/dev/shm` 3 s later: the managers, separate processes, unlink what
//! the dead can no longer count down (a message to a victim too, as its
//! sender told the manager where it went, with the default 5-minute
//! in-flight wait in force), and peers whose managers died start new ones
//! that take over. Each trial's processes get a `TMPDIR` of their own, which must
//! end with nothing of tensorshare's in it (the managers' socket directories
//! go with the managers, a killed one's with whoever took over from it), and
//! empty when both peers are tensorshare processes.
//!
//! Rust and torch peers both take part. Trials run a few at a time; the
//! total is printed.
//!
//! Kill trials for the `file_descriptor` strategy's resource sharer: a
//! `tensorshare echo` that holds registered fds dies by SIGKILL, and leaves
//! nothing in its `TMPDIR`: its sharer listens in the abstract namespace.
//! And the other way round: a client killed before fetching its echoes
//! leaves the server no fd of them.

mod support;

use std::io::Write;
use std::time::{Duration, Instant};

use tensorshare::Tensor;
use tensorshare::model::Storage;
use tensorshare::model::TensorView;
use tensorshare::{Authkey, DType, SharingContext, StrategyKind, Value};

use support::kill_trials::{self, Peers, Strategy, Trial, Victim};
use support::{Server, bound_abstract_names, test_python, tree, wait_until};

/// Rust-only trials: producer and echo server both tensorshare.
const RUST_TRIALS: usize = 96;
/// Trials with a torch process on one side, per kind of torch peer.
const TORCH_TRIALS: usize = 6;
/// Trials running at once; most of a trial is waiting for a manager's grace.
const PARALLEL: usize = 8;

/// A deterministic spread of trials: every victim, delays from 0 to 290 ms.
fn trials() -> Vec<Trial> {
    let victims = [
        Victim::Producer,
        Victim::Server,
        Victim::Both,
        Victim::Manager,
    ];
    let mut trials = Vec::new();
    for (peers, count) in [
        (Peers::RustToRust, RUST_TRIALS),
        // The server answers with torch's own segments.
        (Peers::TorchToRust, TORCH_TRIALS),
        // The server answers with segments it makes itself, which torch
        // then holds.
        (Peers::TorchFdToRust, TORCH_TRIALS),
        (Peers::RustToTorch, TORCH_TRIALS),
    ] {
        for i in 0..count {
            trials.push(Trial {
                strategy: Strategy::FileSystem,
                peers,
                victim: victims[i % victims.len()],
                delay: Duration::from_millis((i as u64 * 37) % 300),
            });
        }
    }
    trials
}

#[test]
fn sigkilled_peers_leave_nothing_in_dev_shm() {
    let python = test_python("crash::sigkilled_peers_leave_nothing_in_dev_shm");
    let mut trials: Vec<Trial> = trials()
        .into_iter()
        .filter(|trial| python.is_some() || !trial.peers.needs_python())
        .collect();
    let started = Instant::now();
    // The torch trials, the slowest (each starts a torch process), first.
    trials.sort_by_key(|trial| !trial.peers.needs_python());
    let outcomes = kill_trials::run_pool(
        PARALLEL,
        python.as_deref(),
        |i| trials.get(i).copied(),
        |_| {},
    );
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|(_, outcome)| !outcome.is_clean())
        .map(|(trial, outcome)| format!("{trial:?}: {}", outcome.describe()))
        .collect();
    // Through the handle, not println!, so that scripts/test shows the count.
    let _ = writeln!(
        std::io::stderr(),
        "crash trials: {} run, {} leaked or failed, in {:.1} s",
        outcomes.len(),
        failed.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(failed.is_empty(), "{failed:#?}");
    assert!(outcomes.len() >= 100 || python.is_none());
}

/// The Rust producer of the trials (see [`kill_trials::producer_role`]).
#[test]
#[ignore = "a child role: the kill trials run it"]
fn producer_role() {
    kill_trials::producer_role();
}

/// Kill trials of a `file_descriptor` sharer, one after another.
const FD_SHARER_TRIALS: usize = 12;

#[test]
fn sigkilled_fd_sharers_leave_nothing_in_their_tmpdir() {
    let started = Instant::now();
    let failed: Vec<String> = (0..FD_SHARER_TRIALS)
        .filter_map(|trial| {
            fd_sharer_trial(trial)
                .err()
                .map(|e| format!("trial {trial}: {e}"))
        })
        .collect();
    let _ = writeln!(
        std::io::stderr(),
        "file_descriptor sharer kill trials: {FD_SHARER_TRIALS} run, {} left something or \
         failed, in {:.1} s",
        failed.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(failed.is_empty(), "{failed:#?}");
}

/// A `tensorshare echo --strategy file_descriptor` with a `TMPDIR` of its
/// own echoes `trial + 1` tensors, whose fds its resource sharer holds
/// registered (the replies are read as bytes, so nothing fetches them),
/// and is SIGKILLed. `Err` says what it left behind.
fn fd_sharer_trial(trial: usize) -> Result<(), String> {
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let authkey = Authkey::random().map_err(|e| e.to_string())?;
    let (mut command, address) = Server::echo_command(&authkey, "file_descriptor");
    command.env("TMPDIR", tmp.path());
    let mut server = Server::start(command, address);
    let sharing = SharingContext::new(authkey);
    let mut connection = server.connect(&sharing);
    for round in 0..=trial {
        let mut writer =
            Storage::allocate(StrategyKind::FileDescriptor, 4096).map_err(|e| e.to_string())?;
        writer.as_bytes_mut().fill(round as u8);
        let tensor = Tensor::new(
            writer.freeze(),
            TensorView::contiguous(DType::UInt8, &[4096]),
        )
        .map_err(|e| e.to_string())?;
        connection
            .send(&Value::Tensor(tensor))
            .map_err(|e| e.to_string())?;
        let reply = connection
            .get_mut()
            .recv_bytes()
            .map_err(|e| e.to_string())?;
        if !reply.windows(5).any(|window| window == b"DupFd") {
            return Err("the echo is not a file_descriptor pickle".into());
        }
    }
    let sharer_prefix = format!("tensorshare-sharer-{}-", server.pid());
    let sharer_bound = || {
        bound_abstract_names()
            .iter()
            .any(|name| name.starts_with(&sharer_prefix))
    };
    let was_bound = sharer_bound();
    let _ = server.child.kill();
    let _ = server.child.wait();
    let left = tree(tmp.path());
    if !left.is_empty() {
        return Err(format!("left in its TMPDIR: {left:?}"));
    }
    if !was_bound {
        return Err(format!(
            "its resource sharer was not listening on @{sharer_prefix}..."
        ));
    }
    if sharer_bound() {
        return Err("its resource sharer's name outlived it".into());
    }
    Ok(())
}

/// Set in a child process that sends tensors to an echo server and reads
/// the echoes as bytes, fetching none of their fds: `ADDRESS HEX COUNT`.
const HOARDER_ENV: &str = "TENSORSHARE_CRASH_HOARDER";

/// Sends `count` tensors over `connection` and reads each echo as bytes,
/// so that none of the echoes' fds is fetched or given back.
fn send_and_hoard(connection: &mut tensorshare::Connection, count: u8) {
    for round in 0..count {
        let mut writer = Storage::allocate(StrategyKind::FileDescriptor, 4096).expect("allocate");
        writer.as_bytes_mut().fill(round);
        let tensor = Tensor::new(
            writer.freeze(),
            TensorView::contiguous(DType::UInt8, &[4096]),
        )
        .expect("tensor");
        connection
            .send(&Value::Tensor(tensor))
            .expect("send a tensor");
        let echo = connection.get_mut().recv_bytes().expect("an echo");
        assert!(echo.windows(5).any(|window| window == b"DupFd"));
    }
}

/// The child of [`a_killed_clients_unfetched_fds_are_closed_by_the_server`].
#[test]
#[ignore = "a child role: a_killed_clients_unfetched_fds_are_closed_by_the_server runs it"]
fn hoarder_role() {
    let setting = support::role_setting(HOARDER_ENV);
    let mut fields = setting.split(' ');
    let mut field = || fields.next().expect("ADDRESS HEX COUNT");
    let address: tensorshare::connection::Address = field().parse().expect("address");
    let authkey = Authkey::from_hex(field()).expect("authkey");
    let count: u8 = field().parse().expect("count");
    let sharing = SharingContext::new(authkey);
    let mut connection = sharing.connect(&address).expect("connect");
    send_and_hoard(&mut connection, count);
    println!("hoarding");
    std::thread::sleep(Duration::from_secs(600));
}

/// The memfds `pid` has open.
fn memfds_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|entries| {
            entries
                .flatten()
                .filter(|entry| {
                    std::fs::read_link(entry.path())
                        .is_ok_and(|target| target.to_string_lossy().starts_with("/memfd:"))
                })
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn a_killed_clients_unfetched_fds_are_closed_by_the_server() {
    let authkey = Authkey::random().expect("authkey");
    let mut server = Server::echo(&authkey, "file_descriptor");
    // A client that hangs up alive may still unpickle what it read: the
    // server keeps those fds for their unfetched lifetime.
    let sharing = SharingContext::new(authkey.clone());
    let mut connection = server.connect(&sharing);
    send_and_hoard(&mut connection, 3);
    drop(connection);
    // Time for a wrong close of the echoes to show; then only the fd of the
    // last tensor received may still be going.
    std::thread::sleep(Duration::from_millis(500));
    let mut held = 0;
    let kept = wait_until(Duration::from_secs(5), || {
        held = memfds_of(server.pid());
        held == 3
    });
    assert!(
        kept,
        "a live client's echoes: the server holds {held} memfds"
    );

    // One killed with its echoes unread leaves nothing to fetch them.
    let mut command = support::child_role("hoarder_role");
    command.env(
        HOARDER_ENV,
        format!("{} {} 5", server.address, authkey.to_hex()),
    );
    let mut hoarder = support::ChildGuard(
        command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start the hoarding client"),
    );
    // The test harness prints first, on the same line.
    let stdout = hoarder.0.stdout.take().expect("stdout piped");
    let hoarding = std::io::BufRead::lines(std::io::BufReader::new(stdout))
        .map_while(Result::ok)
        .any(|line| line.ends_with("hoarding"));
    assert!(hoarding, "the hoarding client exited early");
    // The server may still be letting go of the last tensor it received
    // when the client has its echo.
    let mut held = 0;
    let both = wait_until(Duration::from_secs(5), || {
        held = memfds_of(server.pid());
        held == 3 + 5
    });
    assert!(both, "both clients' echoes: the server holds {held} memfds");
    hoarder.0.kill().expect("SIGKILL the client");
    hoarder.0.wait().expect("reap the client");
    let settled = wait_until(Duration::from_secs(5), || {
        held = memfds_of(server.pid());
        held == 3
    });
    assert!(
        settled,
        "the server holds {held} memfds; stderr: {}",
        server.stop_and_read_stderr()
    );
}
