//! What the integration tests share: finding the test Python, running
//! `tensorshare` servers, looking at another process's fds and mappings.
#![allow(dead_code)] // each test binary uses its own part of this

pub mod cases;
pub mod kill_trials;
pub mod leftovers;
pub mod netns;
pub mod process_counts;
mod processes;
pub mod refusals;
mod test_python;

#[allow(unused_imports)] // each test binary uses its own part of this
pub use processes::{
    bound_abstract_names, child_role, child_role_args, eventually, expect_success, hex, open_fds,
    poll_until, role_setting, unhex, wait_until,
};
#[allow(unused_imports)] // each test binary uses its own part of this
pub use test_python::{interop_required, test_python};

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use tensorshare::Authkey;
use tensorshare::connection::Address;

/// The `tensorshare` command, built on first use.
///
/// The command belongs to the `tensorshare-cli` package, so cargo neither
/// builds it for this package's tests nor names it to them
/// (`CARGO_BIN_EXE_tensorshare`): the first call builds it, with the
/// profile and into the target directory of this test binary
/// (`<target>/<profile>/deps/<test>`), so that it is never older than the
/// library under test; when it is up to date the build does nothing.
/// `cargo test --workspace` does not build it either (the CLI package has
/// no integration tests), so a test that needs it, or makes a
/// `file_system` storage, calls this first rather than relying on another
/// test binary having run before. It lands where the library looks for
/// the shared-memory manager's executable, next to `deps/`.
pub fn tensorshare_exe() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| build_program("tensorshare-cli", "tensorshare"))
}

/// Builds the `tensorshare` command ([`tensorshare_exe`]) where the
/// `file_system` strategy looks for its shared-memory manager's
/// executable: next to this test binary's `deps/` directory. Call it before
/// this process, or a child started from this test binary, makes a
/// `file_system` storage.
pub fn build_manager_executable() {
    tensorshare_exe();
}

/// Runs `tensorshare gc` with `args` over an empty directory in place of
/// `/dev/shm`, for a test about socket directories or memmap files: the
/// orphan segments that tests running beside it make on purpose are
/// theirs to reclaim.
pub fn gc_without_segments(args: impl IntoIterator<Item = impl AsRef<OsStr>>) -> Output {
    let no_segments = tempfile::tempdir().expect("an empty shm directory");
    Command::new(tensorshare_exe())
        .arg("gc")
        .args(args)
        .arg("--shm-dir")
        .arg(no_segments.path())
        .stdin(Stdio::null())
        .output()
        .expect("run tensorshare gc")
}

/// The benchmarks' program, `tensorshare-bench` (package
/// `tensorshare-bench`), built on first use as [`tensorshare_exe`] builds
/// the command, into the same directory: its `--workload tcp` and
/// `--workload files` find the command there, beside it, once
/// [`tensorshare_exe`] has built it.
pub fn bench_exe() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| build_program("tensorshare-bench", "tensorshare-bench"))
}

/// Builds the binary `bin` of the workspace's `package` as
/// [`tensorshare_exe`] says and returns its path.
fn build_program(package: &str, bin: &str) -> PathBuf {
    let test_exe = std::env::current_exe().expect("the path of this test binary");
    let profile_dir = test_exe
        .parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| panic!("{} is not in <target>/<profile>/deps", test_exe.display()));
    let profile = profile_dir
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or_else(|| panic!("no profile directory above {}", test_exe.display()));
    let target_dir = profile_dir
        .parent()
        .unwrap_or_else(|| panic!("no target directory above {}", profile_dir.display()));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let mut command = Command::new(&cargo);
    command
        .args(["build", "--quiet", "--locked", "-p", package])
        .args(["--bin", bin, "--manifest-path"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir);
    match profile {
        "debug" => {}
        "release" => {
            command.arg("--release");
        }
        other => {
            command.args(["--profile", other]);
        }
    }
    let status = command
        .stdin(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", Path::new(&cargo).display()));
    assert!(
        status.success(),
        "building {bin} failed ({status}): {command:?}; \
         its errors are above, or run `cargo build -p {package}` to see them"
    );
    let exe = profile_dir.join(bin);
    assert!(
        exe.is_file(),
        "{command:?} succeeded but left no {}",
        exe.display()
    );
    exe
}

/// A stock Python peer that connects to `address` with `authkey` and reads
/// nothing until it is killed: a receiver that dies with messages unread.
pub fn silent_receiver(
    python: &str,
    address: &tensorshare::connection::Address,
    authkey: &tensorshare::Authkey,
) -> Child {
    Command::new(python)
        .args([
            "-c",
            "import sys, time\n\
             from multiprocessing.connection import Client\n\
             conn = Client(sys.argv[1], authkey=bytes.fromhex(sys.argv[2]))\n\
             time.sleep(600)",
        ])
        .arg(address.to_string())
        .arg(authkey.to_hex())
        .spawn()
        .expect("start the silent receiver")
}

/// A [`silent_receiver`] of a listener of `sharing`, sent one 4 KiB tensor
/// it never reads: the receiver to kill, and the connection and listener,
/// kept open meanwhile as a sender that lives on keeps them.
pub struct UnreadMessage {
    pub receiver: Child,
    pub connection: tensorshare::Connection,
    pub listener: tensorshare::Listener,
}

impl UnreadMessage {
    /// Sends the tensor; returns what was sent, whose storage dies here
    /// when it is dropped.
    pub fn send(python: &str, sharing: &tensorshare::SharingContext) -> (Self, tensorshare::Value) {
        let listener = sharing.listen_in_private_dir().expect("listen");
        let receiver = silent_receiver(python, listener.address(), sharing.authkey());
        let mut connection = listener.accept().expect("accept the receiver");
        let tensor =
            tensorshare::Tensor::from_slice(sharing, &[7u8; 4096], &[4096]).expect("a tensor");
        let message = tensorshare::Value::from(tensor);
        connection.send(&message).expect("send");
        let unread = Self {
            receiver,
            connection,
            listener,
        };
        (unread, message)
    }

    /// Kills the receiver, with the message unread, and reaps it.
    pub fn kill_receiver(&mut self) {
        self.receiver.kill().expect("kill the receiver");
        self.receiver.wait().expect("reap the receiver");
    }
}

/// A script in `compat/python/`.
pub fn python_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("compat/python")
        .join(name)
}

/// A unique abstract socket address for this test process.
pub fn unique_address(tag: &str) -> Address {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("@tensorshare-test-{tag}-{}-{n}", std::process::id())
        .parse()
        .expect("valid abstract address")
}

/// A server process that prints `listening ADDRESS` once ready, killed on drop.
pub struct Server {
    pub child: Child,
    pub address: Address,
    stderr: Option<ChildStderr>,
}

impl Server {
    /// Starts `command` and waits for its `listening` line.
    pub fn start(mut command: Command, address: Address) -> Server {
        let (mut child, line) = spawn_for_first_line(&mut command, "the server");
        let stderr = child.stderr.take();
        let mut server = Server {
            child,
            address,
            stderr,
        };
        assert_eq!(
            line,
            format!("listening {}", server.address),
            "server did not start; stderr: {}",
            server.stop_and_read_stderr()
        );
        server
    }

    /// Starts `command`, which listens where its `listening ADDRESS` line
    /// says (a TCP port 0 it bound), and waits for that line.
    pub fn start_reporting(mut command: Command) -> Server {
        let (mut child, line) = spawn_for_first_line(&mut command, "the server");
        let stderr = child.stderr.take();
        let Some(address) = line.strip_prefix("listening ") else {
            let mut text = String::new();
            if let Some(mut stderr) = stderr {
                let _ = child.kill();
                let _ = stderr.read_to_string(&mut text);
            }
            panic!("server did not start: {line:?}; stderr: {text}");
        };
        let address = address.parse().expect("a listening address");
        Server {
            child,
            address,
            stderr,
        }
    }

    /// `tensorshare echo` on a fresh address.
    pub fn echo(authkey: &Authkey, strategy: &str) -> Server {
        let (command, address) = Server::echo_command(authkey, strategy);
        Server::start(command, address)
    }

    /// The command line of [`Server::echo`], to start with more settings,
    /// and the address it listens on.
    pub fn echo_command(authkey: &Authkey, strategy: &str) -> (Command, Address) {
        let address = unique_address("echo");
        let mut command = Command::new(tensorshare_exe());
        command.args([
            "echo",
            "--listen",
            &address.to_string(),
            "--authkey",
            &authkey.to_hex(),
            "--strategy",
            strategy,
        ]);
        command.env_remove(tensorshare::connection::AUTHKEY_ENV);
        command.env_remove(tensorshare::resource_sharer::SHARER_DIR_ENV);
        (command, address)
    }

    /// A stock-torch echo server (`echo_peer.py serve --strategy STRATEGY`)
    /// on a fresh address.
    pub fn torch_echo(python: &str, authkey: &Authkey, strategy: &str) -> Server {
        let (command, address) = Server::torch_echo_command(python, authkey, strategy);
        Server::start(command, address)
    }

    /// The command line of [`Server::torch_echo`], and the address it
    /// listens on.
    pub fn torch_echo_command(
        python: &str,
        authkey: &Authkey,
        strategy: &str,
    ) -> (Command, Address) {
        let address = unique_address("torch-echo");
        let mut command = Command::new(python);
        command
            .arg(python_script("echo_peer.py"))
            .args(["serve", "--strategy", strategy, "--address"])
            .arg(address.to_string())
            .args(["--authkey", &authkey.to_hex()]);
        (command, address)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A connection to the server whose values go through `sharing`,
    /// authenticated with its key.
    pub fn connect(&self, sharing: &tensorshare::SharingContext) -> tensorshare::Connection {
        sharing
            .connect(&self.address)
            .expect("connect to the server")
    }

    /// A byte-level connection to the server, authenticated with `authkey`.
    pub fn connect_bytes(&self, authkey: &Authkey) -> tensorshare::connection::Connection {
        tensorshare::connection::Client::connect(
            &self.address,
            authkey,
            tensorshare::connection::ConnectionOptions::default(),
        )
        .expect("connect to the server")
    }

    /// Sends `payload` on a new connection, then a plain message on the
    /// same one: fails unless the server answers the second and nothing
    /// else, as it must a message it refuses (`what` names it).
    pub fn expect_refused(&self, authkey: &Authkey, payload: &[u8], what: &str) {
        // pickle.dumps("next", protocol=2)
        let next = b"\x80\x02X\x04\x00\x00\x00nextq\x00.";
        let mut connection = self.connect_bytes(authkey);
        connection.send_bytes(payload).unwrap();
        connection.send_bytes(next).unwrap();
        connection
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let answer = connection
            .recv_bytes()
            .unwrap_or_else(|e| panic!("{what}: no echo of the next message: {e}"));
        let answer = tensorshare::Registry::default()
            .loads(&answer)
            .expect("a plain str");
        assert_eq!(
            answer.as_str(),
            Some("next"),
            "{what}: the server answered the refused message"
        );
    }

    /// Kills the server (if still running) and returns everything it wrote
    /// to stderr.
    pub fn stop_and_read_stderr(&mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.read_stderr()
    }

    /// Everything the (exited) server wrote to stderr.
    pub fn read_stderr(&mut self) -> String {
        let mut text = String::new();
        if let Some(mut stderr) = self.stderr.take() {
            let _ = stderr.read_to_string(&mut text);
        }
        text
    }

    /// Sends `signal` and waits up to `limit` for the process to exit.
    pub fn signal_and_wait(&mut self, signal: &str, limit: Duration) -> ExitStatus {
        let status = Command::new("kill")
            .args([format!("-{signal}"), self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} failed");
        exit_within(&mut self.child, limit).unwrap_or_else(|| panic!("server ignored SIG{signal}"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends every case of [`cases::echo_failures`] to `server` over
/// `connection` and asserts that each came back intact; a failure shows
/// the server's stderr, under `what`.
pub fn assert_echoes_intact(
    server: &mut Server,
    connection: &mut tensorshare::Connection,
    what: &str,
) {
    let failures = cases::echo_failures(connection);
    assert!(
        failures.is_empty(),
        "{what}: {failures:#?}\nserver stderr: {}",
        server.stop_and_read_stderr()
    );
}

/// How `child` exited, waiting up to `limit`; `None` if it still runs.
pub fn exit_within(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let mut status = None;
    wait_until(limit, || {
        status = child.try_wait().expect("wait for a child");
        status.is_some()
    });
    status
}

/// Runs `command` to the end, as `Command::output` does, but kills it
/// after `limit`: a server that should have refused its arguments must
/// not hang the test.
pub fn output_within(command: &mut Command, limit: Duration) -> std::process::Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the command");
    if exit_within(&mut child, limit).is_none() {
        let _ = child.kill();
    }
    child.wait_with_output().expect("wait for the command")
}

/// Whether `pid` has exited (gone, or a zombie whose files are closed).
pub fn has_exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) state ...`
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, tail)| tail.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
        Err(_) => true,
    }
}

/// A child process, killed and reaped on drop.
pub struct ChildGuard(pub Child);

impl ChildGuard {
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `command` with stdin closed and stdout and stderr piped, and
/// reads the first line it prints (without its line end); `what` names it
/// in failures.
pub fn spawn_for_first_line(command: &mut Command, what: &str) -> (Child, String) {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {what}: {e}"));
    let stdout = child.stdout.take().expect("stdout piped");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .unwrap_or_else(|e| panic!("read the first line of {what}: {e}"));
    line.truncate(line.trim_end().len());
    (child, line)
}

/// How many shared-memory mappings (memfds and /dev/shm files) `pid` has.
pub fn shared_mappings(pid: u32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .expect("read /proc/PID/maps")
        .lines()
        .filter(|line| line.contains("/memfd:") || line.contains("/dev/shm/"))
        .count()
}

/// Waits up to five seconds for every fd `sharing` sent to be fetched or
/// given back (receivers that got them attached give keys back in batches),
/// and returns how many are still waiting.
pub fn settle_unfetched(sharing: &tensorshare::SharingContext) -> usize {
    let mut waiting = 0;
    wait_until(Duration::from_secs(5), || {
        waiting = sharing.unfetched_shares();
        waiting == 0
    });
    waiting
}

/// The two ends of a connection within this process, over a socket pair
/// that no handshake guards: the first sends and receives values through
/// `left`, the second through `right`.
pub fn connection_pair(
    left: &tensorshare::SharingContext,
    right: &tensorshare::SharingContext,
) -> (tensorshare::Connection, tensorshare::Connection) {
    let (a, b) = raw_connection_pair();
    (
        tensorshare::Connection::new(a, left).expect("an unauthenticated end binds to any context"),
        tensorshare::Connection::new(b, right)
            .expect("an unauthenticated end binds to any context"),
    )
}

/// The two byte-level ends of a connection within this process, over a
/// socket pair that no handshake guards.
pub fn raw_connection_pair() -> (
    tensorshare::connection::Connection,
    tensorshare::connection::Connection,
) {
    let (a, b) = std::os::unix::net::UnixStream::pair().expect("socket pair");
    let options = tensorshare::connection::ConnectionOptions::default();
    (
        tensorshare::connection::Connection::from_stream(a, options),
        tensorshare::connection::Connection::from_stream(b, options),
    )
}

/// What `python` prints running `script` with `args`, fed `stdin`; the run
/// must succeed (`what` names it in the failure).
pub fn python_output_for(
    python: &str,
    script: &str,
    args: &[&str],
    stdin: &[u8],
    what: &str,
) -> String {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new(python)
        .arg("-c")
        .arg(script)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start python");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin)
        .expect("write to python");
    let output = child.wait_with_output().expect("python exits");
    expect_success(&output, what)
}

/// The pid of the process holding the socket listening at `path`: its
/// inode from `/proc/net/unix`, then the process with an fd on it. (The
/// socket's peer credentials name the process that called `listen`, which
/// for a daemon is the launcher that forked it.) `None` when nothing
/// listens there.
pub fn listener_pid(path: &Path) -> Option<u32> {
    let path = path.to_str()?;
    let table = std::fs::read_to_string("/proc/net/unix").ok()?;
    let inode = table.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // Num RefCount Protocol Flags Type St Inode Path; flag 0x10000 is
        // __SO_ACCEPTCON, a listening socket.
        (fields.len() == 8 && fields[7] == path && fields[3] == "00010000")
            .then(|| fields[6].to_owned())
    })?;
    let link = format!("socket:[{inode}]");
    std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
                fds.filter_map(Result::ok).any(|fd| {
                    std::fs::read_link(fd.path()).is_ok_and(|t| t.as_os_str() == link.as_str())
                })
            })
        })
}

/// The entries of `dir`, sorted; `dir` must be readable.
pub fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read the directory")
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    files.sort();
    files
}

/// Every path under `dir`, depth first, `dir` itself left out.
pub fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        found.push(path.clone());
        if is_dir {
            found.extend(tree(&path));
        }
    }
    found
}

/// What stock torch loads from each of `paths` with `weights_only=True`,
/// one JSON value per file as `compat/python/describe_saved.py` prints it.
pub fn torch_describes(python: &str, paths: &[PathBuf]) -> Vec<serde_json::Value> {
    let output = Command::new(python)
        .arg(python_script("describe_saved.py"))
        .args(paths)
        .output()
        .expect("run describe_saved.py");
    expect_success(&output, "describe_saved.py")
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

/// The `/dev/shm` entries whose names say `pid` created them
/// (`torch_<pid>_...`: torch's `file_system` segments and ours).
pub fn segments_of(pid: u32) -> Vec<String> {
    let prefix = format!("torch_{pid}_");
    std::fs::read_dir("/dev/shm")
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .filter(|name| name.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// Runs `echo_peer.py drive` against `server` with `args` added, and
/// asserts that every case passed and none was skipped; returns what it
/// printed. torch's stderr goes to a file, not a pipe: torch's
/// shared-memory manager inherits it and may outlive the run while the
/// server is its client.
pub fn torch_drives(python: &str, server: &mut Server, authkey: &Authkey, args: &[&str]) -> String {
    let mut stderr = tempfile::tempfile().expect("a file for torch's stderr");
    let output = Command::new(python)
        .arg(python_script("echo_peer.py"))
        .arg("drive")
        .args(args)
        .arg("--address")
        .arg(server.address.to_string())
        .args(["--authkey", &authkey.to_hex()])
        .stderr(stderr.try_clone().expect("clone the file"))
        .output()
        .expect("run echo_peer.py drive");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        use std::io::Seek;
        let mut torch_stderr = String::new();
        let _ = stderr.rewind();
        let _ = stderr.read_to_string(&mut torch_stderr);
        panic!(
            "torch's checks of tensorshare echo failed:\n{stdout}\n{torch_stderr}\nserver stderr:\n{}",
            server.stop_and_read_stderr()
        );
    }
    assert!(!stdout.contains("skip "), "a case was skipped:\n{stdout}");
    assert!(stdout.contains(" cases passed, 0 failed"), "{stdout}");
    stdout
}

/// A storage of `nbytes` allocated through `sharing`, checked zero-filled,
/// then every byte `byte`.
pub fn allocated_filled(
    sharing: &tensorshare::SharingContext,
    nbytes: usize,
    byte: u8,
) -> tensorshare::model::Storage {
    let mut writer = sharing.allocate(nbytes).expect("allocate");
    assert!(
        writer.as_bytes_mut().iter().all(|&b| b == 0),
        "allocated bytes are zero"
    );
    writer.as_bytes_mut().fill(byte);
    writer.freeze()
}
