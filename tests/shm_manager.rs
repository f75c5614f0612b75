//! The shared-memory manager as real processes: `tensorshare manager` in the
//! foreground and as a daemon, `own_manager` starting one, a SIGKILLed
//! client's segment reclaimed, accept under fd exhaustion, and both
//! directions with stock torch: our client against `torch_shm_manager`, and
//! a torch process registering with our manager.

mod support;

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{ChildStderr, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::sys::mman::{shm_open, shm_unlink};
use nix::sys::stat::Mode;
use nix::unistd::ftruncate;
use tensorshare_strategies::file_system::SegmentName;
use tensorshare_strategies::services::shm_manager::{
    self, ALLOC_INFO_SIZE, AllocInfo, MANAGER_ENV, ManagerConnection, ManagerHandle,
};

use support::{ChildGuard, exit_within, has_exited, spawn_for_first_line, test_python, wait_until};

/// The `tensorshare` command.
fn bin() -> &'static str {
    support::tensorshare_exe().to_str().expect("a UTF-8 path")
}

/// Set for the re-executed test binary that plays a client to be killed.
const HELPER_MANAGER_ENV: &str = "TENSORSHARE_TEST_HELPER_MANAGER";

/// A POSIX shared-memory object made for a test, unlinked on drop.
struct ShmObject {
    name: SegmentName,
}

impl ShmObject {
    /// An empty object under a fresh torch-form name.
    fn create() -> Self {
        Self::create_named(SegmentName::fresh())
    }

    fn create_named(name: SegmentName) -> Self {
        drop(Self::open_new(&name));
        ShmObject { name }
    }

    /// Creates the object `name`, as torch does: `O_EXCL`, mode 0600.
    fn open_new(name: &SegmentName) -> OwnedFd {
        shm_open(
            name.as_str(),
            OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_RDWR,
            Mode::S_IRUSR | Mode::S_IWUSR,
        )
        .expect("create a shared-memory object")
    }

    /// A segment as torch's `file_system` strategy lays it out: a 64-byte
    /// header whose first 4 bytes are the reference count (1), then `data`.
    fn torch_segment(data: &[u8]) -> Self {
        let name = SegmentName::fresh();
        let fd = Self::open_new(&name);
        ftruncate(&fd, 64 + data.len() as i64).expect("size it");
        let file = File::from(fd);
        file.write_all_at(&1_i32.to_le_bytes(), 0).unwrap();
        file.write_all_at(data, 64).unwrap();
        ShmObject { name }
    }

    fn path(&self) -> PathBuf {
        Path::new("/dev/shm").join(self.name.file_name())
    }

    fn exists(&self) -> bool {
        self.path().exists()
    }

    fn refcount(&self) -> i32 {
        let mut count = [0u8; 4];
        File::open(self.path())
            .unwrap()
            .read_exact_at(&mut count, 0)
            .unwrap();
        i32::from_le_bytes(count)
    }
}

impl Drop for ShmObject {
    fn drop(&mut self) {
        let _ = shm_unlink(self.name.as_str());
    }
}

/// `tensorshare manager` in the foreground, killed on drop.
struct ForegroundManager {
    child: ChildGuard,
    handle: ManagerHandle,
    stderr: Option<ChildStderr>,
}

impl ForegroundManager {
    fn start(args: &[&str]) -> Self {
        let mut command = Command::new(bin());
        command.arg("manager").args(args);
        Self::start_command(command)
    }

    fn start_command(mut command: Command) -> Self {
        let (mut child, line) = spawn_for_first_line(&mut command, "tensorshare manager");
        let stderr = child.stderr.take();
        let handle = ManagerHandle::from_bytes(line.as_bytes())
            .unwrap_or_else(|e| panic!("first line {line:?}: {e}"));
        ForegroundManager {
            child: ChildGuard(child),
            handle,
            stderr,
        }
    }

    fn pid(&self) -> u32 {
        self.child.pid()
    }

    fn is_running(&mut self) -> bool {
        self.child.0.try_wait().unwrap().is_none()
    }

    /// Waits up to `limit` for it to exit; its status and stderr.
    fn wait_exit(&mut self, limit: Duration) -> (std::process::ExitStatus, String) {
        let status = exit_within(&mut self.child.0, limit)
            .unwrap_or_else(|| panic!("the manager did not exit within {limit:?}"));
        let mut stderr = String::new();
        if let Some(mut pipe) = self.stderr.take() {
            pipe.read_to_string(&mut stderr).unwrap();
        }
        (status, stderr)
    }
}

/// The pid of the process listening at `handle` (see
/// [`support::listener_pid`]).
fn server_pid(handle: &ManagerHandle) -> u32 {
    let path = handle.path();
    support::listener_pid(path).unwrap_or_else(|| panic!("nothing listens at {}", path.display()))
}

/// Fields of `/proc/PID/stat` after the command name: state is `[0]`, ppid
/// `[1]`, session `[3]`, utime `[11]`, stime `[12]`.
fn proc_stat(pid: u32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &text[text.rfind(')')? + 2..];
    Some(after_name.split(' ').map(str::to_owned).collect())
}

/// The client a test kills: registers one segment and waits.
#[test]
#[ignore = "a child role: start_helper_client runs it"]
fn helper_client_registering_a_segment() {
    let socket = support::role_setting(HELPER_MANAGER_ENV);
    let handle = ManagerHandle::from_bytes(socket.as_bytes()).unwrap();
    let segment = ShmObject::create();
    let manager = shm_manager::connect(&handle).unwrap();
    manager.register(&segment.name).unwrap();
    println!("registered {}", segment.name);
    std::io::stdout().flush().unwrap();
    // Left for the manager: this process is killed before it could unlink.
    std::mem::forget(segment);
    std::thread::sleep(Duration::from_secs(60));
}

/// This test binary, re-executed as a client that registers one segment
/// with `handle` and waits to be killed; and the segment's name.
fn start_helper_client(handle: &ManagerHandle) -> (ChildGuard, SegmentName) {
    let mut child = support::child_role("helper_client_registering_a_segment")
        .env(HELPER_MANAGER_ENV, handle.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("re-execute the test binary");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let name = loop {
        let line = lines
            .next()
            .expect("the helper exited before registering")
            .unwrap();
        // libtest may have printed `test NAME ... ` on the same line.
        if let Some((_, name)) = line.split_once("registered ") {
            break SegmentName::parse(name.as_bytes()).unwrap();
        }
    };
    (ChildGuard(child), name)
}

#[test]
fn a_daemon_outlives_its_launcher_and_reclaims_a_killed_clients_segment() {
    let launcher = Command::new(bin())
        .args(["manager", "--daemon", "--idle-timeout", "3"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tensorshare manager --daemon");
    let launcher_pid = launcher.id();
    // Both pipes reach end of file although the daemon lives on: it holds
    // none of them.
    let output = launcher.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    let handle = ManagerHandle::from_bytes(stdout.trim_end().as_bytes()).unwrap();
    assert_eq!(stdout.lines().count(), 1, "{stdout:?}");
    // A client keeps the daemon from its idle exit while it is looked at,
    // however slow this machine is to start the helper below. Had the
    // daemon held the launcher's pipes, they would have closed only at
    // that exit, and there would be nothing to connect to.
    let keeper = ManagerConnection::open(&handle)
        .unwrap_or_else(|e| panic!("the daemon outlives its launcher's pipes: {e}"));

    let daemon = server_pid(&handle);
    assert_ne!(daemon, launcher_pid);
    let stat = proc_stat(daemon).expect("the daemon runs");
    assert_eq!(
        stat[3],
        daemon.to_string(),
        "not a session leader: {stat:?}"
    );
    assert_ne!(stat[1], std::process::id().to_string());
    for fd in 0..3 {
        let target = std::fs::read_link(format!("/proc/{daemon}/fd/{fd}")).unwrap();
        assert_eq!(target, Path::new("/dev/null"), "fd {fd}");
    }

    let (mut client, name) = start_helper_client(&handle);
    drop(keeper);
    let segment = ShmObject { name };
    assert!(segment.exists());
    client.0.kill().unwrap();
    client.0.wait().unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || !segment.exists()),
        "the daemon kept the killed client's segment"
    );
    assert!(
        wait_until(Duration::from_secs(10), || has_exited(daemon)),
        "the daemon did not exit once idle"
    );
    assert!(!handle.path().exists());
    assert!(!handle.path().parent().unwrap().exists());
}

#[test]
fn own_manager_starts_one_daemon_per_process() {
    support::build_manager_executable();
    let threads: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(shm_manager::own_manager))
        .collect();
    let connections: Vec<Arc<ManagerConnection>> = threads
        .into_iter()
        .map(|t| t.join().unwrap().unwrap_or_else(|e| panic!("{e}")))
        .collect();
    assert!(connections.windows(2).all(|w| Arc::ptr_eq(&w[0], &w[1])));
    let manager = &connections[0];
    assert!(Arc::ptr_eq(manager, &shm_manager::own_manager().unwrap()));
    assert!(Arc::ptr_eq(
        manager,
        &shm_manager::connect(&manager.handle()).unwrap()
    ));

    let segment = ShmObject::create();
    manager.register(&segment.name).unwrap();
    // Our own daemon says so in answer to the first registration: the
    // registrations after it are not waited for.
    assert!(manager.pipelines_registrations());
    manager.unregister(&segment.name);

    if std::env::var_os(MANAGER_ENV).is_none() {
        let handle = manager.handle();
        let dir = handle.path().parent().unwrap();
        let dir_name = dir.file_name().unwrap().to_string_lossy().into_owned();
        assert!(dir_name.starts_with("tensorshare-shm-"), "{dir_name}");
        let daemon = server_pid(&handle);
        assert_ne!(daemon, std::process::id());
        assert_ne!(
            proc_stat(daemon).unwrap()[1],
            std::process::id().to_string()
        );
        // This test binary run again, its constructor serving before `main`.
        use std::os::unix::fs::MetadataExt;
        let exe_of = |pid: &str| std::fs::metadata(format!("/proc/{pid}/exe")).unwrap();
        let (running, this) = (exe_of(&daemon.to_string()), exe_of("self"));
        assert_eq!((running.dev(), running.ino()), (this.dev(), this.ino()));
        let cmdline = std::fs::read(format!("/proc/{daemon}/cmdline")).unwrap();
        assert_eq!(cmdline, b"tensorshare\0manager\0--daemon\0");
        // The launching process was reaped: no zombie `tensorshare` child
        // stays (other tests' children may be zombies for a moment).
        let me = std::process::id().to_string();
        let zombie_children = || {
            std::fs::read_dir("/proc")
                .unwrap()
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter(|pid| {
                    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"));
                    proc_stat(*pid).is_some_and(|f| f[1] == me && f[0] == "Z")
                        && comm.is_ok_and(|c| c.trim_end() == "tensorshare")
                })
                .collect::<Vec<_>>()
        };
        assert!(
            wait_until(Duration::from_secs(2), || zombie_children().is_empty()),
            "zombie children: {:?}",
            zombie_children()
        );
    }
}

#[test]
fn a_manager_of_another_user_is_refused_even_by_root() {
    let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .find(|path| Path::new(path).exists());
    let (true, Some(setpriv)) = (nix::unistd::geteuid().is_root(), setpriv) else {
        // Through the handle, not eprintln!, so that test capture does not hide it.
        let _ = std::io::stderr().write_all(
            b"SKIPPED: a_manager_of_another_user_is_refused_even_by_root needs root and setpriv\n",
        );
        return;
    };
    const NOBODY: u32 = 65534;
    // A directory the other user may create its socket in.
    let dir = tempfile::Builder::new()
        .prefix("tensorshare-foreign-manager")
        .tempdir_in("/tmp")
        .unwrap();
    std::os::unix::fs::chown(dir.path(), Some(NOBODY), Some(NOBODY)).unwrap();
    let socket = dir.path().join("manager.sock");
    let mut command = Command::new(setpriv);
    command
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            bin(),
            "manager",
        ])
        .arg("--socket")
        .arg(&socket)
        .args(["--idle-timeout", "30"]);
    let manager = ForegroundManager::start_command(command);

    // As a handle in a message would name it: refused, though root could
    // connect and register.
    let err = ManagerConnection::open(&manager.handle).expect_err("another user's manager");
    let shm_manager::ManagerError::ForeignManager { owner, this, .. } = &err else {
        panic!("expected ForeignManager, got {err:?}");
    };
    assert_eq!(owner, &tensorshare_strategies::UnixUser::of(NOBODY));
    assert_eq!(this.uid, 0);
    let message = err.to_string();
    assert!(
        message.contains(&format!("is served by {owner}")),
        "{message}"
    );
    assert!(message.contains("reject the message"), "{message}");
}

#[test]
fn a_foreground_manager_logs_garbage_serves_on_and_stops_on_sigterm() {
    let mut manager = ForegroundManager::start(&["--idle-timeout", "30"]);
    let segment = ShmObject::create();
    let keeper = ManagerConnection::open(&manager.handle).unwrap();
    keeper.register(&segment.name).unwrap();

    let mut garbage = UnixStream::connect(manager.handle.path()).unwrap();
    garbage.write_all(&[0xff; ALLOC_INFO_SIZE]).unwrap();
    let mut rest = Vec::new();
    garbage
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert_eq!(garbage.read_to_end(&mut rest).unwrap(), 0, "not closed");
    keeper.register(&segment.name).unwrap();

    let status = Command::new("kill")
        .args(["-TERM", &manager.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let (status, stderr) = manager.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "{status}: {stderr}");
    assert!(stderr.contains("disconnected a client"), "{stderr}");
    assert!(stderr.contains("no NUL-terminated name"), "{stderr}");
    assert!(stderr.contains("stopped by signal"), "{stderr}");
    assert!(stderr.contains("unlinked 1 segment"), "{stderr}");
    assert!(!segment.exists());
    assert!(!manager.handle.path().exists());
}

#[test]
fn a_manager_out_of_fds_backs_off_and_serves_everyone_later() {
    // Few enough fds that most clients wait in the backlog.
    let mut command = Command::new("sh");
    command.args([
        "-c",
        "ulimit -n 12 && exec \"$0\" manager --idle-timeout 1",
        bin(),
    ]);
    let mut manager = ForegroundManager::start_command(command);
    let names: Vec<SegmentName> = (0..10).map(|_| SegmentName::fresh()).collect();
    let mut clients: Vec<UnixStream> = names
        .iter()
        .map(|name| {
            let mut stream = UnixStream::connect(manager.handle.path()).unwrap();
            stream
                .write_all(&AllocInfo::register(name.clone()).encode())
                .unwrap();
            stream
        })
        .collect();
    let answered = |stream: &mut UnixStream, wait: Duration| {
        stream.set_read_timeout(Some(wait)).unwrap();
        let mut reply = [0u8; 2];
        match stream.read_exact(&mut reply) {
            Ok(()) => {
                assert_eq!(&reply, b"OK");
                true
            }
            Err(_) => false,
        }
    };
    let served: Vec<bool> = clients
        .iter_mut()
        .map(|s| answered(s, Duration::from_millis(300)))
        .collect();
    let first = served.iter().filter(|s| **s).count();
    assert!(
        first >= 1 && first < clients.len(),
        "{first} of {} served",
        clients.len()
    );

    // Out of fds with connections queued: it must not spin.
    let ticks = |pid| {
        let stat = proc_stat(pid).unwrap();
        stat[11].parse::<u64>().unwrap() + stat[12].parse::<u64>().unwrap()
    };
    let before = ticks(manager.pid());
    std::thread::sleep(Duration::from_secs(1));
    let used = ticks(manager.pid()) - before;
    assert!(
        used < 30,
        "the manager used {used} ticks in 1 s while stuck"
    );

    // Hanging up the served clients frees fds: the rest get their OK.
    let mut waiting: Vec<UnixStream> = clients
        .drain(..)
        .zip(served)
        .filter_map(|(stream, served)| (!served).then_some(stream))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !waiting.is_empty() {
        assert!(
            Instant::now() < deadline,
            "{} clients never served",
            waiting.len()
        );
        // Answered streams are dropped, making room for the next.
        waiting.retain_mut(|stream| !answered(stream, Duration::from_millis(200)));
    }
    let (status, stderr) = manager.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "{status}: {stderr}");
    assert!(
        stderr.contains("cannot accept a client (EMFILE"),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("cannot accept").count(),
        1,
        "logged more than once: {stderr}"
    );
    assert!(stderr.contains("10 registrations"), "{stderr}");
}

/// The path of the pinned torch's `torch_shm_manager`.
fn torch_shm_manager(python: &str) -> String {
    let output = Command::new(python)
        .args([
            "-c",
            "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'bin', \
             'torch_shm_manager'))",
        ])
        .output()
        .expect("run the test python");
    support::expect_success(&output, "finding torch_shm_manager")
        .trim_end()
        .to_owned()
}

#[test]
fn our_client_registers_with_torchs_own_manager() {
    let Some(python) = test_python("our_client_registers_with_torchs_own_manager") else {
        return;
    };
    let exe = torch_shm_manager(&python);
    let (child, line) = spawn_for_first_line(&mut Command::new(&exe), "torch_shm_manager");
    let mut torch = ChildGuard(child);
    assert!(line.contains("torch-shm-dir-"), "{line}");
    let handle = ManagerHandle::from_bytes(line.as_bytes()).unwrap();

    let kept = ShmObject::create();
    let freed = ShmObject::create();
    let connection = ManagerConnection::open(&handle).unwrap();
    // torch reads exactly sizeof(AllocInfo) per message and answers each
    // registration: three in a row, each confirmed, show the size matches.
    connection.register(&kept.name).unwrap();
    // torch's manager ignored the probe that came with the first
    // registration (a free of a name no segment has) and answered `OK`:
    // every registration stays answered, so it is never left owing a
    // reply it would die of (SIGPIPE) when this client closes.
    assert!(!connection.pipelines_registrations());
    connection.register(&freed.name).unwrap();
    connection.register(&kept.name).unwrap();
    assert!(!connection.pipelines_registrations());
    // A free of an object that still exists: torch keeps the name.
    connection.unregister(&freed.name);
    drop(connection);

    let status =
        exit_within(&mut torch.0, Duration::from_secs(10)).expect("torch_shm_manager did not exit");
    let mut stderr = String::new();
    torch
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(status.success(), "torch_shm_manager: {status}: {stderr}");
    // It unlinked exactly the names we sent: the name sits at offset 5.
    assert!(!kept.exists(), "torch did not unlink {}", kept.name);
    assert!(!freed.exists(), "torch did not unlink {}", freed.name);
    assert!(!handle.path().exists());
}

/// Runs `script` in the test python with the manager handle and segment
/// name as arguments, and waits for its first line.
fn start_torch(
    python: &str,
    script: &str,
    handle: &ManagerHandle,
    segment: &ShmObject,
) -> ChildGuard {
    let (mut child, line) = spawn_for_first_line(
        Command::new(python)
            .args(["-c", script])
            .arg(handle.path())
            .arg(segment.name.as_str()),
        "the test python",
    );
    if line != "ready" {
        let _ = child.kill();
        let output = child.wait_with_output().unwrap();
        panic!(
            "the torch process failed ({line:?}): {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    ChildGuard(child)
}

#[test]
fn a_torch_process_registers_with_our_manager_and_a_sigkill_loses_its_segment() {
    let Some(python) =
        test_python("a_torch_process_registers_with_our_manager_and_a_sigkill_loses_its_segment")
    else {
        return;
    };
    let mut manager = ForegroundManager::start(&["--idle-timeout", "1"]);
    // Keeps the manager from idling out while torch imports, and shows that
    // the segment goes without the manager exiting.
    let keeper = ManagerConnection::open(&manager.handle).unwrap();
    let data: Vec<u8> = (0..32).collect();
    let segment = ShmObject::torch_segment(&data);
    let script = r#"
import sys, time, torch
from torch.multiprocessing.reductions import rebuild_storage_filename
manager, name = sys.argv[1].encode(), sys.argv[2].encode()
storage = rebuild_storage_filename(torch.UntypedStorage, manager, name, 32)
assert bytes(storage) == bytes(range(32)), bytes(storage)
print("ready", flush=True)
time.sleep(60)
"#;
    let mut torch = start_torch(&python, script, &manager.handle, &segment);
    // torch mapped it (+1) and dropped the message's count (-1).
    assert_eq!(segment.refcount(), 1);
    assert!(segment.exists());

    torch.0.kill().unwrap();
    torch.0.wait().unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || !segment.exists()),
        "the killed torch process's segment was kept"
    );
    assert!(manager.is_running(), "it should have gone without an exit");

    drop(keeper);
    let (status, stderr) = manager.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "{status}: {stderr}");
    assert!(stderr.contains("2 clients, 1 registration"), "{stderr}");
    assert!(stderr.contains("unlinked 1 segment"), "{stderr}");
}

#[test]
fn a_torch_process_that_frees_its_segment_tells_our_manager() {
    let Some(python) = test_python("a_torch_process_that_frees_its_segment_tells_our_manager")
    else {
        return;
    };
    let mut manager = ForegroundManager::start(&["--idle-timeout", "1"]);
    let keeper = ManagerConnection::open(&manager.handle).unwrap();
    let segment = ShmObject::torch_segment(&[7; 16]);
    let script = r#"
import gc, sys, time, torch
from torch.multiprocessing.reductions import rebuild_storage_filename
manager, name = sys.argv[1].encode(), sys.argv[2].encode()
storage = rebuild_storage_filename(torch.UntypedStorage, manager, name, 16)
del storage
gc.collect()
print("ready", flush=True)
time.sleep(60)
"#;
    let mut torch = start_torch(&python, script, &manager.handle, &segment);
    // The count went to 0 in torch, which unlinked the name and then sent
    // its free.
    assert!(!segment.exists());
    // Two round trips on another connection: the manager has handled the
    // free by the second OK.
    let barrier = SegmentName::fresh();
    keeper.register(&barrier).unwrap();
    keeper.register(&barrier).unwrap();
    // A new object under that name is not the manager's any more.
    let reborn = ShmObject::create_named(segment.name.clone());
    std::mem::forget(segment);

    torch.0.kill().unwrap();
    torch.0.wait().unwrap();
    drop(keeper);
    let (status, stderr) = manager.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "{status}: {stderr}");
    assert!(
        reborn.exists(),
        "the manager unlinked a name torch had freed: {stderr}"
    );
    assert!(stderr.contains("unlinked 0 segments"), "{stderr}");
}
