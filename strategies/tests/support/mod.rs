//! Helpers shared by the integration tests: re-running this test binary as a
//! child process, counting this process's fds and mappings, and a
//! `file_system` strategy that needs no manager daemon.

// Each test crate includes this module and uses a subset of it.
#![allow(dead_code)]

use std::io::Read;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

use tensorshare_strategies::file_system::FileSystemStrategy;
use tensorshare_strategies::services::shm_manager::{self, ManagerServer, ServeOptions};

/// Set in a child process started by [`spawn_self`]: the test that runs there
/// plays its child role.
const CHILD_ENV: &str = "TENSORSHARE_TEST_CHILD_ROLE";

/// Printed by a child role that ran to the end; proves the child ran the
/// test asked for, not zero tests.
pub const CHILD_DONE: &str = "tensorshare-test-child-role-done";

/// Whether this process is a child started by [`spawn_self`].
pub fn is_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// Checks that this process is a child started by [`spawn_self`], for a
/// child role: an ignored test, which the suite never runs by itself, and
/// which fails when run by hand, checking nothing on its own.
pub fn expect_child() {
    assert!(
        is_child(),
        "a child role, which a test runs in a process of its own with its settings"
    );
}

/// Starts this test binary again as a real process running only the test
/// `test_name` (its full path inside the test crate), with extra `env`:
/// a test that runs itself in a child, or an ignored child role.
pub fn spawn_self(test_name: &str, env: &[(&str, &str)]) -> Child {
    let exe = std::env::current_exe().expect("path of the test binary");
    Command::new(exe)
        .args([
            "--include-ignored",
            test_name,
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the test binary as a child")
}

/// Waits for `child` and asserts it succeeded and ran its role to the end.
pub fn expect_child_success(child: Child) -> Output {
    let output = child.wait_with_output().expect("wait for the child");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains(CHILD_DONE),
        "child failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status
    );
    output
}

/// Runs `test_name` in a child process and asserts it succeeded.
pub fn run_self(test_name: &str) -> Output {
    expect_child_success(spawn_self(test_name, &[]))
}

/// Calls `attempt` until it returns `Some`, failing if `child` exits first
/// or a minute passes; the child's output is shown on failure.
pub fn wait_for<T>(child: &mut Child, mut attempt: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(value) = attempt() {
            return value;
        }
        let exited = child.try_wait().expect("poll the child");
        if exited.is_some() || Instant::now() > deadline {
            let _ = child.kill();
            let mut stdout = String::new();
            let mut stderr = String::new();
            if let Some(out) = child.stdout.as_mut() {
                let _ = out.read_to_string(&mut stdout);
            }
            if let Some(err) = child.stderr.as_mut() {
                let _ = err.read_to_string(&mut stderr);
            }
            panic!("child gave up ({exited:?}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// How many fds this process has open (the directory listing's own fd is
/// counted every time, so differences are exact).
pub fn open_fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("list /proc/self/fd")
        .count()
}

/// Waits up to ten seconds for the background threads of this process
/// (the crate's, such as the memmap sweep that the first file in a
/// directory starts) to end, so that counts of fds and mappings do
/// not catch one midway. A thread's stack stays mapped after it ends
/// (glibc keeps it for the next thread), so the count is stable after.
pub fn wait_for_background_threads() {
    let comm = |tid: &str| std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"));
    let this = nix::unistd::gettid().to_string();
    let own_name = comm(&this).expect("this thread's name");
    // The crate's threads by name, and threads this one just spawned, which
    // carry its name until they set their own: the arena a thread's first
    // allocation maps would otherwise be counted as a leak.
    let running = || {
        std::fs::read_dir("/proc/self/task")
            .expect("list /proc/self/task")
            .flatten()
            .filter_map(|task| task.file_name().into_string().ok())
            .filter(|tid| *tid != this)
            .filter(|tid| {
                comm(tid).is_ok_and(|name| name.starts_with("tensorshare-") || name == own_name)
            })
            .count()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while running() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "a tensorshare thread still runs after 10 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// How many memory mappings this process has.
pub fn mapping_count() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .expect("read /proc/self/maps")
        .lines()
        .count()
}

/// A `file_system` strategy registering with a manager served on a thread
/// of this process, at a socket under cargo's per-target scratch directory,
/// and made the process's own (the type-erased door uses it too), so no
/// daemon is started.
pub fn file_system_strategy() -> FileSystemStrategy {
    static MANAGER: Once = Once::new();
    MANAGER.call_once(|| {
        let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("manager-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let server = ManagerServer::bind(&path).expect("bind the test manager");
        let handle = server.handle().clone();
        let idle = Duration::from_secs(3600);
        // Named, so that waiting for background threads does not wait for it.
        std::thread::Builder::new()
            .name("test-shm-manager".into())
            .spawn(move || server.serve(ServeOptions::default().with_idle_timeout(idle)))
            .expect("start the test manager");
        let connection = shm_manager::connect(&handle).expect("connect to the test manager");
        shm_manager::set_own_manager(connection);
    });
    FileSystemStrategy::default()
}
