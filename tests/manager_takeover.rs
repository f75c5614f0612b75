//! A process whose own shared-memory manager is SIGKILLed: its connection
//! notices, starts a new manager, registers its segments there and removes
//! the dead manager's socket directory, so that a SIGKILL of the process
//! later still leaves nothing in `/dev/shm` or its `TMPDIR`; and one
//! that exits while the new manager is still starting, or while its
//! manager is dying, first hands its segments over to a live one.

mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use tensorshare_strategies::SharingStrategy;
use tensorshare_strategies::file_system::{FileSystemStrategy, SegmentName};
use tensorshare_strategies::services::shm_manager::{
    EXE_ENV, MANAGER_ENV, ManagerHandle, own_manager, settle_own_manager,
};

use support::{ChildGuard, listener_pid, tree, wait_until};

/// Set in the re-executed test binary that holds segments: `kill` to wait
/// to be killed, `exit` to exit in order once a line arrives on stdin.
const HOLDER_ENV: &str = "TENSORSHARE_TEST_TAKEOVER_HOLDER";

/// How long the leftovers of a killed process may take to go: the
/// manager's 2 s grace, then its 2 s idle exit, on a loaded machine.
const CLEANUP_LIMIT: Duration = Duration::from_secs(15);

/// The holder: three segments held, and one whose message was lost (its
/// count stays above zero with no holder: only a manager reclaims it).
/// Prints `holding HANDLE NAME...` and waits to be killed.
#[test]
#[ignore = "a child role: the takeover tests run it"]
fn holder_role() {
    let mode = support::role_setting(HOLDER_ENV);
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
    if mode == "exit" {
        let _ = std::io::stdin().lines().next();
        settle_own_manager().expect("a live manager");
        // As a server whose peers' threads still hold segments: no
        // destructor runs, and only a manager can unlink them.
        std::process::exit(0);
    }
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
    support::build_manager_executable();
    let tmp = tempfile::tempdir().expect("a TMPDIR");
    let mut command = holder_command(tmp.path(), "kill");
    let (mut holder, handle, names) = start_holder(command.stdin(Stdio::null()));
    let dead_dir = handle.path().parent().expect("a directory").to_owned();

    kill_manager(&handle);
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
    assert_nothing_left(tmp.path(), &names);
}

/// The replacement manager takes a second to start, and the holder exits
/// in order at once after its manager was killed: before the thread that
/// watches the manager has handed anything over.
#[test]
fn a_process_exiting_while_its_new_manager_starts_hands_its_segments_over() {
    let tmp = tempfile::tempdir().expect("a TMPDIR");
    let slow = tmp.path().join("slow-tensorshare");
    std::fs::write(
        &slow,
        format!(
            "#!/bin/sh\nsleep 1\nexec '{}' \"$@\"\n",
            support::tensorshare_exe().display()
        ),
    )
    .expect("write the slow launcher");
    std::fs::set_permissions(&slow, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("make it executable");
    let mut command = holder_command(tmp.path(), "exit");
    command.env(EXE_ENV, &slow).stdin(Stdio::piped());
    let (mut holder, handle, names) = start_holder(&mut command);
    kill_manager(&handle);
    std::io::Write::write_all(&mut holder.0.stdin.take().expect("stdin piped"), b"exit\n")
        .expect("tell the holder to exit");
    let status = holder.0.wait().expect("reap the holder");
    assert!(status.success(), "the holder failed: {status}");
    std::fs::remove_file(&slow).expect("remove the slow launcher");
    assert_nothing_left(tmp.path(), &names);
}

/// The holder exits in order while its manager is being killed but still
/// holds its sockets open (here: stopped, then killed while the holder
/// asks it whether it runs), as a manager SIGKILLed a moment ago on a
/// loaded machine does: its socket has not hung up yet, and only asking
/// tells.
#[test]
fn a_process_exiting_while_its_manager_dies_hands_its_segments_over() {
    let tmp = tempfile::tempdir().expect("a TMPDIR");
    let mut command = holder_command(tmp.path(), "exit");
    command.stdin(Stdio::piped());
    let (mut holder, handle, names) = start_holder(&mut command);
    let manager = listener_pid(handle.path()).expect("the holder's manager listens");
    let manager = nix::unistd::Pid::from_raw(manager as i32);
    nix::sys::signal::kill(manager, nix::sys::signal::Signal::SIGSTOP).expect("stop the manager");
    std::io::Write::write_all(&mut holder.0.stdin.take().expect("stdin piped"), b"exit\n")
        .expect("tell the holder to exit");
    std::thread::sleep(Duration::from_millis(300));
    kill_manager(&handle);
    let status = holder.0.wait().expect("reap the holder");
    assert!(status.success(), "the holder failed: {status}");
    assert_nothing_left(tmp.path(), &names);
}

/// The test binary as a holder of `mode` (see [`HOLDER_ENV`]) in `tmp`.
fn holder_command(tmp: &Path, mode: &str) -> Command {
    support::build_manager_executable();
    let mut command = support::child_role("holder_role");
    command
        .env(HOLDER_ENV, mode)
        .env("TMPDIR", tmp)
        .env_remove(MANAGER_ENV)
        .env_remove(EXE_ENV)
        .stdout(Stdio::piped());
    command
}

/// Starts the holder and reads its manager and segment names.
fn start_holder(command: &mut Command) -> (ChildGuard, ManagerHandle, Vec<SegmentName>) {
    let mut holder = ChildGuard(command.spawn().expect("start the holder"));
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
    (holder, handle, names)
}

/// SIGKILLs the manager listening at `handle`, and waits for it to die.
fn kill_manager(handle: &ManagerHandle) {
    let manager = listener_pid(handle.path()).expect("the holder's manager listens");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(manager as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("SIGKILL the manager");
    assert!(
        wait_until(Duration::from_secs(10), || support::has_exited(manager)),
        "the manager outlived SIGKILL"
    );
}

/// Waits for the holder's segments and `tmp`'s manager directories to go.
fn assert_nothing_left(tmp: &Path, names: &[SegmentName]) {
    assert!(
        wait_until(CLEANUP_LIMIT, || !names.iter().any(segment_exists)),
        "left in /dev/shm: {:?}",
        names
            .iter()
            .filter(|name| segment_exists(name))
            .collect::<Vec<_>>()
    );
    assert!(
        wait_until(CLEANUP_LIMIT, || tree(tmp).is_empty()),
        "left in TMPDIR: {:?}",
        tree(tmp)
    );
}
