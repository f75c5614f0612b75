//! Names some process still maps: after a manager died and its clients
//! took over with managers of their own, a holder may be registered with
//! another manager than this one (or with none, while it dies).

use std::time::Duration;

use nix::fcntl::OFlag;
use nix::sys::mman::shm_open;
use nix::sys::stat::Mode;

use super::{Running, Stoppable, TestSegment, eventually};
use crate::services::shm_manager::ManagerConnection;
use crate::services::shm_manager::server::StopReason;

/// Opens the segment as a holder this manager knows nothing of.
fn hold(segment: &TestSegment) -> std::os::fd::OwnedFd {
    shm_open(segment.0.as_str(), OFlag::O_RDWR, Mode::empty()).expect("open")
}

#[test]
fn an_orphan_some_process_still_maps_is_kept_until_it_is_let_go() {
    let manager = Running::start(Duration::from_millis(300));
    let segment = TestSegment::create();
    let holder = hold(&segment);
    let keeper = ManagerConnection::open(&manager.handle).unwrap();
    let client = ManagerConnection::open(&manager.handle).unwrap();
    client.register(&segment.0).unwrap();
    drop(client);
    std::thread::sleep(Duration::from_millis(800));
    assert!(
        segment.exists(),
        "a segment still open elsewhere was unlinked"
    );
    drop(holder);
    assert!(
        eventually(Duration::from_secs(5), || !segment.exists()),
        "the segment was kept once nothing held it"
    );
    drop(keeper);
    let report = manager.finish();
    assert_eq!(report.stop, StopReason::Idle);
    assert_eq!(report.unlinked, vec![segment.0.clone()]);
    assert!(report.left_held.is_empty());
}

/// The creator of a segment took over with this manager and has exited;
/// the holder, registered with the manager that died, still maps it while
/// it dies and will never count it down. Exiting idle then would leave the
/// name to nobody.
#[test]
fn an_idle_manager_waits_for_the_holders_of_names_it_is_to_unlink() {
    let manager = Running::start(Duration::from_millis(300));
    let orphaned = TestSegment::create();
    let freed = TestSegment::create();
    let holders = (hold(&orphaned), hold(&freed));
    let creator = ManagerConnection::open(&manager.handle).unwrap();
    creator.register(&orphaned.0).unwrap();
    creator.register(&freed.0).unwrap();
    // Freed while a message naming it may be in flight: kept, registered
    // by nobody, until the manager exits.
    creator.unregister(&freed.0);
    drop(creator);
    // Many idle timeouts and grace periods.
    std::thread::sleep(Duration::from_millis(1000));
    assert!(
        !manager.thread.is_finished(),
        "the manager exited while names it is to unlink were held"
    );
    assert!(orphaned.exists() && freed.exists());
    drop(holders);
    let report = manager.finish();
    assert_eq!(report.stop, StopReason::Idle);
    let mut unlinked = report.unlinked.clone();
    unlinked.sort();
    let mut expected = vec![orphaned.0.clone(), freed.0.clone()];
    expected.sort();
    assert_eq!(unlinked, expected);
    assert!(report.left_held.is_empty());
    assert!(!orphaned.exists() && !freed.exists());
}

#[test]
fn a_manager_stopped_by_its_shutdown_fd_leaves_held_names_and_reports_them() {
    let manager = Stoppable::start();
    let held = TestSegment::create();
    let holder = hold(&held);
    let connection = ManagerConnection::open(&manager.handle).unwrap();
    connection.register(&held.0).unwrap();
    let report = manager.stop();
    assert!(held.exists(), "a held segment was unlinked at exit");
    assert_eq!(report.left_held, vec![held.0.clone()]);
    assert!(report.unlinked.is_empty());
    drop(holder);
}
