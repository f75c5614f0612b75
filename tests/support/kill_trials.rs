//! Kill trials: a producer streams tensors to an echo server and holds the
//! echoes; at a random moment the producer, the server, the shared-memory
//! managers or all of them die by SIGKILL. Once the survivors have exited,
//! a trial counts what is left: `/dev/shm` segments of its processes, files
//! in its memmap directory, socket files and other tensorshare files in its
//! `TMPDIR`, managers still alive, and fds a surviving tensorshare server
//! did not give back once its producer died.
//!
//! `tests/crash.rs` runs a short fixed set of `file_system` trials;
//! `tests/soak.rs` runs every strategy and pair of peers for a number of
//! trials or minutes (`scripts/soak`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use tensorshare::Tensor;
use tensorshare::connection::Address;
use tensorshare::model::Storage;
use tensorshare::model::TensorView;
use tensorshare::{Authkey, DType, SharingContext, StrategyKind, Value};
use tensorshare_strategies::services::shm_manager::IN_FLIGHT_WAIT_ENV;

pub use super::leftovers::Leaks;
use super::leftovers::TrialPlaces;
use super::{Server, exit_within, has_exited, open_fds, poll_until, python_script, wait_until};

/// Set in a child process that plays the Rust producer: `ADDRESS HEX
/// STRATEGY MEMMAP_DIR`.
pub const PRODUCER_ENV: &str = "TENSORSHARE_CRASH_PRODUCER";

/// How long after the survivors exit their leftovers may take to go: the
/// managers wait 2 s for their last client before unlinking. They keep
/// their default in-flight wait: a segment that a message to a victim
/// still counts goes as soon as the manager has seen the victim gone, as
/// its sender told it where the message went.
const CLEANUP_LIMIT: Duration = Duration::from_secs(3);
/// How long a surviving server may take to close what its dead producer
/// left it.
const FD_SETTLE_LIMIT: Duration = Duration::from_secs(5);
/// Fds a surviving server may hold above what it had when it started
/// listening: its connection to a shared-memory manager it launched, or
/// its resource sharer's listening socket and the clone that wakes it.
const FD_SLACK: usize = 2;
/// How long the peers stream on after their managers were killed, before
/// the server is stopped.
const SURVIVORS_STREAM: Duration = Duration::from_millis(500);

/// The strategy the trial's processes share by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Strategy {
    FileDescriptor,
    FileSystem,
    Bytes,
    Memmap,
}

impl Strategy {
    pub const ALL: [Strategy; 4] = [
        Strategy::FileDescriptor,
        Strategy::FileSystem,
        Strategy::Bytes,
        Strategy::Memmap,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Strategy::FileDescriptor => "file_descriptor",
            Strategy::FileSystem => "file_system",
            Strategy::Bytes => "bytes",
            Strategy::Memmap => "memmap",
        }
    }

    fn kind(self) -> StrategyKind {
        match self {
            Strategy::FileDescriptor => StrategyKind::FileDescriptor,
            Strategy::FileSystem => StrategyKind::FileSystem,
            Strategy::Bytes => StrategyKind::Bytes,
            Strategy::Memmap => StrategyKind::Memmap,
        }
    }

    fn from_name(name: &str) -> Option<Strategy> {
        Strategy::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// Who produces and who echoes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Peers {
    /// A Rust producer and `tensorshare echo`.
    RustToRust,
    /// A torch producer (`echo_peer.py stream`) sharing by the trial's
    /// strategy (file_descriptor where torch has no such strategy) and
    /// `tensorshare echo`.
    TorchToRust,
    /// A torch producer sharing by `file_descriptor` whatever the server
    /// answers with.
    TorchFdToRust,
    /// A Rust producer and a stock-torch echo server (`echo_peer.py serve`).
    RustToTorch,
}

impl Peers {
    pub fn name(self) -> &'static str {
        match self {
            Peers::RustToRust => "rust->rust",
            Peers::TorchToRust => "torch->rust",
            Peers::TorchFdToRust => "torch(fd)->rust",
            Peers::RustToTorch => "rust->torch",
        }
    }

    pub fn needs_python(self) -> bool {
        !matches!(self, Peers::RustToRust)
    }
}

/// What dies by SIGKILL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Victim {
    Producer,
    Server,
    /// Every shared-memory manager the trial's processes launched.
    Manager,
    Both,
    /// The producer, the server and the managers.
    All,
}

impl Victim {
    pub fn name(self) -> &'static str {
        match self {
            Victim::Producer => "producer",
            Victim::Server => "server",
            Victim::Manager => "manager",
            Victim::Both => "producer+server",
            Victim::All => "all",
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Trial {
    pub strategy: Strategy,
    pub peers: Peers,
    pub victim: Victim,
    /// How long the stream runs before the kill.
    pub delay: Duration,
}

impl Trial {
    /// Whether the kill leaves objects of ours that no survivor can tell
    /// are free, so that only `tensorshare gc` reclaims them: the managers
    /// died with their clients, or a memmap sender died (its receivers
    /// never say when they are done with a file).
    pub fn leaves_work_for_gc(&self) -> bool {
        let killed_producer = matches!(self.victim, Victim::Producer | Victim::Both);
        let killed_server = matches!(self.victim, Victim::Server | Victim::Both);
        let rust_producer = matches!(self.peers, Peers::RustToRust | Peers::RustToTorch);
        let rust_server = !matches!(self.peers, Peers::RustToTorch);
        self.victim == Victim::All
            || (self.strategy == Strategy::Memmap
                && ((killed_producer && rust_producer) || (killed_server && rust_server)))
    }
}

/// How one trial ended: what it left, and `failure` when it could not run
/// to the end (a peer that never streamed, a survivor that did not exit).
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub leaks: Leaks,
    pub failure: Option<String>,
}

impl Outcome {
    /// Whether the trial ran and left nothing of ours to answer for (see
    /// [`Leaks::is_ours`]).
    pub fn is_clean(&self) -> bool {
        self.failure.is_none() && !self.leaks.is_ours()
    }

    /// One line saying what went wrong, for an assertion message.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(failure) = &self.failure {
            parts.push(failure.clone());
        }
        let leaks = &self.leaks;
        if !leaks.shm.is_empty() {
            parts.push(format!("left in /dev/shm: {}", few(&leaks.shm)));
        }
        if !leaks.memmap_files.is_empty() {
            parts.push(format!(
                "left in the memmap dir: {}",
                few(&leaks.memmap_files)
            ));
        }
        if !leaks.sockets.is_empty() || !leaks.tmp_files.is_empty() {
            parts.push(format!(
                "left in TMPDIR: {}",
                few(&leaks
                    .sockets
                    .iter()
                    .chain(&leaks.tmp_files)
                    .collect::<Vec<_>>())
            ));
        }
        if !leaks.managers.is_empty() {
            parts.push(format!("managers still alive: {:?}", leaks.managers));
        }
        if leaks.fds > 0 {
            parts.push(format!("the surviving server kept {} fds", leaks.fds));
        }
        if leaks.ours_left() && !leaks.left_for_gc {
            parts.push("survivors that knew of it left it".to_owned());
        }
        if !leaks.ours_after_gc.is_empty() {
            parts.push(format!(
                "tensorshare gc left: {}",
                few(&leaks.ours_after_gc)
            ));
        }
        if !leaks.torch_shm.is_empty() {
            parts.push(format!(
                "torch's own in /dev/shm: {} ({} after gc)",
                few(&leaks.torch_shm),
                leaks.torch_after_gc.len()
            ));
        }
        parts.join("; ")
    }
}

/// The first few of `items` and how many there are.
fn few<T: std::fmt::Debug>(items: &[T]) -> String {
    const SHOWN: usize = 3;
    if items.len() <= SHOWN {
        format!("{items:?}")
    } else {
        format!("{:?} and {} more", &items[..SHOWN], items.len() - SHOWN)
    }
}

/// Runs trials on `parallel` workers, each asking `next_trial` for the
/// trial of the next index as soon as it has ended its last, until it gives
/// `None`: no worker waits for another's trial. A trial that panics is a
/// failed outcome. `ended` is told how many trials have ended after each
/// one. Returns every trial with its outcome, in the order they ended.
pub fn run_pool(
    parallel: usize,
    python: Option<&str>,
    next_trial: impl Fn(usize) -> Option<Trial> + Sync,
    ended: impl Fn(usize) + Sync,
) -> Vec<(Trial, Outcome)> {
    let next = AtomicUsize::new(0);
    let outcomes = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..parallel {
            scope.spawn(|| {
                while let Some(trial) = next_trial(next.fetch_add(1, Ordering::Relaxed)) {
                    let outcome = std::panic::catch_unwind(|| run_trial(trial, python))
                        .unwrap_or_else(|_| Outcome {
                            failure: Some("panicked".into()),
                            ..Default::default()
                        });
                    let mut outcomes = outcomes.lock().unwrap_or_else(PoisonError::into_inner);
                    outcomes.push((trial, outcome));
                    ended(outcomes.len());
                }
            });
        }
    });
    outcomes
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner)
}

/// Runs one trial; `python` is the test Python for trials with torch peers.
pub fn run_trial(trial: Trial, python: Option<&str>) -> Outcome {
    match try_trial(trial, python) {
        Ok(outcome) => outcome,
        Err(failure) => Outcome {
            leaks: Leaks::default(),
            failure: Some(failure),
        },
    }
}

fn try_trial(trial: Trial, python: Option<&str>) -> Result<Outcome, String> {
    // For the Rust producer, a child started from this test binary.
    super::build_manager_executable();
    let authkey = Authkey::random().map_err(|e| e.to_string())?;
    let root = tempfile::tempdir().map_err(|e| e.to_string())?;
    let tmp = root.path().join("tmp");
    let memmap_dir = root.path().join("memmap");
    for dir in [&tmp, &memmap_dir] {
        std::fs::create_dir(dir).map_err(|e| e.to_string())?;
    }
    let strategy = trial.strategy.name();
    let (mut command, address) = match trial.peers {
        Peers::RustToTorch => {
            Server::torch_echo_command(python.ok_or("no python")?, &authkey, strategy)
        }
        _ => {
            let (mut command, address) = Server::echo_command(&authkey, strategy);
            if trial.strategy == Strategy::Memmap {
                command.arg("--memmap-dir").arg(&memmap_dir);
            }
            (command, address)
        }
    };
    command.env("TMPDIR", &tmp).env_remove(IN_FLIGHT_WAIT_ENV);
    let mut server = Server::start(command, address);
    let rust_server = !matches!(trial.peers, Peers::RustToTorch);
    let server_fds = open_fds(server.pid());
    let mut producer = match trial.peers {
        Peers::TorchToRust | Peers::TorchFdToRust => {
            let shares = if trial.peers == Peers::TorchFdToRust {
                "file_descriptor"
            } else {
                strategy
            };
            torch_producer(
                python.ok_or("no python")?,
                shares,
                &server.address,
                &authkey,
                &tmp,
            )
        }
        _ => rust_producer(&server.address, &authkey, trial.strategy, &tmp, &memmap_dir),
    };
    let pids = [producer.id(), server.pid()];
    if let Err(failure) = wait_for_streaming(&mut producer) {
        let server_stderr = server.stop_and_read_stderr();
        kill_managers_of(&tmp, &pids);
        return Err(format!("{failure}; the server's stderr: {server_stderr}"));
    }
    std::thread::sleep(trial.delay);
    let mut managers = managers_of(&tmp, &pids);
    match trial.victim {
        Victim::Producer => kill_child(&mut producer),
        Victim::Server => kill_child(&mut server.child),
        Victim::Manager => kill_pids(&managers),
        Victim::Both => {
            kill_child(&mut producer);
            kill_child(&mut server.child);
        }
        Victim::All => {
            kill_child(&mut producer);
            kill_child(&mut server.child);
            kill_pids(&managers);
        }
    }
    let mut leaks = Leaks {
        left_for_gc: trial.leaves_work_for_gc(),
        ..Leaks::default()
    };
    if trial.victim == Victim::Manager {
        // Both peers survive their managers and stream on; an operator
        // then stops the server, and the producer ends as its server goes.
        std::thread::sleep(SURVIVORS_STREAM);
        terminate(server.pid());
    }
    // The survivors exit: a producer whose server died stops by itself; a
    // server whose producer died is stopped as an operator would, once it
    // has had time to close what the producer left it.
    let waited = wait_within(&mut producer, Duration::from_secs(30));
    if server
        .child
        .try_wait()
        .map_err(|e| e.to_string())?
        .is_none()
    {
        if rust_server && waited.is_ok() {
            let mut held = 0;
            wait_until(FD_SETTLE_LIMIT, || {
                held = open_fds(server.pid()).saturating_sub(server_fds + FD_SLACK);
                held == 0
            });
            leaks.fds = held;
        }
        terminate(server.pid());
        wait_within(&mut server.child, Duration::from_secs(30))?;
    }
    waited?;
    let (ours, torch): (Vec<u32>, Vec<u32>) = match trial.peers {
        Peers::RustToRust => (pids.to_vec(), Vec::new()),
        Peers::TorchToRust | Peers::TorchFdToRust => (vec![pids[1]], vec![pids[0]]),
        Peers::RustToTorch => (vec![pids[0]], vec![pids[1]]),
    };
    let places = TrialPlaces {
        ours: &ours,
        torch: &torch,
        tmp: &tmp,
        memmap_dir: &memmap_dir,
        torch_peer: trial.peers.needs_python(),
    };
    // Each look reads the environment of every process on the machine, for
    // each of the trials running at once: every 50 ms, not every 10.
    poll_until(CLEANUP_LIMIT, Duration::from_millis(50), || {
        managers.extend(managers_of(&tmp, &pids));
        managers.sort_unstable();
        managers.dedup();
        managers.retain(|&pid| is_alive(pid));
        places.look(&mut leaks);
        leaks.managers = managers.clone();
        !leaks.ours_left() && leaks.torch_shm.is_empty() && leaks.managers.is_empty()
    });
    // Counted; now out of the way of gc and of the next trials.
    kill_pids(&leaks.managers);
    places.reclaim(&mut leaks);
    Ok(Outcome {
        leaks,
        failure: None,
    })
}

/// SIGTERM, as an operator stops a server.
fn terminate(pid: u32) {
    send_signal(pid, Signal::SIGTERM);
}

/// Whether `pid` runs: a zombie is dead, its parent (init, for a daemon)
/// has yet to reap it.
fn is_alive(pid: u32) -> bool {
    !has_exited(pid)
}

/// The processes other than `peers` that run with `TMPDIR` set to `tmp`:
/// the shared-memory managers the peers launched (tensorshare's and
/// torch's inherit the environment).
fn managers_of(tmp: &Path, peers: &[u32]) -> Vec<u32> {
    let wanted = {
        let mut entry = b"TMPDIR=".to_vec();
        entry.extend_from_slice(tmp.as_os_str().as_encoded_bytes());
        entry
    };
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| !peers.contains(pid))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|environ| environ.split(|&b| b == 0).any(|entry| entry == wanted))
        })
        .filter(|&pid| is_alive(pid))
        .collect()
}

fn kill_managers_of(tmp: &Path, peers: &[u32]) {
    kill_pids(&managers_of(tmp, peers));
}

fn kill_pids(pids: &[u32]) {
    for &pid in pids {
        send_signal(pid, Signal::SIGKILL);
    }
}

/// Sends `signal` to `pid`; one that has gone meanwhile needs none.
fn send_signal(pid: u32, signal: Signal) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = kill(Pid::from_raw(pid), signal);
    }
}

fn kill_child(child: &mut Child) {
    let _ = child.kill();
}

fn wait_within(child: &mut Child, limit: Duration) -> Result<(), String> {
    if exit_within(child, limit).is_some() {
        return Ok(());
    }
    let _ = child.kill();
    let _ = child.wait();
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
        .env_remove(IN_FLIGHT_WAIT_ENV)
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

/// The running test binary again, as the Rust producer of
/// [`producer_role`]: each test binary that runs trials has a
/// `producer_role` child role that calls it.
fn rust_producer(
    address: &Address,
    authkey: &Authkey,
    strategy: Strategy,
    tmp: &Path,
    memmap_dir: &Path,
) -> Child {
    super::child_role("producer_role")
        .env("TMPDIR", tmp)
        .env_remove(IN_FLIGHT_WAIT_ENV)
        .env_remove(tensorshare::resource_sharer::SHARER_DIR_ENV)
        .env(
            PRODUCER_ENV,
            format!(
                "{address} {} {} {}",
                authkey.to_hex(),
                strategy.name(),
                memmap_dir.display()
            ),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the Rust producer")
}

/// The Rust producer, as [`PRODUCER_ENV`] says: streams tensors to the
/// echo server until it goes away, holding the last echoes. Half the
/// tensors live in this process's own `file_system` segments, half in
/// memfds, sent by the trial's strategy, so that under `file_system` both
/// processes create segments.
pub fn producer_role() {
    let setting = super::role_setting(PRODUCER_ENV);
    let mut fields = setting.splitn(4, ' ');
    let mut field = || fields.next().expect("ADDRESS HEX STRATEGY MEMMAP_DIR");
    let address: Address = field().parse().expect("address");
    let authkey = Authkey::from_hex(field()).expect("authkey");
    let strategy = Strategy::from_name(field()).expect("strategy");
    let memmap_dir = PathBuf::from(field());
    let sharing = SharingContext::new(authkey)
        .with_strategy(strategy.kind())
        .with_memmap_dir(&memmap_dir)
        .expect("memmap dir");
    let Ok(mut connection) = sharing.connect(&address) else {
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
        if connection.send(&Value::Tensor(tensor)).is_err() {
            return;
        }
        let Ok(echo) = connection.recv() else {
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
