//! Crash trials for the `file_system` strategy: a producer streams tensors
//! to an echo server and holds the echoes; at a random moment the producer,
//! the server or both die by SIGKILL. Once the survivors have exited, no
//! segment either process created may remain in `/dev/shm`: the managers,
//! separate processes, unlink what the dead can no longer count down. Each
//! trial's processes get a `TMPDIR` of their own, which must end with
//! nothing of tensorshare's in it (the managers' socket directories go with
//! the managers), and empty when both peers are tensorshare processes.
//!
//! Rust and torch peers both take part. Trials run a few at a time; the
//! total is printed.
//!
//! Kill trials for the `file_descriptor` strategy's resource sharer: a
//! `tensorshare echo` that holds registered fds dies by SIGKILL, and leaves
//! nothing in its `TMPDIR`: its sharer listens in the abstract namespace.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tensorshare::connection::ConnectionOptions;
use tensorshare::{Address, Authkey, Client, DType, SharingContext, Storage, StrategyKind, Value};
use tensorshare::{Tensor, TensorView};

use support::{
    Server, bound_abstract_names, exit_within, python_script, segments_of, test_python, tree,
    wait_until,
};

/// Set in a child process that plays the Rust producer.
const PRODUCER_ENV: &str = "TENSORSHARE_CRASH_PRODUCER";

/// Rust-only trials: producer and echo server both tensorshare.
const RUST_TRIALS: usize = 96;
/// Trials with a torch process on one side, per kind of torch peer.
const TORCH_TRIALS: usize = 6;
/// Trials running at once; most of a trial is waiting for a manager's grace.
const PARALLEL: usize = 8;
/// How long after the survivors exit their segments may take to go: the
/// managers wait 2 s for their last client before unlinking.
const CLEANUP_LIMIT: Duration = Duration::from_secs(15);

#[derive(Clone, Copy, Debug)]
enum Victim {
    Producer,
    Server,
    Both,
}

#[derive(Clone, Copy, Debug)]
enum Peers {
    RustOnly,
    /// A torch producer sending `file_system` tensors: the server answers
    /// with torch's own segments.
    TorchProducer,
    /// A torch producer sending `file_descriptor` tensors: the server
    /// answers with segments it makes itself, which torch then holds.
    TorchProducerFd,
    TorchServer,
}

#[derive(Clone, Copy, Debug)]
struct Trial {
    peers: Peers,
    victim: Victim,
    /// How long the stream runs before the kill.
    delay: Duration,
}

/// A deterministic spread of trials: every victim, delays from 0 to 290 ms.
fn trials() -> Vec<Trial> {
    let victims = [Victim::Producer, Victim::Server, Victim::Both];
    let mut trials = Vec::new();
    for (peers, count) in [
        (Peers::RustOnly, RUST_TRIALS),
        (Peers::TorchProducer, TORCH_TRIALS),
        (Peers::TorchProducerFd, TORCH_TRIALS),
        (Peers::TorchServer, TORCH_TRIALS),
    ] {
        for i in 0..count {
            trials.push(Trial {
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
    if std::env::var_os(PRODUCER_ENV).is_some() {
        return;
    }
    let python = test_python("crash::sigkilled_peers_leave_nothing_in_dev_shm");
    let trials: Vec<Trial> = trials()
        .into_iter()
        .filter(|trial| python.is_some() || matches!(trial.peers, Peers::RustOnly))
        .collect();
    let started = Instant::now();
    let mut outcomes = Vec::new();
    for batch in trials.chunks(PARALLEL) {
        let results: Vec<Result<(), String>> = std::thread::scope(|scope| {
            let handles: Vec<_> = batch
                .iter()
                .map(|trial| scope.spawn(|| run_trial(*trial, python.as_deref())))
                .collect();
            handles
                .into_iter()
                .map(|handle| handle.join().unwrap_or_else(|_| Err("panicked".into())))
                .collect()
        });
        outcomes.extend(batch.iter().copied().zip(results));
    }
    let failed: Vec<String> = outcomes
        .iter()
        .filter_map(|(trial, result)| result.as_ref().err().map(|e| format!("{trial:?}: {e}")))
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

/// One trial; `Err` says what was left behind or what went wrong.
fn run_trial(trial: Trial, python: Option<&str>) -> Result<(), String> {
    let authkey = Authkey::random().map_err(|e| e.to_string())?;
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (mut command, address) = match trial.peers {
        Peers::TorchServer => {
            Server::torch_echo_command(python.expect("python"), &authkey, "file_system")
        }
        _ => Server::echo_command(&authkey, "file_system"),
    };
    command.env("TMPDIR", tmp.path());
    let mut server = Server::start(command, address);
    let mut producer = match trial.peers {
        Peers::TorchProducer => torch_producer(
            python.expect("python"),
            "file_system",
            &server.address,
            &authkey,
            tmp.path(),
        ),
        Peers::TorchProducerFd => torch_producer(
            python.expect("python"),
            "file_descriptor",
            &server.address,
            &authkey,
            tmp.path(),
        ),
        _ => rust_producer(&server.address, &authkey, tmp.path()),
    };
    let pids = [producer.id(), server.pid()];
    wait_for_streaming(&mut producer)?;
    std::thread::sleep(trial.delay);
    match trial.victim {
        Victim::Producer => kill(&mut producer),
        Victim::Server => kill(&mut server.child),
        Victim::Both => {
            kill(&mut producer);
            kill(&mut server.child);
        }
    }
    // The survivors exit: a producer whose server died stops by itself; a
    // server whose producer died is stopped as an operator would.
    wait_within(&mut producer, Duration::from_secs(30))?;
    if server
        .child
        .try_wait()
        .map_err(|e| e.to_string())?
        .is_none()
    {
        let _ = Command::new("kill")
            .args(["-TERM", &server.pid().to_string()])
            .status();
        wait_within(&mut server.child, Duration::from_secs(30))?;
    }
    let mut left = Vec::new();
    let mut left_in_tmp = Vec::new();
    let cleaned = wait_until(CLEANUP_LIMIT, || {
        left = pids.iter().flat_map(|&pid| segments_of(pid)).collect();
        // torch's processes leave CPython's `pymp-*` directories, which
        // are theirs; a tensorshare process leaves nothing.
        left_in_tmp = tree(tmp.path())
            .into_iter()
            .filter(|path| {
                matches!(trial.peers, Peers::RustOnly)
                    || path
                        .file_name()
                        .is_some_and(|name| name.to_string_lossy().starts_with("tensorshare"))
            })
            .collect();
        left.is_empty() && left_in_tmp.is_empty()
    });
    if cleaned {
        Ok(())
    } else if left_in_tmp.is_empty() {
        Err(format!("left in /dev/shm: {left:?}"))
    } else {
        Err(format!(
            "left in /dev/shm: {left:?}; left in TMPDIR: {left_in_tmp:?}"
        ))
    }
}

fn kill(child: &mut Child) {
    let _ = child.kill();
}

fn wait_within(child: &mut Child, limit: Duration) -> Result<(), String> {
    if exit_within(child, limit).is_some() {
        return Ok(());
    }
    let _ = child.kill();
    Err(format!("process {} did not exit", child.id()))
}

/// Waits for the producer's `streaming` line: its first echo came back.
fn wait_for_streaming(producer: &mut Child) -> Result<(), String> {
    let stdout = producer.stdout.take().ok_or("stdout not piped")?;
    // A Rust producer is a test binary, whose harness prints first, on the
    // same line: `test producer_role ... streaming`.
    for line in BufReader::new(stdout).lines() {
        match line {
            Ok(line) if line.trim_end().ends_with("streaming") => return Ok(()),
            Ok(_) => continue,
            Err(e) => return Err(e.to_string()),
        }
    }
    let _ = producer.kill();
    let _ = producer.wait();
    let mut stderr = String::new();
    if let Some(mut pipe) = producer.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
    }
    Err(format!("the producer exited before streaming: {stderr}"))
}

fn torch_producer(
    python: &str,
    strategy: &str,
    address: &Address,
    authkey: &Authkey,
    tmp: &Path,
) -> Child {
    Command::new(python)
        .env("TMPDIR", tmp)
        .arg(python_script("echo_peer.py"))
        .args(["stream", "--strategy", strategy, "--address"])
        .arg(address.to_string())
        .args(["--authkey", &authkey.to_hex()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the torch producer")
}

/// This test binary again, as the Rust producer of [`producer_role`].
fn rust_producer(address: &Address, authkey: &Authkey, tmp: &Path) -> Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .env("TMPDIR", tmp)
        .env_remove(tensorshare::resource_sharer::SHARER_DIR_ENV)
        .args([
            "producer_role",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PRODUCER_ENV, format!("{address} {}", authkey.to_hex()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the Rust producer")
}

/// The Rust producer: streams tensors to the echo server until it goes
/// away, holding the last echoes. Half the tensors live in this process's
/// own segments, half in memfds that the server copies into segments of
/// its own, so both processes create segments.
#[test]
fn producer_role() {
    let Ok(setting) = std::env::var(PRODUCER_ENV) else {
        return;
    };
    let (address, authkey) = setting.split_once(' ').expect("ADDRESS HEX");
    let address: Address = address.parse().expect("address");
    let authkey = Authkey::from_hex(authkey).expect("authkey");
    let sharing = SharingContext::new(authkey.clone()).with_strategy(StrategyKind::FileSystem);
    let Ok(mut connection) = Client::connect(&address, &authkey, ConnectionOptions::default())
    else {
        return;
    };
    let mut held = std::collections::VecDeque::new();
    for round in 0_u64.. {
        let kind = if round % 2 == 0 {
            StrategyKind::FileSystem
        } else {
            StrategyKind::FileDescriptor
        };
        let mut writer = Storage::allocate(kind, 4096).expect("allocate");
        writer.as_bytes_mut().fill(round as u8);
        let tensor = Tensor::new(
            writer.freeze(),
            TensorView::contiguous(DType::UInt8, &[4096]),
        )
        .expect("tensor");
        if connection.send(&Value::Tensor(tensor), &sharing).is_err() {
            return;
        }
        let Ok(echo) = connection.recv(&sharing) else {
            return;
        };
        held.push_back(echo);
        if held.len() > 16 {
            held.pop_front();
        }
        if round == 0 {
            println!("streaming");
        }
    }
}

/// Kill trials of a `file_descriptor` sharer, one after another.
const FD_SHARER_TRIALS: usize = 12;

#[test]
fn sigkilled_fd_sharers_leave_nothing_in_their_tmpdir() {
    if std::env::var_os(PRODUCER_ENV).is_some() {
        return;
    }
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
    let sharing = SharingContext::new(authkey.clone());
    let mut connection = server.connect(&authkey);
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
            .send(&Value::Tensor(tensor), &sharing)
            .map_err(|e| e.to_string())?;
        let reply = connection.recv_bytes().map_err(|e| e.to_string())?;
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
    kill(&mut server.child);
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
