//! A process whose own shared-memory manager is SIGKILLed: its connection
//! notices, starts a new manager, registers its segments there and removes
//! the dead manager's socket directory, so that a SIGKILL of the process
//! later still leaves nothing in `/dev/shm` or its `TMPDIR`.

mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use tensorshare_strategies::SharingStrategy;
use tensorshare_strategies::file_system::{FileSystemStrategy, SegmentName};
use tensorshare_strategies::services::shm_manager::{MANAGER_ENV, ManagerHandle, own_manager};

use support::{ChildGuard, listener_pid, tree, wait_until};

/// Set in the re-executed test binary that holds segments.
const HOLDER_ENV: &str = "TENSORSHARE_TEST_TAKEOVER_HOLDER";

/// How long the leftovers of a killed process may take to go: the
/// manager's 2 s grace, then its 2 s idle exit, on a loaded machine.
const CLEANUP_LIMIT: Duration = Duration::from_secs(15);

/// The holder: three segments held, and one whose message was lost (its
/// count stays above zero with no holder: only a manager reclaims it).
/// Prints `holding HANDLE NAME...` and waits to be killed.
#[test]
fn holder_role() {
    if std::env::var_os(HOLDER_ENV).is_none() {
        return;
    }
    let strategy = FileSystemStrategy::default();
    let held: Vec<_> = (0..3)
        .map(|_| strategy.allocate(4096).expect("allocate"))
        .collect();
    let lost = strategy.allocate(4096).expect("allocate");
    let (_, lost_name) = strategy.export(&lost).expect("export").into_parts();
    drop(lost);
    let handle = own_manager().expect("the own manager").handle();
    let names: Vec<String> = held
        .iter()
        .map(|segment| segment.name().to_string())
        .chain([lost_name.to_string()])
        .collect();
    println!("holding {} {}", handle, names.join(" "));
    std::thread::sleep(Duration::from_secs(600));
}

fn segment_exists(name: &SegmentName) -> bool {
    Path::new("/dev/shm").join(name.file_name()).exists()
}

/// The manager directories in `tmp`.
fn manager_dirs(tmp: &Path) -> Vec<PathBuf> {
    tree(tmp)
        .into_iter()
        .filter(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("tensorshare-shm-"))
        })
        .collect()
}

#[test]
fn a_process_whose_manager_was_killed_still_leaves_nothing_when_killed() {
    if std::env::var_os(HOLDER_ENV).is_some() {
        return;
    }
    support::build_manager_executable();
    let tmp = tempfile::tempdir().expect("a TMPDIR");
    let mut holder = ChildGuard(
        Command::new(std::env::current_exe().expect("the test binary"))
            .args(["--exact", "holder_role", "--nocapture", "--test-threads=1"])
            .env(HOLDER_ENV, "1")
            .env("TMPDIR", tmp.path())
            .env_remove(MANAGER_ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the holder"),
    );
    let stdout = holder.0.stdout.take().expect("stdout piped");
    // libtest may have printed `test holder_role ... ` on the same line.
    let line = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|line| Some(line.split_once("holding ")?.1.to_owned()))
        .expect("the holder exited before holding");
    let mut fields = line.split(' ');
    let handle = ManagerHandle::from_path(fields.next().expect("a handle")).expect("a handle");
    let names: Vec<SegmentName> = fields
        .map(|name| SegmentName::parse(name.as_bytes()).expect("a segment name"))
        .collect();
    assert_eq!(names.len(), 4);
    let dead_dir = handle.path().parent().expect("a directory").to_owned();

    let manager = listener_pid(handle.path()).expect("the holder's manager listens");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(manager as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("SIGKILL the manager");
    assert!(
        wait_until(Duration::from_secs(10), || !dead_dir.exists()
            && manager_dirs(tmp.path()).len() == 1),
        "the holder did not take over: {:?}",
        tree(tmp.path())
    );
    assert!(
        names.iter().all(segment_exists),
        "a segment went with its manager"
    );

    holder.0.kill().expect("SIGKILL the holder");
    holder.0.wait().expect("reap the holder");
    assert!(
        wait_until(CLEANUP_LIMIT, || !names.iter().any(segment_exists)),
        "left in /dev/shm: {:?}",
        names
            .iter()
            .filter(|name| segment_exists(name))
            .collect::<Vec<_>>()
    );
    assert!(
        wait_until(CLEANUP_LIMIT, || tree(tmp.path()).is_empty()),
        "left in TMPDIR: {:?}",
        tree(tmp.path())
    );
}
